//! The kernel seam: the one narrow gate every driver kernel operation passes through.
//!
//! A driver never talks to the kernel directly. Each operation (an `ipset restore`, an
//! `iptables-restore`, a netlink route add, a BPF map write...) is wrapped in
//! [`KernelSeam::op`] (or the actor-bound [`ActorSeam::op`]) with the driver's stable actor
//! name and a short operation name. The seam is where three cross-cutting concerns attach:
//!
//! * **fault injection** — a [`FaultRegistry`] holds armed [`Fault`]s; the next `count`
//!   operations matching `(target, op)` fail with [`SeamError::Injected`], panic, or stall for
//!   `delayMs` before running. `op = "*"` matches every operation of the target.
//! * **metrics** — every call is counted per `(actor, op)` with errors and total duration
//!   (rendered by [`crate::metrics::Metrics`] as `felix_seam_*` families).
//! * **tracing** — a `kernel_op` span carrying the `actor` and `op` fields wraps the call.
//!
//! Invariant: seam calls block the calling thread (the wrapped operation is synchronous and an
//! injected delay sleeps), so they must only run inside driver work, which the runtime executes
//! on the blocking pool — never on an arbiter thread.
//!
//! The registry's JSON form is the body of `POST /faults` in INTERFACES.md §4:
//! `{"target": "driver/ipsets-v4", "op": "restore", "action": "error", "count": 1, "delayMs": 0}`.
//! Components other than drivers may consult the same registry for their own debug knobs with
//! [`FaultRegistry::take`] (for example target `supervisor`, op `apply`, action `delay`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;

/// What an armed fault does to a matching operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultAction {
    /// The operation is not run and fails with [`SeamError::Injected`].
    Error,
    /// The calling thread panics (exercises supervision/restart).
    Panic,
    /// The calling thread sleeps `delayMs`, then the operation runs normally.
    Delay,
}

/// One armed fault, as accepted by `POST /faults` and listed by `GET /faults`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// Stable actor name, e.g. `driver/ipsets-v4` or `manager/endpoints-v4`.
    pub target: String,
    /// Operation name within that actor; `*` matches every operation.
    pub op: String,
    /// Effect on each matching operation.
    pub action: FaultAction,
    /// How many matching operations are affected (remaining count when listed).
    #[serde(default = "one")]
    pub count: u32,
    /// Stall length for [`FaultAction::Delay`], in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
}

fn one() -> u32 {
    1
}

/// A fault that fired for one operation (the registry already consumed one count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiredFault {
    /// The action to carry out.
    pub action: FaultAction,
    /// Stall length (only meaningful for [`FaultAction::Delay`]).
    pub delay: Duration,
}

/// Rejection of a fault definition.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    /// `target` or `op` is empty.
    #[error("fault target and op must be non-empty")]
    EmptyName,
    /// `count` is zero.
    #[error("fault count must be at least 1")]
    ZeroCount,
}

/// Shared list of armed faults. Cloning shares the list.
///
/// Invariant: every listed fault has `count >= 1`; a fault is removed when its last count
/// fires. Faults are matched in arming order, first match wins.
#[derive(Debug, Clone, Default)]
pub struct FaultRegistry {
    armed: Arc<Mutex<Vec<Fault>>>,
}

impl FaultRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `fault` after validating it.
    pub fn arm(&self, fault: Fault) -> Result<(), FaultError> {
        if fault.target.is_empty() || fault.op.is_empty() {
            return Err(FaultError::EmptyName);
        }
        if fault.count == 0 {
            return Err(FaultError::ZeroCount);
        }
        tracing::warn!(target_actor = %fault.target, op = %fault.op, action = ?fault.action,
            count = fault.count, "fault armed");
        self.armed.lock().push(fault);
        Ok(())
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        self.armed.lock().clear();
    }

    /// The armed faults with their remaining counts.
    pub fn list(&self) -> Vec<Fault> {
        self.armed.lock().clone()
    }

    /// If a fault matches `(actor, op)`, consumes one of its counts and returns it.
    pub fn take(&self, actor: &str, op: &str) -> Option<FiredFault> {
        let mut armed = self.armed.lock();
        let pos = armed
            .iter()
            .position(|f| f.target == actor && (f.op == "*" || f.op == op))?;
        let fault = &mut armed[pos];
        let fired = FiredFault {
            action: fault.action,
            delay: Duration::from_millis(fault.delay_ms),
        };
        fault.count -= 1;
        if fault.count == 0 {
            armed.remove(pos);
        }
        Some(fired)
    }
}

/// Error returned by a seam operation.
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    /// An armed fault made the operation fail without running it.
    #[error("{actor}: injected failure of kernel operation {op}")]
    Injected {
        /// Actor name.
        actor: String,
        /// Operation name.
        op: String,
    },
    /// The wrapped kernel operation itself failed.
    #[error("{actor}: kernel operation {op} failed: {source}")]
    Kernel {
        /// Actor name.
        actor: String,
        /// Operation name.
        op: String,
        /// The operation's own error (OS error, tool exit status, ...).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// The shared seam: fault registry plus metrics. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct KernelSeam {
    faults: FaultRegistry,
    metrics: Metrics,
}

impl KernelSeam {
    /// A seam consulting `faults` and recording into `metrics`.
    pub fn new(faults: FaultRegistry, metrics: Metrics) -> Self {
        Self { faults, metrics }
    }

    /// The fault registry this seam consults.
    pub fn faults(&self) -> &FaultRegistry {
        &self.faults
    }

