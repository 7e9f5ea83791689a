//! Manager and wiring tests without a kernel: messages in, desired state out
//! (with a fake chain source), and the whole wiring inside an actor runtime
//! over scripted commands (phase order, what reaches each tool).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use felix_actors::{
    ApplyCtx, DesiredInput, InSync, Manager, SupervisorBuilder, SupervisorConfig, UpdateBatch,
};
use felix_config::{Config, Source};
use felix_proto as pb;
use ipnet::IpNet;

use super::*;
use crate::dataplane::desired::{IfacesDesired, IpSetsDesired, NftDesired, RoutesDesired, SetSpec};
use crate::dataplane::generictables::{Action, Chain, Match, MatchCriteria, Rule};
use crate::dataplane::ipsets::IpSetType;
use crate::dataplane::kernel::{CommandRequest, FakeResponse, ScriptedCommands};
use crate::dataplane::rules::TableName;
use crate::dataplane::IpVersion;

/// A chain source whose output is easy to predict.
struct Fake;

fn chain(name: &str, n: usize) -> Chain {
    Chain::new(
        name,
        (0..n)
            .map(|_| Rule::new(MatchCriteria::new(), Action::Accept))
            .collect(),
    )
}

impl ChainSource for Fake {
    fn static_chains(&self, table: TableName) -> Vec<Chain> {
        match table {
            TableName::Filter => vec![chain("cali-FORWARD", 1)],
            TableName::Nat => vec![chain("cali-nat-outgoing", 0)],
            _ => Vec::new(),
        }
    }
    fn static_insert_rules(&self, table: TableName) -> Vec<(String, Vec<Rule>)> {
        match table {
            TableName::Filter => vec![(
                "FORWARD".into(),
                vec![Rule::new(
                    MatchCriteria::new(),
                    Action::Jump("cali-FORWARD".into()),
                )],
            )],
            _ => Vec::new(),
        }
    }
    fn policy_chains(&self, id: &pb::PolicyId, p: &pb::Policy) -> Vec<(TableName, Chain)> {
        let t = if p.untracked {
            TableName::Raw
        } else {
            TableName::Filter
        };
        vec![
            (
                t,
                chain(&format!("cali-pi-{}", id.name), p.inbound_rules.len()),
            ),
            (
                t,
                chain(&format!("cali-po-{}", id.name), p.outbound_rules.len()),
            ),
        ]
    }
    fn profile_chains(&self, id: &pb::ProfileId, p: &pb::Profile) -> Vec<(TableName, Chain)> {
        vec![(
            TableName::Filter,
            chain(&format!("cali-pri-{}", id.name), p.inbound_rules.len()),
        )]
    }
    fn workload_endpoint_chains(&self, iface: &str, ep: &pb::WorkloadEndpoint) -> Vec<Chain> {
        vec![
            chain(&format!("cali-tw-{iface}"), ep.profile_ids.len()),
            chain(&format!("cali-fw-{iface}"), ep.profile_ids.len()),
        ]
    }
    fn host_endpoint_chains(&self, iface: &str, _ep: &pb::HostEndpoint) -> Vec<(TableName, Chain)> {
        vec![(TableName::Filter, chain(&format!("cali-th-{iface}"), 1))]
    }
    fn dispatch_chains(&self, wl: &[String], host: &[String]) -> Vec<(TableName, Chain)> {
        let mut rules: Vec<Rule> = wl
            .iter()
            .chain(host)
            .map(|i| {
                Rule::new(
                    MatchCriteria::new().out_interface(i),
                    Action::Goto(format!("cali-tw-{i}")),
                )
            })
            .collect();
        rules.push(Rule::new(MatchCriteria::new(), Action::Drop));
        vec![(TableName::Filter, Chain::new("cali-to-wl-dispatch", rules))]
    }
    fn masquerade_chains(&self, masq: &str, all: &str, hosts: Option<&str>) -> Vec<Chain> {
        let mut m = MatchCriteria::new()
            .source_ip_set(masq)
            .with(Match::DestIpSet {
                set: all.into(),
                negate: true,
            });
        if let Some(h) = hosts {
            m = m.with(Match::DestIpSet {
                set: h.into(),
                negate: true,
            });
        }
        vec![Chain::new(
            "cali-nat-outgoing",
            vec![Rule::new(
                m,
                Action::Masquerade {
                    to_ports: None,
                    fully_random: false,
                },
            )],
        )]
    }
    fn rpf_skip_chain(&self, allowed: &[(String, Vec<IpNet>)]) -> Chain {
        let rules = allowed
            .iter()
            .flat_map(|(i, nets)| {
                nets.iter().map(move |n| {
                    Rule::new(
                        MatchCriteria::new().in_interface(i).source_net(*n),
                        Action::Accept,
                    )
                })
            })
            .collect();
        Chain::new("cali-rpf-skip", rules)
    }
    fn ipset_name(&self, id: &str) -> String {
        format!("cali40{id}")
    }
}

fn pass(m: &mut dyn Manager<Payload>, full: bool) {
    m.complete_deferred_work(&mut ApplyCtx::new("manager/x", full, 1))
        .unwrap();
}

fn chain_names(tables: &TableInputs, t: TableName) -> Vec<String> {
    tables.read(t, |d| d.chains.iter().map(|(k, _)| k.clone()).collect())
}

fn wep(iface: &str, ip: &str, state: &str) -> pb::WorkloadEndpoint {
    pb::WorkloadEndpoint {
        state: state.into(),
        name: iface.into(),
        profile_ids: vec!["allow".into()],
        ipv4_nets: vec![format!("{ip}/32")],
        ipv6_nets: vec!["fd00::5/128".into()],
        ..Default::default()
    }
}

