//! External dataplane drivers, both directions (INTERFACES.md, "External dataplane driver"):
//!
//! * felix driving a test driver written in Python (`fv/external/test_driver.py`, bindings
//!   generated from `proto/felixbackend.proto` at test time): the message sequence felix
//!   sends (configuration first, sequence numbers from 0, in-sync once, the flush-order
//!   contract), the driver's status reports in `/status`, a change after in-sync; a driver
//!   that exits, and one that sends a malformed frame, stop felix with an error naming it.
//! * felix driving felix-rs's own dataplane as a second process (`felix-dataplane-driver`),
//!   iptables and nftables: policy on real traffic, the driver's status and endpoint status
//!   files, faults and read-back through felix's one admin socket, and the driver's death.
//! * `felix dataplane-driver` fed malformed input exits non-zero naming what was wrong.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use felix_fv::netfv::daemon::{felix_binary, Daemon};
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};
use serde_json::Value;

const SETTLE: Duration = Duration::from_secs(20);

const DENY_DB: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: db-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'db'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'backend'\n";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn read_report(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Waits for the daemon to exit; its exit status and log.
fn wait_exit(d: &mut Daemon, within: Duration) -> Result<(std::process::ExitStatus, String)> {
    let st = poll(within, || d.try_exit())
        .with_context(|| format!("felix did not exit:\n{}", d.log_tail(30)))?;
    Ok((st, d.log_text()))
}

fn start_with_test_driver(fv: &Fv, mode: &str, report: &Path) -> Result<Daemon> {
    let script = repo().join("fv/external/test_driver.py");
    let proto = repo().join("proto/felixbackend.proto");
    let (script, proto, report) = (
        script.to_string_lossy().into_owned(),
        proto.to_string_lossy().into_owned(),
        report.to_string_lossy().into_owned(),
    );
    Daemon::start(
        &fv.sandbox.node,
        &fv.ds.path(),
        fv.ds.scratch(),
        Backend::Iptables,
        &[
            ("FELIX_USEINTERNALDATAPLANEDRIVER", "false"),
            ("FELIX_DATAPLANEDRIVER", &script),
            ("FELIX_TEST_DRIVER_PROTO", &proto),
            ("FELIX_TEST_DRIVER_REPORT", &report),
            ("FELIX_TEST_DRIVER_MODE", mode),
        ],
    )
}

/// `/usr/bin/python3` imports the protobuf runtime and `protoc` runs.
fn python_protobuf() -> bool {
    let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
    ok(Command::new("/usr/bin/python3").args(["-c", "import google.protobuf"]))
        && ok(Command::new("protoc").arg("--version"))
}

fn done(r: Result<()>) {
    if let Err(e) = r {
        panic!("{e:#}");
    }
}

#[test]
fn felix_drives_a_python_driver_in_order_and_shows_its_reports() {
    felix_netns::require!(
        netns TOOLS,
        felix_netns::ensure(python_protobuf(), "python3-protobuf and protoc")
    );
    done(python_in_order());
}

fn python_in_order() -> Result<()> {
    let fv = Fv::standard(Backend::Iptables, &[])?;
    fv.ds.write("pol-db", DENY_DB)?;
    let report = fv.ds.scratch().join("driver-report.json");
    let mut d = start_with_test_driver(&fv, "normal", &report)?;

    let r = poll(Duration::from_secs(45), || {
        read_report(&report).filter(|r| r["inSyncCount"] == 1)
    })
    .with_context(|| format!("no in-sync report:\n{}", d.log_tail(30)))?;
    ensure!(r["firstType"] == "config_update", "{r}");
    ensure!(r["firstSeq"] == 0, "sequence numbers start at 0: {r}");
    ensure!(r["seqErrors"].as_array().is_some_and(Vec::is_empty), "{r}");
    ensure!(
        r["orderErrors"].as_array().is_some_and(Vec::is_empty),
        "{r}"
    );
    let weps = r["workloadEndpoints"].to_string();
    ensure!(weps.contains("shop/db") && weps.contains("ops/prom"), "{r}");
    ensure!(
        r["activePolicies"].to_string().contains("db-ingress"),
        "{r}"
    );

    // The driver's replies in /status.
    let st = d.wait_status("the driver's reports in /status", |s| {
        (s["driver"]["dataplaneInSync"] == true
            && s["driver"]["processStatus"]["uptime"].is_number()
            && s["driver"]["workloadEndpoints"]
                .as_array()
                .is_some_and(|a| a.len() >= 4 && a.iter().all(|e| e["status"] == "up")))
        .then(|| s.clone())
    })?;
    ensure!(st["dataplane"] == "external", "{st}");
    ensure!(st["inSync"] == true, "{st}");
    ensure!(st["driver"]["sequenceGaps"] == 0, "{st}");
    ensure!(
        d.log_text().contains("test-driver: in sync after"),
        "the driver's stdout is in felix's log"
    );

    // A change after in-sync reaches the driver, still in order.
    fv.ds.remove("pol-db")?;
    fv.ds.write(
        "pol-prom",
        &DENY_DB
            .replace("db-ingress", "prom-ingress")
            .replace("namespace: shop", "namespace: ops")
            .replace("'db'", "'prom'"),
    )?;
    let r = poll(Duration::from_secs(20), || {
        read_report(&report).filter(|r| {
            r["afterInSync"].as_u64().unwrap_or(0) > 0
                && !r["activePolicies"].to_string().contains("db-ingress")
                && r["activePolicies"].to_string().contains("prom-ingress")
        })
    })
    .with_context(|| {
        format!(
            "the change never reached the driver; its report: {}\nlog:\n{}",
            read_report(&report).unwrap_or_default(),
            d.log_tail(20)
        )
    })?;
    ensure!(
        r["orderErrors"].as_array().is_some_and(Vec::is_empty),
        "{r}"
    );
    ensure!(r["seqErrors"].as_array().is_some_and(Vec::is_empty), "{r}");
    d.stop()?;
    // felix closed the pipe: the driver saw a clean end of stream.
    let r = poll(Duration::from_secs(10), || {
        read_report(&report).filter(|r| r["error"].is_null() && r["inSyncCount"] == 1)
    })?;
    ensure!(r["messages"].as_u64().unwrap_or(0) > 10, "{r}");
    Ok(())
}

