//! Pass-through nodes: cluster-wide state the dataplane needs more or less
//! as stored (host metadata from nodes, IPAM pools, Kubernetes namespaces
//! and service accounts), plus the encapsulation resolver.
//!
//! Invariants:
//! * Each update is compared with the last one passed for the same object;
//!   unchanged values are not re-sent.
//! * The encapsulation is emitted at the first in-sync and after every pool
//!   change from then on, as upstream does (a change of encapsulation makes
//!   `felix run` restart).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use felix_proto as pb;
use ipnet::IpNet;

use super::event_sequencer::{EventSequencer, HostInfo};
use crate::hash::FastMap as HashMap;
use crate::model::{EncapMode, IpPool, Node};

/// Encapsulation state derived from the IP pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Encap {
    /// Some pool uses IP-in-IP.
    pub ipip: bool,
    /// Some IPv4 pool uses VXLAN.
    pub vxlan: bool,
    /// Some IPv6 pool uses VXLAN.
    pub vxlan_v6: bool,
    /// Some pool uses no encapsulation.
    pub no_encap: bool,
}

impl Encap {
    /// The dataplane message for this state.
    pub fn to_proto(self) -> pb::Encapsulation {
        pb::Encapsulation {
            ipip_enabled: self.ipip,
            vxlan_enabled: self.vxlan,
            vxlan_enabled_v6: self.vxlan_v6,
            no_encap_enabled: self.no_encap,
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct Passthru {
    hosts: HashMap<String, HostInfo>,
    pools: BTreeMap<String, (bool, bool, bool)>,
    in_sync: bool,
}

/// The dataplane's ID for a pool: its CIDR with `/` replaced by `-`.
pub fn pool_id(cidr: &IpNet) -> String {
    cidr.to_string().replacen('/', "-", 1)
}

/// The encapsulation mode string the dataplane expects (`""`, `always`,
/// `cross-subnet`).
pub fn encap_mode_str(m: EncapMode) -> &'static str {
    match m {
        EncapMode::Never => "",
        EncapMode::Always => "always",
        EncapMode::CrossSubnet => "cross-subnet",
    }
}

fn node_address(node: &Node, v6: bool) -> String {
    let bgp = if v6 {
        node.ipv6_address
    } else {
        node.ipv4_address
    };
    if let Some(n) = bgp {
        return n.to_string();
    }
    for a in &node.addresses {
        let parsed: Option<IpNet> = a
            .parse::<IpNet>()
            .ok()
            .or_else(|| a.parse::<IpAddr>().ok().map(IpNet::from));
        if let Some(n) = parsed {
            if matches!(n, IpNet::V6(_)) == v6 {
                return n.to_string();
            }
        }
    }
    String::new()
}

/// Prefix of the profiles that stand for Kubernetes namespaces.
pub const NAMESPACE_PROFILE_PREFIX: &str = "kns.";
/// Prefix of the profiles that stand for Kubernetes service accounts.
pub const SERVICE_ACCOUNT_PROFILE_PREFIX: &str = "ksa.";
/// Label prefix of namespace labels applied through a `kns.` profile.
pub const NAMESPACE_LABEL_PREFIX: &str = "pcns.";
/// Label prefix of service-account labels applied through a `ksa.` profile.
pub const SERVICE_ACCOUNT_LABEL_PREFIX: &str = "pcsa.";

/// What a profile name stands for (upstream's profile decoder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileClass {
    /// `kns.<namespace>`: the profile of a namespace.
    Namespace(String),
    /// `ksa.<namespace>.<name>`: the profile of a service account.
    ServiceAccount {
        /// The service account's namespace.
        namespace: String,
        /// The service account's name.
        name: String,
    },
    /// Any other profile.
    Other,
}

/// The profile that stands for namespace `ns` (inverse of
/// [`classify_profile`]).
pub fn namespace_profile(ns: &str) -> String {
    format!("{NAMESPACE_PROFILE_PREFIX}{ns}")
}

/// The profile that stands for service account `name` in `namespace`
/// (inverse of [`classify_profile`]: the namespace part ends at the first
/// dot, and a namespace name never contains one).
pub fn service_account_profile(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PROFILE_PREFIX}{namespace}.{name}")
}

