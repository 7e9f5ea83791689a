//! Kernel tests of the routing drivers over real rtnetlink in a throwaway namespace: the VXLAN
//! device, its ARP and FDB entries, cluster routes, restart without rewrites (watched with
//! `ip monitor`), drift repair and foreign routes.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::Stdio;
use std::sync::Arc;

use super::*;
use crate::dataplane::desired::{RouteClass, RouteKey, RouteTarget, RoutesDesired, Vtep};
use crate::dataplane::iproute::{RouteOwnership, RouteTable};
use crate::dataplane::kernel::testns::TestNetns;
use crate::dataplane::netlink::{RouteKind, SystemNetlink};

fn seamed(ns: &TestNetns, actor: &str) -> Seamed {
    Seamed::new(
        Arc::new(SystemNetlink::new(Some(ns.name.clone()))),
        felix_actors::Seam::default().for_actor(actor),
    )
}

/// A node namespace with an uplink `eth0` at 10.0.1.1/24 (a veth whose peer stays inside).
fn node() -> TestNetns {
    let ns = TestNetns::create_tagged("vx");
    ns.sh(
        "ip",
        &[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ],
    );
    ns.sh("ip", &["addr", "add", "10.0.1.1/24", "dev", "eth0"]);
    ns.sh("ip", &["link", "set", "eth0", "up"]);
    ns.sh("ip", &["link", "set", "eth0p", "up"]);
    ns
}

fn vxlan_desired(nodes: &[u8]) -> VxlanDesired {
    VxlanDesired {
        device: Some(VxlanDevice {
            name: VXLAN_DEVICE_V4.into(),
            vni: 4096,
            port: 4789,
            local: "10.0.1.1".parse().unwrap(),
            mtu: None,
            mac: [0x66, 0x11, 0, 0, 0, 1],
            tunnel_addr: Some("10.65.1.0".parse().unwrap()),
        }),
        vteps: nodes
            .iter()
            .map(|i| {
                (
                    format!("node{i}"),
                    Vtep {
                        tunnel_ip: format!("10.65.{i}.0").parse().unwrap(),
                        mac: [0x66, 0x11, 0, 0, 0, *i],
                        underlay: format!("10.0.1.{i}").parse().unwrap(),
                    },
                )
            })
            .collect(),
        unsupported: Vec::new(),
    }
}

fn routes_desired(nodes: &[u8]) -> RoutesDesired {
    let mut d = RoutesDesired::default();
    let tunnel: BTreeSet<RouteTarget> = nodes
        .iter()
        .map(|i| RouteTarget {
            gateway: Some(format!("10.65.{i}.0").parse().unwrap()),
            onlink: true,
            protocol: Some(80),
            ..RouteTarget::device(format!("10.65.{i}.0/26").parse().unwrap())
        })
        .collect();
    d.set(
        "m",
        RouteKey {
            class: RouteClass::VxlanTunnel,
            iface: Some(VXLAN_DEVICE_V4.into()),
        },
        tunnel,
    );
    d.set(
        "m",
        RouteKey {
            class: RouteClass::LocalBlock,
            iface: None,
        },
        [RouteTarget {
            kind: RouteKind::Blackhole,
            protocol: Some(80),
            ..RouteTarget::device("10.65.1.0/26".parse().unwrap())
        }]
        .into(),
    );
    d.set(
        "m",
        RouteKey {
            class: RouteClass::VxlanSameSubnet,
            iface: None,
        },
        [RouteTarget {
            gateway: Some("10.0.1.9".parse().unwrap()),
            protocol: Some(80),
            ..RouteTarget::device("10.65.9.0/26".parse().unwrap())
        }]
        .into(),
    );
    d
}