#[test]
fn a_driver_that_exits_or_sends_garbage_stops_felix_with_an_error() {
    felix_netns::require!(
        netns TOOLS,
        felix_netns::ensure(python_protobuf(), "python3-protobuf and protoc")
    );
    done(python_exit_and_garbage());
}

fn python_exit_and_garbage() -> Result<()> {
    let fv = Fv::standard(Backend::Iptables, &[])?;
    let report = fv.ds.scratch().join("exit-report.json");
    let mut d = start_with_test_driver(&fv, "exit", &report)?;
    let (st, log) = wait_exit(&mut d, Duration::from_secs(45))?;
    ensure!(!st.success(), "felix exited {st}");
    ensure!(
        log.contains("the dataplane driver exited") && log.contains("exiting with 3 as asked"),
        "{log}"
    );

    let report = fv.ds.scratch().join("garbage-report.json");
    let mut d = start_with_test_driver(&fv, "garbage", &report)?;
    let (st, log) = wait_exit(&mut d, Duration::from_secs(45))?;
    ensure!(!st.success(), "felix exited {st}");
    ensure!(
        log.contains("malformed message") && log.contains("does not decode as FromDataplane"),
        "{log}"
    );
    // The driver was stopped with felix (its report ends cleanly or by SIGTERM).
    ensure!(read_report(&report).is_some());
    Ok(())
}

/// felix-rs's dataplane in a second process: the same traffic results as the internal mode.
fn own_driver(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    let link = fv.ds.scratch().join("felix-dataplane-driver");
    std::os::unix::fs::symlink(felix_binary()?, &link)?;
    let link = link.to_string_lossy().into_owned();
    let status_prefix = fv.ds.scratch().to_string_lossy().into_owned();
    fv.start(&[
        ("FELIX_USEINTERNALDATAPLANEDRIVER", "false"),
        ("FELIX_DATAPLANEDRIVER", &link),
        ("FELIX_ENDPOINTSTATUSPATHPREFIX", &status_prefix),
    ])?;
    fv.apply("pol-db", DENY_DB)?;
    fv.sandbox.expect_traffic(
        "policy through the external driver",
        &[
            Check::v4("backend", "db", 8080, true),
            Check::v4("frontend", "db", 8080, false),
            Check::v6("frontend", "db", 8080, false),
            Check::v4("frontend", "backend", 8080, true),
        ],
        SETTLE,
    )?;
    let d = fv.d()?;
    let st = d.wait_status("the driver's endpoint status", |s| {
        (s["driver"]["dataplaneInSync"] == true
            && s["driver"]["workloadEndpoints"]
                .as_array()
                .is_some_and(|a| a.len() >= 4 && a.iter().all(|e| e["status"] == "up")))
        .then(|| s.clone())
    })?;
    ensure!(st["dataplane"] == "external", "{st}");
    ensure!(st["driver"]["dataplane"] == backend.status_name(), "{st}");
    ensure!(
        st["actors"].as_array().is_some_and(|a| a.len() > 3),
        "the driver's actors are in felix's /status: {st}"
    );
    // Endpoint status files, where upstream's CNI plugin reads them.
    let files = poll(Duration::from_secs(10), || {
        let n = std::fs::read_dir(fv.ds.scratch().join("endpoint-status"))
            .map(|rd| rd.count())
            .unwrap_or(0);
        (n >= 4).then_some(n)
    })
    .context("no endpoint status files")?;
    ensure!(files >= 4);
    // Faults through felix's socket reach the driver's actors; read-back is forwarded.
    let d = fv.d()?;
    d.add_fault(backend.filter_driver(), "apply", "error", 1)?;
    let listed = d.admin_json(&["faults"]).unwrap_or_default();
    ensure!(
        listed.to_string().contains(backend.filter_driver()),
        "{listed}"
    );
    d.clear_faults()?;
    let drift = d.admin(&["drift"])?;
    ensure!(drift.status.success(), "drift through felix: {drift:?}");
    let metrics = d.metrics()?;
    ensure!(
        metrics.contains("felix_int_dataplane_apply_time_seconds_count")
            && metrics.contains("felix_calc_graph_"),
        "one /metrics with both processes' families"
    );
    // The driver dies: felix stops with an error naming it.
    let pid = st["driver"]["pid"].as_u64().context("driver pid")?;
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(killed.success());
    let mut d = fv.daemon.take().context("daemon")?;
    let (st, log) = wait_exit(&mut d, Duration::from_secs(20))?;
    ensure!(!st.success(), "felix exited {st}");
    ensure!(log.contains("the dataplane driver exited"), "{log}");
    Ok(())
}

