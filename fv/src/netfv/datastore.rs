//! A file datastore directory for `felix run --datastore file:DIR`, written
//! the way an operator (or `kubectl`) replaces files: a temporary file and a
//! rename, so the daemon's syncer never reads a half-written file. Plus the
//! YAML for the resources the FV uses.
//!
//! Invariant: the directory is removed when the [`Datastore`] drops.

use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The node name every FV daemon runs as.
pub const NODE: &str = "node1";

/// A datastore directory.
pub struct Datastore {
    dir: tempfile::TempDir,
}

impl Datastore {
    /// An empty datastore directory.
    pub fn new() -> Result<Datastore> {
        let dir = tempfile::Builder::new()
            .prefix("fvs2-ds-")
            .tempdir()
            .context("creating the datastore directory")?;
        fs::create_dir_all(dir.path().join("ds"))?;
        Ok(Datastore { dir })
    }

    /// The directory the daemon reads.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("ds")
    }

    /// A scratch directory next to the datastore (sockets, logs).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Writes (or replaces) `<name>.yaml` atomically.
    pub fn write(&self, name: &str, yaml: &str) -> Result<()> {
        let path = self.path().join(format!("{name}.yaml"));
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        fs::write(&tmp, yaml).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    }

    /// Removes `<name>.yaml` (no error if it is absent).
    pub fn remove(&self, name: &str) -> Result<()> {
        match fs::remove_file(self.path().join(format!("{name}.yaml"))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// Readiness and the `default` FelixConfiguration, whose spec gets the
/// `felix_config` lines verbatim (`key: value`); no pools, no nodes.
pub fn cluster_base_yaml(felix_config: &[(&str, &str)]) -> String {
    let mut s = String::from(
        "apiVersion: projectcalico.org/v3\nkind: ClusterInformation\nmetadata:\n  name: default\n\
         spec:\n  datastoreReady: true\n---\n\
         apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata:\n  name: default\nspec:\n\
         \x20 logSeverityScreen: Info\n",
    );
    for (k, v) in felix_config {
        let _ = writeln!(s, "  {k}: {v}");
    }
    s
}

/// A Calico `Node` resource as calico-node writes it: its BGP addresses
/// (address with the subnet's prefix length, e.g. `10.0.1.1/24`) and its
/// VXLAN tunnel addresses and MACs.
#[derive(Clone, Debug, Default)]
pub struct NodeRes {
    /// The node's name.
    pub name: String,
    /// `spec.bgp.ipv4Address` (`ADDR/LEN`).
    pub ipv4: Option<String>,
    /// `spec.bgp.ipv6Address` (`ADDR/LEN`).
    pub ipv6: Option<String>,
    /// `spec.ipv4VXLANTunnelAddr`.
    pub vxlan4: Option<Ipv4Addr>,
    /// `spec.ipv6VXLANTunnelAddr`.
    pub vxlan6: Option<Ipv6Addr>,
    /// `spec.vxlanTunnelMACAddr`.
    pub mac4: Option<String>,
    /// `spec.vxlanTunnelMACAddrV6`.
    pub mac6: Option<String>,
}

impl NodeRes {
    /// The resource's YAML.
    pub fn yaml(&self) -> String {
        let mut s = format!(
            "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: {}\nspec:\n  bgp:\n",
            self.name
        );
        if let Some(a) = &self.ipv4 {
            let _ = writeln!(s, "    ipv4Address: {a}");
        }
        if let Some(a) = &self.ipv6 {
            let _ = writeln!(s, "    ipv6Address: \"{a}\"");
        }
        if let Some(a) = self.vxlan4 {
            let _ = writeln!(s, "  ipv4VXLANTunnelAddr: {a}");
        }
        if let Some(a) = self.vxlan6 {
            let _ = writeln!(s, "  ipv6VXLANTunnelAddr: \"{a}\"");
        }
        if let Some(m) = &self.mac4 {
            let _ = writeln!(s, "  vxlanTunnelMACAddr: \"{m}\"");
        }
        if let Some(m) = &self.mac6 {
            let _ = writeln!(s, "  vxlanTunnelMACAddrV6: \"{m}\"");
        }
        s
    }
}

/// An `IPPool` named `name` over `cidr` with `vxlanMode` `vxlan_mode`
/// (`Always`, `CrossSubnet`, `Never`), `ipipMode: Never`, and the given
/// `blockSize` and `natOutgoing`.
pub fn ippool_yaml(name: &str, cidr: &str, block_size: u8, vxlan_mode: &str, nat: bool) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: {name}\nspec:\n  \
         cidr: \"{cidr}\"\n  blockSize: {block_size}\n  vxlanMode: {vxlan_mode}\n  ipipMode: Never\n  \
         natOutgoing: {nat}\n"
    )
}

/// An `IPAMBlock` over `cidr` with affinity `host:<node>` (none when `node`
/// is `None`); named as Calico names blocks (`10-65-1-0-26`).
pub fn ipam_block_yaml(cidr: &str, node: Option<&str>) -> String {
    let name = block_name(cidr);
    let mut s = format!(
        "apiVersion: projectcalico.org/v3\nkind: IPAMBlock\nmetadata:\n  name: {name}\nspec:\n  \
         cidr: \"{cidr}\"\n"
    );
    if let Some(n) = node {
        let _ = writeln!(s, "  affinity: \"host:{n}\"");
    }
    s
}

