//! Which files belong to a file datastore, and listing them.
//!
//! A datastore file is a regular file (symlinks are followed) whose name
//! ends in `.yaml`, `.yml` or `.json` and does not start with `.`; no path
//! component may start with `.` either, so hidden directories (including
//! Kubernetes' `..data` ConfigMap staging directories) are skipped.  Editor
//! temporaries (`.#x.yaml`, `x.yaml~`, `.x.yaml.swp`, `x.yaml.tmp`, `#x#`)
//! are excluded by these two rules.  Directories reached through symlinks
//! are followed, each real directory at most once, so link cycles end.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::resources::Format;

/// True if a file with this name holds datastore resources.
pub(crate) fn is_candidate_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes[0] == b'.' {
        return false;
    }
    [&b".yaml"[..], b".yml", b".json"]
        .iter()
        .any(|ext| bytes.len() > ext.len() && bytes.ends_with(ext))
}

/// True if `rel` (relative to the root) names a datastore file: a
/// candidate file name and no hidden directory on the way.
pub(crate) fn is_candidate_path(rel: &Path) -> bool {
    let mut components = rel.components().peekable();
    let mut seen = false;
    while let Some(component) = components.next() {
        let Component::Normal(name) = component else {
            return false;
        };
        seen = true;
        if components.peek().is_none() {
            return is_candidate_name(name);
        }
        if name.as_bytes().first() == Some(&b'.') {
            return false;
        }
    }
    seen
}

/// The document format implied by a file name (`.json` is JSON, anything
/// else YAML).
pub(crate) fn format_for(path: &Path) -> Format {
    if path.as_os_str().as_bytes().ends_with(b".json") {
        Format::Json
    } else {
        Format::Yaml
    }
}

/// The result of listing a datastore directory.
pub(crate) struct Listing {
    /// Datastore files (relative path, metadata), sorted byte-wise.
    pub files: Vec<(PathBuf, Metadata)>,
    /// Sub-directories that could not be read (relative path, error).  Files
    /// previously known under them must be kept, not deleted.
    pub unreadable: Vec<(PathBuf, io::Error)>,
}

/// Lists every datastore file under `root`.  Fails only if `root` itself
/// cannot be read.
pub(crate) fn list(root: &Path) -> io::Result<Listing> {
    let mut listing = Listing {
        files: Vec::new(),
        unreadable: Vec::new(),
    };
    let mut visited = HashSet::new();
    let root_meta = fs::metadata(root)?;
    visited.insert((root_meta.dev(), root_meta.ino()));
    let entries = fs::read_dir(root)?;
    walk_entries(root, PathBuf::new(), entries, &mut visited, &mut listing);
    listing
        .files
        .sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    Ok(listing)
}

fn walk_entries(
    root: &Path,
    rel_dir: PathBuf,
    entries: fs::ReadDir,
    visited: &mut HashSet<(u64, u64)>,
    listing: &mut Listing,
) {
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                listing.unreadable.push((rel_dir.clone(), e));
                continue;
            }
        };
        let name = entry.file_name();
        if name.as_bytes().first() == Some(&b'.') {
            continue;
        }
        let rel = rel_dir.join(&name);
        let abs = root.join(&rel);
        // Follows symlinks; a dangling link is simply not a file.
        let Ok(meta) = fs::metadata(&abs) else {
            continue;
        };
        if meta.is_dir() {
            if !visited.insert((meta.dev(), meta.ino())) {
                continue;
            }
            match fs::read_dir(&abs) {
                Ok(sub) => walk_entries(root, rel, sub, visited, listing),
                Err(e) => listing.unreadable.push((rel, e)),
            }
        } else if meta.is_file() && is_candidate_name(&name) {
            listing.files.push((rel, meta));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_names_exclude_hidden_and_editor_temporaries() {
        for good in ["a.yaml", "b.yml", "c.json", "x.y.yaml"] {
            assert!(is_candidate_name(OsStr::new(good)), "{good}");
        }
        for bad in [
            ".a.yaml",
            ".#a.yaml",
            "a.yaml~",
            ".a.yaml.swp",
            "a.yaml.swp",
            "a.yaml.tmp",
            "#a.yaml#",
            "a.txt",
            ".yaml",
            "yaml",
        ] {
            assert!(!is_candidate_name(OsStr::new(bad)), "{bad}");
        }
    }

    #[test]
    fn candidate_paths_exclude_hidden_directories() {
        assert!(is_candidate_path(Path::new("a/b/c.yaml")));
        assert!(!is_candidate_path(Path::new("..data/c.yaml")));
        assert!(!is_candidate_path(Path::new("a/.git/c.yaml")));
        assert!(!is_candidate_path(Path::new("../c.yaml")));
        assert!(!is_candidate_path(Path::new("")));
    }

    #[test]
    fn listing_is_recursive_sorted_bytewise_and_skips_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(root.join(".hidden")).unwrap();
        for f in [
            "a/x.yaml",
            "a.b.yaml",
            "z.json",
            ".hidden/h.yaml",
            "a/x.yaml~",
            "n.txt",
        ] {
            fs::write(root.join(f), "").unwrap();
        }
        std::os::unix::fs::symlink(root, root.join("a/loop")).unwrap();
        let listing = list(root).unwrap();
        let names: Vec<_> = listing.files.iter().map(|(p, _)| p.clone()).collect();
        // Byte-wise, "a.b.yaml" ('.') sorts before "a/x.yaml" ('/').
        assert_eq!(
            names,
            vec![
                PathBuf::from("a.b.yaml"),
                PathBuf::from("a/x.yaml"),
                PathBuf::from("z.json")
            ]
        );
        assert!(listing.unreadable.is_empty());
    }
}
