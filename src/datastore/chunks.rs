//! Re-decoding only the documents of a file that changed.
//!
//! A user who edits one policy in a file of 2,000 rewrites the whole file; decoding all of it
//! again (selectors, rules, validation) costs tens of milliseconds, the largest part of the
//! path from the write to the kernel.  [`decode_reusing`] splits a YAML text into its
//! documents, and each document whose bytes are those of a document of the file's previous
//! version keeps that version's decoded result; only the others are decoded.
//!
//! Invariants:
//! * **Same result as a full decode.**  A document decodes alone exactly as it does in its
//!   file (the YAML decoder splits a file into the same documents and decodes each one on
//!   its own), apart from line numbers, which are shifted by the lines before it.  The split
//!   is only trusted for texts where it provably agrees with the decoder's: every `---`
//!   marker line holds nothing else, and there are no `...` lines, no `%` directives and no
//!   byte-order mark.  Anything else, `.json` files, and any document that fails as a whole
//!   (a syntax error) are decoded in full, as before, so messages are unchanged.
//! * **Only valid results are reused.**  A document whose result was a validation error is
//!   decoded again, since its message names its line; so every invalid resource is reported
//!   again whenever its file changes, as with a full decode.
//! * **Identity by content digest.**  A document is recognised by the first 128 bits of the
//!   SHA-256 of its bytes (a collision between two documents is not a practical concern).

use std::ops::Range;

use sha2::{Digest, Sha256};

use super::merge::Doc;
use super::source::{self, Decoded};
use crate::hash::FastMap;
use crate::resources::Format;

/// One document of a file as last decoded.
#[derive(Debug, Clone)]
struct ChunkDigest {
    digest: [u8; 16],
    /// Lines of the file before the document.
    lines_before: usize,
    /// Its decoded documents, as indices of the file's [`Doc`] list.
    docs: Range<usize>,
    /// Whether every one of those decoded without a validation error.
    all_ok: bool,
}

/// The documents of a file as last decoded (empty when the split was not trusted).
#[derive(Debug, Clone, Default)]
pub(crate) struct FileChunks(Vec<ChunkDigest>);

/// One document of a text: its bytes and the lines before it.
struct Chunk<'a> {
    text: &'a str,
    lines_before: usize,
}

fn is_marker(line: &str) -> Option<bool> {
    let rest = line.strip_prefix("---")?;
    if rest.is_empty() || rest.starts_with([' ', '\t', '\r']) {
        // A marker: trusted only when nothing follows it.
        Some(rest.trim().is_empty())
    } else {
        None
    }
}

/// Splits `text` at `---` lines, or `None` when the split might not agree with the YAML
/// decoder's (see the module docs).
fn split(text: &str) -> Option<Vec<Chunk<'_>>> {
    if text.starts_with('\u{feff}') {
        return None;
    }
    let mut chunks = Vec::new();
    let mut start = 0usize;
    let mut start_line = 0usize;
    let mut offset = 0usize;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let body = body.strip_suffix('\r').unwrap_or(body);
        if body.starts_with('%') || body.starts_with("...") {
            return None;
        }
        match is_marker(body) {
            Some(false) => return None,
            Some(true) if n > 0 => {
                chunks.push(Chunk {
                    text: &text[start..offset],
                    lines_before: start_line,
                });
                start = offset;
                start_line = n;
            }
            _ => {}
        }
        offset += line.len();
    }
    chunks.push(Chunk {
        text: &text[start..],
        lines_before: start_line,
    });
    Some(chunks)
}

fn digest(text: &str) -> [u8; 16] {
    let full = Sha256::digest(text.as_bytes());
    let mut d = [0u8; 16];
    d.copy_from_slice(&full[..16]);
    d
}

