//! Serde shapes of the Calico v3 API (and the two Kubernetes v1 kinds)
//! exactly as `calicoctl apply` accepts them.
//!
//! Decoding is strict: every struct denies unknown fields, so a typo such as
//! `selectr:` fails the resource with an error naming the field (like
//! calicoctl's strict decoding) instead of being silently dropped.  Values
//! are kept in their raw textual form (ports, protocols, CIDRs, selectors);
//! [`super::convert`] validates them and converts them into the model, so
//! every semantic error can name the exact field path.
//!
//! `null` is accepted wherever a value may be omitted and means "omitted",
//! as Go's JSON decoding into zero values does.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Deserializes `null` (or an omitted field, with `#[serde(default)]`) as
/// the type's default.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Kubernetes object metadata.  Only `name`, `namespace`, `labels`,
/// `annotations` and `generateName` are used; the other standard fields are
/// accepted and ignored so that exported resources decode.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default, deserialize_with = "nullable")]
    /// `metadata.name`: the resource's name.
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `metadata.namespace`: the namespace of a namespaced resource.
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `metadata.labels`: the resource's labels, matched by selectors.
    pub labels: crate::model::Labels,
    #[serde(default, deserialize_with = "nullable")]
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `metadata.generateName`: name prefix when `name` is empty.
    pub generate_name: String,
    #[serde(default)]
    /// `metadata.uid`: accepted and ignored.
    pub uid: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.resourceVersion`: accepted and ignored.
    pub resource_version: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.creationTimestamp`: accepted and ignored.
    pub creation_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.deletionTimestamp`: accepted and ignored.
    pub deletion_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.deletionGracePeriodSeconds`: accepted and ignored.
    pub deletion_grace_period_seconds: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.generation`: accepted and ignored.
    pub generation: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.finalizers`: accepted and ignored.
    pub finalizers: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.ownerReferences`: accepted and ignored.
    pub owner_references: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.managedFields`: accepted and ignored.
    pub managed_fields: Option<IgnoredAny>,
    #[serde(default)]
    /// `metadata.selfLink`: accepted and ignored.
    pub self_link: Option<IgnoredAny>,
}

/// A value written either as an integer or as a string (ports, protocols,
/// AS numbers, DSCP values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntOrString {
    /// Written as a JSON/YAML number.
    Int(i64),
    /// Written as a string.
    Str(String),
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i64::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("number {v} is out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::Str(s) => f.write_str(s),
        }
    }
}

/// A schemaless value (used for `FelixConfiguration.spec`, whose fields are
/// checked against the parameter table in [`super::felixconfig`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Dyn {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number that fits an `i64`.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    List(Vec<Dyn>),
    /// A mapping, in document order.
    Map(Vec<(String, Dyn)>),
}

