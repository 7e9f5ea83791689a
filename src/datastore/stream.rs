//! One complete datastore state read file by file, each file's resources handed on as soon
//! as the file is decoded and then forgotten (`felix calc` and `felix explain` of a single
//! state).
//!
//! The duplicate rule of [`crate::datastore`] picks, for an identity or a key, the claimant
//! whose origin (relative path byte-wise, then document index) sorts first.  Files are read
//! in that order, so the first claimant seen is the one in force and a later claimant never
//! displaces it: what has been handed on is final, and only the identities and keys seen so
//! far (with where they were claimed) are kept, never the resources' values.
//!
//! Invariant: **a streamed state is the loaded state**: the same resources, and the same
//! problems in the same order, as [`super::snapshot::load_state`] reports for the path.

use std::hash::{BuildHasher, Hash};
use std::path::{Path, PathBuf};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::merge::{Doc, RelPath};
use super::snapshot::{read_file, state_files, ErrorClass, LoadError, StateUpdates};
use crate::hash::FastMap;
use crate::model::{Key, Update, UpdateType};
use crate::resources::ResourceId;

/// Where a document is: its file (index into the files in reading order) and its position
/// there.  The derived order is the duplicate rule's precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct At {
    file: u32,
    index: u32,
}

/// The claimant in force of an identity or a key: where it is, and its line (for messages).
#[derive(Clone, Copy, Debug)]
struct Claim {
    at: At,
    line: u32,
    /// For a key claimed by the file being read: where its update is in that file's
    /// updates (so a document that sorts first can take it over).  Meaningless otherwise.
    update: u32,
}

/// Claims by identity or by key, each entry stored with its hash.
///
/// Invariant: **growing the table never hashes a stored identity or key again** (the
/// stored hash places it); with `std`'s map, rehashing the strings of a quarter of a
/// million keys as the maps doubled was a tenth of `felix calc`'s time.  The identity or
/// key is boxed: a table is at most 7/8 full, and its empty slots then cost 32 bytes
/// each rather than a whole key's.
struct ClaimTable<K> {
    hasher: foldhash::fast::RandomState,
    table: HashTable<(u64, Box<K>, Claim)>,
}

impl<K: Hash + Eq> ClaimTable<K> {
    fn new() -> Self {
        ClaimTable {
            hasher: foldhash::fast::RandomState::default(),
            table: HashTable::new(),
        }
    }

    fn reserve(&mut self, additional: usize) {
        self.table.reserve(additional, |e| e.0);
    }

    fn get(&self, k: &K) -> Option<Claim> {
        let hash = self.hasher.hash_one(k);
        self.table.find(hash, |e| *e.1 == *k).map(|e| e.2)
    }

    /// `k`'s hash and entry: occupied by the claim in force, or vacant.
    fn entry(&mut self, k: &K) -> (u64, Entry<'_, (u64, Box<K>, Claim)>) {
        let hash = self.hasher.hash_one(k);
        (hash, self.table.entry(hash, |e| *e.1 == *k, |e| e.0))
    }
}

/// The identities and keys claimed so far.
struct Claims {
    root: PathBuf,
    files: Vec<RelPath>,
    ids: ClaimTable<ResourceId>,
    keys: ClaimTable<Key>,
}

/// Reads the state at `path` (a file, or a datastore directory) file by file, calling `sink`
/// with each file's resources in force as updates (sorted by key) as soon as the file is
/// decoded.  Only a missing or unreadable `path` is an `Err`; every other problem is in the
/// result's `errors`, whose `updates` are empty (they all went to `sink`).
pub fn stream_state(
    path: &Path,
    mut sink: impl FnMut(Vec<Update>),
) -> Result<StateUpdates, LoadError> {
    let mut state = StateUpdates::default();
    let (root, files) = state_files(path, &mut state.errors)?;
    let mut claims = Claims {
        root,
        files: Vec::with_capacity(files.len()),
        ids: ClaimTable::new(),
        keys: ClaimTable::new(),
    };
    // The duplicate rule's order, whatever order the listing came in.
    let mut files: Vec<RelPath> = files.iter().map(|rel| RelPath::new(rel)).collect();
    files.sort();
    for rel in files {
        state.files += 1;
        let decoded = read_file(&claims.root, &rel);
        let file = u32::try_from(claims.files.len()).unwrap_or(u32::MAX);
        claims.files.push(rel);
        match decoded {
            Ok(decoded) => {
                state.resources += decoded.docs.len();
                state.note(ErrorClass::Resource, decoded.invalid);
                let (updates, duplicates) = claims.add_file(file, decoded.docs);
                state.note(ErrorClass::Duplicate, duplicates);
                if !updates.is_empty() {
                    sink(updates);
                }
            }
            Err(message) => state.note(ErrorClass::File, [message]),
        }
    }
    // Freeing half a million claims is a twentieth of `felix calc`'s time, and nothing
    // waits for it: the second core does it while the output is written (if no thread can
    // be started, the failed spawn drops them here).
    let _ = std::thread::Builder::new()
        .name("claims-drop".into())
        .spawn(move || drop(claims));
    Ok(state)
}

