//! The dataplane supervisor on its own thread: an actix `System` running
//! `felix_actors::Supervisor<Payload>` with the managers and drivers from
//! [`super::dataplane_wiring`].
//!
//! Batches are handed over with [`Dataplane::send`], which never blocks the
//! caller: it spawns, on the supervisor's arbiter, a task that sends
//! `UpdateBatch` (and then `InSync` when the batch carried it) and waits for
//! the supervisor to take them. The batch's in-flight guard is released
//! only then, which is what paces the calc-graph thread: while the
//! supervisor is busy applying (its mailbox is held during an apply), no new
//! batch is flushed.
//!
//! Beside the supervisor runs the interface monitor
//! (`crate::dataplane::ifacemon`, seam actor `monitor/interfaces`, its own
//! thread): it feeds the interface state the route and interface drivers
//! subscribe to, and sends `KernelChanged` to the supervisor when a link
//! or address changed. If it cannot start, late interfaces are still
//! programmed by the retry ticker.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::{Addr, ArbiterHandle, System};
use felix_actors::{
    AdminContext, BuildError, Fatal, FaultRegistry, Health, InSync, KernelChanged, Metrics, Seam,
    Supervisor, SupervisorBuilder, SupervisorConfig, UpdateBatch,
};
use felix_config::{Config, DataplaneMode};
use felix_proto::to_dataplane::Payload;

use crate::dataplane::ifacemon::{
    InterfaceMonitor, InterfaceState, MonitorOptions, RtnetlinkSource, MONITOR_ACTOR,
};

use super::calc_loop::Batch;
use super::dataplane_wiring;
use super::messages::state_key;
use crate::dataplane::bpf::policy::SharedDropNames;

/// The runtime parts shared between the daemon and the supervisor.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// Armed faults (`/faults`).
    pub faults: FaultRegistry,
    /// Metrics (`/metrics`).
    pub metrics: Metrics,
    /// Health aggregator (health port).
    pub health: Health,
    /// What eBPF mode's drop reports' numbers mean (written by `driver/bpf`, read by the
    /// drop reader).
    pub bpf_drop_names: SharedDropNames,
}

/// Why the dataplane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The dataplane thread could not be spawned.
    #[error("cannot start the dataplane thread: {0}")]
    Thread(#[from] std::io::Error),
    /// The managers/drivers registration was rejected.
    #[error("invalid dataplane registration: {0}")]
    Build(#[from] BuildError),
    /// The thread ended before reporting.
    #[error("the dataplane thread ended during start-up")]
    Vanished,
    /// The managers and drivers for the configured mode could not be set up.
    #[error("cannot set up the dataplane")]
    Wiring(#[source] crate::dataplane::wiring::WiringError),
}

/// The supervisor settings for `cfg`: dataplane name for `/status` and the
/// refresh intervals (zero turns a refresh off).
pub fn supervisor_config(cfg: &Config) -> SupervisorConfig {
    let opt = |d: Duration| (!d.is_zero()).then_some(d);
    SupervisorConfig {
        dataplane: cfg.dataplane_mode().as_str().to_string(),
        route_refresh_interval: opt(cfg.route_refresh_interval()),
        ipsets_refresh_interval: opt(cfg.ipsets_refresh_interval()),
        tables_refresh_interval: opt(cfg.table_refresh_interval()),
        // The dataplane's liveness: upstream's watchdog on its main loop.
        liveness_timeout: cfg.dataplane_watchdog_timeout(),
        debug_hang_after: opt(cfg.debug_simulate_dataplane_hang_after()),
        debug_apply_delay: opt(cfg.debug_simulate_dataplane_apply_delay()),
        ..SupervisorConfig::default()
    }
}

type Started = (
    Addr<Supervisor<Payload>>,
    AdminContext,
    ArbiterHandle,
    System,
    Seam,
);

/// A running supervisor.
pub struct Dataplane {
    addr: Addr<Supervisor<Payload>>,
    arbiter: ArbiterHandle,
    system: System,
    admin: AdminContext,
    mode: DataplaneMode,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
    monitor: Option<InterfaceMonitor>,
    ifaces: InterfaceState,
}

/// Counts `payloads` by message type into upstream's `felix_int_dataplane_messages{type}`
/// (one update per type and batch).
fn count_messages(metrics: &felix_actors::Metrics, payloads: &[Payload]) {
    let mut by_type: std::collections::BTreeMap<&'static str, u64> = Default::default();
    for p in payloads {
        *by_type
            .entry(felix_proto::ext::payload_name(p))
            .or_default() += 1;
    }
    for (name, n) in by_type {
        metrics.add_counter(
            "felix_int_dataplane_messages",
            "Number dataplane messages by type.",
            &format!("type=\"{name}\""),
            n as f64,
        );
    }
}

/// Starts the interface monitor for `cfg`, poking `addr` on changes (also used by
/// `felix bench dataplane`, so its in-process dataplane is the daemon's).
pub(crate) fn start_monitor(
    cfg: &Config,
    state: InterfaceState,
    seam: Seam,
    addr: Addr<Supervisor<Payload>>,
) -> Option<InterfaceMonitor> {
    let source = match RtnetlinkSource::new(cfg.netlink_timeout()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "interface monitor unavailable; late interfaces wait for the retry ticker");
            return None;
        }
    };
    let refresh = cfg.interface_refresh_interval();
    let opts = MonitorOptions {
        resync_interval: (!refresh.is_zero()).then_some(refresh),
        ..MonitorOptions::default()
    };
    match InterfaceMonitor::start(
        Box::new(source),
        state,
        seam.for_actor(MONITOR_ACTOR),
        move || addr.do_send(KernelChanged),
        opts,
    ) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the interface monitor; late interfaces wait for the retry ticker");
            None
        }
    }
}