fn wep_update(id: &str, ep: pb::WorkloadEndpoint) -> Payload {
    Payload::WorkloadEndpointUpdate(pb::WorkloadEndpointUpdate {
        id: Some(pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: id.into(),
            endpoint_id: "eth0".into(),
        }),
        endpoint: Some(ep),
    })
}

fn wep_remove(id: &str) -> Payload {
    Payload::WorkloadEndpointRemove(pb::WorkloadEndpointRemove {
        id: Some(pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: id.into(),
            endpoint_id: "eth0".into(),
        }),
    })
}

fn ep_outputs(tables: TableInputs) -> EndpointOutputs {
    EndpointOutputs {
        tables: Some(tables),
        routes: DesiredInput::new(RoutesDesired::default()),
        ifaces: DesiredInput::new(IfacesDesired::default()),
    }
}

/// The chains cell of a `*tables`-mode endpoint manager.
fn tables(out: &EndpointOutputs) -> &TableInputs {
    out.tables.as_ref().expect("a *tables-mode manager")
}

#[test]
fn ebpf_mode_endpoint_manager_writes_routes_and_settings_but_no_chain() {
    let out = EndpointOutputs {
        tables: None,
        ..ep_outputs(TableInputs::new_iptables())
    };
    let mut m = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    m.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    pass(&mut m, true);
    assert_eq!(
        routes_of(&out)["cali1"],
        BTreeSet::from(["10.65.0.2/32".parse().unwrap()])
    );
    assert_eq!(out.ifaces.read(|d| d.len()), 1);
    m.on_update(&wep_update("b", wep("cali2", "10.65.0.3", "active")));
    m.on_update(&wep_remove("a"));
    pass(&mut m, false);
    assert_eq!(routes_of(&out).keys().collect::<Vec<_>>(), vec!["cali2"]);
}

fn routes_of(out: &EndpointOutputs) -> BTreeMap<String, BTreeSet<IpNet>> {
    out.routes.read(|d| {
        d.iter()
            .map(|(k, e)| {
                (
                    k.iface.clone().unwrap_or_default(),
                    e.value.iter().map(|t| t.dst).collect(),
                )
            })
            .collect()
    })
}

/// `allowSpoofedSourcePrefixes` (passed by the calc graph only with
/// `WorkloadSourceSpoofing=Any`): `cali-rpf-skip` (raw) accepts the
/// workload's prefixes of the manager's family from its interface, the
/// interface's `rp_filter` is relaxed, and both revert when the prefixes go.
#[test]
fn endpoint_manager_exempts_spoofed_source_prefixes_from_the_rpf_check() {
    let out = ep_outputs(TableInputs::new_iptables());
    let mut m = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    let rpf = |out: &EndpointOutputs| {
        tables(out).read(TableName::Raw, |d| {
            d.chains
                .get(&"cali-rpf-skip".to_string())
                .map(|c| c.rules.clone())
        })
    };
    let rp_filter = |out: &EndpointOutputs, iface: &str| {
        out.ifaces
            .read(|d| d.get(&iface.to_string()).map(|s| s.rp_filter))
    };
    pass(&mut m, true);
    assert_eq!(rpf(&out), Some(Vec::new()), "empty with no spoofers");
    let spoofer = pb::WorkloadEndpoint {
        allow_spoofed_source_prefixes: vec!["10.9.0.1/16".into(), "fd00:9::/64".into()],
        ..wep("cali1", "10.65.0.2", "active")
    };
    m.on_update(&wep_update("a", spoofer));
    m.on_update(&wep_update("b", wep("cali2", "10.65.0.3", "active")));
    pass(&mut m, false);
    assert_eq!(
        rpf(&out),
        Some(vec![Rule::new(
            MatchCriteria::new()
                .in_interface("cali1")
                .source_net("10.9.0.0/16".parse().unwrap()),
            Action::Accept,
        )])
    );
    assert_eq!(rp_filter(&out, "cali1"), Some(0));
    assert_eq!(rp_filter(&out, "cali2"), Some(1));
    // The prefixes go: the exemption and the relaxed rp_filter go with them.
    m.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    pass(&mut m, false);
    assert_eq!(rpf(&out), Some(Vec::new()));
    assert_eq!(rp_filter(&out, "cali1"), Some(1));
}