/// Decodes `bytes` (a file at `origin`), reusing the results of documents unchanged since
/// `previous` (the file's last chunks and documents).  Returns the decoded file and its
/// chunks for the next time; `Err` is a file-level error as [`source::decode`] gives it.
pub(crate) fn decode_reusing(
    bytes: &[u8],
    origin: &str,
    format: Format,
    previous: Option<(&FileChunks, &[Doc])>,
) -> Result<(Decoded, FileChunks), String> {
    let split = match (format, std::str::from_utf8(bytes)) {
        (Format::Yaml, Ok(text)) => split(text),
        _ => None,
    };
    let Some(chunks) = split else {
        return source::decode(bytes, origin, format).map(|d| (d, FileChunks::default()));
    };
    let digests: Vec<[u8; 16]> = chunks.iter().map(|c| digest(c.text)).collect();
    let Some((prev_chunks, prev_docs)) = previous.filter(|(c, _)| !c.0.is_empty()) else {
        // Nothing to reuse: decode the whole text at once (the fastest way) and assign
        // each document to its chunk by line.
        let decoded = source::decode(bytes, origin, format)?;
        let file_chunks = assign(&chunks, &digests, &decoded.docs);
        return Ok((decoded, file_chunks));
    };
    let reusable: FastMap<[u8; 16], &ChunkDigest> = prev_chunks
        .0
        .iter()
        .filter(|c| c.all_ok && c.docs.end <= prev_docs.len())
        .map(|c| (c.digest, c))
        .collect();
    let mut docs = Vec::new();
    let mut invalid = Vec::new();
    let mut file_chunks = Vec::with_capacity(chunks.len());
    for (chunk, d) in chunks.iter().zip(&digests) {
        let first = docs.len();
        if let Some(old) = reusable.get(d) {
            docs.extend(prev_docs[old.docs.clone()].iter().map(|doc| {
                let mut doc = doc.clone();
                doc.line = doc.line.saturating_sub(old.lines_before) + chunk.lines_before;
                doc
            }));
        } else {
            // Decoded alone and placed; a file-level error is reported as a full decode
            // reports it.
            match source::decode_at(chunk.text.as_bytes(), origin, format, chunk.lines_before) {
                Ok(alone) => {
                    docs.extend(alone.docs);
                    invalid.extend(alone.invalid);
                }
                Err(_) => {
                    let decoded = source::decode(bytes, origin, format)?;
                    let file_chunks = assign(&chunks, &digests, &decoded.docs);
                    return Ok((decoded, file_chunks));
                }
            }
        }
        let range = first..docs.len();
        file_chunks.push(ChunkDigest {
            digest: *d,
            lines_before: chunk.lines_before,
            all_ok: docs[range.clone()].iter().all(|d| d.result.is_ok()),
            docs: range,
        });
    }
    Ok((Decoded { docs, invalid }, FileChunks(file_chunks)))
}

