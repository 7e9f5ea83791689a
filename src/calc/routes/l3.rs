//! The L3 route resolver: indexes IP pools, IPAM blocks, node addresses
//! (host and VXLAN tunnel addresses) and workload addresses into one route
//! per known CIDR, each describing that CIDR as longest-prefix-match
//! routing sees it: the pool type and NAT/cross-subnet flags of the
//! enclosing pool, the node that owns it (and that node's IP), whether it
//! is a host, tunnel or workload address and whether it is local or
//! remote, and whether it is borrowed from another node's block.
//!
//! Consumers: the VXLAN route manager (remote workload routes combined
//! with VTEPs from [`super::vxlan`]) and, later, a BPF dataplane.
//!
//! # Model
//!
//! Every input is recorded against a CIDR in a [`CidrMap`] of
//! [`RouteInfo`]s, one slot per input kind (pool, block, host names,
//! references), so inputs sharing a CIDR (a pool and a block of the same
//! size, a /32 block and the tunnel address inside it) do not collide.  A
//! route is computed from the path of stored CIDRs enclosing it, widest
//! first.  Every input change marks the CIDRs whose route may change
//! dirty; [`L3RouteResolver::flush`] recomputes only those and compares
//! with what was sent.
//!
//! Invariants:
//! * A CIDR is routed while it has any input; when its last input goes,
//!   a sent route is removed.  Only differences are emitted.
//! * Node-dependent fields (`dst_node_ip`, `same_subnet`) follow the node:
//!   a node change marks every route attributed to it dirty; a change of
//!   this node's own subnet marks every route dirty.
//! * Routes inherit from enclosing CIDRs (pool metadata, a block's owner
//!   and the borrowed flag), so a pool or block change re-evaluates every
//!   route inside it.  Upstream re-evaluates only inside pools; its
//!   routes inside a re-pointed block stay stale until touched again,
//!   which makes its output depend on history.  Here it does not.
//! * A host address never takes a workload type from an enclosing block;
//!   a tunnel address takes it only from a block of exactly its own size.
//! * `0.0.0.0/32` and `::/128` are never sent.
//! * Nothing here panics on inconsistent input: a reference released
//!   twice is ignored.
//!
//! # Known gaps against upstream (model limits, see the report)
//! * Borrowed IPs inside a block (non-affine allocations) are not in the
//!   model's `IpamBlock`, so only the block-wide route is produced.
//! * Tunnel addresses (VXLAN, IPIP `spec.bgp.ipv4IPIPTunnelAddr`, WireGuard
//!   `spec.wireguard.interfaceIPv4/6Address`) each get a tunnel route with
//!   the tunnel type set.
//! * Without a BGP address, upstream takes a node's first `InternalIP`
//!   (else `ExternalIP`) address; the model keeps no address types, so
//!   the first address of the family is used.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use felix_proto as pb;
use ipnet::IpNet;
use pb::{IpPoolType, RouteType};

use super::trie::{host_cidr, CidrMap};
use super::{RouteSink, RouteSource};
use crate::hash::FastMap as HashMap;
use crate::model::{EncapMode, IpPool, IpamBlock, Node, WorkloadEndpoint, WorkloadEndpointKey};

/// What is known about one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NodeInfo {
    /// The node's IPv4 address and the subnet it sits in.
    v4: Option<(IpAddr, IpNet)>,
    v6: Option<(IpAddr, IpNet)>,
    vxlan_v4: Option<IpAddr>,
    vxlan_v6: Option<IpAddr>,
    ipip_v4: Option<IpAddr>,
    wireguard_v4: Option<IpAddr>,
    wireguard_v6: Option<IpAddr>,
    /// Every address of the node (BGP addresses and `spec.addresses`),
    /// sorted and deduplicated; each gets a host route.
    host_addrs: Vec<IpAddr>,
}