/// Calico's block name for `cidr`: `.`, `:` and `/` become `-`.
pub fn block_name(cidr: &str) -> String {
    cidr.replace(['.', ':', '/'], "-")
}

/// The cluster-wide resources: readiness, Felix configuration, IPv4 and
/// IPv6 pools and the node. `felix_config` lines are added to the
/// FelixConfiguration spec verbatim (`key: value`).
pub fn cluster_yaml(felix_config: &[(&str, &str)]) -> String {
    let mut s = String::from(
        "apiVersion: projectcalico.org/v3\nkind: ClusterInformation\nmetadata:\n  name: default\n\
         spec:\n  datastoreReady: true\n---\n\
         apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata:\n  name: default\nspec:\n\
         \x20 logSeverityScreen: Info\n",
    );
    for (k, v) in felix_config {
        let _ = writeln!(s, "  {k}: {v}");
    }
    let _ = write!(
        s,
        "---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: pool-v4\nspec:\n  \
         cidr: 10.65.0.0/16\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  \
         name: pool-v6\nspec:\n  cidr: fd00:65::/64\n---\napiVersion: projectcalico.org/v3\n\
         kind: Node\nmetadata:\n  name: {NODE}\nspec:\n  bgp:\n    ipv4Address: 192.0.2.1/24\n"
    );
    s
}

/// A Kubernetes namespace (becomes profile `kns.<name>`, which allows all
/// traffic, with `labels` as namespace labels).
pub fn namespace_yaml(name: &str, labels: &[(&str, &str)]) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {}\n",
        flow_map(labels)
    )
}

/// A workload endpoint (on [`NODE`] unless [`Wep::on`] says otherwise).
#[derive(Clone, Debug)]
pub struct Wep {
    /// Pod name; [`Fv::plug`](super::Fv::plug) also uses it as the
    /// workload's name in the sandbox.
    pub pod: String,
    /// Kubernetes namespace.
    pub namespace: String,
    /// Endpoint labels, in order.
    pub labels: Vec<(String, String)>,
    /// Host-side interface name (`cali...`).
    pub iface: String,
    /// IPv4 address (a /32 in `ipNetworks`).
    pub ip4: Ipv4Addr,
    /// IPv6 address (a /128 in `ipNetworks`).
    pub ip6: Ipv6Addr,
    /// Profile names (`kns.<namespace>` unless replaced).
    pub profiles: Vec<String>,
    /// Named ports: (name, TCP port).
    pub ports: Vec<(String, u16)>,
    /// The node the endpoint is on ([`NODE`] unless replaced).
    pub node: String,
}

impl Wep {
    /// A workload in `namespace` with profile `kns.<namespace>`.
    pub fn new(pod: &str, namespace: &str, iface: &str, ip4: Ipv4Addr, ip6: Ipv6Addr) -> Wep {
        Wep {
            pod: pod.into(),
            namespace: namespace.into(),
            labels: Vec::new(),
            iface: iface.into(),
            ip4,
            ip6,
            profiles: vec![format!("kns.{namespace}")],
            ports: Vec::new(),
            node: NODE.into(),
        }
    }

    /// Puts the endpoint on node `node`.
    pub fn on(mut self, node: &str) -> Wep {
        self.node = node.into();
        self
    }

    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Wep {
        self.labels.push((k.into(), v.into()));
        self
    }

    /// Adds a named TCP port.
    pub fn port(mut self, name: &str, port: u16) -> Wep {
        self.ports.push((name.into(), port));
        self
    }

    /// Replaces the profiles.
    pub fn profiles(mut self, profiles: &[&str]) -> Wep {
        self.profiles = profiles.iter().map(|p| p.to_string()).collect();
        self
    }

    /// The WorkloadEndpoint resource.
    pub fn yaml(&self) -> String {
        let labels: Vec<(&str, &str)> = self
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut s = format!(
            "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata:\n  \
             name: {node}-k8s-{pod}-eth0\n  namespace: {ns}\n  labels: {labels}\nspec:\n  \
             node: {node}\n  orchestrator: k8s\n  pod: {pod}\n  endpoint: eth0\n  \
             interfaceName: {iface}\n  mac: ee:ee:ee:ee:ee:ee\n  \
             ipNetworks: [{ip4}/32, \"{ip6}/128\"]\n  profiles: [{profiles}]\n",
            pod = self.pod,
            node = self.node,
            ns = self.namespace,
            labels = flow_map(&labels),
            iface = self.iface,
            ip4 = self.ip4,
            ip6 = self.ip6,
            profiles = self.profiles.join(", "),
        );
        if !self.ports.is_empty() {
            s.push_str("  ports:\n");
            for (n, p) in &self.ports {
                let _ = writeln!(s, "  - {{name: {n}, protocol: TCP, port: {p}}}");
            }
        }
        s
    }
}

/// `{k: 'v', ...}` in YAML flow style.
fn flow_map(kv: &[(&str, &str)]) -> String {
    let inner: Vec<String> = kv.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// Joins YAML documents with `---`.
pub fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}