#[test]
fn endpoint_manager_programs_chains_dispatch_routes_and_settings_then_sweeps_a_removed_endpoint() {
    let out = ep_outputs(TableInputs::new_iptables());
    let mut m = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    pass(&mut m, true);
    // No endpoints: the dispatch chain exists and only drops.
    let d = tables(&out).read(TableName::Filter, |d| {
        d.chains.get(&"cali-to-wl-dispatch".to_string()).cloned()
    });
    assert_eq!(d.map(|c| c.rules.len()), Some(1));

    m.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    m.on_update(&wep_update("b", wep("cali2", "10.65.0.3", "down")));
    pass(&mut m, false);
    assert_eq!(
        chain_names(tables(&out), TableName::Filter),
        vec![
            "cali-fw-cali1",
            "cali-fw-cali2",
            "cali-to-wl-dispatch",
            "cali-tw-cali1",
            "cali-tw-cali2"
        ]
    );
    let dispatch = tables(&out).read(TableName::Filter, |d| {
        d.chains
            .get(&"cali-to-wl-dispatch".to_string())
            .cloned()
            .unwrap()
    });
    assert_eq!(dispatch.rules.len(), 3);
    assert_eq!(dispatch.rules.last().unwrap().action, Action::Drop);
    // Only the active endpoint is routed and configured.
    assert_eq!(
        routes_of(&out),
        BTreeMap::from([(
            "cali1".to_string(),
            BTreeSet::from(["10.65.0.2/32".parse().unwrap()])
        )])
    );
    assert_eq!(out.ifaces.read(|d| d.len()), 1);

    // An update that does not change the interface set leaves dispatch alone.
    let v = tables(&out).read(TableName::Filter, |d| {
        d.chains
            .iter()
            .find(|(k, _)| *k == "cali-to-wl-dispatch")
            .map(|(_, e)| e.generation)
    });
    m.on_update(&wep_update("a", wep("cali1", "10.65.0.9", "active")));
    pass(&mut m, false);
    let v2 = tables(&out).read(TableName::Filter, |d| {
        d.chains
            .iter()
            .find(|(k, _)| *k == "cali-to-wl-dispatch")
            .map(|(_, e)| e.generation)
    });
    assert_eq!(v, v2);
    assert_eq!(
        routes_of(&out)["cali1"],
        BTreeSet::from(["10.65.0.9/32".parse().unwrap()])
    );

    m.on_update(&wep_remove("a"));
    pass(&mut m, false);
    assert_eq!(
        chain_names(tables(&out), TableName::Filter),
        vec!["cali-fw-cali2", "cali-to-wl-dispatch", "cali-tw-cali2"]
    );
    assert!(routes_of(&out).is_empty());
    assert_eq!(out.ifaces.read(|d| d.len()), 0);
}

#[test]
fn ipv6_endpoint_manager_routes_only_ipv6_addresses() {
    let out = ep_outputs(TableInputs::new_iptables());
    let mut m = EndpointManager::new(
        "manager/endpoints-v6",
        IpVersion::V6,
        Arc::new(Fake),
        out.clone(),
    );
    m.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    pass(&mut m, true);
    assert_eq!(
        routes_of(&out)["cali1"],
        BTreeSet::from(["fd00::5/128".parse().unwrap()])
    );
}

#[test]
fn restarted_manager_full_rewrite_drops_stale_entries_of_its_own_only() {
    let out = ep_outputs(TableInputs::new_iptables());
    let mut first = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    first.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    first.on_update(&wep_update("b", wep("cali2", "10.65.0.3", "active")));
    pass(&mut first, true);
    let mut stat = StaticManager::new("manager/static-v4", Arc::new(Fake), tables(&out).clone());
    pass(&mut stat, true);
    // The replacement never hears of "b" (removed while it was down).
    let mut second = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    second.on_update(&wep_update("a", wep("cali1", "10.65.0.2", "active")));
    pass(&mut second, true);
    assert_eq!(
        chain_names(tables(&out), TableName::Filter),
        vec![
            "cali-FORWARD",
            "cali-fw-cali1",
            "cali-to-wl-dispatch",
            "cali-tw-cali1"
        ]
    );
    assert_eq!(routes_of(&out).keys().collect::<Vec<_>>(), vec!["cali1"]);
}

#[test]
fn policy_manager_places_updates_and_removes_policy_and_profile_chains() {
    let tables = TableInputs::new_iptables();
    let mut m = PolicyManager::new("manager/policy-v4", Arc::new(Fake), tables.clone());
    let id = pb::PolicyId {
        name: "p1".into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    };
    let upd = |untracked: bool, n: usize| {
        Payload::ActivePolicyUpdate(pb::ActivePolicyUpdate {
            id: Some(id.clone()),
            policy: Some(pb::Policy {
                untracked,
                inbound_rules: vec![pb::Rule::default(); n],
                ..Default::default()
            }),
        })
    };
    m.on_update(&upd(false, 2));
    m.on_update(&Payload::ActiveProfileUpdate(pb::ActiveProfileUpdate {
        id: Some(pb::ProfileId {
            name: "allow".into(),
        }),
        profile: Some(pb::Profile::default()),
    }));
    pass(&mut m, true);
    assert_eq!(
        chain_names(&tables, TableName::Filter),
        vec!["cali-pi-p1", "cali-po-p1", "cali-pri-allow"]
    );
    // Becoming untracked moves the chains from filter to raw.
    m.on_update(&upd(true, 3));
    pass(&mut m, false);
    assert_eq!(
        chain_names(&tables, TableName::Filter),
        vec!["cali-pri-allow"]
    );
    assert_eq!(
        chain_names(&tables, TableName::Raw),
        vec!["cali-pi-p1", "cali-po-p1"]
    );
    m.on_update(&Payload::ActivePolicyRemove(pb::ActivePolicyRemove {
        id: Some(id.clone()),
    }));
    m.on_update(&Payload::ActiveProfileRemove(pb::ActiveProfileRemove {
        id: Some(pb::ProfileId {
            name: "allow".into(),
        }),
    }));
    pass(&mut m, false);
    assert!(chain_names(&tables, TableName::Filter).is_empty());
    assert!(chain_names(&tables, TableName::Raw).is_empty());
}

