//! Retry pacing shared by the drivers that write kernel state (iptables,
//! nftables, ipsets): how many times a failed write is retried within one
//! apply, the doubling backoff between attempts, and the clock and sleep
//! those use, both injectable so that tests and fault injection run
//! without real waiting.
//!
//! Invariants: the first wait is `initial_backoff`; each later wait doubles
//! the previous one and never exceeds `max_backoff`; a driver makes at most
//! `1 + max_retries` attempts per apply.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a driver retries a failed kernel write; see the module docs.
#[derive(Clone)]
pub struct RetryPolicy {
    /// Retries after a failed attempt within one apply.
    pub max_retries: u32,
    /// First backoff; doubles per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Backoff cap.
    pub max_backoff: Duration,
    /// Sleeps between retries (injectable for tests).
    pub sleep: Arc<dyn Fn(Duration) + Send + Sync>,
    /// Clock (injectable for tests).
    pub now: Arc<dyn Fn() -> Instant + Send + Sync>,
}

impl Default for RetryPolicy {
    /// Upstream-like values: ten retries, 1 ms doubling to at most 1 s,
    /// real sleeps and the real clock.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_secs(1),
            sleep: Arc::new(std::thread::sleep),
            now: Arc::new(felix_actors::clock::real_now),
        }
    }
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .finish_non_exhaustive()
    }
}

impl RetryPolicy {
    /// A policy that never sleeps (tests).
    pub fn without_sleeping() -> Self {
        RetryPolicy {
            sleep: Arc::new(|_| {}),
            ..RetryPolicy::default()
        }
    }

    /// The backoff sequence for one apply.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            next: self.initial_backoff,
        }
    }

    /// Sleeps for `backoff`'s current wait, then doubles it (up to the
    /// cap).
    pub fn wait(&self, backoff: &mut Backoff) {
        (self.sleep)(backoff.next);
        backoff.next = (backoff.next * 2).min(self.max_backoff);
    }

    /// The current time from the policy's clock.
    pub fn now(&self) -> Instant {
        (self.now)()
    }
}

/// The state of one apply's retry waits (see [`RetryPolicy::backoff`]); it
/// holds no borrow, so a driver can keep it across calls on itself.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    next: Duration,
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn waits_double_up_to_the_cap() {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let s = slept.clone();
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(300),
            max_backoff: Duration::from_secs(1),
            sleep: Arc::new(move |d| s.lock().unwrap().push(d)),
            ..RetryPolicy::default()
        };
        let mut backoff = policy.backoff();
        for _ in 0..4 {
            policy.wait(&mut backoff);
        }
        let ms: Vec<u128> = slept
            .lock()
            .unwrap()
            .iter()
            .map(Duration::as_millis)
            .collect();
        assert_eq!(ms, [300, 600, 1000, 1000]);
        // A new apply starts again from the initial backoff.
        policy.wait(&mut policy.backoff());
        assert_eq!(
            slept.lock().unwrap().last(),
            Some(&Duration::from_millis(300))
        );
    }
}
