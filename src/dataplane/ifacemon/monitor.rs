//! [`InterfaceMonitor`]: the thread that keeps [`InterfaceState`] in step
//! with the kernel and pokes the dataplane when it changes.
//!
//! A session: subscribe, dump (full resync into the state), then apply
//! events as they arrive. Events that arrive within `coalesce` of each
//! other form one batch, and one notification (the daemon's sends
//! `KernelChanged` to the supervisor) follows a batch that changed
//! something. A full dump is repeated every `resync_interval`
//! (`InterfaceRefreshInterval`; events can be lost). Any error — a failed
//! subscribe or dump, a lost event stream, an injected fault, even a panic
//! — ends the session; the next one starts after a backoff (100 ms doubling
//! to 5 s, reset by a successful resync) and its dump reports whatever
//! changed meanwhile. Upstream exits the process instead; retrying keeps
//! the rules in place and the backstop timers of the drivers still run.
//!
//! Every kernel call is an operation of the seam actor
//! `monitor/interfaces` (`subscribe`, `dump`, `event`), so `POST /faults`
//! can fail, stall or panic it and `/metrics` counts it.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use felix_actors::clock::SharedClock;
use felix_actors::ActorSeam;

use super::source::{LinkSource, MonitorError};
use super::state::{IfaceEvent, InterfaceState};

/// The seam actor name of the monitor.
pub const MONITOR_ACTOR: &str = "monitor/interfaces";

/// How the monitor paces itself.
#[derive(Debug, Clone)]
pub struct MonitorOptions {
    /// Period of full resyncs; `None` turns them off.
    pub resync_interval: Option<Duration>,
    /// Events closer together than this are one batch.
    pub coalesce: Duration,
    /// Upper bound on one batch.
    pub max_batch: usize,
    /// The clock the resync schedule reads (tests drive a manual one).
    pub clock: SharedClock,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            resync_interval: Some(Duration::from_secs(90)),
            coalesce: Duration::from_millis(20),
            max_batch: 256,
            clock: felix_actors::clock::system(),
        }
    }
}

