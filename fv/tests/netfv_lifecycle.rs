//! Dataplane FV, daemon lifecycle on real traffic, per backend:
//! a restart with an unchanged datastore leaves rule counters intact; while
//! the daemon is stopped its rules stay and a new `cali*` interface passes
//! nothing (fail closed); a restart with a changed datastore sweeps the
//! stale chains, sets and routes and leaves non-Calico state alone.
//! And the iptables -> nftables -> iptables switch, which must leave nothing
//! of the other backend behind.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, ensure, Result};
use felix_fv::netfv::kernel::{
    calico_chains, calico_sets, iptables_calico_state, nft_calico_tables, rule_counters,
    workload_routes,
};
use felix_fv::netfv::topology::wep;
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};

const SETTLE: Duration = Duration::from_secs(20);

const BACKEND_INGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: backend-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'backend'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'frontend'
    destination:\n      ports: [api]\n";

const STALE_POLICY: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy
metadata:\n  name: stale-only
spec:\n  order: 50\n  selector: app == 'stale'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: role == 'stale-client'\n";

fn baseline() -> Vec<Check> {
    vec![
        Check::v4("frontend", "backend", 8080, true),
        Check::v6("frontend", "backend", 8080, true),
        Check::v4("db", "backend", 8080, false),
        Check::v4("backend", "db", 8080, true),
    ]
}

/// Non-Calico state in the node: an iptables rule, an nftables table and an
/// IP set, none of which the daemon may touch.
fn add_foreign_state(fv: &Fv) -> Result<()> {
    let n = &fv.sandbox.node;
    n.exec(
        "iptables",
        &[
            "-A",
            "FORWARD",
            "-s",
            "198.51.100.7/32",
            "-m",
            "comment",
            "--comment",
            "fv-keep",
            "-j",
            "ACCEPT",
        ],
    )?;
    n.exec("nft", &["add table inet fvkeep; add chain inet fvkeep c; add rule inet fvkeep c ip saddr 198.51.100.7 accept"])?;
    n.exec("ipset", &["create", "fvkeep", "hash:ip"])?;
    Ok(())
}

fn foreign_state_intact(fv: &Fv) -> Result<()> {
    let n = &fv.sandbox.node;
    let rules = n.exec("iptables", &["-S", "FORWARD"])?;
    ensure!(
        rules.contains("fv-keep"),
        "non-Calico iptables rule gone:\n{rules}"
    );
    let t = n.exec("nft", &["list", "table", "inet", "fvkeep"])?;
    ensure!(t.contains("198.51.100.7"), "non-Calico nft rule gone:\n{t}");
    let sets = n.exec("ipset", &["list", "-n"])?;
    ensure!(
        sets.lines().any(|l| l == "fvkeep"),
        "non-Calico IP set gone:\n{sets}"
    );
    Ok(())
}

fn lifecycle(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.ds.write("pol-backend", BACKEND_INGRESS)?;
    fv.ds.write("pol-stale", STALE_POLICY)?;
    fv.plug(wep("stale", "shop", "calistale0", 15).label("app", "stale"))?;
    fv.start(&[])?;
    add_foreign_state(&fv)?;
    fv.sandbox
        .expect_traffic("first start", &baseline(), SETTLE)?;

    // Restart with the same datastore: rule counters survive.
    let node = &fv.sandbox.node;
    let before: Vec<(String, u64)> = rule_counters(node, backend)?
        .into_iter()
        .filter(|(_, p)| *p > 0)
        .collect();
    ensure!(!before.is_empty(), "no rule of ours counted any packet");
    fv.stop()?;
    fv.start(&[])?;
    // The restarted daemon read the kernel back and reconciled: rules that
    // were already right must not have been rewritten (counters kept).
    let after = rule_counters(&fv.sandbox.node, backend)?;
    let mut reset = Vec::new();
    for (rule, pkts) in &before {
        match after.get(rule) {
            Some(p) if p >= pkts => {}
            other => reset.push(format!("{rule}: {pkts} -> {other:?}")),
        }
    }
    ensure!(
        reset.is_empty(),
        "counters reset by the restart:\n  {}",
        reset.join("\n  ")
    );
    fv.sandbox
        .expect_traffic("after restart", &baseline(), SETTLE)?;

    // Stopped: rules stay in force, a new interface passes nothing.
    let stale_iface = "calistale0";
    let chains_before = calico_chains(&fv.sandbox.node, backend)?;
    let sets_before = calico_sets(&fv.sandbox.node, backend)?;
    let bpf_before = bpf_policy_state(&fv)?;
    ensure!(
        chains_before.iter().any(|c| c.contains(stale_iface)),
        "no chain for {stale_iface} in {chains_before:?}"
    );
    let routes = workload_routes(&fv.sandbox.node, "-4")?;
    ensure!(
        routes.iter().any(|r| r.starts_with("10.65.0.15 ")),
        "no route to stale: {routes:?}"
    );
    fv.stop()?;
    fv.ds.remove("wep-stale")?;
    fv.ds.remove("pol-stale")?;
    fv.plug(wep("newbie", "shop", "calinew0", 16).label("app", "newbie"))?;
    let mut closed = baseline();
    closed.extend([
        Check::v4("newbie", "frontend", 8080, false),
        Check::v4("frontend", "newbie", 8080, false),
        Check::v6("newbie", "frontend", 8080, false),
        Check::v6("frontend", "newbie", 8080, false),
    ]);
    fv.sandbox
        .expect_traffic_now("daemon stopped, new interface", &closed)?;

    // Restart on the changed datastore: stale state swept, the rest kept.
    fv.start(&[])?;
    let node = &fv.sandbox.node;
    let chains_after = calico_chains(node, backend)?;
    let stale_chains: Vec<&String> = chains_after
        .iter()
        .filter(|c| c.contains(stale_iface))
        .collect();
    ensure!(
        stale_chains.is_empty(),
        "stale endpoint chains left: {stale_chains:?}"
    );
    if backend == Backend::Bpf {
        // eBPF mode: policies and IP sets live in the interpreter's maps. The stale
        // policy's set selects nobody: an empty set has no entry there to sweep.
        let after = bpf_policy_state(&fv)?;
        ensure!(
            after.0 < bpf_before.0 && after.1.is_subset(&bpf_before.1),
            "the stale policy (and its IP set) was not swept from the BPF maps: \
             (policy entries, set ids) before {bpf_before:?}, after {after:?}"
        );
    } else {
        let gone: BTreeSet<&String> = chains_before.difference(&chains_after).collect();
        ensure!(
            gone.iter().any(|c| !c.contains(stale_iface)),
            "the stale policy's chains were not swept (gone: {gone:?})"
        );
        let sets_after = calico_sets(node, backend)?;
        ensure!(
            !sets_before.is_subset(&sets_after),
            "the stale policy's IP set was not swept: before {sets_before:?}, after {sets_after:?}"
        );
    }
    poll(SETTLE, || {
        let r = workload_routes(node, "-4").ok()?;
        (!r.iter().any(|l| l.starts_with("10.65.0.15 "))
            && r.iter().any(|l| l.starts_with("10.65.0.16 ")))
        .then_some(())
    })
    .map_err(|e| {
        let all = node.ip(&["-4", "route", "show"]).unwrap_or_default();
        anyhow::anyhow!("stale route not swept or new route missing ({e}):\n{all}")
    })?;
    foreign_state_intact(&fv)?;
    let mut open = baseline();
    open.extend([
        Check::v4("newbie", "frontend", 8080, true),
        Check::v4("frontend", "newbie", 8080, true),
        Check::v6("frontend", "newbie", 9090, true),
    ]);
    fv.sandbox
        .expect_traffic("after the sweep", &open, SETTLE)?;
    fv.stop()
}

