//! The etcd key layout, as upstream's etcdv3 backend lays it out.
//!
//! | kind | key |
//! |---|---|
//! | cluster-scoped Calico v3 kinds | `/calico/resources/v3/projectcalico.org/<plural>/<name>` |
//! | namespaced Calico v3 kinds (`NetworkPolicy`, `NetworkSet`, `WorkloadEndpoint`) | `/calico/resources/v3/projectcalico.org/<plural>/<namespace>/<name>` |
//! | `IPAMBlock` | `/calico/ipam/v2/assignment/ipv4/block/<cidr, '/' as '-'>` (or `ipv6`), value: upstream's `AllocationBlock` JSON |
//! | Kubernetes `Namespace` | `/calico/resources/v3/kubernetes/namespaces/<name>` |
//! | Kubernetes `ServiceAccount` | `/calico/resources/v3/kubernetes/serviceaccounts/<namespace>/<name>` |
//!
//! The plurals are upstream's (`globalnetworkpolicies`, `networkpolicies`,
//! `tiers`, `profiles`, `workloadendpoints`, `hostendpoints`,
//! `globalnetworksets`, `networksets`, `ippools`, `nodes`,
//! `felixconfigurations`, `clusterinformations`).
//!
//! Upstream's etcd mode has no Kubernetes objects at all (namespaces and
//! service accounts only exist with the Kubernetes datastore).  The two
//! `kubernetes/` paths are a felix-rs extension so that an etcd-backed
//! cluster can carry the same `Namespace` / `ServiceAccount` documents as
//! the file datastore; upstream components never read them and calicoctl
//! never writes them, so they cannot collide with anything upstream stores.

use ipnet::IpNet;

use crate::resources::{Kind, ResourceId};

/// Prefix of every Calico v3 resource key.
pub const RESOURCES_PREFIX: &str = "/calico/resources/v3/projectcalico.org/";
/// Prefix of the felix-rs extension keys for Kubernetes kinds.
pub const KUBERNETES_PREFIX: &str = "/calico/resources/v3/kubernetes/";
/// Prefix of the IPAM assignment tree (blocks live below it).
pub const IPAM_PREFIX: &str = "/calico/ipam/v2/assignment/";
/// Everything the syncer reads lives under one of these prefixes.
pub const SYNC_PREFIXES: [&str; 2] = ["/calico/resources/v3/", IPAM_PREFIX];
/// The prefix the syncer watches (covers [`SYNC_PREFIXES`]).
pub const WATCH_PREFIX: &str = "/calico/";

/// Upstream's plural (the key path segment) for a kind.
pub fn plural(kind: Kind) -> &'static str {
    match kind {
        Kind::GlobalNetworkPolicy => "globalnetworkpolicies",
        Kind::NetworkPolicy => "networkpolicies",
        Kind::Tier => "tiers",
        Kind::Profile => "profiles",
        Kind::WorkloadEndpoint => "workloadendpoints",
        Kind::HostEndpoint => "hostendpoints",
        Kind::GlobalNetworkSet => "globalnetworksets",
        Kind::NetworkSet => "networksets",
        Kind::IPPool => "ippools",
        Kind::Node => "nodes",
        Kind::FelixConfiguration => "felixconfigurations",
        Kind::ClusterInformation => "clusterinformations",
        Kind::IPAMBlock => "ipamblocks",
        Kind::Namespace => "namespaces",
        Kind::ServiceAccount => "serviceaccounts",
    }
}

/// The prefix under which every resource of `kind` is stored.  For
/// `IPAMBlock` this is the whole assignment tree (blocks are told apart by
/// [`parse_key`]).
pub fn kind_prefix(kind: Kind) -> String {
    match kind {
        Kind::IPAMBlock => IPAM_PREFIX.to_owned(),
        Kind::Namespace | Kind::ServiceAccount => {
            format!("{KUBERNETES_PREFIX}{}/", plural(kind))
        }
        _ => format!("{RESOURCES_PREFIX}{}/", plural(kind)),
    }
}

