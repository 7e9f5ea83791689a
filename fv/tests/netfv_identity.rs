//! Dataplane FV, shadowed workload endpoints, per backend: a pod re-created
//! under a new identity (another pod name, then another namespace) on the
//! same interface and addresses, make-before-break — the new endpoint is
//! written, then the old one deleted. The interface keeps its IPv4/IPv6
//! routes and proxy ARP and keeps passing traffic throughout; the route is
//! never deleted in between.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use felix_fv::netfv::kernel::workload_routes;
use felix_fv::netfv::topology::{ip4, ip6, wep};
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};

const SETTLE: Duration = Duration::from_secs(20);
const IFACE: &str = "califront0";
const HOST: u8 = 10;

fn routed(fv: &Fv) -> Result<(bool, bool)> {
    let node = &fv.sandbox.node;
    let (r4, r6) = (format!("{} ", ip4(HOST)), format!("{} ", ip6(HOST)));
    let v4 = workload_routes(node, "-4")?
        .iter()
        .any(|l| l.starts_with(&r4) && l.contains(IFACE));
    let v6 = workload_routes(node, "-6")?
        .iter()
        .any(|l| l.starts_with(&r6) && l.contains(IFACE));
    Ok((v4, v6))
}

fn expect_intact(fv: &Fv, what: &str) -> Result<()> {
    ensure!(
        routed(fv)? == (true, true),
        "{what}: routes to {IFACE} lost:\n{}\n{}",
        fv.sandbox
            .node
            .ip(&["-4", "route", "show"])
            .unwrap_or_default(),
        fv.sandbox
            .node
            .ip(&["-6", "route", "show"])
            .unwrap_or_default()
    );
    let arp = fv
        .sandbox
        .node
        .exec(
            "sysctl",
            &["-n", &format!("net.ipv4.conf.{IFACE}.proxy_arp")],
        )
        .unwrap_or_default();
    ensure!(arp.trim() == "1", "{what}: proxy ARP lost ({arp:?})");
    fv.sandbox.expect_traffic(
        what,
        &[
            Check::v4("backend", "frontend", 8080, true),
            Check::v6("backend", "frontend", 8080, true),
            Check::v4("frontend", "backend", 8080, true),
        ],
        SETTLE,
    )
}

/// `ip -o monitor route` in the node namespace; killed on drop.
struct RouteMonitor(Option<Child>);

impl RouteMonitor {
    /// Stops it and returns what it printed.
    fn finish(&mut self) -> Result<String> {
        let mut child = self.0.take().context("route monitor gone")?;
        let _ = child.kill();
        let out = child.wait_with_output().context("route monitor")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for RouteMonitor {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes `file`, waits for convergence.
fn write(fv: &mut Fv, file: &str, yaml: &str) -> Result<()> {
    fv.apply(file, yaml)
}

/// Deletes `file`, waits for convergence.
fn delete(fv: &mut Fv, file: &str) -> Result<()> {
    let before = fv.d()?.applies();
    fv.ds.remove(file)?;
    fv.d()?.wait_converged(before)?;
    Ok(())
}

fn identity_change(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.start(&[])?;
    expect_intact(&fv, "before")?;
    let mut monitor = RouteMonitor(Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                fv.sandbox.node.name(),
                "ip",
                "-o",
                "monitor",
                "route",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("route monitor")?,
    ));
    std::thread::sleep(Duration::from_millis(200));

    // A re-created pod (new name), then one in another namespace.
    let mut old = "wep-frontend".to_string();
    for (pod, ns) in [("frontend-v2", "shop"), ("frontend-v3", "ops")] {
        let new = wep(pod, ns, IFACE, HOST)
            .label("app", "frontend")
            .port("http", 8080);
        write(&mut fv, &format!("wep-{pod}"), &new.yaml())?;
        expect_intact(&fv, &format!("{pod} added"))?;
        delete(&mut fv, &old)?;
        expect_intact(&fv, &format!("{old} deleted"))?;
        old = format!("wep-{pod}");
    }
    let events = monitor.finish()?;
    ensure!(
        !events.lines().any(|l| l.starts_with("Deleted")
            && (l.contains(&format!("{} ", ip4(HOST))) || l.contains(&format!("{} ", ip6(HOST))))),
        "a route to {IFACE} was deleted in between:\n{events}"
    );
    fv.stop()
}

fn run(what: &str, f: impl FnOnce() -> Result<()>) {
    if let Err(e) = f() {
        panic!("{what}: {e:#}");
    }
}

#[test]
fn workload_route_survives_endpoint_identity_change_iptables() {
    felix_netns::require!(netns TOOLS);
    run("iptables", || identity_change(Backend::Iptables));
}

#[test]
fn workload_route_survives_endpoint_identity_change_nftables() {
    felix_netns::require!(netns TOOLS);
    run("nftables", || identity_change(Backend::Nftables));
}

#[test]
fn workload_route_survives_endpoint_identity_change_bpf() {
    felix_netns::require!(netns TOOLS);
    run("bpf", || identity_change(Backend::Bpf));
}
