//! The dataplane supervisor actor: fan-out, throttled applies, supervision, fail-closed exit.
//!
//! ```text
//! supervisor
//! ├── manager/<name>   (ManagerActor, one per ManagerSpec; cheap handlers on the arbiter)
//! └── driver/<name>    (DriverActor, one per DriverSpec; work on the blocking pool)
//! ```
//!
//! **Message flow.** [`Update`] messages are recorded in the supervisor's latest-state map
//! (keyed by the configured [`StateKey`] function), then forwarded as fire-and-forget
//! `OnUpdate`s to every manager whose interest filter accepts them, and an apply is scheduled.
//! An apply (see [`crate::apply`]) runs inside `ctx.wait`, so the supervisor's mailbox —
//! further updates, in-sync, timers — is held until it returns: updates never interleave
//! with an apply; they queue and form the next batch.
//!
//! **Scheduling.** Nothing is applied before [`InSync`]. After it, an apply is scheduled
//! whenever there is work, paced by a `governor` leaky bucket (`apply_rate_per_sec`,
//! `apply_burst`) so messages coalesce under load. A retry ticker (`retry_interval`, ~10 s)
//! re-schedules if anything is still dirty or failed. A failed driver (any phase but
//! *tables) backs off (`retry_backoff`, doubling up to `retry_backoff_max`): until then
//! applies only probe it, and one apply is scheduled when the backoff ends, so its retries
//! are paced by the backoff, not by the apply rate. Refresh timers (route, IP-set, tables
//! intervals) queue resyncs on the drivers of the matching phases. The first apply after
//! in-sync sends every driver a resync (full read-back-and-reconcile).
//!
//! **Supervision.** A manager or driver that panics (in its handler or in blocking work),
//! whose mailbox closed, or that returns a `NeedsRestart` error is rebuilt from its factory
//! with empty memory: a manager gets every current message it wants replayed from the
//! latest-state map and rewrites its whole output on its next programming pass (and every
//! driver is resynced, since its outputs may have changed); a driver re-reads its full desired
//! input and resyncs on the next apply. Restarts are counted per actor; more than
//! `max_restarts` within `restart_window` ends in [`Fatal`] (`RestartLimit`).
//!
//! **Fail closed.** `max_consecutive_table_failures` consecutive applies in which a tables
//! driver failed, died or was held while dirty end in [`Fatal`] (`TablesFailing`). The fatal
//! outcome is delivered once to the `on_fatal` callback (the daemon exits the process there);
//! afterwards the supervisor programs nothing more and reports itself stopped and not live.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::prelude::*;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::admin::AdminContext;
use crate::apply::{
    one_lane, run_apply, ApplyObserver, ApplyOutcome, ApplyPlan, ManagerResult, PlanDriver,
    PlanManager,
};
use crate::clock::SharedClock;
use crate::driver::{DriverSpec, Phase};
use crate::driver_actor::{DriverActor, DriverReply, Failure, ReadBackRequest, DRIVER_APPLY_OP};
use crate::health::{Health, HealthReporter, ReporterSpec, StartupLatch};
use crate::manager::{ApplyError, Manager};
use crate::manager_actor::{ManagerActor, OnUpdate, MANAGER_OPS};
use crate::metrics::Metrics;
use crate::readback::{DriverReadBack, ReadBackAll};
use crate::seam::{FaultRegistry, Seam};
use crate::status::{
    rfc3339, ActorState, ActorStatus, LastApply, LastError, Role, StatusHandle, StatusSnapshot,
};
use crate::timings::ApplyTimings;

/// Supervisor settings. `Default` gives upstream-like values.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervisorConfig {
    /// Reported in `/status` (`iptables`, `nftables` or `bpf`).
    pub dataplane: String,
    /// Leaky-bucket rate of applies per second.
    pub apply_rate_per_sec: u32,
    /// Leaky-bucket burst.
    pub apply_burst: u32,
    /// Backstop ticker re-trying failed or dirty work.
    pub retry_interval: Duration,
    /// Route/rule/VXLAN-FDB refresh (None = off).
    pub route_refresh_interval: Option<Duration>,
    /// IP-set refresh (None = off).
    pub ipsets_refresh_interval: Option<Duration>,
    /// *tables refresh (None = off).
    pub tables_refresh_interval: Option<Duration>,
    /// Consecutive failed tables applies before the fail-closed exit.
    pub max_consecutive_table_failures: u32,
    /// First pause before a failed driver (any phase but *tables, which fail closed
    /// instead) is tried again; each further consecutive failure doubles it, up to
    /// `retry_backoff_max`. Meanwhile the driver is only probed, never asked to work.
    pub retry_backoff: Duration,
    /// Longest pause between two tries of a failing driver.
    pub retry_backoff_max: Duration,
    /// Restarts of one actor tolerated within `restart_window`.
    pub max_restarts: u32,
    /// Window for `max_restarts`.
    pub restart_window: Duration,
    /// Liveness timeout of the supervisor's health reporter.
    pub liveness_timeout: Duration,
    /// Period of the apply summary log line.
    pub summary_interval: Duration,
    /// `DebugSimulateDataplaneHangAfter`: this long after start (on the supervisor's clock)
    /// the supervisor stops applying and reporting health, so its liveness watchdog trips.
    pub debug_hang_after: Option<Duration>,
    /// `DebugSimulateDataplaneApplyDelay`: every apply first waits this long.
    pub debug_apply_delay: Option<Duration>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            dataplane: "iptables".to_string(),
            apply_rate_per_sec: 10,
            apply_burst: 2,
            retry_interval: Duration::from_secs(10),
            route_refresh_interval: Some(Duration::from_secs(90)),
            ipsets_refresh_interval: Some(Duration::from_secs(90)),
            tables_refresh_interval: Some(Duration::from_secs(90)),
            max_consecutive_table_failures: 10,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(10),
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            liveness_timeout: Duration::from_secs(90),
            summary_interval: Duration::from_secs(60),
            debug_hang_after: None,
            debug_apply_delay: None,
        }
    }
}

