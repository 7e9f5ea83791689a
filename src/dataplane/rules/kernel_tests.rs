//! Dispatch chains on real traffic: a workload namespace joined to the test
//! namespace by a `cali*` veth; an unknown `cali*` interface passes nothing.

use std::process::Command;

use super::*;
use crate::dataplane::generictables::{Action, Chain, MatchCriteria, Rule, Table};
use crate::dataplane::iptables::{IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend};
use crate::dataplane::kernel::testns::TestNetns;
use crate::dataplane::IpVersion;

fn ping_ok(ns: &TestNetns, dst: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, "ping", "-c", "1", "-W", "1", dst])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn kernel_unknown_workload_interface_is_dropped_until_its_chain_exists() {
    let tools = ["iptables-nft-restore", "iptables-nft-save", "ping"];
    felix_netns::require!(netns tools);
    let node = TestNetns::create();
    let wl = TestNetns::create();
    node.sh(
        "ip",
        &[
            "link", "add", "cali1234", "type", "veth", "peer", "name", "eth0", "netns", &wl.name,
        ],
    );
    node.sh("ip", &["addr", "add", "10.0.0.1/24", "dev", "cali1234"]);
    node.sh("ip", &["link", "set", "cali1234", "up"]);
    wl.sh("ip", &["addr", "add", "10.0.0.2/24", "dev", "eth0"]);
    wl.sh("ip", &["link", "set", "eth0", "up"]);

    let mut t = IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Nft,
        IptablesMode::Program,
        node.commands("iptables"),
        IptablesOptions::default(),
    );
    let program = |t: &mut IptablesTable, names: &[String]| {
        for c in workload_dispatch_chains(names, &DispatchConfig::default()).all() {
            t.set_chain(c);
        }
        t.set_insert_rules(
            "INPUT",
            vec![Rule::new(
                MatchCriteria::new().in_interface("cali+"),
                Action::Jump(CHAIN_FROM_WORKLOAD_DISPATCH.into()),
            )],
        );
        t.apply().unwrap();
    };
    // No endpoints known: the interface is unknown, traffic is dropped.
    program(&mut t, &[]);
    assert!(
        !ping_ok(&wl, "10.0.0.1"),
        "unknown cali interface must pass nothing"
    );
    // The endpoint's chains appear: traffic flows.
    for pfx in [WORKLOAD_FROM_ENDPOINT_PFX, WORKLOAD_TO_ENDPOINT_PFX] {
        t.set_chain(Chain::new(
            &endpoint_chain_name(pfx, "cali1234", MAX_CHAIN_NAME_LENGTH_IPTABLES),
            vec![Rule::new(MatchCriteria::new(), Action::Accept)],
        ));
    }
    program(&mut t, &["cali1234".to_string()]);
    assert!(ping_ok(&wl, "10.0.0.1"));
    // A second, unknown cali interface is still dropped.
    node.sh(
        "ip",
        &[
            "link", "add", "cali9999", "type", "veth", "peer", "name", "eth1", "netns", &wl.name,
        ],
    );
    node.sh("ip", &["addr", "add", "10.0.1.1/24", "dev", "cali9999"]);
    node.sh("ip", &["link", "set", "cali9999", "up"]);
    wl.sh("ip", &["addr", "add", "10.0.1.2/24", "dev", "eth1"]);
    wl.sh("ip", &["link", "set", "eth1", "up"]);
    assert!(
        !ping_ok(&wl, "10.0.1.1"),
        "new cali interface must pass nothing"
    );
    assert!(ping_ok(&wl, "10.0.0.1"));
}

mod full_ruleset {
    //! The whole rendered ruleset (static, dispatch, one workload endpoint,
    //! one host endpoint, one policy, one profile, NAT) loads into a
    //! throwaway namespace with iptables-restore and with nft, and enforces
    //! the policy on real traffic.

    use std::collections::BTreeMap;

    use felix_config::{Config, Source};
    use felix_proto::{
        protocol::NumberOrName, HostEndpoint, Policy, PolicyId, Profile, ProfileId,
        Protocol as ProtoProtocol, Rule as ProtoRule, TierInfo, WorkloadEndpoint,
    };