fn parse_addr(s: &str) -> Option<(IpAddr, IpNet)> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Some((n.addr(), n.trunc()));
    }
    s.parse::<IpAddr>().ok().map(|a| (a, IpNet::from(a)))
}

fn is_unspecified(a: &IpAddr) -> bool {
    a.is_unspecified()
}

impl NodeInfo {
    /// `None` when the node has no usable IP address at all (then upstream
    /// does not track it, tunnel addresses included).
    fn from_node(n: &Node) -> Option<NodeInfo> {
        let (v4, v6) = if n.ipv4_address.is_some() || n.ipv6_address.is_some() {
            (
                n.ipv4_address.map(|a| (a.addr(), a.trunc())),
                n.ipv6_address.map(|a| (a.addr(), a.trunc())),
            )
        } else {
            let first = |want_v6: bool| {
                n.addresses
                    .iter()
                    .filter_map(|a| parse_addr(a))
                    .find(|(a, _)| a.is_ipv6() == want_v6)
            };
            (first(false), first(true))
        };
        if v4.is_none() && v6.is_none() {
            return None;
        }
        let mut host_addrs: Vec<IpAddr> = v4
            .iter()
            .chain(v6.iter())
            .map(|(a, _)| *a)
            .chain(
                n.addresses
                    .iter()
                    .filter_map(|a| parse_addr(a))
                    .map(|(a, _)| a),
            )
            .filter(|a| !is_unspecified(a))
            .collect();
        host_addrs.sort();
        host_addrs.dedup();
        Some(NodeInfo {
            v4,
            v6,
            vxlan_v4: n.ipv4_vxlan_tunnel_addr,
            vxlan_v6: n.ipv6_vxlan_tunnel_addr,
            ipip_v4: n.ipv4_ipip_tunnel_addr,
            wireguard_v4: n.wireguard_v4,
            wireguard_v6: n.wireguard_v6,
            host_addrs,
        })
    }

    /// Every tunnel address of the node with its kind (VXLAN, IPIP, WireGuard).
    fn tunnel_refs(&self) -> impl Iterator<Item = (IpAddr, RefKind)> + '_ {
        let vx = self.vxlan_v4.iter().chain(self.vxlan_v6.iter());
        let wg = self.wireguard_v4.iter().chain(self.wireguard_v6.iter());
        vx.map(|a| (*a, RefKind::Vxlan))
            .chain(self.ipip_v4.iter().map(|a| (*a, RefKind::Ipip)))
            .chain(wg.map(|a| (*a, RefKind::Wireguard)))
    }

    fn tunnel_addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.tunnel_refs().map(|(a, _)| a)
    }

    fn addr(&self, v6: bool) -> Option<IpAddr> {
        if v6 { self.v6 } else { self.v4 }.map(|(a, _)| a)
    }

    fn subnet(&self, v6: bool) -> Option<IpNet> {
        if v6 { self.v6 } else { self.v4 }.map(|(_, n)| n)
    }
}

/// Pool metadata recorded at the pool's CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PoolInfo {
    pool_type: IpPoolType,
    nat_outgoing: bool,
    cross_subnet: bool,
}

fn pool_info(p: &IpPool) -> PoolInfo {
    let lb_only = p.allowed_uses.len() == 1 && p.allowed_uses[0] == "LoadBalancer";
    let pool_type = if lb_only {
        IpPoolType::None
    } else if p.vxlan_mode != EncapMode::Never {
        IpPoolType::Vxlan
    } else if p.ipip_mode != EncapMode::Never {
        IpPoolType::Ipip
    } else {
        IpPoolType::NoEncap
    };
    PoolInfo {
        pool_type,
        nat_outgoing: p.masquerade,
        cross_subnet: p.ipip_mode == EncapMode::CrossSubnet
            || p.vxlan_mode == EncapMode::CrossSubnet,
    }
}

/// Kind of a reference; the order is the tie-break order among references
/// of one node at one CIDR (upstream's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RefKind {
    Workload,
    Wireguard,
    Ipip,
    Vxlan,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Ref {
    node: String,
    kind: RefKind,
    count: u32,
}

