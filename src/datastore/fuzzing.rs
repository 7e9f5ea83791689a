//! Entry points for the cargo-fuzz targets in `fv/fuzz`: hidden from the documentation and
//! not part of the supported API.  They reach the file datastore's whole-file decoders
//! ([`source::decode`], [`chunks::decode_reusing`]), its [`Merger`] and the etcd value
//! decoder, which are private to this module, and give their results in comparable forms.

use std::collections::BTreeMap;
use std::path::Path;

use super::chunks::{self, FileChunks};
use super::etcd::{keys, value};
use super::merge::{Doc, Merger, RelPath};
use super::source::{self, Decoded};
use crate::model::{Key, UpdateType, Value};
use crate::resources::{Format, ResourceId};

/// What decoding one file gave, in a comparable form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// Per document: identity, line and result (converted entries or message), printed.
    pub docs: Vec<String>,
    /// One message per resource that failed validation.
    pub invalid: Vec<String>,
}

impl Shown {
    fn of(d: &Decoded) -> Shown {
        Shown {
            docs: d
                .docs
                .iter()
                .map(|doc| format!("{} {} {:?}", doc.id, doc.line, doc.result))
                .collect(),
            invalid: d.invalid.clone(),
        }
    }
}

/// A decoded file as the file syncer keeps it for its next version: its documents and
/// their chunks.
#[derive(Clone, Debug, Default)]
pub struct DecodedFile {
    docs: Vec<Doc>,
    chunks: FileChunks,
}

/// Decodes a whole file at once, as `felix calc` does; `Err` is the file-level error.
pub fn decode(bytes: &[u8], origin: &str, format: Format) -> Result<Shown, String> {
    source::decode(bytes, origin, format).map(|d| Shown::of(&d))
}

/// Decodes a file as the file syncer does, reusing the documents of `previous` (the file's
/// last good version) whose bytes are unchanged.  Must give what [`decode`] gives.
pub fn decode_reusing(
    bytes: &[u8],
    origin: &str,
    format: Format,
    previous: Option<&DecodedFile>,
) -> Result<(Shown, DecodedFile), String> {
    let prev = previous.map(|p| (&p.chunks, p.docs.as_slice()));
    let (decoded, chunks) = chunks::decode_reusing(bytes, origin, format, prev)?;
    let shown = Shown::of(&decoded);
    Ok((
        shown,
        DecodedFile {
            docs: decoded.docs,
            chunks,
        },
    ))
}

/// A file datastore held in memory: files replaced as the file syncer replaces them, and
/// the merged state the syncer's updates describe.
pub struct Files {
    merger: Merger,
    state: BTreeMap<Key, Value>,
}

impl Default for Files {
    fn default() -> Self {
        Files {
            merger: Merger::new(Path::new("/fuzz")),
            state: BTreeMap::new(),
        }
    }
}

impl Files {
    /// Stores the documents of `file` as those of the file `path` (relative), or removes
    /// the file (`None`).  Returns the duplicate messages.
    pub fn put(&mut self, path: &str, file: Option<&DecodedFile>) -> Vec<String> {
        let rel = RelPath::new(Path::new(path));
        self.merger.replace_file(&rel, file.map(|f| f.docs.clone()))
    }

    /// Applies the merger's pending updates to the state they describe, checking that each
    /// one's type agrees with that state, and returns the state (keys and values printed).
    pub fn state(&mut self) -> Result<Vec<(String, String)>, String> {
        for u in self.merger.take_updates() {
            let known = self.state.contains_key(&u.key);
            let fits = match u.update_type {
                UpdateType::New => !known && u.value.is_some(),
                UpdateType::Updated => known && u.value.is_some(),
                UpdateType::Deleted => known && u.value.is_none(),
                UpdateType::Unknown => true,
            };
            if !fits {
                return Err(format!(
                    "{:?} update for {:?} (known before: {known}, value: {:?})",
                    u.update_type, u.key, u.value
                ));
            }
            match u.value {
                Some(v) => self.state.insert(u.key, v),
                None => self.state.remove(&u.key),
            };
        }
        Ok(self
            .state
            .iter()
            .map(|(k, v)| (format!("{k:?}"), format!("{v:?}")))
            .collect())
    }
}

/// A stored value's model entries, or the one-line error the etcd syncer logs.
pub type Entries = Result<Vec<(Key, Value)>, String>;

/// What the etcd syncer makes of one stored key and value: `None` for a key outside the
/// layout (ignored), else the identity the key names and the value's entries or the
/// one-line error it logs.
pub fn etcd_decode(key: &[u8], value: &[u8]) -> Option<(ResourceId, Entries)> {
    let key = std::str::from_utf8(key).ok()?;
    let id = keys::parse_key(key)?;
    let result = value::decode(key, &id, value);
    Some((id, result))
}
