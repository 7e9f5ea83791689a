//! Reading and decoding one datastore file into [`Doc`]s.
//!
//! Decoding is wrapped in `catch_unwind`: whatever a file contains, a bug in
//! a decoder becomes a file-level error for that file, never a dead syncer
//! thread.

use std::fs::Metadata;
use std::hash::{DefaultHasher, Hasher};
use std::os::unix::fs::MetadataExt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::merge::Doc;
use crate::resources::{self, Format};

/// The metadata that changes whenever a file's content may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Fingerprint {
    pub(crate) fn of(meta: &Metadata) -> Self {
        Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Seconds since the epoch of the latest of mtime and ctime.
    pub(crate) fn changed_secs(&self) -> i64 {
        self.mtime.0.max(self.ctime.0)
    }
}

/// A cheap hash of a file's bytes, to tell a real change from a touch.
pub(crate) fn content_hash(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// A successfully decoded file.
pub(crate) struct Decoded {
    pub docs: Vec<Doc>,
    /// One line per resource that failed validation (file, line, field).
    pub invalid: Vec<String>,
}

/// Decodes the bytes of one file.  `Err` is a file-level error (the file
/// does not parse), rendered as one line naming file, line and reason.
pub(crate) fn decode(bytes: &[u8], origin: &str, format: Format) -> Result<Decoded, String> {
    decode_at(bytes, origin, format, 0)
}

/// [`decode`] for a part of a file that has `lines_before` lines before it: the documents'
/// lines, and the lines messages name, are the file's.
pub(crate) fn decode_at(
    bytes: &[u8],
    origin: &str,
    format: Format,
    lines_before: usize,
) -> Result<Decoded, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        format!("{origin}:{}: file is not valid UTF-8", line + lines_before)
    })?;
    let decoded = catch_unwind(AssertUnwindSafe(|| {
        resources::decode_documents_at(text, origin, format, lines_before)
    }))
    .map_err(|_| format!("{origin}:1: internal error while decoding this file (decoder panicked)"))?
    .map_err(|e| e.to_string())?;
    let mut invalid = Vec::new();
    let docs = decoded
        .into_iter()
        .map(|d| {
            let line = d.line;
            let result = d.result.map_err(|e| {
                let message = format!("{origin}:{line}: invalid {}: {e}", d.id);
                invalid.push(message.clone());
                message
            });
            Doc {
                id: d.id,
                line,
                result,
            }
        })
        .collect();
    Ok(Decoded { docs, invalid })
}
