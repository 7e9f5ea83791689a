//! Kernel operations: the command runners behind the seam, and the driver's command handle.
//!
//! Every kernel operation of the dataplane goes through the seam
//! (`felix_actors::seam`: fault injection, metrics and a tracing span per operation). For
//! commands the layers are:
//!
//! * [`CommandRunner`]: what runs a program ([`SystemCommands`]: real processes, in-process
//!   libnftables and long-lived restore sessions; [`ScriptedCommands`]: a scripted fake);
//! * [`Commands`]: a driver's handle, an [`felix_actors::ActorSeam`] plus a runner; every
//!   [`Commands::run`] is one seam operation with the caller's operation name.
//!
//! Invariant: a driver never spawns a process itself; it calls [`Commands::run`] (or
//! [`Commands::run_unchecked`]), so faults, metrics and the admin socket see every command.

mod command;
mod fake;
pub mod nftlib;
pub mod restore_session;
mod retry;
#[cfg(test)]
pub(crate) mod testns;

pub use command::{CommandOutput, CommandRequest, CommandRunner, Commands, SystemCommands};
pub use fake::{FakeResponse, ScriptedCommands};
pub use retry::{Backoff, RetryPolicy};

use felix_actors::{DriverError, FailureKind, Injected};

/// The operations that only read the kernel. A read-back probe (`felix_actors::readback`)
/// runs these for real and records every other operation instead of running it, so an
/// operation missing here is at worst shown as a change, never performed by a probe.
pub const READ_ONLY_OPS: &[&str] = &[
    "iptables-save",
    "nft-list-table",
    "nft-list-chain",
    "nft-list-chains",
    "ipset-list",
    "ipset-list-names",
    "sysctl-read",
    "netlink-open",
    "addr-list",
    "fdb-list",
    "link-get",
    "link-list",
    "neigh-list",
    "route-list",
];

/// Whether `op` only reads the kernel (see [`READ_ONLY_OPS`]).
pub fn is_read_only(op: &str) -> bool {
    READ_ONLY_OPS.contains(&op)
}

/// Errors of a kernel command, naming the operation and the command, and keeping the OS
/// error or the tool's own message.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The program could not be started at all.
    #[error("{op}: failed to start `{command}`: {source}")]
    Spawn {
        /// The seam operation, e.g. `iptables-restore`.
        op: String,
        /// The program and arguments, space separated.
        command: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and exited unsuccessfully.
    #[error("{op}: `{command}` exited with status {status:?}: {stderr}")]
    Failed {
        /// The seam operation.
        op: String,
        /// The program and arguments, space separated.
        command: String,
        /// Exit code, `None` if killed by a signal.
        status: Option<i32>,
        /// Captured standard error (trimmed): the tool's own message.
        stderr: String,
    },
    /// An armed fault made the operation fail without running it.
    #[error(transparent)]
    Injected(#[from] Injected),
}

impl KernelError {
    /// Standard error text of a failed command, empty for other variants.
    pub fn stderr(&self) -> &str {
        match self {
            KernelError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }

    /// The seam operation that failed.
    pub fn op(&self) -> &str {
        match self {
            KernelError::Spawn { op, .. } | KernelError::Failed { op, .. } => op,
            KernelError::Injected(i) => &i.op,
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> FailureKind {
        match self {
            KernelError::Spawn { .. } => FailureKind::Unavailable,
            KernelError::Failed { .. } => FailureKind::Refused,
            KernelError::Injected(_) => FailureKind::Injected,
        }
    }
}

impl From<KernelError> for DriverError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Injected(i) => DriverError::from(i),
            e => DriverError::op(e.op().to_string(), e.kind(), e),
        }
    }
}
