//! Unit tests of `felix explain`'s walk, named after the invariants in
//! `leg.rs` and `mod.rs`.

use std::collections::BTreeSet;

use felix_config::EndpointToHostAction;
use felix_proto as pb;
use pb::protocol::NumberOrName;

use super::*;

const A: &str = "10.65.0.1";
const B: &str = "10.65.0.2";

fn settings() -> Settings {
    Settings {
        vxlan_port: 4789,
        allow_vxlan: false,
        allow_ipip: false,
        endpoint_to_host: EndpointToHostAction::Drop,
        failsafe_in: vec![ProtoPort {
            protocol: "tcp".into(),
            port: 22,
            net: None,
        }],
        failsafe_out: Vec::new(),
    }
}

fn pid(name: &str) -> pb::PolicyId {
    pb::PolicyId {
        name: name.into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    }
}

fn tcp_rule(action: &str, port: i32) -> pb::Rule {
    pb::Rule {
        action: action.into(),
        protocol: Some(pb::Protocol {
            number_or_name: Some(NumberOrName::Name("TCP".into())),
        }),
        dst_ports: vec![pb::PortRange {
            first: port,
            last: port,
        }],
        ..Default::default()
    }
}

fn any_rule(action: &str) -> pb::Rule {
    pb::Rule {
        action: action.into(),
        ..Default::default()
    }
}

fn tier(name: &str, default_action: &str, ingress: &[&str]) -> pb::TierInfo {
    pb::TierInfo {
        name: name.into(),
        ingress_policies: ingress.iter().map(|p| pid(p)).collect(),
        egress_policies: Vec::new(),
        default_action: default_action.into(),
    }
}

/// A view with workloads A and B (profile `open`: allows everything) and the
/// given ingress policies; B's tiers are `tiers`.
fn world(policies: &[(&str, Vec<pb::Rule>)], tiers: Vec<pb::TierInfo>) -> DataplaneView {
    let mut v = DataplaneView::new();
    for (name, rules) in policies {
        let id = pid(name);
        v.policies.insert(
            (id.kind.clone(), id.namespace.clone(), id.name.clone()),
            pb::Policy {
                inbound_rules: rules.clone(),
                ..Default::default()
            },
        );
    }
    v.profiles.insert(
        "open".into(),
        pb::Profile {
            inbound_rules: vec![any_rule("allow")],
            outbound_rules: vec![any_rule("allow")],
        },
    );
    for (w, ip, t) in [("a", A, Vec::new()), ("b", B, tiers)] {
        v.workload_endpoints.insert(
            ("k8s".into(), format!("ns/{w}"), "eth0".into()),
            pb::WorkloadEndpoint {
                state: "active".into(),
                name: format!("cali{w}"),
                profile_ids: vec!["open".into()],
                ipv4_nets: vec![format!("{ip}/32")],
                tiers: t,
                ..Default::default()
            },
        );
    }
    v
}

fn tcp(dst_port: u16) -> Flow {
    Flow::new(&FlowSpec {
        src: A.parse().expect("addr"),
        dst: B.parse().expect("addr"),
        protocol: None,
        src_port: Some(40000),
        dst_port: Some(dst_port),
        icmp_type: None,
        icmp_code: None,
    })
    .expect("flow")
}

fn ingress(v: &DataplaneView, f: &Flow) -> Leg {
    let e = explain(v, &settings(), "node1", f).expect("explain");
    let l = e.ingress.expect("ingress leg");
    assert_eq!(e.verdict == Verdict::Allow, l.verdict == Verdict::Allow);
    l
}

fn decided(tier: &str, policy: &str, rule: usize, action: &str) -> DecidedBy {
    DecidedBy::Rule {
        tier: Some(tier.into()),
        policy: Some(policy.into()),
        profile: None,
        rule,
        action: action.into(),
        unrenderable: None,
    }
}

#[test]
fn a_tier_without_policies_for_the_direction_is_skipped() {
    let mut t = tier("empty", "Deny", &[]);
    t.egress_policies = vec![pid("p")];
    let v = world(&[("p", vec![any_rule("deny")])], vec![t]);
    let l = ingress(&v, &tcp(80));
    assert_eq!(l.verdict, Verdict::Allow);
    assert!(matches!(l.decided_by, DecidedBy::Rule { profile: Some(ref p), .. } if p == "open"));
}

