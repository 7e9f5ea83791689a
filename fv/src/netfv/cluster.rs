//! A three-node cluster in network namespaces, each node running its own
//! `felix run` on one shared datastore (a file datastore directory, or a
//! real etcd server that every node reaches over the fabric).
//!
//! ```text
//!            router (br1 10.0.1.254/24 fd00:1::fe/64, r3 10.0.2.254/24 fd00:2::fe/64)
//!         br1: r1, r2                       r3
//!            |      |                        |
//!  node1 eth0 10.0.1.1   node2 eth0 10.0.1.2   node3 eth0 10.0.2.3
//!        fd00:1::1/64          fd00:1::2/64          fd00:2::3/64
//!  block 10.65.1.0/26    block 10.65.2.0/26    block 10.65.3.0/26
//!        fd00:65:1::/122       fd00:65:2::/122       fd00:65:3::/122
//!  pods n1a .10, n1b .11 n2a, n2b               n3a, n3b
//! ```
//!
//! node1 and node2 share subnet 10.0.1.0/24 (a bridge in the router
//! namespace), node3 is on 10.0.2.0/24 behind the router. Every node has
//! `ip_forward` on and a default route via the router, and two workloads
//! wired as Calico's CNI plugin wires them
//! ([`plug_workload`](super::sandbox::plug_workload)), labelled
//! `node: nN`, `role: a|b`, in Kubernetes namespace [`POD_NAMESPACE`]
//! (profile `kns.demo` allows everything).
//!
//! The router sees every packet a node sends, which is what
//! [`Cluster::path`] uses to tell encapsulated traffic (UDP 4789 between
//! node addresses) from direct traffic (pod addresses on the wire): an
//! nftables `netdev` ingress counter on the router's port of each node.
//!
//! Invariant: every namespace is named `fvc-<pid>-<n>-...`, every felix and
//! etcd process is killed, and all namespaces and files are removed when
//! the [`Cluster`] drops, also on panic.

use std::collections::BTreeMap;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};

use super::daemon::{felix_binary, Backend, Daemon};
use super::datastore::{
    cluster_base_yaml, docs, ipam_block_yaml, ippool_yaml, namespace_yaml, Datastore, NodeRes, Wep,
};
use super::sandbox::{expect_until, mismatches_with, plug_workload, Check, Workload, WorkloadSpec};
use super::traffic::{probe_peer, Conn};
use super::wait::poll;
use felix_netns::Netns;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The Kubernetes namespace of every cluster workload.
pub const POD_NAMESPACE: &str = "demo";

/// Ports every cluster workload serves.
pub const PORTS: [u16; 2] = [8080, 9090];

/// The IPv4 pool's CIDR (blocks are /26).
pub const POOL_V4: &str = "10.65.0.0/16";

/// The IPv6 pool's CIDR (blocks are /122).
pub const POOL_V6: &str = "fd00:65::/32";

/// The VXLAN device felix creates for IPv4.
pub const VXLAN_V4: &str = "vxlan.calico";

/// The VXLAN device felix creates for IPv6.
pub const VXLAN_V6: &str = "vxlan-v6.calico";

/// The VXLAN UDP port.
pub const VXLAN_PORT: u16 = 4789;

/// The etcd client port in the router namespace.
pub const ETCD_PORT: u16 = 2379;

/// How a cluster is built.
#[derive(Clone, Debug)]
pub struct ClusterOpts {
    /// The dataplane backend of every node.
    pub backend: Backend,
    /// Extra FelixConfiguration `default` spec lines (`key`, `value`).
    pub felix_config: Vec<(String, String)>,
    /// `vxlanMode` of the IPv4 pool.
    pub vxlan_v4: String,
    /// `vxlanMode` of the IPv6 pool.
    pub vxlan_v6: String,
    /// Use a real etcd server (in the router namespace) instead of a file
    /// datastore directory.
    pub etcd: bool,
}

impl ClusterOpts {
    /// File datastore, both pools with `vxlanMode` `mode`.
    pub fn new(backend: Backend, mode: &str) -> ClusterOpts {
        ClusterOpts {
            backend,
            felix_config: Vec::new(),
            vxlan_v4: mode.into(),
            vxlan_v6: mode.into(),
            etcd: false,
        }
    }

