//! Decoding stored etcd values into [`crate::model`] entries.
//!
//! Resource values are the v3 object JSON calicoctl stores; they go through
//! the same decoder, validator and converter as the file datastore
//! ([`crate::resources::decode_documents`]).  The key is authoritative for
//! identity: a value whose kind, namespace or name disagrees with its key
//! is rejected.  `IPAMBlock` values are upstream's `AllocationBlock` JSON;
//! only `cidr` and `affinity` matter, and the CIDR must be the one in the
//! key.
//!
//! Every failure is one line naming the key, suitable for logging; the
//! caller treats the resource as absent.

use serde::Deserialize;

use super::keys;
use crate::model::{Key, Value};
use crate::resources::{decode_documents, Format, Kind, ResourceId};

/// The outcome for one stored value.
pub(crate) type Entries = Result<Vec<(Key, Value)>, String>;

/// The fields of upstream's `AllocationBlock` that matter here; the rest
/// of the bookkeeping is ignored.
#[derive(Deserialize)]
struct AllocationBlock {
    #[serde(default)]
    cidr: Option<String>,
    #[serde(default)]
    affinity: Option<String>,
}

/// Decodes the value stored under `key` (whose identity is `id`, from
/// [`keys::parse_key`]).
pub(crate) fn decode(key: &str, id: &ResourceId, value: &[u8]) -> Entries {
    let text =
        std::str::from_utf8(value).map_err(|_| format!("{key}: value is not valid UTF-8"))?;
    if id.kind == Kind::IPAMBlock {
        return decode_block(key, id, text);
    }
    decode_resource(key, id, text)
}

fn decode_resource(key: &str, id: &ResourceId, text: &str) -> Entries {
    let docs = decode_documents(text, key, Format::Json)
        .map_err(|e| format!("{e} (treated as absent)"))?;
    let mut docs = docs.into_iter();
    let (Some(doc), None) = (docs.next(), docs.next()) else {
        return Err(format!(
            "{key}: value must hold exactly one {} object (treated as absent)",
            id.kind
        ));
    };
    if doc.id != *id {
        return Err(format!(
            "{key}: value describes {} but the key names {} (treated as absent)",
            doc.id, id
        ));
    }
    let mut entries = doc
        .result
        .map_err(|e| format!("{key}: invalid {id}: {e} (treated as absent)"))?;
    if matches!(id.kind, Kind::GlobalNetworkPolicy | Kind::NetworkPolicy) {
        for (_, value) in &mut entries {
            strip_name_annotation(value);
        }
    }
    Ok(entries)
}

/// Removes the annotation upstream's etcd backend adds to policies to keep
/// their name (upstream drops it again when reading, so consumers never
/// see it).
fn strip_name_annotation(value: &mut Value) {
    if let Value::Policy(policy) = value {
        if policy
            .annotations
            .contains_key(super::apply::POLICY_NAME_ANNOTATION)
        {
            std::sync::Arc::make_mut(policy)
                .annotations
                .remove(super::apply::POLICY_NAME_ANNOTATION);
        }
    }
}