/// How a message relates to the current state, for replay after a manager restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateKey {
    /// Sets (replaces) the state under this key.
    Set(String),
    /// Removes the state under this key.
    Remove(String),
    /// Not state (events); never replayed.
    Transient,
}

/// Classifies messages for the latest-state map.
pub type StateKeyFn<M> = Arc<dyn Fn(&M) -> StateKey + Send + Sync>;
/// A manager's interest filter.
pub type WantsFn<M> = Arc<dyn Fn(&M) -> bool + Send + Sync>;
/// Builds a fresh, memory-less manager.
pub type ManagerFactory<M> = Arc<dyn Fn() -> Box<dyn Manager<M>> + Send + Sync>;
/// Receives the fatal outcome.
pub type FatalCallback = Arc<dyn Fn(Fatal) + Send + Sync>;

/// Registration of one manager.
pub struct ManagerSpec<M> {
    name: String,
    wants: WantsFn<M>,
    factory: ManagerFactory<M>,
}

impl<M> Clone for ManagerSpec<M> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            wants: Arc::clone(&self.wants),
            factory: Arc::clone(&self.factory),
        }
    }
}

impl<M> ManagerSpec<M> {
    /// Manager `name` (e.g. `manager/endpoints-v4`) receiving the messages `wants` accepts,
    /// built by `factory` at start and on every restart.
    pub fn new(
        name: &str,
        wants: impl Fn(&M) -> bool + Send + Sync + 'static,
        factory: impl Fn() -> Box<dyn Manager<M>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_string(),
            wants: Arc::new(wants),
            factory: Arc::new(factory),
        }
    }

    /// The manager's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Why the runtime gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatalKind {
    /// *tables programming failed persistently (fail closed).
    TablesFailing,
    /// An actor kept failing after restarts.
    RestartLimit,
}

/// The typed give-up outcome; the daemon exits the process when it receives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fatal dataplane failure ({kind:?}): {message}")]
pub struct Fatal {
    /// Category.
    pub kind: FatalKind,
    /// What happened, for the log line before exit.
    pub message: String,
}

/// Invalid registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Two actors share a name.
    #[error("duplicate actor name {0}")]
    Duplicate(String),
    /// A name lacks its `manager/` or `driver/` prefix.
    #[error("actor name {0} must start with {1}")]
    BadName(String, &'static str),
    /// A driver was registered in the deletion-only phase.
    #[error("driver {0}: IpSetDeletions is a step of IpSets drivers, not a registration phase")]
    BadPhase(String),
    /// A rate or burst of zero.
    #[error("apply rate and burst must be positive")]
    BadThrottle,
}

/// A calc-graph update for the managers.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Update<M>(pub M);

/// Several updates at once (same as sending each as [`Update`], cheaper).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateBatch<M>(pub Vec<M>);

/// The datastore in-sync signal: kernel programming may begin.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct InSync;

/// Kernel state outside the calculation graph changed (for example the interface monitor saw
/// a workload interface appear): schedule an apply. Nothing is marked dirty here; every
/// manager's programming pass runs and every driver consults its own `is_dirty`, which is
/// where the change is known (e.g. through a subscription to the interface monitor). Before
/// in-sync this only records that an apply is wanted.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct KernelChanged;

/// Asks for the current status (answered between applies).
#[derive(Debug, Message)]
#[rtype(result = "StatusSnapshot")]
pub struct GetStatus;

struct ManagerSlot<M: Clone + Send + 'static> {
    spec: ManagerSpec<M>,
    addr: Addr<ManagerActor<M>>,
    restarts: u64,
    full_rewrite: bool,
    dirty: bool,
}

