//! The runtime status record behind `GET /status` (INTERFACES.md §4).
//!
//! The supervisor publishes a fresh [`StatusSnapshot`] after every state change; readers
//! (the admin socket, on its own thread) only take a lock and clone, so status stays
//! answerable while an apply is stalled.

use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::Serialize;

/// Role of an actor in the supervision tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The dataplane supervisor.
    Supervisor,
    /// A manager.
    Manager,
    /// A driver.
    Driver,
}

/// Lifecycle state of an actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorState {
    /// Serving requests.
    Running,
    /// Being rebuilt after a failure.
    Restarting,
    /// Stopped (after a fatal outcome).
    Stopped,
}

/// The last failure of a driver, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// The seam operation that failed, when known.
    pub op: Option<String>,
    /// `injected`, `refused`, `unavailable` or `unreadable`, when known.
    pub kind: Option<crate::driver::FailureKind>,
    /// The whole message, the kernel's or tool's own text included.
    pub message: String,
    /// When it happened, RFC 3339 UTC.
    pub at: String,
}

/// A chain a driver programs as drop-everything because the kernel refused
/// it (see `felix::dataplane::generictables::quarantine`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedChain {
    /// Chain name as programmed.
    pub chain: String,
    /// The kernel's (or tool's) message.
    pub kernel_error: String,
}

/// One row of the `actors` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorStatus {
    /// Stable name, e.g. `driver/ipsets-v4`.
    pub name: String,
    /// Role.
    pub role: Role,
    /// State.
    pub state: ActorState,
    /// Supervised restarts so far.
    pub restarts: u64,
    /// Has pending work.
    pub dirty: bool,
    /// The last failure (drivers only; kept after a later success, see its `at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// Drivers only: chains the kernel refused, programmed as drop-everything
    /// until their content changes (`rejectedChains`; omitted when empty).
    #[serde(rename = "rejectedChains", skip_serializing_if = "Vec::is_empty")]
    pub rejected_chains: Vec<RejectedChain>,
    /// Drivers only: what the driver cannot program on this node, e.g. an IP pool whose
    /// encapsulation the kernel lacks (`unsupported`; omitted when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
}

/// The last finished apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastApply {
    /// Whether it fully succeeded.
    pub ok: bool,
    /// Its duration in milliseconds.
    pub duration_ms: f64,
    /// When it finished, RFC 3339 UTC.
    pub at: String,
}

/// The `GET /status` body. `lastApply` is `null` until the first apply finishes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusSnapshot {
    /// The datastore in-sync signal has been received.
    pub in_sync: bool,
    /// `iptables`, `nftables` or `bpf`.
    pub dataplane: String,
    /// Applies finished so far.
    pub applies: u64,
    /// The last apply.
    pub last_apply: Option<LastApply>,
    /// Every supervised actor, supervisor first.
    pub actors: Vec<ActorStatus>,
}

/// Shared handle to the latest snapshot. Cloning shares it.
#[derive(Debug, Clone)]
pub struct StatusHandle {
    inner: Arc<Mutex<StatusSnapshot>>,
}

impl StatusHandle {
    /// A handle holding `initial`.
    pub fn new(initial: StatusSnapshot) -> Self {
        Self {
            inner: Arc::new(Mutex::new(initial)),
        }
    }

    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> StatusSnapshot {
        self.inner.lock().clone()
    }

    /// Replaces the snapshot.
    pub fn publish(&self, snap: StatusSnapshot) {
        *self.inner.lock() = snap;
    }

    /// The actor row called `name`, if any.
    pub fn actor(&self, name: &str) -> Option<ActorStatus> {
        self.inner
            .lock()
            .actors
            .iter()
            .find(|a| a.name == name)
            .cloned()
    }
}

/// Formats `t` as RFC 3339 UTC with millisecond precision.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(951_782_400_123);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.123Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_599);
        assert_eq!(rfc3339(t), "2024-12-31T23:59:59.000Z");
    }

    #[test]
    fn status_json_shape() {
        let s = StatusSnapshot {
            in_sync: true,
            dataplane: "iptables".into(),
            applies: 2,
            last_apply: Some(LastApply {
                ok: true,
                duration_ms: 1.5,
                at: "x".into(),
            }),
            actors: vec![ActorStatus {
                name: "driver/ipsets-v4".into(),
                role: Role::Driver,
                state: ActorState::Running,
                restarts: 1,
                dirty: false,
                last_error: Some(LastError {
                    op: Some("nft-apply".into()),
                    kind: Some(crate::driver::FailureKind::Refused),
                    message: "Error: Could not process rule".into(),
                    at: "x".into(),
                }),
                rejected_chains: vec![RejectedChain {
                    chain: "cali-pi-gnp/x".into(),
                    kernel_error: "Set cali40x doesn't exist.".into(),
                }],
                unsupported: vec!["IP pool p (10.0.0.0/16): no IPIP".into()],
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["inSync"], true);
        assert_eq!(v["lastApply"]["durationMs"], 1.5);
        assert_eq!(v["actors"][0]["role"], "driver");
        assert_eq!(v["actors"][0]["state"], "running");
        assert_eq!(v["actors"][0]["restarts"], 1);
        assert_eq!(
            v["actors"][0]["unsupported"][0],
            "IP pool p (10.0.0.0/16): no IPIP"
        );
        assert_eq!(v["actors"][0]["lastError"]["kind"], "refused");
        assert_eq!(v["actors"][0]["lastError"]["op"], "nft-apply");
        assert_eq!(
            v["actors"][0]["rejectedChains"][0]["chain"],
            "cali-pi-gnp/x"
        );
        assert_eq!(
            v["actors"][0]["rejectedChains"][0]["kernelError"],
            "Set cali40x doesn't exist."
        );
    }
}
