//! Rendered chains asserted rule by rule, in iptables syntax (through the
//! iptables driver's renderer) and nft syntax (through the nftables
//! driver's renderer).

use std::collections::BTreeMap;

use felix_config::{Config, Source};
use felix_proto::{
    protocol::NumberOrName, rule::Icmp, HostEndpoint, IcmpTypeAndCode, Policy, PolicyId,
    PortRange as ProtoPortRange, Profile, ProfileId, Protocol as ProtoProtocol, Rule as ProtoRule,
    TierInfo, WorkloadEndpoint,
};

use super::*;
use crate::dataplane::generictables::{Action, Chain};
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::iptables::render_rule;
use crate::dataplane::nftables::NftRenderer;
use crate::dataplane::IpVersion;

fn cfg_with(kv: &[(&str, &str)]) -> Config {
    let layer: BTreeMap<String, String> = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (cfg, errs) = Config::build(&[(Source::ConfigFile, layer)]);
    assert!(errs.is_empty(), "{errs:?}");
    cfg
}

fn renderer(kv: &[(&str, &str)], ipv: IpVersion, backend: Backend) -> Renderer {
    Renderer::new(RenderConfig::build(&cfg_with(kv), ipv, backend).unwrap())
}

fn ipt(kv: &[(&str, &str)]) -> Renderer {
    renderer(kv, IpVersion::V4, Backend::Iptables)
}

/// Every rule of `chain` as an iptables-restore line.
fn ipt_lines(chain: &Chain) -> Vec<String> {
    chain
        .rules
        .iter()
        .map(|r| render_rule(&format!("-A {}", chain.name), None, r))
        .collect()
}

/// Every rule of `chain` as an nft rule body.
fn nft_lines(chain: &Chain, ipv: IpVersion) -> Vec<String> {
    let n = NftRenderer::new(ipv, "cali:");
    chain.rules.iter().map(|r| n.body(r)).collect()
}

fn find<'a>(chains: &'a [Chain], name: &str) -> &'a Chain {
    chains.iter().find(|c| c.name == name).unwrap_or_else(|| {
        panic!(
            "no chain {name} in {:?}",
            chains.iter().map(|c| &c.name).collect::<Vec<_>>()
        )
    })
}

fn namer4(id: &str) -> String {
    IpVersionConfig::new(IpVersion::V4).name_for_main_ipset(id)
}

fn gnp(name: &str) -> PolicyId {
    PolicyId {
        name: name.into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    }
}

fn tcp() -> Option<ProtoProtocol> {
    Some(ProtoProtocol {
        number_or_name: Some(NumberOrName::Name("TCP".into())),
    })
}

fn ports(p: &[(i32, i32)]) -> Vec<ProtoPortRange> {
    p.iter()
        .map(|(a, b)| ProtoPortRange {
            first: *a,
            last: *b,
        })
        .collect()
}

#[test]
fn mark_bits_come_from_the_configured_mask_in_upstream_order() {
    let c = RenderConfig::from_felix_config(&Config::default(), IpVersion::V4).unwrap();
    assert_eq!(
        (
            c.mark_accept,
            c.mark_pass,
            c.mark_drop,
            c.mark_scratch0,
            c.mark_scratch1
        ),
        (0x1_0000, 0x2_0000, 0x4_0000, 0x8_0000, 0x10_0000)
    );
    assert_eq!(c.mark_conn_log, 0);
    assert_eq!(c.mark_endpoint, 0xffe0_0000);
    assert_eq!(c.backend, Backend::Iptables);

    let c = RenderConfig::from_felix_config(
        &cfg_with(&[
            ("IptablesMarkMask", "0x0ff00000"),
            ("LogConnectionTransitions", "FirstResponseAfterLog"),
        ]),
        IpVersion::V4,
    )
    .unwrap();
    assert_eq!(c.mark_accept, 0x0010_0000);
    assert_eq!(c.mark_scratch1, 0x0100_0000);
    assert_eq!(
        c.mark_conn_log, 0x0200_0000,
        "conn-log bit before the endpoint block"
    );
    assert_eq!(c.mark_endpoint, 0x0c00_0000);

    let nft = RenderConfig::from_felix_config(
        &cfg_with(&[("NFTablesMode", "Enabled"), ("NftablesMarkMask", "0xff")]),
        IpVersion::V6,
    )
    .unwrap();
    assert_eq!(nft.backend, Backend::Nftables);
    assert_eq!(nft.mark_accept, 0x1);

    let err =
        RenderConfig::from_felix_config(&cfg_with(&[("IptablesMarkMask", "0xf")]), IpVersion::V4)
            .unwrap_err();
    assert!(matches!(err, RenderError::MarkBits(_)), "{err}");
}

