//! Dispatch chains on real traffic: a workload namespace joined to the test
//! namespace by a `cali*` veth; an unknown `cali*` interface passes nothing.

use std::process::Command;

use super::*;
use crate::dataplane::generictables::{Action, Chain, IpVersion, MatchCriteria, Rule, Table};
use crate::dataplane::iptables::{IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend};
use crate::dataplane::kernel::testns::TestNetns;

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
    let Some(node) = TestNetns::create(&tools) else {
        return;
    };
    let Some(wl) = TestNetns::create(&tools) else {
        return;
    };
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