    /// Adds a FelixConfiguration field.
    pub fn config(mut self, key: &str, value: &str) -> ClusterOpts {
        self.felix_config.push((key.into(), value.into()));
        self
    }

    /// Uses a real etcd server.
    pub fn etcd(mut self) -> ClusterOpts {
        self.etcd = true;
        self
    }
}

/// Node `i` (1-based) of the fixed topology: its subnet number (1 or 2).
fn subnet_of(i: u8) -> u8 {
    if i <= 2 {
        1
    } else {
        2
    }
}

/// One node: its namespace, its workloads and its daemon.
pub struct ClusterNode {
    // Field order is drop order: daemon, workloads, namespace.
    /// The running daemon, `None` while stopped.
    pub daemon: Option<Daemon>,
    workloads: BTreeMap<String, Workload>,
    /// Node number, 1-based.
    pub index: u8,
    /// The node's name (`nodeN`), its `FELIX_FELIXHOSTNAME`.
    pub name: String,
    /// The node's IPv4 address on `eth0`.
    pub addr4: Ipv4Addr,
    /// The node's IPv6 address on `eth0`.
    pub addr6: Ipv6Addr,
    /// The node's VXLAN tunnel MAC (IPv4 device), as in its Node resource.
    pub mac4: String,
    /// The node's VXLAN tunnel MAC (IPv6 device), as in its Node resource.
    pub mac6: String,
    /// The router's interface towards this node (`rN`).
    pub router_port: String,
    scratch: PathBuf,
    /// The node namespace.
    pub ns: Netns,
}

impl ClusterNode {
    /// The node's IPv4 block (`10.65.N.0/26`).
    pub fn block4(&self) -> String {
        block4(self.index)
    }

    /// The node's IPv6 block (`fd00:65:N::/122`).
    pub fn block6(&self) -> String {
        block6(self.index)
    }

    /// The node's IPv4 VXLAN tunnel address (`10.65.N.1`).
    pub fn vtep4(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 65, self.index, 1)
    }

    /// The node's IPv6 VXLAN tunnel address (`fd00:65:N::1`).
    pub fn vtep6(&self) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x65, u16::from(self.index), 0, 0, 0, 0, 1)
    }

    /// The node's Node resource.
    pub fn resource(&self) -> NodeRes {
        NodeRes {
            name: self.name.clone(),
            ipv4: Some(format!("{}/24", self.addr4)),
            ipv6: Some(format!("{}/64", self.addr6)),
            vxlan4: Some(self.vtep4()),
            vxlan6: Some(self.vtep6()),
            mac4: Some(self.mac4.clone()),
            mac6: Some(self.mac6.clone()),
        }
    }

    /// The running daemon.
    pub fn d(&mut self) -> Result<&mut Daemon> {
        let name = self.name.clone();
        self.daemon
            .as_mut()
            .ok_or_else(|| anyhow!("felix is not running on {name}"))
    }
}

/// Node `i`'s IPv4 block.
pub fn block4(i: u8) -> String {
    format!("10.65.{i}.0/26")
}

/// Node `i`'s IPv6 block.
pub fn block6(i: u8) -> String {
    format!("fd00:65:{i}::/122")
}

/// The pod address `10.65.N.host`.
pub fn pod4(node: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, node, host)
}

/// The pod address `fd00:65:N::host` (host written in hex digits as given
/// in decimal, e.g. 10 -> `::10`).
pub fn pod6(node: u8, host: u8) -> Ipv6Addr {
    let h = u16::from_str_radix(&host.to_string(), 16).unwrap_or(0);
    Ipv6Addr::new(0xfd00, 0x65, u16::from(node), 0, 0, 0, 0, h)
}

