//! proto3 canonical JSON mapping: exact text for a few messages and
//! encode/decode round trips for many.

use std::collections::BTreeMap;

use felix_proto::{
    from_dataplane, http_match, protocol::NumberOrName, rule, to_dataplane, ActivePolicyUpdate,
    ConfigUpdate, FromDataplane, HttpMatch, IcmpTypeAndCode, IpSetUpdate, Policy, PolicyId,
    PortRange, ProcessStatusUpdate, Protocol, QoSControls, RawConfig, RouteType, RouteUpdate, Rule,
    ServicePort, ServiceUpdate, ToDataplane, TunnelType, WorkloadBpfSkipRedir, WorkloadEndpoint,
    WorkloadEndpointId, WorkloadEndpointUpdate,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::json;

fn round_trip<T>(v: &T) -> T
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(v).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, v, "JSON was {text}");
    back
}

fn td(seq: u64, payload: to_dataplane::Payload) -> ToDataplane {
    ToDataplane {
        sequence_number: seq,
        payload: Some(payload),
    }
}

fn ipset(id: &str, members: &[&str], t: i32) -> IpSetUpdate {
    IpSetUpdate {
        id: id.into(),
        members: members.iter().map(|m| m.to_string()).collect(),
        r#type: t,
    }
}

#[test]
fn ipset_update_exact_text_uses_camel_case_enum_names_and_string_u64() {
    let m = td(
        300,
        to_dataplane::Payload::IpsetUpdate(ipset("s:abc", &["10.0.0.0/8"], 2)),
    );
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"sequenceNumber":"300","ipsetUpdate":{"id":"s:abc","members":["10.0.0.0/8"],"type":"NET"}}"#
    );
}

#[test]
fn default_values_are_omitted() {
    // sequence_number 0, enum value 0 (IP) and empty lists all vanish.
    let m = td(0, to_dataplane::Payload::IpsetUpdate(ipset("s:x", &[], 0)));
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"ipsetUpdate":{"id":"s:x"}}"#
    );

    let m = td(0, to_dataplane::Payload::InSync(Default::default()));
    assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"inSync":{}}"#);

    assert_eq!(
        serde_json::to_string(&ToDataplane::default()).unwrap(),
        "{}"
    );
}

#[test]
fn json_names_follow_protoc_even_for_capitalised_fields() {
    // protoc derives JSON names by dropping underscores and capitalising the
    // next letter; it never lower-cases the first letter, so upper-case
    // proto field names keep their case.
    let skip = WorkloadBpfSkipRedir {
        egress: true,
        ingress: false,
    };
    assert_eq!(serde_json::to_value(skip).unwrap(), json!({"Egress": true}));

    let qos = QoSControls {
        ingress_bandwidth: 1_000_000,
        egress_packet_burst: -5,
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(qos).unwrap(),
        json!({"IngressBandwidth": "1000000", "EgressPacketBurst": "-5"})
    );

    let port = ServicePort {
        protocol: "TCP".into(),
        port: 80,
        node_port: 30080,
    };
    assert_eq!(
        serde_json::to_value(&port).unwrap(),
        json!({"Protocol": "TCP", "Port": 80, "NodePort": 30080})
    );

    let wep = WorkloadEndpoint {
        ipv4_nets: vec!["10.0.0.1/32".into()],
        allow_spoofed_source_prefixes: vec!["10.1.0.0/16".into()],
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&wep).unwrap(),
        json!({"ipv4Nets": ["10.0.0.1/32"], "allowSpoofedSourcePrefixes": ["10.1.0.0/16"]})
    );
}

