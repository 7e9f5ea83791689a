//! Fuzz target: the etcd syncer's decoding of one stored key and value
//! (`src/datastore/etcd/keys.rs`, `value.rs`).
//!
//! Input: one control byte, then a key (or the key's last segments), a NUL and the value.
//! The control byte's low four bits pick the key: a kind's prefix followed by the given
//! segments, or (15) the key as given.
//!
//! Checked, whatever the bytes:
//! * no panic; a key the syncer reads names the identity it was built from (the key layout
//!   round-trips), and a failure is a message naming the key;
//! * what `felix datastore apply` stores for a valid v3 JSON document (bit 0x10 of the
//!   control byte: the value is such a document) reads back as the same model entries the
//!   file datastore gives for that document.

#![no_main]

use felix::datastore::etcd::apply::{stored_form, Prepared, POLICY_NAME_ANNOTATION};
use felix::datastore::etcd::keys;
use felix::datastore::fuzzing::etcd_decode;
use felix::resources::{decode_documents, Format, Kind};
use libfuzzer_sys::fuzz_target;

fn check_read(key: &[u8], value: &[u8]) {
    let Some((id, result)) = etcd_decode(key, value) else {
        return;
    };
    let key = std::str::from_utf8(key).expect("a key the syncer reads is UTF-8");
    if id.kind == Kind::IPAMBlock {
        assert!(key.ends_with(&format!("/block/{}", id.name)), "{key} {id}");
    } else {
        let again = keys::resource_key(id.kind, id.namespace.as_deref(), &id.name);
        assert_eq!(again, key, "{id}");
    }
    if let Err(message) = &result {
        assert!(
            message.starts_with(key),
            "{message:?} does not name {key:?}"
        );
    }
}

/// A valid v3 document stored as calicoctl stores it reads back as the file datastore reads it.
fn check_round_trip(value: &[u8]) {
    let Ok(text) = std::str::from_utf8(value) else {
        return;
    };
    let Ok(docs) = decode_documents(text, "v.json", Format::Json) else {
        return;
    };
    let [doc] = &docs[..] else {
        return;
    };
    let Ok(entries) = &doc.result else {
        return;
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    if json
        .pointer("/metadata/annotations")
        .is_some_and(|a| a.get(POLICY_NAME_ANNOTATION).is_some())
    {
        // The etcd reader drops that annotation (as upstream does); the file reader keeps it.
        return;
    }
    let p = Prepared {
        id: doc.id.clone(),
        origin: "v.json:1".into(),
        doc: json,
    };
    let Ok((key, stored)) = stored_form(&p, None, "2026-01-01T00:00:00Z", "uid-1") else {
        return;
    };
    let stored = stored.to_string();
    let Some((id, back)) = etcd_decode(key.as_bytes(), stored.as_bytes()) else {
        panic!("stored key {key:?} of {} is not read", doc.id);
    };
    if doc.id.kind != Kind::IPAMBlock {
        assert_eq!(id, doc.id, "{key}");
    }
    match back {
        Ok(back) => assert_eq!(
            format!("{back:?}"),
            format!("{entries:?}"),
            "stored as {key} {stored}"
        ),
        Err(e) => panic!("stored form does not read back: {e}\n{key} {stored}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&op, rest)) = data.split_first() else {
        return;
    };
    let (segments, value) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let key = match Kind::ALL.get(usize::from(op & 0x0f)) {
        Some(&Kind::IPAMBlock) => {
            let family = if op & 0x20 != 0 { "ipv6" } else { "ipv4" };
            let mut k =
                format!("{}{family}/block/", keys::kind_prefix(Kind::IPAMBlock)).into_bytes();
            k.extend_from_slice(segments);
            k
        }
        Some(&kind) => {
            let mut k = keys::kind_prefix(kind).into_bytes();
            k.extend_from_slice(segments);
            k
        }
        None => segments.to_vec(),
    };
    check_read(&key, value);
    if op & 0x10 != 0 {
        check_round_trip(value);
    }
});