impl<'de> Deserialize<'de> for Dyn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dyn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Dyn, E> {
                Ok(Dyn::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Dyn, E> {
                Ok(Dyn::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Dyn, D::Error> {
                Dyn::deserialize(d)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Dyn, E> {
                Ok(Dyn::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dyn, E> {
                Ok(Dyn::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dyn, E> {
                Ok(i64::try_from(v).map_or(Dyn::Float(v as f64), Dyn::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dyn, E> {
                Ok(Dyn::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dyn, E> {
                Ok(Dyn::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Dyn, E> {
                Ok(Dyn::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dyn, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Dyn::List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dyn, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Dyn>()? {
                    out.push((k, v));
                }
                Ok(Dyn::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Policy rules
// ---------------------------------------------------------------------------

/// `Rule` of a policy or profile.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    #[serde(default, deserialize_with = "nullable")]
    /// `action`: `Allow`, `Deny`, `Log` or `Pass`.
    pub action: String,
    #[serde(default)]
    /// `ipVersion`: 4 or 6, restricting the rule to one IP family.
    pub ip_version: Option<i64>,
    #[serde(default)]
    /// `protocol`: protocol name or number the rule matches.
    pub protocol: Option<IntOrString>,
    #[serde(default)]
    /// `icmp`: ICMP type/code the rule matches.
    pub icmp: Option<IcmpFields>,
    #[serde(default)]
    /// `notProtocol`: protocol the rule must not match.
    pub not_protocol: Option<IntOrString>,
    #[serde(default, rename = "notICMP")]
    /// `notICMP`: ICMP type/code the rule must not match.
    pub not_icmp: Option<IcmpFields>,
    #[serde(default, deserialize_with = "nullable")]
    /// `source`: match on the packet's source.
    pub source: EntityRule,
    #[serde(default, deserialize_with = "nullable")]
    /// `destination`: match on the packet's destination.
    pub destination: EntityRule,
    #[serde(default)]
    /// `http`: HTTP match (application layer).
    pub http: Option<HttpMatch>,
    #[serde(default)]
    /// `metadata`: annotations attached to the rule.
    pub metadata: Option<RuleMetadata>,
}

/// `icmp` / `notICMP`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcmpFields {
    #[serde(default, rename = "type")]
    /// `type`: the ICMP type.
    pub icmp_type: Option<i64>,
    #[serde(default)]
    /// `code`: the ICMP code (needs `type`).
    pub code: Option<i64>,
}

/// `source` / `destination` of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EntityRule {
    #[serde(default, deserialize_with = "nullable")]
    /// `nets`: CIDRs the address must be in.
    pub nets: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `selector`: endpoints (and network sets) the address must belong to.
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `namespaceSelector`: namespaces whose endpoints match.
    pub namespace_selector: String,
    #[serde(default)]
    /// `services`: Kubernetes service the traffic must be to or from.
    pub services: Option<ServiceMatch>,
    #[serde(default, deserialize_with = "nullable")]
    /// `ports`: ports or port ranges (or named ports) to match.
    pub ports: Vec<IntOrString>,
    #[serde(default, deserialize_with = "nullable")]
    /// `notNets`: CIDRs the address must not be in.
    pub not_nets: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `notSelector`: endpoints the address must not belong to.
    pub not_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `notPorts`: ports the packet must not use.
    pub not_ports: Vec<IntOrString>,
    #[serde(default)]
    /// `serviceAccounts`: service accounts of the matched endpoints.
    pub service_accounts: Option<ServiceAccountMatch>,
}

/// `services` of an entity rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceMatch {
    #[serde(default, deserialize_with = "nullable")]
    /// `name`: the service's name.
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `namespace`: the service's namespace.
    pub namespace: String,
}

/// `serviceAccounts` of an entity rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccountMatch {
    #[serde(default, deserialize_with = "nullable")]
    /// `names`: service account names to match.
    pub names: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `selector`: labels the service accounts must match.
    pub selector: String,
}

/// `http` match of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpMatch {
    #[serde(default, deserialize_with = "nullable")]
    /// `methods`: HTTP methods to match.
    pub methods: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `paths`: HTTP paths to match.
    pub paths: Vec<HttpPath>,
}

/// One `http.paths` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPath {
    #[serde(default, deserialize_with = "nullable")]
    /// `exact`: a path matched exactly.
    pub exact: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `prefix`: a path prefix.
    pub prefix: String,
}

/// Rule `metadata`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMetadata {
    #[serde(default, deserialize_with = "nullable")]
    /// `annotations`: free-form key/value pairs of the rule.
    pub annotations: BTreeMap<String, String>,
}

// ---------------------------------------------------------------------------
// Specs, one per kind
// ---------------------------------------------------------------------------

/// `NetworkPolicy.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.tier`: tier the policy belongs to; empty means `default`.
    pub tier: String,
    #[serde(default)]
    /// `spec.order`: the policy's order; lower applies first.
    pub order: Option<f64>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.ingress`: rules for traffic into the selected endpoints.
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.egress`: rules for traffic out of the selected endpoints.
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.selector`: endpoints the policy applies to.
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.types`: `Ingress` and/or `Egress`; inferred from the rules when empty.
    pub types: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.serviceAccountSelector`: further restricts the endpoints by service account.
    pub service_account_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.performanceHints`: e.g. `AssumeNeededOnEveryNode`.
    pub performance_hints: Vec<String>,
}

/// `GlobalNetworkPolicy.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GlobalNetworkPolicySpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.tier`: tier the policy belongs to; empty means `default`.
    pub tier: String,
    #[serde(default)]
    /// `spec.order`: the policy's order; lower applies first.
    pub order: Option<f64>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.ingress`: rules for traffic into the selected endpoints.
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.egress`: rules for traffic out of the selected endpoints.
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.selector`: endpoints the policy applies to.
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.types`: `Ingress` and/or `Egress`; inferred from the rules when empty.
    pub types: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.doNotTrack`: apply the rules before connection tracking (untracked policy).
    pub do_not_track: bool,
    #[serde(default, rename = "preDNAT", deserialize_with = "nullable")]
    /// `spec.preDNAT`: apply the rules before DNAT (host endpoints only).
    pub pre_dnat: bool,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.applyOnForward`: also apply to traffic forwarded through host endpoints.
    pub apply_on_forward: bool,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.serviceAccountSelector`: further restricts the endpoints by service account.
    pub service_account_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.namespaceSelector`: further restricts the endpoints by namespace labels.
    pub namespace_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.performanceHints`: e.g. `AssumeNeededOnEveryNode`.
    pub performance_hints: Vec<String>,
}

/// `Tier.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TierSpec {
    #[serde(default)]
    /// `spec.order`: the tier's order; lower applies first.
    pub order: Option<f64>,
    #[serde(default)]
    /// `spec.defaultAction`: `Deny` or `Pass` for traffic no policy in the tier decided.
    pub default_action: Option<String>,
}

/// `Profile.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProfileSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.ingress`: rules for traffic into endpoints using the profile.
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.egress`: rules for traffic out of endpoints using the profile.
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.labelsToApply`: labels inherited by endpoints using the profile.
    pub labels_to_apply: crate::model::Labels,
}

/// `WorkloadEndpoint.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadEndpointSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.orchestrator`: orchestrator that created the workload (e.g. `k8s`).
    pub orchestrator: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.workload`: the workload's name.
    pub workload: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.node`: node the workload runs on.
    pub node: String,
    #[serde(default, rename = "containerID", deserialize_with = "nullable")]
    /// `spec.containerID`: the workload's container ID.
    pub container_id: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.pod`: the pod's name (Kubernetes).
    pub pod: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.endpoint`: the endpoint's name within the workload.
    pub endpoint: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.serviceAccountName`: the pod's service account.
    pub service_account_name: String,
    #[serde(default, rename = "ipNetworks", deserialize_with = "nullable")]
    /// `spec.ipNetworks`: the endpoint's addresses (CIDRs).
    pub ip_networks: Vec<String>,
    #[serde(default, rename = "ipNATs", deserialize_with = "nullable")]
    /// `spec.ipNATs`: 1:1 NAT mappings of the endpoint's addresses.
    pub ip_nats: Vec<IpNat>,
    #[serde(default, rename = "ipv4Gateway", deserialize_with = "nullable")]
    /// `spec.ipv4Gateway`: IPv4 gateway of the endpoint.
    pub ipv4_gateway: String,
    #[serde(default, rename = "ipv6Gateway", deserialize_with = "nullable")]
    /// `spec.ipv6Gateway`: IPv6 gateway of the endpoint.
    pub ipv6_gateway: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.profiles`: profiles applied to the endpoint.
    pub profiles: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.interfaceName`: host-side interface of the endpoint.
    pub interface_name: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.mac`: MAC address of the endpoint's interface.
    pub mac: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.ports`: named ports of the endpoint.
    pub ports: Vec<WorkloadEndpointPort>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.allowSpoofedSourcePrefixes`: source prefixes the workload may send from besides its own addresses.
    pub allow_spoofed_source_prefixes: Vec<String>,
    #[serde(default)]
    /// `spec.qosControls`: accepted and ignored.
    pub qos_controls: Option<IgnoredAny>,
}

/// `ipNATs` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpNat {
    #[serde(default, rename = "internalIP", deserialize_with = "nullable")]
    /// `internalIP`: the endpoint's own address.
    pub internal_ip: String,
    #[serde(default, rename = "externalIP", deserialize_with = "nullable")]
    /// `externalIP`: the address mapped to it.
    pub external_ip: String,
}

/// Workload endpoint `ports` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadEndpointPort {
    #[serde(default, deserialize_with = "nullable")]
    /// `name`: the port's name, referenced by rules.
    pub name: String,
    /// `protocol`: the port's protocol.
    pub protocol: IntOrString,
    #[serde(default, deserialize_with = "nullable")]
    /// `port`: the port number.
    pub port: i64,
    #[serde(default, deserialize_with = "nullable")]
    /// `hostPort`: host port mapped to the port; 0 for none.
    pub host_port: i64,
    #[serde(default, rename = "hostIP", deserialize_with = "nullable")]
    /// `hostIP`: host address of the host port.
    pub host_ip: String,
}

/// `HostEndpoint.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostEndpointSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.node`: node the host endpoint belongs to.
    pub node: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.interfaceName`: the interface it protects; `*` for all.
    pub interface_name: String,
    #[serde(default, rename = "expectedIPs", deserialize_with = "nullable")]
    /// `spec.expectedIPs`: the host's addresses on that interface.
    pub expected_ips: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.profiles`: profiles applied to the endpoint.
    pub profiles: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.ports`: named ports of the endpoint.
    pub ports: Vec<EndpointPort>,
}

/// Host endpoint `ports` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPort {
    #[serde(default, deserialize_with = "nullable")]
    /// `name`: the port's name, referenced by rules.
    pub name: String,
    /// `protocol`: the port's protocol.
    pub protocol: IntOrString,
    #[serde(default, deserialize_with = "nullable")]
    /// `port`: the port number.
    pub port: i64,
}

/// `GlobalNetworkSet.spec` and `NetworkSet.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSetSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.nets`: the set's CIDRs.
    pub nets: Vec<String>,
}

/// `IPPool.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IpPoolSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.cidr`: the pool's CIDR.
    pub cidr: String,
    #[serde(default, rename = "vxlanMode", deserialize_with = "nullable")]
    /// `spec.vxlanMode`: `Never`, `Always` or `CrossSubnet`.
    pub vxlan_mode: String,
    #[serde(default, rename = "ipipMode", deserialize_with = "nullable")]
    /// `spec.ipipMode`: `Never`, `Always` or `CrossSubnet`.
    pub ipip_mode: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.natOutgoing`: masquerade traffic from the pool to outside all pools.
    pub nat_outgoing: bool,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.disabled`: no new addresses are allocated from the pool.
    pub disabled: bool,
    #[serde(default, rename = "disableBGPExport", deserialize_with = "nullable")]
    /// `spec.disableBGPExport`: do not advertise the pool over BGP.
    pub disable_bgp_export: bool,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.blockSize`: prefix length of the pool's allocation blocks.
    pub block_size: i64,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.nodeSelector`: nodes that allocate from the pool.
    pub node_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.namespaceSelector`: namespaces whose pods allocate from the pool.
    pub namespace_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.allowedUses`: `Workload` and/or `Tunnel`.
    pub allowed_uses: Vec<String>,
    #[serde(default)]
    /// `spec.assignmentMode`: `Automatic` or `Manual`.
    pub assignment_mode: Option<String>,
}

/// `Node.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default)]
    /// `spec.bgp`: the node's BGP settings and addresses.
    pub bgp: Option<NodeBgpSpec>,
    #[serde(default, rename = "ipv4VXLANTunnelAddr", deserialize_with = "nullable")]
    /// `spec.ipv4VXLANTunnelAddr`: the node's IPv4 VXLAN tunnel address.
    pub ipv4_vxlan_tunnel_addr: String,
    #[serde(default, rename = "vxlanTunnelMACAddr", deserialize_with = "nullable")]
    /// `spec.vxlanTunnelMACAddr`: MAC of the node's IPv4 VXLAN device.
    pub vxlan_tunnel_mac_addr: String,
    #[serde(default, rename = "ipv6VXLANTunnelAddr", deserialize_with = "nullable")]
    /// `spec.ipv6VXLANTunnelAddr`: the node's IPv6 VXLAN tunnel address.
    pub ipv6_vxlan_tunnel_addr: String,
    #[serde(
        default,
        rename = "vxlanTunnelMACAddrV6",
        deserialize_with = "nullable"
    )]
    /// `spec.vxlanTunnelMACAddrV6`: MAC of the node's IPv6 VXLAN device.
    pub vxlan_tunnel_mac_addr_v6: String,
    #[serde(default)]
    /// `spec.orchRefs`: accepted and ignored.
    pub orch_refs: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.wireguard`: the node's WireGuard interface addresses.
    pub wireguard: Option<NodeWireguardSpec>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.addresses`: the node's addresses.
    pub addresses: Vec<NodeAddress>,
    #[serde(default)]
    /// `spec.interfaces`: accepted and ignored.
    pub interfaces: Option<IgnoredAny>,
}

/// `Node.spec.wireguard`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeWireguardSpec {
    #[serde(
        default,
        rename = "interfaceIPv4Address",
        deserialize_with = "nullable"
    )]
    /// `interfaceIPv4Address`: the address of the node's IPv4 WireGuard interface.
    pub interface_ipv4_address: String,
    #[serde(
        default,
        rename = "interfaceIPv6Address",
        deserialize_with = "nullable"
    )]
    /// `interfaceIPv6Address`: the address of the node's IPv6 WireGuard interface.
    pub interface_ipv6_address: String,
}

