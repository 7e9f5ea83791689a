//! Dataplane FV, faults through the admin socket on real traffic, per
//! backend: apply errors injected into the filter-table driver are visible
//! (`/faults`, a failed `lastApply`, the seam error metric) and, once
//! cleared, the daemon converges to the new policy; a driver panic is
//! survived (`restarts: 1` in `/status`) and traffic stays correct.

use std::time::Duration;

use anyhow::{ensure, Result};
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};
use serde_json::Value;

const SETTLE: Duration = Duration::from_secs(20);

const BACKEND_INGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: backend-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'backend'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'frontend'\n";

const DB_INGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: db-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'db'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'backend'\n";

fn seam_errors(metrics: &str, actor: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("felix_seam_op_errors_total") && l.contains(&format!("actor=\"{actor}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn faults(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.start(&[])?;
    let driver = backend.policy_driver();
    fv.sandbox.expect_traffic(
        "before faults",
        &[
            Check::v4("db", "backend", 8080, true),
            Check::v4("frontend", "db", 8080, true),
        ],
        SETTLE,
    )?;

    // Fault targets: every actor of /status is listed, every driver with
    // `apply`; a misspelt target or operation is refused, naming the valid ones.
    let d = fv.d()?;
    let targets = d
        .admin_json(&["fault", "targets"])
        .ok_or_else(|| anyhow::anyhow!("no fault targets"))?;
    let status = d.status().unwrap_or_default();
    for a in status["actors"].as_array().into_iter().flatten() {
        let name = a["name"].as_str().unwrap_or_default();
        let ops = &targets[name];
        ensure!(
            ops.is_array(),
            "actor {name} missing from the fault targets: {targets}"
        );
        if name.starts_with("driver/") {
            ensure!(
                ops.as_array()
                    .is_some_and(|o| o.iter().any(|x| x == "apply")),
                "driver {name} has no apply op: {ops}"
            );
        }
    }
    let typo = format!("{driver}x");
    let out = d.admin(&[
        "fault", "add", "--target", &typo, "--op", "apply", "--action", "error",
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2) && err.contains(driver),
        "misspelt target: {err}"
    );
    let out = d.admin(&[
        "fault", "add", "--target", driver, "--op", "aply", "--action", "error",
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2) && err.contains("apply"),
        "misspelt op: {err}"
    );

    // Apply errors: every operation of the filter driver fails.
    let d = fv.d()?;
    let before_change = d.applies();
    d.add_fault(driver, "*", "error", 1000)?;
    let armed = d.admin_json(&["faults"]).unwrap_or_default();
    ensure!(
        armed.as_array().is_some_and(|a| a
            .iter()
            .any(|f| f["target"] == driver && f["action"] == "error")),
        "fault not listed: {armed}"
    );
    fv.ds.write("pol-backend", BACKEND_INGRESS)?;
    let d = fv.d()?;
    d.wait_status("a failed apply", |s| {
        (s["lastApply"]["ok"] == Value::Bool(false)).then_some(())
    })?;
    let errors = seam_errors(&d.metrics()?, driver);
    ensure!(errors > 0.0, "no seam errors counted for {driver}");
    // Not programmed while failing: db still reaches backend.
    fv.sandbox
        .expect_traffic_now("while failing", &[Check::v4("db", "backend", 8080, true)])?;

    let d = fv.d()?;
    d.clear_faults()?;
    ensure!(
        d.admin_json(&["faults"]) == Some(serde_json::json!([])),
        "faults not cleared"
    );
    d.wait_converged(before_change)?;
    fv.sandbox.expect_traffic(
        "converged after clearing",
        &[
            Check::v4("db", "backend", 8080, false),
            Check::v4("frontend", "backend", 8080, true),
            Check::v6("db", "backend", 9090, false),
        ],
        SETTLE,
    )?;

    // A driver panic: the actor is rebuilt, resyncs, and programs the next
    // change; the already programmed rules keep working.
    let d = fv.d()?;
    ensure!(
        d.restarts(driver) == Some(0),
        "unexpected restarts before the panic"
    );
    let before_change = d.applies();
    d.add_fault(driver, "*", "panic", 1)?;
    fv.ds.write("pol-db", DB_INGRESS)?;
    let d = fv.d()?;
    d.wait_status("restarts: 1", |s| {
        let a = s["actors"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == driver)?;
        (a["restarts"] == 1).then_some(())
    })?;
    d.wait_converged(before_change)?;
    fv.sandbox.expect_traffic(
        "after the driver panic",
        &[
            Check::v4("db", "backend", 8080, false),
            Check::v4("frontend", "backend", 8080, true),
            Check::v4("backend", "db", 8080, true),
            Check::v4("frontend", "db", 8080, false),
            Check::v6("frontend", "db", 8080, false),
        ],
        SETTLE,
    )?;
    let d = fv.d()?;
    ensure!(d.restarts(driver) == Some(1), "restart count changed again");
    fv.stop()
}

fn run(backend: Backend) {
    if let Err(e) = faults(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn admin_faults_iptables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Iptables);
}

#[test]
fn admin_faults_nftables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Nftables);
}

#[test]
fn admin_faults_bpf() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Bpf);
}