/// Everything recorded at one CIDR.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct RouteInfo {
    /// The pool with exactly this CIDR (pools are unique per CIDR).
    pool: Option<PoolInfo>,
    /// The node a block route at exactly this CIDR points at.
    block: Option<String>,
    /// Nodes that have this address (normally one; sorted).
    hosts: Vec<String>,
    /// Workload and tunnel references, sorted by (node, kind).
    refs: Vec<Ref>,
}

impl RouteInfo {
    fn is_empty(&self) -> bool {
        self.pool.is_none() && self.block.is_none() && self.hosts.is_empty() && self.refs.is_empty()
    }
}

/// See the module docs.
pub struct L3RouteResolver {
    hostname: String,
    source: RouteSource,
    cidrs: CidrMap<RouteInfo>,
    dirty: BTreeSet<IpNet>,
    nodes: HashMap<String, NodeInfo>,
    pools: HashMap<IpNet, PoolInfo>,
    /// Per block: destination -> node, as last applied.
    block_routes: HashMap<IpNet, BTreeMap<IpNet, String>>,
    /// Per node: the block and workload CIDRs attributed to it, counted.
    node_routes: HashMap<String, HashMap<IpNet, u32>>,
    workload_cidrs: HashMap<WorkloadEndpointKey, Vec<IpNet>>,
    sent: HashMap<IpNet, pb::RouteUpdate>,
    enabled: bool,
}

impl L3RouteResolver {
    /// A resolver for node `hostname` taking workload routes from `source`, with nothing sent.
    pub fn new(hostname: &str, source: RouteSource) -> Self {
        L3RouteResolver {
            hostname: hostname.to_string(),
            source,
            cidrs: CidrMap::new(),
            dirty: BTreeSet::new(),
            nodes: HashMap::default(),
            pools: HashMap::default(),
            block_routes: HashMap::default(),
            node_routes: HashMap::default(),
            workload_cidrs: HashMap::default(),
            sent: HashMap::default(),
            enabled: false,
        }
    }

    /// Where workload routes come from.
    pub fn route_source(&self) -> RouteSource {
        self.source
    }

    /// Number of routes currently sent.
    pub fn num_sent(&self) -> usize {
        self.sent.len()
    }

    /// Number of CIDRs with recorded inputs.
    pub fn num_cidrs(&self) -> usize {
        self.cidrs.len()
    }

    // ------------------------------------------------------------ indexing

    /// Applies `f` to the info at `cidr`; marks the CIDR dirty and returns
    /// true when that changed anything.
    fn update(&mut self, cidr: IpNet, f: impl FnOnce(&mut RouteInfo)) -> bool {
        let cidr = cidr.trunc();
        let old = self.cidrs.get(&cidr).cloned().unwrap_or_default();
        let mut new = old.clone();
        f(&mut new);
        if new == old {
            return false;
        }
        self.dirty.insert(cidr);
        if new.is_empty() {
            self.cidrs.remove(&cidr);
        } else {
            self.cidrs.insert(cidr, new);
        }
        true
    }

    fn add_ref(&mut self, cidr: IpNet, node: &str, kind: RefKind) {
        self.update(cidr, |ri| {
            if let Some(r) = ri
                .refs
                .iter_mut()
                .find(|r| r.node == node && r.kind == kind)
            {
                r.count += 1;
                return;
            }
            ri.refs.push(Ref {
                node: node.to_string(),
                kind,
                count: 1,
            });
            ri.refs
                .sort_by(|a, b| (&a.node, a.kind).cmp(&(&b.node, b.kind)));
        });
    }

    fn remove_ref(&mut self, cidr: IpNet, node: &str, kind: RefKind) {
        self.update(cidr, |ri| {
            if let Some(i) = ri.refs.iter().position(|r| r.node == node && r.kind == kind) {
                ri.refs[i].count -= 1;
                if ri.refs[i].count == 0 {
                    ri.refs.remove(i);
                }
            } else {
                tracing::warn!(%cidr, node, "route resolver: release of an unknown reference ignored");
            }
        });
    }

