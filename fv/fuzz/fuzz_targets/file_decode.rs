//! Fuzz target: the file datastore's decoders end to end, from a file's bytes (multi-document
//! YAML, JSON objects and arrays, `List`s) to its documents, validation messages or file-level
//! error, and on to the merged state the syncer's updates describe.
//!
//! Input: one control byte, then file A, then optionally a NUL and a text X.  File B is A
//! edited at its `---` lines (documents reordered, dropped, duplicated, replaced by X or with
//! X inserted; bits 0-4 of the control byte), so that A and B share documents as two versions
//! of one file do.  Bit 7: the files are JSON (else YAML).
//!
//! Checked, whatever the bytes:
//! * the fast YAML reader never changes what a text decodes to (same documents, lines,
//!   values, messages and errors as `serde_yaml_ng` alone; when bits 5 and 6 are set, as
//!   this check costs a decode by `serde_yaml_ng`);
//! * decoding with chunk reuse (the file syncer's path: B reusing A's unchanged documents,
//!   and B reusing itself) gives exactly what a full decode gives;
//! * the merged state depends only on the files present: A and B as two files loaded in
//!   either order, or A replaced by B, or one removed, give what loading the rest afresh
//!   gives; and every update's type agrees with the state it applies to.

#![no_main]

use felix::datastore::fuzzing::{decode, decode_reusing, Files};
use felix::resources::fuzzing::decode_documents_without_fast_reader;
use felix::resources::{decode_documents, DecodeError, Decoded, Format};
use libfuzzer_sys::fuzz_target;

/// The byte ranges of a text's documents: split before every line starting with `---`.
fn documents(text: &[u8]) -> Vec<&[u8]> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive(|&b| b == b'\n') {
        if at > 0 && line.starts_with(b"---") {
            docs.push(&text[start..at]);
            start = at;
        }
        at += line.len();
    }
    docs.push(&text[start..]);
    docs
}

/// Version B of file A (see the module docs).
fn edit(a: &[u8], x: &[u8], op: u8) -> Vec<u8> {
    let mut docs = documents(a);
    let n = docs.len();
    let k = usize::from(op >> 3 & 3) % n;
    match op & 7 {
        0 => {}
        1 => docs.reverse(),
        2 => {
            docs.remove(k);
        }
        3 => docs.insert(k, docs[k]),
        4 => docs[k] = x,
        5 => docs.insert(k, x),
        6 => docs.insert(0, x),
        _ => docs.swap(k, (k + 1) % n),
    }
    docs.concat()
}

fn shown(d: Result<Vec<Decoded>, DecodeError>) -> Result<Vec<String>, String> {
    d.map(|docs| {
        docs.iter()
            .map(|d| format!("{} {} {:?}", d.id, d.line, d.result))
            .collect()
    })
    .map_err(|e| e.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Some((&op, rest)) = data.split_first() else {
        return;
    };
    let (a, x) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let (format, origin) = if op & 0x80 != 0 {
        (Format::Json, "f.json")
    } else {
        (Format::Yaml, "f.yaml")
    };
    let b = edit(a, x, op);

    // The fast reader is invisible.
    if op & 0x60 == 0x60 {
        if let Ok(text) = std::str::from_utf8(a) {
            let fast = shown(decode_documents(text, origin, format));
            let slow = shown(decode_documents_without_fast_reader(text, origin, format));
            assert_eq!(fast, slow, "fast reader changes the outcome");
        }
    }

    // Reuse is invisible.
    let Ok((_, file_a)) = decode_reusing(a, origin, format, None) else {
        return;
    };
    let full_b = decode(&b, origin, format);
    let second = decode_reusing(&b, origin, format, Some(&file_a));
    assert_eq!(
        second.as_ref().map(|(s, _)| s),
        full_b.as_ref(),
        "B reusing A differs from a full decode of B"
    );
    let Ok((_, file_b)) = second else {
        return;
    };
    let third = decode_reusing(&b, origin, format, Some(&file_b));
    assert_eq!(
        third.as_ref().map(|(s, _)| s),
        full_b.as_ref(),
        "B reusing itself differs from a full decode of B"
    );

    // The merged state depends only on the files present.
    let ext = if format == Format::Json {
        "json"
    } else {
        "yaml"
    };
    let (pa, pb) = (format!("a.{ext}"), format!("b.{ext}"));
    let state = |files: &mut Files| files.state().unwrap_or_else(|e| panic!("{e}"));
    let mut ab = Files::default();
    ab.put(&pa, Some(&file_a));
    ab.put(&pb, Some(&file_b));
    let mut ba = Files::default();
    ba.put(&pb, Some(&file_b));
    ba.put(&pa, Some(&file_a));
    assert_eq!(
        state(&mut ab),
        state(&mut ba),
        "load order changes the state"
    );
    ab.put(&pa, None);
    let mut only_b = Files::default();
    only_b.put(&pb, Some(&file_b));
    assert_eq!(state(&mut ab), state(&mut only_b), "removing A");
    // A replaced by B (an edit of the file), beside B loaded afresh.
    let mut replaced = Files::default();
    replaced.put(&pb, Some(&file_a));
    let _ = state(&mut replaced);
    replaced.put(&pb, Some(&file_b));
    assert_eq!(state(&mut replaced), state(&mut only_b), "A replaced by B");
});