struct DriverSlot {
    spec: DriverSpec,
    addr: Addr<DriverActor>,
    restarts: u64,
    resync: bool,
    dirty: bool,
    /// The last failure, shown in `/status`; its message is logged at error level only when it
    /// differs from the one before (one log line per distinct failure, not per retry).
    last_error: Option<LastError>,
    /// Consecutive failed applies (reset by a success or a restart).
    failures: u32,
    /// Not asked to work again before this instant (on the supervisor's clock) after a
    /// failure: retries back off instead of following the apply rate.
    retry_at: Option<Instant>,
}

impl DriverSlot {
    /// Records a failed apply: logs the kernel's own message once per distinct failure.
    fn note_failure(&mut self, failure: &Failure) {
        let repeated = self
            .last_error
            .as_ref()
            .is_some_and(|e| e.message == failure.message);
        let op = failure.op.as_deref().unwrap_or("apply");
        if repeated {
            tracing::debug!(actor = %self.spec.name, op, error = %failure.message, "driver apply failed again; will retry");
        } else {
            tracing::error!(actor = %self.spec.name, op, kind = ?failure.kind, error = %failure.message, "driver apply failed; will retry");
        }
        self.last_error = Some(LastError {
            op: failure.op.clone(),
            kind: failure.kind,
            message: failure.message.clone(),
            at: rfc3339(SystemTime::now()),
        });
    }
}

/// The supervisor actor; build it with [`SupervisorBuilder`].
pub struct Supervisor<M: Clone + Send + 'static> {
    cfg: SupervisorConfig,
    state_key: StateKeyFn<M>,
    managers: Vec<ManagerSlot<M>>,
    drivers: Vec<DriverSlot>,
    latest: HashMap<String, (u64, Box<M>)>,
    seq: u64,
    in_sync: bool,
    in_sync_at: Option<Instant>,
    first_apply_done: bool,
    needs_apply: bool,
    apply_scheduled: bool,
    applying: bool,
    apply_seq: u64,
    applies: u64,
    last_apply: Option<LastApply>,
    batch_msgs: u64,
    consecutive_table_failures: u32,
    restart_log: HashMap<String, VecDeque<Instant>>,
    fatal: Option<Fatal>,
    on_fatal: FatalCallback,
    limiter: DefaultDirectRateLimiter,
    seam: Seam,
    faults: FaultRegistry,
    metrics: Metrics,
    status: StatusHandle,
    reporter: HealthReporter,
    latch: Option<StartupLatch>,
    observer: Option<ApplyObserver>,
    timings: ApplyTimings,
    clock: SharedClock,
    /// When the simulated hang starts ([`SupervisorConfig::debug_hang_after`]).
    hang_at: Option<Instant>,
    /// The simulated hang has started.
    hanging: bool,
    /// When the pending backoff timer fires, if one is pending.
    retry_timer: Option<Instant>,
}

/// What [`SupervisorBuilder::start`] returns.
pub struct SupervisorHandle<M: Clone + Send + 'static> {
    /// The supervisor's address: send [`Update`], [`UpdateBatch`], [`InSync`], [`GetStatus`].
    pub addr: Addr<Supervisor<M>>,
    /// Status snapshots (also served on `/status`).
    pub status: StatusHandle,
    /// Fault registry (also served on `/faults`).
    pub faults: FaultRegistry,
    /// Metrics (also served on `/metrics`).
    pub metrics: Metrics,
    /// Health aggregator the supervisor reports into.
    pub health: Health,
    /// Apply timings per step and driver (also served on `/timings`).
    pub timings: ApplyTimings,
}

impl<M: Clone + Send + 'static> SupervisorHandle<M> {
    /// An admin context over this runtime's status, faults and metrics.
    /// Also serves `GET /readback` and `GET /drift` (see [`crate::readback`]).
    pub fn admin_context(&self) -> AdminContext {
        let ctx = AdminContext::new(
            self.status.clone(),
            self.faults.clone(),
            self.metrics.clone(),
        );
        let addr = self.addr.clone();
        let (readback, drift) =
            crate::readback::handlers(Arc::new(move |m: ReadBackAll| addr.try_send(m).is_ok()));
        ctx.route("GET", "/readback", readback);
        ctx.route("GET", "/drift", drift);
        let timings = self.timings.clone();
        ctx.route(
            "GET",
            "/timings",
            Arc::new(move |_r: &crate::http::Request| {
                match serde_json::to_string(&timings.report()) {
                    Ok(b) => crate::http::Response::json(200, b),
                    Err(e) => crate::http::Response::error(500, &e.to_string()),
                }
            }),
        );
        ctx
    }
}

/// Builds and starts a [`Supervisor`].
pub struct SupervisorBuilder<M: Clone + Send + 'static> {
    cfg: SupervisorConfig,
    state_key: StateKeyFn<M>,
    managers: Vec<ManagerSpec<M>>,
    drivers: Vec<DriverSpec>,
    on_fatal: FatalCallback,
    faults: FaultRegistry,
    metrics: Metrics,
    health: Health,
    observer: Option<ApplyObserver>,
    clock: SharedClock,
}