impl Dataplane {
    /// Builds and starts the supervisor for `cfg` on a new thread.
    /// `on_fatal` receives the runtime's give-up outcome.
    pub fn start(
        cfg: &Config,
        shared: &Shared,
        on_fatal: impl Fn(Fatal) + Send + Sync + 'static,
    ) -> Result<Dataplane, StartError> {
        let mode = cfg.dataplane_mode();
        let sup_cfg = supervisor_config(cfg);
        let monitor_cfg = cfg.clone();
        let cfg = cfg.clone();
        let shared = shared.clone();
        let names = shared.bpf_drop_names.clone();
        let excl_cfg = cfg.clone();
        let ifaces = InterfaceState::new(move |name| excl_cfg.is_excluded_iface(name));
        let wiring_ifaces = ifaces.clone();
        let (tx, rx) = mpsc::channel::<Result<Started, StartError>>();
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dataplane".into())
            .spawn(move || {
                let sys = System::new();
                let started = sys.block_on(async move {
                    let b = SupervisorBuilder::new(sup_cfg, state_key)
                        .faults(shared.faults)
                        .metrics(shared.metrics)
                        .health(shared.health)
                        .on_fatal(on_fatal);
                    let b = dataplane_wiring::register(b, &cfg, mode, &wiring_ifaces, &names)
                        .map_err(StartError::Wiring)?;
                    b.start().map_err(StartError::from).map(|h| {
                        (
                            h.addr.clone(),
                            h.admin_context(),
                            actix::Arbiter::current(),
                            System::current(),
                            Seam::new(h.faults.clone(), h.metrics.clone()),
                        )
                    })
                });
                let ok = started.is_ok();
                let _ = tx.send(started);
                if ok {
                    if let Err(e) = sys.run() {
                        tracing::error!("dataplane system ended with an error: {e}");
                    }
                }
                let _ = done_tx.send(());
            })?;
        let (addr, admin, arbiter, system, seam) =
            rx.recv().map_err(|_| StartError::Vanished)??;
        tracing::info!(dataplane = mode.as_str(), "dataplane supervisor started");
        let monitor = start_monitor(&monitor_cfg, ifaces.clone(), seam, addr.clone());
        if mode == DataplaneMode::Bpf {
            // `driver/bpf`'s conntrack scan is periodic: poke the supervisor once a period
            // (the driver is dirty when its scan is due; nothing else runs).
            let a = addr.clone();
            arbiter.spawn(async move {
                let mut tick = tokio::time::interval(crate::dataplane::bpf::ct_scan::SCAN_PERIOD);
                loop {
                    tick.tick().await;
                    a.do_send(KernelChanged);
                }
            });
        }
        Ok(Dataplane {
            addr,
            arbiter,
            system,
            admin,
            mode,
            thread: Some(thread),
            done,
            monitor,
            ifaces,
        })
    }

    /// The admin context over the supervisor's status, faults and metrics.
    pub fn admin_context(&self) -> AdminContext {
        self.admin.clone()
    }

    /// The interfaces the monitor sees (the external driver's endpoint status reads them).
    pub fn interfaces(&self) -> &InterfaceState {
        &self.ifaces
    }

    /// The dataplane mode this supervisor was built for.
    pub fn mode(&self) -> DataplaneMode {
        self.mode
    }