#[test]
fn parser_accepts_proto_field_names_enum_numbers_and_numeric_u64() {
    let from_names: ToDataplane =
        serde_json::from_str(r#"{"sequence_number":300,"ipset_update":{"id":"s:abc","type":2}}"#)
            .unwrap();
    let from_json_names: ToDataplane = serde_json::from_str(
        r#"{"sequenceNumber":"300","ipsetUpdate":{"id":"s:abc","type":"NET"}}"#,
    )
    .unwrap();
    assert_eq!(from_names, from_json_names);
    assert_eq!(from_names.sequence_number, 300);
}

#[test]
fn unknown_enum_name_is_rejected() {
    let r: Result<IpSetUpdate, _> = serde_json::from_str(r#"{"type":"CIDR"}"#);
    assert!(r.is_err());
}

#[test]
fn round_trip_workload_endpoint_update() {
    let m = td(
        7,
        to_dataplane::Payload::WorkloadEndpointUpdate(WorkloadEndpointUpdate {
            id: Some(WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: "default/pod-1".into(),
                endpoint_id: "eth0".into(),
            }),
            endpoint: Some(WorkloadEndpoint {
                state: "active".into(),
                name: "cali12345".into(),
                profile_ids: vec!["kns.default".into()],
                annotations: BTreeMap::from([("k".into(), "v".into())]),
                skip_redir: Some(WorkloadBpfSkipRedir {
                    egress: false,
                    ingress: true,
                }),
                live_migration_role: 1,
                ..Default::default()
            }),
        }),
    );
    round_trip(&m);
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(
        v["workloadEndpointUpdate"]["endpoint"]["liveMigrationRole"],
        "SOURCE"
    );
    assert_eq!(v["workloadEndpointUpdate"]["id"]["orchestratorId"], "k8s");
}

#[test]
fn round_trip_policy_with_oneofs_and_nested_oneofs() {
    let r = Rule {
        action: "allow".into(),
        ip_version: 6,
        protocol: Some(Protocol {
            number_or_name: Some(NumberOrName::Number(58)),
        }),
        dst_ports: vec![PortRange {
            first: 443,
            last: 443,
        }],
        icmp: Some(rule::Icmp::IcmpTypeCode(IcmpTypeAndCode {
            r#type: 128,
            code: 0,
        })),
        not_icmp: Some(rule::NotIcmp::NotIcmpType(0)),
        http_match: Some(HttpMatch {
            methods: vec!["GET".into()],
            paths: vec![http_match::PathMatch {
                path_match: Some(http_match::path_match::PathMatch::Prefix("/api".into())),
            }],
        }),
        ..Default::default()
    };
    let m = td(
        1,
        to_dataplane::Payload::ActivePolicyUpdate(ActivePolicyUpdate {
            id: Some(PolicyId {
                name: "default.p".into(),
                ..Default::default()
            }),
            policy: Some(Policy {
                inbound_rules: vec![r],
                tier: "default".into(),
                ..Default::default()
            }),
        }),
    );
    round_trip(&m);
    let v = serde_json::to_value(&m).unwrap();
    let rule = &v["activePolicyUpdate"]["policy"]["inboundRules"][0];
    assert_eq!(rule["ipVersion"], "IPV6");
    assert_eq!(rule["protocol"], json!({"number": 58}));
    assert_eq!(rule["icmpTypeCode"], json!({"type": 128}));
    // A oneof member is written even when it holds its default value.
    assert_eq!(rule["notIcmpType"], json!(0));
    assert_eq!(rule["httpMatch"]["paths"][0], json!({"prefix": "/api"}));
}

#[test]
fn round_trip_config_update_with_integer_keyed_map() {
    let m = td(
        2,
        to_dataplane::Payload::ConfigUpdate(ConfigUpdate {
            message: "hello".into(),
            config: BTreeMap::from([("LogSeverityScreen".into(), "Info".into())]),
            source_to_raw_config: BTreeMap::from([(
                3,
                RawConfig {
                    source: "environment variable".into(),
                    config: BTreeMap::from([("FELIX_LOGSEVERITYSCREEN".into(), "info".into())]),
                },
            )]),
        }),
    );
    round_trip(&m);
    let v = serde_json::to_value(&m).unwrap();
    // proto3 JSON writes map keys as strings, integer keys included.
    assert_eq!(
        v["configUpdate"]["sourceToRawConfig"]["3"]["source"],
        "environment variable"
    );
}

#[test]
fn round_trip_from_dataplane_with_double() {
    let m = FromDataplane {
        sequence_number: u64::MAX,
        payload: Some(from_dataplane::Payload::ProcessStatusUpdate(
            ProcessStatusUpdate {
                iso_timestamp: "2024-01-01T00:00:00Z".into(),
                uptime: 1.25,
            },
        )),
    };
    round_trip(&m);
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({"sequenceNumber": "18446744073709551615",
               "processStatusUpdate": {"isoTimestamp": "2024-01-01T00:00:00Z", "uptime": 1.25}})
    );
}

