//! Read-back: what each driver finds in the kernel, and what a resync now would change
//! (`GET /readback`, `GET /drift`, `felix admin diags`).
//!
//! # How a driver is read back
//! By default the runtime builds a **probe**: a fresh instance from the driver's own factory,
//! on a *recording* copy of its seam ([`ActorSeam::recording`]), and runs one apply of the
//! current desired state (and the deferred-deletion step for IP-set drivers). A fresh instance
//! has no memory, so that apply is exactly a restart's resync: every read it makes runs for
//! real and is kept as the read-back; every write is recorded instead of performed, and is
//! what the next resync would change. The difference therefore comes from the same code that
//! programs the kernel and cannot drift from it.
//!
//! Invariants:
//! * a probe never changes the kernel: every operation a command handle or netlink handle does
//!   not know to be read-only is recorded, not run (`probe_writes_nothing`);
//! * a probe neither fires armed faults nor counts in the seam's metrics
//!   (`probe_fires_no_fault_and_counts_nothing`);
//! * a read-back waits for an apply in progress on that driver and never overlaps it (both
//!   run as atomic actor responses), so it reads a settled kernel;
//! * a driver whose kernel operations cannot be recorded that way (writes that return handles,
//!   such as BPF program loads) answers [`crate::Driver::read_back`] itself.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::Mutex;
use serde::Serialize;

use crate::http::{Handler as HttpHandler, Request, Response};

/// One recorded kernel operation: its seam name and what it read or would write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedOp {
    /// The seam operation (`iptables-save`, `nft-apply`, `route-replace`, ...).
    pub op: String,
    /// For a read: the command and its output, or the objects listed. For a write: the
    /// command and its input, or the objects it would write.
    pub detail: String,
}

/// The log a recording seam fills. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    inner: Arc<Mutex<ReadBack>>,
}

impl Recording {
    /// Keeps a read and what it returned.
    pub fn read(&self, op: &str, detail: String) {
        self.inner.lock().actual.push(RecordedOp {
            op: op.to_string(),
            detail,
        });
    }

    /// Keeps a write the probe would have made.
    pub fn write(&self, op: &str, detail: String) {
        self.inner.lock().changes.push(RecordedOp {
            op: op.to_string(),
            detail,
        });
    }

    /// Everything recorded so far.
    pub fn take(&self) -> ReadBack {
        std::mem::take(&mut *self.inner.lock())
    }
}

/// One driver's read-back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadBack {
    /// What the driver read from the kernel, one entry per read.
    pub actual: Vec<RecordedOp>,
    /// What a resync now would change, one entry per write; empty when the kernel matches.
    pub changes: Vec<RecordedOp>,
}

/// A driver's answer: its read-back, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverReadBack {
    /// The read-back (what was recorded up to an error, when there is one).
    #[serde(flatten)]
    pub read_back: ReadBack,
    /// Why the probe did not finish (the reads and writes before it are kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Asks the supervisor for every driver's read-back; the answer goes to `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReadBackAll {
    /// Where the answer goes: driver name to its read-back.
    pub reply: mpsc::Sender<BTreeMap<String, DriverReadBack>>,
}

impl std::fmt::Debug for ReadBackAll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBackAll").finish_non_exhaustive()
    }
}

/// How long the admin endpoints wait for the drivers (an apply in progress holds a driver's
/// read-back until it ends).
pub const READ_BACK_DEADLINE: Duration = Duration::from_secs(60);

/// The `GET /drift` body: per driver, only what a resync now would change (drivers in step
/// map to `[]`); drivers whose probe failed appear under `errors`.
#[derive(Debug, Serialize)]
pub struct Drift {
    /// Whether every driver is in step with the kernel.
    #[serde(rename = "inSync")]
    pub in_sync: bool,
    /// Driver name to the writes a resync would make.
    pub drivers: BTreeMap<String, Vec<RecordedOp>>,
    /// Driver name to the error that stopped its probe.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, String>,
}