impl<M: Clone + Send + 'static> SupervisorBuilder<M> {
    /// A builder with `cfg` and the message classifier used for replay.
    pub fn new(
        cfg: SupervisorConfig,
        state_key: impl Fn(&M) -> StateKey + Send + Sync + 'static,
    ) -> Self {
        Self {
            cfg,
            state_key: Arc::new(state_key),
            managers: Vec::new(),
            drivers: Vec::new(),
            on_fatal: Arc::new(|f: Fatal| tracing::error!("{f}")),
            faults: FaultRegistry::new(),
            metrics: Metrics::new(),
            health: Health::new(),
            observer: None,
            clock: crate::clock::system(),
        }
    }

    /// Reads time (the restart window, the in-sync instant) from `clock`.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Adds a manager (programming pass order = registration order).
    pub fn manager(mut self, spec: ManagerSpec<M>) -> Self {
        self.managers.push(spec);
        self
    }

    /// Adds a driver.
    pub fn driver(mut self, spec: DriverSpec) -> Self {
        self.drivers.push(spec);
        self
    }

    /// Sets the fatal-outcome callback (default: log only).
    pub fn on_fatal(mut self, f: impl Fn(Fatal) + Send + Sync + 'static) -> Self {
        self.on_fatal = Arc::new(f);
        self
    }

    /// Uses a shared fault registry.
    pub fn faults(mut self, faults: FaultRegistry) -> Self {
        self.faults = faults;
        self
    }

    /// Uses a shared metrics registry.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Uses a shared health aggregator.
    pub fn health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// Installs an apply observer.
    pub fn observer(mut self, obs: ApplyObserver) -> Self {
        self.observer = Some(obs);
        self
    }

    fn validate(&self) -> Result<(NonZeroU32, NonZeroU32), BuildError> {
        let mut seen = std::collections::HashSet::new();
        for m in &self.managers {
            if !m.name.starts_with("manager/") {
                return Err(BuildError::BadName(m.name.clone(), "manager/"));
            }
            if !seen.insert(m.name.clone()) {
                return Err(BuildError::Duplicate(m.name.clone()));
            }
        }
        for d in &self.drivers {
            if !d.name.starts_with("driver/") {
                return Err(BuildError::BadName(d.name.clone(), "driver/"));
            }
            if d.phase == Phase::IpSetDeletions {
                return Err(BuildError::BadPhase(d.name.clone()));
            }
            if !seen.insert(d.name.clone()) {
                return Err(BuildError::Duplicate(d.name.clone()));
            }
        }
        match (
            NonZeroU32::new(self.cfg.apply_rate_per_sec),
            NonZeroU32::new(self.cfg.apply_burst),
        ) {
            (Some(r), Some(b)) => Ok((r, b)),
            _ => Err(BuildError::BadThrottle),
        }
    }

    /// Starts the supervisor and its children on the current arbiter (call inside an actix
    /// system).
    pub fn start(self) -> Result<SupervisorHandle<M>, BuildError> {
        let (rate, burst) = self.validate()?;
        let seam = Seam::new(self.faults.clone(), self.metrics.clone());
        let faults = self.faults.clone();
        faults.declare("supervisor", &["apply"]);
        for spec in &self.managers {
            faults.declare(&spec.name, MANAGER_OPS);
        }
        for spec in &self.drivers {
            faults.declare(&spec.name, &[DRIVER_APPLY_OP]);
            faults.declare(&spec.name, &spec.ops);
        }
        let managers = self
            .managers
            .into_iter()
            .map(|spec| ManagerSlot {
                addr: ManagerActor::new(&spec.name, (spec.factory)(), faults.clone()).start(),
                spec,
                restarts: 0,
                full_rewrite: true,
                dirty: false,
            })
            .collect();
        let timings = ApplyTimings::default();
        let drivers = self
            .drivers
            .into_iter()
            .map(|spec| DriverSlot {
                addr: {
                    let seam = seam.for_actor(&spec.name);
                    DriverActor::new(&spec.name, Arc::clone(&spec.factory), seam, timings.clone())
                        .start()
                },
                spec,
                restarts: 0,
                resync: true,
                dirty: true,
                last_error: None,
                failures: 0,
                retry_at: None,
            })
            .collect();
        let status = StatusHandle::new(StatusSnapshot {
            in_sync: false,
            dataplane: self.cfg.dataplane.clone(),
            applies: 0,
            last_apply: None,
            actors: Vec::new(),
        });
        let reporter = self.health.reporter(
            "dataplane",
            ReporterSpec {
                live: true,
                ready: true,
                timeout: Some(self.cfg.liveness_timeout),
            },
        );
        let latch = Some(self.health.startup_latch("dataplane-first-apply"));
        let hang_at = self.cfg.debug_hang_after.map(|d| self.clock.now() + d);
        let sup = Supervisor {
            hang_at,
            hanging: false,
            limiter: RateLimiter::direct(Quota::per_second(rate).allow_burst(burst)),
            cfg: self.cfg,
            state_key: self.state_key,
            managers,
            drivers,
            latest: HashMap::new(),
            seq: 0,
            in_sync: false,
            in_sync_at: None,
            first_apply_done: false,
            needs_apply: false,
            apply_scheduled: false,
            applying: false,
            apply_seq: 0,
            applies: 0,
            last_apply: None,
            batch_msgs: 0,
            consecutive_table_failures: 0,
            restart_log: HashMap::new(),
            fatal: None,
            on_fatal: self.on_fatal,
            seam,
            faults: self.faults.clone(),
            metrics: self.metrics.clone(),
            status: status.clone(),
            reporter,
            latch,
            observer: Some(match self.observer {
                Some(user) => {
                    let mine = timings.observer();
                    Arc::new(move |e: &crate::apply::ApplyEvent| {
                        mine(e);
                        user(e);
                    })
                }
                None => timings.observer(),
            }),
            timings: timings.clone(),
            clock: self.clock,
            retry_timer: None,
        };
        sup.publish_status();
        let addr = sup.start();
        Ok(SupervisorHandle {
            addr,
            status,
            faults: self.faults,
            metrics: self.metrics,
            health: self.health,
            timings,
        })
    }
}