    fn node_route_add(&mut self, node: &str, cidr: IpNet) {
        *self
            .node_routes
            .entry(node.to_string())
            .or_default()
            .entry(cidr)
            .or_insert(0) += 1;
    }

    fn node_route_remove(&mut self, node: &str, cidr: IpNet) {
        let Some(m) = self.node_routes.get_mut(node) else {
            return;
        };
        if let Some(c) = m.get_mut(&cidr) {
            *c -= 1;
            if *c == 0 {
                m.remove(&cidr);
            }
        }
        if m.is_empty() {
            self.node_routes.remove(node);
        }
    }

    /// An IP pool was created, changed or deleted (`None`).
    pub fn on_pool(&mut self, cidr: &IpNet, pool: Option<&IpPool>) {
        let cidr = cidr.trunc();
        let new = pool.map(pool_info);
        let changed = match new {
            Some(p) => {
                self.pools.insert(cidr, p);
                self.update(cidr, |ri| ri.pool = Some(p))
            }
            None => {
                if self.pools.remove(&cidr).is_none() {
                    return;
                }
                self.update(cidr, |ri| ri.pool = None)
            }
        };
        if changed {
            // Every route inside the pool inherits its metadata.
            self.mark_within(&cidr);
        }
    }

    /// Marks `cidr` and every recorded CIDR inside it dirty.
    fn mark_within(&mut self, cidr: &IpNet) {
        let inside: Vec<IpNet> = self.cidrs.within(cidr).map(|(k, _)| *k).collect();
        self.dirty.extend(inside);
    }

    /// An IPAM block was created, changed or deleted (`None`).  Ignored
    /// under [`RouteSource::WorkloadIps`].
    pub fn on_block(&mut self, cidr: &IpNet, block: Option<&IpamBlock>) {
        if self.source != RouteSource::CalicoIpam {
            return;
        }
        let cidr = cidr.trunc();
        let mut want: BTreeMap<IpNet, String> = BTreeMap::new();
        if let Some(host) = block.and_then(|b| b.affinity_host.as_deref()) {
            if !host.is_empty() {
                want.insert(cidr, host.to_string());
            }
        }
        let have = self.block_routes.remove(&cidr).unwrap_or_default();
        // Withdraw stale or re-pointed destinations first, then add.  The
        // routes inside a changed destination inherit its owner (types,
        // borrowed flag), so they are re-evaluated too; upstream marks
        // only the block itself, which leaves them stale until something
        // else touches them.
        for (dst, node) in &have {
            if want.get(dst) != Some(node) {
                self.update(*dst, |ri| ri.block = None);
                self.node_route_remove(node, *dst);
                self.mark_within(dst);
            }
        }
        for (dst, node) in &want {
            if have.get(dst) != Some(node) {
                let n = node.clone();
                self.update(*dst, |ri| ri.block = Some(n));
                self.node_route_add(node, *dst);
                self.mark_within(dst);
            }
        }
        if !want.is_empty() {
            self.block_routes.insert(cidr, want);
        }
    }

    /// A workload endpoint (any node) was created, changed or deleted.
    /// Under [`RouteSource::CalicoIpam`] only this node's endpoints count.
    pub fn on_workload(&mut self, key: &WorkloadEndpointKey, wep: Option<&WorkloadEndpoint>) {
        if self.source == RouteSource::CalicoIpam && key.hostname != self.hostname {
            return;
        }
        let new: Vec<IpNet> = wep
            .map(|w| {
                w.ipv4_nets
                    .iter()
                    .chain(&w.ipv6_nets)
                    .map(IpNet::trunc)
                    .collect()
            })
            .unwrap_or_default();
        let old = self.workload_cidrs.get(key).cloned().unwrap_or_default();
        if new == old {
            return;
        }
        let node = key.hostname.as_str();
        for c in &new {
            self.add_ref(*c, node, RefKind::Workload);
            self.node_route_add(node, *c);
        }
        for c in &old {
            self.remove_ref(*c, node, RefKind::Workload);
            self.node_route_remove(node, *c);
        }
        if new.is_empty() {
            self.workload_cidrs.remove(key);
        } else {
            self.workload_cidrs.insert(key.clone(), new);
        }
    }