impl Drift {
    /// The difference alone, from full read-backs.
    pub fn of(all: &BTreeMap<String, DriverReadBack>) -> Drift {
        let drivers: BTreeMap<_, _> = all
            .iter()
            .map(|(n, r)| (n.clone(), r.read_back.changes.clone()))
            .collect();
        let errors: BTreeMap<_, _> = all
            .iter()
            .filter_map(|(n, r)| r.error.clone().map(|e| (n.clone(), e)))
            .collect();
        Drift {
            in_sync: errors.is_empty() && drivers.values().all(Vec::is_empty),
            drivers,
            errors,
        }
    }
}

/// Sends [`ReadBackAll`] through `send` and waits up to [`READ_BACK_DEADLINE`].
pub fn collect(
    send: &(dyn Fn(ReadBackAll) -> bool + Send + Sync),
) -> Result<BTreeMap<String, DriverReadBack>, String> {
    let (tx, rx) = mpsc::channel();
    if !send(ReadBackAll { reply: tx }) {
        return Err("the dataplane runtime is not running".into());
    }
    rx.recv_timeout(READ_BACK_DEADLINE).map_err(|e| match e {
        mpsc::RecvTimeoutError::Timeout => format!(
            "drivers did not answer within {} s (an apply is still running)",
            READ_BACK_DEADLINE.as_secs()
        ),
        mpsc::RecvTimeoutError::Disconnected => "the dataplane runtime stopped".into(),
    })
}

/// The `GET /readback` and `GET /drift` handlers over `send`.
pub fn handlers(
    send: Arc<dyn Fn(ReadBackAll) -> bool + Send + Sync>,
) -> (HttpHandler, HttpHandler) {
    let s1 = Arc::clone(&send);
    let readback: HttpHandler = Arc::new(move |_r: &Request| match collect(&*s1) {
        Ok(all) => json(&all),
        Err(e) => Response::error(503, &e),
    });
    let drift: HttpHandler = Arc::new(move |_r: &Request| match collect(&*send) {
        Ok(all) => json(&Drift::of(&all)),
        Err(e) => Response::error(503, &e),
    });
    (readback, drift)
}

fn json<T: Serialize>(v: &T) -> Response {
    match serde_json::to_string(v) {
        Ok(b) => Response::json(200, b),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::{Fault, FaultAction, Injected};
    use crate::ActorSeam;

    #[test]
    fn probe_fires_no_fault_and_counts_nothing() {
        let seam = ActorSeam::default();
        let faults = seam.shared().faults().clone();
        faults
            .arm(Fault {
                target: seam.actor().to_string(),
                op: "list".into(),
                action: FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .expect("arm");
        let (probe, rec) = seam.recording();
        let r = probe.op("list", || Ok::<_, Injected>(7));
        assert_eq!(r.ok(), Some(7), "the armed fault did not fire on the probe");
        assert_eq!(
            faults.list().len(),
            1,
            "the fault is still armed for the real driver"
        );
        assert_eq!(
            seam.shared()
                .metrics()
                .seam_op_counts(seam.actor(), "list")
                .0,
            0
        );
        // A renamed probe still records.
        let renamed = probe.renamed("other");
        renamed
            .recorder()
            .expect("still a probe")
            .write("restore", "x".into());
        assert_eq!(rec.take().changes.len(), 1);
        assert!(seam.recorder().is_none(), "the real seam is not recording");
    }

    #[test]
    fn drift_is_in_sync_only_without_changes_and_errors() {
        let mut all = BTreeMap::new();
        all.insert(
            "a".to_string(),
            DriverReadBack {
                read_back: ReadBack::default(),
                error: None,
            },
        );
        assert!(Drift::of(&all).in_sync);
        all.insert(
            "b".to_string(),
            DriverReadBack {
                read_back: ReadBack::default(),
                error: Some("boom".into()),
            },
        );
        let d = Drift::of(&all);
        assert!(!d.in_sync && d.errors["b"] == "boom");
        all.remove("b");
        all.get_mut("a")
            .expect("a")
            .read_back
            .changes
            .push(RecordedOp {
                op: "restore".into(),
                detail: String::new(),
            });
        assert!(!Drift::of(&all).in_sync);
    }
}
