//! The internal data model: what the datastore syncers emit and the
//! calculation graph consumes.
//!
//! This is felix-rs's equivalent of libcalico-go's backend model: Calico v3
//! resources (see [`crate::resources`]) are validated and converted into these
//! keys and values before they reach the graph.  The conversion applies
//! upstream's rewrites (namespaced selectors ANDed with the namespace,
//! namespace / service-account selectors mapped to the `pcns.` / `pcsa.`
//! label spaces, `kns.` / `ksa.` profiles, ...), so nothing downstream of
//! this module needs to know about the v3 API shapes.
//!
//! # Syncer contract
//!
//! A syncer emits [`Update`]s.  Each one names a [`Key`] and carries either
//! `Some(value)` (the resource's current state) or `None` (the resource does
//! not exist: it was deleted, or it failed validation and is treated as
//! absent).  Consumers must decide existence from `value` alone and must not
//! assume ordering, monotonic versions or that every intermediate state is
//! seen: a resource can be deleted spuriously and re-created later.
//! [`UpdateType`] is a side channel for statistics only.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

/// Label map of an endpoint, network set or profile.
///
/// Sorted so that iteration (and therefore anything derived from it) is
/// deterministic.
pub type Labels = BTreeMap<String, String>;

/// Identity of a policy.  Matches upstream's `model.PolicyKey` and the
/// proto `PolicyID` (name, namespace, kind).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyKey {
    /// Policy name (without any tier prefix).
    pub name: String,
    /// Namespace, empty for global kinds.
    pub namespace: String,
    /// v3 kind: `GlobalNetworkPolicy` or `NetworkPolicy` (staged and
    /// Kubernetes kinds are not produced by our datastores).
    pub kind: String,
}

/// Identity of a workload endpoint (upstream `model.WorkloadEndpointKey`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadEndpointKey {
    pub hostname: String,
    pub orchestrator_id: String,
    pub workload_id: String,
    pub endpoint_id: String,
}

/// Identity of a host endpoint (upstream `model.HostEndpointKey`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostEndpointKey {
    pub hostname: String,
    pub endpoint_id: String,
}

/// Identity of a network set.  `name` is `<namespace>/<name>` for a
/// namespaced `NetworkSet` and plain `<name>` for a `GlobalNetworkSet`, as
/// upstream keys them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkSetKey {
    pub name: String,
}

/// Every key the calculation graph understands.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// A `GlobalNetworkPolicy` or `NetworkPolicy`.
    Policy(PolicyKey),
    /// A `Tier`, by name.
    Tier(String),
    /// A profile (from a `Profile` resource, or the `kns.` / `ksa.` profiles
    /// derived from Kubernetes namespaces and service accounts), by name.
    Profile(String),
    WorkloadEndpoint(WorkloadEndpointKey),
    HostEndpoint(HostEndpointKey),
    NetworkSet(NetworkSetKey),
    /// An IP pool, by CIDR.
    IpPool(IpNet),
    /// An IPAM block, by CIDR.
    IpamBlock(IpNet),
    /// A node (Calico `Node` resource), by name.
    Node(String),
    /// A Kubernetes namespace, by name (for `NamespaceUpdate`).
    Namespace(String),
    /// A Kubernetes service account (for `ServiceAccountUpdate`).
    ServiceAccount {
        namespace: String,
        name: String,
    },
    /// Cluster-wide Felix configuration parameter (from the
    /// `FelixConfiguration` named `default`).
    GlobalConfig(String),
    /// Per-host Felix configuration parameter (from `node.<host>`).
    HostConfig {
        host: String,
        name: String,
    },
    /// The `ClusterInformation` `datastoreReady` flag.
    Ready,
    /// A `LiveMigration`: an upstream internal kind (not a v3 resource)
    /// that upstream's Kubernetes backend derives from KubeVirt
    /// `VirtualMachineInstanceMigration`s.  Our datastores do not produce
    /// it yet; tests feed it through the model.
    LiveMigration(LiveMigrationKey),
}

/// Identity of a `LiveMigration` resource (namespaced).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LiveMigrationKey {
    pub namespace: String,
    pub name: String,
}

