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

mod labels;

pub use labels::Labels;

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
    /// Node the endpoint lives on.
    pub hostname: String,
    /// Orchestrator that created it (e.g. `k8s`).
    pub orchestrator_id: String,
    /// Workload (e.g. `namespace/pod`) the endpoint belongs to.
    pub workload_id: String,
    /// The endpoint's name within the workload.
    pub endpoint_id: String,
}

/// Identity of a host endpoint (upstream `model.HostEndpointKey`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostEndpointKey {
    /// Node the host endpoint belongs to.
    pub hostname: String,
    /// The host endpoint's name.
    pub endpoint_id: String,
}

/// Identity of a network set.  `name` is `<namespace>/<name>` for a
/// namespaced `NetworkSet` and plain `<name>` for a `GlobalNetworkSet`, as
/// upstream keys them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkSetKey {
    /// The set's name (`namespace/name` for a namespaced `NetworkSet`).
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
    /// A workload endpoint.
    WorkloadEndpoint(WorkloadEndpointKey),
    /// A host endpoint.
    HostEndpoint(HostEndpointKey),
    /// A `GlobalNetworkSet` or `NetworkSet`.
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
        /// The service account's namespace.
        namespace: String,
        /// The service account's name.
        name: String,
    },
    /// Cluster-wide Felix configuration parameter (from the
    /// `FelixConfiguration` named `default`).
    GlobalConfig(String),
    /// Per-host Felix configuration parameter (from `node.<host>`).
    HostConfig {
        /// Node the parameter applies to.
        host: String,
        /// Parameter name.
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
    /// Namespace of the `LiveMigration`.
    pub namespace: String,
    /// Name of the `LiveMigration`.
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
///
/// Equality is structural, with a shortcut: two values sharing one allocation are
/// equal without a field-by-field comparison (the file datastore hands the same
/// allocation on for every document it did not decode again, so telling what changed
/// in a file of thousands of policies costs a pointer comparison per policy).
#[derive(Clone, Debug)]
pub enum Value {
    /// For [`Key::Policy`].
    Policy(Arc<Policy>),
    /// For [`Key::Tier`].
    Tier(Arc<Tier>),
    /// For [`Key::Profile`].
    Profile(Arc<Profile>),
    /// For [`Key::WorkloadEndpoint`].
    WorkloadEndpoint(Arc<WorkloadEndpoint>),
    /// For [`Key::HostEndpoint`].
    HostEndpoint(Arc<HostEndpoint>),
    /// For [`Key::NetworkSet`].
    NetworkSet(Arc<NetworkSet>),
    /// For [`Key::IpPool`].
    IpPool(Arc<IpPool>),
    /// For [`Key::IpamBlock`].
    IpamBlock(Arc<IpamBlock>),
    /// For [`Key::Node`].
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
    /// For [`Key::LiveMigration`].
    LiveMigration(Arc<LiveMigration>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        /// Same allocation, or equal contents.
        fn same<T: PartialEq + ?Sized>(a: &Arc<T>, b: &Arc<T>) -> bool {
            Arc::ptr_eq(a, b) || **a == **b
        }
        // One arm per variant of `self` (no catch-all): a new variant must say how it
        // compares.
        match self {
            Value::Policy(a) => matches!(other, Value::Policy(b) if same(a, b)),
            Value::Tier(a) => matches!(other, Value::Tier(b) if same(a, b)),
            Value::Profile(a) => matches!(other, Value::Profile(b) if same(a, b)),
            Value::WorkloadEndpoint(a) => {
                matches!(other, Value::WorkloadEndpoint(b) if same(a, b))
            }
            Value::HostEndpoint(a) => matches!(other, Value::HostEndpoint(b) if same(a, b)),
            Value::NetworkSet(a) => matches!(other, Value::NetworkSet(b) if same(a, b)),
            Value::IpPool(a) => matches!(other, Value::IpPool(b) if same(a, b)),
            Value::IpamBlock(a) => matches!(other, Value::IpamBlock(b) if same(a, b)),
            Value::Node(a) => matches!(other, Value::Node(b) if same(a, b)),
            Value::Namespace(a) => matches!(other, Value::Namespace(b) if same(a, b)),
            Value::ServiceAccount(a) => matches!(other, Value::ServiceAccount(b) if same(a, b)),
            Value::Config(a) => matches!(other, Value::Config(b) if a == b),
            Value::Ready(a) => matches!(other, Value::Ready(b) if a == b),
            Value::LiveMigration(a) => matches!(other, Value::LiveMigration(b) if same(a, b)),
        }
    }
}

/// Side-channel classification of an update, for statistics only (see the
/// module docs: never use it to decide existence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateType {
    /// The key was not known before.
    New,
    /// The key existed and its value changed.
    Updated,
    /// The key was removed.
    Deleted,
    /// The syncer cannot tell whether the key is new.
    Unknown,
}

