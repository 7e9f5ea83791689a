//! Entry points for the cargo-fuzz targets in `fv/fuzz`: hidden from the documentation and
//! not part of the supported API.  They reach the decoders' private parts and check the
//! invariants those parts promise, returning a disagreement as an `Err` for the target to
//! report.

use serde::Deserialize;

use super::document::decode_documents_with;
use super::fastyaml::{self, Reader};
use super::types::Dyn;
use super::{DecodeError, Decoded, Format};

/// [`super::decode_documents`] with the fast YAML reader turned off: every YAML document
/// goes through `serde_yaml_ng`.  The fast reader must never change what a text decodes to.
pub fn decode_documents_without_fast_reader(
    text: &str,
    origin: &str,
    format: Format,
) -> Result<Vec<Decoded>, DecodeError> {
    decode_documents_with(text, origin, format, 0, false)
}

/// Equal, or the same when printed (so that NaN agrees with NaN).
fn same<T: PartialEq + std::fmt::Debug>(a: &T, b: &T) -> bool {
    a == b || format!("{a:?}") == format!("{b:?}")
}

/// Reads `text` as one YAML document with the fast reader and checks the fast reader's
/// invariants (module docs of `fastyaml`) against `serde_yaml_ng`: whatever it accepts and
/// deserializes, `serde_yaml_ng` accepts and deserializes to the same value (as a
/// schemaless [`Dyn`] and as a JSON value), and reading it with buffers left over from
/// `previous` changes nothing.  `Ok(true)`: accepted and agreed; `Ok(false)`: declined;
/// `Err`: the disagreement.
pub fn fast_reader_agrees(text: &str, previous: &str) -> Result<bool, String> {
    let Some(tree) = fastyaml::parse(text) else {
        return Ok(false);
    };
    let Ok(fast) = Dyn::deserialize(tree.root()) else {
        return Ok(false);
    };
    let full: Dyn = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("the fast reader accepts what serde_yaml_ng rejects ({e})"))?;
    if !same(&fast, &full) {
        return Err(format!(
            "values differ: fast reader {fast:?}, serde_yaml_ng {full:?}"
        ));
    }
    if let Ok(fast_json) = serde_json::Value::deserialize(tree.root()) {
        let full_json: serde_json::Value = serde_yaml_ng::from_str(text).map_err(|e| {
            format!(
                "serde_yaml_ng reads a value but not a JSON value ({e}); fast reader {fast_json}"
            )
        })?;
        if !same(&fast_json, &full_json) {
            return Err(format!(
                "JSON values differ: fast reader {fast_json}, serde_yaml_ng {full_json}"
            ));
        }
    }
    let mut reader = Reader::default();
    if !fastyaml::has_special_chars(previous) {
        let _ = reader.parse_lines(super::lines::exclusive(previous));
    }
    let again = reader
        .parse_lines(super::lines::exclusive(text))
        .map(|tree| Dyn::deserialize(tree.root()));
    match again {
        Some(Ok(again)) if same(&again, &fast) => Ok(true),
        other => Err(format!(
            "a reused reader reads {other:?} where a fresh one reads {fast:?}"
        )),
    }
}
