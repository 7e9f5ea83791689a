//! The FV sandbox: a node namespace (uplink veth with the default routes, as
//! a real node has, because proxy ARP only answers for 169.254.1.1 when the
//! node can route it) and workload namespaces plugged into it through `cali*`
//! veths exactly as Calico's CNI plugin wires them: a /32 and a /128 on the
//! workload's `eth0`, default routes via 169.254.1.1 and via the host side's
//! IPv6 link-local address, host side MAC `ee:ee:ee:ee:ee:ee` with proxy ARP,
//! and host routes to the workload's addresses. Each workload runs an echo
//! [`Server`] on the requested ports.
//!
//! Invariant: every namespace is named `fvs2-<pid>-<n>-...` (unique per
//! process and sandbox) and all of them are deleted when the sandbox drops.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use super::traffic::{probe_all, Server};
use super::wait::poll;
use felix_netns::Netns;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A workload plugged into the node.
pub struct Workload {
    /// Short name used by tests (`frontend`, ...).
    pub name: String,
    /// Host-side interface name (`cali...`), in the node namespace.
    pub iface: String,
    /// The workload's IPv4 address (/32 on eth0).
    pub ip4: Ipv4Addr,
    /// The workload's IPv6 address (/128 on eth0).
    pub ip6: Ipv6Addr,
    // Dropped before the namespace so sockets are gone when it is deleted.
    _server: Server,
    /// The workload's namespace.
    pub ns: Netns,
}

/// One expected connectivity fact: from workload `from` to workload `to`
/// on TCP `port` over IPv4 or IPv6.
#[derive(Clone, Debug)]
pub struct Check {
    /// Name of the client workload.
    pub from: String,
    /// Name of the server workload; an answer must come from it.
    pub to: String,
    /// TCP port on `to`.
    pub port: u16,
    /// Connect to `to`'s IPv6 address instead of its IPv4 one.
    pub v6: bool,
    /// Whether the connection must succeed (`false`: must fail).
    pub allowed: bool,
}

impl Check {
    /// An IPv4 check.
    pub fn v4(from: &str, to: &str, port: u16, allowed: bool) -> Check {
        Check {
            from: from.into(),
            to: to.into(),
            port,
            v6: false,
            allowed,
        }
    }

    /// An IPv6 check.
    pub fn v6(from: &str, to: &str, port: u16, allowed: bool) -> Check {
        Check {
            v6: true,
            ..Check::v4(from, to, port, allowed)
        }
    }
}

/// The node namespace and its workloads.
pub struct Sandbox {
    prefix: String,
    workloads: BTreeMap<String, Workload>,
    /// The node namespace, where `felix run` runs.
    pub node: Netns,
}

