//! A reference-counted string interner for label keys and values.
//!
//! The IP-set index holds every endpoint in the cluster; storing each
//! endpoint's labels as interned `(key, value)` id pairs instead of owned
//! strings is what keeps it within its memory budget (most label values are
//! shared by many endpoints).
//!
//! Invariant: every `intern` is matched by exactly one `release` of the
//! returned id; an id is freed (and may be reused) when its count reaches
//! zero, so churn with ever-new values does not grow the table.

use std::sync::Arc;

use crate::hash::FastMap as HashMap;
use crate::model::Labels;

/// Interned labels: `(key id, value id)` pairs sorted by key id.
pub type IdLabels = Box<[(u32, u32)]>;

/// See the module docs.
///
/// The reference count lives beside the id in the map, so interning a
/// string that is already known (the common case: label keys, and values
/// shared by many endpoints) touches one table entry.
#[derive(Default, Debug)]
pub struct Interner {
    /// String -> (id, references).
    ids: HashMap<Arc<str>, (u32, u32)>,
    /// Id -> string; `None` for a free id.
    strs: Vec<Option<Arc<str>>>,
    free: Vec<u32>,
}

impl Interner {
    /// The id of `s`, adding a reference (creating the entry if needed).
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some((id, count)) = self.ids.get_mut(s) {
            *count += 1;
            return *id;
        }
        let arc: Arc<str> = Arc::from(s);
        let id = match self.free.pop() {
            Some(id) => {
                self.strs[id as usize] = Some(arc.clone());
                id
            }
            None => {
                self.strs.push(Some(arc.clone()));
                (self.strs.len() - 1) as u32
            }
        };
        self.ids.insert(arc, (id, 1));
        id
    }

    /// Drops one reference to `id`.
    pub fn release(&mut self, id: u32) {
        let Some(Some(s)) = self.strs.get(id as usize) else {
            return;
        };
        let remove = match self.ids.get_mut(&**s) {
            Some((_, count)) => {
                *count -= 1;
                *count == 0
            }
            None => false,
        };
        if remove {
            if let Some(s) = self.strs[id as usize].take() {
                self.ids.remove(&*s);
                self.free.push(id);
            }
        }
    }

    /// The id of `s`, if interned (no reference added).
    pub fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).map(|(id, _)| *id)
    }

    /// The string of `id`.
    pub fn resolve(&self, id: u32) -> &str {
        match self.strs.get(id as usize) {
            Some(Some(s)) => s,
            _ => "",
        }
    }

    /// Interns a label map (one reference per key and value).
    pub fn intern_labels(&mut self, labels: &Labels) -> IdLabels {
        let mut v: Vec<(u32, u32)> = labels
            .iter()
            .map(|(k, val)| (self.intern(k), self.intern(val)))
            .collect();
        v.sort_unstable();
        v.into_boxed_slice()
    }

    /// Releases what [`Interner::intern_labels`] took.
    pub fn release_labels(&mut self, labels: &[(u32, u32)]) {
        for (k, v) in labels {
            self.release(*k);
            self.release(*v);
        }
    }

    /// Number of distinct strings held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Looks up a key id in sorted id labels.
pub fn lookup(labels: &[(u32, u32)], key: u32) -> Option<u32> {
    labels
        .binary_search_by_key(&key, |(k, _)| *k)
        .ok()
        .map(|i| labels[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refcounts_free_and_reuse_ids() {
        let mut i = Interner::default();
        let a = i.intern("a");
        assert_eq!(i.intern("a"), a);
        i.release(a);
        assert_eq!(i.get("a"), Some(a));
        i.release(a);
        assert_eq!(i.get("a"), None);
        assert!(i.is_empty());
        let b = i.intern("b");
        assert_eq!(b, a, "freed id is reused");
        assert_eq!(i.resolve(b), "b");
    }

    #[test]
    fn labels_round_trip_sorted() {
        let mut i = Interner::default();
        let mut l = Labels::new();
        l.insert("z".into(), "1".into());
        l.insert("a".into(), "1".into());
        let ids = i.intern_labels(&l);
        assert!(ids.windows(2).all(|w| w[0].0 < w[1].0));
        let z = i.get("z").expect("interned");
        assert_eq!(lookup(&ids, z).map(|v| i.resolve(v)), Some("1"));
        i.release_labels(&ids);
        assert!(i.is_empty());
    }

    proptest::proptest! {
        /// Against a model of counts: an id stays the same while the string
        /// is referenced, resolves to its string, and the entry goes (and
        /// only goes) when the last reference is released.
        #[test]
        fn matches_a_count_model(ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0u8..6), 1..200)) {
            let mut i = Interner::default();
            let mut model: std::collections::HashMap<String, (u32, u32)> = Default::default();
            for (add, n) in ops {
                let s = format!("s{n}");
                if add {
                    let id = i.intern(&s);
                    let e = model.entry(s.clone()).or_insert((id, 0));
                    proptest::prop_assert_eq!(e.0, id);
                    e.1 += 1;
                } else if let Some((id, count)) = model.get(&s).copied() {
                    i.release(id);
                    if count == 1 {
                        model.remove(&s);
                    } else {
                        model.insert(s.clone(), (id, count - 1));
                    }
                }
                proptest::prop_assert_eq!(i.len(), model.len());
                for (text, (id, _)) in &model {
                    proptest::prop_assert_eq!(i.get(text), Some(*id));
                    proptest::prop_assert_eq!(i.resolve(*id), text.as_str());
                }
            }
        }
    }
}