/// `Node.spec.bgp`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeBgpSpec {
    #[serde(default, rename = "asNumber")]
    /// `asNumber`: the node's AS number.
    pub as_number: Option<IntOrString>,
    #[serde(default, rename = "ipv4Address", deserialize_with = "nullable")]
    /// `ipv4Address`: the node's IPv4 address and prefix length.
    pub ipv4_address: String,
    #[serde(default, rename = "ipv6Address", deserialize_with = "nullable")]
    /// `ipv6Address`: the node's IPv6 address and prefix length.
    pub ipv6_address: String,
    #[serde(default, rename = "ipv4IPIPTunnelAddr", deserialize_with = "nullable")]
    /// `ipv4IPIPTunnelAddr`: the node's IPIP tunnel address.
    pub ipv4_ipip_tunnel_addr: String,
    #[serde(
        default,
        rename = "routeReflectorClusterID",
        deserialize_with = "nullable"
    )]
    /// `routeReflectorClusterID`: cluster ID when the node is a route reflector.
    pub route_reflector_cluster_id: String,
}

/// `Node.spec.addresses` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddress {
    #[serde(default, deserialize_with = "nullable")]
    /// `address`: an address (or CIDR) of the node.
    pub address: String,
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    /// `type`: kind of address, e.g. `InternalIP`.
    pub addr_type: String,
}