#[test]
fn ipsets_manager_applies_full_updates_deltas_and_removals() {
    let cell = DesiredInput::new(IpSetsDesired::default());
    let mut m = IpSetsManager::new(
        "manager/ipsets-v4",
        IpVersion::V4,
        SetInputs::Ipset(cell.clone()),
    );
    m.on_update(&Payload::IpsetUpdate(pb::IpSetUpdate {
        id: "s:a".into(),
        members: vec!["10.0.0.1".into(), "10.0.0.2".into()],
        r#type: pb::ip_set_update::IpSetType::Ip as i32,
    }));
    m.on_update(&Payload::IpsetUpdate(pb::IpSetUpdate {
        id: "n:b".into(),
        members: vec!["10.1.0.0/16".into()],
        r#type: pb::ip_set_update::IpSetType::Net as i32,
    }));
    pass(&mut m, true);
    let v1 = cell.version();
    m.on_update(&Payload::IpsetDeltaUpdate(pb::IpSetDeltaUpdate {
        id: "s:a".into(),
        added_members: vec!["10.0.0.3".into()],
        removed_members: vec!["10.0.0.1".into()],
    }));
    m.on_update(&Payload::IpsetRemove(pb::IpSetRemove { id: "n:b".into() }));
    pass(&mut m, false);
    assert_eq!(cell.version(), v1 + 1, "one input write per pass");
    let got = cell.read(|d| {
        d.iter()
            .map(|(k, e)| (k.clone(), e.value.clone()))
            .collect::<Vec<_>>()
    });
    assert_eq!(
        got,
        vec![(
            "s:a".to_string(),
            SetSpec {
                set_type: IpSetType::HashIp,
                members: ["10.0.0.2".to_string(), "10.0.0.3".to_string()].into()
            }
        )]
    );
    // A pass with nothing dirty writes nothing (drivers stay clean).
    pass(&mut m, false);
    assert_eq!(cell.version(), v1 + 1);
}

#[test]
fn a_family_set_manager_keeps_only_its_familys_members() {
    for (ipv, expected) in [
        (
            IpVersion::V4,
            vec!["10.0.0.1", "10.0.0.3,tcp:80", "10.2.0.0/16"],
        ),
        (
            IpVersion::V6,
            vec!["fd00::1", "fd00::3,tcp:80", "fd02::/64"],
        ),
    ] {
        let cell = DesiredInput::new(IpSetsDesired::default());
        let mut m = IpSetsManager::new("manager/ipsets", ipv, SetInputs::Ipset(cell.clone()));
        m.on_update(&Payload::IpsetUpdate(pb::IpSetUpdate {
            id: "s:a".into(),
            members: vec![
                "10.0.0.1".into(),
                "fd00::1".into(),
                "10.0.0.3,tcp:80".into(),
                "fd00::3,tcp:80".into(),
            ],
            r#type: pb::ip_set_update::IpSetType::Ip as i32,
        }));
        pass(&mut m, true);
        m.on_update(&Payload::IpsetDeltaUpdate(pb::IpSetDeltaUpdate {
            id: "s:a".into(),
            added_members: vec!["10.2.0.0/16".into(), "fd02::/64".into()],
            removed_members: vec![],
        }));
        pass(&mut m, false);
        let got: Vec<String> = cell.read(|d| {
            d.iter()
                .flat_map(|(_, e)| e.value.members.clone())
                .collect()
        });
        let mut expected: Vec<String> = expected.into_iter().map(String::from).collect();
        expected.sort();
        assert_eq!(got, expected, "{ipv:?}");
    }
}

#[test]
fn masq_manager_keeps_pool_sets_of_its_family_and_the_nat_chain() {
    let tables = TableInputs::new_iptables();
    let sets = SetInputs::Ipset(DesiredInput::new(IpSetsDesired::default()));
    let mut stat = StaticManager::new("manager/static-v4", Arc::new(Fake), tables.clone());
    let mut m = MasqManager::new(
        "manager/masq-v4",
        IpVersion::V4,
        Arc::new(Fake),
        tables.clone(),
        sets.clone(),
    );
    let pool = |id: &str, cidr: &str, masq: bool| {
        Payload::IpamPoolUpdate(pb::IpamPoolUpdate {
            id: id.into(),
            pool: Some(pb::IpamPool {
                cidr: cidr.into(),
                masquerade: masq,
                ..Default::default()
            }),
        })
    };
    m.on_update(&pool("p1", "10.65.0.0/16", true));
    m.on_update(&pool("p2", "10.66.0.0/16", false));
    m.on_update(&pool("p6", "fd00::/64", true));
    pass(&mut stat, true);
    pass(&mut m, true);
    let members = |id: &str| {
        sets.read(|d| {
            d.get(&id.to_string())
                .map(|s| s.members.iter().cloned().collect::<Vec<_>>())
        })
    };
    assert_eq!(
        members(IPSET_ID_ALL_POOLS).unwrap(),
        vec!["10.65.0.0/16", "10.66.0.0/16"]
    );
    assert_eq!(members(IPSET_ID_MASQ_POOLS).unwrap(), vec!["10.65.0.0/16"]);
    let nat = tables.read(TableName::Nat, |d| {
        d.chains
            .get(&"cali-nat-outgoing".to_string())
            .cloned()
            .unwrap()
    });
    assert_eq!(nat.rules.len(), 1);
    assert_eq!(
        nat.ip_set_names(),
        vec!["cali40masq-ipam-pools", "cali40network-ip-pools"]
    );
    // A static rewrite (after a static manager restart) must not clobber it.
    let mut stat2 = StaticManager::new("manager/static-v4", Arc::new(Fake), tables.clone());
    pass(&mut stat2, true);
    let nat = tables.read(TableName::Nat, |d| {
        d.chains
            .get(&"cali-nat-outgoing".to_string())
            .cloned()
            .unwrap()
    });
    assert_eq!(nat.rules.len(), 1);
}

