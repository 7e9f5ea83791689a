//! Golden binary vectors built by hand from field numbers and wire types,
//! decoded with prost and re-encoded byte for byte.
//!
//! prost (like Go's protobuf) writes fields in ascending field-number order,
//! a oneof at the position of its lowest number, so the golden bytes below
//! are laid out in that order and re-encoding must reproduce them exactly.

mod support;

use std::collections::BTreeMap;

use felix_proto::{
    from_dataplane, ip_set_update::IpSetType, protocol::NumberOrName, rule, to_dataplane,
    FromDataplane, IpVersion, LiveMigrationRole, Message, ToDataplane,
};
use support::{f_i64, f_len, f_str, f_varint, msg};

/// Output of `protoc --encode` for the message in
/// `active_policy_update_rules_with_ports_and_negations`.
const POLICY_FROM_PROTOC: &[&str] = &[
    "3ad4010a27121164656661756c742e616c6c6f772d7765621a036e7331220d4e6574776f726b506f",
    "6c69637912a8010a6f0a05616c6c6f7710041a051203746370220a31302e302e302e302f383a0408",
    "5010503a0608c03e10903f5a05733a647374b206020811ba060b31302e312e302e302f3136d20604",
    "08161016ea0605733a62616492070d726f6c65203d3d202777656227ca0c0972756c652d69642d31",
    "0a130a0464656e791a0208014a0408031004d8060812090a05616c6c6f77400020012a036e733132",
    "05616c6c2829420764656661756c74782a",
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_to(bytes: &[u8]) -> ToDataplane {
    ToDataplane::decode(bytes).unwrap()
}

#[test]
fn ipset_update_literal_bytes_decode_and_reencode() {
    // ToDataplane {
    //   2 (LEN, 31 bytes) ipset_update: IPSetUpdate {
    //     1 (LEN) id = "s:abc"
    //     2 (LEN) members = "10.0.0.0/8"
    //     2 (LEN) members = "fd00::/8"
    //     3 (VARINT) type = NET (2)
    //   }
    //   15 (VARINT) sequence_number = 300  -> key 0x78, value 0xac 0x02
    // }
    let golden: &[u8] =
        b"\x12\x1f\x0a\x05s:abc\x12\x0a10.0.0.0/8\x12\x08fd00::/8\x18\x02\x78\xac\x02";

    // The helper writer must agree with the hand-spelled bytes.
    let built = msg(&[
        f_len(
            2,
            &msg(&[
                f_str(1, "s:abc"),
                f_str(2, "10.0.0.0/8"),
                f_str(2, "fd00::/8"),
                f_varint(3, 2),
            ]),
        ),
        f_varint(15, 300),
    ]);
    assert_eq!(built, golden);

    let m = decode_to(golden);
    assert_eq!(m.sequence_number, 300);
    let Some(to_dataplane::Payload::IpsetUpdate(u)) = &m.payload else {
        panic!("wrong payload: {:?}", m.payload);
    };
    assert_eq!(u.id, "s:abc");
    assert_eq!(u.members, vec!["10.0.0.0/8", "fd00::/8"]);
    assert_eq!(u.r#type(), IpSetType::Net);
    assert_eq!(
        felix_proto::payload_name(m.payload.as_ref().unwrap()),
        "IPSetUpdate"
    );

    assert_eq!(m.encode_to_vec(), golden);
}

#[test]
fn field_order_on_the_wire_does_not_matter_for_decoding() {
    // Same message as above with sequence_number first and the members of
    // the set message interleaved differently.
    let reordered = msg(&[
        f_varint(15, 300),
        f_len(
            2,
            &msg(&[
                f_varint(3, 2),
                f_str(2, "10.0.0.0/8"),
                f_str(1, "s:abc"),
                f_str(2, "fd00::/8"),
            ]),
        ),
    ]);
    let canonical: &[u8] =
        b"\x12\x1f\x0a\x05s:abc\x12\x0a10.0.0.0/8\x12\x08fd00::/8\x18\x02\x78\xac\x02";
    assert_eq!(decode_to(&reordered), decode_to(canonical));
    assert_eq!(decode_to(&reordered).encode_to_vec(), canonical);
}

#[test]
fn in_sync_is_an_empty_but_present_payload() {
    // 1 (LEN, 0 bytes) in_sync; sequence_number 0 is omitted.
    let golden: &[u8] = b"\x0a\x00";
    let m = decode_to(golden);
    assert_eq!(m.sequence_number, 0);
    assert!(matches!(m.payload, Some(to_dataplane::Payload::InSync(_))));
    assert_eq!(m.encode_to_vec(), golden);

    // With no payload at all, nothing is written.
    assert!(ToDataplane::default().encode_to_vec().is_empty());
}

#[test]
fn workload_endpoint_update_nested_id_and_endpoint() {
    let id = msg(&[f_str(2, "k8s"), f_str(3, "default/pod-1"), f_str(4, "eth0")]);
    let tier = msg(&[
        f_str(1, "default"),
        f_len(
            2,
            &msg(&[
                f_str(2, "default.allow-all"),
                f_str(4, "GlobalNetworkPolicy"),
            ]),
        ),
        f_str(4, "Deny"),
    ]);
    let nat = msg(&[f_str(1, "172.16.0.5"), f_str(2, "10.65.0.2")]);
    let endpoint = msg(&[
        f_str(1, "active"),
        f_str(2, "cali12345"),
        f_str(3, "ee:ee:ee:ee:ee:ee"),
        f_str(4, "kns.default"),
        f_str(4, "ksa.default.default"),
        f_str(5, "10.65.0.2/32"),
        f_str(6, "fd00::2/128"),
        f_len(7, &tier),
        f_len(8, &nat),
        // map<string,string> annotations: one entry message per pair,
        // key = 1, value = 2.
        f_len(11, &msg(&[f_str(1, "a"), f_str(2, "1")])),
        f_len(11, &msg(&[f_str(1, "b"), f_str(2, "2")])),
        f_len(14, &msg(&[f_varint(1, 1)])),
        f_varint(16, 1),
        f_varint(17, 2),
    ]);
    let golden = msg(&[
        f_len(11, &msg(&[f_len(1, &id), f_len(5, &endpoint)])),
        f_varint(15, 7),
    ]);

    let m = decode_to(&golden);
    assert_eq!(m.sequence_number, 7);
    let Some(to_dataplane::Payload::WorkloadEndpointUpdate(u)) = &m.payload else {
        panic!("wrong payload: {:?}", m.payload);
    };
    let id = u.id.as_ref().unwrap();
    assert_eq!(id.orchestrator_id, "k8s");
    assert_eq!(id.workload_id, "default/pod-1");
    assert_eq!(id.endpoint_id, "eth0");
    let ep = u.endpoint.as_ref().unwrap();
    assert_eq!(ep.state, "active");
    assert_eq!(ep.name, "cali12345");
    assert_eq!(ep.mac, "ee:ee:ee:ee:ee:ee");
    assert_eq!(ep.profile_ids, vec!["kns.default", "ksa.default.default"]);
    assert_eq!(ep.ipv4_nets, vec!["10.65.0.2/32"]);
    assert_eq!(ep.ipv6_nets, vec!["fd00::2/128"]);
    assert_eq!(ep.tiers.len(), 1);
    assert_eq!(ep.tiers[0].name, "default");
    assert_eq!(ep.tiers[0].ingress_policies[0].name, "default.allow-all");
    assert_eq!(ep.tiers[0].ingress_policies[0].kind, "GlobalNetworkPolicy");
    assert!(ep.tiers[0].egress_policies.is_empty());
    assert_eq!(ep.tiers[0].default_action, "Deny");
    assert_eq!(ep.ipv4_nat[0].ext_ip, "172.16.0.5");
    assert_eq!(ep.ipv4_nat[0].int_ip, "10.65.0.2");
    let want: BTreeMap<String, String> = [("a", "1"), ("b", "2")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(ep.annotations, want);
    let skip = ep.skip_redir.as_ref().unwrap();
    assert!(skip.egress);
    assert!(!skip.ingress);
    assert!(ep.is_istio_ambient);
    assert_eq!(ep.live_migration_role(), LiveMigrationRole::Target);

    // Maps are BTreeMaps, so entries re-encode in key order.
    assert_eq!(m.encode_to_vec(), golden);
}

#[test]
fn active_policy_update_rules_with_ports_and_negations() {
    let rule_allow = msg(&[
        f_str(1, "allow"),
        f_varint(2, 4),                     // ip_version = IPV4
        f_len(3, &msg(&[f_str(2, "tcp")])), // protocol by name
        f_str(4, "10.0.0.0/8"),             // src_net
        f_len(7, &msg(&[f_varint(1, 80), f_varint(2, 80)])),
        f_len(7, &msg(&[f_varint(1, 8000), f_varint(2, 8080)])),
        f_str(11, "s:dst"),                                    // dst_ip_set_ids
        f_len(102, &msg(&[f_varint(1, 17)])),                  // not_protocol = 17
        f_str(103, "10.1.0.0/16"),                             // not_src_net
        f_len(106, &msg(&[f_varint(1, 22), f_varint(2, 22)])), // not_dst_ports
        f_str(109, "s:bad"),                                   // not_src_ip_set_ids
        f_str(114, "role == 'web'"),                           // original_src_selector
        f_str(201, "rule-id-1"),
    ]);
    let rule_icmp = msg(&[
        f_str(1, "deny"),
        f_len(3, &msg(&[f_varint(1, 1)])), // protocol 1
        f_len(9, &msg(&[f_varint(1, 3), f_varint(2, 4)])), // icmp type 3 code 4
        f_varint(107, 8),                  // not_icmp_type 8
    ]);
    // A oneof member keeps presence even at its default value: icmp_type 0.
    let rule_icmp_zero = msg(&[f_str(1, "allow"), f_varint(8, 0)]);
    let policy = msg(&[
        f_len(1, &rule_allow),
        f_len(1, &rule_icmp),
        f_len(2, &rule_icmp_zero),
        f_varint(4, 1), // pre_dnat
        f_str(5, "ns1"),
        f_str(6, "all()"),
        f_str(8, "default"),
    ]);
    let id = msg(&[
        f_str(2, "default.allow-web"),
        f_str(3, "ns1"),
        f_str(4, "NetworkPolicy"),
    ]);
    let golden = msg(&[
        f_len(7, &msg(&[f_len(1, &id), f_len(2, &policy)])),
        f_varint(15, 42),
    ]);

    // Independent oracle: the reference `protoc --encode=felix.ToDataplane`
    // produced these bytes from the equivalent text-format message.
    assert_eq!(hex(&golden), POLICY_FROM_PROTOC.concat());

    let m = decode_to(&golden);
    assert_eq!(m.sequence_number, 42);
    let Some(to_dataplane::Payload::ActivePolicyUpdate(u)) = &m.payload else {
        panic!("wrong payload: {:?}", m.payload);
    };
    let id = u.id.as_ref().unwrap();
    assert_eq!(
        (id.name.as_str(), id.namespace.as_str(), id.kind.as_str()),
        ("default.allow-web", "ns1", "NetworkPolicy")
    );
    let p = u.policy.as_ref().unwrap();
    assert_eq!(p.namespace, "ns1");
    assert!(p.pre_dnat);
    assert!(!p.untracked);
    assert_eq!(p.original_selector, "all()");
    assert_eq!(p.tier, "default");
    assert_eq!(p.inbound_rules.len(), 2);
    assert_eq!(p.outbound_rules.len(), 1);

    let r = &p.inbound_rules[0];
    assert_eq!(r.action, "allow");
    assert_eq!(r.ip_version(), IpVersion::Ipv4);
    assert_eq!(
        r.protocol.as_ref().unwrap().number_or_name,
        Some(NumberOrName::Name("tcp".into()))
    );
    assert_eq!(r.src_net, vec!["10.0.0.0/8"]);
    let ports: Vec<(i32, i32)> = r.dst_ports.iter().map(|p| (p.first, p.last)).collect();
    assert_eq!(ports, vec![(80, 80), (8000, 8080)]);
    assert_eq!(r.dst_ip_set_ids, vec!["s:dst"]);
    assert_eq!(
        r.not_protocol.as_ref().unwrap().number_or_name,
        Some(NumberOrName::Number(17))
    );
    assert_eq!(r.not_src_net, vec!["10.1.0.0/16"]);
    assert_eq!(
        (r.not_dst_ports[0].first, r.not_dst_ports[0].last),
        (22, 22)
    );
    assert_eq!(r.not_src_ip_set_ids, vec!["s:bad"]);
    assert_eq!(r.original_src_selector, "role == 'web'");
    assert_eq!(r.rule_id, "rule-id-1");
    assert_eq!(r.icmp, None);
    assert_eq!(r.not_icmp, None);

    let r = &p.inbound_rules[1];
    let Some(rule::Icmp::IcmpTypeCode(tc)) = &r.icmp else {
        panic!("wrong icmp: {:?}", r.icmp);
    };
    assert_eq!((tc.r#type, tc.code), (3, 4));
    assert_eq!(r.not_icmp, Some(rule::NotIcmp::NotIcmpType(8)));

    assert_eq!(p.outbound_rules[0].icmp, Some(rule::Icmp::IcmpType(0)));

    assert_eq!(m.encode_to_vec(), golden);
}

#[test]
fn from_dataplane_status_with_double_field() {
    let golden = msg(&[
        f_len(
            3,
            &msg(&[
                f_str(1, "2024-01-01T00:00:00Z"),
                f_i64(2, 12.5f64.to_bits()),
            ]),
        ),
        f_varint(8, 9),
    ]);
    let m = FromDataplane::decode(golden.as_slice()).unwrap();
    assert_eq!(m.sequence_number, 9);
    let Some(from_dataplane::Payload::ProcessStatusUpdate(s)) = &m.payload else {
        panic!("wrong payload: {:?}", m.payload);
    };
    assert_eq!(s.iso_timestamp, "2024-01-01T00:00:00Z");
    assert_eq!(s.uptime, 12.5);
    assert_eq!(m.encode_to_vec(), golden);
}

#[test]
fn negative_int32_is_a_sign_extended_ten_byte_varint() {
    // RuleTrace.rule_num = -1 (field 5): int32 negatives use 10 bytes.
    let golden = f_varint(5, u64::MAX);
    assert_eq!(golden.len(), 11);
    let t = felix_proto::RuleTrace::decode(golden.as_slice()).unwrap();
    assert_eq!(t.rule_num, -1);
    assert_eq!(t.encode_to_vec(), golden);
}

#[test]
fn truncated_input_is_an_error_not_a_panic() {
    let golden: &[u8] =
        b"\x12\x1f\x0a\x05s:abc\x12\x0a10.0.0.0/8\x12\x08fd00::/8\x18\x02\x78\xac\x02";
    for cut in 1..golden.len() {
        // Every strict prefix either fails or (when it ends on a field
        // boundary) decodes to something other than the full message.
        if let Ok(m) = ToDataplane::decode(&golden[..cut]) {
            assert_ne!(m, decode_to(golden), "prefix of {cut} bytes");
        }
    }
    assert!(ToDataplane::decode(&golden[..10]).is_err());
}
