//! The merged view of a datastore that holds one resource per source key (etcd).
//!
//! [`super::merge::Merger`] serves files, which hold several documents and may claim the
//! same identity twice; it keeps every file's documents to settle those claims. In etcd
//! the key is the resource's identity (a value that names another is rejected before it
//! gets here), so no identity is ever claimed twice and nothing but the model keys each
//! source key produced needs keeping. What remains shared with the file merger is the
//! per-model-key rule, with the same messages: a [`Key`] produced by several source keys
//! takes the value of the source key that sorts first (byte-wise, as the file merger
//! orders paths), whatever the order of the changes; [`KeyedMerger::take_updates`] yields
//! the net per-key differences since the previous call.

use std::sync::Arc;

use smallvec::SmallVec;

use super::merge::{contribute, drain_updates, withdraw, KeyEntry};
use crate::hash::FastMap as HashMap;
use crate::model::{Key, Update, Value};

/// The model keys one source key's value produced (usually one).
pub(crate) type Produced = SmallVec<[Key; 1]>;

/// See the module docs. The caller keeps, per source key, what [`KeyedMerger::replace`]
/// returned, and hands it back on the next change of that key.
#[derive(Default)]
pub(crate) struct KeyedMerger {
    keys: HashMap<Key, KeyEntry<Arc<str>>>,
    /// Keys whose effective value may differ from what was handed out; each at most once.
    dirty: Vec<Key>,
}

impl KeyedMerger {
    /// Makes room for `n` more keys.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.keys.reserve(n);
    }

    /// Number of keys that may have changed since the last [`KeyedMerger::take_updates`].
    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// Replaces what source key `source` produces: `old` is what the previous call for it
    /// returned (empty for a new key), `new` its decoded entries (`None`: gone or invalid,
    /// so it produces nothing). Returns what it produces now, and one message per model key
    /// it shares with another source key (which of them is in force).
    pub(crate) fn replace(
        &mut self,
        source: &Arc<str>,
        old: &[Key],
        new: Option<Vec<(Key, Value)>>,
    ) -> (Produced, Vec<String>) {
        for key in old {
            withdraw(&mut self.keys, &mut self.dirty, key, source);
        }
        let mut produced = Produced::new();
        let mut messages = Vec::new();
        for (key, value) in new.into_iter().flatten() {
            if let Some(other) = contribute(&mut self.keys, &mut self.dirty, &key, source, value) {
                let (first, second) = if other < *source {
                    (other, source.clone())
                } else {
                    (source.clone(), other)
                };
                messages.push(format!(
                    "{second}:1: key {key} is also produced by {first}:1; the copy in {first} is in force"
                ));
            }
            produced.push(key);
        }
        (produced, messages)
    }

    /// The net per-key changes since the previous call, sorted by key.
    pub(crate) fn take_updates(&mut self) -> Vec<Update> {
        drain_updates(&mut self.keys, &mut self.dirty)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;

    use super::*;
    use crate::datastore::merge::{Doc, Merger, RelPath};
    use crate::model::{Tier, UpdateType};
    use crate::resources::{Kind, ResourceId};

    fn tier(order: f64) -> Value {
        Value::Tier(Arc::new(Tier {
            order: Some(order),
            ..Tier::default()
        }))
    }

    fn apply(state: &mut BTreeMap<Key, Value>, updates: Vec<Update>) {
        for u in updates {
            match u.value {
                Some(v) => {
                    assert_ne!(u.update_type, UpdateType::Deleted);
                    state.insert(u.key, v);
                }
                None => {
                    assert_eq!(u.update_type, UpdateType::Deleted);
                    state.remove(&u.key);
                }
            }
        }
    }

    /// One change: source key number, and its new content (model key number and value),
    /// or `None` for a deletion.
    type Op = (u8, Option<(u8, u8)>);

    fn entries(content: Option<(u8, u8)>) -> Option<Vec<(Key, Value)>> {
        content.map(|(k, v)| vec![(Key::Tier(format!("t{k}")), tier(f64::from(v)))])
    }

    /// Review note "a key produced by several sources takes the first source's value,
    /// whatever the order of the changes": after any sequence of changes, the state handed
    /// out equals the file merger's for the same final sources (one file per source key,
    /// one document each), and so do the messages of a change.
    #[test]
    fn the_keyed_merger_agrees_with_the_file_merger() {
        proptest!(|(ops in proptest::collection::vec(
            (0u8..4, proptest::option::of((0u8..3, 0u8..4))), 1..40))| {
            let mut keyed = KeyedMerger::default();
            let mut produced: BTreeMap<u8, Produced> = BTreeMap::new();
            let mut files = Merger::new(Path::new(""));
            let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
            for (source, content) in ops as Vec<Op> {
                let name: Arc<str> = Arc::from(format!("/calico/s{source}"));
                let old = produced.remove(&source).unwrap_or_default();
                let (now, mut msgs) = keyed.replace(&name, &old, entries(content));
                if !now.is_empty() {
                    produced.insert(source, now);
                }
                let doc = content.map(|_| {
                    vec![Doc {
                        id: ResourceId {
                            kind: Kind::Tier,
                            namespace: None,
                            name: format!("s{source}"),
                        },
                        line: 1,
                        result: Ok(entries(content).unwrap_or_default()),
                    }]
                });
                let mut want = files.replace_file(&RelPath::new(Path::new(&*name)), doc);
                msgs.sort();
                want.sort();
                prop_assert_eq!(msgs, want);
                apply(&mut a, keyed.take_updates());
                apply(&mut b, files.take_updates());
                prop_assert_eq!(&a, &b);
            }
        });
    }

    #[test]
    fn an_unchanged_value_hands_out_nothing() {
        let mut m = KeyedMerger::default();
        let s: Arc<str> = Arc::from("/calico/a");
        let (p, _) = m.replace(&s, &[], entries(Some((1, 1))));
        assert_eq!(m.take_updates().len(), 1);
        let (p, _) = m.replace(&s, &p, entries(Some((1, 1))));
        assert!(m.take_updates().is_empty());
        let (p, _) = m.replace(&s, &p, None);
        assert!(p.is_empty());
        let u = m.take_updates();
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].update_type, UpdateType::Deleted);
        assert!(m.keys.is_empty(), "a key without owners is forgotten");
    }
}