#[test]
fn pass_skips_the_rest_of_its_tier_and_log_continues() {
    let v = world(
        &[
            ("log-then-pass", vec![any_rule("log"), tcp_rule("pass", 80)]),
            ("deny-all", vec![any_rule("deny")]),
            ("allow-80", vec![tcp_rule("allow", 80)]),
        ],
        vec![
            tier("t1", "Deny", &["log-then-pass", "deny-all"]),
            tier("t2", "Deny", &["allow-80"]),
        ],
    );
    let l = ingress(&v, &tcp(80));
    assert_eq!(l.verdict, Verdict::Allow);
    assert_eq!(l.decided_by, decided("t2", "allow-80", 0, "Allow"));
    let steps: Vec<(String, usize, bool)> = l
        .trace
        .iter()
        .map(|s| (s.policy.clone().unwrap_or_default(), s.rule, s.matched))
        .collect();
    assert_eq!(
        steps,
        vec![
            ("log-then-pass".into(), 0, true),
            ("log-then-pass".into(), 1, true),
            ("allow-80".into(), 0, true),
        ]
    );
    // Port 81: no Pass, so deny-all decides.
    let l = ingress(&v, &tcp(81));
    assert_eq!(l.decided_by, decided("t1", "deny-all", 0, "Deny"));
}

#[test]
fn a_tier_ends_with_its_default_action() {
    let v = world(
        &[("allow-80", vec![tcp_rule("allow", 80)])],
        vec![tier("t1", "Deny", &["allow-80"])],
    );
    let l = ingress(&v, &tcp(81));
    assert_eq!(l.verdict, Verdict::Deny);
    assert_eq!(
        l.decided_by,
        DecidedBy::TierDefault {
            tier: "t1".into(),
            action: "Deny".into()
        }
    );
    let v = world(
        &[("allow-80", vec![tcp_rule("allow", 80)])],
        vec![tier("t1", "Pass", &["allow-80"])],
    );
    let l = ingress(&v, &tcp(81));
    assert_eq!(l.verdict, Verdict::Allow, "Pass default: on to the profile");
}

#[test]
fn profiles_follow_the_tiers_and_nothing_allowing_is_no_match() {
    let mut v = world(&[], Vec::new());
    v.profiles.insert(
        "open".into(),
        pb::Profile {
            inbound_rules: vec![tcp_rule("pass", 80), tcp_rule("allow", 443)],
            outbound_rules: vec![any_rule("allow")],
        },
    );
    let l = ingress(&v, &tcp(80));
    assert_eq!(
        (l.verdict, l.decided_by),
        (Verdict::Deny, DecidedBy::NoMatch {})
    );
    let l = ingress(&v, &tcp(443));
    assert_eq!(l.verdict, Verdict::Allow);
}

#[test]
fn staged_policies_are_never_evaluated() {
    let mut t = tier("t1", "Deny", &["allow-80"]);
    t.ingress_policies.insert(
        0,
        pb::PolicyId {
            kind: "StagedGlobalNetworkPolicy".into(),
            ..pid("staged-deny")
        },
    );
    let v = world(&[("allow-80", vec![tcp_rule("allow", 80)])], vec![t]);
    let l = ingress(&v, &tcp(80));
    assert_eq!(l.decided_by, decided("t1", "allow-80", 0, "Allow"));
}