fn line_of(doc: &Doc) -> u32 {
    u32::try_from(doc.line).unwrap_or(u32::MAX)
}

impl Claims {
    /// `file:line` of a claim.
    fn locate(&self, c: Claim) -> String {
        format!("{}:{}", self.name(c.at.file), c.line)
    }

    fn name(&self, file: u32) -> String {
        self.files
            .get(file as usize)
            .map(|p| self.root.join(p.as_path()).display().to_string())
            .unwrap_or_default()
    }

    /// Claims what the documents of `file` (the last file read) own; returns their resources
    /// in force and one message per duplicate, worded and ordered as the merger reports them
    /// for a fresh load: keys produced twice (owners in identity order), then duplicate
    /// identities (in the order of their first document in this file).
    ///
    /// Cost: one hash of each identity and of each key (this file's key claims go straight
    /// into `keys`, told from earlier files' by their file; growing a table hashes nothing
    /// again), no map of duplicate identities unless there is one, and the updates come in
    /// owner order, often nearly sorted by key already, before they are sorted.
    fn add_file(&mut self, file: u32, mut docs: Vec<Doc>) -> (Vec<Update>, Vec<String>) {
        let at = |index: usize| At {
            file,
            index: u32::try_from(index).unwrap_or(u32::MAX),
        };
        // Identities, in document order: the first claimant owns.
        let mut owners: Vec<usize> = Vec::with_capacity(docs.len());
        let mut duplicates: Vec<usize> = Vec::new();
        self.ids.reserve(docs.len());
        for (i, doc) in docs.iter().enumerate() {
            match self.ids.entry(&doc.id) {
                (_, Entry::Occupied(_)) => duplicates.push(i),
                (hash, Entry::Vacant(slot)) => {
                    let claim = Claim {
                        at: at(i),
                        line: line_of(doc),
                        update: 0,
                    };
                    slot.insert((hash, Box::new(doc.id.clone()), claim));
                    owners.push(i);
                }
            }
        }

        // The owners' keys, owners in identity order (their ids are distinct); within this
        // file a key goes to the document that sorts first, before any earlier file it is
        // always the earlier file's.
        owners.sort_unstable_by(|a, b| docs[*a].id.cmp(&docs[*b].id));
        let mut messages = Vec::new();
        let mut updates: Vec<Update> = Vec::with_capacity(owners.len());
        self.keys.reserve(owners.len());
        for o in owners {
            let Ok(kvs) = std::mem::replace(&mut docs[o].result, Ok(Vec::new())) else {
                continue;
            };
            for (key, value) in kvs {
                let claim = Claim {
                    at: at(o),
                    line: line_of(&docs[o]),
                    update: u32::try_from(updates.len()).unwrap_or(u32::MAX),
                };
                let (first, second) = match self.keys.entry(&key) {
                    (hash, Entry::Vacant(slot)) => {
                        slot.insert((hash, Box::new(key.clone()), claim));
                        updates.push(Update {
                            key,
                            value: Some(value),
                            update_type: UpdateType::New,
                        });
                        continue;
                    }
                    (_, Entry::Occupied(mut held)) => {
                        let earlier = held.get().2;
                        if earlier.at.file == file && claim.at < earlier.at {
                            // This file's document that sorts first takes the key over.
                            if let Some(u) = updates.get_mut(earlier.update as usize) {
                                u.value = Some(value);
                            }
                            held.get_mut().2 = Claim {
                                update: earlier.update,
                                ..claim
                            };
                            (claim, earlier)
                        } else {
                            (earlier, claim)
                        }
                    }
                };
                messages.push(self.shared_key(&key, first, second));
            }
        }

        // Duplicate identities, grouped under the first document of each in this file.
        if !duplicates.is_empty() {
            let mut first_of: FastMap<&ResourceId, usize> = FastMap::default();
            for (i, doc) in docs.iter().enumerate() {
                first_of.entry(&doc.id).or_insert(i);
            }
            let mut groups: Vec<(usize, usize)> = duplicates
                .iter()
                .map(|&d| (first_of.get(&docs[d].id).copied().unwrap_or(d), d))
                .collect();
            groups.sort_unstable();
            for (_, d) in groups {
                let doc = &docs[d];
                let Some(owner) = self.ids.get(&doc.id) else {
                    continue;
                };
                let other = Claim {
                    at: at(d),
                    line: line_of(doc),
                    update: 0,
                };
                messages.push(format!(
                    "{}: duplicate {} ignored; the copy at {} is in force",
                    self.locate(other),
                    doc.id,
                    self.locate(owner)
                ));
            }
        }

        // Stable: the updates come in owner order, often nearly sorted by key already.
        updates.sort_by(|a, b| a.key.cmp(&b.key));
        (updates, messages)
    }