    /// A node was created, changed or deleted (`None`).
    pub fn on_node(&mut self, name: &str, node: Option<&Node>) {
        let new = node.and_then(NodeInfo::from_node);
        let old = self.nodes.get(name).cloned();
        if new == old {
            return;
        }
        if name == self.hostname {
            let subnet = |i: &Option<NodeInfo>, v6: bool| i.as_ref().and_then(|i| i.subnet(v6));
            if subnet(&old, false) != subnet(&new, false)
                || subnet(&old, true) != subnet(&new, true)
            {
                // "Same subnet" may have flipped for any route.
                let all: Vec<IpNet> = self.cidrs.keys().copied().collect();
                self.dirty.extend(all);
            }
        }
        // Tunnel references: add the new ones before releasing the old, so
        // an unchanged address never drops to zero.
        if let Some(n) = &new {
            for (a, kind) in n.tunnel_refs() {
                self.add_ref(host_cidr(a), name, kind);
            }
        }
        if let Some(o) = &old {
            for (a, kind) in o.tunnel_refs() {
                self.remove_ref(host_cidr(a), name, kind);
            }
            for a in &o.host_addrs {
                self.update(host_cidr(*a), |ri| ri.hosts.retain(|h| h != name));
            }
        }
        if let Some(n) = &new {
            for a in &n.host_addrs {
                self.update(host_cidr(*a), |ri| {
                    if !ri.hosts.iter().any(|h| h == name) {
                        ri.hosts.push(name.to_string());
                        ri.hosts.sort();
                    }
                });
            }
        }
        // Routes whose node IP or same-subnet flag follow this node: its
        // blocks and workloads (and anything recorded inside them, which
        // may take its owner from them), its host and tunnel addresses.
        let owned: Vec<IpNet> = self
            .node_routes
            .get(name)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        for c in &owned {
            self.mark_within(c);
        }
        let mut follow = Vec::new();
        for i in old.iter().chain(new.iter()) {
            follow.extend(i.host_addrs.iter().map(|a| host_cidr(*a)));
            follow.extend(i.tunnel_addrs().map(host_cidr));
        }
        self.dirty.extend(follow);
        match new {
            Some(n) => {
                self.nodes.insert(name.to_string(), n);
            }
            None => {
                self.nodes.remove(name);
            }
        }
    }

    // ------------------------------------------------------------ output

    /// Whether node `name`'s address of the family is inside this node's
    /// subnet; false when either is unknown.
    fn in_our_subnet(&self, name: &str, v6: bool) -> bool {
        let (Some(me), Some(other)) = (self.nodes.get(&self.hostname), self.nodes.get(name)) else {
            return false;
        };
        match (me.subnet(v6), other.addr(v6)) {
            (Some(net), Some(a)) => net.contains(&a),
            _ => false,
        }
    }

