//! The seam: the one gate every kernel operation of the dataplane passes through.
//!
//! One concept, one name per layer:
//!
//! | layer | type | what it is |
//! |---|---|---|
//! | runtime (this crate) | [`Seam`] | the shared gate: fault registry + metrics; cheap to clone |
//! | runtime (this crate) | [`ActorSeam`] | the gate bound to one actor name; every driver and the interface monitor hold one |
//! | dataplane (`felix::dataplane::kernel`) | `CommandRunner` | what actually runs a command behind the gate (real processes, or a scripted fake in tests) |
//! | dataplane | `Commands` | a driver's command handle: an [`ActorSeam`] plus a `CommandRunner` |
//!
//! A driver never talks to the kernel directly. Each operation (an `ipset restore`, an
//! `iptables-restore`, a netlink dump, a BPF syscall) is one call of [`ActorSeam::op`] with a
//! short operation name, made on the thread that performs it (no thread-local, no side
//! channel). Three cross-cutting concerns attach there:
//!
//! * **fault injection**: a [`FaultRegistry`] holds armed [`Fault`]s; the next `count`
//!   operations matching `(target, op)` fail with [`Injected`], panic, or stall for `delayMs`
//!   before running. `op = "*"` matches every operation of the target.
//! * **metrics**: every call is counted per `(actor, op)` with errors and total duration
//!   (rendered by [`crate::metrics::Metrics`] as `felix_seam_*` families).
//! * **tracing**: a `kernel_op` span carrying the `actor` and `op` fields wraps the call.
//!
//! How a test fakes the kernel: build the driver over a scripted `CommandRunner` (or any
//! closure passed to [`ActorSeam::op`]) and an [`ActorSeam`] from [`Seam::default`]; arm faults
//! on that seam's registry to fail the next N calls.
//!
//! Errors stay typed: [`ActorSeam::op`] returns the operation's own error type, which must be
//! able to represent an injected failure (`E: From<Injected>`), so the caller keeps the failing
//! operation and its OS error up to the edge.
//!
//! Invariant: seam calls block the calling thread (the wrapped operation is synchronous and an
//! injected delay sleeps), so they must only run inside driver work, which the runtime executes
//! on the blocking pool, never on an arbiter thread.
//!
//! The registry's JSON form is the body of `POST /faults` in INTERFACES.md §4:
//! `{"target": "driver/ipsets-v4", "op": "restore", "action": "error", "count": 1, "delayMs": 0}`.
//! Components other than drivers may consult the same registry for their own debug knobs with
//! [`FaultRegistry::take`] (for example target `supervisor`, op `apply`, action `delay`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::readback::Recording;

/// What an armed fault does to a matching operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultAction {
    /// The operation is not run and fails with [`Injected`].
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
    /// No actor of that name.
    #[error("no actor {target:?}; the actors are: {valid}")]
    UnknownTarget {
        /// The name given.
        target: String,
        /// The actor names, comma-separated.
        valid: String,
    },
    /// The actor never performs that operation.
    #[error("actor {target:?} has no operation {op:?}; its operations are: {valid}")]
    UnknownOp {
        /// The actor.
        target: String,
        /// The operation given.
        op: String,
        /// Its operations, comma-separated (with `*`).
        valid: String,
    },
}

/// Actor name -> the operations it can perform (what `GET /faults/targets` lists).
type Catalog = BTreeMap<String, BTreeSet<String>>;

