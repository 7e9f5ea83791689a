//! The [`Table`] trait every `*tables` driver implements, its statistics and
//! errors.

use crate::dataplane::kernel::KernelError;
use crate::dataplane::IpVersion;

use super::{Chain, Rule};

/// What one `apply()` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Write transactions that succeeded (restore / `nft -f` runs).
    pub transactions: usize,
    /// Rules written (added, replaced or inserted).
    pub rules_written: usize,
    /// Rules deleted.
    pub rules_deleted: usize,
    /// Chains created.
    pub chains_created: usize,
    /// Chains deleted.
    pub chains_deleted: usize,
    /// Read-backs of kernel state.
    pub read_backs: usize,
    /// Failed attempts retried within this apply.
    pub retries: usize,
}

impl ApplyStats {
    /// True if nothing was written.
    pub fn no_writes(&self) -> bool {
        self.transactions == 0
            && self.rules_written == 0
            && self.rules_deleted == 0
            && self.chains_created == 0
            && self.chains_deleted == 0
    }
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Writing kept failing after every retry.
    #[error("table {table}: giving up after {attempts} attempts: {source}")]
    GaveUp {
        /// Table description (e.g. `filter/v4`).
        table: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        #[source]
        source: KernelError,
    },
    /// Reading the kernel state failed.
    #[error("table {table}: reading kernel state failed: {source}")]
    ReadBack {
        /// Table description.
        table: String,
        /// The failure.
        #[source]
        source: KernelError,
    },
    /// The kernel state could not be understood.
    #[error("table {table}: cannot parse kernel state: {detail}")]
    Parse {
        /// Table description.
        table: String,
        /// What was wrong.
        detail: String,
    },
}

impl From<TableError> for felix_actors::DriverError {
    fn from(e: TableError) -> Self {
        match &e {
            TableError::GaveUp { source, .. } | TableError::ReadBack { source, .. } => {
                let (op, kind) = (source.op().to_string(), source.kind());
                felix_actors::DriverError::op(op, kind, e)
            }
            TableError::Parse { .. } => {
                felix_actors::DriverError::op("read-back", felix_actors::FailureKind::Unreadable, e)
            }
        }
    }
}

/// A `*tables` table driver. Callers set desired state (cheap, in memory)
/// and call [`Table::apply`] to reconcile the kernel.
///
/// Invariants: the first `apply()` reads the kernel and sweeps anything of
/// ours that is not desired, so it must only be called once the datastore
/// is in sync; a rule whose hash is unchanged is never rewritten.
pub trait Table: Send {
    /// Human-readable name, e.g. `filter/v4`.
    fn name(&self) -> String;
    /// IP version of the table.
    fn ip_version(&self) -> IpVersion;
    /// Sets (adds or replaces) a chain we own.
    fn set_chain(&mut self, chain: Chain);
    /// Removes a chain we own (deleted at the next apply).
    fn remove_chain(&mut self, name: &str);
    /// Sets the rules we insert at the top of a kernel-owned chain
    /// (`INPUT`, `FORWARD`, ...). An empty list removes our rules there.
    fn set_insert_rules(&mut self, kernel_chain: &str, rules: Vec<Rule>);
    /// Forces a read-back and reconcile at the next apply.
    fn queue_resync(&mut self);
    /// Reconciles the kernel with the desired state.
    fn apply(&mut self) -> Result<ApplyStats, TableError>;
    /// True if the next apply has work to do.
    fn is_dirty(&self) -> bool;
    /// Chains the kernel refused, programmed as drop-everything until their
    /// content changes (see `generictables::quarantine`).
    fn rejected_chains(&self) -> Vec<super::quarantine::RejectedChain> {
        Vec::new()
    }
}