/// The etcd key of one resource document as this harness writes them
/// (upstream's etcdv3 layout, see `docs/interfaces.md`).
fn etcd_key(doc: &str) -> Result<String> {
    let field = |indent: &str, k: &str| {
        doc.lines()
            .find_map(|l| l.strip_prefix(indent)?.strip_prefix(k)?.strip_prefix(": "))
            .map(|v| v.trim().trim_matches('"').to_string())
    };
    let kind = field("", "kind").ok_or_else(|| anyhow!("no kind in {doc:?}"))?;
    let name = field("  ", "name").ok_or_else(|| anyhow!("no name in {doc:?}"))?;
    let ns = field("  ", "namespace");
    if kind == "IPAMBlock" {
        let cidr = field("  ", "cidr").ok_or_else(|| anyhow!("no cidr in {doc:?}"))?;
        let family = if cidr.contains(':') { "ipv6" } else { "ipv4" };
        return Ok(format!(
            "/calico/ipam/v2/assignment/{family}/block/{}",
            cidr.replace('/', "-")
        ));
    }
    let plural = match kind.as_str() {
        "Node" => "nodes",
        "IPPool" => "ippools",
        "WorkloadEndpoint" => "workloadendpoints",
        "NetworkPolicy" => "networkpolicies",
        "GlobalNetworkPolicy" => "globalnetworkpolicies",
        "Profile" => "profiles",
        "FelixConfiguration" => "felixconfigurations",
        other => bail!("no etcd key for kind {other}"),
    };
    Ok(match ns {
        Some(ns) => format!("/calico/resources/v3/projectcalico.org/{plural}/{ns}/{name}"),
        None => format!("/calico/resources/v3/projectcalico.org/{plural}/{name}"),
    })
}

/// A real etcd server running in the router namespace.
struct Etcd {
    child: Child,
    url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What [`Cluster::path`] saw of one connection at the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSeen {
    /// Which server answered (`None`: no connection).
    pub answered_by: Option<String>,
    /// The source address the server saw.
    pub peer: Option<IpAddr>,
    /// VXLAN packets (UDP 4789 between the two nodes' addresses), both
    /// directions.
    pub encapsulated: u64,
    /// Packets with the two pods' addresses on the wire, both directions.
    pub direct: u64,
}

/// The way traffic between two pods must cross the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// VXLAN between the nodes' addresses, no pod address on the wire.
    Encapsulated,
    /// Pod addresses on the wire, no VXLAN.
    Direct,
}

/// The cluster: router, three nodes, their workloads and daemons, and the
/// shared datastore.
pub struct Cluster {
    // Field order is drop order: nodes (daemons, workloads, namespaces),
    // etcd, router, files.
    /// The nodes, `nodes[0]` is node1.
    pub nodes: Vec<ClusterNode>,
    etcd: Option<Etcd>,
    /// The router namespace.
    pub router: Netns,
    ds: Datastore,
    prefix: String,
    /// The backend every node's daemon is started with.
    pub backend: Backend,
    opts: ClusterOpts,
    weps: BTreeMap<String, Wep>,
}