impl Sandbox {
    /// Creates the node namespace with its uplink.
    pub fn new() -> Result<Sandbox> {
        let prefix = format!(
            "fvs2-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let node = Netns::create(&format!("{prefix}-node"))?;
        // No DAD in the node: link-local addresses are usable at once.
        node.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        node.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        node.ip(&[
            "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
        ])?;
        node.ip(&["link", "set", "uplink0", "up"])?;
        node.ip(&["link", "set", "uplink1", "up"])?;
        node.ip(&["addr", "add", "192.0.2.1/24", "dev", "uplink0"])?;
        node.ip(&["route", "add", "default", "via", "192.0.2.254"])?;
        node.ip(&[
            "-6",
            "addr",
            "add",
            "2001:db8:f::1/64",
            "dev",
            "uplink0",
            "nodad",
        ])?;
        node.ip(&["-6", "route", "add", "default", "via", "2001:db8:f::fe"])?;
        Ok(Sandbox {
            prefix,
            workloads: BTreeMap::new(),
            node,
        })
    }

    /// Plugs in workload `name` on host interface `iface` with the given
    /// addresses, as the CNI plugin does, and starts its echo servers.
    pub fn add_workload(
        &mut self,
        name: &str,
        iface: &str,
        ip4: Ipv4Addr,
        ip6: Ipv6Addr,
        ports: &[u16],
    ) -> Result<()> {
        self.plug(name, iface, ip4, ip6, ports, true)
    }

    /// Like [`Self::add_workload`], but leaves out the host side's routes
    /// and sysctls (proxy ARP, forwarding), which Felix programs itself:
    /// the way to check that Felix does.
    pub fn add_workload_unwired(
        &mut self,
        name: &str,
        iface: &str,
        ip4: Ipv4Addr,
        ip6: Ipv6Addr,
        ports: &[u16],
    ) -> Result<()> {
        self.plug(name, iface, ip4, ip6, ports, false)
    }

    /// Unplugs workload `name`: deletes its host interface (which takes the
    /// kernel's routes through it along), stops its servers and deletes its
    /// namespace.
    pub fn remove_workload(&mut self, name: &str) -> Result<()> {
        let w = self
            .workloads
            .remove(name)
            .ok_or_else(|| anyhow!("no workload {name}"))?;
        let res = self.node.ip(&["link", "del", &w.iface]);
        drop(w);
        res?;
        Ok(())
    }

    fn plug(
        &mut self,
        name: &str,
        iface: &str,
        ip4: Ipv4Addr,
        ip6: Ipv6Addr,
        ports: &[u16],
        host_wiring: bool,
    ) -> Result<()> {
        if self.workloads.contains_key(name) {
            bail!("workload {name} already exists");
        }
        let w = plug_workload(
            &self.node,
            &format!("{}-{name}", self.prefix),
            WorkloadSpec {
                name,
                iface,
                ip4,
                ip6,
                ports,
            },
            host_wiring,
        )?;
        self.workloads.insert(name.to_string(), w);
        Ok(())
    }

    /// The workload called `name`.
    pub fn workload(&self, name: &str) -> Result<&Workload> {
        self.workloads
            .get(name)
            .ok_or_else(|| anyhow!("no workload {name}"))
    }

    /// Runs every check once (concurrently); returns the ones that did not
    /// hold, described.
    pub fn mismatches(&self, checks: &[Check]) -> Result<Vec<String>> {
        mismatches_with(|n| self.workload(n), checks)
    }

    /// Repeats the checks until all hold, or fails at the deadline listing
    /// what still differs.
    pub fn expect_traffic(&self, what: &str, checks: &[Check], deadline: Duration) -> Result<()> {
        expect_until(what, deadline, || self.mismatches(checks))
    }

    /// Runs the checks once and requires all of them to hold now.
    pub fn expect_traffic_now(&self, what: &str, checks: &[Check]) -> Result<()> {
        let bad = self.mismatches(checks)?;
        if !bad.is_empty() {
            bail!("{what}: traffic not as expected:\n  {}", bad.join("\n  "));
        }
        Ok(())
    }
}

/// What [`plug_workload`] plugs in.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadSpec<'a> {
    /// The workload's name (also its echo servers' identity).
    pub name: &'a str,
    /// Host-side interface name (`cali...`).
    pub iface: &'a str,
    /// IPv4 address (/32 on the workload's `eth0`).
    pub ip4: Ipv4Addr,
    /// IPv6 address (/128 on the workload's `eth0`).
    pub ip6: Ipv6Addr,
    /// TCP ports its echo servers listen on.
    pub ports: &'a [u16],
}

