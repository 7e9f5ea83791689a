//! Where a selector reads labels from: the [`LabelSource`] trait and its
//! implementations for plain maps and for endpoints with inherited
//! (profile) labels.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

/// A read-only view of a set of labels.
///
/// Implementations must not allocate in `get_label`: selectors call it in
/// the label index's inner loop.
pub trait LabelSource {
    /// The value of label `key`, or `None` if the label is absent.
    fn get_label(&self, key: &str) -> Option<&str>;
}

impl LabelSource for BTreeMap<String, String> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelSource for crate::model::Labels {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: BuildHasher> LabelSource for HashMap<String, String, S> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<T: LabelSource + ?Sized> LabelSource for &T {
    fn get_label(&self, key: &str) -> Option<&str> {
        (**self).get_label(key)
    }
}

/// An item's own labels combined with the labels it inherits from its
/// parents (e.g. an endpoint and its profiles).
///
/// Lookup order, as upstream's label inheritance: the item's own value wins;
/// otherwise the first parent in `parents` that has the label supplies it.
/// The combined view is computed per lookup; nothing is copied.
#[derive(Clone, Copy, Debug)]
pub struct WithParents<'a> {
    /// The item's own labels; these override anything inherited.
    pub own: &'a BTreeMap<String, String>,
    /// Parents' labels in priority order (earlier parents win).
    pub parents: &'a [&'a BTreeMap<String, String>],
}

impl LabelSource for WithParents<'_> {
    fn get_label(&self, key: &str) -> Option<&str> {
        if let Some(v) = self.own.get(key) {
            return Some(v);
        }
        self.parents
            .iter()
            .find_map(|p| p.get(key))
            .map(String::as_str)
    }
}