    /// Runs one kernel operation `op` on behalf of `actor` through the seam.
    ///
    /// Applies a matching armed fault first (error: `f` is not run; panic: panics; delay:
    /// sleeps then runs `f`), then records count, error and duration metrics.
    pub fn op<T, E>(
        &self,
        actor: &str,
        op: &str,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, SeamError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let span = tracing::debug_span!("kernel_op", actor = actor, op = op);
        let _entered = span.enter();
        let start = Instant::now();
        if let Some(fired) = self.faults.take(actor, op) {
            match fired.action {
                FaultAction::Error => {
                    self.metrics
                        .record_seam_op(actor, op, start.elapsed(), false);
                    tracing::warn!("injected kernel operation failure");
                    return Err(SeamError::Injected {
                        actor: actor.to_string(),
                        op: op.to_string(),
                    });
                }
                FaultAction::Panic => {
                    self.metrics
                        .record_seam_op(actor, op, start.elapsed(), false);
                    panic!("{actor}: injected panic in kernel operation {op}");
                }
                FaultAction::Delay => {
                    tracing::warn!(delay_ms = fired.delay.as_millis() as u64, "injected delay");
                    std::thread::sleep(fired.delay);
                }
            }
        }
        let result = f();
        self.metrics
            .record_seam_op(actor, op, start.elapsed(), result.is_ok());
        result.map_err(|e| {
            tracing::debug!(error = %e, "kernel operation failed");
            SeamError::Kernel {
                actor: actor.to_string(),
                op: op.to_string(),
                source: Box::new(e),
            }
        })
    }

    /// A seam bound to one actor name.
    pub fn for_actor(&self, actor: &str) -> ActorSeam {
        ActorSeam {
            seam: self.clone(),
            actor: Arc::from(actor),
        }
    }
}

/// A [`KernelSeam`] bound to one actor; what a driver receives in `apply`.
#[derive(Debug, Clone)]
pub struct ActorSeam {
    seam: KernelSeam,
    actor: Arc<str>,
}

impl ActorSeam {
    /// The actor name this seam records under.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Runs kernel operation `op` through the seam (see [`KernelSeam::op`]).
    pub fn op<T, E>(&self, op: &str, f: impl FnOnce() -> Result<T, E>) -> Result<T, SeamError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        self.seam.op(&self.actor, op, f)
    }

    /// The underlying shared seam.
    pub fn shared(&self) -> &KernelSeam {
        &self.seam
    }

    /// Reports the chains this driver currently programs as drop-everything
    /// because the kernel refused them (replaces the previous report); shown
    /// in `/status` and as `felix_dataplane_rejected_chains{actor}`.
    pub fn report_rejected_chains(&self, chains: Vec<crate::status::RejectedChain>) {
        self.seam.metrics.set_rejected_chains(&self.actor, chains);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    #[test]
    fn fault_json_matches_admin_body() {
        let f: Fault = serde_json::from_str(
            r#"{"target":"driver/ipsets-v4","op":"restore","action":"delay","count":2,"delayMs":5}"#,
        )
        .unwrap();
        assert_eq!(f.action, FaultAction::Delay);
        assert_eq!(f.count, 2);
        assert_eq!(f.delay_ms, 5);
        let back = serde_json::to_value(&f).unwrap();
        assert_eq!(back["delayMs"], 5);
        assert_eq!(back["action"], "delay");
    }

    #[test]
    fn fault_fires_exactly_count_times_for_matching_op_only() {
        let reg = FaultRegistry::new();
        reg.arm(Fault {
            target: "driver/a".into(),
            op: "x".into(),
            action: FaultAction::Error,
            count: 2,
            delay_ms: 0,
        })
        .unwrap();
        let seam = KernelSeam::new(reg.clone(), Metrics::new());
        assert!(seam.op("driver/a", "y", || Ok::<_, Boom>(1)).is_ok());
        assert!(seam.op("driver/b", "x", || Ok::<_, Boom>(1)).is_ok());
        assert!(matches!(
            seam.op("driver/a", "x", || Ok::<_, Boom>(1)),
            Err(SeamError::Injected { .. })
        ));
        assert_eq!(reg.list()[0].count, 1);
        assert!(seam.op("driver/a", "x", || Ok::<_, Boom>(1)).is_err());
        assert!(reg.list().is_empty());
        assert_eq!(seam.op("driver/a", "x", || Ok::<_, Boom>(7)).unwrap(), 7);
    }

    #[test]
    fn kernel_error_is_wrapped_with_names() {
        let seam = KernelSeam::default();
        let err = seam
            .for_actor("driver/r")
            .op("add", || Err::<(), _>(Boom))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver/r: kernel operation add failed: boom"
        );
    }

    #[test]
    fn invalid_faults_are_rejected() {
        let reg = FaultRegistry::new();
        let mut f = Fault {
            target: "".into(),
            op: "*".into(),
            action: FaultAction::Panic,
            count: 1,
            delay_ms: 0,
        };
        assert_eq!(reg.arm(f.clone()), Err(FaultError::EmptyName));
        f.target = "driver/a".into();
        f.count = 0;
        assert_eq!(reg.arm(f), Err(FaultError::ZeroCount));
    }

    #[test]
    fn injected_panic_panics_with_names() {
        let reg = FaultRegistry::new();
        reg.arm(Fault {
            target: "driver/a".into(),
            op: "*".into(),
            action: FaultAction::Panic,
            count: 1,
            delay_ms: 0,
        })
        .unwrap();
        let seam = KernelSeam::new(reg, Metrics::new());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            seam.op("driver/a", "z", || Ok::<_, Boom>(()))
        }));
        assert!(r.is_err());
    }
}