/// `NATOutgoingExclusions=IPPoolsAndHostIPs`: the masq manager keeps
/// `all-hosts-net` with each node's address of its family (mask stripped,
/// other family ignored, removal honoured) and the chain excludes it; with
/// the default (`IPPoolsOnly`) it keeps no host set and the chain names none.
#[test]
fn masq_manager_excludes_host_ips_only_when_configured() {
    let host = |name: &str, v4: &str, v6: &str| {
        Payload::HostMetadataUpdate(pb::HostMetadataUpdate {
            hostname: name.into(),
            ipv4_addr: v4.into(),
            ipv6_addr: v6.into(),
            ..Default::default()
        })
    };
    for exclude in [false, true] {
        let tables = TableInputs::new_iptables();
        let sets = SetInputs::Ipset(DesiredInput::new(IpSetsDesired::default()));
        let mut m = MasqManager::new(
            "manager/masq-v4",
            IpVersion::V4,
            Arc::new(Fake),
            tables.clone(),
            sets.clone(),
        )
        .excluding_host_ips(exclude);
        assert!(MasqManager::wants(&host("n", "", "")));
        m.on_update(&host("node1", "192.168.0.1/24", "fd00::1"));
        m.on_update(&host("node2", "192.168.0.2", ""));
        m.on_update(&host("node3", "", "fd00::3"));
        m.on_update(&host("node4", "192.168.0.4", ""));
        m.on_update(&Payload::HostMetadataRemove(pb::HostMetadataRemove {
            hostname: "node4".into(),
            ..Default::default()
        }));
        pass(&mut m, true);
        let hosts = sets.read(|d| {
            d.get(&IPSET_ID_ALL_HOSTS.to_string())
                .map(|s| s.members.iter().cloned().collect::<Vec<_>>())
        });
        let nat = tables.read(TableName::Nat, |d| {
            d.chains
                .get(&"cali-nat-outgoing".to_string())
                .cloned()
                .unwrap()
        });
        if exclude {
            assert_eq!(hosts.unwrap(), vec!["192.168.0.1", "192.168.0.2"]);
            assert_eq!(
                nat.ip_set_names(),
                vec![
                    "cali40masq-ipam-pools",
                    "cali40network-ip-pools",
                    "cali40all-hosts-net"
                ]
            );
        } else {
            assert_eq!(hosts, None);
            assert_eq!(
                nat.ip_set_names(),
                vec!["cali40masq-ipam-pools", "cali40network-ip-pools"]
            );
        }
    }
}

#[test]
fn nftables_inputs_hold_every_layer_and_the_sets_in_one_cell() {
    let cell = DesiredInput::new(NftDesired::default());
    let tables = TableInputs::Nftables(cell.clone());
    let mut stat = StaticManager::new("manager/static-v4", Arc::new(Fake), tables.clone());
    let mut sets = IpSetsManager::new(
        "manager/ipsets-v4",
        IpVersion::V4,
        SetInputs::Nftables(cell.clone()),
    );
    sets.on_update(&Payload::IpsetUpdate(pb::IpSetUpdate {
        id: "s:a".into(),
        members: vec!["10.0.0.1".into()],
        r#type: 0,
    }));
    pass(&mut stat, true);
    pass(&mut sets, true);
    cell.read(|d| {
        assert_eq!(
            d.tables.keys().collect::<Vec<_>>(),
            vec!["filter", "mangle", "nat", "raw"]
        );
        assert_eq!(d.tables["filter"].inserts.len(), 1);
        assert_eq!(d.sets.len(), 1);
    });
}

// ---- whole wiring in the actor runtime over scripted commands ----

fn cfg_with(kv: &[(&str, &str)]) -> Config {
    let layer: BTreeMap<String, String> = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (cfg, errs) = Config::build(&[(Source::ConfigFile, layer)]);
    assert!(errs.is_empty(), "{errs:?}");
    cfg
}

fn kernel_responder(req: &CommandRequest) -> FakeResponse {
    let args = req.args.join(" ");
    match req.program.as_str() {
        "ip" if args.contains("route show") => FakeResponse::Ok("[]".into()),
        "nft" if args.contains("list table") => {
            FakeResponse::Fail(1, "Error: No such file or directory".into())
        }
        _ => FakeResponse::Ok(String::new()),
    }
}

