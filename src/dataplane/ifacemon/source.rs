//! The interface monitor's kernel seam: [`LinkSource`] is the only way the
//! monitor reads links and addresses. Implementations: [`super::RtnetlinkSource`]
//! (a netlink socket) and [`ScriptedLinkSource`] (tests).
//!
//! The monitor wraps every call in the actor seam (`monitor/interfaces`,
//! operations `subscribe`, `dump`, `event`), so fault injection and the
//! `felix_seam_*` metrics cover it like a driver's commands.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::state::{IfaceEvent, Snapshot};

/// Errors of the interface monitor's seam.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// Opening or binding the netlink socket failed.
    #[error("cannot subscribe to link and address events: {0}")]
    Subscribe(String),
    /// A listing request failed.
    #[error("cannot list {what}: {detail}")]
    Dump {
        /// `links` or `addresses`.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The event stream ended or reported a loss (e.g. socket overrun);
    /// the monitor must resubscribe and resync.
    #[error("event stream lost: {0}")]
    Lost(String),
    /// Called before a successful subscribe.
    #[error("not subscribed")]
    NotSubscribed,
    /// An armed fault made the seam operation fail.
    #[error(transparent)]
    Injected(#[from] felix_actors::Injected),
}

/// See the module docs. Called from the monitor's own thread only.
pub trait LinkSource: Send {
    /// (Re)opens the event subscription (link and IPv4/IPv6 address groups).
    /// Events that happen after this returns are delivered by
    /// [`Self::next_event`].
    fn subscribe(&mut self) -> Result<(), MonitorError>;
    /// Lists every link and address.
    fn dump(&mut self) -> Result<Snapshot, MonitorError>;
    /// The next relevant event, waiting at most `wait`; `Ok(None)` when
    /// none arrived in time.
    fn next_event(&mut self, wait: Duration) -> Result<Option<IfaceEvent>, MonitorError>;
}

#[derive(Default)]
struct Script {
    snapshot: Snapshot,
    events: VecDeque<Result<IfaceEvent, String>>,
    subscribes: usize,
    dumps: usize,
    fail_subscribes: usize,
}

/// A scripted [`LinkSource`]: the test sets the snapshot a dump returns and
/// pushes events (or stream losses); counts subscribes and dumps.
#[derive(Clone, Default)]
pub struct ScriptedLinkSource {
    script: Arc<(Mutex<Script>, Condvar)>,
}

impl std::fmt::Debug for ScriptedLinkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLinkSource").finish_non_exhaustive()
    }
}

impl ScriptedLinkSource {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the next dumps return.
    pub fn set_snapshot(&self, snap: Snapshot) {
        self.script.0.lock().snapshot = snap;
    }

    /// Queues an event.
    pub fn push(&self, ev: IfaceEvent) {
        self.script.0.lock().events.push_back(Ok(ev));
        self.script.1.notify_all();
    }

    /// Queues a stream loss (as a socket overrun would be).
    pub fn push_loss(&self, why: &str) {
        self.script.0.lock().events.push_back(Err(why.to_string()));
        self.script.1.notify_all();
    }

    /// Makes the next `n` subscribes fail.
    pub fn fail_subscribes(&self, n: usize) {
        self.script.0.lock().fail_subscribes = n;
    }

    /// (subscribes, dumps) so far.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.script.0.lock();
        (s.subscribes, s.dumps)
    }
}

impl LinkSource for ScriptedLinkSource {
    fn subscribe(&mut self) -> Result<(), MonitorError> {
        let mut s = self.script.0.lock();
        s.subscribes += 1;
        if s.fail_subscribes > 0 {
            s.fail_subscribes -= 1;
            return Err(MonitorError::Subscribe("scripted failure".into()));
        }
        Ok(())
    }

    fn dump(&mut self) -> Result<Snapshot, MonitorError> {
        let mut s = self.script.0.lock();
        s.dumps += 1;
        Ok(s.snapshot.clone())
    }

    fn next_event(&mut self, wait: Duration) -> Result<Option<IfaceEvent>, MonitorError> {
        let (lock, cv) = &*self.script;
        let mut s = lock.lock();
        if s.events.is_empty() && !wait.is_zero() {
            cv.wait_for(&mut s, wait);
        }
        match s.events.pop_front() {
            None => Ok(None),
            Some(Ok(ev)) => Ok(Some(ev)),
            Some(Err(why)) => Err(MonitorError::Lost(why)),
        }
    }
}
