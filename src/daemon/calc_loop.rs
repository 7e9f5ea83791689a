//! The calc-graph thread: syncer events in, flushed batches out.
//!
//! # State machine
//!
//! ```text
//! Loading ──(syncer InSync ∧ datastore ready)──► graph told InSync
//!         ──(first flush, carries ConfigUpdate … InSync)──► Running
//! Running ──(datastore becomes unready)──► CalcEvent::DatastoreNotReady (daemon restarts)
//! ```
//!
//! While loading, updates go into the graph but nothing is flushed (the
//! event sequencer coalesces them per object), so the first batch carries
//! the complete configuration and state. "Ready" follows the datastore's
//! `ClusterInformation` flag; an absent flag counts as ready for the file
//! datastore ([`CalcLoopConfig::ready_if_absent`]).
//!
//! # Flushing and back-pressure
//!
//! At most one batch is in flight to the dataplane ([`Inflight`]). A flush
//! happens when the graph has unflushed work, nothing is in flight, at
//! least [`CalcLoopConfig::min_flush_gap`] passed since the last flush, and
//! either the input channel is drained, [`CalcLoopConfig::flush_every`]
//! updates arrived since the last flush, or the oldest unflushed update is
//! [`CalcLoopConfig::max_flush_delay`] old. While a batch is in flight the
//! loop keeps consuming input, so changes coalesce in the graph; the
//! syncer's bounded channel stops the syncer when this thread falls behind.
//!
//! # Health
//!
//! Reporter `calc-graph`: live while the loop turns (reports at least every
//! [`CalcLoopConfig::report_interval`]); ready once the graph is in sync and
//! the first flush is done.
//!
//! # Simulated hang
//!
//! Once [`CalcLoopConfig::hang`] is due on [`CalcLoopConfig::clock`]
//! (`DebugSimulateCalcGraphHangAfter`), the loop stops for good: no input
//! consumed, no flush, no health report (so the liveness times out), until
//! the stop flag ends it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use felix_actors::clock::SharedClock;
use felix_actors::HealthReporter;
use felix_proto::to_dataplane::Payload;
use parking_lot::Mutex;

use super::debug_sim::HangSwitch;
use super::messages::to_dataplane;
use super::metrics::{CalcMetrics, ClusterStats, UpdateTally};
use crate::calc::view::DataplaneView;
use crate::calc::CalcGraph;
use crate::model::{Key, SyncStatus, SyncerEvent, Update, Value};

/// The desired dataplane view, shared with the admin socket.
pub type SharedView = Arc<Mutex<DataplaneView>>;

/// Tuning of the loop (see the module docs).
#[derive(Debug, Clone)]
pub struct CalcLoopConfig {
    /// Flush after this many updates even if input keeps coming.
    pub flush_every: usize,
    /// Minimum time between flushes.
    pub min_flush_gap: Duration,
    /// Flush once unflushed work is this old, even if input keeps coming.
    pub max_flush_delay: Duration,
    /// Health report period (also the idle wake-up period).
    pub report_interval: Duration,
    /// Whether a missing `ClusterInformation` ready flag means ready.
    pub ready_if_absent: bool,
    /// Fault injection for the calculation graph (admin socket target
    /// `calc-graph`, op `flush`): `delay` stalls the graph thread (the
    /// simulated calc-graph hang), `error` and `panic` hold the flush back
    /// (the output stays buffered and is flushed on a later pass).
    pub faults: Option<felix_actors::FaultRegistry>,
    /// How the graph is built (e.g. the Istio ambient calculator).
    pub graph_options: crate::calc::GraphOptions,
    /// `DebugSimulateCalcGraphHangAfter` (see the module docs); never due unless armed.
    pub hang: HangSwitch,
    /// The clock `hang` is read on.
    pub clock: SharedClock,
    /// Whether IP-set deltas are folded into full updates (see [`super::messages`]); the
    /// external-driver mode clears it to send deltas on the wire.
    pub fold_ipset_deltas: Arc<AtomicBool>,
}