/// Shared list of armed faults, and the catalog of actors and their operations. Cloning
/// shares both.
///
/// Invariants:
/// * every listed fault has `count >= 1`; a fault is removed when its last count fires.
///   Faults are matched in arming order, first match wins;
/// * once any actor is declared, a fault is armed only for a declared actor and an operation
///   it declared (or `*`), so an armed fault can fire
///   (`a_fault_for_an_unknown_actor_or_operation_is_refused_listing_the_valid_ones`);
/// * an operation an actor runs through the seam without having declared it is added to its
///   catalog when first run, with a warning (the declarations are kept complete by that
///   warning, never by refusing the operation).
#[derive(Debug, Clone, Default)]
pub struct FaultRegistry {
    armed: Arc<Mutex<Vec<Fault>>>,
    catalog: Arc<Mutex<Catalog>>,
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
        {
            let catalog = self.catalog.lock();
            if !catalog.is_empty() {
                let join = |it: &mut dyn Iterator<Item = &String>| {
                    it.map(String::as_str).collect::<Vec<_>>().join(", ")
                };
                let Some(ops) = catalog.get(&fault.target) else {
                    return Err(FaultError::UnknownTarget {
                        target: fault.target,
                        valid: join(&mut catalog.keys()),
                    });
                };
                if fault.op != "*" && !ops.contains(&fault.op) {
                    return Err(FaultError::UnknownOp {
                        target: fault.target,
                        op: fault.op,
                        valid: format!("*, {}", join(&mut ops.iter())),
                    });
                }
            }
        }
        tracing::warn!(target_actor = %fault.target, op = %fault.op, action = ?fault.action,
            count = fault.count, "fault armed");
        self.armed.lock().push(fault);
        Ok(())
    }

    /// Declares that `actor` exists and may perform `ops` (adds to what it declared before).
    pub fn declare(&self, actor: &str, ops: &[&str]) {
        let mut catalog = self.catalog.lock();
        let set = catalog.entry(actor.to_string()).or_default();
        set.extend(ops.iter().map(|o| o.to_string()));
    }

    /// Every declared actor and its operations, `*` first (`GET /faults/targets`).
    pub fn targets(&self) -> BTreeMap<String, Vec<String>> {
        self.catalog
            .lock()
            .iter()
            .map(|(a, ops)| {
                let mut v = vec!["*".to_string()];
                v.extend(ops.iter().cloned());
                (a.clone(), v)
            })
            .collect()
    }

    /// Records that `actor` ran `op`: an operation it never declared is added (see the
    /// type's invariants).
    fn note(&self, actor: &str, op: &str) {
        let mut catalog = self.catalog.lock();
        if catalog.is_empty() {
            return;
        }
        let ops = catalog.entry(actor.to_string()).or_default();
        if !ops.contains(op) {
            tracing::warn!(
                actor,
                op,
                "operation not declared by its actor; added to the fault targets"
            );
            ops.insert(op.to_string());
        }
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

/// An operation that an armed fault made fail without running it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{actor}: injected failure of operation {op}")]
pub struct Injected {
    /// Actor name.
    pub actor: Arc<str>,
    /// Operation name.
    pub op: String,
}

/// The shared seam: fault registry plus metrics. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Seam {
    faults: FaultRegistry,
    metrics: Metrics,
}

impl Seam {
    /// A seam consulting `faults` and recording into `metrics`.
    pub fn new(faults: FaultRegistry, metrics: Metrics) -> Self {
        Self { faults, metrics }
    }

    /// The fault registry this seam consults.
    pub fn faults(&self) -> &FaultRegistry {
        &self.faults
    }

    /// The metrics registry the seam records into (also where actors publish families).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The seam bound to one actor name.
    pub fn for_actor(&self, actor: &str) -> ActorSeam {
        ActorSeam {
            seam: self.clone(),
            actor: Arc::from(actor),
            recording: None,
        }
    }
}

/// A [`Seam`] bound to one actor: what a driver (or the interface monitor) holds.
#[derive(Debug, Clone)]
pub struct ActorSeam {
    seam: Seam,
    actor: Arc<str>,
    /// Set on a read-back probe's copy: writes are recorded, not run (see
    /// [`crate::readback`]).
    recording: Option<Recording>,
}

impl Default for ActorSeam {
    /// A seam of its own (no armed faults, private metrics) for actor `test`.
    fn default() -> Self {
        Seam::default().for_actor("test")
    }
}

impl ActorSeam {
    /// The actor name this seam records under.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// The same shared seam under another actor name.
    pub fn renamed(&self, actor: &str) -> ActorSeam {
        ActorSeam {
            recording: self.recording.clone(),
            ..self.seam.for_actor(actor)
        }
    }

    /// A copy of this seam for a read-back probe, and the log it fills. Kernel handles built
    /// on the copy run reads and record writes instead of running them; no fault fires and
    /// nothing is counted through it.
    pub fn recording(&self) -> (ActorSeam, Recording) {
        let rec = Recording::default();
        let mut copy = self.clone();
        copy.recording = Some(rec.clone());
        (copy, rec)
    }

    /// The log of a read-back probe's seam (`None` on a real one).
    pub fn recorder(&self) -> Option<&Recording> {
        self.recording.as_ref()
    }

    /// Declares operations this actor performs through the seam (see [`FaultRegistry`]).
    pub fn declare_ops(&self, ops: &[&str]) {
        self.seam.faults.declare(&self.actor, ops);
    }

    /// The underlying shared seam.
    pub fn shared(&self) -> &Seam {
        &self.seam
    }

    /// Runs one operation `op` through the seam.
    ///
    /// Applies a matching armed fault first (error: `f` is not run and the result is
    /// [`Injected`] converted into `E`; panic: panics; delay: sleeps, then runs `f`), then
    /// records count, error and duration metrics. The operation's own error is returned as it
    /// is.
    pub fn op<T, E>(&self, op: &str, f: impl FnOnce() -> Result<T, E>) -> Result<T, E>
    where
        E: From<Injected>,
    {
        let actor = &*self.actor;
        let metrics = &self.seam.metrics;
        let span = tracing::debug_span!("kernel_op", actor = actor, op = op);
        let _entered = span.enter();
        if self.recording.is_some() {
            // A read-back probe: its reads are real but neither faulted nor counted.
            return f();
        }
        let start = crate::clock::real_now();
        self.seam.faults.note(actor, op);
        if let Some(fired) = self.seam.faults.take(actor, op) {
            match fired.action {
                FaultAction::Error => {
                    metrics.record_seam_op(actor, op, start.elapsed(), false);
                    tracing::warn!("injected kernel operation failure");
                    return Err(E::from(Injected {
                        actor: self.actor.clone(),
                        op: op.to_string(),
                    }));
                }
                FaultAction::Panic => {
                    metrics.record_seam_op(actor, op, start.elapsed(), false);
                    panic!("{actor}: injected panic in kernel operation {op}");
                }
                FaultAction::Delay => {
                    tracing::warn!(delay_ms = fired.delay.as_millis() as u64, "injected delay");
                    std::thread::sleep(fired.delay);
                }
            }
        }
        let result = f();
        metrics.record_seam_op(actor, op, start.elapsed(), result.is_ok());
        result
    }

