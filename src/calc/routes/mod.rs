//! Route-side graph nodes, assembled: the L3 route resolver
//! ([`l3`]) and the VXLAN resolver ([`vxlan`]), fed
//! from the all-updates dispatcher and gated on the encapsulation.
//!
//! # Gating (why the nodes always exist)
//!
//! Upstream builds these nodes only when the configuration it started with
//! calls for them (routes: BPF, VXLAN, WireGuard, unencapsulated cluster
//! routes, or IPIP with Felix programming the IPIP cluster routes; VTEPs:
//! VXLAN v4 or v6), where the encapsulation half of that configuration is
//! computed from the IP pools at start-up, and restarts when it changes.
//!
//! Here both nodes are always built and always index their inputs; what
//! is gated is their *output*.  At every flush the graph hands in
//! [`RouteModes`], computed by [`RouteModes::resolve`] from a
//! [`RouteConfig`] (the configuration half, upstream defaults via
//! `Default`) and the encapsulation the current pools call for.  While a
//! mode is off the node withdraws everything it sent and emits nothing;
//! when it turns on, the node emits its full current state.  So the output
//! is still a function of the current state only, and for a default
//! configuration it equals what upstream emits from a start with the same
//! pools (`felix calc` applies a whole state before its first flush, so
//! the pools of the first state decide, as at an upstream start).
//!
//! # Route source
//!
//! [`RouteSource::CalicoIpam`] (upstream's default) derives workload routes
//! from IPAM blocks, and only *local* workload endpoints contribute their
//! own addresses; [`RouteSource::WorkloadIps`] ignores blocks and takes
//! every workload endpoint's addresses.  The source is fixed for the
//! lifetime of the nodes, as upstream (a change restarts Felix).

pub mod l3;
pub mod trie;
pub mod vxlan;

use felix_proto as pb;
use ipnet::IpNet;

use super::event_sequencer::EventSequencer;
use super::passthru::Encap;
use crate::model::{IpPool, IpamBlock, Node, WorkloadEndpoint, WorkloadEndpointKey};
use l3::L3RouteResolver;
use vxlan::VxlanResolver;

/// Receiver of route output.
pub trait RouteSink {
    /// Adds or replaces the route to `update.dst`.
    fn route_update(&mut self, update: pb::RouteUpdate);
    /// Removes the route to `dst`.
    fn route_remove(&mut self, dst: &str);
}

/// Receiver of VTEP output.
pub trait VtepSink {
    /// Adds or replaces `update.node`'s VTEP.
    fn vtep_update(&mut self, update: pb::VxlanTunnelEndpointUpdate);
    /// Removes `node`'s VTEP.
    fn vtep_remove(&mut self, node: &str);
}

impl RouteSink for EventSequencer {
    fn route_update(&mut self, update: pb::RouteUpdate) {
        self.on_route_update(update);
    }
    fn route_remove(&mut self, dst: &str) {
        self.on_route_remove(dst);
    }
}

impl VtepSink for EventSequencer {
    fn vtep_update(&mut self, update: pb::VxlanTunnelEndpointUpdate) {
        self.on_vtep_update(update);
    }
    fn vtep_remove(&mut self, node: &str) {
        self.on_vtep_remove(node);
    }
}

/// Where workload routes come from (Felix `RouteSource`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RouteSource {
    /// IPAM blocks (plus local workload addresses).  Upstream's default.
    #[default]
    CalicoIpam,
    /// The addresses of every workload endpoint; IPAM blocks are ignored.
    WorkloadIps,
}

impl RouteSource {
    /// Parses the Felix parameter value (`CalicoIPAM` / `WorkloadIPs`,
    /// case-insensitive); anything else is the default.
    pub fn from_param(s: &str) -> RouteSource {
        if s.eq_ignore_ascii_case("WorkloadIPs") {
            RouteSource::WorkloadIps
        } else {
            RouteSource::CalicoIpam
        }
    }
}

