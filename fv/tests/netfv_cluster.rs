//! Dataplane FV, networking between nodes: three nodes in namespaces on two
//! subnets behind a router, each running `felix run` on one shared
//! datastore (see `felix_fv::netfv::cluster`), two CNI-wired workloads per
//! node, per backend:
//!
//! * the harness itself: the fabric routes node to node, pods on one node
//!   talk (profile allow) with felix running;
//! * VXLAN `Always`: every pair connects over IPv4 and IPv6, cross-node
//!   traffic is VXLAN between node addresses with the pod source address
//!   preserved; the VXLAN device, routes, FDB and neighbour entries are as
//!   upstream programs them; an unallocated address of a local block is
//!   blackholed (never sent back out); the same on a real etcd;
//! * `CrossSubnet` after switching from `Always`: node1<->node2 direct,
//!   node3 encapsulated;
//! * no encapsulation with `ProgramClusterRoutes=Enabled`;
//! * a policy between pods on different nodes, and a change to it;
//! * a block moving to another node, then a node's removal;
//! * a long-lived connection surviving a restart of felix on both ends.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use felix_fv::netfv::cluster::{block4, block6, Cluster, ClusterOpts, Path, VXLAN_V4, VXLAN_V6};
use felix_fv::netfv::datastore::{ipam_block_yaml, Wep};
use felix_fv::netfv::kernel;
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check};
use serde_json::Value;

/// What the cluster tests need besides root and `ip`: the single-node
/// harness's `TOOLS` plus `bridge` (FDB read-back) and `ping`.
const CLUSTER_TOOLS: [&str; 6] = ["iptables-save", "ipset", "nft", "sysctl", "bridge", "ping"];

/// The etcd variant's tools.
const ETCD_TOOLS: [&str; 7] = [
    "iptables-save",
    "ipset",
    "nft",
    "sysctl",
    "bridge",
    "ping",
    "etcd",
];

/// How long routing and policy get to settle after a change.
const SETTLE: Duration = Duration::from_secs(20);

/// Runs a scenario on a fresh cluster; the failure message carries the
/// tail of every daemon's log.
fn scenario(opts: ClusterOpts, f: impl FnOnce(&mut Cluster) -> Result<()>) {
    let backend = opts.backend;
    let mut c = match Cluster::new(opts) {
        Ok(c) => c,
        Err(e) => panic!("{backend:?}: building the cluster: {e:#}"),
    };
    if let Err(e) = f(&mut c) {
        panic!("{backend:?}: {e:#}\n{}", c.logs(25));
    }
    for i in 1..=3 {
        if let Err(e) = c.stop_felix(i) {
            panic!("{backend:?}: stopping felix on node{i}: {e:#}");
        }
    }
}

fn pairs(c: &Cluster, path: impl Fn(u8, u8) -> Path) -> Result<Vec<(String, String, Path)>> {
    let mut v = Vec::new();
    for (f, t) in c.cross_node_pairs()? {
        let p = path(c.node_of(&f)?, c.node_of(&t)?);
        v.push((f, t, p));
    }
    Ok(v)
}

fn same_subnet(a: u8, b: u8) -> bool {
    (a <= 2) == (b <= 2)
}

/// Waits until `f` holds on the kernel state; the error shows `f`'s last
/// description of what it saw.
fn expect_kernel(what: &str, mut f: impl FnMut() -> Result<Option<String>>) -> Result<()> {
    let mut last = String::new();
    poll(SETTLE, || match f() {
        Ok(None) => Some(()),
        Ok(Some(why)) => {
            last = why;
            None
        }
        Err(e) => {
            last = format!("{e:#}");
            None
        }
    })
    .map_err(|_| anyhow::anyhow!("{what}: {last}"))
}

fn routes_desc(rs: &[Value]) -> String {
    rs.iter()
        .map(kernel::describe_route)
        .collect::<Vec<_>>()
        .join("; ")
}

/// On node `on`: a route to `dst` via `gw` over `dev` (on-link when
/// `onlink`), or none at all when `gw` is `None`.
fn route_check(
    c: &Cluster,
    on: u8,
    dst: &str,
    want: Option<(&str, &str, bool)>,
) -> Result<Option<String>> {
    let ns = &c.node(on)?.ns;
    let r = kernel::route_to(ns, dst)?;
    let ok = match (&r, want) {
        (None, None) => true,
        (Some(r), Some((gw, dev, onlink))) => {
            r["gateway"].as_str() == Some(gw)
                && r["dev"].as_str() == Some(dev)
                && (!onlink
                    || r["flags"]
                        .as_array()
                        .is_some_and(|f| f.iter().any(|x| x == "onlink")))
        }
        _ => false,
    };
    Ok((!ok).then(|| {
        format!(
            "node{on}: route to {dst}: want {want:?}, have {}",
            r.map(|r| kernel::describe_route(&r))
                .unwrap_or("none".into())
        )
    }))
}

