//! The periodic conntrack scan of `driver/bpf` (upstream's 10 s `ScanPeriod`): expires
//! entries with upstream's timeouts, removes the entries approved on hooks felix no longer
//! programs (a deleted workload's flows), and publishes upstream's conntrack metric families.
//!
//! | family | type | meaning |
//! |---|---|---|
//! | `felix_bpf_conntrack_sweeps` | counter | scans made |
//! | `felix_bpf_conntrack_used` | gauge | entries visited by the last scan |
//! | `felix_bpf_conntrack_cleaned` | gauge | entries removed by the last scan |
//! | `felix_bpf_conntrack_cleaned_total` | counter | entries removed by all scans |
//! | `felix_bpf_conntrack_expired_total` | counter | removed, by `reason` |
//! | `felix_bpf_conntrack_capacity` | gauge | `BPFMapSizeConntrack` (felix-rs: `used / capacity` is the map's pressure) |

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use felix_actors::clock::SharedClock;
use felix_actors::Metrics;
use felix_bpf::conntrack::{monotonic_ns, ScanStats, Timeouts};
use felix_bpf::{BpfDataplane, BpfError};

/// Upstream's conntrack scan period.
pub const SCAN_PERIOD: Duration = Duration::from_secs(10);

/// The scan's schedule and its running totals.
#[derive(Debug)]
pub struct CtScanner {
    clock: SharedClock,
    period: Duration,
    last: Option<Instant>,
    timeouts: Timeouts,
    capacity: u32,
    sweeps: u64,
    last_stats: ScanStats,
    cleaned_total: u64,
    expired_total: BTreeMap<&'static str, u64>,
}

impl CtScanner {
    /// A scanner running every `period` on `clock`, for a map of `capacity` entries.
    pub fn new(clock: SharedClock, period: Duration, capacity: u32) -> Self {
        Self {
            clock,
            period,
            last: None,
            timeouts: Timeouts::default(),
            capacity,
            sweeps: 0,
            last_stats: ScanStats::default(),
            cleaned_total: 0,
            expired_total: BTreeMap::new(),
        }
    }

    /// Whether a scan is due (never scanned, or a period has passed).
    pub fn due(&self) -> bool {
        self.last
            .is_none_or(|t| self.clock.now().duration_since(t) >= self.period)
    }

    /// Scans `dp`'s conntrack: entries approved on a hook whose host-side ifindex is not in
    /// `programmed` go, as do those with an end in `gone_addrs` and expired ones. Publishes
    /// the families into `metrics`.
    pub fn run(
        &mut self,
        dp: &BpfDataplane,
        programmed: &BTreeSet<u32>,
        gone_addrs: &BTreeSet<IpAddr>,
        metrics: &Metrics,
    ) -> Result<ScanStats, BpfError> {
        let now = monotonic_ns(dp.ops())?;
        let stats = dp.conntrack().scan(
            dp.ops(),
            now,
            &self.timeouts,
            |i| !programmed.contains(&i),
            |a| gone_addrs.contains(&a),
        )?;
        self.last = Some(self.clock.now());
        self.sweeps += 1;
        self.cleaned_total += stats.cleaned() as u64;
        for (why, n) in &stats.removed {
            *self.expired_total.entry(why.label()).or_default() += *n as u64;
        }
        if stats.cleaned() > 0 {
            tracing::debug!(
                used = stats.used,
                cleaned = stats.cleaned(),
                "conntrack scan"
            );
        }
        self.last_stats = stats.clone();
        metrics.publish("driver/bpf conntrack", self.render());
        Ok(stats)
    }

    /// The families of the module doc.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        family(
            "felix_bpf_conntrack_sweeps",
            "counter",
            "Number of conntrack table sweeps made so far.",
            self.sweeps,
        );
        family(
            "felix_bpf_conntrack_used",
            "gauge",
            "Number of used entries visited during a conntrack table sweep.",
            self.last_stats.used as u64,
        );
        family(
            "felix_bpf_conntrack_cleaned",
            "gauge",
            "Number of entries cleaned during a conntrack table sweep.",
            self.last_stats.cleaned() as u64,
        );
        family(
            "felix_bpf_conntrack_cleaned_total",
            "counter",
            "Total number of entries cleaned during conntrack table sweeps.",
            self.cleaned_total,
        );
        family(
            "felix_bpf_conntrack_capacity",
            "gauge",
            "Capacity of the conntrack map (BPFMapSizeConntrack).",
            u64::from(self.capacity),
        );
        let _ = writeln!(
            out,
            "# HELP felix_bpf_conntrack_expired_total Total number of entries cleaned during \
             conntrack table sweeps, by reason.\n# TYPE felix_bpf_conntrack_expired_total counter"
        );
        for (reason, n) in &self.expired_total {
            let _ = writeln!(
                out,
                "felix_bpf_conntrack_expired_total{{reason=\"{reason}\"}} {n}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_actors::clock::{Clock as _, ManualClock};
    use std::sync::Arc;

    #[test]
    fn a_scan_is_due_first_and_then_once_per_period() {
        let clock = Arc::new(ManualClock::new());
        let mut s = CtScanner::new(clock.clone(), SCAN_PERIOD, 100);
        assert!(s.due());
        s.last = Some(clock.now());
        assert!(!s.due());
        clock.advance(Duration::from_secs(9));
        assert!(!s.due());
        clock.advance(Duration::from_secs(1));
        assert!(s.due());
        let text = s.render();
        assert!(text.contains("felix_bpf_conntrack_capacity 100"), "{text}");
        assert!(text.contains("# TYPE felix_bpf_conntrack_sweeps counter"));
    }
}
