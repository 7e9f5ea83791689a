//! The retry loop shared by the iptables and nftables table drivers.
//!
//! One apply is a sequence of attempts. Each attempt reads the kernel back
//! if the table's picture of it was forgotten, plans against that picture
//! and writes the plan in one transaction; its outcome is an [`Attempt`].
//! A failed attempt makes the table forget its picture of the kernel (it
//! may have been wrong), and the loop retries with the table's
//! [`RetryPolicy`] pacing until the attempts run out.
//!
//! A refused write is first offered to
//! [`RetriedTable::quarantine_rejected`]: if the table finds chains that
//! the kernel refuses on their own (see [`find_rejected`]) it replaces them
//! by drop-everything chains and the loop retries at once, without using up
//! an attempt (each such round quarantines at least one more chain, so the
//! rounds are bounded by the number of chains).

use crate::dataplane::kernel::{KernelError, RetryPolicy};

use super::quarantine::refusal;
use super::{ApplyStats, TableError};

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt {
    /// The plan was written (or there was nothing to write) and the table
    /// recorded it; the plan's statistics (`transactions` is 1 if a script
    /// ran).
    Written(ApplyStats),
    /// Reading the kernel state back, or understanding it, failed.
    ReadFailed(TableError),
    /// The kernel refused the write transaction.
    WriteFailed(KernelError),
}

/// A table driven by [`apply_with_retries`].
pub trait RetriedTable {
    /// Description for logs and errors (e.g. `filter/v4/nft`).
    fn describe(&self) -> String;
    /// `iptables` or `nftables`, for logs.
    fn kind(&self) -> &'static str;
    /// Pacing of retries.
    fn retry_policy(&self) -> RetryPolicy;
    /// One attempt; read-backs it does are counted in `total`.
    fn attempt(&mut self, total: &mut ApplyStats) -> Attempt;
    /// Called after every failed attempt: forget what may be wrong.
    fn attempt_failed(&mut self);
    /// After a refused write: finds the chains the kernel refuses on their
    /// own and quarantines them; returns how many were newly quarantined
    /// (0: the failure is not attributable to a chain).
    fn quarantine_rejected(&mut self, err: &KernelError) -> usize {
        let _ = err;
        0
    }
}

/// Runs attempts until one succeeds or they run out (see module docs).
pub fn apply_with_retries(t: &mut dyn RetriedTable) -> Result<ApplyStats, TableError> {
    let retry = t.retry_policy();
    let mut total = ApplyStats::default();
    let mut backoff = retry.backoff();
    let mut attempt: u32 = 0;
    // Once a refused write was not attributable, later refusals in this
    // apply are not examined again.
    let mut attribute = true;
    let mut last_logged: Option<String> = None;
    loop {
        let err = match t.attempt(&mut total) {
            Attempt::Written(s) => {
                total.transactions += s.transactions;
                total.rules_written += s.rules_written;
                total.rules_deleted += s.rules_deleted;
                total.chains_created += s.chains_created;
                total.chains_deleted += s.chains_deleted;
                return Ok(total);
            }
            Attempt::ReadFailed(e) => {
                t.attempt_failed();
                e
            }
            Attempt::WriteFailed(source) => {
                t.attempt_failed();
                // Only a refusal by the kernel or the tool can be a chain's
                // fault (not an injected seam fault, nor a tool that did
                // not run).
                if attribute && refusal(&source).is_some() {
                    if t.quarantine_rejected(&source) > 0 {
                        total.retries += 1;
                        continue;
                    }
                    attribute = false;
                }
                TableError::GaveUp {
                    table: t.describe(),
                    attempts: attempt + 1,
                    source,
                }
            }
        };
        if attempt >= retry.max_retries {
            return Err(err);
        }
        // The kernel's message once per distinct failure; identical repeats at debug.
        let cause =
            std::error::Error::source(&err).map_or_else(|| err.to_string(), |c| c.to_string());
        if last_logged.as_deref() != Some(cause.as_str()) {
            tracing::warn!(table = %t.describe(), attempt, error = %err, "{} apply failed; retrying", t.kind());
            last_logged = Some(cause);
        } else {
            tracing::debug!(table = %t.describe(), attempt, "{} apply failed again; retrying", t.kind());
        }
        attempt += 1;
        total.retries += 1;
        retry.wait(&mut backoff);
    }
}