fn blackhole_check(c: &Cluster, on: u8, dst: &str, present: bool) -> Result<Option<String>> {
    let family = if dst.contains(':') { "-6" } else { "-4" };
    let rs = kernel::routes(&c.node(on)?.ns, family)?;
    let have = rs
        .iter()
        .any(|r| r["dst"].as_str() == Some(dst) && r["type"].as_str() == Some("blackhole"));
    Ok((have != present).then(|| {
        format!(
            "node{on}: blackhole {dst} {} expected; routes: {}",
            if present { "" } else { "not" },
            routes_desc(&rs)
        )
    }))
}

/// On node `on`: the permanent neighbour and FDB entries for node `of`'s
/// VTEP (IPv4 device) are present (or absent).
fn vtep_entries_check(c: &Cluster, on: u8, of: u8, present: bool) -> Result<Option<String>> {
    let ns = &c.node(on)?.ns;
    let peer = c.node(of)?;
    let vtep = peer.vtep4().to_string();
    let neigh = kernel::neighbours(ns, VXLAN_V4)?;
    let fdb = kernel::fdb(ns, VXLAN_V4)?;
    let has_neigh = neigh.iter().any(|n| {
        n["dst"].as_str() == Some(&vtep)
            && n["lladdr"].as_str() == Some(&peer.mac4)
            && n["state"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x == "PERMANENT"))
    });
    let addr = peer.addr4.to_string();
    let has_fdb = fdb
        .iter()
        .any(|f| f["mac"].as_str() == Some(&peer.mac4) && f["dst"].as_str() == Some(&addr));
    let mut neigh_any = neigh.iter().any(|n| n["dst"].as_str() == Some(&vtep));
    neigh_any |= neigh
        .iter()
        .any(|n| n["lladdr"].as_str() == Some(&peer.mac4));
    let fdb_any = fdb.iter().any(|f| f["mac"].as_str() == Some(&peer.mac4));
    let ok = if present {
        has_neigh && has_fdb
    } else {
        !neigh_any && !fdb_any
    };
    Ok((!ok).then(|| {
        format!(
            "node{on}: VTEP of node{of} ({vtep} {} at {addr}) {} expected; neigh {}; fdb {}",
            peer.mac4,
            if present { "present" } else { "absent" },
            Value::Array(neigh),
            Value::Array(fdb)
        )
    }))
}

// ---------------------------------------------------------------- harness

/// The harness without felix's cross-node routing: the fabric routes node1
/// to node3 and node2 (both families), and pods on one node talk to each
/// other with felix running (profile allow).
fn harness_self_check(c: &mut Cluster) -> Result<()> {
    let n1 = &c.node(1)?.ns;
    for dst in ["10.0.2.3", "10.0.1.2", "fd00:2::3", "fd00:1::2"] {
        poll(Duration::from_secs(10), || {
            n1.exec("ping", &["-c", "1", "-W", "1", dst]).ok()
        })
        .with_context(|| format!("node1 cannot ping {dst} over the fabric"))?;
    }
    c.start_all()?;
    let mut checks = Vec::new();
    for i in 1..=3 {
        let (a, b) = (format!("n{i}a"), format!("n{i}b"));
        checks.push(Check::v4(&a, &b, 8080, true));
        checks.push(Check::v4(&b, &a, 9090, true));
        checks.push(Check::v6(&a, &b, 8080, true));
    }
    c.expect_traffic("pods on one node", &checks, SETTLE)?;

    // The path counters, on routes made by hand (the pools are not VXLAN
    // pools and cluster routes are off, so felix programs none itself):
    // node1 <-> node2 direct, node1 <-> node3 over a VXLAN device of ours.
    let (a1, a2) = (c.node(1)?.addr4.to_string(), c.node(2)?.addr4.to_string());
    c.node(1)?
        .ns
        .ip(&["route", "add", &block4(2), "via", &a2, "dev", "eth0"])?;
    c.node(2)?
        .ns
        .ip(&["route", "add", &block4(1), "via", &a1, "dev", "eth0"])?;
    hand_vxlan(c, 1, 3)?;
    hand_vxlan(c, 3, 1)?;
    c.expect_paths(
        "hand-made routes",
        &[
            ("n1a".into(), "n2b".into(), Path::Direct),
            ("n2a".into(), "n1b".into(), Path::Direct),
            ("n1a".into(), "n3b".into(), Path::Encapsulated),
            ("n3a".into(), "n1a".into(), Path::Encapsulated),
        ],
        8080,
        false,
        SETTLE,
    )?;
    // No route between node2 and node3's pods: no connection at all.
    let seen = c.path("n2a", "n3a", 8080, false)?;
    ensure!(
        seen.answered_by.is_none() && seen.encapsulated == 0,
        "n2a -> n3a without routes: {seen:?}"
    );
    // The router's counters see direct traffic from node to node.
    let seen = c.count_sent_to(1, "10.0.2.3".parse::<IpAddr>()?, || n1_ping(c, "10.0.2.3"))?;
    seen.0?;
    ensure!(seen.1 > 0, "router counted no packets from node1 to node3");
    Ok(())
}

