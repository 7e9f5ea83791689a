//! Upstream's failure simulations for testing the watchdogs around Felix:
//!
//! | parameter | effect here |
//! |---|---|
//! | `DebugSimulateCalcGraphHangAfter` | the calc loop stops (no input consumed, no flush, no health report) once the [`HangSwitch`] is due; its `calc-graph` liveness then times out |
//! | `DebugSimulateDataplaneHangAfter` | the supervisor stops applying and reporting (`SupervisorConfig::debug_hang_after`); its `dataplane` liveness times out |
//! | `DebugSimulateDataplaneApplyDelay` | every apply first waits that long (`SupervisorConfig::debug_apply_delay`) |
//! | `DebugPanicAfter` | [`spawn_timer`] tells the daemon to stop; `felix run` exits non-zero naming the setting |
//!
//! 0 (the default) turns each off. Durations count from the start of the dataplane, when
//! the full configuration (local and datastore) is known; each set one is announced there
//! by a warning ([`DebugSim::warn_at_start`]). A hung loop still honours the daemon's stop
//! flag, so a simulated hang never blocks a clean shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use felix_actors::clock::SharedClock;
use felix_config::Config;
use parking_lot::Mutex;

/// The debug simulations a configuration asks for (`None`: off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DebugSim {
    /// `DebugSimulateCalcGraphHangAfter`.
    pub calc_hang_after: Option<Duration>,
    /// `DebugSimulateDataplaneHangAfter`.
    pub dataplane_hang_after: Option<Duration>,
    /// `DebugSimulateDataplaneApplyDelay`.
    pub apply_delay: Option<Duration>,
    /// `DebugPanicAfter`.
    pub panic_after: Option<Duration>,
}

impl DebugSim {
    /// The simulations `cfg` sets (a zero duration is off).
    pub fn from_config(cfg: &Config) -> Self {
        let on = |d: Duration| (!d.is_zero()).then_some(d);
        DebugSim {
            calc_hang_after: on(cfg.debug_simulate_calc_graph_hang_after()),
            dataplane_hang_after: on(cfg.debug_simulate_dataplane_hang_after()),
            apply_delay: on(cfg.debug_simulate_dataplane_apply_delay()),
            panic_after: on(cfg.debug_panic_after()),
        }
    }

    /// The set ones, by parameter name, in a fixed order.
    pub fn active(&self) -> Vec<(&'static str, Duration)> {
        [
            ("DebugSimulateCalcGraphHangAfter", self.calc_hang_after),
            ("DebugSimulateDataplaneHangAfter", self.dataplane_hang_after),
            ("DebugSimulateDataplaneApplyDelay", self.apply_delay),
            ("DebugPanicAfter", self.panic_after),
        ]
        .into_iter()
        .filter_map(|(n, d)| d.map(|d| (n, d)))
        .collect()
    }

    /// Logs one warning per set simulation.
    pub fn warn_at_start(&self) {
        for (name, d) in self.active() {
            tracing::warn!(
                parameter = name,
                after = ?d,
                "{name} is set: felix will deliberately misbehave (a debugging aid; never set it in production)"
            );
        }
    }
}

/// A deadline armed once, possibly from another thread, compared with an
/// injected clock's reading. Unarmed, it is never due.
#[derive(Debug, Clone, Default)]
pub struct HangSwitch(Arc<Mutex<Option<Instant>>>);

impl HangSwitch {
    /// Makes the switch due from `at` on.
    pub fn arm(&self, at: Instant) {
        *self.0.lock() = Some(at);
    }

    /// Whether the switch is armed and `now` is at or past its deadline.
    pub fn due(&self, now: Instant) -> bool {
        self.0.lock().is_some_and(|at| now >= at)
    }
}

/// Starts a thread calling `fire` once `after` has passed on `clock`
/// (checked every `poll`), unless `stop` is set first (then it ends
/// without firing).
pub fn spawn_timer(
    name: &str,
    after: Duration,
    clock: SharedClock,
    poll: Duration,
    stop: Arc<AtomicBool>,
    fire: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    let deadline = clock.now() + after;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let now = clock.now();
            if now >= deadline {
                fire();
                return;
            }
            std::thread::sleep(poll.min(deadline - now));
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_actors::clock::{Clock, ManualClock};
    use felix_config::Source;
    use std::collections::BTreeMap;
    use std::sync::mpsc;

    #[test]
    fn zero_is_off_and_set_durations_are_listed_by_name() {
        let (cfg, _) = Config::build(&[]);
        assert_eq!(DebugSim::from_config(&cfg), DebugSim::default());
        assert!(DebugSim::default().active().is_empty());
        let env = BTreeMap::from([
            ("DebugPanicAfter".to_string(), "60".to_string()),
            (
                "DebugSimulateDataplaneApplyDelay".to_string(),
                "2".to_string(),
            ),
        ]);
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        let sim = DebugSim::from_config(&cfg);
        assert_eq!(
            sim.active(),
            vec![
                ("DebugSimulateDataplaneApplyDelay", Duration::from_secs(2)),
                ("DebugPanicAfter", Duration::from_secs(60)),
            ]
        );
    }

    #[test]
    fn hang_switch_is_due_only_once_armed_and_past_its_deadline() {
        let clock = ManualClock::new();
        let s = HangSwitch::default();
        assert!(!s.due(clock.now()));
        s.clone().arm(clock.now() + Duration::from_secs(10));
        assert!(!s.due(clock.now()));
        clock.advance(Duration::from_secs(10));
        assert!(s.due(clock.now()));
    }

    /// `DebugPanicAfter`'s timer fires only once its time has passed on the
    /// injected clock, and a stop before that ends it without firing.
    #[test]
    fn timer_fires_after_its_duration_and_not_once_stopped() {
        let clock = ManualClock::new();
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let t = spawn_timer(
            "test-timer",
            Duration::from_secs(60),
            Arc::new(clock.clone()),
            Duration::from_millis(5),
            stop.clone(),
            move || {
                let _ = tx.send(());
            },
        )
        .unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        clock.advance(Duration::from_secs(61));
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
        t.join().unwrap();

        let (tx, rx) = mpsc::channel::<()>();
        stop.store(true, Ordering::Release);
        let t = spawn_timer(
            "test-timer",
            Duration::from_secs(60),
            Arc::new(clock.clone()),
            Duration::from_millis(5),
            stop.clone(),
            move || {
                let _ = tx.send(());
            },
        )
        .unwrap();
        clock.advance(Duration::from_secs(61));
        t.join().unwrap();
        assert!(rx.try_recv().is_err(), "a stopped timer never fires");
    }
}
