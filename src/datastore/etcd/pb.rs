//! The few etcd v3 protobuf messages felix-rs sends over native gRPC,
//! written as prost structs.
//!
//! Field numbers and types follow etcd's published API
//! (`etcdserverpb` `RangeRequest`/`RangeResponse`/`ResponseHeader` and
//! `mvccpb` `KeyValue`); fields felix-rs never reads are still declared
//! where a wrong wire type would otherwise be skipped silently, so a
//! decoding mismatch shows up in the range-equivalence tests.  Unknown
//! fields are skipped by prost, so newer etcd versions stay readable.

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// `etcdserverpb.RangeRequest` (sorting and the min/max revision filters
/// are not used and not declared: absent fields are etcd's defaults).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub limit: i64,
    #[prost(int64, tag = "4")]
    pub revision: i64,
    #[prost(bool, tag = "7")]
    pub serializable: bool,
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
    #[prost(bool, tag = "9")]
    pub count_only: bool,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    #[prost(bool, tag = "3")]
    pub more: bool,
    #[prost(int64, tag = "4")]
    pub count: i64,
}

/// `mvccpb.KeyValue`.  Key and value are `Bytes`: decoded from a `Bytes`
/// answer they are slices of it, not copies.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: bytes::Bytes,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
    #[prost(bytes = "bytes", tag = "5")]
    pub value: bytes::Bytes,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Hand-assembled wire bytes decode into the expected fields, so the
    /// tags above are the ones on the wire (not just self-consistent).
    #[test]
    fn range_response_decodes_from_wire_bytes() {
        let mut kv = Vec::new();
        kv.extend_from_slice(&[0x0a, 2, b'/', b'a']); // key = "/a"
        kv.extend_from_slice(&[0x10, 5]); // create_revision = 5
        kv.extend_from_slice(&[0x18, 7]); // mod_revision = 7
        kv.extend_from_slice(&[0x20, 2]); // version = 2
        kv.extend_from_slice(&[0x2a, 2, b'{', b'}']); // value = "{}"
        let mut msg = vec![0x0a, 2, 0x18, 9]; // header { revision = 9 }
        msg.push(0x12);
        msg.push(kv.len() as u8);
        msg.extend_from_slice(&kv);
        msg.extend_from_slice(&[0x18, 1]); // more = true
        msg.extend_from_slice(&[0x20, 3]); // count = 3
        let resp = RangeResponse::decode(bytes::Bytes::from(msg)).unwrap();
        assert_eq!(resp.header.unwrap().revision, 9);
        assert!(resp.more);
        assert_eq!(resp.count, 3);
        assert_eq!(resp.kvs.len(), 1);
        let kv = &resp.kvs[0];
        assert_eq!(&kv.key[..], b"/a");
        assert_eq!(&kv.value[..], b"{}");
        assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 7, 2));
    }

    #[test]
    fn range_request_encodes_etcd_tags() {
        let req = RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            limit: 3,
            revision: 4,
            keys_only: true,
            ..Default::default()
        };
        assert_eq!(
            req.encode_to_vec(),
            vec![0x0a, 1, b'k', 0x12, 1, b'l', 0x18, 3, 0x20, 4, 0x40, 1]
        );
    }
}