/// A VXLAN device `vxlfv` (VNI 99, port 4789) on node `on` with a route to
/// node `to`'s IPv4 block through it, as felix would program it.
fn hand_vxlan(c: &Cluster, on: u8, to: u8) -> Result<()> {
    let (n, peer) = (c.node(on)?, c.node(to)?);
    let ns = &n.ns;
    let local = n.addr4.to_string();
    let mac = format!("02:00:00:00:99:0{on}");
    let peer_mac = format!("02:00:00:00:99:0{to}");
    let peer_vtep = format!("10.99.0.{to}");
    ns.ip(&[
        "link",
        "add",
        "vxlfv",
        "address",
        &mac,
        "type",
        "vxlan",
        "id",
        "99",
        "dstport",
        "4789",
        "local",
        &local,
        "dev",
        "eth0",
        "nolearning",
    ])?;
    ns.ip(&["addr", "add", &format!("10.99.0.{on}/32"), "dev", "vxlfv"])?;
    ns.ip(&["link", "set", "vxlfv", "up"])?;
    ns.ip(&[
        "neigh",
        "add",
        &peer_vtep,
        "lladdr",
        &peer_mac,
        "dev",
        "vxlfv",
        "nud",
        "permanent",
    ])?;
    ns.exec(
        "bridge",
        &[
            "fdb",
            "append",
            &peer_mac,
            "dev",
            "vxlfv",
            "dst",
            &peer.addr4.to_string(),
        ],
    )?;
    ns.ip(&[
        "route",
        "add",
        &block4(to),
        "via",
        &peer_vtep,
        "dev",
        "vxlfv",
        "onlink",
    ])?;
    Ok(())
}

fn n1_ping(c: &Cluster, dst: &str) -> Result<()> {
    c.node(1)?.ns.exec("ping", &["-c", "2", "-W", "1", dst])?;
    Ok(())
}

#[test]
fn cluster_harness_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Never"),
        harness_self_check,
    );
}

#[test]
fn cluster_harness_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Never"),
        harness_self_check,
    );
}

/// The etcd datastore without cross-node routing: every daemon converges on
/// the etcd server in the router namespace (reached over the fabric), and
/// a policy written to etcd, then deleted, governs pods on one node.
fn harness_etcd(c: &mut Cluster) -> Result<()> {
    ensure!(c.datastore_spec().starts_with("etcdv3:"), "not on etcd");
    c.start_all()?;
    c.expect_traffic(
        "pods on node3",
        &[
            Check::v4("n3a", "n3b", 8080, true),
            Check::v6("n3a", "n3b", 8080, true),
        ],
        SETTLE,
    )?;
    c.write("pol-b", &role_b_from("n1"))?;
    c.expect_traffic(
        "policy through etcd",
        &[
            Check::v4("n3a", "n3b", 8080, false),
            Check::v4("n3b", "n3a", 8080, true),
            Check::v4("n2a", "n2b", 8080, false),
        ],
        SETTLE,
    )?;
    c.remove("pol-b")?;
    c.expect_traffic(
        "policy deleted from etcd",
        &[
            Check::v4("n3a", "n3b", 8080, true),
            Check::v4("n2a", "n2b", 8080, true),
        ],
        SETTLE,
    )
}

#[test]
fn cluster_harness_etcd() {
    felix_netns::require!(netns ETCD_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Never").etcd(),
        harness_etcd,
    );
}

// ------------------------------------------------------------ VXLAN Always