#[test]
fn felix_drives_its_own_dataplane_as_a_driver_iptables() {
    felix_netns::require!(netns TOOLS);
    done(own_driver(Backend::Iptables));
}

#[test]
fn felix_drives_its_own_dataplane_as_a_driver_nftables() {
    felix_netns::require!(netns TOOLS);
    done(own_driver(Backend::Nftables));
}

/// Runs `felix-dataplane-driver` with `input` on its descriptor 3; its exit code and stderr.
fn driver_fed(input: &[u8]) -> Result<(Option<i32>, String)> {
    let dir = tempfile::tempdir()?;
    let link = dir.path().join("felix-dataplane-driver");
    std::os::unix::fs::symlink(felix_binary()?, &link)?;
    let mut c = felix::dataplane::external::child::spawn(
        &link.to_string_lossy(),
        &[(
            "FELIXRS_DRIVER_ADMIN_SOCKET".to_string(),
            dir.path().join("d.sock").to_string_lossy().into_owned(),
        )],
    )?;
    c.to_driver.write_all(input)?;
    drop(c.to_driver);
    let mut err = String::new();
    c.stderr.read_to_string(&mut err)?;
    let st = c.child.wait()?;
    Ok((st.code(), err))
}

#[test]
fn the_driver_refuses_malformed_input_with_a_clear_error() -> Result<()> {
    // A length over the maximum.
    let (code, err) = driver_fed(&u64::MAX.to_le_bytes())?;
    ensure!(
        code == Some(1) && err.contains("over the maximum"),
        "{code:?}: {err}"
    );
    // A body cut short.
    let mut cut = 10u64.to_le_bytes().to_vec();
    cut.extend([0x0a, 0x00]);
    let (code, err) = driver_fed(&cut)?;
    ensure!(
        code == Some(1) && err.contains("body truncated"),
        "{code:?}: {err}"
    );
    // Bytes that are not protobuf.
    let mut bad = 3u64.to_le_bytes().to_vec();
    bad.extend([0x0f, 0xff, 0xff]);
    let (code, err) = driver_fed(&bad)?;
    ensure!(
        code == Some(1) && err.contains("does not decode as ToDataplane"),
        "{code:?}: {err}"
    );
    // A valid message that is not the configuration first.
    let mut first = Vec::new();
    felix::dataplane::external::frame::write_frame(
        &mut first,
        &felix_proto::ToDataplane {
            sequence_number: 0,
            payload: Some(felix_proto::to_dataplane::Payload::InSync(
                felix_proto::InSync {},
            )),
        },
    )?;
    let (code, err) = driver_fed(&first)?;
    ensure!(
        code == Some(2) && err.contains("must be a ConfigUpdate"),
        "{code:?}: {err}"
    );
    // An empty stream: felix went away before sending anything.
    let (code, err) = driver_fed(&[])?;
    ensure!(code == Some(0), "{code:?}: {err}");
    // Run directly without the pipes (the shell closes any 3 and 4 it inherited).
    let out = Command::new("sh")
        .args(["-c", "exec 3<&- 4>&-; exec \"$0\" dataplane-driver"])
        .arg(felix_binary()?)
        .stdin(Stdio::null())
        .output()?;
    if out.status.code() != Some(2) {
        bail!("without descriptors 3/4: {out:?}");
    }
    ensure!(String::from_utf8_lossy(&out.stderr).contains("descriptor 3"));
    Ok(())
}