/// One key/value event from a syncer.  `value == None` means "absent".
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    /// Which resource the update is about.
    pub key: Key,
    /// The resource's current value; `None` means it does not exist.
    pub value: Option<Value>,
    /// Statistics only; see [`UpdateType`].
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
    /// Not yet connected to the datastore.
    WaitForDatastore,
    /// Connected, sending the initial snapshot.
    ResyncInProgress,
    /// The snapshot is complete; later updates are live changes.
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
    /// A single port.
    Number(u16),
    /// An inclusive range `first:last`.
    Range {
        /// First port of the range.
        first: u16,
        /// Last port of the range.
        last: u16,
    },
    /// A named port, resolved against endpoint ports.
    Named(String),
}

/// An IP protocol as written in a rule: a well-known name or a number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// Lower-case (v1) name, as upstream's v3-to-model conversion leaves
    /// it: `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `udplite`.  Consumers
    /// compare case-insensitively all the same.
    Name(String),
    /// A protocol number.
    Number(u8),
}

/// Rule action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Action {
    #[default]
    /// Accept the packet.
    Allow,
    /// Drop the packet.
    Deny,
    /// Log the packet and continue with the next rule.
    Log,
    /// Skip to the next tier.
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
    /// HTTP methods to match; empty matches any.
    pub methods: Vec<String>,
    /// `(exact, prefix)` pairs, one of which is set.
    pub paths: Vec<HttpPath>,
}

/// One HTTP path match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpPath {
    /// Matches this path exactly.
    Exact(String),
    /// Matches paths starting with this prefix.
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
    /// What to do with a matching packet.
    pub action: Action,
    /// 4 or 6 when the rule is restricted to one family.
    pub ip_version: Option<u8>,
    /// Protocol the packet must have.
    pub protocol: Option<Protocol>,
    /// Protocol the packet must not have.
    pub not_protocol: Option<Protocol>,
    /// ICMP type the packet must have.
    pub icmp_type: Option<u8>,
    /// ICMP code the packet must have (with `icmp_type`).
    pub icmp_code: Option<u8>,
    /// ICMP type the packet must not have.
    pub not_icmp_type: Option<u8>,
    /// ICMP code the packet must not have (with `not_icmp_type`).
    pub not_icmp_code: Option<u8>,

    /// Source CIDRs, any of which must contain the source address.
    pub src_nets: Vec<IpNet>,
    /// Combined source selector (see the type docs).
    pub src_selector: String,
    /// Source ports, any of which must match.
    pub src_ports: Vec<Port>,
    /// Kubernetes service the source must belong to.
    pub src_service: Option<ServiceMatch>,
    /// Destination CIDRs, any of which must contain the destination address.
    pub dst_nets: Vec<IpNet>,
    /// Combined destination selector (see the type docs).
    pub dst_selector: String,
    /// Destination ports, any of which must match.
    pub dst_ports: Vec<Port>,
    /// Kubernetes service the destination must belong to.
    pub dst_service: Option<ServiceMatch>,

    /// Source CIDRs none of which may contain the source address.
    pub not_src_nets: Vec<IpNet>,
    /// Combined selector the source must not match.
    pub not_src_selector: String,
    /// Source ports none of which may match.
    pub not_src_ports: Vec<Port>,
    /// Destination CIDRs none of which may contain the destination address.
    pub not_dst_nets: Vec<IpNet>,
    /// Combined selector the destination must not match.
    pub not_dst_selector: String,
    /// Destination ports none of which may match.
    pub not_dst_ports: Vec<Port>,

    /// v3 `source.selector`, unmodified.
    pub original_src_selector: String,
    /// v3 `source.namespaceSelector`, unmodified.
    pub original_src_namespace_selector: String,
    /// v3 `destination.selector`, unmodified.
    pub original_dst_selector: String,
    /// v3 `destination.namespaceSelector`, unmodified.
    pub original_dst_namespace_selector: String,
    /// v3 `source.notSelector`, unmodified.
    pub original_not_src_selector: String,
    /// v3 `destination.notSelector`, unmodified.
    pub original_not_dst_selector: String,
    /// v3 `source.serviceAccounts.names`, unmodified.
    pub original_src_service_account_names: Vec<String>,
    /// v3 `source.serviceAccounts.selector`, unmodified.
    pub original_src_service_account_selector: String,
    /// v3 `destination.serviceAccounts.names`, unmodified.
    pub original_dst_service_account_names: Vec<String>,
    /// v3 `destination.serviceAccounts.selector`, unmodified.
    pub original_dst_service_account_selector: String,

    /// HTTP match (application layer), passed through.
    pub http_match: Option<HttpMatch>,
    /// Rule metadata annotations.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A Kubernetes service match in a rule (`services: {name, namespace}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceMatch {
    /// The service's name.
    pub name: String,
    /// The service's namespace.
    pub namespace: String,
}