fn vxlan_always(c: &mut Cluster) -> Result<()> {
    c.start_all()?;
    c.expect_traffic("all pairs v4", &c.all_pairs(8080, false), SETTLE)?;
    let all = pairs(c, |_, _| Path::Encapsulated)?;
    c.expect_paths(
        "v4 cross-node traffic encapsulated, source kept",
        &all,
        8080,
        false,
        SETTLE,
    )?;

    // The device and what felix programmed for the other nodes.
    for on in 1..=3u8 {
        let node = c.node(on)?;
        let link = kernel::link_details(&node.ns, VXLAN_V4)?
            .with_context(|| format!("node{on}: no {VXLAN_V4}"))?;
        let info = &link["linkinfo"]["info_data"];
        ensure!(
            info["id"] == 4096
                && info["port"] == 4789
                && info["local"].as_str() == Some(&node.addr4.to_string()),
            "node{on}: {VXLAN_V4} parameters: {info}"
        );
        for of in (1..=3u8).filter(|&o| o != on) {
            let peer = c.node(of)?;
            let vtep = peer.vtep4().to_string();
            expect_kernel("VXLAN route", || {
                route_check(c, on, &peer.block4(), Some((&vtep, VXLAN_V4, true)))
            })?;
            expect_kernel("VTEP entries", || vtep_entries_check(c, on, of, true))?;
        }
        expect_kernel("blackhole for the local block", || {
            blackhole_check(c, on, &block4(on), true)
        })?;
        expect_kernel("blackhole for the local v6 block", || {
            blackhole_check(c, on, &block6(on), true)
        })?;
    }

    // An unallocated address of node1's block, sent from node2: dropped on
    // node1, never routed back out to the router.
    let unallocated: IpAddr = "10.65.1.40".parse()?;
    let (_, sent) = c.count_sent_to(1, unallocated, || {
        felix_fv::netfv::traffic::probe(c.workload("n2a")?.ns.name(), unallocated, 8080)
    })?;
    ensure!(
        sent == 0,
        "node1 sent {sent} packet(s) for unallocated {unallocated} back out to the router"
    );

    // IPv6 VXLAN.
    c.expect_traffic("all pairs v6", &c.all_pairs(8080, true), SETTLE)?;
    c.expect_paths(
        "v6 cross-node traffic encapsulated, source kept",
        &all,
        8080,
        true,
        SETTLE,
    )?;
    for on in 1..=3u8 {
        let node = c.node(on)?;
        let link = kernel::link_details(&node.ns, VXLAN_V6)?
            .with_context(|| format!("node{on}: no {VXLAN_V6}"))?;
        let info = &link["linkinfo"]["info_data"];
        ensure!(
            info["id"] == 4096
                && info["port"] == 4789
                && info["local6"].as_str() == Some(&node.addr6.to_string()),
            "node{on}: {VXLAN_V6} parameters: {info}"
        );
    }
    restarted_managers_and_drivers_leave_routing_state_unchanged(c)
}

/// Node 1's routing state: routes of both families, the VXLAN devices with their
/// neighbour and FDB entries (interface indices included, so a recreated device shows).
/// Neighbour and FDB entries are compared as sets: the kernel promises no listing order,
/// and one CI run listed node 1's two IPv4 VXLAN neighbours swapped after the restarts,
/// with the same entries.
fn routing_state(c: &Cluster) -> Result<String> {
    let ns = &c.node(1)?.ns;
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        out.push(serde_json::to_string(&kernel::routes(ns, fam)?)?);
    }
    let as_set = |entries: Vec<Value>| -> Result<String> {
        let mut v = entries
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        v.sort();
        Ok(format!("[{}]", v.join(",")))
    };
    for dev in [VXLAN_V4, VXLAN_V6] {
        let link =
            kernel::link_details(ns, dev)?.map(|l| (l["ifindex"].clone(), l["address"].clone()));
        out.push(format!("{link:?}"));
        out.push(as_set(kernel::neighbours(ns, dev)?)?);
        out.push(as_set(kernel::fdb(ns, dev)?)?);
    }
    Ok(out.join("\n"))
}

/// Node 1's counts of the VXLAN drivers' removals of devices, addresses and neighbours
/// (`felix_seam_ops_total` of `link-del`, `addr-del`, `neigh-del`; absent counts as 0).
fn vxlan_removals(c: &mut Cluster) -> Result<Vec<(String, &'static str, u64)>> {
    let metrics = c.node_mut(1)?.d()?.metrics()?;
    let mut out = Vec::new();
    for actor in ["driver/vxlan-v4", "driver/vxlan-v6"] {
        for op in ["link-del", "addr-del", "neigh-del"] {
            let key = format!("felix_seam_ops_total{{actor=\"{actor}\",op=\"{op}\"}} ");
            let n = metrics
                .lines()
                .find_map(|l| l.strip_prefix(&key))
                .map(|v| v.trim().parse::<u64>())
                .transpose()
                .with_context(|| format!("{key}: not a count"))?
                .unwrap_or(0);
            out.push((actor.to_string(), op, n));
        }
    }
    Ok(out)
}

