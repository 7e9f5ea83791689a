//! One complete datastore state, loaded in one go (for `felix calc` and the
//! load benchmark).
//!
//! [`load_state`] accepts a single YAML/JSON file (one or more documents)
//! or a directory in the file-datastore layout, and applies exactly the
//! rules of the live [`FileSyncer`](super::file::FileSyncer): same file
//! selection, same duplicate rule, invalid resources absent.  Problems are
//! collected, not logged, so the caller decides what is fatal.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::merge::{Merger, RelPath};
use super::{source, walk};
use crate::model::{Key, Update, Value};

/// What kind of problem a [`StateError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// A whole file could not be read or parsed; none of its resources were
    /// loaded.
    File,
    /// One resource failed validation and is treated as absent.
    Resource,
    /// The same identity (or key) appears more than once; one copy was
    /// ignored.
    Duplicate,
}

/// One problem found while loading a state.  `message` is one line naming
/// file, line and reason (or field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError {
    /// What kind of problem it is.
    pub class: ErrorClass,
    /// One line naming the file, line and reason (or field).
    pub message: String,
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A complete datastore state.
#[derive(Clone, Debug, Default)]
pub struct StateSnapshot {
    /// The converted model, after the duplicate rule; invalid resources are
    /// absent.
    pub values: BTreeMap<Key, Value>,
    /// Every problem found, in file order.
    pub errors: Vec<StateError>,
    /// Number of datastore files read.
    pub files: usize,
    /// Number of resources (documents) decoded, valid or not.
    pub resources: usize,
}

impl StateSnapshot {
    /// True if some file could not be read or parsed (the caller of
    /// `felix calc` exits 2 on these).
    pub fn has_file_errors(&self) -> bool {
        self.errors.iter().any(|e| e.class == ErrorClass::File)
    }
}

/// Failure to load a state at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The path (file or directory root) could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path that could not be read.
        path: PathBuf,
        #[source]
        /// The I/O error.
        source: io::Error,
    },
}

/// Loads a complete state from a file or a datastore directory.
///
/// Only a missing or unreadable `path` is an `Err`; everything else is
/// recorded in [`StateSnapshot::errors`].
pub fn load_state(path: &Path) -> Result<StateSnapshot, LoadError> {
    let loaded = StateLoader::default().load(path)?;
    let mut snapshot = StateSnapshot {
        values: BTreeMap::new(),
        errors: loaded.errors,
        files: loaded.files,
        resources: loaded.resources,
    };
    for update in loaded.updates {
        if let Some(value) = update.value {
            snapshot.values.insert(update.key, value);
        }
    }
    Ok(snapshot)
}

/// One state as loaded by a [`StateLoader`]: the updates from the previous
/// state, and what [`StateSnapshot`] says about the state's files.
#[derive(Debug, Default)]
pub struct StateUpdates {
    /// The net per-key changes from the previous state (from nothing for the
    /// first), sorted by key: a deletion for every key the state no longer
    /// has, a set for every new or changed value.
    pub updates: Vec<Update>,
    /// Every problem found, in file order.
    pub errors: Vec<StateError>,
    /// Number of datastore files read.
    pub files: usize,
    /// Number of resources (documents) decoded, valid or not.
    pub resources: usize,
}

impl StateUpdates {
    /// True if some file could not be read or parsed.
    pub fn has_file_errors(&self) -> bool {
        self.errors.iter().any(|e| e.class == ErrorClass::File)
    }

    /// Records `messages` as problems of `class`.
    pub(super) fn note(&mut self, class: ErrorClass, messages: impl IntoIterator<Item = String>) {
        self.errors.extend(
            messages
                .into_iter()
                .map(|message| StateError { class, message }),
        );
    }
}

/// Loads consecutive complete states (for `felix calc`) into one merged view,
/// so that each state comes out as its difference from the previous one.
///
/// Invariants:
/// * **A state's updates are its difference from the previous state**: the
///   same per-key changes as diffing the two states' complete models, with
///   every rule of [`load_state`] (file selection, duplicates, invalid
///   resources absent) applied to each state as a whole.
/// * **No state is held as a second model**: the loader keeps the merged
///   documents of the current state only; values are shared with the updates.
#[derive(Default)]
pub struct StateLoader {
    merger: Option<Merger>,
    /// The files of the current state, relative to its root.
    files: Vec<RelPath>,
}

