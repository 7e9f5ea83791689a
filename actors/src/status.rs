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
    /// Drivers only: chains the kernel refused, programmed as drop-everything
    /// until their content changes (`rejectedChains`; omitted when empty).
    #[serde(rename = "rejectedChains", skip_serializing_if = "Vec::is_empty")]
    pub rejected_chains: Vec<RejectedChain>,
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
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian), after H. Hinnant's published algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_millis()
    )
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
                rejected_chains: vec![RejectedChain {
                    chain: "cali-pi-gnp/x".into(),
                    kernel_error: "Set cali40x doesn't exist.".into(),
                }],
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["inSync"], true);
        assert_eq!(v["lastApply"]["durationMs"], 1.5);
        assert_eq!(v["actors"][0]["role"], "driver");
        assert_eq!(v["actors"][0]["state"], "running");
        assert_eq!(v["actors"][0]["restarts"], 1);
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
