//! The desired state of eBPF mode: what `manager/bpf-endpoints` writes and `driver/bpf`
//! reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use felix_bpf::routes::Failsafe;
use felix_bpf::{BpfAttachType, EndpointKind, Hook, PolicyKind};
use felix_proto::{HostEndpoint, Policy, Profile, WorkloadEndpoint};
use ipnet::IpNet;

/// What one interface should carry: a preamble on both TC hooks, each direction's policy
/// program, and (once both hooks are attached) a READY `cali_iface` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfaceDesired {
    /// Workload or host endpoint.
    pub kind: EndpointKind,
    /// Policy of what the endpoint sends (its host-side device's TC ingress).
    pub from_endpoint: PolicyKind,
    /// Policy of what the endpoint receives (its host-side device's TC egress).
    pub to_endpoint: PolicyKind,
}

impl IfaceDesired {
    /// The policy program of `hook` on the endpoint's host-side device.
    pub fn policy(&self, hook: Hook) -> PolicyKind {
        match hook {
            Hook::Ingress => self.from_endpoint,
            Hook::Egress => self.to_endpoint,
        }
    }
}

/// The whole desired BPF state of the node (both IP families: the ifstate map and the jump
/// maps are shared).
///
/// Invariant: every interface felix has attached to and that is not a key of `ifaces` is
/// removed by the driver's sweep (after in-sync); nothing else is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BpfDesired {
    /// The configured `BPFAttachType`; the driver turns it into a mechanism per interface
    /// with `felix_bpf::attach::select_mechanism` and the kernel's probed support.
    pub attach_type: BpfAttachType,
    /// Interfaces by name.
    pub ifaces: BTreeMap<String, IfaceDesired>,
    /// The endpoint addresses of each interface (its `ipv4Nets`/`ipv6Nets`): when an
    /// interface goes, the conntrack entries of its addresses go with it.
    pub addrs: BTreeMap<String, Vec<std::net::IpAddr>>,
    /// The workload endpoint of each interface (its tiers and profiles make its lists).
    pub endpoints: BTreeMap<String, Arc<WorkloadEndpoint>>,
    /// Active policies by (name, namespace, kind).
    pub policies: BTreeMap<PolicyKey, Arc<Policy>>,
    /// Active profiles by name.
    pub profiles: BTreeMap<String, Arc<Profile>>,
    /// Active IP sets by calc-graph set ID: their members.
    pub ipsets: BTreeMap<String, Arc<Vec<String>>>,
    /// The host endpoint of each host interface (its untracked, pre-DNAT, normal and forward
    /// tiers and its profiles make its lists).
    pub hosts: BTreeMap<String, Arc<HostEndpoint>>,
    /// The routes map's content.
    pub routes: Arc<BTreeMap<IpNet, RouteEntry>>,
    /// The failsafe map's content (`FailsafeInboundHostPorts`, `FailsafeOutboundHostPorts`).
    pub failsafes: Arc<Vec<Failsafe>>,
}

/// One prefix of the routes map, as the manager knows it (the driver resolves the interface
/// to its ifindex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    /// `felix_bpf::routes::RT_*`.
    pub flags: u32,
    /// The local workload interface the prefix belongs to (or may be used as a source by).
    pub iface: Option<String>,
}

/// A policy's identity: (name, namespace, kind).
pub type PolicyKey = (String, String, String);
