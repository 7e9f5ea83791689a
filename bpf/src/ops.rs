//! The one seam every BPF syscall of this crate goes through, and the crate's error type.
//!
//! [`BpfOps`] wraps a [`felix_actors::ActorSeam`]: each kernel operation (map create, pin,
//! open, update, delete, program load, attach, detach, link pin, test run, bpffs mount) is
//! one [`BpfOps::run`] call with one of the operation names in [`op`], so the admin socket's
//! fault injection (`{"target": "<actor>", "op": "prog_load"}`) can fail any of them and the
//! seam's metrics count them per operation.

use std::fmt::Display;
use std::io;

use felix_actors::{ActorSeam, Injected};

/// The operation names this crate passes to the seam (the `op` of a fault).
pub mod op {
    /// `BPF_MAP_CREATE`.
    pub const MAP_CREATE: &str = "map_create";
    /// `BPF_OBJ_PIN` of a map.
    pub const MAP_PIN: &str = "map_pin";
    /// `BPF_OBJ_GET` of a pinned map.
    pub const MAP_OPEN: &str = "map_open";
    /// `BPF_MAP_LOOKUP_ELEM` (and `BPF_OBJ_GET_INFO_BY_FD` of a map).
    pub const MAP_LOOKUP: &str = "map_lookup";
    /// `BPF_MAP_UPDATE_ELEM`.
    pub const MAP_UPDATE: &str = "map_update";
    /// `BPF_MAP_DELETE_ELEM`.
    pub const MAP_DELETE: &str = "map_delete";
    /// `BPF_PROG_LOAD` of an object's programs (and its internal maps).
    pub const PROG_LOAD: &str = "prog_load";
    /// `BPF_OBJ_PIN` of a program or of its globals map.
    pub const PROG_PIN: &str = "prog_pin";
    /// `BPF_OBJ_GET` of a pinned program or globals map.
    pub const PROG_OPEN: &str = "prog_open";
    /// `BPF_PROG_TEST_RUN`.
    pub const TEST_RUN: &str = "test_run";
    /// `BPF_LINK_CREATE` of a TCX link.
    pub const TCX_ATTACH: &str = "tcx_attach";
    /// `BPF_LINK_UPDATE` of a TCX link (atomic program swap).
    pub const LINK_UPDATE: &str = "link_update";
    /// `BPF_OBJ_PIN` of a link.
    pub const LINK_PIN: &str = "link_pin";
    /// `BPF_OBJ_GET` of a pinned link (and its info).
    pub const LINK_OPEN: &str = "link_open";
    /// `BPF_LINK_DETACH`.
    pub const LINK_DETACH: &str = "link_detach";
    /// Creating the clsact qdisc (netlink).
    pub const TC_QDISC: &str = "tc_qdisc";
    /// Adding or replacing a clsact filter (netlink).
    pub const TC_ATTACH: &str = "tc_attach";
    /// Querying a clsact filter (netlink).
    pub const TC_QUERY: &str = "tc_query";
    /// Deleting a clsact filter (netlink).
    pub const TC_DETACH: &str = "tc_detach";
    /// `BPF_PROG_QUERY` probing for an attach mechanism.
    pub const PROBE: &str = "probe";
    /// Removing a pin (unlink in the bpffs) or a pin directory.
    pub const UNPIN: &str = "unpin";
    /// Mounting the bpffs or creating a pin directory.
    pub const MOUNT: &str = "mount_bpffs";
    /// Moving an earlier run's jump-map pins aside (a rename in the bpffs).
    pub const SET_ASIDE: &str = "set_aside";
    /// Listing a device's clsact filters (whether a clsact qdisc is shared).
    pub const TC_LIST: &str = "tc_list";
    /// Setting up and polling a ring buffer (drop reports): mmap and epoll of the map.
    pub const RING_POLL: &str = "ring_poll";

    /// The operations that only read kernel state (what a read-back probe may run).
    pub const READ_ONLY: &[&str] = &[
        MAP_OPEN, MAP_LOOKUP, PROG_OPEN, LINK_OPEN, TC_QUERY, TC_LIST, PROBE, RING_POLL,
    ];

    /// Every operation above (a BPF driver's fault targets).
    pub const ALL: &[&str] = &[
        MAP_CREATE,
        MAP_PIN,
        MAP_OPEN,
        MAP_LOOKUP,
        MAP_UPDATE,
        MAP_DELETE,
        PROG_LOAD,
        PROG_PIN,
        PROG_OPEN,
        TEST_RUN,
        TCX_ATTACH,
        LINK_UPDATE,
        LINK_PIN,
        LINK_OPEN,
        LINK_DETACH,
        TC_QDISC,
        TC_ATTACH,
        TC_QUERY,
        TC_DETACH,
        PROBE,
        UNPIN,
        MOUNT,
        SET_ASIDE,
        TC_LIST,
        RING_POLL,
    ];
}