    /// Reports the chains this driver currently programs as drop-everything
    /// because the kernel refused them (replaces the previous report); shown
    /// in `/status` and as `felix_dataplane_rejected_chains{actor}`.
    pub fn report_rejected_chains(&self, chains: Vec<crate::status::RejectedChain>) {
        self.seam.metrics.set_rejected_chains(&self.actor, chains);
    }

    /// Reports what this driver cannot program on this node (e.g. an IP pool whose
    /// encapsulation the kernel lacks), replacing the previous report; shown in `/status`
    /// as the actor's `unsupported` list.
    pub fn report_unsupported(&self, items: Vec<String>) {
        self.seam.metrics.set_unsupported(&self.actor, items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test operation's error: its own failure, or an injected one.
    #[derive(Debug, PartialEq, thiserror::Error)]
    enum TestError {
        #[error("boom")]
        Boom,
        #[error(transparent)]
        Injected(#[from] Injected),
    }

    #[test]
    fn a_fault_for_an_unknown_actor_or_operation_is_refused_listing_the_valid_ones() {
        let reg = FaultRegistry::new();
        let fault = |target: &str, op: &str| Fault {
            target: target.into(),
            op: op.into(),
            action: FaultAction::Error,
            count: 1,
            delay_ms: 0,
        };
        // Nothing declared (a bare registry in a unit test): anything goes.
        reg.arm(fault("anything", "x"))
            .expect("undeclared registry");
        reg.clear();
        reg.declare("driver/routes-v4", &["apply", "route-replace"]);
        reg.declare("supervisor", &["apply"]);
        let e = reg
            .arm(fault("driver/route-v4", "apply"))
            .expect_err("misspelt actor");
        assert_eq!(
            e.to_string(),
            "no actor \"driver/route-v4\"; the actors are: driver/routes-v4, supervisor"
        );
        let e = reg
            .arm(fault("driver/routes-v4", "route-add"))
            .expect_err("misspelt op");
        assert!(
            e.to_string()
                .contains("its operations are: *, apply, route-replace"),
            "{e}"
        );
        reg.arm(fault("driver/routes-v4", "route-replace"))
            .expect("declared op");
        reg.arm(fault("driver/routes-v4", "*")).expect("any op");
        assert_eq!(
            reg.targets().get("supervisor"),
            Some(&vec!["*".to_string(), "apply".to_string()])
        );
        // An operation run without a declaration joins the catalog.
        let seam = Seam::new(reg.clone(), Metrics::default()).for_actor("driver/routes-v4");
        reg.clear();
        let r: Result<(), TestError> = seam.op("route-del", || Ok(()));
        r.expect("runs");
        reg.arm(fault("driver/routes-v4", "route-del"))
            .expect("learned op");
    }

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
        let seam = Seam::new(reg.clone(), Metrics::new());
        let (a, b) = (seam.for_actor("driver/a"), seam.for_actor("driver/b"));
        assert!(a.op("y", || Ok::<_, TestError>(1)).is_ok());
        assert!(b.op("x", || Ok::<_, TestError>(1)).is_ok());
        assert!(matches!(
            a.op("x", || Ok::<_, TestError>(1)),
            Err(TestError::Injected(Injected { .. }))
        ));
        assert_eq!(reg.list()[0].count, 1);
        assert!(a.op("x", || Ok::<_, TestError>(1)).is_err());
        assert!(reg.list().is_empty());
        assert_eq!(a.op("x", || Ok::<_, TestError>(7)).unwrap(), 7);
    }

    #[test]
    fn operation_errors_keep_their_type_and_injected_ones_name_actor_and_op() {
        let reg = FaultRegistry::new();
        let seam = Seam::new(reg.clone(), Metrics::new()).for_actor("driver/r");
        assert_eq!(
            seam.op("add", || Err::<(), _>(TestError::Boom)),
            Err(TestError::Boom)
        );
        reg.arm(Fault {
            target: "driver/r".into(),
            op: "add".into(),
            action: FaultAction::Error,
            count: 1,
            delay_ms: 0,
        })
        .unwrap();
        let err = seam.op("add", || Ok::<(), TestError>(())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver/r: injected failure of operation add"
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
        let seam = Seam::new(reg, Metrics::new()).for_actor("driver/a");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            seam.op("z", || Ok::<_, TestError>(()))
        }));
        assert!(r.is_err());
    }
}
