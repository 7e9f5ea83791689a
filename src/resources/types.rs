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
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub generate_name: String,
    #[serde(default)]
    pub uid: Option<IgnoredAny>,
    #[serde(default)]
    pub resource_version: Option<IgnoredAny>,
    #[serde(default)]
    pub creation_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    pub deletion_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    pub deletion_grace_period_seconds: Option<IgnoredAny>,
    #[serde(default)]
    pub generation: Option<IgnoredAny>,
    #[serde(default)]
    pub finalizers: Option<IgnoredAny>,
    #[serde(default)]
    pub owner_references: Option<IgnoredAny>,
    #[serde(default)]
    pub managed_fields: Option<IgnoredAny>,
    #[serde(default)]
    pub self_link: Option<IgnoredAny>,
}

/// A value written either as an integer or as a string (ports, protocols,
/// AS numbers, DSCP values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntOrString {
    Int(i64),
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
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Dyn>),
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
    pub action: String,
    #[serde(default)]
    pub ip_version: Option<i64>,
    #[serde(default)]
    pub protocol: Option<IntOrString>,
    #[serde(default)]
    pub icmp: Option<IcmpFields>,
    #[serde(default)]
    pub not_protocol: Option<IntOrString>,
    #[serde(default, rename = "notICMP")]
    pub not_icmp: Option<IcmpFields>,
    #[serde(default, deserialize_with = "nullable")]
    pub source: EntityRule,
    #[serde(default, deserialize_with = "nullable")]
    pub destination: EntityRule,
    #[serde(default)]
    pub http: Option<HttpMatch>,
    #[serde(default)]
    pub metadata: Option<RuleMetadata>,
}

/// `icmp` / `notICMP`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcmpFields {
    #[serde(default, rename = "type")]
    pub icmp_type: Option<i64>,
    #[serde(default)]
    pub code: Option<i64>,
}

/// `source` / `destination` of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EntityRule {
    #[serde(default, deserialize_with = "nullable")]
    pub nets: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace_selector: String,
    #[serde(default)]
    pub services: Option<ServiceMatch>,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<IntOrString>,
    #[serde(default, deserialize_with = "nullable")]
    pub not_nets: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub not_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub not_ports: Vec<IntOrString>,
    #[serde(default)]
    pub service_accounts: Option<ServiceAccountMatch>,
}

/// `services` of an entity rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceMatch {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
}

/// `serviceAccounts` of an entity rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccountMatch {
    #[serde(default, deserialize_with = "nullable")]
    pub names: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub selector: String,
}

/// `http` match of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpMatch {
    #[serde(default, deserialize_with = "nullable")]
    pub methods: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub paths: Vec<HttpPath>,
}

/// One `http.paths` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPath {
    #[serde(default, deserialize_with = "nullable")]
    pub exact: String,
    #[serde(default, deserialize_with = "nullable")]
    pub prefix: String,
}

/// Rule `metadata`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMetadata {
    #[serde(default, deserialize_with = "nullable")]
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
    pub tier: String,
    #[serde(default)]
    pub order: Option<f64>,
    #[serde(default, deserialize_with = "nullable")]
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub types: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub service_account_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub performance_hints: Vec<String>,
}

/// `GlobalNetworkPolicy.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GlobalNetworkPolicySpec {
    #[serde(default, deserialize_with = "nullable")]
    pub tier: String,
    #[serde(default)]
    pub order: Option<f64>,
    #[serde(default, deserialize_with = "nullable")]
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub types: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub do_not_track: bool,
    #[serde(default, rename = "preDNAT", deserialize_with = "nullable")]
    pub pre_dnat: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub apply_on_forward: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub service_account_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub performance_hints: Vec<String>,
}

/// `Tier.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TierSpec {
    #[serde(default)]
    pub order: Option<f64>,
    #[serde(default)]
    pub default_action: Option<String>,
}

/// `Profile.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProfileSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub ingress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub egress: Vec<Rule>,
    #[serde(default, deserialize_with = "nullable")]
    pub labels_to_apply: BTreeMap<String, String>,
}

/// `WorkloadEndpoint.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadEndpointSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub orchestrator: String,
    #[serde(default, deserialize_with = "nullable")]
    pub workload: String,
    #[serde(default, deserialize_with = "nullable")]
    pub node: String,
    #[serde(default, rename = "containerID", deserialize_with = "nullable")]
    pub container_id: String,
    #[serde(default, deserialize_with = "nullable")]
    pub pod: String,
    #[serde(default, deserialize_with = "nullable")]
    pub endpoint: String,
    #[serde(default, deserialize_with = "nullable")]
    pub service_account_name: String,
    #[serde(default, rename = "ipNetworks", deserialize_with = "nullable")]
    pub ip_networks: Vec<String>,
    #[serde(default, rename = "ipNATs", deserialize_with = "nullable")]
    pub ip_nats: Vec<IpNat>,
    #[serde(default, rename = "ipv4Gateway", deserialize_with = "nullable")]
    pub ipv4_gateway: String,
    #[serde(default, rename = "ipv6Gateway", deserialize_with = "nullable")]
    pub ipv6_gateway: String,
    #[serde(default, deserialize_with = "nullable")]
    pub profiles: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub interface_name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub mac: String,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<WorkloadEndpointPort>,
    #[serde(default, deserialize_with = "nullable")]
    pub allow_spoofed_source_prefixes: Vec<String>,
    #[serde(default)]
    pub qos_controls: Option<IgnoredAny>,
}