/// A failed BPF operation: which operation, on what, and why.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The kernel (or libbpf on its behalf) refused the operation.
    #[error("bpf {op} of {what}: {source}")]
    Os {
        /// The operation (one of [`op`]).
        op: &'static str,
        /// What it was applied to (a pin path, a map name, an interface).
        what: String,
        /// The OS error (errno) or libbpf's error.
        #[source]
        source: io::Error,
    },
    /// An armed fault failed the operation before it ran.
    #[error(transparent)]
    Injected(#[from] Injected),
    /// The operation succeeded but what it found is not what felix expects (a pinned map of
    /// another layout, a program missing from an object).
    #[error("bpf {op} of {what}: {reason}")]
    Unexpected {
        /// The operation (one of [`op`]).
        op: &'static str,
        /// What it was applied to.
        what: String,
        /// What was wrong.
        reason: String,
    },
}

impl BpfError {
    /// The OS error number, if the kernel refused the operation.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            BpfError::Os { source, .. } => source.raw_os_error().or_else(|| {
                source
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<OsError>())
                    .map(|e| e.code)
            }),
            _ => None,
        }
    }

    /// True when the operation was failed by an armed fault.
    pub fn is_injected(&self) -> bool {
        matches!(self, BpfError::Injected(_))
    }
}

/// Converts libbpf-rs's error into the OS error it carries (errno when there is one).
///
/// libbpf-rs keeps its `io::Error` private; its message ends in std's `(os error N)` when it
/// came from errno, which is how the number is recovered.
pub(crate) fn os_error(e: libbpf_rs::Error) -> io::Error {
    let text = e.to_string();
    let code = text.rfind("(os error ").and_then(|i| {
        let rest = &text[i + "(os error ".len()..];
        rest[..rest.find(')')?].parse::<i32>().ok()
    });
    match code {
        Some(code) => io::Error::new(
            io::Error::from_raw_os_error(code).kind(),
            OsError { code, text },
        ),
        None => io::Error::other(text),
    }
}

/// A libbpf error with its errno (see [`os_error`]).
#[derive(Debug)]
struct OsError {
    code: i32,
    text: String,
}

impl std::fmt::Display for OsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for OsError {}

/// The BPF seam: every syscall-level operation of this crate is one [`BpfOps::run`].
#[derive(Debug, Clone, Default)]
pub struct BpfOps {
    seam: ActorSeam,
}

impl BpfOps {
    /// Operations recorded (and faultable) under `seam`'s actor.
    pub fn new(seam: ActorSeam) -> Self {
        Self { seam }
    }

    /// The underlying actor seam.
    pub fn seam(&self) -> &ActorSeam {
        &self.seam
    }

    /// Runs one kernel operation `op` on `what` through the seam; an OS error keeps `op`,
    /// `what` and the errno.
    pub fn run<T>(
        &self,
        op: &'static str,
        what: impl Display,
        f: impl FnOnce() -> Result<T, io::Error>,
    ) -> Result<T, BpfError> {
        if let Some(rec) = self.seam.recorder() {
            // A read-back probe: BPF writes return handles the caller needs, so they are
            // refused (and recorded), never run.
            if !op::READ_ONLY.contains(&op) {
                rec.write(op, what.to_string());
                return Err(BpfError::Unexpected {
                    op,
                    what: what.to_string(),
                    reason: "not run: a read-back probe does not write BPF state".into(),
                });
            }
        }
        self.seam.op(op, || {
            f().map_err(|source| BpfError::Os {
                op,
                what: what.to_string(),
                source,
            })
        })
    }

    /// [`BpfOps::run`] for a libbpf-rs call.
    pub fn lib<T>(
        &self,
        op: &'static str,
        what: impl Display,
        f: impl FnOnce() -> libbpf_rs::Result<T>,
    ) -> Result<T, BpfError> {
        self.run(op, what, || f().map_err(os_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_actors::seam::{Fault, FaultAction};

    #[test]
    fn an_injected_fault_fails_the_named_operation_only() {
        let ops = BpfOps::default();
        ops.seam()
            .shared()
            .faults()
            .arm(Fault {
                target: ops.seam().actor().to_string(),
                op: op::PROG_LOAD.into(),
                action: FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .expect("valid fault");
        let mut ran = false;
        assert!(ops.run(op::MAP_CREATE, "m", || Ok(())).is_ok());
        let err = ops
            .run(op::PROG_LOAD, "obj", || {
                ran = true;
                Ok(())
            })
            .expect_err("armed fault fails prog_load");
        assert!(err.is_injected());
        assert!(!ran, "an injected failure does not run the operation");
        assert!(err.to_string().contains("prog_load"));
        assert!(ops.run(op::PROG_LOAD, "obj", || Ok(())).is_ok());
    }

    #[test]
    fn os_errors_keep_operation_target_and_errno() {
        let ops = BpfOps::default();
        let err = ops
            .run(op::MAP_PIN, "/sys/fs/bpf/x", || {
                Err::<(), _>(io::Error::from_raw_os_error(libc::EEXIST))
            })
            .expect_err("fails");
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        let text = err.to_string();
        assert!(
            text.contains("map_pin") && text.contains("/sys/fs/bpf/x"),
            "{text}"
        );
        let lib = ops
            .lib(op::MAP_OPEN, "p", || {
                Err::<(), _>(libbpf_rs::Error::from_raw_os_error(libc::ENOENT))
            })
            .expect_err("fails");
        assert_eq!(lib.raw_os_error(), Some(libc::ENOENT));
    }
}