    /// The route the current state calls for at `dst` (ignoring the gate),
    /// or `None` when nothing is recorded there.
    pub fn route(&self, dst: &IpNet) -> Option<pb::RouteUpdate> {
        let cidr = dst.trunc();
        if cidr.prefix_len() == cidr.max_prefix_len() && cidr.addr().is_unspecified() {
            return None;
        }
        let path = self.cidrs.path(&cidr);
        if path.is_empty() {
            return None;
        }
        let mut rt = pb::RouteUpdate {
            dst: cidr.to_string(),
            ..Default::default()
        };
        rt.set_ip_pool_type(IpPoolType::None);
        let mut pool_cross_subnet = false;
        let mut block_node: Option<&str> = None;
        let mut block_types = 0i32;
        let mut block_at_dst = false;
        let mut has_tunnel = false;
        let mut has_host = false;
        for (at, ri) in &path {
            if let Some(p) = ri.pool {
                if p.pool_type != IpPoolType::None {
                    rt.set_ip_pool_type(p.pool_type);
                }
                rt.nat_outgoing |= p.nat_outgoing;
                pool_cross_subnet |= p.cross_subnet;
            }
            if let Some(b) = ri.block.as_deref() {
                // A narrower block owned by another node than an enclosing
                // one means the narrower range is borrowed.
                match block_node {
                    Some(outer) if outer != b => rt.borrowed = true,
                    _ => block_node = Some(b),
                }
                rt.dst_node_name = b.to_string();
                block_at_dst |= *at == cidr;
                block_types |= if b == self.hostname {
                    RouteType::LocalWorkload as i32
                } else {
                    RouteType::RemoteWorkload as i32
                };
            }
            if let Some(h) = ri.hosts.first() {
                rt.dst_node_name = h.clone();
                has_host = true;
                rt.add_type(if *h == self.hostname {
                    RouteType::LocalHost
                } else {
                    RouteType::RemoteHost
                });
            }
            if let Some(first) = ri.refs.first() {
                rt.dst_node_name = first.node.clone();
                if block_node.is_some_and(|b| b != first.node) {
                    rt.borrowed = true;
                }
                let local = first.node == self.hostname;
                if first.kind == RefKind::Workload {
                    if local {
                        rt.local_workload = true;
                        rt.add_type(RouteType::LocalWorkload);
                    } else {
                        rt.add_type(RouteType::RemoteWorkload);
                    }
                } else {
                    has_tunnel = true;
                    rt.add_type(if local {
                        RouteType::LocalTunnel
                    } else {
                        RouteType::RemoteTunnel
                    });
                    let mut tt = pb::TunnelType::default();
                    for r in ri.refs.iter().filter(|r| r.node == first.node) {
                        match r.kind {
                            RefKind::Vxlan => tt.vxlan = true,
                            RefKind::Ipip => tt.ipip = true,
                            RefKind::Wireguard => tt.wireguard = true,
                            RefKind::Workload => {}
                        }
                    }
                    rt.tunnel_type = Some(tt);
                }
            }
        }
        if block_node.is_some() && !has_host && (block_at_dst || !has_tunnel) {
            rt.types |= block_types;
        }
        let v6 = matches!(cidr, IpNet::V6(_));
        let mut node_known = false;
        if !rt.dst_node_name.is_empty() {
            if let Some(n) = self.nodes.get(&rt.dst_node_name) {
                node_known = true;
                if let Some(a) = n.addr(v6).filter(|a| !a.is_unspecified()) {
                    rt.dst_node_ip = a.to_string();
                }
            }
        }
        rt.same_subnet =
            pool_cross_subnet && node_known && self.in_our_subnet(&rt.dst_node_name, v6);
        Some(rt)
    }

    /// Emits the differences since the last flush; `enabled` is the gate
    /// (see the `routes` module docs).
    pub fn flush(&mut self, enabled: bool, sink: &mut impl RouteSink) {
        if enabled != self.enabled {
            self.enabled = enabled;
            let all: Vec<IpNet> = self.cidrs.keys().chain(self.sent.keys()).copied().collect();
            self.dirty.extend(all);
        }
        for cidr in std::mem::take(&mut self.dirty) {
            let want = if enabled { self.route(&cidr) } else { None };
            match want {
                Some(rt) => {
                    if self.sent.get(&cidr) != Some(&rt) {
                        self.sent.insert(cidr, rt.clone());
                        sink.route_update(rt);
                    }
                }
                None => {
                    if self.sent.remove(&cidr).is_some() {
                        sink.route_remove(&cidr.to_string());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "l3_tests.rs"]
mod tests;