fn decode_block(key: &str, id: &ResourceId, text: &str) -> Entries {
    let block: AllocationBlock = serde_json::from_str(text)
        .map_err(|e| format!("{key}: bad IPAM block JSON: {e} (treated as absent)"))?;
    let Some(key_cidr) = keys::block_cidr(&id.name) else {
        return Err(format!(
            "{key}: key does not name a CIDR (treated as absent)"
        ));
    };
    let cidr = block.cidr.unwrap_or_default();
    let value_cidr = cidr.parse::<ipnet::IpNet>().ok().map(|c| c.trunc());
    if value_cidr != Some(key_cidr.trunc()) {
        return Err(format!(
            "{key}: block cidr {cidr:?} does not match the key (treated as absent)"
        ));
    }
    // The resource name as upstream's Kubernetes backend spells a block (`fd00-65-1---122`):
    // the key's segment keeps an IPv6 CIDR's colons, which no resource name may hold.
    let name = id.name.replace(':', "-");
    let doc = serde_json::json!({
        "apiVersion": "projectcalico.org/v3",
        "kind": "IPAMBlock",
        "metadata": { "name": &name },
        "spec": { "cidr": cidr, "affinity": block.affinity },
    });
    let id = ResourceId { name, ..id.clone() };
    decode_resource(key, &id, &doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(key: &str) -> ResourceId {
        keys::parse_key(key).unwrap()
    }

    #[test]
    fn ipv6_ipam_blocks_decode_although_their_key_holds_colons() {
        let key = "/calico/ipam/v2/assignment/ipv6/block/fd00:65:1::-122";
        let value = br#"{"cidr":"fd00:65:1::/122","affinity":"host:node1"}"#;
        let entries = decode(key, &id_of(key), value).unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert!(matches!(&entries[0].1, Value::IpamBlock(_)));
    }

    #[test]
    fn resource_values_decode_through_the_v3_decoder() {
        let key = "/calico/resources/v3/projectcalico.org/tiers/t1";
        let value = br#"{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"t1","uid":"4b0c","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"order":10}}"#;
        let entries = decode(key, &id_of(key), value).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, Key::Tier("t1".into()));
    }

    #[test]
    fn the_policy_name_annotation_is_dropped_like_upstream_does() {
        let key = "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/p";
        let value = br#"{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"p","annotations":{"projectcalico.org/metadata":"{\"name\":\"p\"}","keep":"me"}},"spec":{"selector":"all()"}}"#;
        let entries = decode(key, &id_of(key), value).unwrap();
        match &entries[..] {
            [(_, Value::Policy(p))] => {
                assert_eq!(p.annotations.len(), 1, "{:?}", p.annotations);
                assert_eq!(p.annotations.get("keep").map(String::as_str), Some("me"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn identity_must_match_the_key() {
        let key = "/calico/resources/v3/projectcalico.org/tiers/t1";
        let other = br#"{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"t2"},"spec":{}}"#;
        let err = decode(key, &id_of(key), other).unwrap_err();
        assert!(err.contains(key) && err.contains("Tier(t2)"), "{err}");

        let key = "/calico/resources/v3/projectcalico.org/networksets/ns1/s";
        let wrong_ns = br#"{"kind":"NetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"s","namespace":"ns2"},"spec":{}}"#;
        assert!(decode(key, &id_of(key), wrong_ns).is_err());
    }

    #[test]
    fn malformed_and_invalid_values_name_the_key() {
        let key = "/calico/resources/v3/projectcalico.org/globalnetworksets/g";
        for bad in [
            &b"not json"[..],
            &b"\xff\xfe"[..],
            br#"{"kind":"GlobalNetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"g"},"spec":{"nets":["10.0.0.0/33"]}}"#,
        ] {
            let err = decode(key, &id_of(key), bad).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn ipam_blocks_decode_from_allocation_block_json() {
        let key = "/calico/ipam/v2/assignment/ipv4/block/10.65.0.0-26";
        let value = br#"{"cidr":"10.65.0.0/26","affinity":"host:node1","strictAffinity":false,"allocations":[0,null],"unallocated":[1],"attributes":[{"handle_id":"h","secondary":null}],"deleted":false,"affinity_claim_time":"2026-01-01T00:00:00Z"}"#;
        let entries = decode(key, &id_of(key), value).unwrap();
        match &entries[..] {
            [(Key::IpamBlock(c), Value::IpamBlock(b))] => {
                assert_eq!(c.to_string(), "10.65.0.0/26");
                assert_eq!(b.affinity_host.as_deref(), Some("node1"));
            }
            other => panic!("{other:?}"),
        }
        let mismatch = br#"{"cidr":"10.66.0.0/26"}"#;
        assert!(decode(key, &id_of(key), mismatch).is_err());
    }
}