    fn shared_key(&self, key: &Key, first: Claim, second: Claim) -> String {
        format!(
            "{}: key {key} is also produced by {}; the copy in {} is in force",
            self.locate(second),
            self.locate(first),
            self.name(first.at.file)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::snapshot::load_state;
    use crate::model::Value;
    use std::collections::BTreeMap;
    use std::fs;

    fn tier(name: &str, order: u32) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n  order: {order}\n"
        )
    }

    fn wep(name: &str, endpoint: &str, ip: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata:\n  name: {name}\n  namespace: ns\nspec:\n  node: n1\n  orchestrator: k8s\n  pod: p\n  endpoint: {endpoint}\n  interfaceName: cali1\n  ipNetworks:\n  - {ip}/32\n"
        )
    }

    fn streamed(path: &Path) -> (BTreeMap<Key, Value>, StateUpdates, usize) {
        let mut values = BTreeMap::new();
        let mut batches = 0;
        let state = stream_state(path, |updates| {
            batches += 1;
            for u in updates {
                let v = u.value.expect("streamed updates are sets");
                assert!(values.insert(u.key, v).is_none(), "a key handed on twice");
            }
        })
        .unwrap();
        (values, state, batches)
    }

    #[test]
    fn a_streamed_state_is_the_loaded_state() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("sub")).unwrap();
        let files = [
            // Two identities in one file produce the same key (the endpoint of the same
            // pod): the document that sorts first wins, whatever the identities' order.
            (
                "a.yaml",
                format!(
                    "{}---\n{}---\n{}---\n{}",
                    wep("zz", "eth0", "10.0.0.1"),
                    tier("dup", 1),
                    wep("aa", "eth0", "10.0.0.2"),
                    tier("dup", 9)
                ),
            ),
            ("b.yaml", format!("{}---\n{}", tier("x", 1), tier("y", 1))),
            // Duplicates of earlier files, interleaved, and a key an earlier file produces.
            (
                "sub/c.yaml",
                format!(
                    "{}---\n{}---\n{}---\n{}---\n{}",
                    tier("y", 2),
                    tier("x", 2),
                    tier("y", 3),
                    wep("mm", "eth0", "10.0.0.3"),
                    tier("z", 1)
                ),
            ),
            ("broken.yaml", "kind: [\n".to_string()),
            (
                "sets.yaml",
                "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: bad\nspec:\n  nets:\n  - 10.0.0.0/33\n".to_string(),
            ),
        ];
        for (rel, text) in &files {
            fs::write(root.join(rel), text).unwrap();
        }
        let complete = load_state(root).unwrap();
        let (values, state, batches) = streamed(root);
        assert_eq!(values, complete.values);
        assert_eq!(state.errors, complete.errors);
        assert_eq!(
            (state.files, state.resources),
            (complete.files, complete.resources)
        );
        assert_eq!(batches, 3, "one batch per file with resources in force");
        for class in [
            ErrorClass::File,
            ErrorClass::Resource,
            ErrorClass::Duplicate,
        ] {
            assert!(
                state.errors.iter().any(|e| e.class == class),
                "the fixture exercises {class:?}: {:?}",
                state.errors
            );
        }
        assert!(state
            .errors
            .iter()
            .any(|e| e.message.contains("is also produced by")));

        // A single file is a state too.
        let single = root.join("a.yaml");
        let (values, state, _) = streamed(&single);
        let complete = load_state(&single).unwrap();
        assert_eq!(values, complete.values);
        assert_eq!(state.errors, complete.errors);
    }

    /// A key that counts how often it is hashed.
    #[derive(PartialEq, Eq)]
    struct Counted(u32);

    thread_local! {
        static HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    impl std::hash::Hash for Counted {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            HASHED.with(|h| h.set(h.get() + 1));
            self.0.hash(state);
        }
    }

    #[test]
    fn growing_the_table_never_hashes_a_stored_identity_or_key_again() {
        let mut table = ClaimTable::new();
        let n = 10_000u32;
        HASHED.with(|h| h.set(0));
        for i in 0..n {
            let claim = Claim {
                at: At { file: 0, index: i },
                line: i,
                update: i,
            };
            match table.entry(&Counted(i)) {
                (hash, Entry::Vacant(slot)) => {
                    slot.insert((hash, Box::new(Counted(i)), claim));
                }
                (_, Entry::Occupied(_)) => panic!("{i} claimed twice"),
            }
        }
        assert!(table.table.capacity() >= n as usize, "the table grew");
        assert_eq!(HASHED.with(|h| h.get()), n as usize, "one hash per entry");
        // Every claim is still found where its stored hash put it.
        for i in (0..n).step_by(997) {
            assert_eq!(table.get(&Counted(i)).map(|c| c.line), Some(i));
        }
        assert!(table.get(&Counted(n)).is_none());
    }

    #[test]
    fn a_missing_state_is_a_load_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = stream_state(&dir.path().join("nope"), |_| {}).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