/// Creates namespace `ns_name` and plugs it into `node` as Calico's CNI
/// plugin does (see the module docs); with `host_wiring`, also the host
/// side's routes and sysctls (proxy ARP, forwarding). Starts the echo
/// servers. The namespace is deleted when the [`Workload`] drops.
pub fn plug_workload(
    node: &Netns,
    ns_name: &str,
    spec: WorkloadSpec<'_>,
    host_wiring: bool,
) -> Result<Workload> {
    let WorkloadSpec {
        name,
        iface,
        ip4,
        ip6,
        ports,
    } = spec;
    let ns = Netns::create(ns_name)?;
    let n = node;
    n.ip(&[
        "link",
        "add",
        iface,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns.name(),
    ])?;
    n.ip(&["link", "set", iface, "address", "ee:ee:ee:ee:ee:ee"])?;
    if host_wiring {
        n.sysctl(&format!("net.ipv4.conf.{iface}.proxy_arp"), "1")?;
        n.sysctl(&format!("net.ipv4.neigh.{iface}.proxy_delay"), "0")?;
        n.sysctl(&format!("net.ipv4.conf.{iface}.forwarding"), "1")?;
        n.sysctl(&format!("net.ipv6.conf.{iface}.forwarding"), "1")?;
    }
    n.ip(&["link", "set", iface, "up"])?;
    if host_wiring {
        n.ip(&["route", "add", &format!("{ip4}/32"), "dev", iface])?;
        n.ip(&["-6", "route", "add", &format!("{ip6}/128"), "dev", iface])?;
    }

    ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
    ns.ip(&["link", "set", "eth0", "up"])?;
    ns.ip(&["addr", "add", &format!("{ip4}/32"), "dev", "eth0"])?;
    ns.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{ip6}/128"),
        "dev",
        "eth0",
        "nodad",
    ])?;
    ns.ip(&[
        "route",
        "add",
        "169.254.1.1",
        "dev",
        "eth0",
        "scope",
        "link",
    ])?;
    ns.ip(&[
        "route",
        "add",
        "default",
        "via",
        "169.254.1.1",
        "dev",
        "eth0",
    ])?;
    let ll = host_link_local(node, iface)?;
    ns.ip(&["-6", "route", "add", "default", "via", &ll, "dev", "eth0"])?;

    let server = Server::start(ns.name(), name, ports)?;
    Ok(Workload {
        name: name.to_string(),
        iface: iface.to_string(),
        ip4,
        ip6,
        _server: server,
        ns,
    })
}

/// The IPv6 link-local address of the host side of `iface` in `node`.
fn host_link_local(node: &Netns, iface: &str) -> Result<String> {
    poll(Duration::from_secs(10), || {
        let out = node
            .ip(&["-6", "-o", "addr", "show", "dev", iface, "scope", "link"])
            .ok()?;
        out.split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .map(str::to_string)
    })
    .with_context(|| format!("no IPv6 link-local address on {iface}"))
}

/// Runs every check once (concurrently), looking workloads up with
/// `workload`; returns the ones that did not hold, described.
pub fn mismatches_with<'a>(
    workload: impl Fn(&str) -> Result<&'a Workload>,
    checks: &[Check],
) -> Result<Vec<String>> {
    let mut probes = Vec::new();
    for c in checks {
        let from = workload(&c.from)?;
        let to = workload(&c.to)?;
        let ip = if c.v6 {
            IpAddr::V6(to.ip6)
        } else {
            IpAddr::V4(to.ip4)
        };
        probes.push((from.ns.name().to_string(), ip, c.port));
    }
    let results = probe_all(&probes);
    let mut bad = Vec::new();
    for (c, r) in checks.iter().zip(results) {
        let got = r?;
        let ok = match &got {
            Some(id) => c.allowed && *id == c.to,
            None => !c.allowed,
        };
        if !ok {
            bad.push(format!(
                "{} -> {} tcp/{} {}: expected {}, got {}",
                c.from,
                c.to,
                c.port,
                if c.v6 { "v6" } else { "v4" },
                if c.allowed { "allowed" } else { "denied" },
                match got {
                    Some(id) => format!("answer from {id}"),
                    None => "no connection".into(),
                }
            ));
        }
    }
    Ok(bad)
}

/// Repeats `mismatches` until it finds none, or fails at the deadline
/// listing what still differs.
pub fn expect_until(
    what: &str,
    deadline: Duration,
    mut mismatches: impl FnMut() -> Result<Vec<String>>,
) -> Result<()> {
    let start = felix_actors::clock::real_now();
    loop {
        let bad = mismatches()?;
        if bad.is_empty() {
            return Ok(());
        }
        if start.elapsed() > deadline {
            bail!("{what}: traffic not as expected:\n  {}", bad.join("\n  "));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Workloads (servers, then namespaces) go before the node namespace.
        self.workloads.clear();
    }
}