#[test]
fn allow_policy_renders_like_upstream_in_both_syntaxes() {
    let r = ipt(&[]);
    let pol = Policy {
        inbound_rules: vec![
            ProtoRule {
                action: "allow".into(),
                protocol: tcp(),
                src_ip_set_ids: vec!["s:web".into()],
                dst_ports: ports(&[(80, 80), (8080, 8081)]),
                ..Default::default()
            },
            ProtoRule {
                action: "deny".into(),
                src_net: vec!["10.0.0.0/8".into()],
                ..Default::default()
            },
            ProtoRule {
                action: "allow".into(),
                ..Default::default()
            },
        ],
        tier: "default".into(),
        ..Default::default()
    };
    let chains = r.policy_chains(&gnp("web"), &pol, &namer4);
    assert_eq!(chains.len(), 2);
    let pi = find(&chains, "cali-pi-gnp/web");
    assert_eq!(
        ipt_lines(pi),
        vec![
            "-A cali-pi-gnp/web -m comment --comment \"GlobalNetworkPolicy web ingress\" -p tcp \
             -m set --match-set cali40s:web src -m multiport --destination-ports 80,8080:8081 \
             --jump MARK --set-mark 0x10000/0x10000",
            "-A cali-pi-gnp/web -m mark --mark 0x10000/0x10000 --jump RETURN",
            "-A cali-pi-gnp/web --source 10.0.0.0/8 --jump MARK --set-mark 0x40000/0x40000",
            "-A cali-pi-gnp/web -m mark --mark 0x40000/0x40000 --jump DROP",
            // The trailing RETURN is dropped: the endpoint chain checks the mark.
            "-A cali-pi-gnp/web --jump MARK --set-mark 0x10000/0x10000",
        ]
    );
    let po = find(&chains, "cali-po-gnp/web");
    assert!(po.rules.is_empty(), "no egress rules: {po:?}");

    let n = renderer(&[], IpVersion::V4, Backend::Nftables);
    let chains = n.policy_chains(&gnp("web"), &pol, &namer4);
    let pi = find(&chains, "filter-cali-pi-gnp/web");
    assert_eq!(
        nft_lines(pi, IpVersion::V4),
        vec![
            "meta l4proto tcp ip saddr @cali40s-web th dport { 80, 8080-8081 } counter meta mark set mark or 0x00010000",
            "meta mark & 0x00010000 == 0x00010000 counter return",
            "ip saddr 10.0.0.0/8 counter meta mark set mark or 0x00040000",
            "meta mark & 0x00040000 == 0x00040000 counter drop",
            "counter meta mark set mark or 0x00010000",
        ]
    );
}