/// `ipNATs` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpNat {
    #[serde(default, rename = "internalIP", deserialize_with = "nullable")]
    pub internal_ip: String,
    #[serde(default, rename = "externalIP", deserialize_with = "nullable")]
    pub external_ip: String,
}

/// Workload endpoint `ports` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadEndpointPort {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    pub protocol: IntOrString,
    #[serde(default, deserialize_with = "nullable")]
    pub port: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub host_port: i64,
    #[serde(default, rename = "hostIP", deserialize_with = "nullable")]
    pub host_ip: String,
}

/// `HostEndpoint.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostEndpointSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub node: String,
    #[serde(default, deserialize_with = "nullable")]
    pub interface_name: String,
    #[serde(default, rename = "expectedIPs", deserialize_with = "nullable")]
    pub expected_ips: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub profiles: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<EndpointPort>,
}

/// Host endpoint `ports` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPort {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    pub protocol: IntOrString,
    #[serde(default, deserialize_with = "nullable")]
    pub port: i64,
}

/// `GlobalNetworkSet.spec` and `NetworkSet.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSetSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub nets: Vec<String>,
}

/// `IPPool.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IpPoolSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub cidr: String,
    #[serde(default, rename = "vxlanMode", deserialize_with = "nullable")]
    pub vxlan_mode: String,
    #[serde(default, rename = "ipipMode", deserialize_with = "nullable")]
    pub ipip_mode: String,
    #[serde(default, deserialize_with = "nullable")]
    pub nat_outgoing: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub disabled: bool,
    #[serde(default, rename = "disableBGPExport", deserialize_with = "nullable")]
    pub disable_bgp_export: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub block_size: i64,
    #[serde(default, deserialize_with = "nullable")]
    pub node_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace_selector: String,
    #[serde(default, deserialize_with = "nullable")]
    pub allowed_uses: Vec<String>,
    #[serde(default)]
    pub assignment_mode: Option<String>,
}

/// `Node.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default)]
    pub bgp: Option<NodeBgpSpec>,
    #[serde(default, rename = "ipv4VXLANTunnelAddr", deserialize_with = "nullable")]
    pub ipv4_vxlan_tunnel_addr: String,
    #[serde(default, rename = "vxlanTunnelMACAddr", deserialize_with = "nullable")]
    pub vxlan_tunnel_mac_addr: String,
    #[serde(default, rename = "ipv6VXLANTunnelAddr", deserialize_with = "nullable")]
    pub ipv6_vxlan_tunnel_addr: String,
    #[serde(
        default,
        rename = "vxlanTunnelMACAddrV6",
        deserialize_with = "nullable"
    )]
    pub vxlan_tunnel_mac_addr_v6: String,
    #[serde(default)]
    pub orch_refs: Option<IgnoredAny>,
    #[serde(default)]
    pub wireguard: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "nullable")]
    pub addresses: Vec<NodeAddress>,
    #[serde(default)]
    pub interfaces: Option<IgnoredAny>,
}

/// `Node.spec.bgp`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeBgpSpec {
    #[serde(default, rename = "asNumber")]
    pub as_number: Option<IntOrString>,
    #[serde(default, rename = "ipv4Address", deserialize_with = "nullable")]
    pub ipv4_address: String,
    #[serde(default, rename = "ipv6Address", deserialize_with = "nullable")]
    pub ipv6_address: String,
    #[serde(default, rename = "ipv4IPIPTunnelAddr", deserialize_with = "nullable")]
    pub ipv4_ipip_tunnel_addr: String,
    #[serde(
        default,
        rename = "routeReflectorClusterID",
        deserialize_with = "nullable"
    )]
    pub route_reflector_cluster_id: String,
}

/// `Node.spec.addresses` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddress {
    #[serde(default, deserialize_with = "nullable")]
    pub address: String,
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    pub addr_type: String,
}

/// `ClusterInformation.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterInformationSpec {
    #[serde(default, rename = "clusterGUID", deserialize_with = "nullable")]
    pub cluster_guid: String,
    #[serde(default, deserialize_with = "nullable")]
    pub cluster_type: String,
    #[serde(default, deserialize_with = "nullable")]
    pub calico_version: String,
    #[serde(default)]
    pub datastore_ready: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub variant: String,
}

/// `IPAMBlock.spec`: only `cidr` and `affinity` are used; the allocation
/// bookkeeping fields are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IpamBlockSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub cidr: String,
    #[serde(default)]
    pub affinity: Option<String>,
    #[serde(default)]
    pub affinity_claim_time: Option<IgnoredAny>,
    #[serde(default)]
    pub allocations: Option<IgnoredAny>,
    #[serde(default)]
    pub unallocated: Option<IgnoredAny>,
    #[serde(default)]
    pub attributes: Option<IgnoredAny>,
    #[serde(default)]
    pub sequence_number: Option<IgnoredAny>,
    #[serde(default)]
    pub sequence_number_for_allocation: Option<IgnoredAny>,
    #[serde(default)]
    pub deleted: Option<IgnoredAny>,
    #[serde(default)]
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