impl Key {
    /// Short name of the key's kind, for logs and statistics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Key::Policy(_) => "Policy",
            Key::Tier(_) => "Tier",
            Key::Profile(_) => "Profile",
            Key::WorkloadEndpoint(_) => "WorkloadEndpoint",
            Key::HostEndpoint(_) => "HostEndpoint",
            Key::NetworkSet(_) => "NetworkSet",
            Key::IpPool(_) => "IPPool",
            Key::IpamBlock(_) => "IPAMBlock",
            Key::Node(_) => "Node",
            Key::Namespace(_) => "Namespace",
            Key::ServiceAccount { .. } => "ServiceAccount",
            Key::GlobalConfig(_) => "GlobalConfig",
            Key::HostConfig { .. } => "HostConfig",
            Key::Ready => "Ready",
            Key::LiveMigration(_) => "LiveMigration",
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Policy(k) => write!(f, "Policy({}/{}/{})", k.kind, k.namespace, k.name),
            Key::Tier(n) => write!(f, "Tier({n})"),
            Key::Profile(n) => write!(f, "Profile({n})"),
            Key::WorkloadEndpoint(k) => write!(
                f,
                "WorkloadEndpoint({}/{}/{}/{})",
                k.hostname, k.orchestrator_id, k.workload_id, k.endpoint_id
            ),
            Key::HostEndpoint(k) => write!(f, "HostEndpoint({}/{})", k.hostname, k.endpoint_id),
            Key::NetworkSet(k) => write!(f, "NetworkSet({})", k.name),
            Key::IpPool(c) => write!(f, "IPPool({c})"),
            Key::IpamBlock(c) => write!(f, "IPAMBlock({c})"),
            Key::Node(n) => write!(f, "Node({n})"),
            Key::Namespace(n) => write!(f, "Namespace({n})"),
            Key::ServiceAccount { namespace, name } => {
                write!(f, "ServiceAccount({namespace}/{name})")
            }
            Key::GlobalConfig(n) => write!(f, "GlobalConfig({n})"),
            Key::HostConfig { host, name } => write!(f, "HostConfig({host}/{name})"),
            Key::Ready => write!(f, "Ready"),
            Key::LiveMigration(k) => write!(f, "LiveMigration({}/{})", k.namespace, k.name),
        }
    }
}

/// A value for a [`Key`].  The variant always matches the key's variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Policy(Arc<Policy>),
    Tier(Arc<Tier>),
    Profile(Arc<Profile>),
    WorkloadEndpoint(Arc<WorkloadEndpoint>),
    HostEndpoint(Arc<HostEndpoint>),
    NetworkSet(Arc<NetworkSet>),
    IpPool(Arc<IpPool>),
    IpamBlock(Arc<IpamBlock>),
    Node(Arc<Node>),
    /// Labels of a Kubernetes namespace.
    Namespace(Arc<Labels>),
    /// Labels of a Kubernetes service account.
    ServiceAccount(Arc<Labels>),
    /// Raw string value of a configuration parameter (parsed by
    /// `felix-config`).
    Config(String),
    /// `datastoreReady`.
    Ready(bool),
    LiveMigration(Arc<LiveMigration>),
}

/// Side-channel classification of an update, for statistics only (see the
/// module docs: never use it to decide existence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateType {
    New,
    Updated,
    Deleted,
    Unknown,
}

/// One key/value event from a syncer.  `value == None` means "absent".
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub key: Key,
    pub value: Option<Value>,
    pub update_type: UpdateType,
}

impl Update {
    /// An update carrying a present value.
    pub fn set(key: Key, value: Value) -> Self {
        Update {
            key,
            value: Some(value),
            update_type: UpdateType::Unknown,
        }
    }

    /// An update saying the key is absent.
    pub fn delete(key: Key) -> Self {
        Update {
            key,
            value: None,
            update_type: UpdateType::Deleted,
        }
    }
}

/// Connection state of a syncer, as upstream's `api.SyncStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncStatus {
    WaitForDatastore,
    ResyncInProgress,
    InSync,
}

/// What a syncer hands to its consumer.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncerEvent {
    /// A batch of updates.  Order within the batch is delivery order.
    Updates(Vec<Update>),
    /// A status change.  `InSync` is emitted once the initial snapshot has
    /// been delivered in full, and never fabricated.
    Status(SyncStatus),
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// A port match: a number, an inclusive range, or a named port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Port {
    Number(u16),
    Range { first: u16, last: u16 },
    Named(String),
}