#[test]
fn match_blocks_negations_icmp_and_ip_version_filtering() {
    let r = ipt(&[("IptablesFilterDenyAction", "REJECT")]);
    let rule = ProtoRule {
        action: "pass".into(),
        src_net: vec![
            "10.0.0.0/8".into(),
            "192.168.0.0/16".into(),
            "fd00::/8".into(),
        ],
        not_src_net: vec!["10.1.0.0/16".into()],
        not_protocol: Some(ProtoProtocol {
            number_or_name: Some(NumberOrName::Number(17)),
        }),
        icmp: Some(Icmp::IcmpTypeCode(IcmpTypeAndCode { r#type: 8, code: 0 })),
        not_dst_ip_set_ids: vec!["s:bad".into()],
        dst_named_port_ip_set_ids: vec!["n:http".into()],
        ..Default::default()
    };
    let v6_only = ProtoRule {
        action: "deny".into(),
        ip_version: 6,
        ..Default::default()
    };
    let v6_nets = ProtoRule {
        action: "deny".into(),
        dst_net: vec!["fd00::1/128".into()],
        ..Default::default()
    };
    let neg_catch_all = ProtoRule {
        action: "deny".into(),
        not_dst_net: vec!["0.0.0.0/0".into()],
        ..Default::default()
    };
    let pol = Policy {
        outbound_rules: vec![v6_only, rule, v6_nets, neg_catch_all],
        ..Default::default()
    };
    let chains = r.policy_chains(&gnp("p"), &pol, &namer4);
    let po = find(&chains, "cali-po-gnp/p");
    assert_eq!(
        ipt_lines(po),
        vec![
            "-A cali-po-gnp/p -m comment --comment \"GlobalNetworkPolicy p egress\" --jump MARK --set-mark 0x0/0x180000",
            "-A cali-po-gnp/p --source 10.0.0.0/8 --jump MARK --set-mark 0x80000/0x80000",
            "-A cali-po-gnp/p --source 192.168.0.0/16 --jump MARK --set-mark 0x80000/0x80000",
            // One negated net left after the positive block: inline.
            "-A cali-po-gnp/p -m set --match-set cali40n:http dst,dst -m icmp --icmp-type 8/0 ! -p 17 \
             ! --source 10.1.0.0/16 -m set ! --match-set cali40s:bad dst -m mark --mark 0x80000/0x80000 \
             --jump MARK --set-mark 0x20000/0x20000",
        ]
    );
    // A net plus a negated net: the negation becomes a clearing block.
    let neg = Policy {
        inbound_rules: vec![ProtoRule {
            action: "allow".into(),
            src_net: vec!["10.0.0.0/8".into()],
            not_src_net: vec!["10.1.0.0/16".into(), "10.2.0.0/16".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let chains = r.policy_chains(&gnp("n"), &neg, &namer4);
    assert_eq!(
        ipt_lines(&chains[0]),
        vec![
            "-A cali-pi-gnp/n -m comment --comment \"GlobalNetworkPolicy n ingress\" --jump MARK --set-mark 0x80000/0x180000",
            "-A cali-pi-gnp/n --source 10.1.0.0/16 --jump MARK --set-mark 0/0x80000",
            "-A cali-pi-gnp/n --source 10.2.0.0/16 --jump MARK --set-mark 0/0x80000",
            "-A cali-pi-gnp/n --source 10.0.0.0/8 -m mark --mark 0x80000/0x80000 --jump MARK --set-mark 0x10000/0x10000",
        ]
    );
    // ICMPv6 in a v6 rule.
    let r6i = renderer(&[], IpVersion::V6, Backend::Iptables);
    let icmp6 = Policy {
        inbound_rules: vec![ProtoRule {
            action: "allow".into(),
            icmp: Some(Icmp::IcmpTypeCode(IcmpTypeAndCode {
                r#type: 128,
                code: 0,
            })),
            src_net: vec!["fd00::/8".into(), "10.0.0.0/8".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let c = r6i.policy_chains(&gnp("i6"), &icmp6, &namer4);
    assert_eq!(
        ipt_lines(&c[0]),
        vec!["-A cali-pi-gnp/i6 -m comment --comment \"GlobalNetworkPolicy i6 ingress\" --source fd00::/8 -m icmp6 --icmpv6-type 128/0 --jump MARK --set-mark 0x10000/0x10000"]
    );
    // The v6 renderer keeps only the v6 parts.
    let r6 = renderer(&[], IpVersion::V6, Backend::Iptables);
    let namer6 = |id: &str| IpVersionConfig::new(IpVersion::V6).name_for_main_ipset(id);
    let chains = r6.policy_chains(&gnp("p"), &pol, &namer6);
    let lines = ipt_lines(find(&chains, "cali-po-gnp/p"));
    assert_eq!(lines[0], "-A cali-po-gnp/p -m comment --comment \"GlobalNetworkPolicy p egress\" --jump MARK --set-mark 0x40000/0x40000");
    // The pass rule's negated nets are all IPv4, so (as upstream) the
    // whole rule is skipped for IPv6 rather than losing the negation.
    assert!(!lines.iter().any(|l| l.contains("fd00::/8")), "{lines:?}");
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("--destination fd00::1/128")),
        "{lines:?}"
    );
}

#[test]
fn log_rules_request_a_response_log_when_transitions_are_logged() {
    let pol = |untracked| Policy {
        inbound_rules: vec![ProtoRule {
            action: "log".into(),
            protocol: tcp(),
            ..Default::default()
        }],
        untracked,
        tier: "t1".into(),
        ..Default::default()
    };
    let plain = ipt(&[("LogPrefix", "calico-%t-%k")]);
    let chains = plain.policy_chains(&gnp("l"), &pol(false), &namer4);
    assert_eq!(
        ipt_lines(&chains[0]),
        vec!["-A cali-pi-gnp/l -m comment --comment \"GlobalNetworkPolicy l ingress\" -p tcp --jump LOG --log-prefix \"calico-t1-gnp: \" --log-level 5"]
    );

    let on = [("LogConnectionTransitions", "FirstResponseAfterLog")];
    let r = ipt(&on);
    let bit = r.config().mark_conn_log;
    assert_eq!(bit, 0x20_0000);
    let chains = r.policy_chains(&gnp("l"), &pol(false), &namer4);
    assert_eq!(
        ipt_lines(&chains[0]),
        vec![
            "-A cali-pi-gnp/l -m comment --comment \"GlobalNetworkPolicy l ingress\" -p tcp --jump LOG --log-prefix \"calico-packet: \" --log-level 5",
            "-A cali-pi-gnp/l -p tcp --jump CONNMARK --set-mark 0x200000/0x200000",
        ]
    );
    // Untracked (raw) policies skip it: CONNMARK means nothing there.
    let chains = r.policy_chains(&gnp("l"), &pol(true), &namer4);
    assert_eq!(chains[0].rules.len(), 1);

    // Rate limited: one limiter decision drives both LOG and CONNMARK.
    let limited = ipt(&[
        ("LogConnectionTransitions", "FirstResponseAfterLog"),
        ("LogActionRateLimit", "10/minute"),
        ("LogActionRateLimitBurst", "3"),
    ]);
    let chains = limited.policy_chains(&gnp("l"), &pol(false), &namer4);
    assert_eq!(
        ipt_lines(&chains[0]),
        vec![
            "-A cali-pi-gnp/l -m comment --comment \"GlobalNetworkPolicy l ingress\" --jump MARK --set-mark 0/0x200000",
            "-A cali-pi-gnp/l -p tcp -m limit --limit 10/minute --limit-burst 3 --jump MARK --set-mark 0x200000/0x200000",
            "-A cali-pi-gnp/l -m mark --mark 0x200000/0x200000 --jump LOG --log-prefix \"calico-packet: \" --log-level 5",
            "-A cali-pi-gnp/l -m mark --mark 0x200000/0x200000 --jump CONNMARK --set-mark 0x200000/0x200000",
        ]
    );
    let n = renderer(
        &[
            ("LogConnectionTransitions", "FirstResponseAfterLog"),
            ("LogActionRateLimit", "10/minute"),
        ],
        IpVersion::V4,
        Backend::Nftables,
    );
    let chains = n.policy_chains(&gnp("l"), &pol(false), &namer4);
    assert_eq!(
        nft_lines(&chains[0], IpVersion::V4)[1],
        "meta l4proto tcp limit rate 10/minute burst 5 packets counter meta mark set mark or 0x00200000"
    );
}

#[test]
fn conn_log_chain_and_checks() {
    let r = ipt(&[
        ("LogConnectionTransitions", "FirstResponseAfterLog"),
        ("LogConnectionTransitionsPrefix", "resp"),
    ]);
    let filter = r.static_chains(TableName::Filter);
    assert_eq!(
        ipt_lines(find(&filter, CHAIN_LOG_CONN)),
        vec![
            "-A cali-log-conn -p tcp --tcp-flags RST RST --jump LOG --log-prefix \"resp-rst: \" --log-level 5",
            "-A cali-log-conn -p tcp --tcp-flags RST RST --jump CONNMARK --set-mark 0x0/0x200000",
            "-A cali-log-conn -p tcp --tcp-flags RST RST --jump RETURN",
            "-A cali-log-conn -p icmp -m conntrack --ctstate RELATED --jump LOG --log-prefix \"resp-icmp-err: \" --log-level 5",
            "-A cali-log-conn -p icmp -m conntrack --ctstate RELATED --jump CONNMARK --set-mark 0x0/0x200000",
            "-A cali-log-conn -p icmp -m conntrack --ctstate RELATED --jump RETURN",
            "-A cali-log-conn --jump LOG --log-prefix \"resp-est: \" --log-level 5",
            "-A cali-log-conn --jump CONNMARK --set-mark 0x0/0x200000",
            "-A cali-log-conn --jump RETURN",
        ]
    );
    let check = "-m connmark --mark 0x200000/0x200000 -m conntrack --ctstate RELATED,ESTABLISHED --jump cali-log-conn";
    assert_eq!(
        ipt_lines(find(&filter, CHAIN_FILTER_OUTPUT))[0],
        format!("-A cali-OUTPUT {check}")
    );
    assert!(
        find(&r.static_chains(TableName::Mangle), CHAIN_LOG_CONN)
            .rules
            .len()
            == 9
    );
    // Every tracked endpoint chain checks first, except pre-DNAT.
    let ep = WorkloadEndpoint {
        state: "active".into(),
        ..Default::default()
    };
    for c in r.workload_endpoint_chains("cali1", &ep) {
        assert_eq!(ipt_lines(&c)[0], format!("-A {} {check}", c.name));
    }
    let hep = r.host_endpoint_chains("eth0", &HostEndpoint::default());
    for (t, c) in &hep {
        let first = ipt_lines(c).into_iter().next().unwrap_or_default();
        let want =
            *t != TableName::Raw && !(*t == TableName::Mangle && c.name.starts_with("cali-fh-"));
        assert_eq!(first.contains("cali-log-conn"), want, "{t:?} {first}");
    }
    // Off: no chain, no checks.
    let off = ipt(&[]);
    assert!(off
        .static_chains(TableName::Filter)
        .iter()
        .all(|c| c.name != CHAIN_LOG_CONN && !ipt_lines(c).iter().any(|l| l.contains("connmark"))));
}

#[test]
fn workload_endpoint_chains_rule_by_rule() {
    let r = ipt(&[]);
    let ep = WorkloadEndpoint {
        state: "active".into(),
        name: "cali1234".into(),
        profile_ids: vec!["kns.default".into()],
        tiers: vec![
            TierInfo {
                name: "security".into(),
                ingress_policies: vec![gnp("a"), gnp("b")],
                egress_policies: vec![],
                default_action: "Pass".into(),
            },
            TierInfo {
                name: "default".into(),
                ingress_policies: vec![
                    PolicyId {
                        name: "staged".into(),
                        namespace: "ns".into(),
                        kind: "StagedNetworkPolicy".into(),
                    },
                    PolicyId {
                        name: "np1".into(),
                        namespace: "ns".into(),
                        kind: "NetworkPolicy".into(),
                    },
                ],
                egress_policies: vec![],
                default_action: "Deny".into(),
            },
        ],
        ..Default::default()
    };
    let chains = r.workload_endpoint_chains("cali1234", &ep);
    assert_eq!(
        ipt_lines(find(&chains, "cali-tw-cali1234")),
        vec![
            "-A cali-tw-cali1234 -m conntrack --ctstate RELATED,ESTABLISHED --jump ACCEPT",
            "-A cali-tw-cali1234 -m conntrack --ctstate INVALID --jump DROP",
            "-A cali-tw-cali1234 --jump MARK --set-mark 0/0x30000",
            "-A cali-tw-cali1234 -m comment --comment \"Start of tier security\" --jump MARK --set-mark 0/0x20000",
            "-A cali-tw-cali1234 -m mark --mark 0/0x20000 --jump cali-pi-gnp/a",
            "-A cali-tw-cali1234 -m comment --comment \"Return if policy accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
            "-A cali-tw-cali1234 -m mark --mark 0/0x20000 --jump cali-pi-gnp/b",
            "-A cali-tw-cali1234 -m comment --comment \"Return if policy accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
            // Tier "security" passes by default: no end-of-tier drop.
            "-A cali-tw-cali1234 -m comment --comment \"Start of tier default\" --jump MARK --set-mark 0/0x20000",
            "-A cali-tw-cali1234 -m mark --mark 0/0x20000 --jump cali-pi-np/ns/np1",
            "-A cali-tw-cali1234 -m comment --comment \"Return if policy accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
            "-A cali-tw-cali1234 -m comment --comment \"End of tier default. DROP if no policies passed packet\" -m mark --mark 0/0x20000 --jump DROP",
            "-A cali-tw-cali1234 --jump cali-pri-kns.default",
            "-A cali-tw-cali1234 -m comment --comment \"Return if profile accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
            "-A cali-tw-cali1234 -m comment --comment \"DROP if no profiles matched\" --jump DROP",
        ]
    );
    // Egress: no policies, encap drops, profile, default drop.
    assert_eq!(
        ipt_lines(find(&chains, "cali-fw-cali1234")),
        vec![
            "-A cali-fw-cali1234 -m conntrack --ctstate RELATED,ESTABLISHED --jump ACCEPT",
            "-A cali-fw-cali1234 -m conntrack --ctstate INVALID --jump DROP",
            "-A cali-fw-cali1234 --jump MARK --set-mark 0/0x30000",
            "-A cali-fw-cali1234 -m comment --comment \"DROP VXLAN encapped packets originating in workloads\" -p 17 -m multiport --destination-ports 4789 --jump DROP",
            "-A cali-fw-cali1234 -m comment --comment \"DROP IPinIP encapped packets originating in workloads\" -p 4 --jump DROP",
            "-A cali-fw-cali1234 --jump cali-pro-kns.default",
            "-A cali-fw-cali1234 -m comment --comment \"Return if profile accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
            "-A cali-fw-cali1234 -m comment --comment \"DROP if no profiles matched\" --jump DROP",
        ]
    );
    // RETURN allow action marks first; admin-down denies everything.
    let ret = ipt(&[("IptablesFilterAllowAction", "RETURN")]);
    let down = WorkloadEndpoint {
        state: "down".into(),
        ..ep.clone()
    };
    let c = ret.workload_endpoint_chains("cali1234", &ep);
    assert_eq!(
        ipt_lines(&c[0])[..2],
        [
            "-A cali-tw-cali1234 -m conntrack --ctstate RELATED,ESTABLISHED --jump MARK --set-mark 0x10000/0x10000",
            "-A cali-tw-cali1234 -m conntrack --ctstate RELATED,ESTABLISHED --jump RETURN",
        ]
    );
    let c = r.workload_endpoint_chains("cali1234", &down);
    assert_eq!(
        ipt_lines(&c[1]),
        vec!["-A cali-fw-cali1234 -m comment --comment \"Endpoint admin disabled\" --jump DROP"]
    );
    // nft: same rules, layered names.
    let n = renderer(&[], IpVersion::V4, Backend::Nftables);
    let c = n.workload_endpoint_chains("cali1234", &ep);
    assert_eq!(c[0].name, "filter-cali-tw-cali1234");
    let lines = nft_lines(&c[0], IpVersion::V4);
    assert_eq!(lines[0], "ct state related,established counter accept");
    assert_eq!(
        lines[4],
        "meta mark & 0x00020000 == 0x00000000 counter jump filter-cali-pi-gnp/a"
    );
    assert_eq!(lines.len(), 15);
}

#[test]
fn static_filter_chains_failsafes_and_endpoint_to_host_action() {
    let r = ipt(&[(
        "FailsafeInboundHostPorts",
        "tcp:22,udp:10.0.0.0/8:68,tcp:[fd00::/8]:179",
    )]);
    let filter = r.static_chains(TableName::Filter);
    assert_eq!(
        ipt_lines(find(&filter, CHAIN_FAILSAFE_IN)),
        vec![
            "-A cali-failsafe-in -p tcp -m multiport --destination-ports 22 --jump ACCEPT",
            "-A cali-failsafe-in -p udp -m multiport --destination-ports 68 --source 10.0.0.0/8 --jump ACCEPT",
        ]
    );
    assert_eq!(
        ipt_lines(find(&filter, CHAIN_FILTER_INPUT)),
        vec![
            "-A cali-INPUT --in-interface cali+ --goto cali-wl-to-host",
            "-A cali-INPUT -m mark --mark 0x10000/0x10000 --jump ACCEPT",
            "-A cali-INPUT --jump MARK --set-mark 0/0x1b0000",
            "-A cali-INPUT --jump cali-from-host-endpoint",
            "-A cali-INPUT -m comment --comment \"Host endpoint policy accepted packet.\" -m mark --mark 0x10000/0x10000 --jump ACCEPT",
        ]
    );
    assert_eq!(
        ipt_lines(find(&filter, CHAIN_WORKLOAD_TO_HOST)),
        vec![
            "-A cali-wl-to-host --jump cali-from-wl-dispatch",
            "-A cali-wl-to-host -m comment --comment \"Configured DefaultEndpointToHostAction\" --jump DROP",
        ]
    );
    let raw = r.static_chains(TableName::Raw);
    assert_eq!(
        ipt_lines(find(&raw, CHAIN_FAILSAFE_OUT)),
        vec![
            "-A cali-failsafe-out -p udp -m multiport --destination-ports 53 --jump ACCEPT",
            "-A cali-failsafe-out -p udp -m multiport --destination-ports 67 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 179 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 2379 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 2380 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 5473 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 6443 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 6666 --jump ACCEPT",
            "-A cali-failsafe-out -p tcp -m multiport --destination-ports 6667 --jump ACCEPT",
            // Raw also lets replies of inbound failsafe connections out.
            "-A cali-failsafe-out -p tcp -m multiport --source-ports 22 --jump ACCEPT",
            "-A cali-failsafe-out -p udp -m multiport --source-ports 68 --destination 10.0.0.0/8 --jump ACCEPT",
        ]
    );
    assert!(ipt_lines(find(&raw, CHAIN_RAW_PREROUTING)).contains(
        &"-A cali-PREROUTING -m mark --mark 0x80000/0x80000 -m rpfilter --invert --validmark --jump DROP".to_string()
    ));

    let accept = ipt(&[("DefaultEndpointToHostAction", "ACCEPT")]);
    let c = accept.static_chains(TableName::Filter);
    assert_eq!(
        ipt_lines(find(&c, CHAIN_WORKLOAD_TO_HOST))[1],
        "-A cali-wl-to-host -m comment --comment \"Configured DefaultEndpointToHostAction\" --jump ACCEPT"
    );
    let ret = ipt(&[
        ("DefaultEndpointToHostAction", "ACCEPT"),
        ("IptablesFilterAllowAction", "RETURN"),
    ]);
    let lines = ipt_lines(find(
        &ret.static_chains(TableName::Filter),
        CHAIN_WORKLOAD_TO_HOST,
    ));
    assert_eq!(
        lines[1..],
        [
            "-A cali-wl-to-host -m comment --comment \"Configured DefaultEndpointToHostAction\" --jump MARK --set-mark 0x10000/0x10000",
            "-A cali-wl-to-host -m comment --comment \"Configured DefaultEndpointToHostAction\" --jump RETURN",
        ]
    );
    // v6: neighbour discovery allowed before dispatch.
    let r6 = renderer(&[], IpVersion::V6, Backend::Nftables);
    let c = r6.static_chains(TableName::Filter);
    let lines = nft_lines(find(&c, "filter-cali-wl-to-host"), IpVersion::V6);
    assert_eq!(lines[0], "meta l4proto 58 icmpv6 type 130 counter accept");
    assert_eq!(lines[6], "counter jump filter-cali-from-wl-dispatch");
}

#[test]
fn insert_rules_dispatch_and_nat_in_both_backends() {
    let r = ipt(&[]);
    let ins = r.static_insert_rules(TableName::Filter);
    assert_eq!(
        ins.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["INPUT", "FORWARD", "OUTPUT"]
    );
    assert_eq!(ins[0].1[0].action, Action::Jump("cali-INPUT".into()));
    let n = renderer(&[], IpVersion::V4, Backend::Nftables);
    let ins = n.static_insert_rules(TableName::Raw);
    assert_eq!(ins[0].0, "raw-PREROUTING");
    assert_eq!(
        ins[0].1[0].action,
        Action::Jump("raw-cali-PREROUTING".into())
    );

    let wl = vec!["cali1".to_string(), "cali2".to_string()];
    let d = n.dispatch_chains(&wl, &["eth0".to_string()]);
    let (t, root) = d
        .iter()
        .find(|(_, c)| c.name == "filter-cali-to-wl-dispatch")
        .unwrap();
    assert_eq!(*t, TableName::Filter);
    assert_eq!(
        nft_lines(root, IpVersion::V4),
        vec![
            "oifname \"cali1\" counter goto filter-cali-tw-cali1",
            "oifname \"cali2\" counter goto filter-cali-tw-cali2",
            "counter drop",
        ]
    );
    let hosts: Vec<_> = d
        .iter()
        .filter(|(_, c)| c.name.ends_with("cali-from-host-endpoint"))
        .map(|(t, c)| (*t, c.name.clone(), nft_lines(c, IpVersion::V4)))
        .collect();
    assert_eq!(hosts.len(), 3);
    assert_eq!(hosts[1].1, "mangle-cali-from-host-endpoint");
    assert_eq!(
        hosts[1].2,
        vec!["iifname \"eth0\" counter goto mangle-cali-fh-eth0"]
    );

    let masq = r.masquerade_chains("cali40masq-ipam-pools", "cali40all-ipam-pools", None);
    assert_eq!(
        ipt_lines(&masq[0]),
        vec!["-A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst --jump MASQUERADE"]
    );
    let snat = ipt(&[("NATOutgoingAddress", "192.0.2.1")]);
    assert!(ipt_lines(&snat.masquerade_chains("a", "b", None)[0])[0]
        .ends_with("--jump SNAT --to-source 192.0.2.1"));
    let ranged = ipt(&[("NATPortRange", "32768:65000")]);
    let lines = ipt_lines(&ranged.masquerade_chains("a", "b", None)[0]);
    assert_eq!(lines.len(), 5);
    assert!(
        lines[0].contains("-p tcp --jump MASQUERADE --to-ports 32768-65000"),
        "{lines:?}"
    );
}

/// `NATOutgoingExclusions`: with `IPPoolsOnly` (no host set given) the
/// NAT-outgoing rule excludes only the pools; with `IPPoolsAndHostIPs` (the
/// masq manager passes `all-hosts-net`) every rule, port-ranged ones too,
/// also excludes the node addresses, in both syntaxes.
#[test]
fn nat_outgoing_excludes_host_ips_only_when_given_the_host_set() {
    let r = ipt(&[]);
    let pools_only = ipt_lines(&r.masquerade_chains("m", "p", None)[0]);
    assert_eq!(
        pools_only,
        vec!["-A cali-nat-outgoing -m set --match-set m src -m set ! --match-set p dst --jump MASQUERADE"]
    );
    let with_hosts = ipt_lines(&r.masquerade_chains("m", "p", Some("h"))[0]);
    assert_eq!(
        with_hosts,
        vec!["-A cali-nat-outgoing -m set --match-set m src -m set ! --match-set p dst -m set ! --match-set h dst --jump MASQUERADE"]
    );
    let ranged = ipt(&[("NATPortRange", "32768:65000")]);
    let lines = ipt_lines(&ranged.masquerade_chains("m", "p", Some("h"))[0]);
    assert_eq!(lines.len(), 5);
    for l in &lines {
        assert!(l.contains("! --match-set h dst"), "{l}");
    }
    let nft = renderer(&[], IpVersion::V4, Backend::Nftables);
    let c = &nft.masquerade_chains("m", "p", Some("h"))[0];
    let got = nft_lines(c, IpVersion::V4);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].contains("ip daddr != @p") && got[0].contains("ip daddr != @h"),
        "{got:?}"
    );
    let c = &nft.masquerade_chains("m", "p", None)[0];
    assert!(!nft_lines(c, IpVersion::V4)[0].contains("@h"));
}

#[test]
fn host_endpoint_chains_cover_untracked_prednat_and_forward() {
    let r = ipt(&[]);
    let hep = HostEndpoint {
        name: "eth0".into(),
        tiers: vec![TierInfo {
            name: "default".into(),
            ingress_policies: vec![gnp("in")],
            egress_policies: vec![],
            default_action: "Deny".into(),
        }],
        untracked_tiers: vec![TierInfo {
            name: "default".into(),
            ingress_policies: vec![gnp("untracked")],
            egress_policies: vec![],
            default_action: "Deny".into(),
        }],
        pre_dnat_tiers: vec![TierInfo {
            name: "default".into(),
            ingress_policies: vec![gnp("prednat")],
            egress_policies: vec![],
            default_action: "Deny".into(),
        }],
        ..Default::default()
    };
    let chains = r.host_endpoint_chains("eth0", &hep);
    let get = |t: TableName, n: &str| {
        ipt_lines(
            &chains
                .iter()
                .find(|(tt, c)| *tt == t && c.name == n)
                .unwrap()
                .1,
        )
    };
    assert_eq!(
        get(TableName::Raw, "cali-fh-eth0"),
        vec![
            "-A cali-fh-eth0 --jump cali-failsafe-in",
            "-A cali-fh-eth0 --jump MARK --set-mark 0/0x30000",
            "-A cali-fh-eth0 -m comment --comment \"Start of tier default\" --jump MARK --set-mark 0/0x20000",
            "-A cali-fh-eth0 -m mark --mark 0/0x20000 --jump cali-pi-gnp/untracked",
            "-A cali-fh-eth0 -m mark --mark 0x10000/0x10000 --jump NOTRACK",
            "-A cali-fh-eth0 -m comment --comment \"Return if policy accepted\" -m mark --mark 0x10000/0x10000 --jump RETURN",
        ]
    );
    let pre = get(TableName::Mangle, "cali-fh-eth0");
    assert_eq!(
        pre[0],
        "-A cali-fh-eth0 -m conntrack --ctstate RELATED,ESTABLISHED --jump ACCEPT"
    );
    assert!(pre
        .iter()
        .any(|l| l.ends_with("--jump cali-pi-gnp/prednat")));
    assert!(
        !pre.iter()
            .any(|l| l.contains("End of tier") || l.contains("profiles")),
        "{pre:?}"
    );
    let fh = get(TableName::Filter, "cali-fh-eth0");
    assert_eq!(fh[2], "-A cali-fh-eth0 --jump cali-failsafe-in");
    assert!(fh.iter().any(|l| l.contains("End of tier default")));
    // Forward chains without forward tiers allow by default.
    assert_eq!(
        get(TableName::Filter, "cali-fhfw-eth0")[3..],
        [
            "-A cali-fhfw-eth0 -m comment --comment \"Allow forwarded traffic by default\" --jump MARK --set-mark 0x10000/0x10000",
            "-A cali-fhfw-eth0 -m comment --comment \"Return for accepted forward traffic\" --jump RETURN",
        ]
    );
    let mangle_th = get(TableName::Mangle, "cali-th-eth0");
    assert_eq!(mangle_th[0], "-A cali-th-eth0 -m conntrack --ctstate RELATED,ESTABLISHED --jump MARK --set-mark 0x10000/0x10000");
    assert_eq!(
        mangle_th[1],
        "-A cali-th-eth0 -m conntrack --ctstate RELATED,ESTABLISHED --jump RETURN"
    );
    assert_eq!(r.host_endpoint_chain_names("eth0").len(), chains.len());
    assert!(r
        .host_endpoint_chain_names("eth0")
        .iter()
        .zip(&chains)
        .all(|((t1, n), (t2, c))| t1 == t2 && *n == c.name));
}

#[test]
fn profiles_names_and_unrenderable_rules() {
    let r = ipt(&[]);
    let prof = Profile {
        inbound_rules: vec![ProtoRule {
            action: "allow".into(),
            ..Default::default()
        }],
        outbound_rules: vec![ProtoRule {
            action: "allow".into(),
            dst_ports: ports(&[(70000, 70000)]),
            ..Default::default()
        }],
    };
    let id = ProfileId {
        name: "kns.default".into(),
    };
    let c = r.profile_chains(&id, &prof, &namer4);
    assert_eq!(
        ipt_lines(&c[0]),
        vec!["-A cali-pri-kns.default -m comment --comment \"Profile kns.default ingress\" --jump MARK --set-mark 0x10000/0x10000"]
    );
    // A port out of range cannot be rendered: deny rather than allow.
    assert_eq!(
        ipt_lines(&c[1]),
        vec!["-A cali-pro-kns.default -m comment --comment \"Unrenderable rule\" -m comment --comment \"Profile kns.default egress\" --jump DROP"]
    );
    assert_eq!(
        r.profile_chain_names(TableName::Filter, &id),
        vec!["cali-pri-kns.default", "cali-pro-kns.default"]
    );
    // Long policy names are hashed to fit iptables, not nft.
    let long = PolicyId {
        name: "a-very-long-policy-name-indeed".into(),
        namespace: "some-namespace".into(),
        kind: "NetworkPolicy".into(),
    };
    let n = r.policy_chain_names(TableName::Filter, &long);
    assert!(
        n.iter().all(|c| c.len() == MAX_CHAIN_NAME_LENGTH_IPTABLES),
        "{n:?}"
    );
    let nn =
        renderer(&[], IpVersion::V4, Backend::Nftables).policy_chain_names(TableName::Raw, &long);
    assert_eq!(
        nn[0],
        "raw-cali-pi-np/some-namespace/a-very-long-policy-name-indeed"
    );
    // Staged policies render nothing.
    let staged = PolicyId {
        kind: "StagedGlobalNetworkPolicy".into(),
        ..gnp("s")
    };
    assert!(r
        .policy_chains(&staged, &Policy::default(), &namer4)
        .is_empty());
    // Untracked and pre-DNAT policies go to raw and mangle.
    let untracked = Policy {
        untracked: true,
        ..Default::default()
    };
    assert_eq!(r.policy_table(&untracked), TableName::Raw);
    let n = renderer(&[], IpVersion::V4, Backend::Nftables);
    assert_eq!(
        n.policy_chains(&gnp("u"), &untracked, &namer4)[0].name,
        "raw-cali-pi-gnp/u"
    );
}

fn proto_named(n: &str) -> Option<ProtoProtocol> {
    Some(ProtoProtocol {
        number_or_name: Some(NumberOrName::Name(n.into())),
    })
}

fn proto_number(n: i32) -> Option<ProtoProtocol> {
    Some(ProtoProtocol {
        number_or_name: Some(NumberOrName::Number(n)),
    })
}

/// The single rule-matching line of a one-rule policy (the verdict rule
/// that follows is dropped), or `None` if the rule rendered nothing.
fn one_rule(r: &Renderer, rule: ProtoRule) -> Option<String> {
    let pol = Policy {
        inbound_rules: vec![rule],
        ..Default::default()
    };
    let chains = r.policy_chains(&gnp("one"), &pol, &namer4);
    let c = chains[0].clone();
    match r.config().backend {
        Backend::Iptables => ipt_lines(&c).first().cloned(),
        Backend::Nftables => nft_lines(&c, r.config().ip_version).first().cloned(),
    }
}

#[test]
fn protocol_with_a_negated_protocol_renders_one_protocol_match() {
    for backend in [Backend::Iptables, Backend::Nftables] {
        let r = renderer(&[], IpVersion::V4, backend);
        let rule = |p, np| ProtoRule {
            action: "allow".into(),
            protocol: p,
            not_protocol: np,
            ..Default::default()
        };
        // A different negated protocol is implied by the protocol.
        let line = one_rule(&r, rule(proto_named("TCP"), proto_named("UDP"))).unwrap();
        let (pos, neg) = match backend {
            Backend::Iptables => ("-p tcp", "! -p"),
            Backend::Nftables => ("meta l4proto tcp", "l4proto !="),
        };
        assert!(
            line.contains(pos) && !line.contains(neg),
            "{backend:?}: {line}"
        );
        // The same protocol, by name or by number, matches nothing.
        assert_eq!(
            one_rule(&r, rule(proto_named("TCP"), proto_number(6))),
            None
        );
        assert_eq!(
            one_rule(&r, rule(proto_named("ICMPv6"), proto_named("icmpv6"))),
            None
        );
        // A negated protocol alone stays.
        let line = one_rule(&r, rule(None, proto_number(17))).unwrap();
        assert!(line.contains("17"), "{backend:?}: {line}");
    }
}

#[test]
fn icmp_fields_under_the_other_familys_icmp_protocol_render_nothing() {
    use felix_proto::rule::NotIcmp;
    for backend in [Backend::Iptables, Backend::Nftables] {
        for (ipv, other, own) in [
            (IpVersion::V4, "ICMPv6", "ICMP"),
            (IpVersion::V6, "ICMP", "ICMPv6"),
        ] {
            let r = renderer(&[], ipv, backend);
            let rule = |p: &str| ProtoRule {
                action: "deny".into(),
                protocol: proto_named(p),
                not_icmp: Some(NotIcmp::NotIcmpTypeCode(IcmpTypeAndCode {
                    r#type: 3,
                    code: 1,
                })),
                ..Default::default()
            };
            assert_eq!(one_rule(&r, rule(other)), None, "{backend:?} {ipv:?}");
            assert!(one_rule(&r, rule(own)).is_some(), "{backend:?} {ipv:?}");
            // The other ICMP protocol without ICMP fields still renders.
            let bare = ProtoRule {
                action: "deny".into(),
                protocol: proto_named(other),
                ..Default::default()
            };
            assert!(one_rule(&r, bare).is_some(), "{backend:?} {ipv:?}");
        }
    }
}

#[test]
fn negated_catch_all_with_host_bits_renders_nothing() {
    for backend in [Backend::Iptables, Backend::Nftables] {
        for (ipv, all) in [
            (IpVersion::V4, "156.167.80.11/0"),
            (IpVersion::V6, "fd00::1/0"),
        ] {
            let r = renderer(&[], ipv, backend);
            let rule = ProtoRule {
                action: "deny".into(),
                not_dst_net: vec![all.into()],
                ..Default::default()
            };
            assert_eq!(one_rule(&r, rule), None, "{backend:?} {all}");
            // The positive catch-all still renders (it matches everything).
            let rule = ProtoRule {
                action: "deny".into(),
                src_net: vec![all.into()],
                ..Default::default()
            };
            assert!(one_rule(&r, rule).is_some(), "{backend:?} {all}");
        }
    }
}

#[test]
fn drop_attribution_reports_each_deny_with_a_rate_limited_nflog_before_it() {
    let pol = Policy {
        inbound_rules: vec![
            ProtoRule {
                action: "allow".into(),
                protocol: tcp(),
                ..Default::default()
            },
            ProtoRule {
                action: "deny".into(),
                src_net: vec!["10.0.0.0/8".into()],
                ..Default::default()
            },
        ],
        tier: "default".into(),
        ..Default::default()
    };
    let on = [
        ("DropAttributionEnabled", "true"),
        ("DropAttributionNFLOGGroup", "31"),
        ("DropAttributionRateLimit", "7"),
    ];
    let chains = ipt(&on).policy_chains(&gnp("web"), &pol, &namer4);
    let lines = ipt_lines(find(&chains, "cali-pi-gnp/web"));
    let at = lines
        .iter()
        .position(|l| l.ends_with("--jump DROP"))
        .expect("the deny");
    assert_eq!(
        lines[at - 1],
        "-A cali-pi-gnp/web -m mark --mark 0x40000/0x40000 -m limit --limit 7/second \
         --limit-burst 7 --jump NFLOG --nflog-group 31 --nflog-prefix D,i,1,gnp/web --nflog-size 128"
    );
    let n = renderer(&on, IpVersion::V4, Backend::Nftables);
    let chains = n.policy_chains(&gnp("web"), &pol, &namer4);
    let lines = nft_lines(find(&chains, "filter-cali-pi-gnp/web"), IpVersion::V4);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("limit rate 7/second burst 7 packets")
                && l.contains("log prefix \"D,i,1,gnp/web\" group 31")),
        "{lines:#?}"
    );
    // Off (the default): no report rule anywhere.
    let chains = ipt(&[]).policy_chains(&gnp("web"), &pol, &namer4);
    assert!(!ipt_lines(find(&chains, "cali-pi-gnp/web"))
        .iter()
        .any(|l| l.contains("NFLOG")));
    // Endpoint chains: each tier's end and the final deny are reported too.
    let ep = WorkloadEndpoint {
        state: "active".into(),
        name: "calia".into(),
        tiers: vec![TierInfo {
            name: "default".into(),
            ingress_policies: vec![gnp("web")],
            egress_policies: Vec::new(),
            default_action: "Deny".into(),
        }],
        ..Default::default()
    };
    let chains = ipt(&on).workload_endpoint_chains("calia", &ep);
    let tw = ipt_lines(find(&chains, "cali-tw-calia"));
    for prefix in ["T,0,cali-tw-calia", "N,cali-tw-calia"] {
        assert!(
            tw.iter()
                .any(|l| l.contains(&format!("--nflog-prefix {prefix} "))),
            "{prefix}: {tw:#?}"
        );
    }
}