    use super::ping_ok;
    use crate::dataplane::generictables::{Chain, Rule, Table};
    use crate::dataplane::ipsets::IpVersionConfig;
    use crate::dataplane::iptables::{
        IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
    };
    use crate::dataplane::kernel::testns::TestNetns;
    use crate::dataplane::kernel::RetryPolicy;
    use crate::dataplane::nftables::{NftSetKind, NftablesMode, NftablesOptions, NftablesTable};
    use crate::dataplane::rules::{Backend, RenderConfig, Renderer, TableName};
    use crate::dataplane::IpVersion;

    const SRC_SET: &str = "s:workloads";

    fn renderer(backend: Backend) -> Renderer {
        renderer_for(backend, IpVersion::V4)
    }

    fn renderer_for(backend: Backend, ipv: IpVersion) -> Renderer {
        let kv: BTreeMap<String, String> = [
            ("DefaultEndpointToHostAction", "ACCEPT"),
            ("LogConnectionTransitions", "FirstResponseAfterLog"),
            ("LogActionRateLimit", "10/second"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (cfg, errs) = Config::build(&[(Source::ConfigFile, kv)]);
        assert!(errs.is_empty(), "{errs:?}");
        Renderer::new(RenderConfig::build(&cfg, ipv, backend).unwrap())
    }

    fn icmp() -> Option<ProtoProtocol> {
        Some(ProtoProtocol {
            number_or_name: Some(NumberOrName::Name("icmp".into())),
        })
    }

    fn policy(action: &str) -> Policy {
        Policy {
            outbound_rules: vec![
                ProtoRule {
                    action: "log".into(),
                    protocol: icmp(),
                    ..Default::default()
                },
                ProtoRule {
                    action: action.into(),
                    protocol: icmp(),
                    src_ip_set_ids: vec![SRC_SET.into()],
                    dst_net: vec!["10.0.0.1/32".into(), "10.9.0.0/16".into()],
                    ..Default::default()
                },
            ],
            tier: "default".into(),
            ..Default::default()
        }
    }

    /// Chains per table and kernel-chain inserts for the whole ruleset.
    #[expect(clippy::type_complexity, reason = "a one-off table of test cases")]
    fn ruleset(
        r: &Renderer,
        action: &str,
    ) -> (Vec<(TableName, Chain)>, Vec<(TableName, String, Vec<Rule>)>) {
        let ipv = r.config().ip_version;
        let namer = |id: &str| IpVersionConfig::new(ipv).name_for_main_ipset(id);
        let pid = PolicyId {
            name: "icmp".into(),
            namespace: String::new(),
            kind: "GlobalNetworkPolicy".into(),
        };
        let prof = ProfileId {
            name: "kns.default".into(),
        };
        let tiers = vec![TierInfo {
            name: "default".into(),
            ingress_policies: vec![],
            egress_policies: vec![pid.clone()],
            default_action: "Deny".into(),
        }];
        let wep = WorkloadEndpoint {
            state: "active".into(),
            name: "cali1234".into(),
            profile_ids: vec![prof.name.clone()],
            tiers: tiers.clone(),
            ..Default::default()
        };
        let hep = HostEndpoint {
            name: "hep0".into(),
            tiers: vec![TierInfo {
                egress_policies: vec![],
                ingress_policies: vec![pid.clone()],
                ..tiers[0].clone()
            }],
            ..Default::default()
        };
        let mut chains = Vec::new();
        let mut inserts = Vec::new();
        for t in TableName::ALL {
            chains.extend(r.static_chains(t).into_iter().map(|c| (t, c)));
            for (k, rules) in r.static_insert_rules(t) {
                inserts.push((t, k, rules));
            }
        }
        let pol = policy(action);
        for t in [TableName::Filter, TableName::Mangle] {
            chains.extend(
                r.policy_chains_in(t, &pid, &pol, &namer)
                    .into_iter()
                    .map(|c| (t, c)),
            );
            let allow_all = Profile {
                inbound_rules: vec![ProtoRule::default()],
                outbound_rules: vec![ProtoRule::default()],
            };
            chains.extend(
                r.profile_chains_in(t, &prof, &allow_all, &namer)
                    .into_iter()
                    .map(|c| (t, c)),
            );
        }
        chains.extend(
            r.workload_endpoint_chains("cali1234", &wep)
                .into_iter()
                .map(|c| (TableName::Filter, c)),
        );
        chains.extend(r.host_endpoint_chains("hep0", &hep));
        chains.extend(r.dispatch_chains(&["cali1234".into()], &["hep0".into()]));
        chains.extend(
            r.masquerade_chains(
                &namer("masq-ipam-pools"),
                &namer("all-ipam-pools"),
                Some(&namer("all-hosts-net")),
            )
            .into_iter()
            .map(|c| (TableName::Nat, c)),
        );
        (chains, inserts)
    }

    fn wire(node: &TestNetns, wl: &TestNetns) {
        node.sh(
            "ip",
            &[
                "link", "add", "cali1234", "type", "veth", "peer", "name", "eth0", "netns",
                &wl.name,
            ],
        );
        node.sh("ip", &["addr", "add", "10.0.0.1/24", "dev", "cali1234"]);
        node.sh("ip", &["link", "set", "cali1234", "up"]);
        // A host-endpoint interface (veth: dummy may be unavailable).
        node.sh(
            "ip",
            &[
                "link", "add", "hep0", "type", "veth", "peer", "name", "hep1",
            ],
        );
        node.sh("ip", &["link", "set", "hep0", "up"]);
        wl.sh("ip", &["addr", "add", "10.0.0.2/24", "dev", "eth0"]);
        wl.sh("ip", &["link", "set", "eth0", "up"]);
    }

    #[test]
    fn kernel_full_ruleset_loads_and_enforces_with_iptables_restore() {
        let tools = ["iptables-nft-restore", "iptables-nft-save", "ipset", "ping"];
        felix_netns::require!(netns tools);
        let node = TestNetns::create();
        let wl = TestNetns::create();
        wire(&node, &wl);
        let names = IpVersionConfig::new(IpVersion::V4);
        for (id, ty, member) in [
            (SRC_SET, "hash:net", Some("10.0.0.2")),
            ("masq-ipam-pools", "hash:net", None),
            ("all-ipam-pools", "hash:net", None),
            ("all-hosts-net", "hash:net", None),
        ] {
            let n = names.name_for_main_ipset(id);
            node.sh("ipset", &["create", &n, ty]);
            if let Some(m) = member {
                node.sh("ipset", &["add", &n, m]);
            }
        }
        let r = renderer(Backend::Iptables);
        let mut tables: BTreeMap<TableName, IptablesTable> = TableName::ALL
            .iter()
            .map(|t| {
                (
                    *t,
                    IptablesTable::new(
                        t.as_str(),
                        IpVersion::V4,
                        ResolvedBackend::Nft,
                        IptablesMode::Program,
                        node.commands("iptables"),
                        IptablesOptions::default(),
                    ),
                )
            })
            .collect();
        let mut program = |action: &str| {
            let (chains, inserts) = ruleset(&r, action);
            for (t, c) in chains {
                tables.get_mut(&t).unwrap().set_chain(c);
            }
            for (t, k, rules) in inserts {
                tables.get_mut(&t).unwrap().set_insert_rules(&k, rules);
            }
            for (t, table) in tables.iter_mut() {
                table
                    .apply()
                    .unwrap_or_else(|e| panic!("{t:?} failed to load: {e}"));
            }
        };
        program("allow");
        let saved = node.sh("iptables-nft-save", &["-t", "filter"]);
        for want in [
            "-A INPUT -m comment --comment \"cali:",
            ":cali-log-conn",
            "-A cali-tw-cali1234",
            "--match-set cali40s:workloads src",
        ] {
            assert!(saved.contains(want), "missing {want:?} in\n{saved}");
        }
        assert!(ping_ok(&wl, "10.0.0.1"), "policy allows ICMP to the host");
        program("deny");
        assert!(!ping_ok(&wl, "10.0.0.1"), "policy denies ICMP to the host");
    }

    #[test]
    fn kernel_full_ruleset_loads_and_enforces_with_nft() {
        felix_netns::require!(netns ["nft", "ping"]);
        let node = TestNetns::create();
        let wl = TestNetns::create();
        wire(&node, &wl);
        let names = IpVersionConfig::new(IpVersion::V4);
        let r = renderer(Backend::Nftables);
        let mut table = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            node.commands("nft"),
            NftablesOptions {
                retry: RetryPolicy::without_sleeping(),
                ..NftablesOptions::default()
            },
        );
        table.set_ip_set(
            &names.name_for_main_ipset(SRC_SET),
            NftSetKind::Net,
            ["10.0.0.2".to_string()],
        );
        for id in ["masq-ipam-pools", "all-ipam-pools", "all-hosts-net"] {
            table.set_ip_set(&names.name_for_main_ipset(id), NftSetKind::Net, []);
        }
        let mut program = |action: &str| {
            let (chains, inserts) = ruleset(&r, action);
            for (_, c) in chains {
                table.set_chain(c);
            }
            for (_, k, rules) in inserts {
                table.set_insert_rules(&k, rules);
            }
            table
                .apply()
                .unwrap_or_else(|e| panic!("nft failed to load: {e}"));
        };
        program("allow");
        let listed = node.sh("nft", &["list", "table", "ip", "calico"]);
        for want in [
            "chain filter-cali-log-conn",
            "chain filter-cali-tw-cali1234",
            "chain raw-cali-PREROUTING",
            "ip saddr @cali40s-workloads",
        ] {
            assert!(listed.contains(want), "missing {want:?} in\n{listed}");
        }
        assert!(ping_ok(&wl, "10.0.0.1"), "policy allows ICMP to the host");
        program("deny");
        assert!(!ping_ok(&wl, "10.0.0.1"), "policy denies ICMP to the host");
    }

    #[test]
    fn kernel_full_ipv6_ruleset_loads_in_both_backends() {
        let tools = [
            "ip6tables-nft-restore",
            "ip6tables-nft-save",
            "ipset",
            "nft",
        ];
        felix_netns::require!(netns tools);
        let node = TestNetns::create();
        let names = IpVersionConfig::new(IpVersion::V6);
        let set_ids = [
            SRC_SET,
            "masq-ipam-pools",
            "all-ipam-pools",
            "all-hosts-net",
        ];
        for id in set_ids {
            let n = names.name_for_main_ipset(id);
            node.sh("ipset", &["create", &n, "hash:net", "family", "inet6"]);
        }
        let r = renderer_for(Backend::Iptables, IpVersion::V6);
        let (chains, inserts) = ruleset(&r, "allow");
        for t in TableName::ALL {
            let mut table = IptablesTable::new(
                t.as_str(),
                IpVersion::V6,
                ResolvedBackend::Nft,
                IptablesMode::Program,
                node.commands("ip6tables"),
                IptablesOptions::default(),
            );
            for (_, c) in chains.iter().filter(|(ct, _)| *ct == t) {
                table.set_chain(c.clone());
            }
            for (_, k, rules) in inserts.iter().filter(|(ct, _, _)| *ct == t) {
                table.set_insert_rules(k, rules.clone());
            }
            table
                .apply()
                .unwrap_or_else(|e| panic!("ip6tables {t:?} failed to load: {e}"));
        }
        let r = renderer_for(Backend::Nftables, IpVersion::V6);
        let mut table = NftablesTable::new(
            IpVersion::V6,
            NftablesMode::Program,
            node.commands("nft"),
            NftablesOptions {
                retry: RetryPolicy::without_sleeping(),
                ..NftablesOptions::default()
            },
        );
        for id in set_ids {
            table.set_ip_set(&names.name_for_main_ipset(id), NftSetKind::Net, []);
        }
        let (chains, inserts) = ruleset(&r, "deny");
        for (_, c) in chains {
            table.set_chain(c);
        }
        for (_, k, rules) in inserts {
            table.set_insert_rules(&k, rules);
        }
        table
            .apply()
            .unwrap_or_else(|e| panic!("nft ip6 failed to load: {e}"));
        let listed = node.sh("nft", &["list", "table", "ip6", "calico"]);
        assert!(listed.contains("icmpv6 type"), "{listed}");
    }
}
