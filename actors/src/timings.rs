//! Apply timings per step and per driver (`GET /timings`, the diagnostics bundle).
//!
//! Fed by the supervisor's apply events (steps) and by each driver actor (the duration of
//! each reconcile call). Keeps the last [`KEPT_APPLIES`] applies and, per driver, counts,
//! total, last and maximum.
//!
//! Invariant: a step's duration runs from its `StepStarted` to its `StepFinished` event of
//! the same apply; a step whose apply ended without finishing it is not reported
//! (`step_durations_pair_start_and_finish_of_one_apply`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::apply::{ApplyEvent, ApplyEventKind, ApplyObserver, ApplyStep};
use crate::clock::real_now;

/// Applies kept.
pub const KEPT_APPLIES: usize = 20;
/// An apply or driver call at least this long is logged at info level ("slow apply", "slow
/// driver call"), so a soak's late change can be matched to what held it.
pub const SLOW_MS: f64 = 500.0;

/// One finished apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyTiming {
    /// Apply sequence number.
    pub seq: u64,
    /// Whether it fully succeeded.
    pub ok: bool,
    /// Its duration, milliseconds.
    pub total_ms: f64,
    /// Each step's duration, milliseconds, by step name.
    pub steps: BTreeMap<String, f64>,
}

/// One driver's reconcile calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverTiming {
    /// Calls so far.
    pub calls: u64,
    /// Their total duration, milliseconds.
    pub total_ms: f64,
    /// The last one's, milliseconds.
    pub last_ms: f64,
    /// The longest one's, milliseconds.
    pub max_ms: f64,
}

/// The `GET /timings` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TimingsReport {
    /// The latest applies, oldest first.
    pub applies: Vec<ApplyTiming>,
    /// Per driver.
    pub drivers: BTreeMap<String, DriverTiming>,
}

/// The apply in progress: its number, start, finished steps and open steps.
type Running = (
    u64,
    Instant,
    BTreeMap<String, f64>,
    BTreeMap<&'static str, Instant>,
);

#[derive(Default)]
struct State {
    applies: VecDeque<ApplyTiming>,
    current: Option<Running>,
    drivers: BTreeMap<String, DriverTiming>,
}

/// The shared recorder. Cloning shares it.
#[derive(Clone, Default)]
pub struct ApplyTimings {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ApplyTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplyTimings").finish_non_exhaustive()
    }
}

fn step_name(s: ApplyStep) -> &'static str {
    match s {
        ApplyStep::Resolution => "resolution",
        ApplyStep::Programming => "programming",
        ApplyStep::IpSets => "ipSets",
        ApplyStep::VxlanFdb => "vxlanFdb",
        ApplyStep::Routes => "routes",
        ApplyStep::Tables => "tables",
        ApplyStep::IpSetDeletions => "ipSetDeletions",
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl ApplyTimings {
    /// Records one apply event at time `now`.
    pub fn on_event_at(&self, e: &ApplyEvent, now: Instant) {
        let mut st = self.state.lock();
        match e.kind {
            ApplyEventKind::Started => {
                st.current = Some((e.seq, now, BTreeMap::new(), BTreeMap::new()));
            }
            ApplyEventKind::StepStarted(step) => {
                if let Some((seq, _, _, open)) = st.current.as_mut() {
                    if *seq == e.seq {
                        open.insert(step_name(step), now);
                    }
                }
            }
            ApplyEventKind::StepFinished(step) => {
                if let Some((seq, _, steps, open)) = st.current.as_mut() {
                    if *seq == e.seq {
                        if let Some(t0) = open.remove(step_name(step)) {
                            steps.insert(step_name(step).to_string(), ms(now - t0));
                        }
                    }
                }
            }
            ApplyEventKind::Finished { ok } => {
                if let Some((seq, t0, steps, _)) = st.current.take() {
                    if seq == e.seq {
                        if st.applies.len() == KEPT_APPLIES {
                            st.applies.pop_front();
                        }
                        let total_ms = ms(now - t0);
                        if total_ms >= SLOW_MS {
                            tracing::info!(seq, ok, total_ms, ?steps, "slow apply");
                        } else {
                            tracing::debug!(seq, ok, total_ms, ?steps, "apply finished");
                        }
                        st.applies.push_back(ApplyTiming {
                            seq,
                            ok,
                            total_ms,
                            steps,
                        });
                    }
                }
            }
        }
    }

    /// An observer recording every event at the real time.
    pub fn observer(&self) -> ApplyObserver {
        let me = self.clone();
        Arc::new(move |e: &ApplyEvent| me.on_event_at(e, real_now()))
    }

    /// Records one reconcile call of `driver` that took `took`.
    pub fn driver_call(&self, driver: &str, took: Duration) {
        let mut st = self.state.lock();
        let t = st.drivers.entry(driver.to_string()).or_default();
        let m = ms(took);
        if m >= SLOW_MS {
            tracing::info!(driver, ms = m, "slow driver call");
        } else {
            tracing::debug!(driver, ms = m, "driver call");
        }
        t.calls += 1;
        t.total_ms += m;
        t.last_ms = m;
        t.max_ms = t.max_ms.max(m);
    }

    /// What has been recorded.
    pub fn report(&self) -> TimingsReport {
        let st = self.state.lock();
        TimingsReport {
            applies: st.applies.iter().cloned().collect(),
            drivers: st.drivers.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_durations_pair_start_and_finish_of_one_apply() {
        let t = ApplyTimings::default();
        let t0 = real_now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ev = |seq, kind| ApplyEvent { seq, kind };
        t.on_event_at(&ev(1, ApplyEventKind::Started), at(0));
        t.on_event_at(
            &ev(1, ApplyEventKind::StepStarted(ApplyStep::Tables)),
            at(2),
        );
        t.on_event_at(
            &ev(1, ApplyEventKind::StepStarted(ApplyStep::Routes)),
            at(3),
        );
        t.on_event_at(
            &ev(1, ApplyEventKind::StepFinished(ApplyStep::Tables)),
            at(12),
        );
        // A finish of another apply's step is not this apply's.
        t.on_event_at(
            &ev(9, ApplyEventKind::StepFinished(ApplyStep::Routes)),
            at(13),
        );
        t.on_event_at(&ev(1, ApplyEventKind::Finished { ok: true }), at(20));
        t.driver_call("driver/a", Duration::from_millis(4));
        t.driver_call("driver/a", Duration::from_millis(2));
        let r = t.report();
        assert_eq!(r.applies.len(), 1);
        let a = &r.applies[0];
        assert_eq!((a.seq, a.ok), (1, true));
        assert!((a.total_ms - 20.0).abs() < 1e-6);
        assert_eq!(a.steps.len(), 1, "routes never finished: {:?}", a.steps);
        assert!((a.steps["tables"] - 10.0).abs() < 1e-6);
        let d = &r.drivers["driver/a"];
        assert_eq!(d.calls, 2);
        assert!((d.total_ms - 6.0).abs() < 1e-6 && (d.max_ms - 4.0).abs() < 1e-6);
        assert!((d.last_ms - 2.0).abs() < 1e-6);
    }
}