/// The running monitor; dropping it stops the thread.
#[derive(Debug)]
pub struct InterfaceMonitor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const POLL: Duration = Duration::from_millis(250);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The interface and address messages of one batch (upstream's
/// `felix_int_dataplane_iface_msg_batch_size` and `..._addr_msg_batch_size` summaries).
#[derive(Default)]
struct BatchSizes {
    ifaces: usize,
    addrs: usize,
}

const IFACE_BATCH: (&str, &str) = (
    "felix_int_dataplane_iface_msg_batch_size",
    "Number of interface state messages processed in each batch.",
);
const ADDR_BATCH: (&str, &str) = (
    "felix_int_dataplane_addr_msg_batch_size",
    "Number of interface address messages processed in each batch.",
);

impl BatchSizes {
    /// Makes both families exist from the start.
    fn declare(m: &felix_actors::Metrics) {
        m.declare_summary(IFACE_BATCH.0, IFACE_BATCH.1);
        m.declare_summary(ADDR_BATCH.0, ADDR_BATCH.1);
    }

    fn count(&mut self, ev: &IfaceEvent) {
        match ev {
            IfaceEvent::Addr { .. } => self.addrs += 1,
            _ => self.ifaces += 1,
        }
    }

    fn report(&self, m: &felix_actors::Metrics) {
        if self.ifaces > 0 {
            m.observe_summary(IFACE_BATCH.0, IFACE_BATCH.1, "", self.ifaces as f64);
        }
        if self.addrs > 0 {
            m.observe_summary(ADDR_BATCH.0, ADDR_BATCH.1, "", self.addrs as f64);
        }
    }
}

struct Runner {
    source: Box<dyn LinkSource>,
    state: InterfaceState,
    seam: ActorSeam,
    notify: Box<dyn Fn() + Send>,
    opts: MonitorOptions,
    stop: Arc<AtomicBool>,
}

impl Runner {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn resync(&mut self) -> Result<(), MonitorError> {
        let src = &mut self.source;
        let snap = self.seam.op("dump", || src.dump())?;
        if self.state.resync(snap) {
            (self.notify)();
        }
        Ok(())
    }

    fn handle(&self, ev: IfaceEvent) -> Result<bool, MonitorError> {
        let ev = self.seam.op("event", || Ok::<_, MonitorError>(ev))?;
        Ok(self.state.apply(ev))
    }

    /// One session; returns Ok only when stopped.
    fn session(&mut self, backoff: &mut Duration) -> Result<(), MonitorError> {
        let src = &mut self.source;
        self.seam.op("subscribe", || src.subscribe())?;
        self.resync()?;
        *backoff = BACKOFF_MIN;
        let clock = self.opts.clock.clone();
        let mut next_resync = self.opts.resync_interval.map(|i| clock.now() + i);
        loop {
            if self.stopped() {
                return Ok(());
            }
            if let Some(at) = next_resync {
                if clock.now() >= at {
                    self.resync()?;
                    next_resync = self.opts.resync_interval.map(|i| clock.now() + i);
                }
            }
            let wait = next_resync.map_or(POLL, |at| {
                POLL.min(at.saturating_duration_since(clock.now()))
            });
            let Some(ev) = self.source.next_event(wait)? else {
                continue;
            };
            let mut sizes = BatchSizes::default();
            sizes.count(&ev);
            let mut changed = self.handle(ev)?;
            for _ in 0..self.opts.max_batch {
                match self.source.next_event(self.opts.coalesce)? {
                    Some(ev) => {
                        sizes.count(&ev);
                        changed |= self.handle(ev)?;
                    }
                    None => break,
                }
            }
            sizes.report(self.seam.shared().metrics());
            if changed {
                (self.notify)();
            }
        }
    }

    fn run(mut self) {
        let mut backoff = BACKOFF_MIN;
        while !self.stopped() {
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| self.session(&mut backoff)));
            match r {
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "interface monitor session ended")
                }
                Err(p) => {
                    let what = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    tracing::error!(panic = %what, retry_in = ?backoff, "interface monitor panicked")
                }
            }
            let until = felix_actors::clock::real_now() + backoff;
            while !self.stopped() && felix_actors::clock::real_now() < until {
                std::thread::sleep(
                    POLL.min(until.saturating_duration_since(felix_actors::clock::real_now())),
                );
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// The seam operations of the monitor: the subscription, the full dump and each event.
pub const OPS: [&str; 3] = ["subscribe", "dump", "event"];

impl InterfaceMonitor {
    /// Starts the monitor thread reading `source` into `state`; `notify` is
    /// called after every batch of events (or resync) that changed it.
    /// `seam` should be bound to [`MONITOR_ACTOR`].
    pub fn start(
        source: Box<dyn LinkSource>,
        state: InterfaceState,
        seam: ActorSeam,
        notify: impl Fn() + Send + 'static,
        opts: MonitorOptions,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        BatchSizes::declare(seam.shared().metrics());
        // Its operations are fault targets from the start (not only once first used).
        seam.declare_ops(&OPS);
        let runner = Runner {
            source,
            state,
            seam,
            notify: Box::new(notify),
            opts,
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("ifacemon".into())
            .spawn(move || runner.run())?;
        Ok(InterfaceMonitor {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (at most one poll interval plus
    /// whatever kernel call is in flight).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for InterfaceMonitor {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ifacemon::{LinkInfo, ScriptedLinkSource, Snapshot};
    use felix_actors::{Fault, FaultAction, FaultRegistry, Metrics, Seam};
    use std::sync::atomic::AtomicUsize;

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = felix_actors::clock::real_now() + Duration::from_secs(10);
        while !f() {
            assert!(
                felix_actors::clock::real_now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn link(index: u32, name: &str, up: bool) -> LinkInfo {
        LinkInfo {
            index,
            name: name.into(),
            up,
        }
    }

    /// The periodic full dump follows the injected clock: none before the interval has passed
    /// on it, one soon after it is advanced past the interval (no real 90 s wait).
    #[test]
    fn periodic_resync_follows_the_injected_clock() {
        let src = ScriptedLinkSource::new();
        src.set_snapshot(Snapshot {
            links: vec![link(1, "eth0", true)],
            addrs: vec![],
        });
        let manual = felix_actors::clock::ManualClock::new();
        let opts = MonitorOptions {
            resync_interval: Some(Duration::from_secs(90)),
            clock: Arc::new(manual.clone()),
            ..MonitorOptions::default()
        };
        let state = InterfaceState::default();
        let _mon = InterfaceMonitor::start(
            Box::new(src.clone()),
            state.clone(),
            Seam::default().for_actor(MONITOR_ACTOR),
            || {},
            opts,
        )
        .unwrap();
        wait_until("initial dump", || src.counts().1 == 1);
        // Several poll periods of real time change nothing while the clock stands still.
        std::thread::sleep(POLL * 3);
        assert_eq!(src.counts().1, 1);
        manual.advance(Duration::from_secs(91));
        wait_until("resync after the interval", || src.counts().1 == 2);
    }

    #[test]
    fn events_update_the_state_notify_and_a_lost_stream_resyncs() {
        let src = ScriptedLinkSource::new();
        src.set_snapshot(Snapshot {
            links: vec![link(1, "eth0", true)],
            addrs: vec![(1, "192.0.2.1".parse().unwrap())],
        });
        let state = InterfaceState::default();
        let sub = state.subscribe();
        let faults = FaultRegistry::new();
        let metrics = Metrics::new();
        let seam = Seam::new(faults.clone(), metrics.clone()).for_actor(MONITOR_ACTOR);
        let kicks = Arc::new(AtomicUsize::new(0));
        let k = kicks.clone();
        let opts = MonitorOptions {
            resync_interval: None,
            ..MonitorOptions::default()
        };
        let mon = InterfaceMonitor::start(
            Box::new(src.clone()),
            state.clone(),
            seam,
            move || {
                k.fetch_add(1, Ordering::SeqCst);
            },
            opts,
        )
        .unwrap();
        wait_until("initial dump", || state.get("eth0").is_some());
        assert_eq!(sub.take(), ["eth0".to_string()].into());
        let after_dump = kicks.load(Ordering::SeqCst);
        assert!(after_dump >= 1);
        src.push(IfaceEvent::Link(link(9, "cali1", false)));
        src.push(IfaceEvent::Link(link(9, "cali1", true)));
        wait_until("cali1 up", || state.get("cali1").is_some_and(|v| v.link.up));
        wait_until("notification", || kicks.load(Ordering::SeqCst) > after_dump);
        assert_eq!(sub.take(), ["cali1".to_string()].into());

        // The stream is lost while cali1 disappears: the new session's dump
        // notices.
        src.set_snapshot(Snapshot {
            links: vec![link(1, "eth0", true)],
            addrs: vec![(1, "192.0.2.1".parse().unwrap())],
        });
        src.push_loss("overrun");
        wait_until("resync after loss", || state.get("cali1").is_none());
        assert!(sub.take().contains("cali1"));
        assert_eq!(src.counts().0, 2, "resubscribed once");

        // An injected fault on the next event also ends the session; the
        // event is not applied but the following dump catches up.
        faults
            .arm(Fault {
                target: MONITOR_ACTOR.into(),
                op: "event".into(),
                action: FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .unwrap();
        src.set_snapshot(Snapshot {
            links: vec![link(1, "eth0", true), link(10, "cali2", true)],
            addrs: vec![],
        });
        src.push(IfaceEvent::Link(link(10, "cali2", true)));
        wait_until("resync after fault", || state.get("cali2").is_some());
        assert!(state.get("eth0").unwrap().addrs.is_empty());
        assert!(src.counts().0 >= 3);
        let text = metrics.render_prometheus();
        assert!(text.contains("monitor/interfaces"), "{text}");
        mon.stop();
    }

    #[test]
    fn failed_subscribes_are_retried_with_backoff() {
        let src = ScriptedLinkSource::new();
        src.fail_subscribes(2);
        src.set_snapshot(Snapshot {
            links: vec![link(4, "cali4", true)],
            addrs: vec![],
        });
        let state = InterfaceState::default();
        let seam = Seam::default().for_actor(MONITOR_ACTOR);
        let mon = InterfaceMonitor::start(
            Box::new(src.clone()),
            state.clone(),
            seam,
            || {},
            MonitorOptions::default(),
        )
        .unwrap();
        wait_until("subscribed after failures", || state.get("cali4").is_some());
        assert_eq!(src.counts(), (3, 1));
        drop(mon);
    }
}