impl StateLoader {
    /// Loads the next state from a file or a datastore directory.  Only a
    /// missing or unreadable `path` is an `Err`; everything else is recorded
    /// in [`StateUpdates::errors`].
    pub fn load(&mut self, path: &Path) -> Result<StateUpdates, LoadError> {
        let mut state = StateUpdates::default();
        let (root, files) = state_files(path, &mut state.errors)?;
        let merger = self.merger.get_or_insert_with(|| Merger::new(&root));
        merger.set_root(&root);
        // The previous state's files all go first (the merger still knows what it handed
        // out, so its updates stay net): a file of this state is then never compared with
        // a stale one, and each duplicate is reported once, as a fresh load reports it.
        for old in std::mem::take(&mut self.files) {
            merger.replace_file(&old, None);
        }
        self.files = files.iter().map(|rel| RelPath::new(rel)).collect();
        for rel in &self.files {
            load_file(&root, rel, merger, &mut state);
        }
        state.updates = merger.take_updates();
        Ok(state)
    }
}

/// The root and the files (relative to it, in byte-wise order) of the state at `path`: a
/// directory's datastore files, or the one file `path` names.  A sub-directory that cannot be
/// read is recorded in `errors`.
pub(super) fn state_files(
    path: &Path,
    errors: &mut Vec<StateError>,
) -> Result<(PathBuf, Vec<PathBuf>), LoadError> {
    let io_err = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(path).map_err(io_err)?;
    if meta.is_dir() {
        let listing = walk::list(path).map_err(io_err)?;
        for (rel, e) in listing.unreadable {
            errors.push(StateError {
                class: ErrorClass::File,
                message: format!("{}: cannot read directory: {e}", path.join(rel).display()),
            });
        }
        let files = listing.files.into_iter().map(|(rel, _)| rel).collect();
        return Ok((path.to_path_buf(), files));
    }
    Ok(match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => (parent.to_path_buf(), vec![PathBuf::from(name)]),
        _ => (PathBuf::new(), vec![path.to_path_buf()]),
    })
}

/// Reads and decodes one file of a state; `Err` is the file-level error (as a
/// [`ErrorClass::File`] message).
pub(super) fn read_file(root: &Path, rel: &RelPath) -> Result<source::Decoded, String> {
    let abs = root.join(rel.as_path());
    let origin = abs.display().to_string();
    fs::read(&abs)
        .map_err(|e| format!("{origin}: cannot read: {e}"))
        .and_then(|bytes| source::decode(&bytes, &origin, walk::format_for(rel.as_path())))
}

