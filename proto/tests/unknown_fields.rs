//! Handling of fields this build does not know.
//!
//! Binary: proto3 requires parsers to skip unknown field numbers, so a newer
//! peer (or an older one still sending a now-reserved field) can talk to us.
//! prost skips them and does not keep them, so re-encoding drops them.
//!
//! JSON: the proto3 JSON spec says parsers reject unknown fields unless told
//! otherwise. We keep pbjson's default (reject): JSON here is written by
//! people and tests, and a misspelt field should be an error rather than
//! silently ignored.

mod support;

use felix_proto::{to_dataplane, IpSetUpdate, Message, PolicyId, RouteUpdate, ToDataplane};
use support::{f_i32, f_i64, f_len, f_str, f_varint, key, msg};

fn ipset_body() -> Vec<u8> {
    msg(&[f_str(1, "s:abc"), f_str(2, "10.0.0.0/8"), f_varint(3, 2)])
}

#[test]
fn unknown_binary_fields_of_every_wire_type_are_skipped() {
    let known = msg(&[f_len(2, &ipset_body()), f_varint(15, 5)]);

    let nested_with_unknowns = msg(&[
        ipset_body(),
        f_varint(99, 12345),            // unknown varint
        f_len(4000, b"future payload"), // unknown length-delimited
    ]);
    let with_unknowns = msg(&[
        f_i32(1000, 0xdead_beef), // unknown fixed32 before any known field
        f_len(2, &nested_with_unknowns),
        f_i64(536_870_911, u64::MAX), // the largest legal field number
        f_varint(15, 5),
        f_len(39, &msg(&[f_str(1, "x")])), // a payload number we do not have
    ]);

    let a = ToDataplane::decode(known.as_slice()).unwrap();
    let b = ToDataplane::decode(with_unknowns.as_slice()).unwrap();
    assert_eq!(a, b);
    assert!(matches!(
        b.payload,
        Some(to_dataplane::Payload::IpsetUpdate(_))
    ));
    // Unknown fields are not preserved.
    assert_eq!(b.encode_to_vec(), known);
}

#[test]
fn reserved_field_numbers_from_old_peers_are_skipped() {
    // PolicyID field 1 (the old tier) and RouteUpdate field 1 (the old
    // single type) are reserved; an old sender may still fill them in.
    let id = PolicyId::decode(
        msg(&[
            f_str(1, "old-tier"),
            f_str(2, "default.p"),
            f_str(4, "GlobalNetworkPolicy"),
        ])
        .as_slice(),
    )
    .unwrap();
    assert_eq!(id.name, "default.p");
    assert_eq!(id.kind, "GlobalNetworkPolicy");

    let r =
        RouteUpdate::decode(msg(&[f_varint(1, 4), f_str(3, "10.0.0.0/24")]).as_slice()).unwrap();
    assert_eq!(r.types, 0);
    assert_eq!(r.dst, "10.0.0.0/24");

    // A payload in one of the reserved ToDataplane slots 35..=38.
    let m = ToDataplane::decode(msg(&[f_len(35, b""), f_varint(15, 1)]).as_slice()).unwrap();
    assert_eq!(m.payload, None);
    assert_eq!(m.sequence_number, 1);
}

#[test]
fn malformed_binary_is_an_error() {
    // Wire types 6 and 7 do not exist.
    for bad_wire_type in [6u8, 7] {
        let bytes = msg(&[key(99, bad_wire_type), vec![0]]);
        assert!(ToDataplane::decode(bytes.as_slice()).is_err());
    }
    // A known field with the wrong wire type: IPSetUpdate.id as a varint.
    assert!(IpSetUpdate::decode(f_varint(1, 7).as_slice()).is_err());
    // Field number 0 is illegal.
    assert!(ToDataplane::decode(msg(&[key(0, 0), vec![1]]).as_slice()).is_err());
    // Length prefix running past the end.
    assert!(ToDataplane::decode(&b"\x12\x05\x0a"[..]).is_err());
}

#[test]
fn unknown_json_fields_are_rejected_at_every_level() {
    let top = serde_json::from_str::<ToDataplane>(r#"{"sequenceNumber":"1","futureField":true}"#);
    let err = top.unwrap_err().to_string();
    assert!(err.contains("futureField"), "{err}");

    let nested = serde_json::from_str::<ToDataplane>(
        r#"{"ipsetUpdate":{"id":"s:x","membrs":["10.0.0.1"]}}"#,
    );
    let err = nested.unwrap_err().to_string();
    assert!(err.contains("membrs"), "{err}");

    // Also for the hand-written RouteUpdate mapping.
    assert!(serde_json::from_str::<RouteUpdate>(r#"{"dst":"10.0.0.0/24","typ":1}"#).is_err());

    // The same documents without the stray field parse.
    assert!(serde_json::from_str::<ToDataplane>(r#"{"sequenceNumber":"1"}"#).is_ok());
    assert!(serde_json::from_str::<ToDataplane>(
        r#"{"ipsetUpdate":{"id":"s:x","members":["10.0.0.1"]}}"#
    )
    .is_ok());
}
