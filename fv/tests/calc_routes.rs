//! Calculation-graph FV for the route side: the L3 route resolver and the
//! VXLAN resolver (see `felix::calc::routes::l3`, `felix::calc::routes::vxlan`).
//!
//! States follow upstream's VXLAN calc-graph states (pool + block + node
//! with a tunnel address), adapted to this model, where a node's VXLAN
//! tunnel address and MAC come with the `Node` resource, so tunnel-address
//! routes appear alongside the VTEPs.  Every test runs through every
//! expander and flush strategy, and every emitted message is applied to a
//! contract-checking view, which enforces "VTEP before the VXLAN routes
//! that use it" and "routes removed before their VTEP".
//!
//! Derived MACs (no MAC configured) are `66:` + the first five bytes of
//! SHA-1 over the node name (`<name>-v6` for IPv6), computed offline:
//! node1 66:f9:37:c3:7e:94, node2 66:2d:bf:44:a6:8b, node3
//! 66:a4:6f:e0:c4:da, node2-v6 66:32:42:ed:de:d5.

mod common;

use common::*;
use felix::calc::view::{payload_name, to_json};
use felix::calc::CalcGraph;
use felix::model::SyncStatus;
use felix_fv::calcfv::{assert_passes, calc_stream, State, Test, WepExp};
use felix_proto::{self as pb, IpPoolType, RouteType};
use serde_json::Value as Json;

const MAC1: &str = "66:f9:37:c3:7e:94";
const MAC2: &str = "66:2d:bf:44:a6:8b";
const MAC3: &str = "66:a4:6f:e0:c4:da";
const MAC2_V6: &str = "66:32:42:ed:de:d5";

// ---------------------------------------------------------------------------
// YAML and expectation builders.
// ---------------------------------------------------------------------------

/// A node with a BGP IPv4 address and optional VXLAN tunnel address / MAC.
fn vx_node(name: &str, ipv4: &str, tunnel: Option<&str>, mac: Option<&str>) -> String {
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: {name}\nspec:\n  bgp:\n    ipv4Address: {ipv4}\n"
    );
    if let Some(t) = tunnel {
        s.push_str(&format!("  ipv4VXLANTunnelAddr: {t}\n"));
    }
    if let Some(m) = mac {
        s.push_str(&format!("  vxlanTunnelMACAddr: \"{m}\"\n"));
    }
    s
}

/// A dual-stack node with both VXLAN tunnel addresses.
fn vx_node_dual(name: &str, ipv4: &str, ipv6: &str, tunnel4: &str, tunnel6: &str) -> String {
    format!(
        "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: {name}\nspec:\n  bgp:\n    ipv4Address: {ipv4}\n    ipv6Address: \"{ipv6}\"\n  ipv4VXLANTunnelAddr: {tunnel4}\n  ipv6VXLANTunnelAddr: \"{tunnel6}\"\n"
    )
}

/// An IPAM block, affine to `host` when given.
fn block(cidr: &str, host: Option<&str>) -> String {
    let name = cidr.replace(['.', '/', ':'], "-");
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: IPAMBlock\nmetadata:\n  name: {name}\nspec:\n  cidr: {cidr}\n"
    );
    if let Some(h) = host {
        s.push_str(&format!("  affinity: \"host:{h}\"\n"));
    }
    s
}

/// An expected route.
struct R(pb::RouteUpdate);

fn r(dst: &str) -> R {
    let mut u = pb::RouteUpdate {
        dst: dst.into(),
        ..Default::default()
    };
    u.set_ip_pool_type(IpPoolType::None);
    R(u)
}

impl R {
    fn t(mut self, t: RouteType) -> R {
        self.0.add_type(t);
        self
    }
    fn vxlan_pool(mut self) -> R {
        self.0.set_ip_pool_type(IpPoolType::Vxlan);
        self
    }
    fn node(mut self, name: &str, ip: &str) -> R {
        self.0.dst_node_name = name.into();
        self.0.dst_node_ip = ip.into();
        self
    }
    fn nat(mut self) -> R {
        self.0.nat_outgoing = true;
        self
    }
    fn local_workload(mut self) -> R {
        self.0.local_workload = true;
        self
    }
    fn same_subnet(mut self) -> R {
        self.0.same_subnet = true;
        self
    }
    fn borrowed(mut self) -> R {
        self.0.borrowed = true;
        self
    }
    fn vxlan_tunnel(mut self) -> R {
        self.0.tunnel_type = Some(pb::TunnelType {
            vxlan: true,
            ..Default::default()
        });
        self
    }
}