fn messages() -> Vec<Payload> {
    vec![
        Payload::IpsetUpdate(pb::IpSetUpdate {
            id: "s:web".into(),
            members: vec!["10.65.0.2".into()],
            r#type: 0,
        }),
        Payload::ActivePolicyUpdate(pb::ActivePolicyUpdate {
            id: Some(pb::PolicyId {
                name: "allow-web".into(),
                namespace: String::new(),
                kind: "GlobalNetworkPolicy".into(),
            }),
            policy: Some(pb::Policy {
                tier: "default".into(),
                inbound_rules: vec![pb::Rule {
                    action: "allow".into(),
                    src_ip_set_ids: vec!["s:web".into()],
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        Payload::ActiveProfileUpdate(pb::ActiveProfileUpdate {
            id: Some(pb::ProfileId {
                name: "kns.default".into(),
            }),
            profile: Some(pb::Profile::default()),
        }),
        // The endpoint references the policy and the profile: only referenced chains are
        // programmed.
        wep_update(
            "a",
            pb::WorkloadEndpoint {
                profile_ids: vec!["kns.default".into()],
                tiers: vec![pb::TierInfo {
                    name: "default".into(),
                    ingress_policies: vec![pb::PolicyId {
                        name: "allow-web".into(),
                        namespace: String::new(),
                        kind: "GlobalNetworkPolicy".into(),
                    }],
                    ..Default::default()
                }],
                ..wep("cali1", "10.65.0.2", "active")
            },
        ),
    ]
}

async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..300 {
        if cond() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// The daemon's wiring for `cfg` over the scripted kernel `fake`, started.
fn start_wired(
    cfg: &Config,
    fake: &Arc<ScriptedCommands>,
) -> felix_actors::SupervisorHandle<Payload> {
    let builder = SupervisorBuilder::new(
        SupervisorConfig::default(),
        crate::daemon::messages::state_key,
    );
    crate::dataplane::wiring::register(builder, cfg, fake.clone())
        .unwrap()
        .start()
        .unwrap()
}

fn first_index(calls: &[CommandRequest], f: impl Fn(&CommandRequest) -> bool) -> Option<usize> {
    calls.iter().position(f)
}

#[actix_rt::test]
async fn iptables_wiring_creates_sets_before_rules_and_routes_the_workload_only_after_in_sync() {
    let fake = ScriptedCommands::new(kernel_responder);
    let cali1 = fake.netlink_fake().add_link("cali1");
    let cfg = cfg_with(&[("Ipv6Support", "false")]);
    let h = start_wired(&cfg, &fake);
    h.addr.do_send(UpdateBatch(messages()));
    actix_rt::time::sleep(Duration::from_millis(200)).await;
    assert!(fake.calls().is_empty(), "kernel touched before in-sync");
    assert!(
        fake.netlink_fake().take_writes().is_empty(),
        "routes before in-sync"
    );
    h.addr.do_send(InSync);
    // The filter table's restore: the other tables hold nothing the endpoint references.
    let done = wait_for(|| {
        !fake.netlink_fake().routes().is_empty()
            && fake.calls().iter().any(|c| {
                c.program.contains("iptables")
                    && c.program.ends_with("restore")
                    && c.stdin
                        .as_deref()
                        .is_some_and(|s| s.starts_with(b"*filter"))
            })
    })
    .await;
    let calls = fake.calls();
    assert!(done, "{calls:#?}");
    let set_restore = first_index(&calls, |c| {
        c.program == "ipset" && c.args.first().map(String::as_str) == Some("restore")
    })
    .expect("ipset restore");
    let restores: Vec<&CommandRequest> = calls
        .iter()
        .filter(|c| c.program.contains("iptables") && c.program.ends_with("restore"))
        .collect();
    let table_restore = first_index(&calls, |c| {
        c.program.contains("iptables") && c.program.ends_with("restore")
    })
    .unwrap();
    assert!(
        set_restore < table_restore,
        "sets must exist before rules reference them"
    );
    let ipset_in = String::from_utf8_lossy(calls[set_restore].stdin.as_deref().unwrap_or_default())
        .into_owned();
    assert!(ipset_in.contains("10.65.0.2"), "{ipset_in}");
    let all_rules: String = restores
        .iter()
        .map(|c| String::from_utf8_lossy(c.stdin.as_deref().unwrap_or_default()).into_owned())
        .collect();
    for needle in [
        "cali-tw-cali1",
        "cali-pi-",
        "cali-pri-kns.default",
        "cali-to-wl-dispatch",
        "FORWARD -m comment",
    ] {
        assert!(
            all_rules.contains(needle),
            "{needle} missing from\n{all_rules}"
        );
    }
    let routes = fake.netlink_fake().routes();
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert_eq!(routes[0].dst.to_string(), "10.65.0.2/32");
    assert_eq!(routes[0].ifindex, Some(cali1));
    assert_eq!((routes[0].protocol, routes[0].scope_link), (3, true));
    assert!(calls.iter().any(|c| c.program == "sysctl"
        && c.args
            .contains(&"net/ipv4/conf/cali1/proxy_arp=1".to_string())));
    // The seam saw the driver operations under their actor names.
    let metrics = h.metrics.render_prometheus();
    assert!(metrics.contains("driver/routes-v4"), "{metrics}");
    assert!(metrics.contains("driver/ipsets-v4"), "{metrics}");
}

#[actix_rt::test]
async fn nftables_wiring_programs_one_layered_transaction_with_sets() {
    let fake = ScriptedCommands::new(kernel_responder);
    let cfg = cfg_with(&[("NFTablesMode", "Enabled"), ("Ipv6Support", "true")]);
    let h = start_wired(&cfg, &fake);
    h.addr.do_send(UpdateBatch(messages()));
    h.addr.do_send(InSync);
    let is_tx = |c: &CommandRequest| c.program == "nft" && c.args.join(" ").contains("-f");
    let done = wait_for(|| fake.calls().iter().filter(|c| is_tx(c)).count() >= 2).await;
    let calls = fake.calls();
    assert!(done, "{calls:#?}");
    let scripts: Vec<String> = calls
        .iter()
        .filter(|c| is_tx(c))
        .map(|c| String::from_utf8_lossy(c.stdin.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let v4 = scripts
        .iter()
        .find(|s| s.contains("table ip calico"))
        .expect("v4 transaction");
    assert!(v4.contains("filter-cali-tw-cali1"), "{v4}");
    assert!(!v4.contains("filter-filter-"), "double layering in {v4}");
    assert!(v4.contains("10.65.0.2"), "{v4}");
    assert!(
        scripts.iter().any(|s| s.contains("table ip6 calico")),
        "IPv6 wired too"
    );
    // ipset is only used to list (and destroy) an iptables-mode run's
    // leftovers (driver/ipset-cleanup-vN); no set is written.
    assert!(
        !calls.iter().any(|c| c.program == "ipset"
            && !matches!(c.args.first().map(String::as_str), Some("list" | "destroy"))),
        "no ipset writes in nftables mode"
    );
    drop(h);
}

fn hep_update(id: &str, name: &str, ips: &[&str]) -> Payload {
    Payload::HostEndpointUpdate(pb::HostEndpointUpdate {
        id: Some(pb::HostEndpointId {
            endpoint_id: id.into(),
        }),
        endpoint: Some(pb::HostEndpoint {
            name: name.into(),
            expected_ipv4_addrs: ips.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
    })
}

#[test]
fn host_endpoints_by_expected_ip_follow_the_interface_monitor() {
    use crate::dataplane::ifacemon::{IfaceEvent, InterfaceState, LinkInfo};
    let state = InterfaceState::default();
    let link = |index, name: &str| {
        IfaceEvent::Link(LinkInfo {
            index,
            name: name.into(),
            up: true,
        })
    };
    let addr = |index, a: &str, added| IfaceEvent::Addr {
        index,
        addr: a.parse().unwrap(),
        added,
    };
    state.apply(link(2, "eth0"));
    state.apply(link(3, "eth1"));
    state.apply(link(4, "cali1"));
    state.apply(addr(2, "192.0.2.1", true));
    state.apply(addr(4, "192.0.2.9", true));
    let out = ep_outputs(TableInputs::new_iptables());
    let mut m = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    )
    .with_interfaces(&state, &["cali".to_string()]);
    pass(&mut m, true);
    // By expected IP: eth0 carries it; the workload interface with a
    // matching address is never a host endpoint.
    m.on_update(&hep_update("by-ip", "", &["192.0.2.1", "192.0.2.9"]));
    pass(&mut m, false);
    let filter = |out: &EndpointOutputs| chain_names(tables(out), TableName::Filter);
    assert!(filter(&out).contains(&"cali-th-eth0".to_string()));
    assert!(!filter(&out).contains(&"cali-th-cali1".to_string()));
    let dispatch_has = |out: &EndpointOutputs, iface: &str| {
        tables(out).read(TableName::Filter, |d| {
            d.chains
                .get(&"cali-to-wl-dispatch".to_string())
                .is_some_and(|c| c.rules.iter().any(|r| format!("{r:?}").contains(iface)))
        })
    };
    assert!(dispatch_has(&out, "eth0"));

    // The address moves to eth1: the endpoint follows at the next pass.
    state.apply(addr(2, "192.0.2.1", false));
    state.apply(addr(3, "192.0.2.1", true));
    pass(&mut m, false);
    assert!(filter(&out).contains(&"cali-th-eth1".to_string()));
    assert!(!filter(&out).contains(&"cali-th-eth0".to_string()));

    // A named endpoint claims eth1 over the by-IP one.
    m.on_update(&hep_update("named", "eth1", &[]));
    pass(&mut m, false);
    assert_eq!(
        filter(&out)
            .iter()
            .filter(|c| c.starts_with("cali-th-"))
            .count(),
        1
    );
    assert!(filter(&out).contains(&"cali-th-eth1".to_string()));
    // Without the interface state, a by-IP endpoint matches nothing.
    let out2 = ep_outputs(TableInputs::new_iptables());
    let mut bare = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out2.clone(),
    );
    bare.on_update(&hep_update("by-ip", "", &["192.0.2.1"]));
    pass(&mut bare, true);
    assert!(!filter(&out2).iter().any(|c| c.starts_with("cali-th-")));
}

fn route_generation(out: &EndpointOutputs, iface: &str) -> Option<u64> {
    out.routes.read(|d| {
        d.iter()
            .find(|(k, _)| k.iface.as_deref() == Some(iface))
            .map(|(_, e)| e.generation)
    })
}

fn tw_rules(out: &EndpointOutputs, iface: &str) -> Option<usize> {
    tables(out).read(TableName::Filter, |d| {
        d.chains
            .get(&format!("cali-tw-{iface}"))
            .map(|c| c.rules.len())
    })
}

/// Make-before-break identity change of a workload on one interface, in
/// both families: the new endpoint (another identity, same interface and
/// address) arrives, then the old one goes. The interface's routes,
/// settings and chains must stay throughout, and the routes must not even
/// be rewritten.
#[test]
fn workload_interface_keeps_routes_settings_and_chains_when_endpoint_changes_identity_make_before_break(
) {
    for (ipv, net) in [
        (IpVersion::V4, "10.65.0.10/32"),
        (IpVersion::V6, "fd00::5/128"),
    ] {
        let out = ep_outputs(TableInputs::new_iptables());
        let mut m = EndpointManager::new("manager/endpoints", ipv, Arc::new(Fake), out.clone());
        pass(&mut m, true);
        m.on_update(&wep_update("old-pod", wep("caliX", "10.65.0.10", "active")));
        pass(&mut m, false);
        let gen = route_generation(&out, "caliX");
        assert!(gen.is_some(), "{ipv:?}: route programmed");

        // The new identity (two profiles, so its chains are told apart).
        let mut new = wep("caliX", "10.65.0.10", "active");
        new.profile_ids.push("other".into());
        m.on_update(&wep_update("new-pod", new));
        pass(&mut m, false);
        assert_eq!(
            tw_rules(&out, "caliX"),
            Some(2),
            "{ipv:?}: newest claim owns"
        );
        assert_eq!(route_generation(&out, "caliX"), gen, "{ipv:?}");

        m.on_update(&wep_remove("old-pod"));
        pass(&mut m, false);
        assert_eq!(
            routes_of(&out).get("caliX"),
            Some(&BTreeSet::from([net.parse().unwrap()])),
            "{ipv:?}: route kept after the old identity's removal"
        );
        assert_eq!(
            route_generation(&out, "caliX"),
            gen,
            "{ipv:?}: never rewritten"
        );
        assert_eq!(out.ifaces.read(|d| d.len()), 1, "{ipv:?}: settings kept");
        assert_eq!(tw_rules(&out, "caliX"), Some(2), "{ipv:?}: chains kept");

        m.on_update(&wep_remove("new-pod"));
        pass(&mut m, false);
        assert!(routes_of(&out).is_empty(), "{ipv:?}");
        assert_eq!(out.ifaces.read(|d| d.len()), 0, "{ipv:?}");
        assert_eq!(tw_rules(&out, "caliX"), None, "{ipv:?}");
    }
}

/// Removing the endpoint that owns an interface hands it to the shadowed
/// one (its own routes and chains, written in place in the same pass);
/// removing a shadowed endpoint changes nothing.
#[test]
fn removing_the_owner_of_an_interface_reactivates_the_shadowed_endpoint_in_place() {
    let out = ep_outputs(TableInputs::new_iptables());
    let mut m = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        out.clone(),
    );
    pass(&mut m, true);
    m.on_update(&wep_update("a", wep("caliX", "10.65.0.10", "active")));
    let mut b = wep("caliX", "10.65.0.11", "active");
    b.profile_ids.push("other".into());
    m.on_update(&wep_update("b", b.clone()));
    pass(&mut m, false);
    let r = |ip: &str| BTreeSet::from([format!("{ip}/32").parse::<IpNet>().unwrap()]);
    assert_eq!(
        routes_of(&out)["caliX"],
        r("10.65.0.11"),
        "newest claim owns"
    );
    assert_eq!(tw_rules(&out, "caliX"), Some(2));

    // An update of the shadowed endpoint keeps it shadowed.
    let mut a2 = wep("caliX", "10.65.0.10", "active");
    a2.profile_ids.clear();
    m.on_update(&wep_update("a", a2));
    pass(&mut m, false);
    assert_eq!(routes_of(&out)["caliX"], r("10.65.0.11"));
    assert_eq!(tw_rules(&out, "caliX"), Some(2));

    // The owner goes: the survivor takes over in place.
    m.on_update(&wep_remove("b"));
    pass(&mut m, false);
    assert_eq!(routes_of(&out)["caliX"], r("10.65.0.10"));
    assert_eq!(tw_rules(&out, "caliX"), Some(0));
    assert_eq!(out.ifaces.read(|d| d.len()), 1);

    // Break-before-make ends in the same state.
    m.on_update(&wep_remove("a"));
    pass(&mut m, false);
    assert!(routes_of(&out).is_empty());
    m.on_update(&wep_update("b", b));
    pass(&mut m, false);
    assert_eq!(routes_of(&out)["caliX"], r("10.65.0.11"));
    assert_eq!(tw_rules(&out, "caliX"), Some(2));

    // A restarted manager replays in order: the newest claim still owns.
    let again = ep_outputs(TableInputs::new_iptables());
    let mut m2 = EndpointManager::new(
        "manager/endpoints-v4",
        IpVersion::V4,
        Arc::new(Fake),
        again.clone(),
    );
    m2.on_update(&wep_update("a", wep("caliX", "10.65.0.10", "active")));
    let mut c = wep("caliX", "10.65.0.12", "active");
    c.profile_ids.push("other".into());
    m2.on_update(&wep_update("c", c));
    pass(&mut m2, true);
    assert_eq!(routes_of(&again)["caliX"], r("10.65.0.12"));
    assert_eq!(tw_rules(&again, "caliX"), Some(2));
}

/// Issue 27 item 5: a kernel operation the tool refuses reaches `/status` as the driver's
/// `lastError`, naming the operation and its kind and carrying the tool's own message.
#[actix_rt::test]
async fn a_refused_kernel_operation_shows_the_tools_message_in_status() {
    const NFT_SAYS: &str = "Error: Could not process rule: Operation not supported";
    let fake = ScriptedCommands::new(|req: &CommandRequest| {
        let args = req.args.join(" ");
        if req.program == "nft" && args.starts_with("-f") {
            FakeResponse::Fail(1, NFT_SAYS.into())
        } else {
            kernel_responder(req)
        }
    });
    let cfg = cfg_with(&[("NFTablesMode", "Enabled"), ("Ipv6Support", "false")]);
    let h = start_wired(&cfg, &fake);
    h.addr.do_send(UpdateBatch(messages()));
    h.addr.do_send(InSync);
    let status = h.status.clone();
    let reached = wait_for(|| {
        status
            .actor("driver/nftables-v4")
            .is_some_and(|a| a.last_error.is_some())
    })
    .await;
    let row = status.actor("driver/nftables-v4").unwrap();
    assert!(reached, "{row:?}");
    let err = row.last_error.unwrap();
    assert_eq!(
        err.kind,
        Some(felix_actors::FailureKind::Refused),
        "{err:?}"
    );
    assert!(
        err.op.is_some_and(|op| op.starts_with("nft")),
        "{:?}",
        err.message
    );
    assert!(err.message.contains(NFT_SAYS), "{}", err.message);
}