impl<M: Clone + Send + 'static> Supervisor<M> {
    fn publish_status(&self) {
        let stopped = self.fatal.is_some();
        let state = if stopped {
            ActorState::Stopped
        } else {
            ActorState::Running
        };
        let mut actors = vec![ActorStatus {
            name: "supervisor".to_string(),
            role: Role::Supervisor,
            state,
            restarts: 0,
            dirty: self.needs_apply,
            last_error: None,
            rejected_chains: Vec::new(),
            unsupported: Vec::new(),
        }];
        actors.extend(self.managers.iter().map(|m| ActorStatus {
            name: m.spec.name.clone(),
            role: Role::Manager,
            state,
            restarts: m.restarts,
            dirty: m.dirty,
            last_error: None,
            rejected_chains: Vec::new(),
            unsupported: Vec::new(),
        }));
        actors.extend(self.drivers.iter().map(|d| ActorStatus {
            name: d.spec.name.clone(),
            role: Role::Driver,
            state,
            restarts: d.restarts,
            dirty: d.dirty || d.resync,
            last_error: d.last_error.clone(),
            rejected_chains: self.metrics.rejected_chains(&d.spec.name),
            unsupported: self.metrics.unsupported(&d.spec.name),
        }));
        self.status.publish(StatusSnapshot {
            in_sync: self.in_sync,
            dataplane: self.cfg.dataplane.clone(),
            applies: self.applies,
            last_apply: self.last_apply.clone(),
            actors,
        });
    }

    /// True once the simulated hang has started (then for good): nothing is applied or
    /// reported any more.
    fn hung(&mut self) -> bool {
        if self.hanging {
            return true;
        }
        if self.hang_at.is_some_and(|at| self.clock.now() >= at) {
            tracing::warn!("DebugSimulateDataplaneHangAfter elapsed: the dataplane now hangs (no applies, no health reports)");
            self.hanging = true;
        }
        self.hanging
    }

    fn report_health(&mut self) {
        if self.hung() {
            return;
        }
        let live = self.fatal.is_none();
        self.reporter.report(live, live && self.first_apply_done);
    }

    fn go_fatal(&mut self, kind: FatalKind, message: String) {
        if self.fatal.is_some() {
            return;
        }
        let f = Fatal { kind, message };
        tracing::error!(kind = ?f.kind, "{}; giving up (fail closed)", f.message);
        self.fatal = Some(f.clone());
        self.report_health();
        self.publish_status();
        (self.on_fatal)(f);
    }

    /// Records a restart of `name`; escalates past the limit. Returns false if fatal.
    fn note_restart(&mut self, name: &str, reason: &str) -> bool {
        let now = self.clock.now();
        let window = self.cfg.restart_window;
        let log = self.restart_log.entry(name.to_string()).or_default();
        log.push_back(now);
        while log.front().is_some_and(|t| now.duration_since(*t) > window) {
            log.pop_front();
        }
        let n = log.len();
        self.metrics.inc_restart(name);
        if n > self.cfg.max_restarts as usize {
            self.go_fatal(
                FatalKind::RestartLimit,
                format!(
                    "{name} failed {n} times within {window:?} (limit {} restarts); last failure: {reason}",
                    self.cfg.max_restarts
                ),
            );
            return false;
        }
        tracing::warn!(
            actor = name,
            restarts_in_window = n,
            reason,
            "restarting actor"
        );
        true
    }

    fn restart_manager(&mut self, idx: usize, reason: &str) {
        let name = self.managers[idx].spec.name.clone();
        if !self.note_restart(&name, reason) {
            return;
        }
        let slot = &mut self.managers[idx];
        let fresh = ManagerActor::new(&name, (slot.spec.factory)(), self.faults.clone()).start();
        let mut replay: Vec<&(u64, Box<M>)> = self
            .latest
            .values()
            .filter(|(_, m)| (slot.spec.wants)(m))
            .collect();
        replay.sort_by_key(|(seq, _)| *seq);
        for (_, m) in replay {
            fresh.do_send(OnUpdate(M::clone(m)));
        }
        slot.addr = fresh;
        slot.restarts += 1;
        slot.full_rewrite = true;
        slot.dirty = true;
        for d in &mut self.drivers {
            d.resync = true;
        }
        self.needs_apply = true;
    }

    fn restart_driver(&mut self, idx: usize, reason: &str) {
        let name = self.drivers[idx].spec.name.clone();
        if !self.note_restart(&name, reason) {
            return;
        }
        let slot = &mut self.drivers[idx];
        slot.addr = {
            let seam = self.seam.for_actor(&name);
            DriverActor::new(
                &name,
                Arc::clone(&slot.spec.factory),
                seam,
                self.timings.clone(),
            )
            .start()
        };
        slot.restarts += 1;
        slot.resync = true;
        slot.dirty = true;
        slot.failures = 0;
        slot.retry_at = None;
        self.needs_apply = true;
    }

    /// Restarts actors whose mailbox closed (e.g. a panic in a fire-and-forget handler).
    fn reap_dead(&mut self) {
        for i in 0..self.managers.len() {
            if !self.managers[i].addr.connected() {
                self.restart_manager(i, "actor stopped (mailbox closed)");
            }
        }
        for i in 0..self.drivers.len() {
            if !self.drivers[i].addr.connected() {
                self.restart_driver(i, "actor stopped (mailbox closed)");
            }
        }
    }

    fn on_message(&mut self, m: M) {
        match (self.state_key)(&m) {
            StateKey::Set(k) => {
                self.seq += 1;
                self.latest.insert(k, (self.seq, Box::new(m.clone())));
            }
            StateKey::Remove(k) => {
                self.latest.remove(&k);
            }
            StateKey::Transient => {}
        }
        for slot in &mut self.managers {
            if (slot.spec.wants)(&m) {
                slot.addr.do_send(OnUpdate(m.clone()));
                slot.dirty = true;
            }
        }
        self.batch_msgs += 1;
        self.needs_apply = true;
    }

    /// Schedules one apply through the leaky bucket, unless one is pending or not allowed.
    fn schedule_apply(&mut self, ctx: &mut Context<Self>) {
        if !self.in_sync || self.apply_scheduled || self.applying || self.fatal.is_some() {
            return;
        }
        self.apply_scheduled = true;
        let delay = match self.limiter.check() {
            Ok(()) => Duration::ZERO,
            Err(not_until) => not_until.wait_time_from(DefaultClock::default().now()),
        };
        ctx.run_later(delay, move |act, ctx| {
            act.apply_scheduled = false;
            if delay > Duration::ZERO && act.limiter.check().is_err() {
                act.schedule_apply(ctx);
                return;
            }
            act.start_apply(ctx);
        });
    }

    fn start_apply(&mut self, ctx: &mut Context<Self>) {
        if self.fatal.is_some() || !self.in_sync || self.applying || self.hung() {
            return;
        }
        self.reap_dead();
        if self.fatal.is_some() {
            return;
        }
        // Step 1: clear needs-sync; failures set it again.
        self.needs_apply = false;
        self.apply_seq += 1;
        let batch = std::mem::take(&mut self.batch_msgs);
        self.metrics.observe_batch(batch);
        let now = self.clock.now();
        let plan = ApplyPlan {
            seq: self.apply_seq,
            managers: self
                .managers
                .iter()
                .enumerate()
                .map(|(idx, m)| PlanManager {
                    idx,
                    name: Arc::from(m.spec.name.as_str()),
                    addr: m.addr.clone(),
                    full_rewrite: m.full_rewrite,
                })
                .collect(),
            drivers: self
                .drivers
                .iter()
                .enumerate()
                .map(|(idx, d)| PlanDriver {
                    idx,
                    phase: d.spec.phase,
                    lane: d.spec.lane,
                    addr: d.addr.clone(),
                    resync: d.resync,
                    backing_off: d.retry_at.is_some_and(|t| now < t),
                })
                .collect(),
            observer: self.observer.clone(),
            injected: self.faults.take("supervisor", "apply"),
        };
        tracing::debug!(seq = self.apply_seq, batch, "apply starting");
        self.applying = true;
        let delay = self.cfg.debug_apply_delay;
        ctx.wait(
            async move {
                if let Some(d) = delay {
                    tracing::debug!(?d, "DebugSimulateDataplaneApplyDelay: delaying the apply");
                    actix::clock::sleep(d).await;
                }
                run_apply(plan).await
            }
            .into_actor(self)
            .map(|out, act, ctx| act.finish_apply(out, ctx)),
        );
    }

    fn finish_apply(&mut self, out: ApplyOutcome, ctx: &mut Context<Self>) {
        self.applying = false;
        if let Some(why) = &out.blocked {
            tracing::warn!(seq = self.apply_seq, "apply held back: {why}");
        }
        for (idx, r) in &out.managers {
            match r {
                ManagerResult::Ok => {
                    let m = &mut self.managers[*idx];
                    m.dirty = false;
                    m.full_rewrite = false;
                }
                ManagerResult::Died(reason)
                | ManagerResult::Failed(ApplyError::NeedsRestart { reason }) => {
                    self.restart_manager(*idx, reason)
                }
                ManagerResult::Failed(e) => {
                    tracing::warn!(actor = %self.managers[*idx].spec.name, error = %e, "deferred work failed; will retry");
                    self.managers[*idx].dirty = true;
                }
            }
        }
        for (idx, r) in &out.drivers {
            let slot = &mut self.drivers[*idx];
            slot.dirty = r.dirty();
            match r {
                DriverReply::Died { reason } => self.restart_driver(*idx, reason),
                DriverReply::Failed {
                    failure,
                    needs_restart: true,
                } => {
                    slot.note_failure(failure);
                    self.restart_driver(*idx, &failure.message)
                }
                DriverReply::Failed { failure, .. } => {
                    slot.resync = false;
                    slot.note_failure(failure);
                    if slot.spec.phase != Phase::Tables {
                        slot.failures += 1;
                        let doubling = 2u32.saturating_pow(slot.failures - 1);
                        let pause = self
                            .cfg
                            .retry_backoff
                            .saturating_mul(doubling)
                            .min(self.cfg.retry_backoff_max);
                        slot.retry_at = Some(self.clock.now() + pause);
                    }
                }
                DriverReply::Skipped { .. } => slot.resync = false,
                _ => {
                    slot.resync = false;
                    slot.failures = 0;
                    slot.retry_at = None;
                }
            }
        }
        if out.tables_failed {
            self.consecutive_table_failures += 1;
            let n = self.consecutive_table_failures;
            if n >= self.cfg.max_consecutive_table_failures {
                self.go_fatal(
                    FatalKind::TablesFailing,
                    format!("*tables programming failed in {n} consecutive applies; the node's policy may not be enforced"),
                );
            }
        } else if out
            .drivers
            .keys()
            .any(|i| self.drivers[*i].spec.phase == Phase::Tables)
        {
            self.consecutive_table_failures = 0;
        }
        self.metrics.observe_apply(out.duration, out.ok);
        self.applies += 1;
        self.last_apply = Some(LastApply {
            ok: out.ok,
            duration_ms: out.duration.as_secs_f64() * 1e3,
            at: rfc3339(SystemTime::now()),
        });
        if out.ok && !self.first_apply_done {
            self.first_apply_done = true;
            let since = self.in_sync_at.map_or(out.duration, |t| {
                self.clock.now().saturating_duration_since(t)
            });
            self.metrics.set_initial_resync(since);
            self.latch = None;
            tracing::info!(
                seconds = since.as_secs_f64(),
                "initial dataplane resync complete"
            );
        }
        if !out.ok || self.drivers.iter().any(|d| d.dirty || d.resync) {
            self.needs_apply = true;
        }
        self.report_health();
        self.publish_status();
        if self.needs_apply {
            self.schedule_retry(&out, ctx);
        }
    }

    /// After an apply that left work: the next apply at once (rate-limited) when some
    /// work can make progress now; when the only work left waits on drivers backing off
    /// after failures (or on *tables held behind IP sets backing off), one apply when the
    /// first backoff ends. Retries of a persistently failing driver are so paced by its
    /// backoff, not by the apply rate.
    fn schedule_retry(&mut self, out: &ApplyOutcome, ctx: &mut Context<Self>) {
        let now = self.clock.now();
        let backing_off = |d: &DriverSlot| d.retry_at.is_some_and(|t| now < t);
        // *tables wait on the IP-set drivers of their lane (on all of them when one of the
        // ordered drivers has no lane: the apply then runs a single lane).
        let single = one_lane(self.drivers.iter().map(|d| (d.spec.phase, d.spec.lane)));
        let sets_wait = |lane: Option<u8>| {
            self.drivers.iter().any(|d| {
                d.spec.phase == Phase::IpSets
                    && d.dirty
                    && backing_off(d)
                    && (single || d.spec.lane == lane)
            })
        };
        let waits = |d: &DriverSlot| {
            backing_off(d) || (d.spec.phase == Phase::Tables && sets_wait(d.spec.lane))
        };
        let now_work = (!out.ok && out.drivers.is_empty())
            || out.managers.iter().any(|(_, r)| *r != ManagerResult::Ok)
            || self
                .drivers
                .iter()
                .any(|d| (d.dirty || d.resync) && !waits(d));
        if now_work {
            self.schedule_apply(ctx);
            return;
        }
        let Some(at) = self
            .drivers
            .iter()
            .filter_map(|d| d.retry_at.filter(|t| now < *t))
            .min()
        else {
            self.schedule_apply(ctx);
            return;
        };
        if self.retry_timer.is_some_and(|t| t <= at && now < t) {
            return;
        }
        self.retry_timer = Some(at);
        ctx.run_later(at.saturating_duration_since(now), move |act, ctx| {
            if act.retry_timer == Some(at) {
                act.retry_timer = None;
            }
            act.needs_apply = true;
            act.schedule_apply(ctx);
        });
    }

    fn refresh(&mut self, phases: &[Phase], ctx: &mut Context<Self>) {
        for d in &mut self.drivers {
            if phases.contains(&d.spec.phase) {
                d.resync = true;
            }
        }
        self.needs_apply = true;
        self.schedule_apply(ctx);
    }
}