impl Cluster {
    /// Builds the fabric, the nodes and their workloads and writes every
    /// resource; no daemon runs yet ([`Cluster::start_all`]).
    pub fn new(opts: ClusterOpts) -> Result<Cluster> {
        let prefix = format!(
            "fvc-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let router = Netns::create(&format!("{prefix}-r"))?;
        let ds = Datastore::new()?;
        let mut c = Cluster {
            nodes: Vec::new(),
            etcd: None,
            router,
            ds,
            prefix,
            backend: opts.backend,
            opts: opts.clone(),
            weps: BTreeMap::new(),
        };
        c.build_router()?;
        for i in 1..=3 {
            let n = c.build_node(i)?;
            c.nodes.push(n);
        }
        if opts.etcd {
            c.start_etcd()?;
        }
        c.write_resources()?;
        for i in 1..=3u8 {
            for (role, host) in [("a", 10u8), ("b", 11u8)] {
                let pod = format!("n{i}{role}");
                let w = Wep::new(
                    &pod,
                    POD_NAMESPACE,
                    &format!("cali{pod}0"),
                    pod4(i, host),
                    pod6(i, host),
                )
                .label("node", &format!("n{i}"))
                .label("role", role)
                .on(&format!("node{i}"));
                c.plug(i, w)?;
            }
        }
        Ok(c)
    }

    fn build_router(&self) -> Result<()> {
        let r = &self.router;
        r.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        r.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        r.sysctl("net.ipv4.ip_forward", "1")?;
        r.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        r.ip(&["link", "add", "br1", "type", "bridge"])?;
        r.ip(&["link", "set", "br1", "up"])?;
        r.ip(&["addr", "add", "10.0.1.254/24", "dev", "br1"])?;
        r.ip(&["-6", "addr", "add", "fd00:1::fe/64", "dev", "br1", "nodad"])?;
        Ok(())
    }

    fn build_node(&self, i: u8) -> Result<ClusterNode> {
        let s = subnet_of(i);
        let name = format!("node{i}");
        let ns = Netns::create(&format!("{}-{name}", self.prefix))?;
        let scratch = self.ds.scratch().join(&name);
        fs::create_dir_all(&scratch)?;
        let port = format!("r{i}");
        let addr4 = Ipv4Addr::new(10, 0, s, i);
        let addr6 = Ipv6Addr::new(0xfd00, u16::from(s), 0, 0, 0, 0, 0, u16::from(i));
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        ns.sysctl("net.ipv4.ip_forward", "1")?;
        ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        self.router.ip(&[
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ])?;
        let r = &self.router;
        if s == 1 {
            r.ip(&["link", "set", &port, "master", "br1"])?;
        } else {
            r.ip(&["addr", "add", &format!("10.0.{s}.254/24"), "dev", &port])?;
            r.ip(&[
                "-6",
                "addr",
                "add",
                &format!("fd00:{s}::fe/64"),
                "dev",
                &port,
                "nodad",
            ])?;
        }
        r.ip(&["link", "set", &port, "up"])?;
        ns.ip(&["link", "set", "eth0", "up"])?;
        ns.ip(&["addr", "add", &format!("{addr4}/24"), "dev", "eth0"])?;
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{addr6}/64"),
            "dev",
            "eth0",
            "nodad",
        ])?;
        ns.ip(&["route", "add", "default", "via", &format!("10.0.{s}.254")])?;
        ns.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("fd00:{s}::fe"),
        ])?;
        Ok(ClusterNode {
            daemon: None,
            workloads: BTreeMap::new(),
            index: i,
            name,
            addr4,
            addr6,
            mac4: format!("66:6e:6f:64:34:3{i}"),
            mac6: format!("66:6e:6f:64:36:3{i}"),
            router_port: port,
            scratch,
            ns,
        })
    }

    fn start_etcd(&mut self) -> Result<()> {
        let url = format!("http://10.0.1.254:{ETCD_PORT}");
        let data = self.ds.scratch().join("etcd-data");
        let log = fs::File::create(self.ds.scratch().join("etcd.log"))?;
        let child = self
            .router
            .command("etcd")
            .args(["--name", "fv", "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "fv=http://127.0.0.1:2380",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawning etcd in the router namespace")?;
        self.etcd = Some(Etcd {
            child,
            url: url.clone(),
        });
        let felix = felix_binary()?;
        poll(Duration::from_secs(30), || {
            let out = self
                .router
                .command(&felix.to_string_lossy())
                .args(["datastore", "--endpoints", &url, "get", "ippools"])
                .output()
                .ok()?;
            out.status.success().then_some(())
        })
        .with_context(|| {
            format!(
                "etcd did not answer at {url}: {}",
                fs::read_to_string(self.ds.scratch().join("etcd.log")).unwrap_or_default()
            )
        })
    }

    /// `file:DIR` or `etcdv3:URL`: what every daemon is pointed at.
    pub fn datastore_spec(&self) -> String {
        match &self.etcd {
            Some(e) => format!("etcdv3:{}", e.url),
            None => format!("file:{}", self.ds.path().display()),
        }
    }

    fn write_resources(&self) -> Result<()> {
        let cfg: Vec<(&str, &str)> = self
            .opts
            .felix_config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.write(
            "cluster",
            &docs(&[
                cluster_base_yaml(&cfg),
                namespace_yaml(POD_NAMESPACE, &[("env", "demo")]),
            ]),
        )?;
        self.write_pools(&self.opts.vxlan_v4, &self.opts.vxlan_v6)?;
        for n in &self.nodes {
            self.write(&format!("node-{}", n.name), &n.resource().yaml())?;
            self.write(
                &format!("blocks-{}", n.name),
                &docs(&[
                    ipam_block_yaml(&n.block4(), Some(&n.name)),
                    ipam_block_yaml(&n.block6(), Some(&n.name)),
                ]),
            )?;
        }
        Ok(())
    }

    /// Writes the two pools with the given `vxlanMode`s (file `pools`).
    pub fn write_pools(&self, v4: &str, v6: &str) -> Result<()> {
        self.write(
            "pools",
            &docs(&[
                ippool_yaml("pool-v4", POOL_V4, 26, v4, false),
                ippool_yaml("pool-v6", POOL_V6, 122, v6, false),
            ]),
        )
    }

    /// Writes (creates or replaces) the resources of `<name>.yaml`: a file
    /// in the datastore directory, or `felix datastore apply` into etcd.
    pub fn write(&self, name: &str, yaml: &str) -> Result<()> {
        let Some(e) = &self.etcd else {
            return self.ds.write(name, yaml);
        };
        let dir = self.ds.scratch().join("etcd-in");
        fs::create_dir_all(&dir)?;
        let file = dir.join(format!("{name}.yaml"));
        fs::write(&file, yaml)?;
        let felix = felix_binary()?;
        let out = self
            .router
            .command(&felix.to_string_lossy())
            .args(["datastore", "--endpoints", &e.url, "apply", "-f"])
            .arg(&file)
            .output()
            .context("running felix datastore apply")?;
        ensure!(
            out.status.success(),
            "felix datastore apply {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Removes the resources of `<name>.yaml` (file datastore only).
    ///
    /// On etcd, the keys of the resources last written under `name` are
    /// deleted with `etcdctl` (the kinds this harness writes).
    pub fn remove(&self, name: &str) -> Result<()> {
        let Some(e) = &self.etcd else {
            return self.ds.remove(name);
        };
        let file = self
            .ds
            .scratch()
            .join("etcd-in")
            .join(format!("{name}.yaml"));
        let Ok(yaml) = fs::read_to_string(&file) else {
            return Ok(());
        };
        for doc in yaml.split("---\n") {
            let key = etcd_key(doc)?;
            let out = self
                .router
                .command("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &e.url, "del", &key])
                .output()
                .context("running etcdctl del")?;
            ensure!(
                out.status.success(),
                "etcdctl del {key}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        fs::remove_file(&file)?;
        Ok(())
    }

    /// Plugs workload `w` into node `i` (1-based) and writes its endpoint
    /// (`wep-<pod>`). The workload's name is its pod name.
    pub fn plug(&mut self, i: u8, w: Wep) -> Result<()> {
        ensure!(
            !self.weps.contains_key(&w.pod),
            "workload {} already exists",
            w.pod
        );
        let ns_name = format!("{}-{}", self.prefix, w.pod);
        let node = self.node(i)?;
        let wl = plug_workload(
            &node.ns,
            &ns_name,
            WorkloadSpec {
                name: &w.pod,
                iface: &w.iface,
                ip4: w.ip4,
                ip6: w.ip6,
                ports: &PORTS,
            },
            true,
        )?;
        self.node_mut(i)?.workloads.insert(w.pod.clone(), wl);
        self.write(&format!("wep-{}", w.pod), &w.yaml())?;
        self.weps.insert(w.pod.clone(), w);
        Ok(())
    }

    /// Unplugs workload `pod` and removes its endpoint resource.
    pub fn unplug(&mut self, pod: &str) -> Result<()> {
        self.weps.remove(pod);
        self.remove(&format!("wep-{pod}"))?;
        for n in &mut self.nodes {
            if let Some(w) = n.workloads.remove(pod) {
                let res = n.ns.ip(&["link", "del", &w.iface]);
                drop(w);
                res?;
                return Ok(());
            }
        }
        bail!("no workload {pod}")
    }

    /// Node `i` (1-based).
    pub fn node(&self, i: u8) -> Result<&ClusterNode> {
        self.nodes
            .get(usize::from(i).wrapping_sub(1))
            .ok_or_else(|| anyhow!("no node {i}"))
    }

    /// Node `i` (1-based), mutably.
    pub fn node_mut(&mut self, i: u8) -> Result<&mut ClusterNode> {
        self.nodes
            .get_mut(usize::from(i).wrapping_sub(1))
            .ok_or_else(|| anyhow!("no node {i}"))
    }

    /// The workload called `name`, on whichever node.
    pub fn workload(&self, name: &str) -> Result<&Workload> {
        self.nodes
            .iter()
            .find_map(|n| n.workloads.get(name))
            .ok_or_else(|| anyhow!("no workload {name}"))
    }

    /// The node (1-based) workload `name` is on.
    pub fn node_of(&self, name: &str) -> Result<u8> {
        self.nodes
            .iter()
            .find(|n| n.workloads.contains_key(name))
            .map(|n| n.index)
            .ok_or_else(|| anyhow!("no workload {name}"))
    }

    /// Names of all workloads, sorted.
    pub fn workload_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| n.workloads.keys().cloned())
            .collect();
        v.sort();
        v
    }

    /// Starts felix on node `i` and waits until it has converged.
    pub fn start_felix(&mut self, i: u8) -> Result<()> {
        self.spawn_felix(i)?;
        self.wait_converged(i)
    }

    fn spawn_felix(&mut self, i: u8) -> Result<()> {
        let spec = self.datastore_spec();
        let backend = self.backend;
        let node = self.node_mut(i)?;
        ensure!(node.daemon.is_none(), "felix already runs on {}", node.name);
        let d = Daemon::start_node(&node.ns, &node.name, &spec, &node.scratch, backend, &[])?;
        node.daemon = Some(d);
        Ok(())
    }

    /// Waits until felix on node `i` has converged and reports the
    /// backend's dataplane.
    pub fn wait_converged(&mut self, i: u8) -> Result<()> {
        let backend = self.backend;
        let node = self.node_mut(i)?;
        let name = node.name.clone();
        let d = node.d()?;
        d.wait_converged(0)
            .with_context(|| format!("felix on {name}"))?;
        let st = d.status().unwrap_or_default();
        ensure!(
            crate::netfv::daemon::dataplane_name(&st) == backend.status_name(),
            "felix on {name} reports dataplane {} instead of {}",
            st["dataplane"],
            backend.status_name()
        );
        Ok(())
    }

    /// Starts felix on every node (all at once) and waits for all of them.
    pub fn start_all(&mut self) -> Result<()> {
        for i in 1..=3 {
            self.spawn_felix(i)?;
        }
        for i in 1..=3 {
            self.wait_converged(i)?;
        }
        Ok(())
    }

    /// Stops felix on node `i` with SIGTERM (clean exit required).
    pub fn stop_felix(&mut self, i: u8) -> Result<()> {
        match self.node_mut(i)?.daemon.take() {
            Some(d) => d.stop(),
            None => Ok(()),
        }
    }

    /// Stops and starts felix on node `i`, waiting for convergence.
    pub fn restart_felix(&mut self, i: u8) -> Result<()> {
        self.stop_felix(i)?;
        self.start_felix(i)
    }

    /// The last `n` log lines of every running daemon (for failure output).
    pub fn logs(&self, n: usize) -> String {
        let mut s = String::new();
        for node in &self.nodes {
            if let Some(d) = &node.daemon {
                s.push_str(&format!(
                    "--- felix on {} ({}):\n{}\n",
                    node.name,
                    d.log_path().display(),
                    d.log_tail(n)
                ));
            }
        }
        s
    }

    /// Runs every check once (concurrently); the ones that did not hold.
    pub fn mismatches(&self, checks: &[Check]) -> Result<Vec<String>> {
        mismatches_with(|n| self.workload(n), checks)
    }

    /// Repeats the checks until all hold, or fails at the deadline.
    pub fn expect_traffic(&self, what: &str, checks: &[Check], deadline: Duration) -> Result<()> {
        expect_until(what, deadline, || self.mismatches(checks))
    }

    /// Every ordered pair of distinct workloads on TCP `port`, all
    /// expected to connect (`v6`: to the IPv6 addresses).
    pub fn all_pairs(&self, port: u16, v6: bool) -> Vec<Check> {
        let names = self.workload_names();
        let mut v = Vec::new();
        for f in &names {
            for t in &names {
                if f != t {
                    v.push(if v6 {
                        Check::v6(f, t, port, true)
                    } else {
                        Check::v4(f, t, port, true)
                    });
                }
            }
        }
        v
    }

    /// Ordered pairs of workloads on different nodes.
    pub fn cross_node_pairs(&self) -> Result<Vec<(String, String)>> {
        let names = self.workload_names();
        let mut v = Vec::new();
        for f in &names {
            for t in &names {
                if self.node_of(f)? != self.node_of(t)? {
                    v.push((f.clone(), t.clone()));
                }
            }
        }
        Ok(v)
    }

    /// Connects from `from` to `to` on TCP `port` once (asking for the
    /// source address the server saw) while counting, at the router, what
    /// the two nodes send each other: VXLAN packets between their addresses
    /// and packets carrying the two pods' addresses.
    pub fn path(&self, from: &str, to: &str, port: u16, v6: bool) -> Result<PathSeen> {
        let (fi, ti) = (self.node_of(from)?, self.node_of(to)?);
        ensure!(fi != ti, "{from} and {to} are on the same node");
        let (fnode, tnode) = (self.node(fi)?, self.node(ti)?);
        let (fw, tw) = (self.workload(from)?, self.workload(to)?);
        let (fam, naddr_f, naddr_t, paddr_f, paddr_t): (&str, IpAddr, IpAddr, IpAddr, IpAddr) =
            if v6 {
                (
                    "ip6",
                    fnode.addr6.into(),
                    tnode.addr6.into(),
                    fw.ip6.into(),
                    tw.ip6.into(),
                )
            } else {
                (
                    "ip",
                    fnode.addr4.into(),
                    tnode.addr4.into(),
                    fw.ip4.into(),
                    tw.ip4.into(),
                )
            };
        let chain = |name: &str, dev: &str, src_n: IpAddr, dst_n: IpAddr, src_p, dst_p| {
            format!(
                "  chain {name} {{\n    type filter hook ingress device \"{dev}\" priority -500;\n\
                 \x20   meta protocol {fam} {fam} saddr {src_n} {fam} daddr {dst_n} udp dport {VXLAN_PORT} counter comment \"encap\"\n\
                 \x20   meta protocol {fam} {fam} saddr {src_p} {fam} daddr {dst_p} counter comment \"direct\"\n  }}\n"
            )
        };
        let table = format!(
            "table netdev fvpath {{\n{}{}}}\n",
            chain(
                "pathfwd",
                &fnode.router_port,
                naddr_f,
                naddr_t,
                paddr_f,
                paddr_t
            ),
            chain(
                "pathrev",
                &tnode.router_port,
                naddr_t,
                naddr_f,
                paddr_t,
                paddr_f
            ),
        );
        let _ = self
            .router
            .exec("nft", &["delete", "table", "netdev", "fvpath"]);
        felix_netns::run_in(
            self.router.name(),
            "nft",
            &["-f", "-"],
            Some(table.as_bytes()),
        )
        .context("installing the router's path counters")?;
        let answer = probe_peer(fw.ns.name(), paddr_t, port);
        let listing = self
            .router
            .exec("nft", &["list", "table", "netdev", "fvpath"]);
        let _ = self
            .router
            .exec("nft", &["delete", "table", "netdev", "fvpath"]);
        let listing = listing?;
        let answer = answer?;
        let mut encapsulated = 0;
        let mut direct = 0;
        for l in listing.lines() {
            let Some((_, after)) = l.split_once("counter packets ") else {
                continue;
            };
            let pkts: u64 = after
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if l.contains("comment \"encap\"") {
                encapsulated += pkts;
            } else if l.contains("comment \"direct\"") {
                direct += pkts;
            }
        }
        Ok(PathSeen {
            answered_by: answer.as_ref().map(|(id, _)| id.clone()),
            peer: answer.map(|(_, p)| p),
            encapsulated,
            direct,
        })
    }

    /// One observation of `from` -> `to` against the expected `path`:
    /// `Ok(None)` when it held, else what was seen instead.
    fn path_mismatch(
        &self,
        from: &str,
        to: &str,
        port: u16,
        v6: bool,
        path: Path,
    ) -> Result<Option<String>> {
        let fw = self.workload(from)?;
        let want_peer: IpAddr = if v6 { fw.ip6.into() } else { fw.ip4.into() };
        let seen = self.path(from, to, port, v6)?;
        let good = seen.answered_by.as_deref() == Some(to)
            && seen.peer == Some(want_peer)
            && match path {
                Path::Encapsulated => seen.encapsulated > 0 && seen.direct == 0,
                Path::Direct => seen.direct > 0 && seen.encapsulated == 0,
            };
        Ok((!good).then(|| {
            format!(
                "{from} -> {to} tcp/{port} {}: expected {path:?} with source {want_peer}, saw {seen:?}",
                if v6 { "v6" } else { "v4" },
            )
        }))
    }

    /// Requires that `from` reaches `to` on TCP `port` along `path`, with
    /// the server seeing `from`'s pod address as the source; retried until
    /// `deadline`.
    pub fn expect_path(
        &self,
        from: &str,
        to: &str,
        port: u16,
        v6: bool,
        path: Path,
        deadline: Duration,
    ) -> Result<()> {
        let pairs = [(from.to_string(), to.to_string(), path)];
        self.expect_paths("path", &pairs, port, v6, deadline)
    }

    /// [`Cluster::expect_path`] for many pairs, one deadline for all; the
    /// pairs that still fail at the deadline are listed.
    pub fn expect_paths(
        &self,
        what: &str,
        pairs: &[(String, String, Path)],
        port: u16,
        v6: bool,
        deadline: Duration,
    ) -> Result<()> {
        let start = felix_actors::clock::real_now();
        let mut todo: Vec<&(String, String, Path)> = pairs.iter().collect();
        loop {
            let mut bad = Vec::new();
            let mut still = Vec::new();
            for p in todo {
                match self.path_mismatch(&p.0, &p.1, port, v6, p.2) {
                    Ok(None) => {}
                    Ok(Some(why)) => {
                        bad.push(why);
                        still.push(p);
                    }
                    Err(e) => {
                        bad.push(format!("{} -> {}: {e:#}", p.0, p.1));
                        still.push(p);
                    }
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            if start.elapsed() > deadline {
                bail!("{what}:\n  {}", bad.join("\n  "));
            }
            todo = still;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Opens a long-lived connection from `from` to `to`.
    pub fn connect(&self, from: &str, to: &str, port: u16, v6: bool) -> Result<Conn> {
        let fw = self.workload(from)?;
        let tw = self.workload(to)?;
        let ip: IpAddr = if v6 { tw.ip6.into() } else { tw.ip4.into() };
        Conn::open(fw.ns.name(), ip, port)
    }

    /// Counts packets that node `i` sends to the router for destination
    /// `dst` (unencapsulated) while `f` runs.
    pub fn count_sent_to<T>(&self, i: u8, dst: IpAddr, f: impl FnOnce() -> T) -> Result<(T, u64)> {
        let node = self.node(i)?;
        let fam = if dst.is_ipv6() { "ip6" } else { "ip" };
        let table = format!(
            "table netdev fvdst {{\n  chain pathdst {{\n    type filter hook ingress device \"{}\" priority -500;\n\
             \x20   meta protocol {fam} {fam} daddr {dst} counter\n  }}\n}}\n",
            node.router_port
        );
        let _ = self
            .router
            .exec("nft", &["delete", "table", "netdev", "fvdst"]);
        felix_netns::run_in(
            self.router.name(),
            "nft",
            &["-f", "-"],
            Some(table.as_bytes()),
        )?;
        let out = f();
        let listing = self
            .router
            .exec("nft", &["list", "table", "netdev", "fvdst"]);
        let _ = self
            .router
            .exec("nft", &["delete", "table", "netdev", "fvdst"]);
        let n = listing?
            .lines()
            .filter_map(|l| l.split_once("counter packets ").map(|(_, a)| a.to_string()))
            .filter_map(|a| {
                a.split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<u64>().ok())
            })
            .sum();
        Ok((out, n))
    }
}