fn vtep(node: &str, mac: &str, tunnel: &str, parent: &str) -> pb::VxlanTunnelEndpointUpdate {
    pb::VxlanTunnelEndpointUpdate {
        node: node.into(),
        mac: mac.into(),
        ipv4_addr: tunnel.into(),
        parent_device_ip: parent.into(),
        ..Default::default()
    }
}

/// Adds exact route and VTEP expectations (both maps are checked even
/// when empty).
fn with_routes(e: Expect, routes: Vec<R>, vteps: Vec<pb::VxlanTunnelEndpointUpdate>) -> Expect {
    let mut e = e.no_routes();
    for rt in routes {
        let j: Json = to_json(&rt.0);
        e = e.route(&rt.0.dst.clone(), j);
    }
    for v in vteps {
        e = e.vtep(&v.node.clone(), to_json(&v));
    }
    e
}

fn vxlan_pool_yaml() -> String {
    yaml::ippool("p1", "10.0.0.0/16", "Never", "Always", true)
}

fn vxlan_pool_exp(e: Expect) -> Expect {
    e.pool("10.0.0.0/16", true, "", "always")
        .encap(false, true, false, false)
}

fn pool_route() -> R {
    r("10.0.0.0/16").vxlan_pool().nat()
}

fn host_route(name: &str, ip: &str, local: bool) -> R {
    let t = if local {
        RouteType::LocalHost
    } else {
        RouteType::RemoteHost
    };
    r(&format!("{ip}/32")).t(t).node(name, ip)
}

fn tunnel_route(addr: &str, name: &str, ip: &str, local: bool) -> R {
    let t = if local {
        RouteType::LocalTunnel
    } else {
        RouteType::RemoteTunnel
    };
    r(&format!("{addr}/32"))
        .t(t)
        .vxlan_pool()
        .nat()
        .node(name, ip)
        .vxlan_tunnel()
}

// ---------------------------------------------------------------------------
// Remote blocks: affinity, a block moving between nodes, a node IP change.
// ---------------------------------------------------------------------------

fn three_nodes(node2_ip: &str) -> State {
    State::new("three nodes")
        .yaml(&vxlan_pool_yaml())
        .yaml(&vx_node("node1", "192.168.0.1/24", Some("10.0.0.0"), None))
        .yaml(&vx_node("node2", node2_ip, Some("10.0.1.0"), None))
        .yaml(&vx_node("node3", "192.168.0.3/24", Some("10.0.2.0"), None))
}

fn three_nodes_exp(node2_ip: &str) -> Expect {
    vxlan_pool_exp(Expect::new())
        .host("node1", "192.168.0.1/24", "", "", &[])
        .host("node2", &format!("{node2_ip}/24"), "", "", &[])
        .host("node3", "192.168.0.3/24", "", "", &[])
}

fn three_nodes_routes(node2_ip: &str) -> Vec<R> {
    vec![
        pool_route(),
        host_route("node1", "192.168.0.1", true),
        host_route("node2", node2_ip, false),
        host_route("node3", "192.168.0.3", false),
        tunnel_route("10.0.0.0", "node1", "192.168.0.1", true),
        tunnel_route("10.0.2.0", "node3", "192.168.0.3", false),
    ]
}

fn three_vteps(node2_ip: &str) -> Vec<pb::VxlanTunnelEndpointUpdate> {
    vec![
        vtep("node1", MAC1, "10.0.0.0", "192.168.0.1"),
        vtep("node2", MAC2, "10.0.1.0", node2_ip),
        vtep("node3", MAC3, "10.0.2.0", "192.168.0.3"),
    ]
}