/// The cluster-route managers and the routing drivers of node 1 are restarted by injected
/// panics while a fourth node and a second local block come and go (the managers replay
/// routes, VTEPs and pools; a restarted driver reads the kernel back): afterwards the
/// kernel's routing state is exactly what it was, and traffic still flows.
fn restarted_managers_and_drivers_leave_routing_state_unchanged(c: &mut Cluster) -> Result<()> {
    let before = routing_state(c)?;
    let removals_before = vxlan_removals(c)?;
    let actors: Vec<String> = ["v4", "v6"]
        .iter()
        .flat_map(|f| {
            [
                format!("manager/cluster-routes-{f}"),
                format!("driver/routes-{f}"),
                format!("driver/vxlan-{f}"),
            ]
        })
        .collect();
    {
        let d = c.node_mut(1)?.d()?;
        for a in &actors {
            let op = if a.starts_with("manager/") {
                "on_update"
            } else {
                "*"
            };
            d.add_fault(a, op, "panic", 1)?;
        }
    }
    c.write(
        "node4.yaml",
        "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: node4\nspec:\n  bgp:\n    ipv4Address: 10.0.2.44/24\n    ipv6Address: \"fd00:2::44/64\"\n  ipv4VXLANTunnelAddr: 10.65.4.1\n  ipv6VXLANTunnelAddr: \"fd00:65:4::1\"\n",
    )?;
    c.write(
        "extra-blocks.yaml",
        &[
            ipam_block_yaml("10.65.1.64/26", Some("node1")),
            ipam_block_yaml("fd00:65:1::40/122", Some("node1")),
            ipam_block_yaml("10.65.4.0/26", Some("node4")),
            ipam_block_yaml("fd00:65:4::/122", Some("node4")),
        ]
        .join("---\n"),
    )?;
    {
        let d = c.node_mut(1)?.d()?;
        for a in &actors {
            poll(SETTLE, || (d.restarts(a) == Some(1)).then_some(()))
                .with_context(|| format!("{a} was not restarted"))?;
        }
        d.clear_faults()?;
    }
    expect_kernel("node4's route on node1 after the restarts", || {
        let peer = "10.65.4.1".to_string();
        route_check(c, 1, "10.65.4.0/26", Some((&peer, VXLAN_V4, true)))
    })?;
    expect_kernel(
        "node4's VXLAN neighbours on node1 after the restarts",
        || {
            let ns = &c.node(1)?.ns;
            let mut missing = Vec::new();
            for (dev, vtep) in [(VXLAN_V4, "10.65.4.1"), (VXLAN_V6, "fd00:65:4::1")] {
                let n = kernel::neighbours(ns, dev)?;
                if !n.iter().any(|e| e["dst"].as_str() == Some(vtep)) {
                    missing.push(format!("{dev}: no {vtep} in {}", Value::Array(n)));
                }
            }
            Ok((!missing.is_empty()).then(|| missing.join("; ")))
        },
    )?;
    c.remove("node4.yaml")?;
    c.remove("extra-blocks.yaml")?;
    poll(SETTLE, || {
        routing_state(c).ok().filter(|s| *s == before)
    })
    .map_err(|_| {
        let after = routing_state(c).unwrap_or_default();
        anyhow::anyhow!(
            "routing state differs after the restarts and removals:\nbefore:\n{before}\nafter:\n{after}"
        )
    })?;
    // Minimal disruption: the restarted VXLAN drivers read the device back and kept it and
    // its address; their only removals were node 4's neighbours (and FDB entries).
    // The counts are read until node 4's two neighbour deletions are counted (a count follows
    // its kernel operation).
    let changed = |after: &[(String, &'static str, u64)]| -> Vec<(String, &'static str)> {
        removals_before
            .iter()
            .zip(after)
            .filter(|(b, a)| b != a)
            .map(|(_, a)| (a.0.clone(), a.1))
            .collect()
    };
    let expected = [
        ("driver/vxlan-v4".to_string(), "neigh-del"),
        ("driver/vxlan-v6".to_string(), "neigh-del"),
    ];
    let counted = poll(SETTLE, || {
        let after = vxlan_removals(c).ok()?;
        (changed(&after).len() >= expected.len()).then_some(after)
    });
    let removals_after = match counted {
        Ok(a) => a,
        Err(_) => vxlan_removals(c)?,
    };
    ensure!(
        changed(&removals_after) == expected,
        "the restarted VXLAN drivers' removals: only node 4's neighbours (neigh-del) expected; \
         (actor, op, count) before {removals_before:?}, after {removals_after:?}"
    );
    c.expect_traffic(
        "all pairs v4 after restarts",
        &c.all_pairs(8080, false),
        SETTLE,
    )
}

#[test]
fn vxlan_always_all_pairs_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(ClusterOpts::new(Backend::Iptables, "Always"), vxlan_always);
}

#[test]
fn vxlan_always_all_pairs_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(ClusterOpts::new(Backend::Nftables, "Always"), vxlan_always);
}

/// The etcd variant: the same resources through `felix datastore apply`
/// into an etcd server in the router namespace, which every node reaches
/// over the fabric.
fn vxlan_always_etcd(c: &mut Cluster) -> Result<()> {
    ensure!(c.datastore_spec().starts_with("etcdv3:"), "not on etcd");
    c.start_all()?;
    c.expect_traffic("all pairs v4", &c.all_pairs(8080, false), SETTLE)?;
    let all = pairs(c, |_, _| Path::Encapsulated)?;
    c.expect_paths("v4 encapsulated", &all, 8080, false, SETTLE)?;
    c.expect_traffic("all pairs v6", &c.all_pairs(9090, true), SETTLE)?;
    // A live change through etcd: a pod added on node3 becomes reachable.
    c.plug(
        3,
        Wep::new(
            "n3c",
            "demo",
            "calin3c0",
            "10.65.3.12".parse()?,
            "fd00:65:3::12".parse()?,
        )
        .label("node", "n3")
        .label("role", "c")
        .on("node3"),
    )?;
    c.expect_path("n1a", "n3c", 8080, false, Path::Encapsulated, SETTLE)?;
    // A policy through etcd, then its deletion.
    c.write("pol-b", &role_b_from("n1"))?;
    let with_policy = [
        Check::v4("n1a", "n3b", 8080, true),
        Check::v4("n2a", "n3b", 8080, false),
        Check::v4("n2a", "n3a", 8080, true),
    ];
    c.expect_traffic("policy through etcd", &with_policy, SETTLE)?;
    c.remove("pol-b")?;
    c.expect_traffic(
        "policy deleted from etcd",
        &[Check::v4("n2a", "n3b", 8080, true)],
        SETTLE,
    )
}

