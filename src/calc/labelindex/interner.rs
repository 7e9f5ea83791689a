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
#[derive(Default, Debug)]
pub struct Interner {
    ids: HashMap<Arc<str>, u32>,
    strs: Vec<Option<(Arc<str>, u32)>>,
    free: Vec<u32>,
}

impl Interner {
    /// The id of `s`, adding a reference (creating the entry if needed).
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(id) = self.ids.get(s) {
            if let Some(Some((_, count))) = self.strs.get_mut(*id as usize) {
                *count += 1;
            }
            return *id;
        }
        let arc: Arc<str> = Arc::from(s);
        let id = match self.free.pop() {
            Some(id) => {
                self.strs[id as usize] = Some((arc.clone(), 1));
                id
            }
            None => {
                self.strs.push(Some((arc.clone(), 1)));
                (self.strs.len() - 1) as u32
            }
        };
        self.ids.insert(arc, id);
        id
    }

    /// Drops one reference to `id`.
    pub fn release(&mut self, id: u32) {
        let remove = match self.strs.get_mut(id as usize) {
            Some(Some((_, count))) => {
                *count -= 1;
                *count == 0
            }
            _ => false,
        };
        if remove {
            if let Some((s, _)) = self.strs[id as usize].take() {
                self.ids.remove(&s);
                self.free.push(id);
            }
        }
    }

    /// The id of `s`, if interned (no reference added).
    pub fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// The string of `id`.
    pub fn resolve(&self, id: u32) -> &str {
        match self.strs.get(id as usize) {
            Some(Some((s, _))) => s,
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
}
