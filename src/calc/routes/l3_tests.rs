//! Unit tests of the L3 route resolver (scenarios after upstream's
//! `l3_route_resolver_test.go` and the VXLAN calc-graph states).

use std::collections::BTreeMap;

use super::*;

const ME: &str = "localhostname";
const REMOTE: &str = "remotehostname";
const REMOTE2: &str = "remotehostname2";

#[derive(Default)]
struct Rec {
    routes: BTreeMap<String, pb::RouteUpdate>,
    updates: usize,
    removes: Vec<String>,
}

impl RouteSink for Rec {
    fn route_update(&mut self, u: pb::RouteUpdate) {
        self.updates += 1;
        self.routes.insert(u.dst.clone(), u);
    }
    fn route_remove(&mut self, dst: &str) {
        assert!(self.routes.remove(dst).is_some(), "removal of unsent {dst}");
        self.removes.push(dst.to_string());
    }
}

fn n(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn vxlan_pool(masq: bool) -> IpPool {
    IpPool {
        vxlan_mode: EncapMode::Always,
        masquerade: masq,
        ..Default::default()
    }
}

fn block(host: &str) -> IpamBlock {
    IpamBlock {
        cidr: None,
        affinity_host: Some(host.to_string()),
    }
}

fn bgp_node(addr: &str) -> Node {
    let net = addr
        .parse::<IpNet>()
        .unwrap_or_else(|_| IpNet::from(addr.parse::<IpAddr>().unwrap()));
    Node {
        ipv4_address: Some(net),
        ..Default::default()
    }
}

fn wep_key(host: &str, id: &str) -> WorkloadEndpointKey {
    WorkloadEndpointKey {
        hostname: host.into(),
        orchestrator_id: "orch".into(),
        workload_id: id.into(),
        endpoint_id: "ep1".into(),
    }
}

fn wep(nets: &[&str]) -> WorkloadEndpoint {
    WorkloadEndpoint {
        ipv4_nets: nets
            .iter()
            .filter(|s| !s.contains(':'))
            .map(|s| n(s))
            .collect(),
        ipv6_nets: nets
            .iter()
            .filter(|s| s.contains(':'))
            .map(|s| n(s))
            .collect(),
        ..Default::default()
    }
}

fn types(bits: &[RouteType]) -> i32 {
    bits.iter().fold(0, |acc, t| acc | *t as i32)
}

fn route(
    dst: &str,
    t: &[RouteType],
    pool: IpPoolType,
    node: &str,
    node_ip: &str,
    nat: bool,
) -> pb::RouteUpdate {
    let mut r = pb::RouteUpdate {
        types: types(t),
        dst: dst.into(),
        dst_node_name: node.into(),
        dst_node_ip: node_ip.into(),
        nat_outgoing: nat,
        ..Default::default()
    };
    r.set_ip_pool_type(pool);
    r
}

fn flushed(r: &mut L3RouteResolver, rec: &mut Rec) {
    r.flush(true, rec);
}

#[test]
fn node_addresses_become_host_routes_in_their_family() {
    let mut r = L3RouteResolver::new("test-hostname", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    let node = Node {
        ipv4_address: Some(n("192.168.0.1/32")),
        ipv6_address: Some(n("dead:beef::1/128")),
        ..Default::default()
    };
    r.on_node("nodeName1", Some(&node));
    flushed(&mut r, &mut rec);
    assert_eq!(
        rec.routes.get("192.168.0.1/32"),
        Some(&route(
            "192.168.0.1/32",
            &[RouteType::RemoteHost],
            IpPoolType::None,
            "nodeName1",
            "192.168.0.1",
            false
        ))
    );
    assert_eq!(
        rec.routes
            .get("dead:beef::1/128")
            .map(|r| r.dst_node_ip.as_str()),
        Some("dead:beef::1")
    );
    assert_eq!(rec.routes.len(), 2);
}

#[test]
fn vxlan_pool_block_and_node_give_upstreams_three_routes() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    flushed(&mut r, &mut rec);
    let want: BTreeMap<String, pb::RouteUpdate> = [
        route("10.0.0.0/16", &[], IpPoolType::Vxlan, "", "", true),
        route(
            "192.168.0.2/32",
            &[RouteType::RemoteHost],
            IpPoolType::None,
            REMOTE,
            "192.168.0.2",
            false,
        ),
        route(
            "10.0.1.0/29",
            &[RouteType::RemoteWorkload],
            IpPoolType::Vxlan,
            REMOTE,
            "192.168.0.2",
            true,
        ),
    ]
    .into_iter()
    .map(|r| (r.dst.clone(), r))
    .collect();
    assert_eq!(rec.routes, want);
}

#[test]
fn vxlan_tunnel_address_gets_a_remote_tunnel_route() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    let mut node = bgp_node("192.168.0.2/32");
    node.ipv4_vxlan_tunnel_addr = Some("10.0.5.0".parse().unwrap());
    r.on_node(REMOTE, Some(&node));
    flushed(&mut r, &mut rec);
    let t = &rec.routes["10.0.5.0/32"];
    assert_eq!(t.types, RouteType::RemoteTunnel as i32);
    assert_eq!(t.ip_pool_type(), IpPoolType::Vxlan);
    assert_eq!(
        t.tunnel_type,
        Some(pb::TunnelType {
            vxlan: true,
            ..Default::default()
        })
    );
    assert_eq!(t.dst_node_name, REMOTE);
    assert_eq!(t.dst_node_ip, "192.168.0.2");
    assert!(t.nat_outgoing);

    // Removing the tunnel address removes exactly that route.
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.removes, vec!["10.0.5.0/32".to_string()]);
}