#[test]
fn vxlan_always_etcd_iptables() {
    felix_netns::require!(netns ETCD_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Always").etcd(),
        vxlan_always_etcd,
    );
}

#[test]
fn vxlan_always_etcd_nftables() {
    felix_netns::require!(netns ETCD_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Always").etcd(),
        vxlan_always_etcd,
    );
}

// ------------------------------------------ CrossSubnet, switching a pool

fn always_then_cross_subnet(c: &mut Cluster) -> Result<()> {
    c.start_all()?;
    let always = pairs(c, |_, _| Path::Encapsulated)?;
    c.expect_paths("Always: all encapsulated", &always, 8080, false, SETTLE)?;

    c.write_pools("CrossSubnet", "CrossSubnet")?;
    let cross = pairs(c, |a, b| {
        if same_subnet(a, b) {
            Path::Direct
        } else {
            Path::Encapsulated
        }
    })?;
    c.expect_paths(
        "CrossSubnet: node1<->node2 direct, node3 encapsulated",
        &cross,
        8080,
        false,
        SETTLE,
    )?;
    // node1 routes node2's block via node2's address, node3's via its VTEP.
    let (n2, n3) = (c.node(2)?, c.node(3)?);
    let (a2, v3) = (n2.addr4.to_string(), n3.vtep4().to_string());
    expect_kernel("same-subnet route", || {
        route_check(c, 1, &block4(2), Some((&a2, "eth0", false)))
    })?;
    expect_kernel("cross-subnet route", || {
        route_check(c, 1, &block4(3), Some((&v3, VXLAN_V4, true)))
    })?;
    c.expect_traffic("all pairs v4", &c.all_pairs(8080, false), SETTLE)?;
    c.expect_traffic("all pairs v6", &c.all_pairs(9090, true), SETTLE)?;
    c.expect_paths("v6 CrossSubnet", &cross, 8080, true, SETTLE)
}

#[test]
fn cross_subnet_after_switch_from_always_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Always"),
        always_then_cross_subnet,
    );
}

#[test]
fn cross_subnet_after_switch_from_always_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Always"),
        always_then_cross_subnet,
    );
}

// ------------------------------------------------ no-encap cluster routes

fn no_encap_cluster_routes(c: &mut Cluster) -> Result<()> {
    c.start_all()?;
    let (a1, a2) = (c.node(1)?.addr4.to_string(), c.node(2)?.addr4.to_string());
    expect_kernel("node1 -> node2's block", || {
        route_check(c, 1, &block4(2), Some((&a2, "eth0", false)))
    })?;
    expect_kernel("node2 -> node1's block", || {
        route_check(c, 2, &block4(1), Some((&a1, "eth0", false)))
    })?;
    ensure!(
        !kernel::has_link(&c.node(1)?.ns, VXLAN_V4),
        "node1 has {VXLAN_V4} without a VXLAN pool"
    );
    let same: Vec<_> = pairs(c, |_, _| Path::Direct)?
        .into_iter()
        .filter(|(f, t, _)| {
            let (a, b) = (c.node_of(f).unwrap_or(0), c.node_of(t).unwrap_or(0));
            a <= 2 && b <= 2
        })
        .collect();
    c.expect_paths("same-subnet pairs direct", &same, 8080, false, SETTLE)?;
    c.expect_paths("same-subnet pairs direct v6", &same, 8080, true, SETTLE)?;
    ipip_pool_is_reported_unsupported(c)
}

