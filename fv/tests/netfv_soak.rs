//! Dataplane FV, the chaos soak (issue 26), one test per mode: 100
//! workloads with real traffic (new connections allowed and denied every
//! 50 ms, long-lived connections), the datastore churned, felix killed
//! (also in the middle of an apply), restarted and faulted, a foreign writer
//! beside it, and every invariant of `felix_fv::netfv::soak` checked; ends
//! with the kernel inventory compared with a fresh felix's.
//!
//! The tests pass their gate and then do nothing unless `FELIX_SOAK=1`:
//! `.ci/test` runs them in a step of their own, one mode at a time, against
//! a release felix (`FELIX_BIN`), since the bounds are those of the build
//! users run (see docs/reliability.md).
//!
//! Parameters (environment, defaults sized for CI): `FELIX_SOAK_SECONDS`
//! (chaos phase, 50), `FELIX_SOAK_SEED` (26), `FELIX_SOAK_CHURN_RATE`
//! (updates/s, 20), `FELIX_SOAK_KILL_INTERVAL_MS` (5000),
//! `FELIX_SOAK_WORKLOADS` (100), `FELIX_SOAK_MEMORY_SECONDS` (150),
//! `FELIX_SOAK_IDLE_SECONDS` (10) and the bounds (`FELIX_SOAK_CONVERGE_MS`,
//! `FELIX_SOAK_RECOVERY_MS`, ...; see `soak::Config::from_env`).

use felix_fv::netfv::soak::{self, Config};
use felix_fv::netfv::{Backend, TOOLS};

/// Tools beyond [`TOOLS`]: the foreign writer's.
const SOAK_TOOLS: &[&str] = &[
    "iptables-save",
    "ipset",
    "nft",
    "sysctl",
    "iptables-nft",
    "iptables-legacy",
    "iptables-nft-save",
    "iptables-legacy-save",
];

fn run(backend: Backend) {
    assert!(TOOLS.iter().all(|t| SOAK_TOOLS.contains(t)));
    if !soak::enabled() {
        eprintln!("soak {backend:?} not run: set FELIX_SOAK=1 (see docs/reliability.md)");
        return;
    }
    let cfg = Config::from_env();
    let report = match soak::soak(backend, &cfg) {
        Ok(r) => r,
        Err(e) => panic!("{backend:?} soak could not run: {e:#}"),
    };
    if !report.violations.is_empty() {
        let list: Vec<String> = report
            .violations
            .iter()
            .take(30)
            .map(|v| format!("[{}] {}", v.invariant, v.detail))
            .collect();
        panic!(
            "{backend:?} soak (seed {}): {} violation(s):\n{}",
            cfg.seed,
            report.violations.len(),
            list.join("\n")
        );
    }
    // The soak saw what it claims to check.
    assert!(
        report.judged_allowed > 0 && report.judged_denied > 0,
        "no probe judged"
    );
    assert!(report.roundtrips > 0, "no long-lived round trip");
    assert!(
        report.kills > 0 && !report.recoveries.is_empty(),
        "no kill survived"
    );
    assert!(
        report.foreign_checks > 0,
        "the foreign writer never checked"
    );
}

#[test]
fn soak_iptables() {
    felix_netns::require!(netns SOAK_TOOLS);
    run(Backend::Iptables);
}

#[test]
fn soak_nftables() {
    felix_netns::require!(netns SOAK_TOOLS);
    run(Backend::Nftables);
}

#[test]
fn soak_bpf() {
    felix_netns::require!(netns SOAK_TOOLS);
    run(Backend::Bpf);
}