/// The configuration half of the gate.  `Default` is upstream's default
/// configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteConfig {
    /// `RouteSource`: where workload routes come from (IPAM blocks or endpoints).
    pub route_source: RouteSource,
    /// `BPFEnabled`: routes are emitted whatever the encapsulation.
    pub bpf_enabled: bool,
    /// `WireguardEnabled`: routes are emitted whatever the encapsulation.
    pub wireguard_enabled: bool,
    /// `ProgramClusterRoutes` is `Enabled` or `EnabledIPIPOnly` (default).
    pub program_ipip_cluster_routes: bool,
    /// `ProgramClusterRoutes` is `Enabled` or `EnabledNoEncapOnly`.
    pub program_no_encap_cluster_routes: bool,
    /// Parameters set by the environment or the config file, which the datastore's
    /// configuration does not override (Felix's precedence).
    pub pinned: Pinned,
}

/// Which gate parameters the environment or the config file set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pinned {
    /// `ProgramClusterRoutes`.
    pub program_cluster_routes: bool,
    /// `BPFEnabled`.
    pub bpf_enabled: bool,
    /// `WireguardEnabled`.
    pub wireguard_enabled: bool,
}

impl Pinned {
    fn contains(&self, key: &str) -> bool {
        match key {
            "ProgramClusterRoutes" => self.program_cluster_routes,
            "BPFEnabled" => self.bpf_enabled,
            "WireguardEnabled" => self.wireguard_enabled,
            _ => false,
        }
    }
}

impl Default for RouteConfig {
    fn default() -> Self {
        RouteConfig {
            route_source: RouteSource::CalicoIpam,
            bpf_enabled: false,
            wireguard_enabled: false,
            program_ipip_cluster_routes: true,
            program_no_encap_cluster_routes: false,
            pinned: Pinned::default(),
        }
    }
}

/// Which of the two nodes may emit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteModes {
    /// The L3 route resolver may emit routes.
    pub routes: bool,
    /// The VXLAN resolver may emit VTEPs.
    pub vteps: bool,
}

impl RouteModes {
    /// Upstream's construction condition, evaluated on the current pools.
    pub fn resolve(cfg: &RouteConfig, encap: Encap) -> RouteModes {
        let vxlan = encap.vxlan || encap.vxlan_v6;
        RouteModes {
            routes: cfg.bpf_enabled
                || vxlan
                || cfg.wireguard_enabled
                || (encap.no_encap && cfg.program_no_encap_cluster_routes)
                || (encap.ipip && cfg.program_ipip_cluster_routes),
            vteps: vxlan,
        }
    }
}

/// The two nodes plus their gate.  See the module docs.
pub struct RouteNodes {
    config: RouteConfig,
    l3: L3RouteResolver,
    vxlan: VxlanResolver,
}

impl RouteNodes {
    /// Both resolvers for node `hostname`, with nothing emitted yet.
    pub fn new(hostname: &str, config: RouteConfig) -> Self {
        RouteNodes {
            config,
            l3: L3RouteResolver::new(hostname, config.route_source),
            vxlan: VxlanResolver::new(),
        }
    }

    /// The configuration the nodes were built with.
    pub fn config(&self) -> &RouteConfig {
        &self.config
    }

    /// The L3 route resolver.
    pub fn l3(&self) -> &L3RouteResolver {
        &self.l3
    }

    /// The VXLAN (VTEP) resolver.
    pub fn vxlan(&self) -> &VxlanResolver {
        &self.vxlan
    }

    /// An IP pool was added, changed or (with `None`) removed.
    pub fn on_pool(&mut self, cidr: &IpNet, pool: Option<&IpPool>) {
        self.l3.on_pool(cidr, pool);
    }

    /// An IPAM block was added, changed or (with `None`) removed.
    pub fn on_block(&mut self, cidr: &IpNet, block: Option<&IpamBlock>) {
        self.l3.on_block(cidr, block);
    }

    /// A node was added, changed or (with `None`) removed.
    pub fn on_node(&mut self, name: &str, node: Option<&Node>) {
        self.l3.on_node(name, node);
        self.vxlan.on_node(name, node);
    }

    /// Every workload endpoint, local or remote; the resolver keeps what
    /// its route source needs.
    pub fn on_workload(&mut self, key: &WorkloadEndpointKey, wep: Option<&WorkloadEndpoint>) {
        self.l3.on_workload(key, wep);
    }

