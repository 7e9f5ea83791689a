//! `felix bench routes`: routing between nodes at scale, figures printed beside the raw tools.
//!
//! Workload: `nodes` remote nodes, each with one IPAM block (`10.<64+i/256>.<i%256>.0/26`
//! style addresses under 10.64.0.0/10) and one VTEP (tunnel address, MAC, underlay address on
//! the node's /16), plus `workloads` local workloads (a `cali*` veth each, one /32 route).
//! Two throwaway namespaces with the same uplink and workload interfaces: felix's
//! `driver/vxlan-v4` and `driver/routes-v4` program the first over rtnetlink; `ip -batch` and
//! `bridge -batch` program the same device, neighbour, FDB entries and routes into the second.
//! Then one node added and one node removed, felix only (the raw tools have no incremental
//! counterpart worth timing: one process each). RSS of this process at the end.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use felix_actors::clock::real_now;
use felix_netns::Netns;

use crate::dataplane::desired::{
    RouteClass, RouteKey, RouteTarget, RoutesDesired, Vtep, VxlanDesired, VxlanDevice,
};
use crate::dataplane::iproute::{RouteOwnership, RouteTable};
use crate::dataplane::netlink::{format_mac, Seamed, SystemNetlink};
use crate::dataplane::vxlan::{VxlanDriver, VXLAN_DEVICE_V4};
use crate::dataplane::IpVersion;

/// Namespace name prefix (stale ones are swept at start).
const NETNS_PREFIX: &str = "felix-bench-rt-";

/// Sizes of the workload.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Sizes {
    /// Remote nodes (one block and one VTEP each).
    #[arg(long, default_value_t = 1000)]
    pub nodes: u32,
    /// Local workloads (one interface and route each).
    #[arg(long, default_value_t = 250)]
    pub workloads: u32,
}

fn node_block(i: u32) -> String {
    format!("10.{}.{}.0/26", 64 + i / 256, i % 256)
}
fn node_tunnel(i: u32) -> String {
    format!("10.{}.{}.1", 64 + i / 256, i % 256)
}
fn node_underlay(i: u32) -> String {
    format!("172.16.{}.{}", 1 + i / 250, 1 + i % 250)
}
fn node_mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x66, 0x01, b[0], b[1], b[2], b[3]]
}
fn workload_ip(i: u32) -> String {
    format!("10.32.{}.{}", i / 250, 1 + i % 250)
}

fn vxlan_desired(nodes: impl Iterator<Item = u32>) -> VxlanDesired {
    VxlanDesired {
        device: Some(VxlanDevice {
            name: VXLAN_DEVICE_V4.into(),
            vni: 4096,
            port: 4789,
            local: "172.16.0.254".parse().expect("literal"),
            mtu: None,
            mac: [0x66, 0, 0, 0, 0, 1],
            tunnel_addr: Some("10.63.255.1".parse().expect("literal")),
        }),
        vteps: nodes
            .filter_map(|i| {
                Some((
                    format!("node{i}"),
                    Vtep {
                        tunnel_ip: node_tunnel(i).parse().ok()?,
                        mac: node_mac(i),
                        underlay: node_underlay(i).parse().ok()?,
                    },
                ))
            })
            .collect(),
        unsupported: Vec::new(),
    }
}

fn routes_desired(nodes: impl Iterator<Item = u32>, workloads: u32) -> RoutesDesired {
    let mut d = RoutesDesired::default();
    let tunnel: BTreeSet<RouteTarget> = nodes
        .filter_map(|i| {
            Some(RouteTarget {
                gateway: Some(node_tunnel(i).parse().ok()?),
                onlink: true,
                protocol: Some(80),
                ..RouteTarget::device(node_block(i).parse().ok()?)
            })
        })
        .collect();
    d.set(
        "bench",
        RouteKey {
            class: RouteClass::VxlanTunnel,
            iface: Some(VXLAN_DEVICE_V4.into()),
        },
        tunnel,
    );
    for w in 0..workloads {
        if let Ok(net) = format!("{}/32", workload_ip(w)).parse() {
            d.set(
                "bench",
                RouteKey::workload(format!("calib{w}")),
                [RouteTarget::device(net)].into(),
            );
        }
    }
    d
}

/// Uplink and workload interfaces, made with one `ip -batch`.
fn plumb(ns: &Netns, workloads: u32) -> anyhow::Result<()> {
    let mut script = String::from(
        "link add eth0 type veth peer name eth0p\naddr add 172.16.0.254/16 dev eth0\n\
         link set eth0 up\nlink set eth0p up\n",
    );
    for w in 0..workloads {
        let _ = writeln!(script, "link add calib{w} type veth peer name calip{w}");
        let _ = writeln!(script, "link set calib{w} up");
        let _ = writeln!(script, "link set calip{w} up");
    }
    batch(ns, "ip", &script)
}

fn batch(ns: &Netns, tool: &str, script: &str) -> anyhow::Result<()> {
    felix_netns::run_checked(
        "ip",
        &["netns", "exec", ns.name(), tool, "-batch", "-"],
        Some(script.as_bytes()),
    )
    .with_context(|| format!("{tool} -batch"))?;
    Ok(())
}