/// A policy, as upstream's `model.Policy`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Policy {
    /// Namespace of a namespaced policy; empty for a global one.
    pub namespace: String,
    /// Tier the policy belongs to.
    pub tier: String,
    /// Order within the tier; `None` sorts last.
    pub order: Option<f64>,
    /// Ingress rules.
    pub inbound_rules: Vec<Rule>,
    /// Egress rules.
    pub outbound_rules: Vec<Rule>,
    /// The policy's selector, already ANDed with its namespace (and with
    /// its namespace / service-account selectors) for namespaced policies.
    pub selector: String,
    /// Untracked policy: applied before connection tracking.
    pub do_not_track: bool,
    /// Applied before DNAT (host endpoints only).
    pub pre_dnat: bool,
    /// Also applied to traffic forwarded through host endpoints.
    pub apply_on_forward: bool,
    /// `"ingress"` / `"egress"`, defaulted as upstream defaults `types`.
    pub types: Vec<String>,
    /// The policy's `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `performanceHints` (e.g. `AssumeNeededOnEveryNode`).
    pub performance_hints: Vec<String>,
}

/// A tier.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    /// Order among tiers; `None` sorts last.
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
    /// Ingress rules.
    pub inbound_rules: Vec<Rule>,
    /// Egress rules.
    pub outbound_rules: Vec<Rule>,
    /// `labelsToApply`.
    pub labels: Labels,
}

/// A named port on an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointPort {
    /// The port's name, referenced by rules.
    pub name: String,
    /// The port's protocol.
    pub protocol: Protocol,
    /// The port number.
    pub port: u16,
}

/// A 1:1 NAT mapping on a workload endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpNat {
    /// The endpoint's own address.
    pub int_ip: IpAddr,
    /// The address mapped to it.
    pub ext_ip: IpAddr,
}

/// A workload endpoint, as upstream's `model.WorkloadEndpoint`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct WorkloadEndpoint {
    /// Endpoint state; always `active` for converted endpoints.
    pub state: String,
    /// Host-side interface name.
    pub name: String,
    /// MAC address of the endpoint's interface.
    pub mac: Option<String>,
    /// Profiles applied to the endpoint, in order.
    pub profile_ids: Vec<String>,
    /// The endpoint's IPv4 addresses.
    pub ipv4_nets: Vec<IpNet>,
    /// The endpoint's IPv6 addresses.
    pub ipv6_nets: Vec<IpNet>,
    /// IPv4 1:1 NAT mappings.
    pub ipv4_nat: Vec<IpNat>,
    /// IPv6 1:1 NAT mappings.
    pub ipv6_nat: Vec<IpNat>,
    /// Includes the `projectcalico.org/*` labels added by conversion.
    pub labels: Labels,
    /// IPv4 gateway of the endpoint.
    pub ipv4_gateway: Option<IpAddr>,
    /// IPv6 gateway of the endpoint.
    pub ipv6_gateway: Option<IpAddr>,
    /// Named ports of the endpoint.
    pub ports: Vec<EndpointPort>,
    /// The endpoint resource's `metadata.generateName`.
    pub generate_name: String,
    /// Source prefixes the workload may send from besides its own addresses.
    pub allow_spoofed_source_prefixes: Vec<IpNet>,
    /// The endpoint's `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
}

/// A host endpoint.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HostEndpoint {
    /// Interface name; empty or `*` for "all interfaces".
    pub name: String,
    /// The host's expected IPv4 addresses on the interface.
    pub expected_ipv4_addrs: Vec<IpAddr>,
    /// The host's expected IPv6 addresses on the interface.
    pub expected_ipv6_addrs: Vec<IpAddr>,
    /// The endpoint's labels.
    pub labels: Labels,
    /// Profiles applied to the endpoint, in order.
    pub profile_ids: Vec<String>,
    /// Named ports of the endpoint.
    pub ports: Vec<EndpointPort>,
}

