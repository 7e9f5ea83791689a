//! Enum numbers and names, and checks driven by the compiled descriptor
//! (`FILE_DESCRIPTOR_SET`): every oneof payload decodes to a variant whose
//! `payload_name` is the declared message name, and the reserved slots
//! that keep us wire-compatible with upstream are still reserved.

mod support;

use felix_proto::{
    from_dataplane_payload_name, ip_set_update::IpSetType, payload_name, rule_trace, statistic,
    Action, FromDataplane, IpPoolType, IpVersion, LiveMigrationRole, Message, RouteType,
    RouteUpdate, ToDataplane, FILE_DESCRIPTOR_SET,
};
use prost_types::{DescriptorProto, FileDescriptorSet};
use support::{f_len, msg};

#[test]
fn enum_numbers_match_the_wire_contract() {
    assert_eq!(IpSetType::Ip as i32, 0);
    assert_eq!(IpSetType::IpAndPort as i32, 1);
    assert_eq!(IpSetType::Net as i32, 2);

    assert_eq!(IpVersion::Any as i32, 0);
    assert_eq!(IpVersion::Ipv4 as i32, 4);
    assert_eq!(IpVersion::Ipv6 as i32, 6);

    let route_bits = [
        (RouteType::CidrInfo, 0),
        (RouteType::RemoteWorkload, 1),
        (RouteType::RemoteHost, 2),
        (RouteType::LocalWorkload, 4),
        (RouteType::LocalHost, 8),
        (RouteType::RemoteTunnel, 16),
        (RouteType::LocalTunnel, 32),
    ];
    for (t, n) in route_bits {
        assert_eq!(t as i32, n, "{t:?}");
    }

    assert_eq!(IpPoolType::None as i32, 0);
    assert_eq!(IpPoolType::NoEncap as i32, 1);
    assert_eq!(IpPoolType::Vxlan as i32, 2);
    assert_eq!(IpPoolType::Ipip as i32, 3);

    assert_eq!(LiveMigrationRole::NoRole as i32, 0);
    assert_eq!(LiveMigrationRole::Source as i32, 1);
    assert_eq!(LiveMigrationRole::Target as i32, 2);

    assert_eq!(Action::Allowed as i32, 0);
    assert_eq!(Action::Denied as i32, 1);
    assert_eq!(statistic::Direction::Out as i32, 1);
    assert_eq!(statistic::Relativity::Delta as i32, 1);
    assert_eq!(statistic::Kind::Bytes as i32, 1);
    assert_eq!(rule_trace::Direction::Outbound as i32, 1);
}

#[test]
fn enum_names_are_the_proto_names() {
    assert_eq!(IpSetType::IpAndPort.as_str_name(), "IP_AND_PORT");
    assert_eq!(IpSetType::from_str_name("NET"), Some(IpSetType::Net));
    assert_eq!(IpVersion::Ipv6.as_str_name(), "IPV6");
    assert_eq!(
        RouteType::from_str_name("REMOTE_TUNNEL"),
        Some(RouteType::RemoteTunnel)
    );
    assert_eq!(IpPoolType::NoEncap.as_str_name(), "NO_ENCAP");
    // Values with no name are rejected by the typed conversion.
    assert!(IpSetType::try_from(3).is_err());
    assert!(IpVersion::try_from(5).is_err());
}

#[test]
fn route_types_bitmap_helpers() {
    let mut r = RouteUpdate::default();
    assert!(r.has_type(RouteType::CidrInfo));
    r.add_type(RouteType::LocalWorkload);
    r.add_type(RouteType::LocalTunnel);
    assert_eq!(r.types, 36);
    assert!(r.has_type(RouteType::LocalWorkload));
    assert!(r.has_type(RouteType::LocalTunnel));
    assert!(!r.has_type(RouteType::LocalHost));
    assert!(!r.has_type(RouteType::CidrInfo));
    // The generated getter cannot represent a combination.
    assert_eq!(r.types(), RouteType::CidrInfo);
}

fn descriptor(name: &str) -> DescriptorProto {
    let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    let file = set
        .file
        .iter()
        .find(|f| f.name() == "felixbackend.proto")
        .unwrap();
    assert_eq!(file.package(), "felix");
    file.message_type
        .iter()
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no message {name}"))
        .clone()
}

/// (field number, declared message name) of every member of oneof `payload`.
fn payload_members(message: &str) -> Vec<(u32, String)> {
    let d = descriptor(message);
    let oneof = d
        .oneof_decl
        .iter()
        .position(|o| o.name() == "payload")
        .unwrap();
    d.field
        .iter()
        .filter(|f| f.oneof_index == Some(oneof as i32))
        .map(|f| {
            let ty = f.type_name().trim_start_matches(".felix.").to_string();
            (f.number() as u32, ty)
        })
        .collect()
}

#[test]
fn payload_name_is_the_declared_message_name_for_every_to_dataplane_payload() {
    let members = payload_members("ToDataplane");
    assert_eq!(members.len(), 33);
    for (number, type_name) in members {
        // An empty sub-message in slot `number` selects that variant.
        let m = ToDataplane::decode(f_len(number, &[]).as_slice()).unwrap();
        let payload = m
            .payload
            .unwrap_or_else(|| panic!("field {number} not decoded"));
        assert_eq!(payload_name(&payload), type_name, "field {number}");
    }
}

#[test]
fn payload_name_is_the_declared_message_name_for_every_from_dataplane_payload() {
    let members = payload_members("FromDataplane");
    assert_eq!(members.len(), 7);
    for (number, type_name) in members {
        let m = FromDataplane::decode(msg(&[f_len(number, &[])]).as_slice()).unwrap();
        let payload = m
            .payload
            .unwrap_or_else(|| panic!("field {number} not decoded"));
        assert_eq!(
            from_dataplane_payload_name(&payload),
            type_name,
            "field {number}"
        );
    }
}

fn reserved(message: &str) -> (Vec<(i32, i32)>, Vec<String>) {
    let d = descriptor(message);
    let ranges = d
        .reserved_range
        .iter()
        .map(|r| (r.start(), r.end()))
        .collect();
    (ranges, d.reserved_name.clone())
}

#[test]
fn retired_field_numbers_stay_reserved() {
    // Descriptor ranges are half-open: [start, end).
    let (ranges, names) = reserved("ToDataplane");
    let numbers: Vec<i32> = ranges.iter().flat_map(|&(s, e)| s..e).collect();
    assert_eq!(numbers, vec![35, 36, 37, 38]);
    assert_eq!(names.len(), 4);

    for (message, number, name) in [
        ("PolicyID", 1, "tier"),
        ("WorkloadEndpointID", 1, "hostname"),
        ("HostEndpointID", 1, "hostname"),
        ("RouteUpdate", 1, "type"),
        ("Rule", 200, "log_prefix"),
    ] {
        let (ranges, names) = reserved(message);
        assert_eq!(ranges, vec![(number, number + 1)], "{message}");
        assert_eq!(names, vec![name.to_string()], "{message}");
    }
}
