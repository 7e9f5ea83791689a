//! The manager contract: converts calc-graph messages into drivers' declarative desired state.
//!
//! A manager's life inside one batch:
//! 1. [`Manager::on_update`] for every message it declared interest in. It must be cheap and
//!    must not touch the kernel — and by construction it cannot: the call receives no seam,
//!    and managers are never handed one. It stashes the message and marks things dirty.
//! 2. [`Manager::resolve_batch`] (resolution pass) — may emit [`CrossManagerMsg`]s to other
//!    managers; every manager's reply is collected and delivered (via
//!    [`Manager::on_cross_manager`]) before any manager starts programming.
//! 3. [`Manager::complete_deferred_work`] (programming pass) — walks only what is dirty and
//!    writes the resulting desired state into its drivers' [`crate::driver::DesiredInput`]s.
//!    Still no kernel I/O: the drivers reconcile later in the apply's driver phases.
//!
//! After a restart the manager is rebuilt empty, all current messages it wants are replayed
//! through `on_update`, and its next `complete_deferred_work` sees
//! [`ApplyCtx::full_rewrite`] = true: it must then rewrite its *whole* share of every input it
//! owns (replacing whatever an earlier incarnation wrote), not just a delta.

use std::sync::Arc;

use crate::driver::DesiredInput;

/// A message from one manager to another, produced in the resolution pass.
#[derive(Debug, Clone)]
pub struct CrossManagerMsg<M> {
    /// Stable name of the receiving manager, e.g. `manager/bpf-endpoints`.
    pub to: String,
    /// The payload, of the same type as calc-graph updates.
    pub payload: M,
}

/// Why a manager's deferred work did not complete.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ApplyError {
    /// Transient failure: the manager keeps its pending work and is retried next apply.
    #[error("{reason}")]
    Failed {
        /// Human-readable cause.
        reason: String,
    },
    /// The manager's memory cannot be trusted any more: it is rebuilt and replayed.
    #[error("manager needs restart: {reason}")]
    NeedsRestart {
        /// Human-readable cause.
        reason: String,
    },
    /// An armed fault made the step fail.
    #[error("{actor}: injected failure of {op}")]
    Injected {
        /// Actor name.
        actor: String,
        /// Operation name.
        op: String,
    },
}

/// Context handed to [`Manager::complete_deferred_work`]. Carries no kernel handle.
#[derive(Debug)]
pub struct ApplyCtx {
    manager: Arc<str>,
    full_rewrite: bool,
    apply_seq: u64,
    writes: u64,
}

impl ApplyCtx {
    /// A context for `manager` in apply number `apply_seq`.
    pub fn new(manager: &str, full_rewrite: bool, apply_seq: u64) -> Self {
        Self {
            manager: Arc::from(manager),
            full_rewrite,
            apply_seq,
            writes: 0,
        }
    }

    /// The manager's stable name.
    pub fn manager(&self) -> &str {
        &self.manager
    }

    /// True on the first programming pass after this manager was (re)built: rewrite
    /// everything you own, not only what is dirty.
    pub fn full_rewrite(&self) -> bool {
        self.full_rewrite
    }

    /// Sequence number of the apply in progress (1-based).
    pub fn apply_seq(&self) -> u64 {
        self.apply_seq
    }

    /// Mutates a driver's desired state; the driver sees it as dirty on this apply.
    pub fn write<S, R>(&mut self, input: &DesiredInput<S>, f: impl FnOnce(&mut S) -> R) -> R {
        self.writes += 1;
        input.write(f)
    }

    /// How many input writes this pass made.
    pub fn writes(&self) -> u64 {
        self.writes
    }
}

/// A manager: see the module docs for the call protocol.
pub trait Manager<M>: Send + 'static {
    /// Records one update. Cheap; no kernel access (none is available).
    fn on_update(&mut self, msg: &M);

    /// Resolution pass: cross-manager messages that must land before anyone programs.
    fn resolve_batch(&mut self) -> Vec<CrossManagerMsg<M>> {
        Vec::new()
    }

    /// Receives a message another manager produced in the resolution pass.
    fn on_cross_manager(&mut self, from: &str, msg: &M) {
        let _ = from;
        self.on_update(msg);
    }

    /// Programming pass: writes desired state for the dirty resources into driver inputs.
    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError>;
}