/// This kernel has no IPIP module: an IPIP pool is reported in `/status` (on the VXLAN
/// driver, the node's tunnel driver) and programs nothing, the rest keeps working.
fn ipip_pool_is_reported_unsupported(c: &mut Cluster) -> Result<()> {
    c.write(
        "ipip-pool.yaml",
        "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: ipip\nspec:\n  cidr: 10.98.0.0/16\n  ipipMode: Always\n",
    )?;
    let d = c.node_mut(1)?.d()?;
    poll(SETTLE, || {
        let st = d.status()?;
        st["actors"].as_array()?.iter().find(|a| {
            a["name"] == "driver/vxlan-v4"
                && a["unsupported"].as_array().is_some_and(|u| {
                    u.iter()
                        .any(|m| m.as_str().is_some_and(|m| m.contains("10.98.0.0/16")))
                })
        })?;
        Some(())
    })
    .context("the IPIP pool is not reported as unsupported in /status")?;
    c.remove("ipip-pool.yaml")?;
    let a2 = c.node(2)?.addr4.to_string();
    expect_kernel("node1 -> node2's block still routed", || {
        route_check(c, 1, &block4(2), Some((&a2, "eth0", false)))
    })
}

#[test]
fn no_encap_cluster_routes_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Never").config("programClusterRoutes", "Enabled"),
        no_encap_cluster_routes,
    );
}

#[test]
fn no_encap_cluster_routes_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Never").config("programClusterRoutes", "Enabled"),
        no_encap_cluster_routes,
    );
}

// ------------------------------------------------ policy across nodes

fn role_b_from(node: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata:\n  name: b-ingress\n  \
         namespace: demo\nspec:\n  order: 100\n  selector: role == 'b'\n  types: [Ingress]\n  \
         ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: node == '{node}'\n    \
         destination:\n      ports: [8080]\n"
    )
}

fn cross_node_policy(c: &mut Cluster) -> Result<()> {
    c.start_all()?;
    c.expect_traffic(
        "before the policy",
        &[
            Check::v4("n1a", "n2b", 8080, true),
            Check::v4("n3a", "n2b", 8080, true),
        ],
        SETTLE,
    )?;
    c.write("pol-b", &role_b_from("n1"))?;
    let allowed_from_n1 = [
        Check::v4("n1a", "n2b", 8080, true),
        Check::v6("n1a", "n2b", 8080, true),
        Check::v4("n1b", "n3b", 8080, true),
        Check::v4("n1a", "n2b", 9090, false),
        Check::v4("n3a", "n2b", 8080, false),
        Check::v6("n3a", "n2b", 8080, false),
        Check::v4("n2a", "n3b", 8080, false),
        Check::v4("n2a", "n1b", 8080, false),
        Check::v4("n3a", "n2a", 8080, true),
        Check::v4("n2b", "n1a", 9090, true),
    ];
    c.expect_traffic("policy: role b only from node1", &allowed_from_n1, SETTLE)?;

    c.write("pol-b", &role_b_from("n3"))?;
    let allowed_from_n3 = [
        Check::v4("n1a", "n2b", 8080, false),
        Check::v6("n1a", "n2b", 8080, false),
        Check::v4("n1b", "n3b", 8080, false),
        Check::v4("n3a", "n2b", 8080, true),
        Check::v6("n3a", "n2b", 8080, true),
        Check::v4("n3a", "n1b", 8080, true),
        Check::v4("n3a", "n2b", 9090, false),
        Check::v4("n3a", "n2a", 8080, true),
    ];
    c.expect_traffic(
        "policy changed: role b only from node3",
        &allowed_from_n3,
        SETTLE,
    )?;

    c.remove("pol-b")?;
    c.expect_traffic("policy removed", &c.all_pairs(8080, false), SETTLE)
}

#[test]
fn cross_node_policy_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Always"),
        cross_node_policy,
    );
}

#[test]
fn cross_node_policy_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Always"),
        cross_node_policy,
    );
}

#[test]
fn cross_node_policy_bpf() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(ClusterOpts::new(Backend::Bpf, "Always"), cross_node_policy);
}

#[test]
fn vxlan_always_all_pairs_bpf() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(ClusterOpts::new(Backend::Bpf, "Always"), vxlan_always);
}

// ------------------------------------- block moving, node removal