fn load_file(root: &Path, rel: &RelPath, merger: &mut Merger, state: &mut StateUpdates) {
    state.files += 1;
    match read_file(root, rel) {
        Ok(decoded) => {
            state.resources += decoded.docs.len();
            state.note(ErrorClass::Resource, decoded.invalid);
            let duplicates = merger.replace_file(rel, Some(decoded.docs));
            state.note(ErrorClass::Duplicate, duplicates);
        }
        Err(message) => {
            // The state is complete: a file that cannot be read contributes nothing,
            // whatever an earlier state held under the same name.
            merger.replace_file(rel, None);
            state.note(ErrorClass::File, [message]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NetworkSetKey;

    fn tier(name: &str, order: u32) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n  order: {order}\n"
        )
    }

    fn tier_order(s: &StateSnapshot, name: &str) -> Option<f64> {
        match s.values.get(&Key::Tier(name.to_string())) {
            Some(Value::Tier(t)) => t.order,
            _ => None,
        }
    }

    #[test]
    fn single_file_with_several_documents() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("state.yaml");
        fs::write(&f, format!("{}---\n{}", tier("a", 1), tier("b", 2))).unwrap();
        let s = load_state(&f).unwrap();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        assert_eq!((s.files, s.resources, s.values.len()), (1, 2, 2));
        assert_eq!(tier_order(&s, "b"), Some(2.0));
    }

    #[test]
    fn directory_with_bad_file_invalid_resource_and_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("sub")).unwrap();
        fs::write(root.join("a.yaml"), tier("dup", 1)).unwrap();
        fs::write(root.join("sub/b.yaml"), tier("dup", 2)).unwrap();
        fs::write(root.join("broken.yaml"), "kind: [\n").unwrap();
        fs::write(
            root.join("sets.yaml"),
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: bad\nspec:\n  nets:\n  - 10.0.0.0/33\n",
        )
        .unwrap();
        fs::write(root.join(".hidden.yaml"), tier("hidden", 1)).unwrap();
        let s = load_state(root).unwrap();
        assert_eq!(s.files, 4);
        assert_eq!(tier_order(&s, "dup"), Some(1.0));
        assert!(!s
            .values
            .contains_key(&Key::NetworkSet(NetworkSetKey { name: "bad".into() })));
        assert!(!s.values.contains_key(&Key::Tier("hidden".into())));
        assert!(s.has_file_errors());
        let of = |class| {
            s.errors
                .iter()
                .filter(|e| e.class == class)
                .collect::<Vec<_>>()
        };
        let file = of(ErrorClass::File);
        assert_eq!(file.len(), 1, "{:?}", s.errors);
        assert!(file[0].message.contains("broken.yaml:"), "{}", file[0]);
        let invalid = of(ErrorClass::Resource);
        assert_eq!(invalid.len(), 1, "{:?}", s.errors);
        assert!(
            invalid[0].message.contains("sets.yaml:1:") && invalid[0].message.contains("spec.nets"),
            "{}",
            invalid[0]
        );
        let dups = of(ErrorClass::Duplicate);
        assert_eq!(dups.len(), 1, "{:?}", s.errors);
        assert!(
            dups[0].message.contains("a.yaml") && dups[0].message.contains("sub/b.yaml"),
            "{}",
            dups[0]
        );
    }

    /// The per-key changes from state `a` to state `b`, from their complete models.
    fn model_diff(a: &StateSnapshot, b: &StateSnapshot) -> BTreeMap<Key, Option<Value>> {
        let mut out = BTreeMap::new();
        for k in a.values.keys().filter(|k| !b.values.contains_key(*k)) {
            out.insert(k.clone(), None);
        }
        for (k, v) in &b.values {
            if a.values.get(k) != Some(v) {
                out.insert(k.clone(), Some(v.clone()));
            }
        }
        out
    }

    #[test]
    fn a_states_updates_are_its_difference_from_the_previous_state() {
        let dir = tempfile::tempdir().unwrap();
        let state = |name: &str, files: &[(&str, String)]| {
            let root = dir.path().join(name);
            fs::create_dir_all(root.join("sub")).unwrap();
            for (rel, text) in files {
                fs::write(root.join(rel), text).unwrap();
            }
            root
        };
        let states = [
            state(
                "s0",
                &[
                    (
                        "a.yaml",
                        format!("{}---\n{}", tier("keep", 1), tier("change", 2)),
                    ),
                    ("sub/b.yaml", tier("gone-with-file", 3)),
                    ("dup.yaml", tier("dup", 4)),
                    ("sub/dup.yaml", tier("dup", 5)),
                    ("x.yaml", tier("both", 1)),
                    ("sub/x.yaml", tier("both", 2)),
                ],
            ),
            state(
                "s1",
                &[
                    (
                        "a.yaml",
                        format!("{}---\n{}", tier("keep", 1), tier("change", 7)),
                    ),
                    // The first copy of the duplicate goes: the other one takes over.
                    ("sub/dup.yaml", tier("dup", 5)),
                    ("broken.yaml", "kind: [\n".to_string()),
                    // A duplicate in both states, changed: reported once, as a fresh load does.
                    ("x.yaml", tier("both", 3)),
                    ("sub/x.yaml", tier("both", 4)),
                ],
            ),
            // A single file after directories: everything else is deleted.
            state("s2", &[("a.yaml", tier("keep", 1))]).join("a.yaml"),
        ];
        let mut loader = StateLoader::default();
        let mut previous = StateSnapshot::default();
        for (i, path) in states.iter().enumerate() {
            let loaded = loader.load(path).unwrap();
            let complete = load_state(path).unwrap();
            let got: BTreeMap<Key, Option<Value>> = loaded
                .updates
                .into_iter()
                .map(|u| (u.key, u.value))
                .collect();
            assert_eq!(got, model_diff(&previous, &complete), "state {i}");
            assert_eq!(loaded.errors, complete.errors, "state {i}");
            assert_eq!(
                (loaded.files, loaded.resources),
                (complete.files, complete.resources),
                "state {i}"
            );
            previous = complete;
        }
        assert_eq!(tier_order(&previous, "keep"), Some(1.0));
        assert_eq!(previous.values.len(), 1);
    }

    #[test]
    fn missing_path_is_a_load_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = load_state(&missing).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