#[test]
fn tunnel_address_inside_a_wider_block_is_not_a_workload() {
    let mut r = L3RouteResolver::new("local-host", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(false)));
    r.on_block(&n("10.0.1.0/29"), Some(&block("remote-host")));
    let mut node = bgp_node("192.168.0.2");
    node.ipv4_vxlan_tunnel_addr = Some("10.0.1.0".parse().unwrap());
    r.on_node("remote-host", Some(&node));
    flushed(&mut r, &mut rec);
    let t = &rec.routes["10.0.1.0/32"];
    assert!(t.has_type(RouteType::RemoteTunnel));
    assert!(!t.has_type(RouteType::RemoteWorkload));
}

#[test]
fn tunnel_address_in_a_block_of_its_own_size_is_also_a_workload() {
    let mut r = L3RouteResolver::new("local-host", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(false)));
    r.on_block(&n("10.0.1.0/32"), Some(&block("remote-host")));
    let mut node = bgp_node("192.168.0.2");
    node.ipv4_vxlan_tunnel_addr = Some("10.0.1.0".parse().unwrap());
    r.on_node("remote-host", Some(&node));
    flushed(&mut r, &mut rec);
    let t = &rec.routes["10.0.1.0/32"];
    assert!(t.has_type(RouteType::RemoteTunnel));
    assert!(t.has_type(RouteType::RemoteWorkload));
}

#[test]
fn host_address_inside_a_block_is_not_a_workload_but_the_block_is() {
    let mut r = L3RouteResolver::new("local-host", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(false)));
    r.on_block(&n("10.0.1.0/24"), Some(&block("remote-host")));
    r.on_node("remote-host", Some(&bgp_node("10.0.1.1")));
    flushed(&mut r, &mut rec);
    let h = &rec.routes["10.0.1.1/32"];
    assert!(h.has_type(RouteType::RemoteHost));
    assert!(!h.has_type(RouteType::RemoteWorkload));
    assert!(rec.routes["10.0.1.0/24"].has_type(RouteType::RemoteWorkload));
}