/// An IP protocol as written in a rule: a well-known name or a number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// Lower-case (v1) name, as upstream's v3-to-model conversion leaves
    /// it: `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `udplite`.  Consumers
    /// compare case-insensitively all the same.
    Name(String),
    Number(u8),
}

/// Rule action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Action {
    #[default]
    Allow,
    Deny,
    Log,
    Pass,
}

impl Action {
    /// Lower-case form used in the proto `Rule.action`.
    pub fn as_proto_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Log => "log",
            Action::Pass => "next-tier",
        }
    }
}

/// HTTP match criteria passed through to the dataplane.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HttpMatch {
    pub methods: Vec<String>,
    /// `(exact, prefix)` pairs, one of which is set.
    pub paths: Vec<HttpPath>,
}

/// One HTTP path match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpPath {
    Exact(String),
    Prefix(String),
}

/// A converted rule, as upstream's `model.Rule`.
///
/// `src_selector` / `dst_selector` (and their negations) are the *combined*
/// selectors: the rule's own selector ANDed with the namespace selector
/// (mapped to `pcns.` labels), the service-account selector (mapped to
/// `pcsa.` labels) and, for namespaced policies, the policy's namespace.
/// The `original_*` fields carry the v3 fields unmodified for pass-through.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Rule {
    pub action: Action,
    /// 4 or 6 when the rule is restricted to one family.
    pub ip_version: Option<u8>,
    pub protocol: Option<Protocol>,
    pub not_protocol: Option<Protocol>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    pub not_icmp_type: Option<u8>,
    pub not_icmp_code: Option<u8>,

    pub src_nets: Vec<IpNet>,
    pub src_selector: String,
    pub src_ports: Vec<Port>,
    pub src_service: Option<ServiceMatch>,
    pub dst_nets: Vec<IpNet>,
    pub dst_selector: String,
    pub dst_ports: Vec<Port>,
    pub dst_service: Option<ServiceMatch>,

    pub not_src_nets: Vec<IpNet>,
    pub not_src_selector: String,
    pub not_src_ports: Vec<Port>,
    pub not_dst_nets: Vec<IpNet>,
    pub not_dst_selector: String,
    pub not_dst_ports: Vec<Port>,

    pub original_src_selector: String,
    pub original_src_namespace_selector: String,
    pub original_dst_selector: String,
    pub original_dst_namespace_selector: String,
    pub original_not_src_selector: String,
    pub original_not_dst_selector: String,
    pub original_src_service_account_names: Vec<String>,
    pub original_src_service_account_selector: String,
    pub original_dst_service_account_names: Vec<String>,
    pub original_dst_service_account_selector: String,

    pub http_match: Option<HttpMatch>,
    /// Rule metadata annotations.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A Kubernetes service match in a rule (`services: {name, namespace}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceMatch {
    pub name: String,
    pub namespace: String,
}

/// A policy, as upstream's `model.Policy`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Policy {
    pub namespace: String,
    pub tier: String,
    pub order: Option<f64>,
    pub inbound_rules: Vec<Rule>,
    pub outbound_rules: Vec<Rule>,
    /// The policy's selector, already ANDed with its namespace (and with
    /// its namespace / service-account selectors) for namespaced policies.
    pub selector: String,
    pub do_not_track: bool,
    pub pre_dnat: bool,
    pub apply_on_forward: bool,
    /// `"ingress"` / `"egress"`, defaulted as upstream defaults `types`.
    pub types: Vec<String>,
    pub annotations: BTreeMap<String, String>,
    /// `performanceHints` (e.g. `AssumeNeededOnEveryNode`).
    pub performance_hints: Vec<String>,
}

/// A tier.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    pub order: Option<f64>,
    /// Action for traffic that reaches the end of the tier without a
    /// verdict: `Deny` (the default when the resource does not say) or
    /// `Pass`.
    pub default_action: Action,
}

impl Default for Tier {
    fn default() -> Self {
        Tier {
            order: None,
            default_action: Action::Deny,
        }
    }
}

/// A profile: rules plus labels that endpoints inherit.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Profile {
    pub inbound_rules: Vec<Rule>,
    pub outbound_rules: Vec<Rule>,
    /// `labelsToApply`.
    pub labels: Labels,
}

/// A named port on an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// A 1:1 NAT mapping on a workload endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpNat {
    pub int_ip: IpAddr,
    pub ext_ip: IpAddr,
}