/// `ClusterInformation.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterInformationSpec {
    #[serde(default, rename = "clusterGUID", deserialize_with = "nullable")]
    /// `spec.clusterGUID`: the cluster's unique ID.
    pub cluster_guid: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.clusterType`: comma-separated cluster type tags.
    pub cluster_type: String,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.calicoVersion`: Calico version of the cluster.
    pub calico_version: String,
    #[serde(default)]
    /// `spec.datastoreReady`: `false` tells Felix to wait before programming.
    pub datastore_ready: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.variant`: product variant, e.g. `Calico`.
    pub variant: String,
}

/// `IPAMBlock.spec`: only `cidr` and `affinity` are used; the allocation
/// bookkeeping fields are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IpamBlockSpec {
    #[serde(default, deserialize_with = "nullable")]
    /// `spec.cidr`: the block's CIDR.
    pub cidr: String,
    #[serde(default)]
    /// `spec.affinity`: `host:<node>` for a block affine to a node.
    pub affinity: Option<String>,
    #[serde(default)]
    /// `spec.affinityClaimTime`: accepted and ignored.
    pub affinity_claim_time: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.allocations`: accepted and ignored.
    pub allocations: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.unallocated`: accepted and ignored.
    pub unallocated: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.attributes`: accepted and ignored.
    pub attributes: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.sequenceNumber`: accepted and ignored.
    pub sequence_number: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.sequenceNumberForAllocation`: accepted and ignored.
    pub sequence_number_for_allocation: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.deleted`: accepted and ignored.
    pub deleted: Option<IgnoredAny>,
    #[serde(default)]
    /// `spec.strictAffinity`: accepted and ignored.
    pub strict_affinity: Option<IgnoredAny>,
}

/// Reads the next map value, treating `null` as the default.
pub(crate) fn nullable_value<'de, A, T>(map: &mut A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(map.next_value::<Option<T>>()?.unwrap_or_default())
}