/// A network set (global or namespaced).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NetworkSet {
    /// The set's CIDRs.
    pub nets: Vec<IpNet>,
    /// Includes `projectcalico.org/namespace` for namespaced sets.
    pub labels: Labels,
    /// Profiles whose labels the set inherits (`kns.<namespace>` for a namespaced set).
    pub profile_ids: Vec<String>,
}

/// Encapsulation mode of an IP pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum EncapMode {
    #[default]
    /// No encapsulation.
    Never,
    /// Encapsulate all traffic to other nodes.
    Always,
    /// Encapsulate only traffic to nodes in other subnets.
    CrossSubnet,
}

/// An IP pool.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct IpPool {
    /// The pool's CIDR (always set by the v3 conversion).
    pub cidr: Option<IpNet>,
    /// IP-in-IP mode.
    pub ipip_mode: EncapMode,
    /// VXLAN mode.
    pub vxlan_mode: EncapMode,
    /// Masquerade traffic leaving the pool (`natOutgoing`).
    pub masquerade: bool,
    /// No new addresses are allocated from the pool.
    pub disabled: bool,
    /// Do not advertise the pool over BGP.
    pub disable_bgp_export: bool,
    /// `allowedUses` (`Workload`, `Tunnel`, `LoadBalancer`).
    pub allowed_uses: Vec<String>,
    /// `Automatic` or `Manual`.
    pub assignment_mode: String,
}

/// An IPAM block.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct IpamBlock {
    /// The block's CIDR (always set by the v3 conversion).
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
    /// `spec.bgp.ipv4IPIPTunnelAddr`.
    pub ipv4_ipip_tunnel_addr: Option<IpAddr>,
    /// `spec.wireguard.interfaceIPv4Address`.
    pub wireguard_v4: Option<IpAddr>,
    /// `spec.wireguard.interfaceIPv6Address`.
    pub wireguard_v6: Option<IpAddr>,
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
    /// Node the workload runs on.
    pub hostname: String,
    /// Orchestrator that created it.
    pub orchestrator_id: String,
    /// The workload's ID.
    pub workload_id: String,
}

/// One workload endpoint as a `LiveMigration` names it (upstream
/// `WorkloadEndpointIdentifier`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkloadEndpointIdentifier {
    /// Node the endpoint lives on.
    pub hostname: String,
    /// Orchestrator that created it.
    pub orchestrator_id: String,
    /// The workload's ID.
    pub workload_id: String,
    /// The endpoint's name within the workload.
    pub endpoint_id: String,
}

/// Where a live migration moves from: a whole workload (KubeVirt) or one
/// endpoint (OpenStack); `workload` wins when both are set.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigrationSource {
    /// The whole workload being moved.
    pub workload: Option<WorkloadIdentifier>,
    /// The one endpoint being moved.
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// Where a live migration moves to: endpoints matching a selector
/// (KubeVirt) and/or one named endpoint (OpenStack).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigrationTarget {
    /// Selector of the target endpoints.
    pub selector: Option<String>,
    /// The one target endpoint.
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// A `LiveMigration` resource (upstream `internalapi.LiveMigration`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveMigration {
    /// `metadata.uid` (reported to the dataplane with the role).
    pub uid: String,
    /// Where the migration moves from.
    pub source: Option<LiveMigrationSource>,
    /// Where the migration moves to.
    pub target: Option<LiveMigrationTarget>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_sharing_an_allocation_are_equal_without_comparing_fields() {
        // NaN is unequal to itself field by field, so only the shortcut makes a value
        // equal to its own allocation here.
        let nan = Arc::new(Tier {
            order: Some(f64::NAN),
            ..Tier::default()
        });
        let a = Value::Tier(nan.clone());
        assert_eq!(a, Value::Tier(nan.clone()));
        assert_ne!(a, Value::Tier(Arc::new((*nan).clone())));
        // Otherwise equality is structural, and never across variants.
        let one = |order| {
            Value::Tier(Arc::new(Tier {
                order: Some(order),
                ..Tier::default()
            }))
        };
        assert_eq!(one(1.0), one(1.0));
        assert_ne!(one(1.0), one(2.0));
        assert_ne!(Value::Ready(true), Value::Config("true".into()));
    }
}