/// A workload endpoint, as upstream's `model.WorkloadEndpoint`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct WorkloadEndpoint {
    pub state: String,
    /// Host-side interface name.
    pub name: String,
    pub mac: Option<String>,
    pub profile_ids: Vec<String>,
    pub ipv4_nets: Vec<IpNet>,
    pub ipv6_nets: Vec<IpNet>,
    pub ipv4_nat: Vec<IpNat>,
    pub ipv6_nat: Vec<IpNat>,
    /// Includes the `projectcalico.org/*` labels added by conversion.
    pub labels: Labels,
    pub ipv4_gateway: Option<IpAddr>,
    pub ipv6_gateway: Option<IpAddr>,
    pub ports: Vec<EndpointPort>,
    pub generate_name: String,
    pub allow_spoofed_source_prefixes: Vec<IpNet>,
    pub annotations: BTreeMap<String, String>,
}

/// A host endpoint.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HostEndpoint {
    /// Interface name; empty or `*` for "all interfaces".
    pub name: String,
    pub expected_ipv4_addrs: Vec<IpAddr>,
    pub expected_ipv6_addrs: Vec<IpAddr>,
    pub labels: Labels,
    pub profile_ids: Vec<String>,
    pub ports: Vec<EndpointPort>,
}

/// A network set (global or namespaced).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NetworkSet {
    pub nets: Vec<IpNet>,
    /// Includes `projectcalico.org/namespace` for namespaced sets.
    pub labels: Labels,
    pub profile_ids: Vec<String>,
}

/// Encapsulation mode of an IP pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum EncapMode {
    #[default]
    Never,
    Always,
    CrossSubnet,
}

/// An IP pool.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct IpPool {
    pub cidr: Option<IpNet>,
    pub ipip_mode: EncapMode,
    pub vxlan_mode: EncapMode,
    pub masquerade: bool,
    pub disabled: bool,
    pub disable_bgp_export: bool,
    /// `allowedUses` (`Workload`, `Tunnel`, `LoadBalancer`).
    pub allowed_uses: Vec<String>,
    pub assignment_mode: String,
}

/// An IPAM block.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct IpamBlock {
    pub cidr: Option<IpNet>,
    /// Node name from `affinity: host:<node>`, if affine to a host.
    pub affinity_host: Option<String>,
}

/// A Calico node.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Node {
    /// `spec.bgp.ipv4Address` (with prefix length), if any.
    pub ipv4_address: Option<IpNet>,
    /// `spec.bgp.ipv6Address`, if any.
    pub ipv6_address: Option<IpNet>,
    /// `spec.ipv4VXLANTunnelAddr`.
    pub ipv4_vxlan_tunnel_addr: Option<IpAddr>,
    /// `spec.vxlanTunnelMACAddr`.
    pub vxlan_tunnel_mac: Option<String>,
    /// `spec.ipv6VXLANTunnelAddr`.
    pub ipv6_vxlan_tunnel_addr: Option<IpAddr>,
    /// `spec.vxlanTunnelMACAddrV6`.
    pub vxlan_tunnel_mac_v6: Option<String>,
    /// `spec.addresses[].address` (CIDR or plain address), in order.
    pub addresses: Vec<String>,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `spec.bgp.asNumber`, as a string, if set.
    pub as_number: Option<String>,
}

/// A workload (pod or VM) as a `LiveMigration` names it: every endpoint of
/// the workload (upstream `WorkloadIdentifier`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkloadIdentifier {
    pub hostname: String,
    pub orchestrator_id: String,
    pub workload_id: String,
}

/// One workload endpoint as a `LiveMigration` names it (upstream
/// `WorkloadEndpointIdentifier`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkloadEndpointIdentifier {
    pub hostname: String,
    pub orchestrator_id: String,
    pub workload_id: String,
    pub endpoint_id: String,
}

/// Where a live migration moves from: a whole workload (KubeVirt) or one
/// endpoint (OpenStack); `workload` wins when both are set.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigrationSource {
    pub workload: Option<WorkloadIdentifier>,
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// Where a live migration moves to: endpoints matching a selector
/// (KubeVirt) and/or one named endpoint (OpenStack).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigrationTarget {
    pub selector: Option<String>,
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// A `LiveMigration` resource (upstream `internalapi.LiveMigration`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigration {
    /// `metadata.uid` (reported to the dataplane with the role).
    pub uid: String,
    pub source: Option<LiveMigrationSource>,
    pub target: Option<LiveMigrationTarget>,
}