fn table(ns: &Netns) -> RouteTable {
    RouteTable::new(
        IpVersion::V4,
        seamed(ns, "driver/routes-v4"),
        RouteOwnership {
            workload_prefixes: vec!["cali".into()],
            remove_external_routes: true,
            device_route_protocol: 3,
            owned_ifaces: vec![VXLAN_DEVICE_V4.into()],
            owned_tables: Vec::new(),
            device_route_src: None,
        },
        felix_actors::clock::system(),
        None,
    )
}

fn seamed(ns: &Netns, actor: &str) -> Seamed {
    Seamed::new(
        Arc::new(SystemNetlink::new(Some(ns.name().to_string()))),
        felix_actors::Seam::default().for_actor(actor),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the benchmark; returns the printed report.
pub fn run(sizes: &Sizes) -> anyhow::Result<String> {
    felix_netns::sweep_stale(NETNS_PREFIX);
    let n = sizes.nodes;
    let ours = Netns::create_owned(NETNS_PREFIX, "felix")?;
    let raw = Netns::create_owned(NETNS_PREFIX, "raw")?;
    plumb(&ours, sizes.workloads)?;
    plumb(&raw, sizes.workloads)?;
    let vx_want = vxlan_desired(0..n);
    let rt_want = routes_desired(0..n, sizes.workloads);

    // felix: start of day (device, ARP + FDB per VTEP, every route), fresh drivers.
    let mut vx = VxlanDriver::new(IpVersion::V4, seamed(&ours, "driver/vxlan-v4"));
    let mut rt = table(&ours);
    let t = real_now();
    vx.apply_desired(&vx_want)?;
    let st = rt.apply(&rt_want)?;
    let felix_sod = t.elapsed();
    anyhow::ensure!(
        st.replaced as u32 == n + sizes.workloads,
        "felix programmed {} routes, expected {}",
        st.replaced,
        n + sizes.workloads
    );

    // Raw tools: the same objects with `ip -batch` and `bridge -batch`.
    let mut ip_script = String::from(
        "link add vxlan.calico type vxlan id 4096 local 172.16.0.254 dev eth0 dstport 4789 nolearning\n\
         link set vxlan.calico mtu 1450 address 66:00:00:00:00:01 up\n\
         addr add 10.63.255.1/32 dev vxlan.calico\n",
    );
    let mut fdb_script = String::new();
    for i in 0..n {
        let mac = format_mac(&node_mac(i));
        let _ = writeln!(
            ip_script,
            "neigh replace {} lladdr {mac} dev vxlan.calico nud permanent",
            node_tunnel(i)
        );
        let _ = writeln!(
            fdb_script,
            "fdb replace {mac} dev vxlan.calico dst {} self permanent",
            node_underlay(i)
        );
    }
    let mut route_script = String::new();
    for i in 0..n {
        let _ = writeln!(
            route_script,
            "route replace {} via {} dev vxlan.calico onlink proto 80",
            node_block(i),
            node_tunnel(i)
        );
    }
    for w in 0..sizes.workloads {
        let _ = writeln!(
            route_script,
            "route replace {}/32 dev calib{w} scope link proto 3",
            workload_ip(w)
        );
    }
    let t = real_now();
    batch(&raw, "ip", &ip_script)?;
    batch(&raw, "bridge", &fdb_script)?;
    batch(&raw, "ip", &route_script)?;
    let raw_sod = t.elapsed();

    // One node added, then removed (felix only).
    let t = real_now();
    vx.apply_desired(&vxlan_desired(0..=n))?;
    rt.apply(&routes_desired(0..=n, sizes.workloads))?;
    let added = t.elapsed();
    let t = real_now();
    vx.apply_desired(&vx_want)?;
    rt.apply(&rt_want)?;
    let removed = t.elapsed();

    // A restart with no memory: read back, nothing rewritten.
    let t = real_now();
    let mut vx2 = VxlanDriver::new(IpVersion::V4, seamed(&ours, "driver/vxlan-v4"));
    let vs = vx2.apply_desired(&vx_want)?;
    let rs = table(&ours).apply(&rt_want)?;
    let resync = t.elapsed();
    anyhow::ensure!(
        vs.written == 0 && rs.replaced == 0,
        "a restart rewrote state: {vs:?} {rs:?}"
    );

    let mut out = String::new();
    let _ = writeln!(
        out,
        "routes: {n} remote nodes (one block + one VTEP each), {} local workloads",
        sizes.workloads
    );
    let _ = writeln!(
        out,
        "  start of day: felix {:.1} ms, raw ip/bridge -batch {:.1} ms, ratio {:.2}",
        ms(felix_sod),
        ms(raw_sod),
        felix_sod.as_secs_f64() / raw_sod.as_secs_f64().max(1e-9)
    );
    let _ = writeln!(
        out,
        "  one node added: {:.2} ms; one node removed: {:.2} ms",
        ms(added),
        ms(removed)
    );
    let _ = writeln!(
        out,
        "  restart with no memory (read back, nothing rewritten): {:.1} ms",
        ms(resync)
    );
    let _ = writeln!(
        out,
        "  RSS {:.1} MiB (peak {:.1} MiB)",
        super::rss_mib(),
        super::peak_rss_mib()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_small_route_bench_runs_and_restart_rewrites_nothing() {
        felix_netns::require!(netns ["ip", "bridge"]);
        let r = run(&Sizes {
            nodes: 20,
            workloads: 5,
        })
        .unwrap();
        assert!(r.contains("start of day: felix"), "{r}");
    }
}