/// Chunks of a text decoded at once: each document belongs to the chunk whose lines hold its
/// first line (documents come in order).
fn assign(chunks: &[Chunk<'_>], digests: &[[u8; 16]], docs: &[Doc]) -> FileChunks {
    let mut out = Vec::with_capacity(chunks.len());
    let mut next = 0usize;
    for (i, (chunk, d)) in chunks.iter().zip(digests).enumerate() {
        let end_line = chunks.get(i + 1).map_or(usize::MAX, |c| c.lines_before);
        let first = next;
        // `line` is 1-based: the chunk holds lines lines_before+1 ..= end_line.
        while next < docs.len() && docs[next].line <= end_line {
            next += 1;
        }
        out.push(ChunkDigest {
            digest: *d,
            lines_before: chunk.lines_before,
            all_ok: docs[first..next].iter().all(|d| d.result.is_ok()),
            docs: first..next,
        });
    }
    if next != docs.len() {
        // Some document fell outside every chunk: trust nothing.
        return FileChunks::default();
    }
    FileChunks(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::Value;

    fn set(name: &str, net: u8) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {name}\nspec:\n  nets:\n  - 10.0.{net}.0/24\n"
        )
    }

    /// A document that fails validation (its message names its line).
    fn invalid(name: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {name}\nspec:\n  nets:\n  - not-a-net\n"
        )
    }

    fn file(docs: &[String]) -> String {
        docs.iter().map(|d| format!("---\n{d}")).collect()
    }

    /// What a decode says, in a comparable form.
    fn shown(d: &Decoded) -> (Vec<String>, Vec<String>) {
        let docs = d
            .docs
            .iter()
            .map(|doc| format!("{} {} {:?}", doc.id, doc.line, doc.result))
            .collect();
        (docs, d.invalid.clone())
    }

    fn decode_twice(a: &str, b: &str) -> (Decoded, Decoded, Decoded) {
        let (first, chunks) = decode_reusing(a.as_bytes(), "f.yaml", Format::Yaml, None).unwrap();
        let (second, _) = decode_reusing(
            b.as_bytes(),
            "f.yaml",
            Format::Yaml,
            Some((&chunks, &first.docs)),
        )
        .unwrap();
        let full = source::decode(b.as_bytes(), "f.yaml", Format::Yaml).unwrap();
        (first, second, full)
    }

    #[test]
    fn an_unchanged_document_is_not_decoded_again() {
        let a = file(&[set("a", 1), set("b", 2), set("c", 3)]);
        let b = file(&[set("a", 1), set("b", 9), set("c", 3)]);
        let (first, second, full) = decode_twice(&a, &b);
        assert_eq!(shown(&second), shown(&full));
        let value = |d: &Decoded, i: usize| match &d.docs[i].result {
            Ok(kvs) => match &kvs[0].1 {
                Value::NetworkSet(s) => s.clone(),
                other => panic!("{other:?}"),
            },
            Err(e) => panic!("{e}"),
        };
        assert!(std::sync::Arc::ptr_eq(
            &value(&first, 0),
            &value(&second, 0)
        ));
        assert!(std::sync::Arc::ptr_eq(
            &value(&first, 2),
            &value(&second, 2)
        ));
        assert!(!std::sync::Arc::ptr_eq(
            &value(&first, 1),
            &value(&second, 1)
        ));
    }

    #[test]
    fn a_moved_document_keeps_its_value_and_takes_its_new_line() {
        let a = file(&[set("a", 1), set("b", 2)]);
        let b = file(&[set("new", 5), set("b", 2), set("a", 1)]);
        let (_, second, full) = decode_twice(&a, &b);
        assert_eq!(shown(&second), shown(&full));
    }

    #[test]
    fn an_invalid_document_is_decoded_again_so_its_message_names_its_new_line() {
        let a = file(&[invalid("x"), set("b", 2)]);
        let b = file(&[set("new", 5), invalid("x"), set("b", 2)]);
        let (first, second, full) = decode_twice(&a, &b);
        assert_eq!(first.invalid.len(), 1);
        assert_eq!(shown(&second), shown(&full));
        assert!(
            second.invalid[0].starts_with("f.yaml:10:"),
            "{:?}",
            second.invalid
        );
    }

    /// Found by the `file_decode` fuzz target: a document decoded alone (here a second copy of
    /// an invalid one) gave serde's message the line inside the document (`at line 2`) where
    /// a full decode names the line in the file (`at line 13`).
    #[test]
    fn a_document_decoded_alone_names_the_files_lines_in_its_message() {
        const A: &[u8] = b"---\napiVersion: projectcalico.org/v3\nkindpiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: internal\n  labels: {zone: internal}\nspec:\n  nets:\n  - 10.0.0.0/33\n  - fd00::/8\n";
        let a = std::str::from_utf8(A).unwrap();
        let b = a.repeat(2);
        let (_, second, full) = decode_twice(a, &b);
        assert_eq!(shown(&second), shown(&full));
        assert!(
            second.invalid[1].contains("at line 13 column 1"),
            "{:?}",
            second.invalid
        );
    }

    #[test]
    fn a_syntax_error_is_reported_as_a_full_decode_reports_it() {
        let a = file(&[set("a", 1), set("b", 2)]);
        let b = file(&[set("a", 1), "kind: [\n".to_string()]);
        let (first, chunks) = decode_reusing(a.as_bytes(), "f.yaml", Format::Yaml, None).unwrap();
        let second = decode_reusing(
            b.as_bytes(),
            "f.yaml",
            Format::Yaml,
            Some((&chunks, &first.docs)),
        )
        .map(|_| ());
        let full = source::decode(b.as_bytes(), "f.yaml", Format::Yaml).map(|_| ());
        assert!(full.is_err());
        assert_eq!(second, full);
    }

    #[test]
    fn texts_whose_split_may_differ_from_the_decoders_are_not_split() {
        assert!(
            split("a: 1\n--- b: 2\n").is_none(),
            "content after a marker"
        );
        assert!(
            split("a: 1\n...\n---\nb: 2\n").is_none(),
            "document end marker"
        );
        assert!(split("%YAML 1.2\n---\na: 1\n").is_none(), "directive");
        assert!(split("\u{feff}a: 1\n").is_none(), "byte-order mark");
        let ok = split("a: 1\n---\nb: 2\n--- \r\nc: 3").unwrap();
        let lines: Vec<usize> = ok.iter().map(|c| c.lines_before).collect();
        assert_eq!(lines, vec![0, 1, 3]);
        assert_eq!(ok[2].text, "--- \r\nc: 3");
    }

    #[test]
    fn json_files_are_decoded_in_full() {
        let text = r#"{"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet", "metadata": {"name": "a"}, "spec": {"nets": ["10.0.0.0/8"]}}"#;
        let (d, chunks) = decode_reusing(text.as_bytes(), "f.json", Format::Json, None).unwrap();
        assert_eq!(d.docs.len(), 1);
        assert!(chunks.0.is_empty());
    }

    fn arb_doc() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u8..4, 0u8..3).prop_map(|(n, net)| set(&format!("s{n}"), net)),
            (0u8..2).prop_map(|n| invalid(&format!("bad{n}"))),
            Just("# only a comment\n".to_string()),
            Just("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: t\nspec:\n  order: 5\n".to_string()),
        ]
    }

    proptest! {
        /// Whatever the two versions of a file, decoding the second reusing the first gives
        /// what a full decode of the second gives.
        #[test]
        fn reusing_decodes_equal_full_decodes(
            a in proptest::collection::vec(arb_doc(), 0..6),
            b in proptest::collection::vec(arb_doc(), 0..6),
            blank in proptest::bool::ANY,
        ) {
            let mut a = file(&a);
            let b = file(&b);
            if blank {
                a.insert_str(0, "\n# header\n");
            }
            let (_, second, full) = decode_twice(&a, &b);
            prop_assert_eq!(shown(&second), shown(&full));
        }
    }
}