#[test]
fn round_trip_service_update() {
    let m = td(
        4,
        to_dataplane::Payload::ServiceUpdate(ServiceUpdate {
            name: "web".into(),
            namespace: "default".into(),
            r#type: "ClusterIP".into(),
            cluster_ips: vec!["10.96.0.10".into()],
            ports: vec![ServicePort {
                protocol: "UDP".into(),
                port: 53,
                node_port: 0,
            }],
            ..Default::default()
        }),
    );
    round_trip(&m);
}

#[test]
fn route_update_single_type_is_written_by_name() {
    let r = RouteUpdate {
        types: RouteType::RemoteWorkload as i32,
        ip_pool_type: 2,
        dst: "10.65.1.0/26".into(),
        dst_node_name: "node2".into(),
        dst_node_ip: "192.168.0.2".into(),
        tunnel_type: Some(TunnelType {
            vxlan: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"types":"REMOTE_WORKLOAD","ipPoolType":"VXLAN","dst":"10.65.1.0/26","dstNodeName":"node2","dstNodeIp":"192.168.0.2","tunnelType":{"vxlan":true}}"#
    );
    round_trip(&r);
}

#[test]
fn route_update_combined_types_bitmap_is_written_as_integer() {
    let mut r = RouteUpdate {
        dst: "10.65.1.0/26".into(),
        ..Default::default()
    };
    r.add_type(RouteType::RemoteWorkload);
    r.add_type(RouteType::RemoteTunnel);
    assert_eq!(r.types, 17);
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"types": 17, "dst": "10.65.1.0/26"})
    );
    round_trip(&r);

    // Inside a ToDataplane too (the generated code calls our impl).
    let m = td(5, to_dataplane::Payload::RouteUpdate(r));
    round_trip(&m);
}

#[test]
fn route_update_parser_accepts_names_numbers_and_proto_names() {
    let a: RouteUpdate =
        serde_json::from_str(r#"{"types":"LOCAL_HOST","ip_pool_type":"IPIP","same_subnet":true}"#)
            .unwrap();
    let b: RouteUpdate =
        serde_json::from_str(r#"{"types":8,"ipPoolType":3,"sameSubnet":true}"#).unwrap();
    assert_eq!(a, b);
    assert!(a.has_type(RouteType::LocalHost));
    assert!(!a.has_type(RouteType::CidrInfo));

    assert!(serde_json::from_str::<RouteUpdate>(r#"{"types":"NOT_A_TYPE"}"#).is_err());
    assert!(serde_json::from_str::<RouteUpdate>(r#"{"types":1,"types":2}"#).is_err());
    assert_eq!(
        serde_json::from_str::<RouteUpdate>("{}").unwrap(),
        RouteUpdate::default()
    );
    assert_eq!(
        serde_json::to_string(&RouteUpdate::default()).unwrap(),
        "{}"
    );
}

#[test]
fn unnamed_enum_value_in_generated_types_is_a_serialization_error() {
    // 9 has no IPSetType name; pbjson refuses instead of guessing.
    let m = ipset("s:x", &[], 9);
    assert!(serde_json::to_string(&m).is_err());
}
