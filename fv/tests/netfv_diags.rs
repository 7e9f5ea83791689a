//! Dataplane FV, diagnostics (iptables and nftables): on a settled node `GET /drift` says
//! every driver is in step with the kernel; after a foreign writer flushes one of felix's
//! chains, `felix admin drift` names that chain under the table driver, and asking did not
//! repair it (a read-back probe writes nothing); `felix admin diags` writes a bundle whose
//! every section is present and non-empty, with the configuration's sources, each driver's
//! read-back and the apply timings.

use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use felix_fv::netfv::kernel::iptables_save_tool;
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};
use felix_netns::Netns;
use serde_json::Value;

const SETTLE: Duration = Duration::from_secs(20);

const POLICY: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy
metadata:\n  name: db-ingress
spec:\n  selector: app == 'db'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    destination:\n      ports: [9090]
";

/// A foreign writer's flush of felix's `cali-FORWARD` chain (filter layer), in the flavour
/// the daemon programs.
fn flush_forward(node: &Netns, backend: Backend) -> Result<()> {
    match backend {
        Backend::Nftables => {
            node.exec(
                "nft",
                &["flush", "chain", "ip", "calico", "filter-cali-FORWARD"],
            )?;
        }
        _ => {
            let save = save_tool(node)?;
            let tool = save.trim_end_matches("-save");
            node.exec(tool, &["-t", "filter", "-F", "cali-FORWARD"])?;
        }
    }
    Ok(())
}

/// The iptables save tool holding our chains.
fn save_tool(node: &Netns) -> Result<String> {
    iptables_save_tool(node).ok_or_else(|| anyhow!("no iptables flavour holds our chains"))
}

/// The rules of felix's `cali-FORWARD` chain (filter layer).
fn forward_rules(node: &Netns, backend: Backend) -> Result<usize> {
    Ok(match backend {
        Backend::Nftables => node
            .exec(
                "nft",
                &["list", "chain", "ip", "calico", "filter-cali-FORWARD"],
            )?
            .lines()
            .filter(|l| {
                let l = l.trim();
                !l.is_empty() && !l.starts_with("table") && !l.starts_with("chain") && l != "}"
            })
            .count(),
        _ => node
            .exec(&save_tool(node)?, &["-t", "filter"])?
            .lines()
            .filter(|l| l.starts_with("-A cali-FORWARD "))
            .count(),
    })
}

fn diags(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.ds.write("policy", POLICY)?;
    // No periodic refresh: only a resync would repair what the foreign writer does.
    fv.start(&[
        ("FELIX_IPTABLESREFRESHINTERVAL", "0"),
        ("FELIX_DROPATTRIBUTIONENABLED", "true"),
        ("FELIX_LOGSEVERITYSCREEN", "Debug"),
    ])?;
    fv.sandbox.expect_traffic(
        "policy applied",
        &[
            Check::v4("frontend", "db", 8080, false),
            Check::v4("frontend", "db", 9090, true),
        ],
        SETTLE,
    )?;
    let d = fv
        .daemon
        .as_ref()
        .ok_or_else(|| anyhow!("daemon not running"))?;
    let drift = poll(SETTLE, || {
        d.admin_json(&["drift"]).filter(|v| v["inSync"] == true)
    })
    .map_err(|e| anyhow!("never in step ({e}): {:?}", d.admin_json(&["drift"])))?;
    let drivers = drift["drivers"]
        .as_object()
        .ok_or_else(|| anyhow!("no drivers in {drift}"))?;
    let table = backend.filter_driver();
    ensure!(
        drivers.contains_key(table) && drivers.len() >= 4,
        "drift lists too few drivers: {drift}"
    );

    // A foreign writer flushes one of our chains.
    let node = &fv.sandbox.node;
    ensure!(
        forward_rules(node, backend)? > 0,
        "cali-FORWARD has no rules to flush"
    );
    flush_forward(node, backend)?;
    let out = d.admin(&["drift"])?;
    ensure!(out.status.success(), "felix admin drift failed: {out:?}");
    let drift: Value = serde_json::from_slice(&out.stdout).context("drift JSON")?;
    ensure!(drift["inSync"] == false, "flushed chain not seen: {drift}");
    let changes = drift["drivers"][table]
        .as_array()
        .ok_or_else(|| anyhow!("no {table} in {drift}"))?;
    ensure!(
        changes.iter().any(|c| c["detail"]
            .as_str()
            .is_some_and(|t| t.contains("cali-FORWARD"))),
        "{table}'s drift does not name cali-FORWARD: {drift}"
    );
    let others_in_step = drift["drivers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(n, _)| n.as_str() != table)
        .all(|(_, v)| v.as_array().is_some_and(Vec::is_empty));
    ensure!(others_in_step, "other drivers drifted: {drift}");
    let after = forward_rules(node, backend)?;
    ensure!(
        after == 0,
        "the drift request wrote to the kernel: {after} rules back"
    );

    // The bundle.
    let dir = tempfile::tempdir()?;
    let out_dir = dir.path().join("bundle");
    let out = d.admin(&["diags", "--out", &out_dir.to_string_lossy()])?;
    ensure!(out.status.success(), "felix admin diags failed: {out:?}");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("manifest.json"))?)?;
    for (file, entry) in manifest["sections"]
        .as_object()
        .ok_or_else(|| anyhow!("manifest without sections: {manifest}"))?
    {
        ensure!(entry.get("error").is_none(), "section {file}: {entry}");
        let text = std::fs::read_to_string(out_dir.join(file))?;
        ensure!(text.trim().len() > 1, "section {file} is empty: {text:?}");
    }
    ensure!(
        manifest["sections"].as_object().map(|m| m.len()) == Some(10),
        "sections: {manifest}"
    );
    let read = |f: &str| -> Result<Value> {
        Ok(serde_json::from_str(&std::fs::read_to_string(
            out_dir.join(f),
        )?)?)
    };
    let config = read("config.json")?;
    ensure!(
        config["IptablesRefreshInterval"]["source"] == "environment"
            && config["IptablesRefreshInterval"]["value"] == "0s",
        "config sources: {}",
        config["IptablesRefreshInterval"]
    );
    let readback = read("readback.json")?;
    let actual = readback[table]["actual"]
        .as_array()
        .ok_or_else(|| anyhow!("no read-back of {table}"))?;
    ensure!(
        actual
            .iter()
            .any(|r| r["detail"].as_str().is_some_and(|t| t.contains("cali-"))),
        "{table}'s read-back shows none of our chains: {}",
        readback[table]
    );
    let timings = read("timings.json")?;
    ensure!(
        timings["applies"].as_array().is_some_and(|a| !a.is_empty())
            && timings["drivers"][table]["calls"].as_u64() > Some(0),
        "timings: {timings}"
    );
    let logs = std::fs::read_to_string(out_dir.join("logs.txt"))?;
    ensure!(logs.contains("admin socket listening"), "logs: {logs}");
    fv.stop()
}

fn run(backend: Backend) {
    if let Err(e) = diags(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn drift_names_a_flushed_chain_and_diags_bundle_is_complete_iptables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Iptables);
}

#[test]
fn drift_names_a_flushed_chain_and_diags_bundle_is_complete_nftables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Nftables);
}