fn case_remote_blocks() -> Test {
    let on_node2 = three_nodes("192.168.0.2/24")
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .named("block on node2");
    let mut routes = three_nodes_routes("192.168.0.2");
    routes.push(tunnel_route("10.0.1.0", "node2", "192.168.0.2", false));
    routes.push(
        r("10.0.1.0/29")
            .t(RouteType::RemoteWorkload)
            .vxlan_pool()
            .nat()
            .node("node2", "192.168.0.2"),
    );
    let on_node2 = on_node2.expect(with_routes(
        three_nodes_exp("192.168.0.2"),
        routes,
        three_vteps("192.168.0.2"),
    ));

    // The block moves to node3; node2's tunnel address now sits inside
    // node3's block, so its route is flagged borrowed.
    let on_node3 = three_nodes("192.168.0.2/24")
        .yaml(&block("10.0.1.0/29", Some("node3")))
        .named("block moved to node3");
    let mut routes = three_nodes_routes("192.168.0.2");
    routes.push(tunnel_route("10.0.1.0", "node2", "192.168.0.2", false).borrowed());
    routes.push(
        r("10.0.1.0/29")
            .t(RouteType::RemoteWorkload)
            .vxlan_pool()
            .nat()
            .node("node3", "192.168.0.3"),
    );
    let on_node3 = on_node3.expect(with_routes(
        three_nodes_exp("192.168.0.2"),
        routes,
        three_vteps("192.168.0.2"),
    ));

    // A block without affinity routes nowhere.
    let unaffine = three_nodes("192.168.0.2/24")
        .yaml(&block("10.0.1.0/29", None))
        .named("block without affinity");
    let mut routes = three_nodes_routes("192.168.0.2");
    routes.push(tunnel_route("10.0.1.0", "node2", "192.168.0.2", false));
    let unaffine = unaffine.expect(with_routes(
        three_nodes_exp("192.168.0.2"),
        routes,
        three_vteps("192.168.0.2"),
    ));

    // node2's IP changes: host route, VTEP parent and every route to node2
    // follow.
    let moved_ip = three_nodes("192.168.0.12/24")
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .named("node2 IP changed");
    let mut routes = three_nodes_routes("192.168.0.12");
    routes.push(tunnel_route("10.0.1.0", "node2", "192.168.0.12", false));
    routes.push(
        r("10.0.1.0/29")
            .t(RouteType::RemoteWorkload)
            .vxlan_pool()
            .nat()
            .node("node2", "192.168.0.12"),
    );
    let moved_ip = moved_ip.expect(with_routes(
        three_nodes_exp("192.168.0.12"),
        routes,
        three_vteps("192.168.0.12"),
    ));

    Test::new(
        "routes: remote blocks",
        vec![on_node2, on_node3, unaffine, moved_ip],
    )
}

#[test]
fn routes_remote_blocks() {
    assert_passes(&case_remote_blocks());
}

// ---------------------------------------------------------------------------
// VTEP lifecycle: incomplete -> complete -> MAC override -> dual stack ->
// incomplete.
// ---------------------------------------------------------------------------

fn case_vtep_lifecycle() -> Test {
    let base = |name: &str| State::new(name).yaml(&vxlan_pool_yaml());
    let exp = || vxlan_pool_exp(Expect::new()).host("node2", "192.168.0.2/24", "", "", &[]);

    let incomplete = base("no tunnel address")
        .yaml(&vx_node("node2", "192.168.0.2/24", None, None))
        .expect(with_routes(
            exp(),
            vec![pool_route(), host_route("node2", "192.168.0.2", false)],
            vec![],
        ));

    let complete = base("tunnel address added")
        .yaml(&vx_node("node2", "192.168.0.2/24", Some("10.0.1.0"), None))
        .expect(with_routes(
            exp(),
            vec![
                pool_route(),
                host_route("node2", "192.168.0.2", false),
                tunnel_route("10.0.1.0", "node2", "192.168.0.2", false),
            ],
            vec![vtep("node2", MAC2, "10.0.1.0", "192.168.0.2")],
        ));

    let mac = base("MAC configured")
        .yaml(&vx_node(
            "node2",
            "192.168.0.2/24",
            Some("10.0.1.0"),
            Some("66:74:c5:72:3f:01"),
        ))
        .expect(with_routes(
            exp(),
            vec![
                pool_route(),
                host_route("node2", "192.168.0.2", false),
                tunnel_route("10.0.1.0", "node2", "192.168.0.2", false),
            ],
            vec![vtep(
                "node2",
                "66:74:c5:72:3f:01",
                "10.0.1.0",
                "192.168.0.2",
            )],
        ));

    let mut dual_vtep = vtep("node2", MAC2, "10.0.1.0", "192.168.0.2");
    dual_vtep.mac_v6 = MAC2_V6.into();
    dual_vtep.ipv6_addr = "fd10::100".into();
    dual_vtep.parent_device_ipv6 = "dead:beef:1::2".into();
    let v6_host = r("dead:beef:1::2/128")
        .t(RouteType::RemoteHost)
        .node("node2", "dead:beef:1::2");
    // The IPv6 pool does not masquerade.
    let v6_tunnel = r("fd10::100/128")
        .t(RouteType::RemoteTunnel)
        .vxlan_pool()
        .node("node2", "dead:beef:1::2")
        .vxlan_tunnel();
    let dual = base("dual stack")
        .yaml(&yaml::ippool("p6", "fd10::/64", "Never", "Always", false))
        .yaml(&vx_node_dual(
            "node2",
            "192.168.0.2/24",
            "dead:beef:1::2/96",
            "10.0.1.0",
            "fd10::100",
        ))
        .expect(with_routes(
            vxlan_pool_exp(Expect::new())
                .pool("fd10::/64", false, "", "always")
                .encap(false, true, true, false)
                .host("node2", "192.168.0.2/24", "dead:beef:1::2/96", "", &[]),
            vec![
                pool_route(),
                r("fd10::/64").vxlan_pool(),
                host_route("node2", "192.168.0.2", false),
                v6_host,
                tunnel_route("10.0.1.0", "node2", "192.168.0.2", false),
                v6_tunnel,
            ],
            vec![dual_vtep],
        ));

    let gone = base("tunnel address removed again")
        .yaml(&vx_node("node2", "192.168.0.2/24", None, None))
        .named("tunnel address removed again")
        .expect(with_routes(
            exp(),
            vec![pool_route(), host_route("node2", "192.168.0.2", false)],
            vec![],
        ));

    Test::new(
        "routes: VTEP lifecycle",
        vec![incomplete, complete, mac, dual, gone],
    )
}