fn block_move_then_node_removal(c: &mut Cluster) -> Result<()> {
    // An extra block, first on node3.
    let extra = "10.65.4.0/26";
    c.write("block-extra", &ipam_block_yaml(extra, Some("node3")))?;
    c.start_all()?;
    let (v2, v3) = (
        c.node(2)?.vtep4().to_string(),
        c.node(3)?.vtep4().to_string(),
    );
    expect_kernel("extra block on node3, seen from node1", || {
        route_check(c, 1, extra, Some((&v3, VXLAN_V4, true)))
    })?;
    expect_kernel("extra block blackholed on node3", || {
        blackhole_check(c, 3, extra, true)
    })?;

    // The block moves to node2.
    c.write("block-extra", &ipam_block_yaml(extra, Some("node2")))?;
    expect_kernel("moved block, seen from node1", || {
        route_check(c, 1, extra, Some((&v2, VXLAN_V4, true)))
    })?;
    expect_kernel("moved block, seen from node3", || {
        route_check(c, 3, extra, Some((&v2, VXLAN_V4, true)))
    })?;
    expect_kernel("moved block blackholed on node2", || {
        blackhole_check(c, 2, extra, true)
    })?;
    expect_kernel("no blackhole left on node3", || {
        blackhole_check(c, 3, extra, false)
    })?;
    c.plug(
        2,
        Wep::new(
            "n2c",
            "demo",
            "calin2c0",
            "10.65.4.10".parse()?,
            "fd00:65:2::12".parse()?,
        )
        .label("node", "n2")
        .label("role", "c")
        .on("node2"),
    )?;
    c.expect_path("n1a", "n2c", 8080, false, Path::Encapsulated, SETTLE)?;
    c.expect_path("n3b", "n2c", 8080, false, Path::Encapsulated, SETTLE)?;

    // node3 goes: its pods, blocks and Node resource are deleted.
    for i in [1u8, 2] {
        expect_kernel("node3's VTEP before removal", || {
            vtep_entries_check(c, i, 3, true)
        })?;
    }
    c.stop_felix(3)?;
    c.unplug("n3a")?;
    c.unplug("n3b")?;
    c.remove("blocks-node3")?;
    c.remove("node-node3")?;
    for i in [1u8, 2] {
        expect_kernel("node3's v4 route gone", || {
            route_check(c, i, &block4(3), None)
        })?;
        expect_kernel("node3's v6 route gone", || {
            route_check(c, i, &block6(3), None)
        })?;
        expect_kernel("node3's VTEP gone", || vtep_entries_check(c, i, 3, false))?;
        let v6 = c.node(3)?.vtep6().to_string();
        expect_kernel("node3's v6 neighbour gone", || {
            let n = kernel::neighbours(&c.node(i)?.ns, VXLAN_V6)?;
            Ok(n.iter()
                .any(|e| e["dst"].as_str() == Some(&v6))
                .then(|| format!("node{i}: {}", Value::Array(n.clone()))))
        })?;
    }
    // node1 <-> node2 unaffected.
    c.expect_traffic(
        "node1 <-> node2 after node3 left",
        &[
            Check::v4("n1a", "n2a", 8080, true),
            Check::v4("n2b", "n1b", 8080, true),
            Check::v6("n1a", "n2b", 8080, true),
            Check::v4("n1b", "n2c", 8080, true),
        ],
        SETTLE,
    )
}

#[test]
fn block_move_and_node_removal_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Always"),
        block_move_then_node_removal,
    );
}

#[test]
fn block_move_and_node_removal_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Always"),
        block_move_then_node_removal,
    );
}

// ------------------------------------- restart with a long-lived connection

fn connection_survives_restarts(c: &mut Cluster) -> Result<()> {
    c.start_all()?;
    c.expect_path("n1a", "n3b", 8080, false, Path::Encapsulated, SETTLE)?;
    let mut v4 = c.connect("n1a", "n3b", 8080, false)?;
    let mut v6 = c.connect("n1b", "n3a", 9090, true)?;
    ensure!(
        v4.server == "n3b" && v6.server == "n3a",
        "connected to {} / {}",
        v4.server,
        v6.server
    );
    v4.roundtrip("before")?;
    v6.roundtrip("before")?;
    let mut seq = 0;
    let mut step = |v4: &mut felix_fv::netfv::traffic::Conn,
                    v6: &mut felix_fv::netfv::traffic::Conn,
                    when: &str|
     -> Result<()> {
        seq += 1;
        v4.roundtrip(&format!("{when}-{seq}"))
            .with_context(|| format!("v4 connection {when}"))?;
        v6.roundtrip(&format!("{when}-{seq}"))
            .with_context(|| format!("v6 connection {when}"))
    };
    for node in [1u8, 3] {
        c.stop_felix(node)?;
        step(&mut v4, &mut v6, &format!("node{node} stopped"))?;
        c.start_felix(node)?;
        step(&mut v4, &mut v6, &format!("node{node} restarted"))?;
    }
    // Both ends at once.
    c.stop_felix(1)?;
    c.stop_felix(3)?;
    step(&mut v4, &mut v6, "both stopped")?;
    c.start_felix(1)?;
    c.start_felix(3)?;
    for i in 0..5 {
        step(&mut v4, &mut v6, &format!("both restarted #{i}"))?;
        std::thread::sleep(Duration::from_millis(200));
    }
    c.expect_traffic("new connections", &c.all_pairs(8080, false), SETTLE)?;
    if c.expect_path("n1a", "n3b", 8080, false, Path::Encapsulated, SETTLE)
        .is_err()
    {
        bail!("n1a -> n3b no longer encapsulated after the restarts");
    }
    Ok(())
}

#[test]
fn long_lived_connection_survives_restarts_iptables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Iptables, "Always"),
        connection_survives_restarts,
    );
}

#[test]
fn long_lived_connection_survives_restarts_nftables() {
    felix_netns::require!(netns CLUSTER_TOOLS);
    scenario(
        ClusterOpts::new(Backend::Nftables, "Always"),
        connection_survives_restarts,
    );
}