/// eBPF mode: (entries of the policy index, ids of the IP sets with members) in the
/// interpreter's maps; nothing in the other modes.
fn bpf_policy_state(fv: &Fv) -> Result<(usize, BTreeSet<u64>)> {
    let Some(fs) = &fv.bpffs else {
        return Ok((0, BTreeSet::new()));
    };
    let ops = felix_bpf::BpfOps::default();
    let maps = felix_bpf::PolicyMaps::open_or_create(&ops, &fs.root())?;
    let sets = maps.members(&ops)?.iter().map(|k| k.set_id).collect();
    Ok((maps.policies(&ops)?.len(), sets))
}

fn backend_switch() -> Result<()> {
    let refresh = [
        ("iptablesRefreshInterval", "3s"),
        ("nftablesRefreshInterval", "3s"),
    ];
    let mut fv = Fv::standard(Backend::Iptables, &refresh)?;
    fv.ds.write("pol-backend", BACKEND_INGRESS)?;
    fv.start_with(Backend::Iptables, &[])?;
    fv.sandbox.expect_traffic("iptables", &baseline(), SETTLE)?;
    let node = &fv.sandbox.node;
    ensure!(
        !iptables_calico_state(node).is_empty(),
        "no iptables state in iptables mode"
    );
    fv.stop()?;

    fv.start_with(Backend::Nftables, &[])?;
    fv.sandbox
        .expect_traffic("nftables after iptables", &baseline(), SETTLE)?;
    let node = &fv.sandbox.node;
    ensure!(
        nft_calico_tables(node)?.len() == 2,
        "expected ip and ip6 calico tables"
    );
    let left = poll(SETTLE, || {
        let st = iptables_calico_state(node);
        let sets = node.exec("ipset", &["list", "-n"]).ok()?;
        (st.is_empty() && !sets.lines().any(|l| l.starts_with("cali"))).then_some(())
    });
    if left.is_err() {
        bail!(
            "iptables state left in nftables mode: {:?}; ipsets: {}",
            iptables_calico_state(node),
            node.exec("ipset", &["list", "-n"]).unwrap_or_default()
        );
    }
    fv.stop()?;

    fv.start_with(Backend::Iptables, &[])?;
    fv.sandbox
        .expect_traffic("iptables after nftables", &baseline(), SETTLE)?;
    let node = &fv.sandbox.node;
    if poll(SETTLE, || {
        nft_calico_tables(node).ok().filter(BTreeSet::is_empty)
    })
    .is_err()
    {
        bail!(
            "nftables tables left in iptables mode: {:?}",
            nft_calico_tables(node)
        );
    }
    fv.stop()
}

fn run(what: &str, f: impl FnOnce() -> Result<()>) {
    if let Err(e) = f() {
        panic!("{what}: {e:#}");
    }
}

#[test]
fn lifecycle_iptables() {
    felix_netns::require!(netns TOOLS);
    run("iptables", || lifecycle(Backend::Iptables));
}

#[test]
fn lifecycle_nftables() {
    felix_netns::require!(netns TOOLS);
    run("nftables", || lifecycle(Backend::Nftables));
}

#[test]
fn backend_switch_iptables_nftables_and_back() {
    felix_netns::require!(netns TOOLS);
    run("switch", backend_switch);
}

#[test]
fn lifecycle_bpf() {
    felix_netns::require!(netns TOOLS);
    run("bpf", || lifecycle(Backend::Bpf));
}