#[test]
fn routes_vtep_lifecycle() {
    assert_passes(&case_vtep_lifecycle());
}

// ---------------------------------------------------------------------------
// Gate: routes and VTEPs exist only while a pool calls for VXLAN.
// ---------------------------------------------------------------------------

fn case_pool_gate() -> Test {
    let nodes = || {
        State::new("nodes")
            .yaml(&vx_node("node2", "192.168.0.2/24", Some("10.0.1.0"), None))
            .yaml(&block("10.0.1.0/29", Some("node2")))
    };
    let host2 = |e: Expect| e.host("node2", "192.168.0.2/24", "", "", &[]);

    let no_pool =
        nodes()
            .named("no pool")
            .expect(with_routes(host2(Expect::new()), vec![], vec![]));

    let vxlan = nodes()
        .named("VXLAN pool")
        .yaml(&vxlan_pool_yaml())
        .expect(with_routes(
            host2(vxlan_pool_exp(Expect::new())),
            vec![
                pool_route(),
                host_route("node2", "192.168.0.2", false),
                tunnel_route("10.0.1.0", "node2", "192.168.0.2", false),
                r("10.0.1.0/29")
                    .t(RouteType::RemoteWorkload)
                    .vxlan_pool()
                    .nat()
                    .node("node2", "192.168.0.2"),
            ],
            vec![vtep("node2", MAC2, "10.0.1.0", "192.168.0.2")],
        ));

    // Default configuration: Felix does not program unencapsulated cluster
    // routes, so an unencapsulated pool turns both nodes off.
    let plain = nodes()
        .named("unencapsulated pool")
        .yaml(&yaml::ippool("p1", "10.0.0.0/16", "Never", "Never", true))
        .expect(with_routes(
            host2(Expect::new())
                .pool("10.0.0.0/16", true, "", "")
                .encap(false, false, false, true),
            vec![],
            vec![],
        ));

    Test::new("routes: pool gate", vec![no_pool, vxlan, plain])
}

#[test]
fn routes_follow_the_pool_gate() {
    assert_passes(&case_pool_gate());
}

// ---------------------------------------------------------------------------
// Tunnel addresses of every kind: IPIP and WireGuard addresses get tunnel
// routes with their tunnel type, as VXLAN ones do.
// ---------------------------------------------------------------------------