impl<M: Clone + Send + 'static> Actor for Supervisor<M> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.report_health();
        ctx.run_interval(self.cfg.retry_interval, |act, ctx| {
            if act.fatal.is_some() {
                return;
            }
            act.reap_dead();
            if act.needs_apply || act.drivers.iter().any(|d| d.dirty || d.resync) {
                act.needs_apply = true;
                act.schedule_apply(ctx);
            }
        });
        ctx.run_interval(Duration::from_secs(1), |act, _ctx| act.report_health());
        let timers = [
            (
                self.cfg.route_refresh_interval,
                &[Phase::Routes, Phase::RouteRules, Phase::VxlanFdb][..],
            ),
            (self.cfg.ipsets_refresh_interval, &[Phase::IpSets][..]),
            (self.cfg.tables_refresh_interval, &[Phase::Tables][..]),
        ];
        for (interval, phases) in timers {
            if let Some(iv) = interval.filter(|d| !d.is_zero()) {
                ctx.run_interval(iv, move |act, ctx| act.refresh(phases, ctx));
            }
        }
        ctx.run_interval(self.cfg.summary_interval, |act, _ctx| {
            let s = act.metrics.take_summary();
            let avg_ms = if s.applies > 0 {
                s.total.as_secs_f64() * 1e3 / s.applies as f64
            } else {
                0.0
            };
            tracing::info!(
                applies = s.applies,
                failed = s.failed,
                avg_ms,
                max_ms = s.max.as_secs_f64() * 1e3,
                total_applies = act.applies,
                "dataplane apply summary"
            );
        });
    }
}