impl Default for CalcLoopConfig {
    fn default() -> Self {
        CalcLoopConfig {
            flush_every: 1000,
            min_flush_gap: Duration::from_millis(10),
            max_flush_delay: Duration::from_millis(100),
            report_interval: Duration::from_secs(1),
            ready_if_absent: true,
            faults: None,
            graph_options: crate::calc::GraphOptions::default(),
            hang: HangSwitch::default(),
            clock: felix_actors::clock::system(),
            fold_ipset_deltas: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// Counts batches handed out and not yet handled by the dataplane. A batch
/// holds one [`InflightGuard`]; dropping it (after the supervisor handled
/// the batch, or when the batch is discarded) releases the slot.
#[derive(Debug, Clone, Default)]
pub struct Inflight(Arc<AtomicUsize>);

impl Inflight {
    /// A new counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Batches in flight.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// Takes one slot (released when the guard drops).
    pub fn acquire(&self) -> InflightGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InflightGuard(self.0.clone())
    }
}

/// Releases one in-flight slot when dropped.
#[derive(Debug)]
pub struct InflightGuard(Arc<AtomicUsize>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One flushed batch for the dataplane.
#[derive(Debug)]
pub struct Batch {
    /// The messages for the supervisor (IP-set deltas folded, `InSync`
    /// removed; see [`super::messages`]).
    pub payloads: Vec<Payload>,
    /// The batch ended with the graph's `InSync`.
    pub in_sync: bool,
    /// Holds the in-flight slot until the batch is handled or dropped.
    pub guard: InflightGuard,
}

/// What the loop reports to the daemon.
#[derive(Debug)]
pub enum CalcEvent {
    /// A flushed batch.
    Batch(Batch),
    /// The datastore said it is not ready after start of day.
    DatastoreNotReady,
    /// The syncer's channel closed while not stopping.
    SyncerGone,
}

/// The loop's inputs and outputs.
pub struct CalcLoop {
    graph: CalcGraph,
    rx: Receiver<SyncerEvent>,
    sink: Box<dyn FnMut(CalcEvent) -> bool + Send>,
    view: SharedView,
    inflight: Inflight,
    metrics: CalcMetrics,
    reporter: HealthReporter,
    stop: Arc<AtomicBool>,
    cfg: CalcLoopConfig,
    cluster: ClusterStats,
    tally: UpdateTally,
    syncer_in_sync: bool,
    ready: bool,
    graph_in_sync: bool,
    first_flush_done: bool,
    waiting_logged: bool,
    dirty_since: Option<Instant>,
    since_flush: usize,
    last_flush: Instant,
    last_report: Option<(Instant, bool)>,
}

impl CalcLoop {
    /// A loop for node `node`. `sink` receives events; returning `false`
    /// stops the loop.
    #[expect(
        clippy::too_many_arguments,
        reason = "the calc loop's collaborators, each a distinct handle"
    )]
    pub fn new(
        node: &str,
        rx: Receiver<SyncerEvent>,
        sink: Box<dyn FnMut(CalcEvent) -> bool + Send>,
        view: SharedView,
        inflight: Inflight,
        metrics: CalcMetrics,
        reporter: HealthReporter,
        stop: Arc<AtomicBool>,
        cfg: CalcLoopConfig,
    ) -> CalcLoop {
        if let Some(f) = &cfg.faults {
            f.declare("calc-graph", &["flush"]);
        }
        CalcLoop {
            graph: CalcGraph::with_options(node, cfg.graph_options),
            rx,
            sink,
            view,
            inflight,
            metrics,
            reporter,
            stop,
            ready: cfg.ready_if_absent,
            cfg,
            cluster: ClusterStats::default(),
            tally: UpdateTally::default(),
            syncer_in_sync: false,
            graph_in_sync: false,
            first_flush_done: false,
            waiting_logged: false,
            dirty_since: None,
            since_flush: 0,
            last_flush: felix_actors::clock::real_now(),
            last_report: None,
        }
    }

    /// Runs until stopped, the syncer goes away, or the sink refuses.
    pub fn run(mut self) {
        tracing::info!(node = self.graph.hostname(), "calculation graph running");
        self.report_health(true);
        loop {
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            if self.cfg.hang.due(self.cfg.clock.now()) {
                self.hang();
                break;
            }
            let timeout = if self.dirty_since.is_some() && self.graph_in_sync {
                self.cfg.min_flush_gap
            } else {
                self.cfg.report_interval
            };
            let mut drained = false;
            match self.rx.recv_timeout(timeout) {
                Ok(_) if self.cfg.hang.due(self.cfg.clock.now()) => {
                    // The hang came due while waiting: nothing received after it is
                    // handled (the input is dropped with the hung graph).
                    self.hang();
                    break;
                }
                Ok(ev) => {
                    self.handle(ev);
                    while self.since_flush < self.cfg.flush_every {
                        match self.rx.try_recv() {
                            Ok(ev) => self.handle(ev),
                            Err(TryRecvError::Empty) => {
                                drained = true;
                                break;
                            }
                            Err(TryRecvError::Disconnected) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => drained = true,
                Err(RecvTimeoutError::Disconnected) => {
                    if !self.stop.load(Ordering::Acquire) {
                        tracing::error!("datastore syncer stopped unexpectedly");
                        (self.sink)(CalcEvent::SyncerGone);
                    }
                    break;
                }
            }
            self.metrics.add_updates(std::mem::take(&mut self.tally));
            self.maybe_start();
            if self.first_flush_done && self.graph.take_datastore_not_ready() {
                tracing::warn!("datastore became unready; restart needed");
                if !(self.sink)(CalcEvent::DatastoreNotReady) {
                    break;
                }
            }
            if !self.maybe_flush(drained) {
                break;
            }
            self.report_health(false);
        }
        tracing::info!("calculation graph stopped");
    }

    /// The simulated hang: idles (consuming nothing, reporting nothing)
    /// until the stop flag is set.
    fn hang(&self) {
        tracing::warn!(
            "DebugSimulateCalcGraphHangAfter elapsed: the calculation graph now hangs (no updates, flushes or health reports)"
        );
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn handle(&mut self, ev: SyncerEvent) {
        match ev {
            SyncerEvent::Status(s) => {
                tracing::info!(status = ?s, "datastore status");
                self.metrics.set_resync_state(s);
                if s == SyncStatus::InSync {
                    self.syncer_in_sync = true;
                }
            }
            SyncerEvent::Updates(updates) => {
                for u in updates {
                    self.on_update(u);
                }
            }
        }
    }

    fn on_update(&mut self, u: Update) {
        if let Key::Ready = u.key {
            self.ready = match &u.value {
                Some(Value::Ready(b)) => *b,
                _ => self.cfg.ready_if_absent,
            };
        }
        self.cluster.on_update(&u);
        let kind = u.key.kind_name();
        let start = felix_actors::clock::real_now();
        self.graph.on_update(u);
        self.tally.record(kind, start.elapsed());
        self.since_flush += 1;
        self.dirty_since
            .get_or_insert_with(felix_actors::clock::real_now);
    }

    /// Tells the graph "in sync" once the syncer is in sync and the
    /// datastore is ready (waiting, as upstream, while it is not).
    fn maybe_start(&mut self) {
        if self.graph_in_sync || !self.syncer_in_sync {
            return;
        }
        if !self.ready {
            if !self.waiting_logged {
                tracing::warn!(
                    "datastore is not ready (ClusterInformation default has datastoreReady: false); waiting"
                );
                self.waiting_logged = true;
            }
            return;
        }
        // Start-of-day "not ready" notices are superseded by waiting above.
        let _ = self.graph.take_datastore_not_ready();
        tracing::info!("datastore in sync and ready; computing the first dataplane batch");
        self.graph.on_status(SyncStatus::InSync);
        self.graph_in_sync = true;
        self.dirty_since = Some(felix_actors::clock::real_now());
    }

    /// Flushes if due (see the module docs). Returns `false` if the sink
    /// refused the batch.
    fn maybe_flush(&mut self, drained: bool) -> bool {
        let Some(since) = self.dirty_since else {
            return true;
        };
        if !self.graph_in_sync || self.inflight.get() > 0 {
            return true;
        }
        if self.last_flush.elapsed() < self.cfg.min_flush_gap && self.first_flush_done {
            return true;
        }
        let due = drained
            || self.since_flush >= self.cfg.flush_every
            || since.elapsed() >= self.cfg.max_flush_delay;
        if !due {
            return true;
        }
        if let Some(fired) = self
            .cfg
            .faults
            .as_ref()
            .and_then(|f| f.take("calc-graph", "flush"))
        {
            match fired.action {
                felix_actors::FaultAction::Delay => {
                    tracing::warn!(delay = ?fired.delay, "injected fault: calculation graph hangs");
                    std::thread::sleep(fired.delay);
                }
                felix_actors::FaultAction::Error | felix_actors::FaultAction::Panic => {
                    tracing::warn!("injected fault: calculation graph flush held back");
                    return true;
                }
            }
        }
        let flushed = self.graph.flush();
        self.dirty_since = None;
        self.since_flush = 0;
        self.last_flush = felix_actors::clock::real_now();
        self.metrics.set_counts(self.graph.stats(), &self.cluster);
        if flushed.is_empty() {
            return true;
        }
        let n = flushed.len();
        let fold = self.cfg.fold_ipset_deltas.load(Ordering::Acquire);
        let (payloads, in_sync) = to_dataplane(&mut self.view.lock(), flushed, fold);
        if in_sync {
            self.first_flush_done = true;
            tracing::info!(messages = n, "first dataplane batch computed");
        } else {
            tracing::debug!(messages = n, "calculation graph flushed");
        }
        let batch = Batch {
            payloads,
            in_sync,
            guard: self.inflight.acquire(),
        };
        let ok = (self.sink)(CalcEvent::Batch(batch));
        self.report_health(true);
        ok
    }

    fn report_health(&mut self, force: bool) {
        let ready = self.graph_in_sync && self.first_flush_done;
        let due = match self.last_report {
            None => true,
            Some((at, was)) => was != ready || at.elapsed() >= self.cfg.report_interval,
        };
        if force || due {
            self.reporter.report(true, ready);
            self.last_report = Some((felix_actors::clock::real_now(), ready));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_actors::{Health, ReporterSpec};
    use std::sync::mpsc;

    fn ready_flag(v: bool) -> Update {
        Update::set(Key::Ready, Value::Ready(v))
    }

    struct Harness {
        tx: mpsc::SyncSender<SyncerEvent>,
        events: mpsc::Receiver<CalcEvent>,
        stop: Arc<AtomicBool>,
        health: Health,
        thread: std::thread::JoinHandle<()>,
        faults: felix_actors::FaultRegistry,
    }

    fn start() -> Harness {
        start_with(Health::new(), None, CalcLoopConfig::default())
    }

    /// A loop reporting into `health` (with liveness `timeout`), with
    /// `base`'s hang switch and clock.
    fn start_with(health: Health, timeout: Option<Duration>, base: CalcLoopConfig) -> Harness {
        let faults = felix_actors::FaultRegistry::new();
        let (tx, rx) = mpsc::sync_channel(4);
        let (etx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let reporter = health.reporter(
            "calc-graph",
            ReporterSpec {
                live: true,
                ready: true,
                timeout,
            },
        );
        let lp = CalcLoop::new(
            "node1",
            rx,
            Box::new(move |e| etx.send(e).is_ok()),
            Arc::new(Mutex::new(DataplaneView::new())),
            Inflight::new(),
            CalcMetrics::new(),
            reporter,
            stop.clone(),
            CalcLoopConfig {
                report_interval: Duration::from_millis(20),
                faults: Some(faults.clone()),
                ..base
            },
        );
        let thread = std::thread::spawn(move || lp.run());
        Harness {
            tx,
            events,
            stop,
            health,
            thread,
            faults,
        }
    }

    fn next_batch(h: &Harness) -> Batch {
        match h.events.recv_timeout(Duration::from_secs(10)) {
            Ok(CalcEvent::Batch(b)) => b,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn waits_for_a_ready_datastore_before_the_first_batch() {
        let h = start();
        h.tx.send(SyncerEvent::Updates(vec![ready_flag(false)]))
            .unwrap();
        h.tx.send(SyncerEvent::Status(SyncStatus::InSync)).unwrap();
        assert!(
            h.events.recv_timeout(Duration::from_millis(300)).is_err(),
            "no batch while the datastore is not ready"
        );
        assert!(!h.health.readiness().healthy);
        h.tx.send(SyncerEvent::Updates(vec![ready_flag(true)]))
            .unwrap();
        let b = next_batch(&h);
        assert!(b.in_sync);
        assert!(
            b.payloads
                .iter()
                .any(|p| matches!(p, Payload::ConfigUpdate(_))),
            "first batch carries the configuration"
        );
        drop(b);
        let deadline = felix_actors::clock::real_now() + Duration::from_secs(10);
        while !h.health.readiness().healthy {
            assert!(
                felix_actors::clock::real_now() < deadline,
                "calc graph never ready"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        h.tx.send(SyncerEvent::Updates(vec![ready_flag(false)]))
            .unwrap();
        match h.events.recv_timeout(Duration::from_secs(10)) {
            Ok(CalcEvent::DatastoreNotReady) => {}
            other => panic!("expected DatastoreNotReady, got {other:?}"),
        }
        h.stop.store(true, Ordering::Release);
        drop(h.tx);
        h.thread.join().unwrap();
    }

    #[test]
    fn injected_calc_graph_error_holds_the_flush_back_until_cleared() {
        let h = start();
        h.faults
            .arm(felix_actors::Fault {
                target: "calc-graph".into(),
                op: "flush".into(),
                action: felix_actors::FaultAction::Error,
                count: 3,
                delay_ms: 0,
            })
            .unwrap();
        h.tx.send(SyncerEvent::Status(SyncStatus::InSync)).unwrap();
        // Three flush attempts are refused; the fourth goes through with
        // the buffered output intact.
        let b = next_batch(&h);
        assert!(b.in_sync, "the held-back output still carries in-sync");
        assert!(
            h.faults.list().is_empty(),
            "all three injected errors fired"
        );
        drop(b);
        h.stop.store(true, Ordering::Release);
        drop(h.tx);
        h.thread.join().unwrap();
    }

    #[test]
    fn holds_output_while_a_batch_is_in_flight() {
        let h = start();
        h.tx.send(SyncerEvent::Status(SyncStatus::InSync)).unwrap();
        let first = next_batch(&h);
        let prof = |n: &str| {
            Update::set(
                Key::Node(n.into()),
                Value::Node(std::sync::Arc::new(Default::default())),
            )
        };
        h.tx.send(SyncerEvent::Updates(vec![prof("a")])).unwrap();
        h.tx.send(SyncerEvent::Updates(vec![prof("b")])).unwrap();
        assert!(
            h.events.recv_timeout(Duration::from_millis(300)).is_err(),
            "nothing flushed while the first batch is in flight"
        );
        drop(first);
        let second = next_batch(&h);
        assert!(!second.in_sync);
        h.stop.store(true, Ordering::Release);
        drop(second);
        drop(h.tx);
        h.thread.join().unwrap();
    }

    /// `DebugSimulateCalcGraphHangAfter`: once the armed switch is due on
    /// the loop's clock, nothing more is flushed and the `calc-graph`
    /// liveness (same clock) times out; the stop flag still ends the thread.
    #[test]
    fn simulated_hang_stops_flushes_and_health_reports() {
        let clock = felix_actors::clock::ManualClock::new();
        let hang = HangSwitch::default();
        hang.arm(felix_actors::clock::Clock::now(&clock) + Duration::from_secs(10));
        let h = start_with(
            Health::with_clock(Arc::new(clock.clone())),
            Some(Duration::from_secs(30)),
            CalcLoopConfig {
                hang,
                clock: Arc::new(clock.clone()),
                ..CalcLoopConfig::default()
            },
        );
        h.tx.send(SyncerEvent::Status(SyncStatus::InSync)).unwrap();
        drop(next_batch(&h));
        assert!(h.health.liveness().healthy);
        clock.advance(Duration::from_secs(11));
        let node = Update::set(
            Key::Node("a".into()),
            Value::Node(std::sync::Arc::new(Default::default())),
        );
        h.tx.send(SyncerEvent::Updates(vec![node])).unwrap();
        assert!(
            h.events.recv_timeout(Duration::from_millis(300)).is_err(),
            "a hung graph flushes nothing"
        );
        clock.advance(Duration::from_secs(31));
        assert!(
            !h.health.liveness().healthy,
            "calc-graph liveness timed out"
        );
        h.stop.store(true, Ordering::Release);
        h.thread.join().unwrap();
    }

    #[test]
    fn reports_a_vanished_syncer() {
        let h = start();
        drop(h.tx);
        match h.events.recv_timeout(Duration::from_secs(10)) {
            Ok(CalcEvent::SyncerGone) => {}
            other => panic!("expected SyncerGone, got {other:?}"),
        }
        h.thread.join().unwrap();
    }
}