#[test]
fn load_balancer_only_pool_has_no_pool_type_but_keeps_nat() {
    let mut r = L3RouteResolver::new("local-host", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    let lb = IpPool {
        masquerade: true,
        allowed_uses: vec!["LoadBalancer".into()],
        ..Default::default()
    };
    r.on_pool(&n("10.96.0.0/16"), Some(&lb));
    r.on_block(&n("10.96.1.0/26"), Some(&block("remote-host")));
    flushed(&mut r, &mut rec);
    let b = &rec.routes["10.96.1.0/26"];
    assert_eq!(b.ip_pool_type(), IpPoolType::None);
    assert!(b.nat_outgoing);

    let mixed = IpPool {
        vxlan_mode: EncapMode::Always,
        allowed_uses: vec!["Workload".into(), "LoadBalancer".into()],
        ..Default::default()
    };
    r.on_pool(&n("10.96.0.0/16"), Some(&mixed));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.96.1.0/26"].ip_pool_type(), IpPoolType::Vxlan);
}

#[test]
fn local_workload_gets_its_own_route_over_the_local_block() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_node(ME, Some(&bgp_node("192.168.0.1/32")));
    r.on_block(&n("10.0.0.0/29"), Some(&block(ME)));
    r.on_workload(&wep_key(ME, "wl1"), Some(&wep(&["10.0.0.1/32"])));
    flushed(&mut r, &mut rec);
    let mut want = route(
        "10.0.0.1/32",
        &[RouteType::LocalWorkload],
        IpPoolType::Vxlan,
        ME,
        "192.168.0.1",
        true,
    );
    want.local_workload = true;
    assert_eq!(rec.routes["10.0.0.1/32"], want);
    assert_eq!(
        rec.routes["10.0.0.0/29"].types,
        RouteType::LocalWorkload as i32
    );
    assert_eq!(
        rec.routes["192.168.0.1/32"].types,
        RouteType::LocalHost as i32
    );

    // Remote endpoints are not indexed under CalicoIPAM.
    r.on_workload(&wep_key(REMOTE, "wl2"), Some(&wep(&["10.0.0.2/32"])));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes.contains_key("10.0.0.2/32"));

    // Endpoint deleted: its route goes, the block stays.
    r.on_workload(&wep_key(ME, "wl1"), None);
    flushed(&mut r, &mut rec);
    assert_eq!(rec.removes, vec!["10.0.0.1/32".to_string()]);
    assert!(rec.routes.contains_key("10.0.0.0/29"));
}

#[test]
fn remote_workload_inside_a_local_block_is_borrowed() {
    let mut r = L3RouteResolver::new(ME, RouteSource::WorkloadIps);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    r.on_workload(&wep_key(REMOTE, "wl"), Some(&wep(&["10.0.0.5/32"])));
    flushed(&mut r, &mut rec);
    assert_eq!(
        rec.routes["10.0.0.5/32"],
        route(
            "10.0.0.5/32",
            &[RouteType::RemoteWorkload],
            IpPoolType::Vxlan,
            REMOTE,
            "192.168.0.2",
            true
        )
    );
    // Blocks are ignored under WorkloadIPs.
    r.on_block(&n("10.0.0.0/29"), Some(&block(ME)));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes.contains_key("10.0.0.0/29"));
}

#[test]
fn duplicate_workload_ip_resolves_to_the_lowest_node_name() {
    let mut r = L3RouteResolver::new(ME, RouteSource::WorkloadIps);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_node(REMOTE2, Some(&bgp_node("192.168.0.3/32")));
    r.on_workload(&wep_key(REMOTE2, "wl"), Some(&wep(&["10.0.0.5/32"])));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.0.0.5/32"].dst_node_name, REMOTE2);
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    r.on_workload(&wep_key(REMOTE, "wl"), Some(&wep(&["10.0.0.5/32"])));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.0.0.5/32"].dst_node_name, REMOTE);
    assert_eq!(rec.routes["10.0.0.5/32"].dst_node_ip, "192.168.0.2");
    // And back when the lower one goes.
    r.on_workload(&wep_key(REMOTE, "wl"), None);
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.0.0.5/32"].dst_node_name, REMOTE2);
}

#[test]
fn block_moving_between_nodes_repoints_its_route() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    r.on_node(REMOTE2, Some(&bgp_node("192.168.0.3/32")));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    flushed(&mut r, &mut rec);
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE2)));
    flushed(&mut r, &mut rec);
    let b = &rec.routes["10.0.1.0/29"];
    assert_eq!(
        (b.dst_node_name.as_str(), b.dst_node_ip.as_str()),
        (REMOTE2, "192.168.0.3")
    );
    assert!(rec.removes.is_empty());
    // Affinity dropped: the block no longer routes anywhere.
    r.on_block(
        &n("10.0.1.0/29"),
        Some(&IpamBlock {
            cidr: None,
            affinity_host: None,
        }),
    );
    flushed(&mut r, &mut rec);
    assert_eq!(rec.removes, vec!["10.0.1.0/29".to_string()]);
}