fn case_ipip_and_wireguard_tunnel_addresses() -> Test {
    let node2 = "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: node2\nspec:\n  bgp:\n    ipv4Address: 192.168.0.2/24\n    ipv4IPIPTunnelAddr: 10.0.1.1\n  wireguard:\n    interfaceIPv4Address: 10.0.1.2\n";
    let ipip_pool = || {
        let mut r = r("10.0.0.0/16").nat();
        r.0.set_ip_pool_type(IpPoolType::Ipip);
        r
    };
    let tunnel = |addr: &str, ipip: bool, wireguard: bool| {
        let mut r = r(&format!("{addr}/32"))
            .t(RouteType::RemoteTunnel)
            .nat()
            .node("node2", "192.168.0.2");
        r.0.set_ip_pool_type(IpPoolType::Ipip);
        r.0.tunnel_type = Some(pb::TunnelType {
            ipip,
            wireguard,
            ..Default::default()
        });
        r
    };
    let mut block_route = r("10.0.1.0/29")
        .t(RouteType::RemoteWorkload)
        .nat()
        .node("node2", "192.168.0.2");
    block_route.0.set_ip_pool_type(IpPoolType::Ipip);
    let both = State::new("IPIP pool, node with IPIP and WireGuard addresses")
        .yaml(&yaml::ippool("p1", "10.0.0.0/16", "Always", "Never", true))
        .yaml(node2)
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .expect(with_routes(
            Expect::new()
                .host("node2", "192.168.0.2/24", "", "", &[])
                .pool("10.0.0.0/16", true, "always", "")
                .encap(true, false, false, false),
            vec![
                ipip_pool(),
                host_route("node2", "192.168.0.2", false),
                tunnel("10.0.1.1", true, false),
                tunnel("10.0.1.2", false, true),
                block_route,
            ],
            vec![],
        ));
    Test::new("routes: IPIP and WireGuard tunnel addresses", vec![both])
}

#[test]
fn routes_for_ipip_and_wireguard_tunnel_addresses() {
    assert_passes(&case_ipip_and_wireguard_tunnel_addresses());
}

// ---------------------------------------------------------------------------
// Asymmetric teardown: the node goes while its block stays.
// ---------------------------------------------------------------------------

fn full_state() -> State {
    State::new("node and block")
        .yaml(&vxlan_pool_yaml())
        .yaml(&vx_node("node2", "192.168.0.2/24", Some("10.0.1.0"), None))
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .expect(with_routes(
            vxlan_pool_exp(Expect::new()).host("node2", "192.168.0.2/24", "", "", &[]),
            vec![
                pool_route(),
                host_route("node2", "192.168.0.2", false),
                tunnel_route("10.0.1.0", "node2", "192.168.0.2", false),
                r("10.0.1.0/29")
                    .t(RouteType::RemoteWorkload)
                    .vxlan_pool()
                    .nat()
                    .node("node2", "192.168.0.2"),
            ],
            vec![vtep("node2", MAC2, "10.0.1.0", "192.168.0.2")],
        ))
}

fn node_gone_state() -> State {
    State::new("node deleted, block remains")
        .yaml(&vxlan_pool_yaml())
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .expect(with_routes(
            vxlan_pool_exp(Expect::new()),
            vec![
                pool_route(),
                // Still routed to node2 by IPAM, but its IP is unknown.
                r("10.0.1.0/29")
                    .t(RouteType::RemoteWorkload)
                    .vxlan_pool()
                    .nat()
                    .node("node2", ""),
            ],
            vec![],
        ))
}

fn case_asymmetric_teardown() -> Test {
    let pool_only = State::new("block deleted too")
        .yaml(&vxlan_pool_yaml())
        .expect(with_routes(
            vxlan_pool_exp(Expect::new()),
            vec![pool_route()],
            vec![],
        ));
    Test::new(
        "routes: asymmetric teardown",
        vec![full_state(), node_gone_state(), pool_only],
    )
}

#[test]
fn routes_asymmetric_teardown() {
    assert_passes(&case_asymmetric_teardown());
}