/// The key of a resource other than an `IPAMBlock` (see [`block_key`]).
/// `namespace` is used only for namespaced kinds.
pub fn resource_key(kind: Kind, namespace: Option<&str>, name: &str) -> String {
    let prefix = kind_prefix(kind);
    match namespace {
        Some(ns) if kind.is_namespaced() => format!("{prefix}{ns}/{name}"),
        _ => format!("{prefix}{name}"),
    }
}

/// The key of the IPAM block for `cidr` (host bits cleared first).
pub fn block_key(cidr: IpNet) -> String {
    let cidr = cidr.trunc();
    let version = match cidr {
        IpNet::V4(_) => 4,
        IpNet::V6(_) => 6,
    };
    format!(
        "{IPAM_PREFIX}ipv{version}/block/{}",
        cidr.to_string().replacen('/', "-", 1)
    )
}

/// The CIDR named by the last segment of a block key (`10.0.0.0-26`).
pub fn block_cidr(segment: &str) -> Option<IpNet> {
    let (addr, len) = segment.rsplit_once('-')?;
    format!("{addr}/{len}").parse().ok()
}

/// What a key names, or `None` for keys outside the layout (other upstream
/// kinds such as BGP peers, IPAM handles and affinities, Felix status
/// reports...), which the syncer ignores.  For an `IPAMBlock` the name is
/// the key's last segment (`10.0.0.0-26`).
pub fn parse_key(key: &str) -> Option<ResourceId> {
    if let Some(rest) = key.strip_prefix(RESOURCES_PREFIX) {
        let (plural_seg, rest) = rest.split_once('/')?;
        let kind = kind_for_plural(plural_seg, false)?;
        return split_identity(kind, rest);
    }
    if let Some(rest) = key.strip_prefix(KUBERNETES_PREFIX) {
        let (plural_seg, rest) = rest.split_once('/')?;
        let kind = kind_for_plural(plural_seg, true)?;
        return split_identity(kind, rest);
    }
    if let Some(rest) = key.strip_prefix(IPAM_PREFIX) {
        let segment = rest
            .strip_prefix("ipv4/block/")
            .or_else(|| rest.strip_prefix("ipv6/block/"))?;
        if segment.is_empty() || segment.contains('/') {
            return None;
        }
        return Some(ResourceId {
            kind: Kind::IPAMBlock,
            namespace: None,
            name: segment.to_owned(),
        });
    }
    None
}

fn kind_for_plural(segment: &str, kubernetes: bool) -> Option<Kind> {
    Kind::ALL.iter().copied().find(|k| {
        let k8s_kind = matches!(k, Kind::Namespace | Kind::ServiceAccount);
        *k != Kind::IPAMBlock && k8s_kind == kubernetes && plural(*k) == segment
    })
}

fn split_identity(kind: Kind, rest: &str) -> Option<ResourceId> {
    if kind.is_namespaced() {
        let (ns, name) = rest.split_once('/')?;
        if ns.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(ResourceId {
            kind,
            namespace: Some(ns.to_owned()),
            name: name.to_owned(),
        })
    } else {
        if rest.is_empty() || rest.contains('/') {
            return None;
        }
        Some(ResourceId {
            kind,
            namespace: None,
            name: rest.to_owned(),
        })
    }
}