#[test]
fn node_ip_change_follows_into_block_routes_and_deletion_clears_it() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/32")));
    flushed(&mut r, &mut rec);
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.3/32")));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.0.1.0/29"].dst_node_ip, "192.168.0.3");
    assert!(rec.routes.contains_key("192.168.0.3/32"));
    assert_eq!(rec.removes, vec!["192.168.0.2/32".to_string()]);

    r.on_node(REMOTE, None);
    flushed(&mut r, &mut rec);
    let b = &rec.routes["10.0.1.0/29"];
    assert_eq!(b.dst_node_name, REMOTE);
    assert_eq!(b.dst_node_ip, "");
    assert!(!rec.routes.contains_key("192.168.0.3/32"));
}

#[test]
fn pool_change_updates_every_route_inside_it_and_only_those() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    r.on_block(&n("10.1.1.0/29"), Some(&block(REMOTE)));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes["10.1.1.0/29"].nat_outgoing);
    let before = rec.updates;

    // Re-applying an identical pool sends nothing.
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.updates, before);

    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(false)));
    flushed(&mut r, &mut rec);
    assert_eq!(
        rec.updates,
        before + 2,
        "pool and its block, not the outside block"
    );
    assert!(!rec.routes["10.0.1.0/29"].nat_outgoing);

    r.on_pool(&n("10.0.0.0/16"), None);
    flushed(&mut r, &mut rec);
    assert_eq!(rec.removes, vec!["10.0.0.0/16".to_string()]);
    assert_eq!(rec.routes["10.0.1.0/29"].ip_pool_type(), IpPoolType::None);
}

#[test]
fn same_subnet_needs_a_cross_subnet_pool_and_a_node_in_our_subnet() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    let pool = IpPool {
        vxlan_mode: EncapMode::CrossSubnet,
        masquerade: true,
        ..Default::default()
    };
    r.on_pool(&n("10.0.0.0/16"), Some(&pool));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    r.on_node(REMOTE, Some(&bgp_node("192.168.0.2/24")));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes["10.0.1.0/29"].same_subnet, "our subnet unknown");

    r.on_node(ME, Some(&bgp_node("192.168.0.1/24")));
    flushed(&mut r, &mut rec);
    assert!(rec.routes["10.0.1.0/29"].same_subnet);

    // Our subnet moves away: the flag follows.
    r.on_node(ME, Some(&bgp_node("192.168.1.1/24")));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes["10.0.1.0/29"].same_subnet);
}

#[test]
fn ipv6_cross_subnet_between_different_subnets_is_not_same_subnet() {
    let mut r = L3RouteResolver::new("test-hostname", RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    let pool = IpPool {
        vxlan_mode: EncapMode::CrossSubnet,
        ..Default::default()
    };
    r.on_pool(&n("dead:beef::/122"), Some(&pool));
    let me = Node {
        ipv6_address: Some(n("abcd:eeee::1/32")),
        ipv6_vxlan_tunnel_addr: Some("abcd::1".parse().unwrap()),
        ..Default::default()
    };
    let other = Node {
        ipv6_address: Some(n("abcd:ffff::1/32")),
        ipv6_vxlan_tunnel_addr: Some("abcd:1::1".parse().unwrap()),
        ..Default::default()
    };
    r.on_node("test-hostname", Some(&me));
    r.on_node("nodeName1", Some(&other));
    r.on_workload(
        &wep_key("nodeName1", "w2"),
        Some(&wep(&["dead:beef::2/128"])),
    );
    flushed(&mut r, &mut rec);
    // CalicoIPAM ignores the remote endpoint; WorkloadIPs routes it.
    assert!(!rec.routes.contains_key("dead:beef::2/128"));

    let mut r = L3RouteResolver::new("test-hostname", RouteSource::WorkloadIps);
    let mut rec = Rec::default();
    r.on_pool(&n("dead:beef::/122"), Some(&pool));
    r.on_node("test-hostname", Some(&me));
    r.on_node("nodeName1", Some(&other));
    r.on_workload(
        &wep_key("nodeName1", "w2"),
        Some(&wep(&["dead:beef::2/128"])),
    );
    flushed(&mut r, &mut rec);
    let w = &rec.routes["dead:beef::2/128"];
    assert_eq!(w.types, RouteType::RemoteWorkload as i32);
    assert!(!w.same_subnet);
    assert_eq!(w.dst_node_ip, "abcd:ffff::1");
}

#[test]
fn node_known_only_by_spec_addresses_is_routed() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    let node = Node {
        addresses: vec!["10.10.0.5/16".into(), "fd00::5".into()],
        ..Default::default()
    };
    r.on_node(REMOTE, Some(&node));
    flushed(&mut r, &mut rec);
    assert_eq!(rec.routes["10.10.0.5/32"].dst_node_ip, "10.10.0.5");
    assert_eq!(rec.routes["fd00::5/128"].dst_node_ip, "fd00::5");
}