/// Classifies a profile name: `ksa.<ns>.<sa>` is a service account,
/// `kns.<ns>` a namespace.
pub fn classify_profile(name: &str) -> ProfileClass {
    if let Some(rest) = name.strip_prefix(SERVICE_ACCOUNT_PROFILE_PREFIX) {
        if let Some((ns, sa)) = rest.split_once('.') {
            if !ns.is_empty() && !sa.is_empty() {
                return ProfileClass::ServiceAccount {
                    namespace: ns.to_string(),
                    name: sa.to_string(),
                };
            }
        }
        return ProfileClass::Other;
    }
    if let Some(ns) = name.strip_prefix(NAMESPACE_PROFILE_PREFIX) {
        if !ns.is_empty() {
            return ProfileClass::Namespace(ns.to_string());
        }
    }
    ProfileClass::Other
}

/// A profile's labels as its namespace or service account carries them:
/// `prefix` removed from the keys that have it.
pub fn strip_label_prefix<'a>(
    prefix: &str,
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    labels
        .into_iter()
        .map(|(k, v)| {
            (
                k.strip_prefix(prefix).unwrap_or(k).to_string(),
                v.to_string(),
            )
        })
        .collect()
}

impl Passthru {
    /// A passthru with no hosts or pools, not yet in sync.
    pub fn new() -> Self {
        Self::default()
    }

    /// The profile decoder: `kns.` / `ksa.` profiles become namespace and
    /// service-account updates.  This is the only source of those messages
    /// (the model's `Namespace` / `ServiceAccount` keys are not needed for
    /// them).  Their labels, with the `pcns.` / `pcsa.` prefixes removed,
    /// are read from the label index when the sequencer flushes (see
    /// [`namespace_profile`]).
    pub fn on_profile(&mut self, name: &str, present: bool, seq: &mut EventSequencer) {
        match classify_profile(name) {
            ProfileClass::Namespace(ns) => seq.on_namespace_update(&ns, present),
            ProfileClass::ServiceAccount { namespace, name } => {
                seq.on_service_account_update(&namespace, &name, present)
            }
            ProfileClass::Other => {}
        }
    }

    /// A node changed: emits its host metadata when it differs from what was sent.
    pub fn on_node(&mut self, name: &str, node: Option<&Node>, seq: &mut EventSequencer) {
        match node {
            None => {
                if self.hosts.remove(name).is_some() {
                    seq.on_host_update(name, None);
                }
            }
            Some(n) => {
                let info = HostInfo {
                    ipv4_addr: node_address(n, false),
                    ipv6_addr: node_address(n, true),
                    asnumber: n.as_number.clone().unwrap_or_default(),
                    labels: n
                        .labels
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                };
                if self.hosts.get(name) == Some(&info) {
                    return;
                }
                self.hosts.insert(name.to_string(), info.clone());
                seq.on_host_update(name, Some(info));
            }
        }
    }

    /// An IP pool changed: emits the pool and, once in sync, the encapsulation.
    pub fn on_pool(&mut self, cidr: &IpNet, pool: Option<&IpPool>, seq: &mut EventSequencer) {
        let id = pool_id(cidr);
        match pool {
            None => {
                self.pools.remove(&id);
                seq.on_pool_update(&id, None);
            }
            Some(p) => {
                let ipip = p.ipip_mode != EncapMode::Never;
                let vxlan = p.vxlan_mode != EncapMode::Never;
                self.pools
                    .insert(id.clone(), (ipip, vxlan, matches!(cidr, IpNet::V6(_))));
                seq.on_pool_update(
                    &id,
                    Some(pb::IpamPool {
                        cidr: cidr.to_string(),
                        masquerade: p.masquerade,
                        ipip_mode: encap_mode_str(p.ipip_mode).to_string(),
                        vxlan_mode: encap_mode_str(p.vxlan_mode).to_string(),
                        allowed_uses: p.allowed_uses.clone(),
                    }),
                );
            }
        }
        if self.in_sync {
            seq.on_encap_update(self.encap().to_proto());
        }
    }

    /// The datastore is in sync: emits the encapsulation the first time.
    pub fn on_in_sync(&mut self, seq: &mut EventSequencer) {
        if !self.in_sync {
            self.in_sync = true;
            seq.on_encap_update(self.encap().to_proto());
        }
    }

    /// The current encapsulation.
    pub fn encap(&self) -> Encap {
        let mut e = Encap::default();
        for (ipip, vxlan, v6) in self.pools.values() {
            if *ipip {
                e.ipip = true;
            }
            if *vxlan {
                if *v6 {
                    e.vxlan_v6 = true;
                } else {
                    e.vxlan = true;
                }
            }
            if !*ipip && !*vxlan {
                e.no_encap = true;
            }
        }
        e
    }

    /// Names of the hosts with metadata (for tests).
    pub fn host_names(&self) -> BTreeSet<String> {
        self.hosts.keys().cloned().collect()
    }
}
