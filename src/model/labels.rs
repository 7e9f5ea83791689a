//! [`Labels`]: the label map of an endpoint, network set, profile, namespace or service
//! account, as a vector sorted by key.
//!
//! Resources carry a handful of labels and are held by the hundred thousand (the datastore
//! merger, the calculation graph's inputs), so the map's footprint matters more than its
//! asymptotics: a `BTreeMap<String, String>` takes a 544-byte node whatever the number of
//! entries, this one 48 bytes per label. First touches of memory are a large share of a
//! datastore sync's CPU time on a VM (the etcd benchmark prints them), so every byte kept
//! per resource costs time as well as space.
//!
//! Invariant: the entries are sorted by key and the keys are distinct, so iteration order,
//! equality and hashing are those of the `BTreeMap` this type replaces (which the rest of
//! the crate relied on: anything derived from labels is deterministic). Every constructor
//! and mutator keeps it; a test is named after it.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;

/// See the module docs.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels {
    entries: Vec<(String, String)>,
}

impl Labels {
    /// No labels.
    pub const fn new() -> Self {
        Labels {
            entries: Vec::new(),
        }
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        String: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&String>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    /// The value of `key`, to change in place.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut String>
    where
        String: Borrow<Q>,
    {
        match self.find(key) {
            Ok(i) => Some(&mut self.entries[i].1),
            Err(_) => None,
        }
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(key.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<String>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// Keeps the labels for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &String)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Sorts `entries` by key, keeping the last value of a key given twice (as inserting
    /// them one by one into a map would).
    fn from_unsorted(mut entries: Vec<(String, String)>) -> Self {
        if entries.windows(2).all(|w| w[0].0 < w[1].0) {
            return Labels { entries };
        }
        // Stable: among equal keys the later one stays later, and is the one kept.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(entries.len());
        for entry in entries {
            match out.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => out.push(entry),
            }
        }
        Labels { entries: out }
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Labels::from_unsorted(iter.into_iter().collect())
    }
}

impl Extend<(String, String)> for Labels {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, iter: I) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.extend(iter);
        *self = Labels::from_unsorted(entries);
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        // A map's iteration is sorted with distinct keys already.
        Labels {
            entries: map.into_iter().collect(),
        }
    }
}

impl<const N: usize> From<[(String, String); N]> for Labels {
    fn from(entries: [(String, String); N]) -> Self {
        Labels::from_unsorted(entries.into())
    }
}

impl IntoIterator for Labels {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;

    fn into_iter(self) -> Self::IntoIter {
        fn pair(e: &(String, String)) -> (&String, &String) {
            (&e.0, &e.1)
        }
        self.entries.iter().map(pair)
    }
}

impl<'de> serde::Deserialize<'de> for Labels {
    /// A mapping of strings; a key given twice keeps its last value, as a map does.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Labels, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(entry) = map.next_entry::<String, String>()? {
                    entries.push(entry);
                }
                Ok(Labels::from_unsorted(entries))
            }
        }
        d.deserialize_map(V)
    }
}

impl serde::Serialize for Labels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Review note "labels are sorted by key with distinct keys, so everything derived from
    /// them is the map's": after any sequence of inserts, removes and retains, and from any
    /// list of pairs, the labels iterate, look up and compare exactly as a `BTreeMap` given
    /// the same operations.
    #[test]
    fn labels_behave_as_a_sorted_map() {
        proptest!(|(ops in proptest::collection::vec((0u8..3, 0u8..6, 0u8..4), 0..40),
                    pairs in proptest::collection::vec((0u8..6, 0u8..4), 0..12))| {
            let s = |n: u8| format!("k{n}");
            let mut labels = Labels::new();
            let mut map = BTreeMap::new();
            for (op, k, v) in ops {
                match op {
                    0 => prop_assert_eq!(labels.insert(s(k), s(v)), map.insert(s(k), s(v))),
                    1 => prop_assert_eq!(labels.remove(&s(k)), map.remove(&s(k))),
                    _ => {
                        labels.retain(|key, _| key != &s(k));
                        map.retain(|key, _| key != &s(k));
                    }
                }
                prop_assert!(labels.iter().eq(map.iter()));
                prop_assert_eq!(labels.get(&s(k)), map.get(&s(k)));
                prop_assert_eq!(labels.len(), map.len());
            }
            let list: Vec<(String, String)> = pairs.iter().map(|&(k, v)| (s(k), s(v))).collect();
            let from_list: Labels = list.iter().cloned().collect();
            let map: BTreeMap<String, String> = list.iter().cloned().collect();
            prop_assert!(from_list.iter().eq(map.iter()));
            prop_assert_eq!(&from_list, &Labels::from(map.clone()));
            let mut extended = Labels::from([(s(9), s(9))]);
            extended.extend(list.iter().cloned());
            let mut map2 = map.clone();
            map2.insert(s(9), s(9));
            prop_assert!(extended.iter().eq(map2.iter()));
        });
    }

    #[test]
    fn a_key_given_twice_in_a_document_keeps_its_last_value_as_a_map_does() {
        let labels: Labels = serde_json::from_str(r#"{"b":"1","a":"2","b":"3"}"#).unwrap();
        let map: BTreeMap<String, String> =
            serde_json::from_str(r#"{"b":"1","a":"2","b":"3"}"#).unwrap();
        assert!(labels.iter().eq(map.iter()));
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"a":"2","b":"3"}"#
        );
    }
}