#[test]
fn gate_withdraws_everything_and_restores_it() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    r.flush(false, &mut rec);
    assert!(rec.routes.is_empty());
    r.flush(true, &mut rec);
    assert_eq!(rec.routes.len(), 2);
    r.flush(false, &mut rec);
    assert!(rec.routes.is_empty());
    assert_eq!(r.num_sent(), 0);
}

#[test]
fn teardown_in_any_order_leaves_nothing_behind() {
    let inputs = |r: &mut L3RouteResolver| {
        r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
        r.on_block(&n("10.0.0.0/29"), Some(&block(ME)));
        let mut node = bgp_node("192.168.0.1/24");
        node.ipv4_vxlan_tunnel_addr = Some("10.0.0.0".parse().unwrap());
        r.on_node(ME, Some(&node));
        r.on_workload(
            &wep_key(ME, "wl1"),
            Some(&wep(&["10.0.0.1/32", "fd00::1/128"])),
        );
    };
    type Step = fn(&mut L3RouteResolver);
    let steps: [Step; 4] = [
        |r| r.on_pool(&n("10.0.0.0/16"), None),
        |r| r.on_block(&n("10.0.0.0/29"), None),
        |r| r.on_node(ME, None),
        |r| r.on_workload(&wep_key(ME, "wl1"), None),
    ];
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]] {
        let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
        let mut rec = Rec::default();
        inputs(&mut r);
        flushed(&mut r, &mut rec);
        assert!(rec.routes.len() >= 5);
        for i in order {
            steps[i](&mut r);
            flushed(&mut r, &mut rec);
        }
        assert!(
            rec.routes.is_empty(),
            "order {order:?} left {:?}",
            rec.routes.keys()
        );
        assert_eq!(r.num_cidrs(), 0, "order {order:?}");
        assert!(
            r.node_routes.is_empty() && r.workload_cidrs.is_empty() && r.block_routes.is_empty()
        );
    }
}

#[test]
fn routes_inside_a_reassigned_block_follow_its_new_owner() {
    let mut r = L3RouteResolver::new(ME, RouteSource::CalicoIpam);
    let mut rec = Rec::default();
    r.on_pool(&n("10.0.0.0/16"), Some(&vxlan_pool(true)));
    let mut node2 = bgp_node("192.168.0.2/24");
    node2.ipv4_vxlan_tunnel_addr = Some("10.0.1.0".parse().unwrap());
    r.on_node(REMOTE, Some(&node2));
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE)));
    flushed(&mut r, &mut rec);
    assert!(!rec.routes["10.0.1.0/32"].borrowed);
    // The block moves: the tunnel address inside it is now borrowed.
    r.on_block(&n("10.0.1.0/29"), Some(&block(REMOTE2)));
    flushed(&mut r, &mut rec);
    assert!(rec.routes["10.0.1.0/32"].borrowed);
    r.on_block(&n("10.0.1.0/29"), None);
    flushed(&mut r, &mut rec);
    assert!(!rec.routes["10.0.1.0/32"].borrowed);
}
