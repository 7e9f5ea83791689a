//! `felix run` from start to stop: local configuration and logging, the
//! syncer and calc-graph threads, the connector that starts the dataplane
//! once the datastore's configuration is known and watches for changes
//! that need a restart, and the clean shutdown.
//!
//! All control flows through one channel read by the main thread
//! ([`Control`]): calc-graph events, signals and the supervisor's fatal
//! outcome. The main thread never blocks on the dataplane.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use felix_actors::prometheus::{start_prometheus_server, PrometheusConfig};
use felix_actors::server::ServerHandle;
use felix_actors::{
    start_admin_server, start_health_server, Fatal, HealthConfig, ReporterSpec, StartupLatch,
};
use felix_config::Config;
use felix_proto as pb;
use felix_proto::to_dataplane::Payload;
use parking_lot::Mutex;

use super::calc_loop::{Batch, CalcEvent, CalcLoop, CalcLoopConfig, Inflight, SharedView};
use super::config_load::{log_local_errors, ConfigTracker, DatastoreLayers, LocalConfig};
use super::dataplane::{Dataplane, Shared};
use super::datastore_spec::DatastoreSpec;
use super::debug_sim::{spawn_timer, DebugSim, HangSwitch};
use super::external::External;
use super::logging::{self, LogHandle};
use super::metrics::CalcMetrics;
use super::{signals, DaemonError, RunOptions, RuntimeError, Stop, SYNC_CHANNEL_CAPACITY};
use crate::calc::view::DataplaneView;
use crate::datastore::etcd::{EtcdConfig, EtcdSyncer, EtcdSyncerConfig, EtcdSyncerError};
use crate::datastore::{FileSyncer, FileSyncerConfig};

/// The calc-graph reporter counts as not live after this long without a
/// report.
const CALC_LIVENESS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long felix waits after its external dataplane driver died before it exits.
const DRIVER_EXIT_PAUSE: Duration = Duration::from_secs(2);
/// How long shutdown waits for the dataplane thread.
const DATAPLANE_STOP_TIMEOUT: Duration = Duration::from_secs(10);

enum Control {
    Signal(&'static str),
    Calc(CalcEvent),
    Fatal(Fatal),
    /// `DebugPanicAfter` elapsed.
    DebugPanic(Duration),
    /// The external dataplane driver exited or sent something broken.
    Driver(super::external::DriverEvent),
}

enum Outcome {
    Signal(&'static str),
    Restart(String),
    Fatal(RuntimeError),
}

fn runtime(what: &'static str) -> impl FnOnce(std::io::Error) -> DaemonError {
    move |source| DaemonError::Runtime(RuntimeError::Io { what, source })
}

fn health_config(cfg: &Config) -> HealthConfig {
    HealthConfig {
        enabled: cfg.health_enabled(),
        host: cfg.health_host().to_string(),
        port: cfg.health_port(),
    }
}

fn prometheus_config(cfg: &Config) -> PrometheusConfig {
    PrometheusConfig {
        enabled: cfg.prometheus_metrics_enabled(),
        host: cfg.prometheus_metrics_host().to_string(),
        port: cfg.prometheus_metrics_port(),
        process: cfg.prometheus_process_metrics_enabled(),
    }
}

/// The Prometheus metrics port, restarted when its settings change.
#[derive(Default)]
struct MetricsPort {
    cfg: Option<PrometheusConfig>,
    handle: Option<ServerHandle>,
}

impl MetricsPort {
    fn apply(&mut self, cfg: PrometheusConfig, metrics: &felix_actors::Metrics) {
        if self.cfg.as_ref() == Some(&cfg) {
            return;
        }
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
        match start_prometheus_server(&cfg, metrics) {
            Ok(h) => {
                if let Some(h) = &h {
                    tracing::info!(addr = h.local_addr(), "Prometheus metrics port listening");
                }
                self.handle = h;
            }
            Err(e) => tracing::error!(
                host = %cfg.host, port = cfg.port,
                "cannot serve Prometheus metrics (PrometheusMetricsHost/PrometheusMetricsPort): {e}"
            ),
        }
        self.cfg = Some(cfg);
    }

    fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// The running datastore syncer.
enum Syncer {
    File(FileSyncer),
    Etcd(EtcdSyncer),
}

impl Syncer {
    fn stop(self) {
        match self {
            Syncer::File(s) => s.stop(),
            Syncer::Etcd(s) => s.stop(),
        }
    }
}

/// The health port, restarted when its settings change.
struct HealthServer {
    cfg: Option<HealthConfig>,
    handle: Option<ServerHandle>,
}

impl HealthServer {
    fn apply(&mut self, cfg: HealthConfig, health: &felix_actors::Health) {
        if self.cfg.as_ref() == Some(&cfg) {
            return;
        }
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
        match start_health_server(&cfg, health) {
            Ok(h) => {
                if let Some(h) = &h {
                    tracing::info!(addr = h.local_addr(), "health port listening");
                }
                self.handle = h;
            }
            Err(e) => tracing::error!(
                host = %cfg.host, port = cfg.port,
                "cannot serve the health port (HealthHost/HealthPort): {e}"
            ),
        }
        self.cfg = Some(cfg);
    }

    fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// Runs the daemon until a signal, a needed restart, or a fatal failure.
pub fn run(opts: RunOptions) -> Result<Stop, DaemonError> {
    let mut local = LocalConfig::load(opts.config_file.as_deref())
        .map_err(|e| DaemonError::Input(e.to_string()))?;
    let node = local.node_name(opts.node.as_deref(), crate::cli::node_name::hostname);
    // The resolved node name (`--node`, else `FelixHostname` from the environment or the
    // config file, else the hostname) is this node's `FelixHostname` for everything that
    // reads the configuration (the dataplane's cluster routes find this node's own VTEP by
    // it).
    local
        .env
        .retain(|k, _| !k.eq_ignore_ascii_case("FelixHostname"));
    local.env.insert("FelixHostname".to_string(), node.clone());
    let (local_cfg, local_errs) = local.build();
    let log = logging::init(&local_cfg);
    log_local_errors(&local_errs);
    let spec = DatastoreSpec::resolve(opts.datastore.as_deref(), &local_cfg)
        .map_err(|e| DaemonError::Input(e.to_string()))?;
    // Validate the etcd settings before anything starts (bad input: exit 2).
    let etcd = match &spec {
        DatastoreSpec::File(_) => None,
        DatastoreSpec::Etcd(urls) => Some(
            EtcdConfig::with_endpoints(&urls.join(","))
                .and_then(|c| {
                    c.from_params(|name| {
                        local_cfg
                            .get(name)
                            .map(|v| v.render())
                            .filter(|v| !v.is_empty() && v != "none")
                    })
                })
                .map_err(|e| DaemonError::Input(format!("--datastore {spec}: {e}")))?,
        ),
    };
    tracing::info!(
        node = %node,
        datastore = %spec,
        config_file = ?local.file_path,
        "felix starting"
    );

    let (ctl_tx, ctl_rx) = mpsc::channel::<Control>();
    {
        let tx = ctl_tx.clone();
        signals::install(move |s| {
            let _ = tx.send(Control::Signal(s));
        })
        .map_err(runtime("installing signal handlers"))?;
    }

    let shared = Shared::default();
    let calc_metrics = CalcMetrics::new();
    {
        let m = calc_metrics.clone();
        shared.metrics.add_collector(Arc::new(move || m.render()));
        shared
            .metrics
            .add_collector(crate::dataplane::metrics::dataplane_collector(
                shared.metrics.clone(),
            ));
    }
    let latch = shared.health.startup_latch("felix-config-loaded");
    let calc_reporter = shared.health.reporter(
        "calc-graph",
        ReporterSpec {
            live: true,
            ready: true,
            timeout: Some(CALC_LIVENESS_TIMEOUT),
        },
    );
    let mut health = HealthServer {
        cfg: None,
        handle: None,
    };
    health.apply(health_config(&local_cfg), &shared.health);

    let etcd_for_status = etcd.clone();
    let (sync_tx, sync_rx) = mpsc::sync_channel(SYNC_CHANNEL_CAPACITY);
    let syncer = match (&spec, etcd) {
        (DatastoreSpec::File(dir), _) => Syncer::File(
            FileSyncer::start(FileSyncerConfig::new(dir), sync_tx)
                .map_err(runtime("starting the file datastore syncer"))?,
        ),
        (DatastoreSpec::Etcd(_), etcd) => Syncer::Etcd(
            EtcdSyncer::start(EtcdSyncerConfig::new(etcd.unwrap_or_default()), sync_tx).map_err(
                |e| match e {
                    EtcdSyncerError::Config(c) => {
                        DaemonError::Input(format!("--datastore {spec}: {c}"))
                    }
                    other => DaemonError::Runtime(RuntimeError::Etcd(other)),
                },
            )?,
        ),
    };

    let view: SharedView = Arc::new(Mutex::new(DataplaneView::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let calc_hang = HangSwitch::default();
    let fold_ipset_deltas = Arc::new(AtomicBool::new(true));
    let calc = {
        let tx = ctl_tx.clone();
        CalcLoop::new(
            &node,
            sync_rx,
            Box::new(move |e| tx.send(Control::Calc(e)).is_ok()),
            view.clone(),
            Inflight::new(),
            calc_metrics,
            calc_reporter,
            stop.clone(),
            CalcLoopConfig {
                // A file datastore is ready unless it says otherwise; etcd
                // only once ClusterInformation says datastoreReady: true.
                ready_if_absent: matches!(spec, DatastoreSpec::File(_)),
                faults: Some(shared.faults.clone()),
                // Read once at start, as upstream builds its graph from
                // config (the datastore's FelixConfiguration is not
                // consulted here yet: the graph's options come from the
                // environment and the config file).
                graph_options: crate::calc::GraphOptions::from_config(&local_cfg),
                // Armed by the connector once the full configuration is known.
                hang: calc_hang.clone(),
                fold_ipset_deltas: fold_ipset_deltas.clone(),
                ..CalcLoopConfig::default()
            },
        )
    };
    let calc_thread = std::thread::Builder::new()
        .name("calc-graph".into())
        .spawn(move || calc.run())
        .map_err(runtime("starting the calculation graph thread"))?;

    let mut conn = Connector {
        admin_socket: opts.admin_socket.clone(),
        local: Some(local),
        tracker: None,
        encap: None,
        dp: None,
        admin: None,
        health,
        metrics_port: MetricsPort::default(),
        latch: Some(latch),
        log,
        shared,
        view,
        node: node.clone(),
        drops: None,
        ctl: ctl_tx,
        calc_hang,
        stop: stop.clone(),
        fold_ipset_deltas,
        etcd: etcd_for_status,
    };
    let outcome = loop {
        let Ok(ctl) = ctl_rx.recv() else {
            break Outcome::Fatal(RuntimeError::ControlClosed);
        };
        match ctl {
            Control::Signal(s) => break Outcome::Signal(s),
            Control::Fatal(f) => break Outcome::Fatal(RuntimeError::DataplaneFatal(f)),
            Control::Driver(e) => {
                // As upstream: a pause before exiting, so a driver that dies at once does
                // not make felix and its supervisor restart in a tight loop.
                tracing::error!("{e}; felix exits in {DRIVER_EXIT_PAUSE:?}");
                std::thread::sleep(DRIVER_EXIT_PAUSE);
                break Outcome::Fatal(RuntimeError::Driver(e.to_string()));
            }
            Control::DebugPanic(d) => {
                tracing::error!(after = ?d, "DebugPanicAfter elapsed: felix stops with an error, as configured");
                break Outcome::Fatal(RuntimeError::DebugPanicAfter(d));
            }
            Control::Calc(CalcEvent::Batch(b)) => {
                if let Some(o) = conn.on_batch(b) {
                    break o;
                }
            }
            Control::Calc(CalcEvent::DatastoreNotReady) => {
                break Outcome::Restart("datastore became unready".into())
            }
            Control::Calc(CalcEvent::SyncerGone) => break Outcome::Fatal(RuntimeError::SyncerGone),
        }
    };

    tracing::info!("stopping: datastore syncer, calculation graph, dataplane");
    stop.store(true, Ordering::Release);
    syncer.stop();
    if calc_thread.join().is_err() {
        tracing::error!("calculation graph thread panicked");
    }
    conn.shutdown();
    match outcome {
        Outcome::Signal(s) => {
            tracing::info!(signal = s, "stopped; kernel state left in place");
            Ok(Stop::Signal(s))
        }
        Outcome::Restart(r) => {
            // A SIGTERM/SIGINT that arrived while stopping for the restart wins: the
            // operator asked felix to stop, so it must not re-execute itself.
            let signalled = std::iter::from_fn(|| ctl_rx.try_recv().ok()).find_map(|c| match c {
                Control::Signal(s) => Some(s),
                _ => None,
            });
            if let Some(s) = signalled {
                tracing::info!(signal = s, reason = %r, "signal received while restarting; stopping instead");
                return Ok(Stop::Signal(s));
            }
            tracing::warn!(reason = %r, "restarting");
            Ok(Stop::Restart(r))
        }
        Outcome::Fatal(e) => Err(DaemonError::Runtime(e)),
    }
}

/// Where batches go: the supervisor in this process, or an external driver.
enum Plane {
    Internal(Dataplane),
    External(External),
}

impl Plane {
    fn send(&self, batch: Batch) {
        match self {
            Plane::Internal(d) => d.send(batch),
            Plane::External(x) => x.send(batch),
        }
    }

    fn admin_context(&self) -> felix_actors::AdminContext {
        match self {
            Plane::Internal(d) => d.admin_context(),
            Plane::External(x) => x.admin_context(),
        }
    }

    fn stop(self, timeout: Duration) -> bool {
        match self {
            Plane::Internal(d) => d.stop(timeout),
            Plane::External(x) => x.stop(timeout),
        }
    }
}

/// Between the calc graph and the supervisor: configuration, restarts,
/// and the start of the dataplane (upstream's dataplane connector).
struct Connector {
    admin_socket: PathBuf,
    local: Option<LocalConfig>,
    tracker: Option<ConfigTracker>,
    encap: Option<pb::Encapsulation>,
    dp: Option<Plane>,
    admin: Option<ServerHandle>,
    health: HealthServer,
    metrics_port: MetricsPort,
    latch: Option<StartupLatch>,
    log: LogHandle,
    shared: Shared,
    view: SharedView,
    node: String,
    drops: Option<crate::dataplane::drops::reader::DropReader>,
    ctl: mpsc::Sender<Control>,
    /// The calc loop's `DebugSimulateCalcGraphHangAfter` switch.
    calc_hang: HangSwitch,
    /// The daemon's stop flag (ends the `DebugPanicAfter` timer).
    stop: Arc<AtomicBool>,
    /// The calc loop's delta folding, off when an external driver gets the messages.
    fold_ipset_deltas: Arc<AtomicBool>,
    /// The etcd datastore, when felix runs on one (an external driver's status reports are
    /// written there).
    etcd: Option<crate::datastore::etcd::EtcdConfig>,
}

impl Connector {
    fn on_batch(&mut self, batch: Batch) -> Option<Outcome> {
        let layers = batch.payloads.iter().rev().find_map(|p| match p {
            Payload::ConfigUpdate(c) => Some(DatastoreLayers::from_update(c)),
            _ => None,
        });
        let encap = batch.payloads.iter().rev().find_map(|p| match p {
            Payload::Encapsulation(e) => Some(*e),
            _ => None,
        });
        if self.dp.is_none() {
            return self.start(batch, layers, encap);
        }
        if let (Some(layers), Some(tracker)) = (layers, self.tracker.as_mut()) {
            let change = tracker.update(&layers);
            if !change.restart.is_empty() {
                return Some(Outcome::Restart(format!(
                    "configuration change needs a restart: {}",
                    change.restart.join(", ")
                )));
            }
            let cfg = tracker.config().clone();
            self.apply_live_settings(&cfg);
        }
        if let Some(e) = encap {
            match &self.encap {
                Some(old) if *old != e => {
                    return Some(Outcome::Restart(
                        "IPIP, VXLAN and/or no-encap encapsulation changed".into(),
                    ))
                }
                _ => self.encap = Some(e),
            }
        }
        if let Some(dp) = &self.dp {
            dp.send(batch);
        }
        None
    }

    /// The settings applied without a restart: the logging levels and outputs and the
    /// health reporters' timeout overrides.
    fn apply_live_settings(&self, cfg: &Config) {
        self.log.configure(cfg);
        for name in self
            .shared
            .health
            .set_timeout_overrides(cfg.health_timeout_overrides())
        {
            tracing::warn!(
                reporter = %name,
                "HealthTimeoutOverrides names no health reporter of felix-rs \
                 (InternalDataplaneMainLoop/dataplane, CalculationGraph/calc-graph); ignored"
            );
        }
    }

    /// Start of day: full configuration, supervisor, admin socket.
    fn start(
        &mut self,
        batch: Batch,
        layers: Option<DatastoreLayers>,
        encap: Option<pb::Encapsulation>,
    ) -> Option<Outcome> {
        let layers = layers.unwrap_or_else(|| {
            tracing::warn!("first batch carried no configuration; using local configuration only");
            DatastoreLayers::default()
        });
        let local = self.local.take().unwrap_or_default();
        let (tracker, _) = ConfigTracker::new(local, &layers);
        let cfg = tracker.config().clone();
        self.tracker = Some(tracker);
        for (p, source) in felix_config::set_without_effect(&cfg) {
            tracing::warn!(
                parameter = p.name(),
                ?source,
                "parameter {} has no effect in felix-rs; it is accepted and ignored",
                p.name()
            );
        }
        if let Err(e) = self.start_debug_simulations(&cfg) {
            return Some(Outcome::Fatal(RuntimeError::Io {
                what: "starting the DebugPanicAfter timer",
                source: e,
            }));
        }
        self.health.apply(health_config(&cfg), &self.shared.health);
        self.apply_live_settings(&cfg);
        self.metrics_port
            .apply(prometheus_config(&cfg), &self.shared.metrics);
        self.encap = encap;
        let ctl = self.ctl.clone();
        let dp = if cfg.use_internal_dataplane_driver() {
            match Dataplane::start(&cfg, &self.shared, move |f| {
                tracing::error!("{f}");
                let _ = ctl.send(Control::Fatal(f));
            }) {
                Ok(dp) => Plane::Internal(dp),
                Err(e) => return Some(Outcome::Fatal(RuntimeError::DataplaneStart(e))),
            }
        } else {
            // Deltas go on the wire as they are (the driver keeps its own state).
            self.fold_ipset_deltas.store(false, Ordering::Release);
            let etcd = self.etcd.clone();
            match External::start(&cfg, &self.shared, &self.admin_socket, etcd, move |e| {
                let _ = ctl.send(Control::Driver(e));
            }) {
                Ok(x) => Plane::External(x),
                Err(e) => return Some(Outcome::Fatal(RuntimeError::DriverStart(e))),
            }
        };
        let admin = dp.admin_context();
        let view = self.view.clone();
        admin.set_dataplane_view(Arc::new(move || view.lock().to_json(0)));
        admin.route(
            "POST",
            "/explain",
            crate::explain::admin::explain_handler(
                self.view.clone(),
                crate::explain::Settings::from_config(&cfg),
                self.node.clone(),
            ),
        );
        if let Some(r) = self.drops.take() {
            r.stop();
        }
        if let Plane::Internal(_) = &dp {
            super::diag_routes::add_routes(&admin, &cfg, &self.log);
            self.drops = super::drops::start_drops(&cfg, &self.shared, self.view.clone(), &admin);
        }
        dp.send(batch);
        self.dp = Some(dp);
        match start_admin_server(&self.admin_socket, &admin) {
            Ok(h) => {
                tracing::info!(socket = %self.admin_socket.display(), "admin socket listening");
                self.admin = Some(h);
            }
            Err(e) => {
                return Some(Outcome::Fatal(RuntimeError::AdminSocket {
                    path: self.admin_socket.clone(),
                    source: e,
                }))
            }
        }
        self.latch = None;
        None
    }

    /// Announces and arms the debug simulations `cfg` sets (the dataplane's
    /// are in its supervisor configuration); see [`super::debug_sim`].
    fn start_debug_simulations(&self, cfg: &Config) -> std::io::Result<()> {
        let sim = DebugSim::from_config(cfg);
        sim.warn_at_start();
        let clock = felix_actors::clock::system();
        if let Some(d) = sim.calc_hang_after {
            self.calc_hang.arm(clock.now() + d);
        }
        if let Some(d) = sim.panic_after {
            let ctl = self.ctl.clone();
            spawn_timer(
                "debug-panic-after",
                d,
                clock,
                Duration::from_secs(1),
                self.stop.clone(),
                move || {
                    let _ = ctl.send(Control::DebugPanic(d));
                },
            )?;
        }
        Ok(())
    }

    fn shutdown(mut self) {
        if let Some(r) = self.drops.take() {
            r.stop();
        }
        if let Some(dp) = self.dp.take() {
            dp.stop(DATAPLANE_STOP_TIMEOUT);
        }
        if let Some(a) = self.admin.take() {
            a.shutdown();
            let _ = std::fs::remove_file(&self.admin_socket);
        }
        self.health.stop();
        self.metrics_port.stop();
        drop(self.latch.take());
    }
}