    /// The datastore's effective Felix configuration changed: the gate follows
    /// `ProgramClusterRoutes`, `BPFEnabled` and `WireguardEnabled` from there (a key absent
    /// from `config` keeps the value the graph was built with). `RouteSource` decides how the
    /// resolver is built and is read at start only.
    pub fn on_config(&mut self, config: &std::collections::BTreeMap<String, String>) {
        let config = |k: &str| {
            if self.config.pinned.contains(k) {
                None
            } else {
                config.get(k)
            }
        };
        if let Some(pcr) = config("ProgramClusterRoutes") {
            self.config.program_ipip_cluster_routes = pcr == "Enabled" || pcr == "EnabledIPIPOnly";
            self.config.program_no_encap_cluster_routes =
                pcr == "Enabled" || pcr == "EnabledNoEncapOnly";
        }
        let flag = |k: &str| config(k).map(|v| v.eq_ignore_ascii_case("true"));
        if let Some(b) = flag("BPFEnabled") {
            self.config.bpf_enabled = b;
        }
        if let Some(w) = flag("WireguardEnabled") {
            self.config.wireguard_enabled = w;
        }
    }

    /// Emits the differences since the last flush.  `encap` is the
    /// encapsulation the current pools call for.
    pub fn flush<S: RouteSink + VtepSink>(&mut self, encap: Encap, sink: &mut S) {
        let modes = RouteModes::resolve(&self.config, encap);
        self.vxlan.flush(modes.vteps, sink);
        self.l3.flush(modes.routes, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_cluster_routes_from_the_datastore_opens_the_gate_for_unencapsulated_pools() {
        let mut nodes = RouteNodes::new("node1", RouteConfig::default());
        let plain = Encap {
            no_encap: true,
            ..Default::default()
        };
        assert!(!RouteModes::resolve(nodes.config(), plain).routes);
        let cfg: std::collections::BTreeMap<String, String> =
            [("ProgramClusterRoutes".to_string(), "Enabled".to_string())].into();
        nodes.on_config(&cfg);
        assert!(RouteModes::resolve(nodes.config(), plain).routes);
        nodes.on_config(&[("ProgramClusterRoutes".to_string(), "Disabled".to_string())].into());
        assert!(!RouteModes::resolve(nodes.config(), plain).routes);
        // Set in the environment or config file: the datastore does not override it.
        let mut pinned = RouteNodes::new(
            "node1",
            RouteConfig {
                pinned: Pinned {
                    program_cluster_routes: true,
                    ..Pinned::default()
                },
                ..RouteConfig::default()
            },
        );
        pinned.on_config(&cfg);
        assert!(!RouteModes::resolve(pinned.config(), plain).routes);
    }

    #[test]
    fn default_config_gates_like_upstream() {
        let cfg = RouteConfig::default();
        let vx = Encap {
            vxlan: true,
            ..Default::default()
        };
        assert_eq!(
            RouteModes::resolve(&cfg, vx),
            RouteModes {
                routes: true,
                vteps: true
            }
        );
        let ipip = Encap {
            ipip: true,
            ..Default::default()
        };
        assert_eq!(
            RouteModes::resolve(&cfg, ipip),
            RouteModes {
                routes: true,
                vteps: false
            }
        );
        let plain = Encap {
            no_encap: true,
            ..Default::default()
        };
        assert_eq!(RouteModes::resolve(&cfg, plain), RouteModes::default());
        let bpf = RouteConfig {
            bpf_enabled: true,
            ..cfg
        };
        assert!(RouteModes::resolve(&bpf, plain).routes);
        let no_encap_routes = RouteConfig {
            program_no_encap_cluster_routes: true,
            ..cfg
        };
        assert!(RouteModes::resolve(&no_encap_routes, plain).routes);
    }

    #[test]
    fn route_source_parses_case_insensitively() {
        assert_eq!(
            RouteSource::from_param("workloadips"),
            RouteSource::WorkloadIps
        );
        assert_eq!(
            RouteSource::from_param("CalicoIPAM"),
            RouteSource::CalicoIpam
        );
        assert_eq!(RouteSource::from_param("bogus"), RouteSource::CalicoIpam);
    }
}