#[test]
fn ip_set_membership_and_namespaced_names_come_from_the_view() {
    let mut v = world(&[], Vec::new());
    let id = pb::PolicyId {
        name: "from-a".into(),
        namespace: "ns".into(),
        kind: "NetworkPolicy".into(),
    };
    v.ip_sets
        .insert("s:abc".into(), (0, BTreeSet::from([format!("{A}/32")])));
    v.policies.insert(
        (id.kind.clone(), id.namespace.clone(), id.name.clone()),
        pb::Policy {
            inbound_rules: vec![pb::Rule {
                action: "allow".into(),
                src_ip_set_ids: vec!["s:abc".into()],
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let b = v
        .workload_endpoints
        .values_mut()
        .find(|e| e.name == "calib")
        .expect("b");
    b.tiers = vec![pb::TierInfo {
        name: "default".into(),
        ingress_policies: vec![id],
        egress_policies: Vec::new(),
        default_action: "Deny".into(),
    }];
    let l = ingress(&v, &tcp(80));
    assert_eq!(l.decided_by, decided("default", "ns/from-a", 0, "Allow"));
    // From an address outside the set: end of tier.
    let mut f = tcp(80);
    f.src = "10.65.0.9".parse().expect("addr");
    let e = explain(&v, &settings(), "node1", &f).expect("explain");
    assert!(e.egress.is_none());
    assert!(matches!(
        e.ingress.expect("leg").decided_by,
        DecidedBy::TierDefault { .. }
    ));
}

#[test]
fn a_flow_with_neither_end_local_is_refused() {
    let v = world(&[], Vec::new());
    let mut f = tcp(80);
    f.src = "192.0.2.1".parse().expect("addr");
    f.dst = "192.0.2.2".parse().expect("addr");
    let e = explain(&v, &settings(), "node1", &f).expect_err("not local");
    assert!(
        e.to_string().contains("neither 192.0.2.1 nor 192.0.2.2"),
        "{e}"
    );
}

#[test]
fn workload_egress_drops_encapsulation_and_admin_down_endpoints_drop_all() {
    let v = world(&[], Vec::new());
    let mut f = tcp(4789);
    f.proto = 17;
    let e = explain(&v, &settings(), "node1", &f).expect("explain");
    assert_eq!(e.verdict, Verdict::Deny);
    assert!(matches!(
        e.egress.expect("egress").decided_by,
        DecidedBy::Endpoint { ref reason } if reason.contains("VXLAN")
    ));
    let mut v = world(&[], Vec::new());
    for ep in v.workload_endpoints.values_mut() {
        ep.state = "down".into();
    }
    let e = explain(&v, &settings(), "node1", &tcp(80)).expect("explain");
    assert_eq!(e.verdict, Verdict::Deny);
}

#[test]
fn workload_to_host_traffic_meets_the_endpoint_to_host_action() {
    let mut v = world(&[], Vec::new());
    v.host_metadata.insert(
        "node1".into(),
        pb::HostMetadataUpdate {
            hostname: "node1".into(),
            ipv4_addr: "192.0.2.10/24".into(),
            ..Default::default()
        },
    );
    let mut f = tcp(80);
    f.dst = "192.0.2.10".parse().expect("addr");
    let e = explain(&v, &settings(), "node1", &f).expect("explain");
    assert_eq!(e.verdict, Verdict::Deny);
    let mut s = settings();
    s.endpoint_to_host = EndpointToHostAction::Accept;
    let e = explain(&v, &s, "node1", &f).expect("explain");
    assert_eq!(e.verdict, Verdict::Allow);
    assert_eq!(
        e.ingress.expect("host leg").endpoint,
        serde_json::json!({"host": "node1"})
    );
}

#[test]
fn host_endpoint_ingress_takes_failsafes_then_untracked_pre_dnat_and_normal_policy() {
    let mut v = world(
        &[
            ("deny-all", vec![any_rule("deny")]),
            ("allow-80", vec![tcp_rule("allow", 80)]),
        ],
        Vec::new(),
    );
    v.host_endpoints.insert(
        "eth0".into(),
        pb::HostEndpoint {
            name: "eth0".into(),
            expected_ipv4_addrs: vec!["192.0.2.10".into()],
            tiers: vec![tier("t1", "Deny", &["deny-all"])],
            pre_dnat_tiers: vec![tier("t1", "Deny", &["allow-80"])],
            ..Default::default()
        },
    );
    let from_outside = |port| {
        let mut f = tcp(port);
        f.src = "192.0.2.99".parse().expect("addr");
        f.dst = "192.0.2.10".parse().expect("addr");
        f
    };
    let leg = |port| {
        explain(&v, &settings(), "node1", &from_outside(port))
            .expect("explain")
            .ingress
            .expect("leg")
    };
    assert!(
        matches!(leg(22).decided_by, DecidedBy::Endpoint { ref reason } if reason.contains("Failsafe"))
    );
    let l = leg(80);
    assert_eq!(
        (l.verdict, l.trace[0].stage),
        (Verdict::Allow, Some("preDnat"))
    );
    assert_eq!(leg(81).decided_by, decided("t1", "deny-all", 0, "Deny"));
}
