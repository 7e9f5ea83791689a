//! Time, injected: the clock that timing logic reads, so tests can drive it.
//!
//! Logic whose behaviour depends on time passing (the supervisor's restart window, health
//! timeouts, the interface monitor's resync schedule) reads a [`Clock`] it was given, never
//! the wall clock directly: tests then run it on a [`ManualClock`] and advance time in
//! steps instead of sleeping. The workspace's `clippy.toml` disallows `Instant::now()`
//! everywhere; code that only *measures* (metrics, benchmark figures) or bounds an I/O wait
//! calls [`real_now`], which says so where it is used.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A monotonic clock.
pub trait Clock: Send + Sync + Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        real_now()
    }
}

/// A shared clock handle; [`SystemClock`] by default.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// The real monotonic time, for measurements (durations in metrics and logs, benchmark
/// figures) and for bounding waits on I/O. Logic that a test must control takes a
/// [`Clock`] instead.
#[expect(
    clippy::disallowed_methods,
    reason = "the one sanctioned read of the real clock"
)]
pub fn real_now() -> Instant {
    Instant::now()
}

/// A clock that moves only when told to; cloning shares it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Instant>>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(real_now())),
        }
    }
}

impl ManualClock {
    /// A clock standing at the current real time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        *self.now.lock() += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.now.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.clone().advance(Duration::from_secs(90));
        assert_eq!(c.now() - t0, Duration::from_secs(90));
    }
}
