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
use crate::model::{Key, Value};

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
    let io_err = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(path).map_err(io_err)?;
    let mut snapshot = StateSnapshot::default();
    if meta.is_dir() {
        let listing = walk::list(path).map_err(io_err)?;
        let mut merger = Merger::new(path);
        for (rel, e) in listing.unreadable {
            snapshot.errors.push(StateError {
                class: ErrorClass::File,
                message: format!("{}: cannot read directory: {e}", path.join(rel).display()),
            });
        }
        for (rel, _) in listing.files {
            load_file(path, &rel, &mut merger, &mut snapshot);
        }
        finish(merger, &mut snapshot);
    } else {
        let (root, rel) = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => (parent.to_path_buf(), PathBuf::from(name)),
            _ => (PathBuf::new(), path.to_path_buf()),
        };
        let mut merger = Merger::new(&root);
        load_file(&root, &rel, &mut merger, &mut snapshot);
        finish(merger, &mut snapshot);
    }
    Ok(snapshot)
}

fn load_file(root: &Path, rel: &Path, merger: &mut Merger, snapshot: &mut StateSnapshot) {
    let abs = root.join(rel);
    let origin = abs.display().to_string();
    snapshot.files += 1;
    let bytes = match fs::read(&abs) {
        Ok(b) => b,
        Err(e) => {
            snapshot.errors.push(StateError {
                class: ErrorClass::File,
                message: format!("{origin}: cannot read: {e}"),
            });
            return;
        }
    };
    match source::decode(&bytes, &origin, walk::format_for(rel)) {
        Ok(decoded) => {
            snapshot.resources += decoded.docs.len();
            snapshot
                .errors
                .extend(decoded.invalid.into_iter().map(|message| StateError {
                    class: ErrorClass::Resource,
                    message,
                }));
            let duplicates = merger.replace_file(&RelPath::new(rel), Some(decoded.docs));
            snapshot
                .errors
                .extend(duplicates.into_iter().map(|message| StateError {
                    class: ErrorClass::Duplicate,
                    message,
                }));
        }
        Err(message) => snapshot.errors.push(StateError {
            class: ErrorClass::File,
            message,
        }),
    }
}

fn finish(mut merger: Merger, snapshot: &mut StateSnapshot) {
    for update in merger.take_updates() {
        if let Some(value) = update.value {
            snapshot.values.insert(update.key, value);
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

    #[test]
    fn missing_path_is_a_load_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = load_state(&missing).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
