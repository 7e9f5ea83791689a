//! The operation hook: a narrow seam the supervisor uses to observe (timing,
//! metrics) and fault-inject every kernel operation.

use std::time::Duration;

use super::KernelError;

/// Called around every kernel operation.
///
/// `before` may refuse the operation by returning an error; the operation is
/// then not performed and the error is returned to the driver as if the
/// kernel had failed. `after` is called only for operations that ran.
pub trait OpHook: Send + Sync {
    /// Called before the operation `op` of the driver `actor` runs.
    fn before(&self, actor: &str, op: &str) -> Result<(), KernelError>;
    /// Called after the operation ran, with its outcome and duration.
    fn after(&self, actor: &str, op: &str, ok: bool, elapsed: Duration);
}

/// A hook that allows everything and records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopHook;

impl OpHook for NoopHook {
    fn before(&self, _actor: &str, _op: &str) -> Result<(), KernelError> {
        Ok(())
    }
    fn after(&self, _actor: &str, _op: &str, _ok: bool, _elapsed: Duration) {}
}