impl<M: Clone + Send + 'static> Handler<Update<M>> for Supervisor<M> {
    type Result = ();

    fn handle(&mut self, msg: Update<M>, ctx: &mut Context<Self>) {
        if self.fatal.is_some() {
            return;
        }
        self.on_message(msg.0);
        self.schedule_apply(ctx);
    }
}

impl<M: Clone + Send + 'static> Handler<UpdateBatch<M>> for Supervisor<M> {
    type Result = ();

    fn handle(&mut self, msg: UpdateBatch<M>, ctx: &mut Context<Self>) {
        if self.fatal.is_some() {
            return;
        }
        for m in msg.0 {
            self.on_message(m);
        }
        self.schedule_apply(ctx);
    }
}

impl<M: Clone + Send + 'static> Handler<InSync> for Supervisor<M> {
    type Result = ();

    fn handle(&mut self, _msg: InSync, ctx: &mut Context<Self>) {
        if self.in_sync || self.fatal.is_some() {
            return;
        }
        tracing::info!("datastore in sync; dataplane programming may begin");
        self.in_sync = true;
        self.in_sync_at = Some(self.clock.now());
        for d in &mut self.drivers {
            d.resync = true;
        }
        self.needs_apply = true;
        self.publish_status();
        self.schedule_apply(ctx);
    }
}

