//! Violations and figures of one soak.
//!
//! Invariants: every violation names its invariant, the flow or object, the
//! instant (relative to the soak's start) and the chaos events around it;
//! figures are counted where they are observed, never derived from the
//! configuration.

use std::fmt::Write as _;
use std::time::Duration;

/// One broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The invariant (`denied-never-connects`, ...).
    pub invariant: &'static str,
    /// What, where and when.
    pub detail: String,
}

/// Everything a soak measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Broken invariants, in the order found.
    pub violations: Vec<Violation>,
    /// New-connection probes started.
    pub probes: u64,
    /// Probes judged against an allowed verdict.
    pub judged_allowed: u64,
    /// Probes judged against a denied verdict.
    pub judged_denied: u64,
    /// Probes whose verdict changed during the probe or was not due yet.
    pub unjudged: u64,
    /// Denied probes that connected.
    pub denied_passed: u64,
    /// Allowed probes that did not connect.
    pub allowed_failed: u64,
    /// Allowed probes (due) that did not connect, started while felix was
    /// down or restarting (not judged).
    pub allowed_failed_while_down: u64,
    /// Round trips on long-lived connections.
    pub roundtrips: u64,
    /// Long-lived connections reset or stalled.
    pub resets: u64,
    /// Longest round trip on a long-lived connection.
    pub max_roundtrip: Duration,
    /// SIGKILLs and SIGTERM restarts survived.
    pub kills: u64,
    /// Of those, SIGKILLs while an apply was held open.
    pub mid_apply_kills: u64,
    /// Faults armed (errors, panics, delays).
    pub faults: u64,
    /// Start to settled dataplane, per restart.
    pub recoveries: Vec<Duration>,
    /// Datastore updates made.
    pub updates: u64,
    /// Foreign-writer mutations made.
    pub foreign_ops: u64,
    /// Foreign-writer full checks made.
    pub foreign_checks: u64,
    /// Seam errors per second under a persistent fault, per pacing check.
    pub fault_retry_rates: Vec<(String, f64)>,
    /// felix's CPU (fraction of a core) under a persistent fault.
    pub fault_cpu: Vec<f64>,
    /// RSS (KiB) at the first sample after the warm-up and at the end of the memory phase.
    pub rss_kib: (u64, u64),
    /// RSS growth per hour-equivalent of churn, percent.
    pub rss_growth_pct_per_hour_eq: f64,
    /// RSS with no endpoint and with every endpoint (KiB), same process.
    pub rss_endpoints: (u64, u64, usize),
    /// Idle CPU, fraction of a core.
    pub idle_cpu: f64,
    /// Kernel objects compared in the final inventory.
    pub inventory_items: usize,
}

impl Report {
    /// Records a violation.
    pub fn violate(&mut self, invariant: &'static str, detail: impl Into<String>) {
        let detail = detail.into();
        eprintln!("soak violation [{invariant}]: {detail}");
        self.violations.push(Violation { invariant, detail });
    }

    /// Recovery times (min, median, max).
    pub fn recovery_stats(&self) -> (Duration, Duration, Duration) {
        let mut r = self.recoveries.clone();
        r.sort();
        if r.is_empty() {
            return (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        }
        (r[0], r[r.len() / 2], r[r.len() - 1])
    }

    /// The one-line summary of figures.
    pub fn summary(&self, mode: &str, secs: f64) -> String {
        let (min, med, max) = self.recovery_stats();
        let retry = self
            .fault_retry_rates
            .iter()
            .map(|(a, r)| format!("{a} {r:.1}/s"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut s = String::new();
        let _ = write!(
            s,
            "soak {mode}: {secs:.0} s, {} updates, {} probes ({} judged allowed, {} judged denied, \
             {} not judged), denied probes that passed {}, allowed probes that failed {} (while felix was down: {}), \
             long-lived round trips {} (max {} ms), resets/stalls {}, kills survived {} \
             ({} mid-apply), faults {}, recovery min/median/max {}/{}/{} ms, foreign ops {} \
             (checks {}), retries under persistent fault [{retry}], RSS start/end {}/{} KiB \
             ({:+.2} %/hour-eq), RSS 0/{} endpoints {}/{} KiB ({:.1} KiB/endpoint), idle CPU {:.2} %, \
             inventory {} items, violations {}",
            self.updates,
            self.probes,
            self.judged_allowed,
            self.judged_denied,
            self.unjudged,
            self.denied_passed,
            self.allowed_failed,
            self.allowed_failed_while_down,
            self.roundtrips,
            self.max_roundtrip.as_millis(),
            self.resets,
            self.kills,
            self.mid_apply_kills,
            self.faults,
            min.as_millis(),
            med.as_millis(),
            max.as_millis(),
            self.foreign_ops,
            self.foreign_checks,
            self.rss_kib.0,
            self.rss_kib.1,
            self.rss_growth_pct_per_hour_eq,
            self.rss_endpoints.2,
            self.rss_endpoints.0,
            self.rss_endpoints.1,
            self.per_endpoint_kib(),
            self.idle_cpu * 100.0,
            self.inventory_items,
            self.violations.len(),
        );
        s
    }

    /// RSS per endpoint (KiB), from the two start-of-soak samples.
    pub fn per_endpoint_kib(&self) -> f64 {
        let (zero, all, n) = self.rss_endpoints;
        if n == 0 {
            return 0.0;
        }
        (all as f64 - zero as f64) / n as f64
    }
}