/// A kind named on a command line: the kind (`GlobalNetworkPolicy`), its
/// plural or singular in any case, or calicoctl's short names.
pub fn kind_from_cli(name: &str) -> Option<Kind> {
    let lower = name.to_ascii_lowercase();
    let alias = match lower.as_str() {
        "gnp" | "gnps" => Some(Kind::GlobalNetworkPolicy),
        "np" | "nps" | "netpol" | "policy" | "policies" => Some(Kind::NetworkPolicy),
        "wep" | "weps" => Some(Kind::WorkloadEndpoint),
        "hep" | "heps" => Some(Kind::HostEndpoint),
        "gns" | "globalnetset" | "globalnetsets" => Some(Kind::GlobalNetworkSet),
        "netset" | "netsets" => Some(Kind::NetworkSet),
        "ippool" | "pool" | "pools" => Some(Kind::IPPool),
        "felixconfig" | "felixconfigs" => Some(Kind::FelixConfiguration),
        "clusterinfo" => Some(Kind::ClusterInformation),
        "ns" => Some(Kind::Namespace),
        "sa" => Some(Kind::ServiceAccount),
        _ => None,
    };
    alias.or_else(|| {
        Kind::ALL.iter().copied().find(|k| {
            let kind_lower = k.as_str().to_ascii_lowercase();
            lower == kind_lower || lower == plural(*k)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_upstream_layout() {
        assert_eq!(
            resource_key(Kind::GlobalNetworkPolicy, None, "allow-dns"),
            "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/allow-dns"
        );
        assert_eq!(
            resource_key(Kind::WorkloadEndpoint, Some("ns1"), "node1-k8s-pod-eth0"),
            "/calico/resources/v3/projectcalico.org/workloadendpoints/ns1/node1-k8s-pod-eth0"
        );
        // A namespace given for a cluster-scoped kind is not part of the key.
        assert_eq!(
            resource_key(Kind::Tier, Some("x"), "t"),
            "/calico/resources/v3/projectcalico.org/tiers/t"
        );
        assert_eq!(
            block_key("10.0.0.5/26".parse().unwrap()),
            "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26"
        );
        assert_eq!(
            block_key("fd00::/122".parse().unwrap()),
            "/calico/ipam/v2/assignment/ipv6/block/fd00::-122"
        );
    }

    #[test]
    fn every_kind_round_trips_through_its_key() {
        for kind in Kind::ALL {
            let (key, expect_name) = if kind == Kind::IPAMBlock {
                (
                    block_key("192.168.1.0/26".parse().unwrap()),
                    "192.168.1.0-26".to_string(),
                )
            } else {
                (resource_key(kind, Some("ns"), "n.a-me"), "n.a-me".into())
            };
            let id = parse_key(&key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!(id.kind, kind, "{key}");
            assert_eq!(id.name, expect_name);
            assert_eq!(
                id.namespace.as_deref(),
                kind.is_namespaced().then_some("ns")
            );
            assert!(key.starts_with(&kind_prefix(kind)));
            assert!(SYNC_PREFIXES.iter().any(|p| key.starts_with(p)));
        }
        assert_eq!(
            block_cidr("fd00::-122"),
            Some("fd00::/122".parse().unwrap())
        );
    }

    #[test]
    fn foreign_and_malformed_keys_are_ignored() {
        for key in [
            "/calico/resources/v3/projectcalico.org/bgppeers/p1",
            "/calico/resources/v3/projectcalico.org/tiers/",
            "/calico/resources/v3/projectcalico.org/tiers/a/b",
            "/calico/resources/v3/projectcalico.org/networkpolicies/onlyname",
            "/calico/resources/v3/projectcalico.org/ipamblocks/x",
            "/calico/resources/v3/kubernetes/tiers/x",
            "/calico/resources/v3/projectcalico.org/namespaces/x",
            "/calico/ipam/v2/assignment/ipv4/handle/h",
            "/calico/ipam/v2/handle/x",
            "/calico/felix/v2/no-region/host/h/status",
            "/other",
        ] {
            assert_eq!(parse_key(key), None, "{key}");
        }
    }

    #[test]
    fn cli_kind_names() {
        assert_eq!(kind_from_cli("gnp"), Some(Kind::GlobalNetworkPolicy));
        assert_eq!(
            kind_from_cli("GlobalNetworkPolicies"),
            Some(Kind::GlobalNetworkPolicy)
        );
        assert_eq!(
            kind_from_cli("workloadendpoint"),
            Some(Kind::WorkloadEndpoint)
        );
        assert_eq!(kind_from_cli("IPAMBlocks"), Some(Kind::IPAMBlock));
        assert_eq!(kind_from_cli("frob"), None);
    }
}