    /// Hands a batch to the supervisor without blocking (see module docs).
    pub fn send(&self, batch: Batch) {
        let Batch {
            payloads,
            in_sync,
            guard,
        } = batch;
        count_messages(&self.admin.metrics, &payloads);
        let addr = self.addr.clone();
        let spawned = self.arbiter.spawn(async move {
            if !payloads.is_empty() && addr.send(UpdateBatch(payloads)).await.is_err() {
                tracing::warn!("dataplane supervisor gone; batch dropped");
            }
            if in_sync && addr.send(InSync).await.is_err() {
                tracing::warn!("dataplane supervisor gone; in-sync dropped");
            }
            drop(guard);
        });
        if !spawned {
            tracing::warn!("dataplane arbiter stopped; batch dropped");
        }
    }

    /// Stops the supervisor (kernel state is left as it is) and waits up to
    /// `timeout` for its thread. Returns whether it finished in time.
    pub fn stop(mut self, timeout: Duration) -> bool {
        if let Some(m) = self.monitor.take() {
            m.stop();
        }
        self.system.stop();
        match self.done.recv_timeout(timeout) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!(?timeout, "dataplane did not stop in time; leaving it");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_config::Source;
    use std::collections::BTreeMap;

    #[test]
    fn status_names_the_configured_dataplane_and_refreshes_follow_config() {
        let (cfg, _) = Config::build(&[]);
        assert_eq!(supervisor_config(&cfg).dataplane, "iptables");
        let env: BTreeMap<String, String> = [
            ("NFTablesMode".to_string(), "Enabled".to_string()),
            ("RouteRefreshInterval".to_string(), "0".to_string()),
        ]
        .into();
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        let sc = supervisor_config(&cfg);
        assert_eq!(sc.dataplane, "nftables");
        assert_eq!(
            sc.liveness_timeout,
            Duration::from_secs(90),
            "DataplaneWatchdogTimeout default"
        );
        assert_eq!(sc.route_refresh_interval, None);
        assert_eq!(
            (sc.debug_hang_after, sc.debug_apply_delay),
            (None, None),
            "debug simulations off by default"
        );
        let env: BTreeMap<String, String> = [
            ("BPFEnabled".to_string(), "true".to_string()),
            ("DataplaneWatchdogTimeout".to_string(), "15".to_string()),
            (
                "DebugSimulateDataplaneHangAfter".to_string(),
                "30".to_string(),
            ),
            (
                "DebugSimulateDataplaneApplyDelay".to_string(),
                "2".to_string(),
            ),
        ]
        .into();
        let (cfg, _) = Config::build(&[(Source::Environment, env)]);
        let sc = supervisor_config(&cfg);
        assert_eq!(sc.debug_hang_after, Some(Duration::from_secs(30)));
        assert_eq!(sc.debug_apply_delay, Some(Duration::from_secs(2)));
        assert_eq!(supervisor_config(&cfg).dataplane, "bpf");
        assert_eq!(
            supervisor_config(&cfg).liveness_timeout,
            Duration::from_secs(15)
        );
    }

    /// Under root the dataplane runs in a throwaway network namespace (its threads, and the
    /// commands they run, inherit the starting thread's): the default configuration programs
    /// iptables, which must never reach the test machine's own namespace. Without root it
    /// runs here and cannot touch the kernel.
    #[test]
    fn a_supervisor_with_no_managers_takes_batches_and_reports_in_sync() {
        if !felix_netns::is_root() {
            return supervisor_takes_batches_and_reports_in_sync();
        }
        let ns = felix_netns::Netns::unique("fdptest-").expect("creating a namespace");
        ns.spawn_in(supervisor_takes_batches_and_reports_in_sync)
            .join()
            .expect("the test body panicked")
            .expect("entering the namespace");
    }

    fn supervisor_takes_batches_and_reports_in_sync() {
        let (cfg, _) = Config::build(&[]);
        let dp = Dataplane::start(&cfg, &Shared::default(), |_| {}).unwrap();
        let inflight = super::super::calc_loop::Inflight::new();
        let admin = dp.admin_context();
        // A batch through the public path: guard released once handled.
        let batch = Batch {
            payloads: vec![],
            in_sync: true,
            guard: inflight.acquire(),
        };
        dp.send(batch);
        let deadline = felix_actors::clock::real_now() + Duration::from_secs(10);
        while !(admin.status.snapshot().in_sync && inflight.get() == 0) {
            assert!(felix_actors::clock::real_now() < deadline, "never in sync");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dp.stop(Duration::from_secs(10)));
    }
}
