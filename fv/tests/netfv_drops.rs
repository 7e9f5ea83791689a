//! Dataplane FV, drop attribution on real traffic (iptables, nftables and eBPF mode, where
//! the policy interpreter reports into a ring buffer):
//! with `DropAttributionEnabled`, a packet denied by a policy's deny rule, by
//! a tier's end and by an endpoint with no allowing policy or profile is
//! reported by `felix admin drops`, naming the tier, policy and rule (or the
//! endpoint) and the workloads; with it off, `GET /drops` says so. The second
//! start also sets `IstioAmbientMode` (a graph option `felix run` reads at
//! start): the Istio calculator's IP set must be in the desired view; and
//! `LogFilePath`: the daemon's log lines also go to that file (its directory created); and
//! `UsageReportingEnabled`, which has no effect here: felix warns naming it.

use std::time::Duration;

use anyhow::{anyhow, ensure, Result};
use felix_fv::netfv::traffic::probe;
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, BPF_TOOLS, TOOLS};
use serde_json::Value;

const SETTLE: Duration = Duration::from_secs(20);

const POLICIES: &str = "apiVersion: projectcalico.org/v3\nkind: Tier
metadata:\n  name: security\nspec:\n  order: 100
---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy
metadata:\n  name: security.guard-db
spec:\n  tier: security\n  order: 10\n  selector: app == 'db'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    destination:\n      ports: [9090]
  - action: Deny\n    protocol: TCP\n    source:\n      selector: app == 'frontend'
  - action: Pass\n    source:\n      selector: app == 'backend'
---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: backend-only-api\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'backend'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    destination:\n      ports: [9090]
";

/// The first kept drop from `src` to `dst` (IPv4 strings), if any.
fn drop_between(drops: &Value, src: &str, dst: &str) -> Option<Value> {
    drops
        .as_array()?
        .iter()
        .rev()
        .find(|d| d["src"] == src && d["dst"] == dst)
        .cloned()
}

fn drops(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.ds.write("policies", POLICIES)?;
    fv.start(&[("FELIX_DROPATTRIBUTIONENABLED", "true")])?;
    fv.sandbox.expect_traffic(
        "policies applied",
        &[
            Check::v4("frontend", "db", 8080, false),
            Check::v4("frontend", "db", 9090, true),
            Check::v4("prom", "db", 8080, false),
            Check::v4("frontend", "backend", 8080, false),
        ],
        SETTLE,
    )?;
    let ns = |w: &str| -> Result<String> { Ok(fv.sandbox.workload(w)?.ns.name().to_string()) };
    let ip = |w: &str| -> Result<String> { Ok(fv.sandbox.workload(w)?.ip4.to_string()) };
    // One fresh denied connection attempt of each kind.
    for (from, to) in [("frontend", "db"), ("prom", "db"), ("frontend", "backend")] {
        let r = probe(&ns(from)?, fv.sandbox.workload(to)?.ip4.into(), 8080)?;
        ensure!(r.is_none(), "{from} -> {to}:8080 connected");
    }
    let (front, db, prom, back) = (ip("frontend")?, ip("db")?, ip("prom")?, ip("backend")?);
    let d = fv.d()?;
    let all = poll(SETTLE, || {
        let v = d.admin_json(&["drops"])?;
        [(&front, &db), (&prom, &db), (&front, &back)]
            .iter()
            .all(|(s, t)| drop_between(&v, s, t).is_some())
            .then_some(v)
    })
    .map_err(|e| {
        anyhow!(
            "drops not all reported ({e}): {:?}\n{}",
            d.admin_json(&["drops"]),
            d.log_tail(80)
        )
    })?;

    // A policy's deny rule: rule 1 of security.guard-db's ingress rules.
    let r = drop_between(&all, &front, &db).ok_or_else(|| anyhow!("no frontend->db"))?;
    ensure!(
        r["decidedBy"]
            == serde_json::json!({"kind": "rule", "tier": "security", "policy": "security.guard-db",
                                  "rule": 1, "action": "Deny", "direction": "ingress"}),
        "frontend->db: {r}"
    );
    ensure!(
        r["srcEndpoint"] == "shop/frontend" && r["dstEndpoint"] == "shop/db",
        "workload names: {r}"
    );
    ensure!(
        r["protocol"] == 6 && r["dstPort"] == 8080,
        "five-tuple: {r}"
    );
    // The end of tier security: no rule of guard-db matched prom.
    let r = drop_between(&all, &prom, &db).ok_or_else(|| anyhow!("no prom->db"))?;
    ensure!(
        r["decidedBy"]["kind"] == "tierDefault"
            && r["decidedBy"]["tier"] == "security"
            && r["decidedBy"]["endpoint"] == "shop/db",
        "prom->db: {r}"
    );
    // The end of tier default for backend.
    let r = drop_between(&all, &front, &back).ok_or_else(|| anyhow!("no frontend->backend"))?;
    ensure!(
        r["decidedBy"]["kind"] == "tierDefault" && r["decidedBy"]["tier"] == "default",
        "frontend->backend: {r}"
    );
    // `felix explain` agrees on each.
    for (s, t, kind) in [(&front, &db, "rule"), (&prom, &db, "tierDefault")] {
        let x = d.explain(&["--src", s, "--dst", t, "--dst-port", "8080"])?;
        let v: Value = serde_json::from_slice(&x.stdout).map_err(|e| {
            anyhow!(
                "explain {s}->{t}: {e}: {}",
                String::from_utf8_lossy(&x.stderr)
            )
        })?;
        ensure!(
            v["verdict"] == "deny" && v["ingress"]["decidedBy"]["kind"] == kind,
            "explain {s}->{t}: {v}"
        );
    }
    fv.stop()?;

    // Off: GET /drops says why there is nothing.
    let log_dir = tempfile::tempdir()?;
    let log_file = log_dir.path().join("calico/felix.log");
    fv.start(&[
        ("FELIX_ISTIOAMBIENTMODE", "Enabled"),
        ("FELIX_LOGFILEPATH", &log_file.to_string_lossy()),
        ("FELIX_USAGEREPORTINGENABLED", "false"),
    ])?;
    let log = fv.d()?.log_text();
    ensure!(
        log.contains("parameter UsageReportingEnabled has no effect in felix-rs")
            && !log.contains("parameter IstioAmbientMode has no effect")
            && !log.contains("parameter LogFilePath has no effect"),
        "no-effect warning missing: {}",
        fv.d()?.log_tail(20)
    );
    let in_file = std::fs::read_to_string(&log_file).unwrap_or_default();
    ensure!(
        in_file.contains("admin socket listening") && in_file.contains(" INFO "),
        "LogFilePath {}: the daemon's lines are not in the file: {in_file:?}",
        log_file.display()
    );
    let view = fv
        .d()?
        .admin_json(&["dataplane"])
        .ok_or_else(|| anyhow!("no dataplane view"))?;
    ensure!(
        view["ipSets"].get("all-istio-weps").is_some(),
        "IstioAmbientMode=Enabled: no all-istio-weps set in {}",
        view["ipSets"]
    );
    let out = fv.d()?.admin(&["drops"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2) && err.contains("DropAttributionEnabled"),
        "drops while off: {err}"
    );
    fv.stop()
}

fn run(backend: Backend) {
    if let Err(e) = drops(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn drop_attribution_names_the_rule_iptables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Iptables);
}

#[test]
fn drop_attribution_names_the_rule_nftables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Nftables);
}

#[test]
fn drop_attribution_names_the_rule_bpf() {
    felix_netns::require!(netns BPF_TOOLS);
    run(Backend::Bpf);
}