/// In the flush that deletes a node, every route through its VTEP is
/// removed before the VTEP itself.
#[test]
fn route_removals_precede_the_vtep_removal() {
    let mut g = CalcGraph::new("node1");
    let full = full_state();
    g.on_updates(full.deltas_from(&State::empty()));
    g.on_status(SyncStatus::InSync);
    let first = g.flush();
    assert!(first.iter().any(|p| payload_name(p) == "vtepUpdate"));
    let gone = node_gone_state();
    g.on_updates(gone.deltas_from(&full));
    let out = g.flush();
    let names: Vec<&str> = out.iter().map(payload_name).collect();
    let vtep_rm = names
        .iter()
        .position(|n| *n == "vtepRemove")
        .unwrap_or_else(|| panic!("no VTEP removal in {names:?}"));
    let last_route_rm = names
        .iter()
        .rposition(|n| *n == "routeRemove")
        .unwrap_or_else(|| panic!("no route removal in {names:?}"));
    assert!(last_route_rm < vtep_rm, "order: {names:?}");
    let removed: Vec<String> = out
        .iter()
        .filter_map(|p| match p {
            pb::to_dataplane::Payload::RouteRemove(r) => Some(r.dst.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(removed, vec!["10.0.1.0/32", "192.168.0.2/32"]);
}

// ---------------------------------------------------------------------------
// Local workloads and cross-subnet.
// ---------------------------------------------------------------------------

fn local_wep() -> Wep {
    Wep::new("pod1").ips(&["10.0.0.1/32"]).profiles(&["prof-1"])
}

fn remote_wep() -> Wep {
    Wep::new("pod2")
        .node("node2")
        .ips(&["10.0.1.1/32"])
        .profiles(&["prof-1"])
}

fn cross_subnet_state(name: &str, node1_ip: &str, with_local_wep: bool) -> State {
    let mut s = State::new(name)
        .yaml(&yaml::ippool(
            "p1",
            "10.0.0.0/16",
            "Never",
            "CrossSubnet",
            true,
        ))
        .yaml(&yaml::profile("prof-1", &[], &[], &[]))
        .yaml(&vx_node("node1", &format!("{node1_ip}/24"), None, None))
        .yaml(&vx_node("node2", "192.168.0.2/24", None, None))
        .yaml(&vx_node("node3", "192.168.1.3/24", None, None))
        .yaml(&block("10.0.0.0/29", Some("node1")))
        .yaml(&block("10.0.1.0/29", Some("node2")))
        .yaml(&block("10.0.2.0/29", Some("node3")))
        .yaml(&remote_wep().yaml());
    if with_local_wep {
        s = s.yaml(&local_wep().yaml());
    }
    // Which remote subnets are "ours" depends on node1's subnet.
    let ours_node2 = node1_ip.starts_with("192.168.0.");
    let workload = |dst: &str, node: &str, ip: &str, local: bool, same: bool| {
        let t = if local {
            RouteType::LocalWorkload
        } else {
            RouteType::RemoteWorkload
        };
        let mut rt = r(dst).t(t).vxlan_pool().nat().node(node, ip);
        if same {
            rt = rt.same_subnet();
        }
        rt
    };
    let mut routes = vec![
        r("10.0.0.0/16").vxlan_pool().nat(),
        host_route("node1", node1_ip, true),
        host_route("node2", "192.168.0.2", false),
        host_route("node3", "192.168.1.3", false),
        // A node is always in its own subnet.
        workload("10.0.0.0/29", "node1", node1_ip, true, true),
        workload("10.0.1.0/29", "node2", "192.168.0.2", false, ours_node2),
        workload("10.0.2.0/29", "node3", "192.168.1.3", false, !ours_node2),
    ];
    let mut e = Expect::new()
        .pool("10.0.0.0/16", true, "", "cross-subnet")
        .encap(false, true, false, false)
        .host("node1", &format!("{node1_ip}/24"), "", "", &[])
        .host("node2", "192.168.0.2/24", "", "", &[])
        .host("node3", "192.168.1.3/24", "", "", &[]);
    if with_local_wep {
        routes.push(workload("10.0.0.1/32", "node1", node1_ip, true, true).local_workload());
        e = e.profiles(&["prof-1"]).wep(
            &local_wep().id(),
            WepExp::new(&["prof-1"], &["10.0.0.1/32"], vec![]),
        );
    }
    s.expect(with_routes(e, routes, vec![]))
}

fn case_local_workloads() -> Test {
    Test::new(
        "routes: local workloads and cross-subnet",
        vec![
            cross_subnet_state("local workload", "192.168.0.1", true),
            cross_subnet_state("local workload gone", "192.168.0.1", false),
            cross_subnet_state("local node moved subnet", "192.168.1.1", true),
        ],
    )
}

#[test]
fn routes_local_workloads_and_cross_subnet() {
    assert_passes(&case_local_workloads());
}

// ---------------------------------------------------------------------------
// `felix calc --stream` semantics over every state of this file.
// ---------------------------------------------------------------------------

#[test]
fn calc_stream_over_all_route_states_obeys_the_contract() {
    let mut everything: Vec<State> = Vec::new();
    for t in [
        case_remote_blocks(),
        case_vtep_lifecycle(),
        case_pool_gate(),
        case_asymmetric_teardown(),
        case_local_workloads(),
        case_ipip_and_wireguard_tunnel_addresses(),
    ] {
        everything.extend(t.states);
    }
    everything.push(State::empty());
    let lines = calc_stream(&everything).unwrap_or_else(|e| panic!("all states: {e}"));
    let last = &lines[lines.len() - 1];
    for field in ["routes", "vteps"] {
        assert!(
            last[field].as_array().is_some_and(|a| a.is_empty()),
            "leaked {field}: {}",
            last[field]
        );
    }
}
