//! Object ids by key, for the all-endpoint index: a hash table of small
//! `(hash, id)` entries with the keys kept apart, by id.
//!
//! The IP-set index holds every endpoint in the cluster.  A map from key
//! to id held each key in its buckets, so every growth of the table
//! re-hashed every key, reading each key's text from wherever it was
//! allocated: on the 250,000-endpoint benchmark, inserting into that map
//! was the largest single cost of loading the remote endpoints.  Here a
//! bucket is 8 bytes (a 32-bit digest of the key's hash and the id), the
//! table grows from its own entries, and a lookup reads a held key only
//! when its digest matches.
//!
//! Invariants:
//! * the table holds exactly one entry per held key, whose digest is that
//!   of the key's hash and whose id indexes `keys` at that key;
//! * `keys[id]` is `Some` exactly for the ids in the table;
//! * a lookup compares keys only under equal digests, and always compares
//!   them before answering (digests may collide).

use std::hash::{BuildHasher, Hash};

use hashbrown::{Equivalent, HashTable};

use super::slots::Slots;

/// See the module docs.
pub struct KeyIndex<K> {
    table: HashTable<(u32, u32)>,
    /// By id, in fixed chunks: growth never copies the keys held.
    keys: Slots<K>,
    hasher: foldhash::fast::RandomState,
}

impl<K> Default for KeyIndex<K> {
    fn default() -> Self {
        KeyIndex {
            table: HashTable::new(),
            keys: Slots::default(),
            hasher: Default::default(),
        }
    }
}

/// The table's hash of a digest: spread over all 64 bits, since the table
/// takes its bucket from the low bits and its tag from the high ones.
fn spread(digest: u32) -> u64 {
    u64::from(digest).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl<K: Hash + Eq> KeyIndex<K> {
    fn digest<Q: Hash + ?Sized>(&self, key: &Q) -> u32 {
        let h = self.hasher.hash_one(key);
        (h ^ (h >> 32)) as u32
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The id of `key` (any form that hashes as `K` and compares with it).
    pub fn get<Q: Hash + Equivalent<K> + ?Sized>(&self, key: &Q) -> Option<u32> {
        let d = self.digest(key);
        let keys = &self.keys;
        self.table
            .find(spread(d), |&(ed, id)| {
                ed == d && held(keys, id).is_some_and(|k| key.equivalent(k))
            })
            .map(|&(_, id)| id)
    }

    /// The id of `key`, holding it first if it is not held: `make` then
    /// gives the owned key and its id (an id not held).  Returns the id
    /// and whether the key was new.  One hash and one probe either way.
    pub fn get_or_insert_with<Q: Hash + Equivalent<K> + ?Sized>(
        &mut self,
        key: &Q,
        make: impl FnOnce() -> (K, u32),
    ) -> (u32, bool) {
        let d = self.digest(key);
        let keys = &self.keys;
        let entry = self.table.entry(
            spread(d),
            |&(ed, id)| ed == d && held(keys, id).is_some_and(|k| key.equivalent(k)),
            |&(ed, _)| spread(ed),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => (e.get().1, false),
            hashbrown::hash_table::Entry::Vacant(e) => {
                let (owned, id) = make();
                debug_assert!(key.equivalent(&owned), "made key differs");
                e.insert((d, id));
                debug_assert!(held(&self.keys, id).is_none(), "id inserted twice");
                *self.keys.grow_to(id as usize) = Some(owned);
                (id, true)
            }
        }
    }

    /// Forgets `key`, returning the stored key and its id.
    pub fn remove<Q: Hash + Equivalent<K> + ?Sized>(&mut self, key: &Q) -> Option<(K, u32)> {
        let d = self.digest(key);
        let keys = &self.keys;
        let entry = self
            .table
            .find_entry(spread(d), |&(ed, id)| {
                ed == d && held(keys, id).is_some_and(|k| key.equivalent(k))
            })
            .ok()?;
        let ((_, id), _) = entry.remove();
        let k = self.keys.get_mut(id as usize)?.take()?;
        Some((k, id))
    }

    /// Every held key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.keys.iter().flatten()
    }
}

fn held<K>(keys: &Slots<K>, id: u32) -> Option<&K> {
    keys.get(id as usize).and_then(|k| k.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Borrowed lookups find owned keys; removal frees the key and its id
    /// slot; a removed key is not found.
    #[test]
    fn get_insert_remove() {
        let mut idx: KeyIndex<String> = KeyIndex::default();
        hold(&mut idx, "a", 0);
        hold(&mut idx, "b", 5);
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.get("a"), Some(0));
        assert_eq!(idx.get("b"), Some(5));
        assert_eq!(idx.get("c"), None);
        assert_eq!(idx.remove("a"), Some(("a".to_string(), 0)));
        assert_eq!(idx.get("a"), None);
        assert_eq!(idx.remove("a"), None);
        hold(&mut idx, "c", 0);
        assert_eq!(idx.get("c"), Some(0));
        let mut keys: Vec<&String> = idx.keys().collect();
        keys.sort();
        assert_eq!(keys, ["b", "c"]);
    }

    /// Holds `k`, which must be new, under `id`.
    fn hold(idx: &mut KeyIndex<String>, k: &str, id: u32) {
        assert_eq!(
            idx.get_or_insert_with(k, || (k.to_string(), id)),
            (id, true)
        );
    }

    /// `get_or_insert_with` makes a key only when it is absent.
    #[test]
    fn get_or_insert_with_makes_only_absent_keys() {
        let mut idx: KeyIndex<String> = KeyIndex::default();
        let made = std::cell::Cell::new(0);
        let make = |k: &str, id: u32| {
            made.set(made.get() + 1);
            (k.to_string(), id)
        };
        assert_eq!(idx.get_or_insert_with("a", || make("a", 3)), (3, true));
        assert_eq!(idx.get_or_insert_with("a", || make("a", 9)), (3, false));
        assert_eq!(idx.get_or_insert_with("b", || make("b", 0)), (0, true));
        assert_eq!(made.get(), 2);
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.get("a"), Some(3));
        assert_eq!(idx.remove("b"), Some(("b".to_string(), 0)));
        assert_eq!(idx.get_or_insert_with("b", || make("b", 0)), (0, true));
    }

    // Any sequence of inserts and removals answers as a map does.
    proptest! {
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u16..400, any::<bool>()), 1..600)) {
            let mut idx: KeyIndex<String> = KeyIndex::default();
            let mut model: HashMap<String, u32> = HashMap::new();
            let mut next = 0u32;
            for (k, add) in ops {
                let key = format!("key-{k}");
                if add {
                    let (id, new) = idx.get_or_insert_with(key.as_str(), || (key.clone(), next));
                    prop_assert_eq!(new, !model.contains_key(&key));
                    if new {
                        model.insert(key, next);
                        next += 1;
                    }
                    prop_assert_eq!(model.get(&format!("key-{k}")), Some(&id));
                } else {
                    prop_assert_eq!(idx.remove(key.as_str()).map(|(_, id)| id), model.remove(&key));
                }
            }
            prop_assert_eq!(idx.len(), model.len());
            for (k, id) in &model {
                prop_assert_eq!(idx.get(k.as_str()), Some(*id));
            }
        }
    }
}
