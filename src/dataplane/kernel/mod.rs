//! Kernel seams: the only way dataplane drivers touch the kernel.
//!
//! Every kernel operation goes through a seam so that tests can script the
//! kernel's answers and the supervisor can inject faults or time operations.
//! Invariant: a driver never spawns a process itself; it calls
//! [`Commands::run`] (or [`Commands::run_unchecked`]), which brackets the call
//! with the [`OpHook`] under the driver's actor name and an operation name.

mod command;
mod fake;
mod hook;
pub mod nftlib;
pub mod restore_session;
mod retry;
#[cfg(test)]
pub(crate) mod testns;

pub use command::{CommandOutput, CommandRequest, CommandSeam, Commands, SystemCommands};
pub use fake::{FakeResponse, ScriptedCommands};
pub use hook::{NoopHook, OpHook};
pub use retry::{Backoff, RetryPolicy};

/// Errors from a kernel seam, naming the command and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The program could not be started at all.
    #[error("failed to start `{command}`: {source}")]
    Spawn {
        /// The program and arguments, space separated.
        command: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and exited unsuccessfully.
    #[error("`{command}` exited with status {status:?}: {stderr}")]
    Failed {
        /// The program and arguments, space separated.
        command: String,
        /// Exit code, `None` if killed by a signal.
        status: Option<i32>,
        /// Captured standard error (trimmed).
        stderr: String,
    },
    /// The operation hook refused the operation (fault injection).
    #[error("operation `{op}` of actor `{actor}` refused by hook: {reason}")]
    Refused {
        /// The driver's actor name.
        actor: String,
        /// The operation name, e.g. `iptables-restore`.
        op: String,
        /// Why it was refused.
        reason: String,
    },
}

impl KernelError {
    /// Standard error text of a failed command, empty for other variants.
    pub fn stderr(&self) -> &str {
        match self {
            KernelError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }
}