impl<M: Clone + Send + 'static> Handler<KernelChanged> for Supervisor<M> {
    type Result = ();

    fn handle(&mut self, _msg: KernelChanged, ctx: &mut Context<Self>) {
        if self.fatal.is_some() {
            return;
        }
        self.needs_apply = true;
        self.schedule_apply(ctx);
    }
}

impl<M: Clone + Send + 'static> Handler<ReadBackAll> for Supervisor<M> {
    type Result = ();

    /// Asks every driver for its read-back at once and answers when all have.
    fn handle(&mut self, msg: ReadBackAll, ctx: &mut Context<Self>) {
        let asks: Vec<_> = self
            .drivers
            .iter()
            .map(|d| {
                let name = d.spec.name.clone();
                let ask = d.addr.send(ReadBackRequest);
                async move {
                    let rb = ask.await.unwrap_or_else(|e| DriverReadBack {
                        read_back: Default::default(),
                        error: Some(format!("{name}: actor unavailable: {e}")),
                    });
                    (name, rb)
                }
            })
            .collect();
        ctx.spawn(
            async move {
                let all = futures_util::future::join_all(asks).await;
                let _ = msg.reply.send(all.into_iter().collect());
            }
            .into_actor(self),
        );
    }
}

impl<M: Clone + Send + 'static> Handler<GetStatus> for Supervisor<M> {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        self.publish_status();
        MessageResult(self.status.snapshot())
    }
}
