//! Dataplane FV, the interface monitor, per backend: a workload whose
//! endpoint is in the datastore but whose `cali*` interface is created only
//! after the daemon is in sync — plugged without the host-side routes and
//! sysctls the CNI plugin would add, so only Felix can provide them — gets
//! its IPv4/IPv6 routes and proxy ARP and passes allowed traffic promptly,
//! and again after its interface is deleted and re-created.
//!
//! "Promptly" is a poll deadline shorter than the supervisor's 10 s retry
//! ticker and the 90 s route refresh, the only other paths that would
//! program a late interface; the daemon's metrics must also show the
//! monitor's seam operations.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use felix_fv::netfv::kernel::workload_routes;
use felix_fv::netfv::topology::{ip4, ip6, wep, PORTS};
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};

/// Shorter than the retry ticker (10 s): only an interface event can make it.
const PROMPT: Duration = Duration::from_secs(8);
const SETTLE: Duration = Duration::from_secs(20);

const LATE: &str = "late";
const LATE_IFACE: &str = "calilate0";
const LATE_HOST: u8 = 17;

fn checks() -> Vec<Check> {
    vec![
        Check::v4("frontend", LATE, 8080, true),
        Check::v4(LATE, "frontend", 9090, true),
        Check::v6("frontend", LATE, 8080, true),
    ]
}

fn proxy_arp(fv: &Fv) -> Option<String> {
    fv.sandbox
        .node
        .exec(
            "sysctl",
            &["-n", &format!("net.ipv4.conf.{LATE_IFACE}.proxy_arp")],
        )
        .ok()
        .map(|s| s.trim().to_string())
}

/// Waits until Felix has programmed the late interface's routes and proxy
/// ARP and traffic flows.
fn expect_programmed(fv: &Fv, what: &str) -> Result<()> {
    let node = &fv.sandbox.node;
    let (r4, r6) = (
        format!("{} ", ip4(LATE_HOST)),
        format!("{} ", ip6(LATE_HOST)),
    );
    poll(PROMPT, || {
        let v4 = workload_routes(node, "-4").ok()?;
        let v6 = workload_routes(node, "-6").ok()?;
        let ok = v4
            .iter()
            .any(|l| l.starts_with(&r4) && l.contains(LATE_IFACE))
            && v6
                .iter()
                .any(|l| l.starts_with(&r6) && l.contains(LATE_IFACE))
            && proxy_arp(fv).as_deref() == Some("1");
        ok.then_some(())
    })
    .with_context(|| {
        format!(
            "{what}: routes/proxy ARP for {LATE_IFACE} not programmed; routes:\n{}\n{}\nproxy_arp={:?}",
            node.ip(&["-4", "route", "show"]).unwrap_or_default(),
            node.ip(&["-6", "route", "show"]).unwrap_or_default(),
            proxy_arp(fv)
        )
    })?;
    fv.sandbox.expect_traffic(what, &checks(), PROMPT)
}

fn late_interface(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    let late = wep(LATE, "shop", LATE_IFACE, LATE_HOST).label("app", "late");
    fv.write_wep(&late)?;
    fv.start(&[])?;
    let node = &fv.sandbox.node;
    ensure!(
        !workload_routes(node, "-4")?
            .iter()
            .any(|l| l.contains(LATE_IFACE)),
        "a route to an interface that does not exist yet"
    );

    fv.sandbox
        .add_workload_unwired(LATE, LATE_IFACE, ip4(LATE_HOST), ip6(LATE_HOST), &PORTS)?;
    expect_programmed(&fv, "interface created after in-sync")?;

    // Deleted: the kernel drops its routes; Felix must not leave anything
    // half-done, and the others keep working.
    fv.sandbox.remove_workload(LATE)?;
    poll(SETTLE, || {
        let r = workload_routes(&fv.sandbox.node, "-4").ok()?;
        (!r.iter().any(|l| l.contains(LATE_IFACE))).then_some(())
    })
    .context("route to the deleted interface still present")?;
    fv.sandbox.expect_traffic(
        "others after the delete",
        &[Check::v4("frontend", "backend", 8080, true)],
        SETTLE,
    )?;

    // Re-created: routes and settings died with the old interface; Felix
    // (which believes it programmed them) must notice and redo them.
    fv.sandbox
        .add_workload_unwired(LATE, LATE_IFACE, ip4(LATE_HOST), ip6(LATE_HOST), &PORTS)?;
    expect_programmed(&fv, "interface re-created")?;

    let metrics = fv.d()?.metrics()?;
    ensure!(
        metrics
            .lines()
            .any(|l| l.contains("monitor/interfaces") && l.contains("event")),
        "no interface monitor events in the metrics:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("felix_seam_ops_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    fv.stop()
}

fn run(what: &str, f: impl FnOnce() -> Result<()>) {
    if let Err(e) = f() {
        panic!("{what}: {e:#}");
    }
}

#[test]
fn late_and_recreated_interface_iptables() {
    felix_netns::require!(netns TOOLS);
    run("iptables", || late_interface(Backend::Iptables));
}

#[test]
fn late_and_recreated_interface_nftables() {
    felix_netns::require!(netns TOOLS);
    run("nftables", || late_interface(Backend::Nftables));
}

#[test]
fn late_and_recreated_interface_bpf() {
    felix_netns::require!(netns TOOLS);
    run("bpf", || late_interface(Backend::Bpf));
}