fn route_table(ns: &TestNetns) -> RouteTable {
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

#[test]
fn kernel_vxlan_device_entries_and_routes_survive_a_restart_without_a_single_netlink_event() {
    felix_netns::require!(netns ["ip", "bridge"]);
    let ns = node();
    let mut vx = VxlanDriver::new(IpVersion::V4, seamed(&ns, "driver/vxlan-v4"));
    let s = vx.apply_desired(&vxlan_desired(&[2, 3])).unwrap();
    assert!(s.created);
    let link = ns.sh("ip", &["-d", "link", "show", "vxlan.calico"]);
    for needle in [
        "vxlan id 4096",
        "local 10.0.1.1",
        "dev eth0",
        "dstport 4789",
        "nolearning",
        "mtu 1450",
        "66:11:00:00:00:01",
    ] {
        assert!(link.contains(needle), "{needle} missing from {link}");
    }
    let neigh = ns.sh("ip", &["neigh", "show", "dev", "vxlan.calico"]);
    assert!(
        neigh.contains("10.65.2.0 lladdr 66:11:00:00:00:02 PERMANENT"),
        "{neigh}"
    );
    let fdb = ns.sh("bridge", &["fdb", "show", "dev", "vxlan.calico"]);
    assert!(
        fdb.contains("66:11:00:00:00:03 dst 10.0.1.3 self permanent"),
        "{fdb}"
    );
    assert!(ns
        .sh("ip", &["addr", "show", "dev", "vxlan.calico"])
        .contains("10.65.1.0/32"));

    // A foreign route in the main table is left alone.
    ns.sh(
        "ip",
        &[
            "route",
            "add",
            "10.99.0.0/24",
            "via",
            "10.0.1.254",
            "proto",
            "static",
        ],
    );
    let mut rt = route_table(&ns);
    let st = rt.apply(&routes_desired(&[2, 3])).unwrap();
    assert_eq!((st.replaced, st.unreachable), (4, 0), "{st:?}");
    let routes = ns.sh("ip", &["route", "show"]);
    for needle in [
        "10.65.2.0/26 via 10.65.2.0 dev vxlan.calico proto 80 onlink",
        "blackhole 10.65.1.0/26 proto 80",
        "10.65.9.0/26 via 10.0.1.9 dev eth0 proto 80",
        "10.99.0.0/24 via 10.0.1.254 dev eth0 proto static",
    ] {
        assert!(routes.contains(needle), "{needle} missing from\n{routes}");
    }

    // Restart with no memory: watch every route, neighbour and link event meanwhile.
    let mut monitor = ns
        .command_in("ip", &["monitor", "route", "neigh", "link"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut vx2 = VxlanDriver::new(IpVersion::V4, seamed(&ns, "driver/vxlan-v4"));
    assert_eq!(
        vx2.apply_desired(&vxlan_desired(&[2, 3])).unwrap(),
        VxlanStats::default()
    );
    let mut rt2 = route_table(&ns);
    let st = rt2.apply(&routes_desired(&[2, 3])).unwrap();
    assert_eq!((st.replaced, st.deleted), (0, 0), "{st:?}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = monitor.kill();
    let mut events = String::new();
    if let Some(mut out) = monitor.stdout.take() {
        let _ = out.read_to_string(&mut events);
    }
    let _ = monitor.wait();
    assert!(
        events.trim().is_empty(),
        "restart caused netlink events:\n{events}"
    );

    // Drift: a route deleted behind felix's back comes back at the next read-back.
    ns.sh("ip", &["route", "del", "10.65.3.0/26"]);
    rt2.queue_resync();
    let st = rt2.apply(&routes_desired(&[2, 3])).unwrap();
    assert_eq!(st.replaced, 1);

    // Node 3 goes: its route, ARP and FDB entries go; node 2's stay; the foreign route stays.
    vx2.apply_desired(&vxlan_desired(&[2])).unwrap();
    rt2.apply(&routes_desired(&[2])).unwrap();
    let routes = ns.sh("ip", &["route", "show"]);
    assert!(!routes.contains("10.65.3.0/26"), "{routes}");
    assert!(
        routes.contains("10.65.2.0/26") && routes.contains("10.99.0.0/24"),
        "{routes}"
    );
    assert!(!ns
        .sh("ip", &["neigh", "show", "dev", "vxlan.calico"])
        .contains("10.65.3.0"));
    assert!(!ns
        .sh("bridge", &["fdb", "show", "dev", "vxlan.calico"])
        .contains("dst 10.0.1.3"));

    // No pool needs VXLAN: the device goes, and with it every route down it.
    vx2.apply_desired(&VxlanDesired::default()).unwrap();
    assert!(ns
        .command_in("ip", &["link", "show", "vxlan.calico"])
        .output()
        .is_ok_and(|o| !o.status.success()));
}
