//! felix driving an external dataplane driver (`UseInternalDataplaneDriver=false`), in place
//! of [`super::dataplane::Dataplane`]: the driver `DataplaneDriver` runs as a child with the
//! pipes of [`crate::dataplane::external::child`], and felix programs no kernel state.
//!
//! ```text
//!  felix run                                                    DataplaneDriver
//!  calc graph ─Batch─► writer thread ─ToDataplane frames (fd 3)─► driver
//!  /status ◄── DriverReports ◄── reader thread ◄─FromDataplane (fd 4)── driver
//!  log ◄── stdout/stderr threads ◄──────────────────────────────── driver
//!  on_event ◄── waiter thread (the driver exited)
//! ```
//!
//! # Invariants
//! * Back-pressure: a batch's in-flight guard is released only once its frames are written
//!   to the pipe, so a driver that reads slowly holds the calc graph's one in-flight batch
//!   and the graph coalesces (memory stays bounded by the pipe and one batch).
//! * The first message on the wire is the `ConfigUpdate` (the first batch starts with it),
//!   rewritten to carry every configuration layer ([`full_config_update`]) so the driver
//!   resolves the same configuration as felix; numbers start at 0, one per message.
//! * The driver's exit, or a frame from it that does not decode, is reported through
//!   `on_event`; felix then stops with an error. Stopping felix closes the driver's input
//!   (its end of stream), then sends SIGTERM, then SIGKILL after [`KILL_AFTER`].

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use felix_actors::http::{Request, Response};
use felix_actors::status::{StatusHandle, StatusSnapshot};
use felix_actors::AdminContext;
use felix_config::{Config, Source};
use felix_proto as pb;
use felix_proto::to_dataplane::Payload;
use parking_lot::Mutex;
use serde_json::Value;

use super::calc_loop::Batch;
use super::dataplane::Shared;
use crate::dataplane::external::child::{self, SpawnError};
use crate::dataplane::external::frame::{FrameReader, SeqWriter};
use crate::dataplane::external::proxy::{
    merge_metrics, DriverAdmin, FaultsRouter, DRIVER_SOCKET_ENV,
};
use crate::dataplane::external::reports::DriverReports;
use crate::dataplane::external::status_files::StatusFiles;
use crate::datastore::etcd::client::EtcdClient;
use crate::datastore::etcd::status::EtcdStatusWriter;
use crate::datastore::etcd::EtcdConfig;

type FromPayload = felix_proto::from_dataplane::Payload;

/// How long the driver gets between SIGTERM and SIGKILL when felix stops.
pub const KILL_AFTER: Duration = Duration::from_secs(4);

/// Why the driver connection ended.
#[derive(Debug)]
pub enum DriverEvent {
    /// The driver process exited.
    Exited(ExitStatus),
    /// The driver sent something that is not a valid frame.
    Broken(String),
}

impl std::fmt::Display for DriverEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverEvent::Exited(s) => write!(f, "the dataplane driver exited ({s})"),
            DriverEvent::Broken(e) => write!(f, "the dataplane driver's messages: {e}"),
        }
    }
}

/// Upstream's source numbers and names for the layers a `ConfigUpdate` carries.
const LAYERS: [(Source, u32, &str); 4] = [
    (Source::DatastoreGlobal, 1, "datastore (global)"),
    (Source::DatastorePerHost, 3, "datastore (per-host)"),
    (Source::ConfigFile, 4, "config file"),
    (Source::Environment, 5, "environment variable"),
];

/// The `ConfigUpdate` the driver gets: every layer of `cfg` by upstream's source numbers
/// and names, and the effective values in `config`, as upstream's `ToConfigUpdate` builds it.
pub fn full_config_update(cfg: &Config) -> pb::ConfigUpdate {
    let mut out = pb::ConfigUpdate::default();
    for (source, n, name) in LAYERS {
        let raw = cfg.raw_from(source);
        if raw.is_empty() {
            continue;
        }
        out.source_to_raw_config.insert(
            n,
            pb::RawConfig {
                source: name.to_string(),
                config: raw.into_iter().collect(),
            },
        );
    }
    out.config = cfg.raw().into_iter().collect();
    out
}

/// A running external driver.
pub struct External {
    tx: Option<mpsc::Sender<Batch>>,
    writer: Option<JoinHandle<()>>,
    pid: u32,
    exited: Arc<Mutex<Option<ExitStatus>>>,
    admin: AdminContext,
    cfg: Config,
}

/// The error of starting the driver.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    /// `DataplaneDriver` names no executable.
    #[error("DataplaneDriver {0:?} is not an executable file (a path, or a name on PATH)")]
    NotFound(String),
    /// Spawning failed.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A thread could not be started.
    #[error("starting a dataplane driver thread: {0}")]
    Thread(#[from] std::io::Error),
}

fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(f)
}

/// Logs each line of `r` as the driver's.
fn log_lines(r: impl std::io::Read + Send + 'static, driver: String, stream: &'static str) {
    let spawned = spawn_named("driver-log", move || {
        for line in BufReader::new(r).lines() {
            match line {
                Ok(l) => tracing::info!(target: "dataplane_driver", %driver, stream, "{l}"),
                Err(_) => break,
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot log the dataplane driver's {stream}: {e}");
    }
}

impl External {
    /// Starts `DataplaneDriver` of `cfg`; `felix_socket` is felix's admin socket (the
    /// driver's is next to it). `on_event` hears of the driver's exit or broken messages.
    ///
    /// `etcd`, when the datastore is etcd, is where the driver's status reports are also
    /// written ([`crate::datastore::etcd::status`]).
    pub fn start(
        cfg: &Config,
        shared: &Shared,
        felix_socket: &Path,
        etcd: Option<EtcdConfig>,
        on_event: impl Fn(DriverEvent) + Send + Sync + 'static,
    ) -> Result<External, ExternalError> {
        let path = cfg.dataplane_driver().to_string();
        let resolved =
            child::resolve(&path).ok_or_else(|| ExternalError::NotFound(path.clone()))?;
        let driver_admin = DriverAdmin::for_felix_socket(felix_socket);
        let env = vec![(
            DRIVER_SOCKET_ENV.to_string(),
            driver_admin.socket().display().to_string(),
        )];
        let c = child::spawn(&resolved.to_string_lossy(), &env)?;
        let pid = c.child.id();
        let name = resolved
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.clone());
        tracing::info!(driver = %resolved.display(), pid, "dataplane driver started");
        log_lines(c.stdout, name.clone(), "stdout");
        log_lines(c.stderr, name.clone(), "stderr");

        let on_event = Arc::new(on_event);
        let reports = DriverReports::default();
        let sinks = StatusSinks::new(cfg, etcd);
        let (sink_tx, sink_rx) = mpsc::channel::<FromPayload>();
        spawn_named("driver-status", move || sinks.run(sink_rx))?;
        {
            let (reports, on_event) = (reports.clone(), on_event.clone());
            let from = c.from_driver;
            spawn_named("driver-rx", move || {
                let mut r = FrameReader::new(BufReader::new(from));
                loop {
                    match r.read::<pb::FromDataplane>() {
                        Ok(Some(m)) => {
                            reports.apply(&m);
                            if let Some(p) = m.payload {
                                let _ = sink_tx.send(p);
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::error!("the dataplane driver sent a malformed message: {e}");
                            on_event(DriverEvent::Broken(e.to_string()));
                            break;
                        }
                    }
                }
            })?;
        }
        let exited = Arc::new(Mutex::new(None));
        {
            let (exited, on_event) = (exited.clone(), on_event.clone());
            let mut proc = c.child;
            spawn_named("driver-wait", move || match proc.wait() {
                Ok(st) => {
                    *exited.lock() = Some(st);
                    tracing::error!(pid, status = %st, "the dataplane driver exited");
                    on_event(DriverEvent::Exited(st));
                }
                Err(e) => tracing::error!(pid, "cannot wait for the dataplane driver: {e}"),
            })?;
        }
        let (tx, rx) = mpsc::channel::<Batch>();
        let to = c.to_driver;
        let first = full_config_update(cfg);
        let writer = spawn_named("driver-tx", move || write_batches(to, rx, first))?;

        let admin = external_admin(shared, cfg, driver_admin, reports, name, pid);
        Ok(External {
            tx: Some(tx),
            writer: Some(writer),
            pid,
            exited,
            admin,
            cfg: cfg.clone(),
        })
    }

    /// The admin context: felix's own parts, the driver's through its socket.
    pub fn admin_context(&self) -> AdminContext {
        self.admin.clone()
    }

    /// Queues `batch` for the writer (never blocks; the batch's guard paces the graph).
    pub fn send(&self, batch: Batch) {
        if let Some(tx) = &self.tx {
            if tx.send(batch).is_err() {
                tracing::warn!("dataplane driver writer gone; batch dropped");
            }
        }
    }

    /// The configuration the driver was started with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Stops the driver: end of its input, SIGTERM, SIGKILL after [`KILL_AFTER`]; waits up
    /// to `timeout` in all. Returns whether it exited.
    pub fn stop(mut self, timeout: Duration) -> bool {
        // The writer ends once the queue is closed and its last batch is written, closing
        // the driver's input. It is not joined: a driver that does not read would block it
        // until the signals below end the driver (its write then fails).
        drop(self.tx.take());
        drop(self.writer.take());
        let clock = felix_actors::clock::real_now;
        let start = clock();
        let mut termed = false;
        let mut killed = false;
        loop {
            if self.exited.lock().is_some() {
                return true;
            }
            let waited = clock().duration_since(start);
            if waited > timeout {
                tracing::warn!(pid = self.pid, "the dataplane driver did not exit in time");
                return false;
            }
            let pid = i32::try_from(self.pid).unwrap_or(0);
            if !termed && waited > Duration::from_millis(500) && pid > 0 {
                // SAFETY: kill(2) with a pid we started and have not reaped (the waiter
                // has not recorded an exit).
                unsafe { libc::kill(pid, libc::SIGTERM) };
                termed = true;
            }
            if !killed && waited > KILL_AFTER && pid > 0 {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where the driver's reports are written besides `/status`: the endpoint status files
/// and, on etcd, upstream's status keys.
struct StatusSinks {
    files: Option<StatusFiles>,
    etcd: Option<EtcdStatusWriter>,
}

impl StatusSinks {
    fn new(cfg: &Config, etcd: Option<EtcdConfig>) -> Self {
        let etcd = etcd.and_then(|e| match EtcdClient::from_config(&e, None) {
            Ok(client) => Some(EtcdStatusWriter::new(
                client,
                cfg.felix_hostname(),
                cfg.endpoint_reporting_enabled(),
                cfg.endpoint_reporting_delay(),
                cfg.reporting_ttl(),
            )),
            Err(err) => {
                tracing::error!("cannot write status reports to etcd: {err}");
                None
            }
        });
        StatusSinks {
            files: StatusFiles::new(cfg.endpoint_status_path_prefix()),
            etcd,
        }
    }

    /// Until the reader ends: each report to each sink; etcd's rate-limited writes between.
    fn run(mut self, rx: mpsc::Receiver<FromPayload>) {
        loop {
            let got = rx.recv_timeout(Duration::from_millis(100));
            match got {
                Ok(p) => {
                    if let Some(f) = self.files.as_mut() {
                        f.on_report(&p);
                    }
                    if let Some(e) = self.etcd.as_mut() {
                        e.on_report(&p);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if let Some(e) = self.etcd.as_mut() {
                e.tick(felix_actors::clock::real_now());
            }
        }
    }
}

/// The writer thread: each batch's messages, then `InSync` if it carried it, one flush per
/// batch; the guard goes once the batch is on the pipe. The first `ConfigUpdate` is replaced
/// by `first` (every layer); later ones get the datastore layers of the update merged into
/// the local layers of `first`.
fn write_batches(to: impl std::io::Write, rx: mpsc::Receiver<Batch>, first: pb::ConfigUpdate) {
    let mut w = SeqWriter::new(to);
    let local: Vec<(u32, pb::RawConfig)> = first
        .source_to_raw_config
        .iter()
        .filter(|(n, _)| **n >= 4)
        .map(|(n, r)| (*n, r.clone()))
        .collect();
    let mut first = Some(first);
    for batch in rx {
        let Batch {
            payloads,
            in_sync,
            guard,
        } = batch;
        let mut res = Ok(());
        for p in payloads {
            let p = match p {
                Payload::ConfigUpdate(c) => Payload::ConfigUpdate(
                    first
                        .take()
                        .unwrap_or_else(|| with_local_layers(&c, &local)),
                ),
                other => other,
            };
            res = w.to_dataplane(p);
            if res.is_err() {
                break;
            }
        }
        if res.is_ok() && in_sync {
            res = w.to_dataplane(Payload::InSync(pb::InSync {}));
        }
        let res = res.and_then(|()| w.flush());
        drop(guard);
        if let Err(e) = res {
            tracing::error!("writing to the dataplane driver: {e}");
            return;
        }
    }
}

/// A later `ConfigUpdate` from the graph (datastore layers only, felix-rs numbering) with
/// upstream's numbering and felix's local layers added.
fn with_local_layers(c: &pb::ConfigUpdate, local: &[(u32, pb::RawConfig)]) -> pb::ConfigUpdate {
    let layers = super::config_load::DatastoreLayers::from_update(c);
    let mut out = pb::ConfigUpdate {
        message: c.message.clone(),
        config: c.config.clone(),
        source_to_raw_config: Default::default(),
    };
    for (n, name, map) in [
        (1u32, LAYERS[0].2, layers.global),
        (3, LAYERS[1].2, layers.host),
    ] {
        out.source_to_raw_config.insert(
            n,
            pb::RawConfig {
                source: name.to_string(),
                config: map.into_iter().collect(),
            },
        );
    }
    for (n, r) in local {
        out.config
            .extend(r.config.iter().map(|(k, v)| (k.clone(), v.clone())));
        out.source_to_raw_config.insert(*n, r.clone());
    }
    out
}

/// felix's admin context in this mode: `/status` merged with the driver's, `/faults` split
/// between the two, metrics merged, everything else forwarded to the driver.
fn external_admin(
    shared: &Shared,
    cfg: &Config,
    driver: DriverAdmin,
    reports: DriverReports,
    name: String,
    pid: u32,
) -> AdminContext {
    let status = StatusHandle::new(StatusSnapshot {
        in_sync: false,
        dataplane: "external".into(),
        applies: 0,
        last_apply: None,
        actors: vec![],
    });
    let admin = AdminContext::new(status, shared.faults.clone(), shared.metrics.clone());
    let path = cfg.dataplane_driver().to_string();
    {
        let driver = driver.clone();
        admin.route(
            "GET",
            "/status",
            Arc::new(move |_r: &Request| {
                let body = merged_status(&driver, &reports, &path, &name, pid);
                Response::json(200, body.to_string())
            }),
        );
    }
    let router = FaultsRouter {
        local: shared.faults.clone(),
        driver: driver.clone(),
    };
    for (m, p) in [
        ("GET", "/faults"),
        ("POST", "/faults"),
        ("DELETE", "/faults"),
        ("GET", "/faults/targets"),
    ] {
        let r = router.clone();
        admin.route(m, p, Arc::new(move |req: &Request| r.handle(req)));
    }
    {
        let driver = driver.clone();
        shared
            .metrics
            .set_post_render(Arc::new(move |local: String| {
                match driver.call("GET", "/metrics", None) {
                    Ok((200, _, text)) => merge_metrics(&local, &text),
                    _ => local,
                }
            }));
    }
    admin.set_fallback(Arc::new(move |req: &Request| driver.forward(req)));
    admin
}

/// `/status` in external mode: the driver's own status when it serves one (felix-rs's
/// driver), with `dataplane: "external"` and a `driver` object of what it reported.
fn merged_status(
    driver: &DriverAdmin,
    reports: &DriverReports,
    path: &str,
    name: &str,
    pid: u32,
) -> Value {
    let own = driver.get_json("/status");
    let mut st = own.clone().unwrap_or_else(|| {
        serde_json::json!({
            "inSync": reports.in_sync(),
            "applies": 0,
            "lastApply": null,
            "actors": [],
        })
    });
    let mut d = reports.to_json();
    d["path"] = Value::from(path);
    d["name"] = Value::from(name);
    d["pid"] = Value::from(pid);
    d["dataplane"] = own
        .as_ref()
        .map(|o| o["dataplane"].clone())
        .unwrap_or(Value::Null);
    d["adminSocket"] = Value::from(driver.socket().display().to_string());
    st["dataplane"] = Value::from("external");
    st["driver"] = d;
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_batch_holds_its_in_flight_slot_until_it_is_on_the_pipe() {
        use std::io::Read;
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let (tx, rx) = mpsc::channel::<Batch>();
        let first = full_config_update(&Config::default());
        let w = std::thread::spawn(move || write_batches(writer, rx, first));
        let inflight = super::super::calc_loop::Inflight::new();
        // Far more than a pipe buffer (64 KiB): the writer blocks until it is read.
        let big = Payload::IpsetUpdate(pb::IpSetUpdate {
            id: "s:big".into(),
            members: (0..50_000)
                .map(|i| format!("10.{}.{}.1", i / 256, i % 256))
                .collect(),
            r#type: 0,
        });
        tx.send(Batch {
            payloads: vec![Payload::ConfigUpdate(pb::ConfigUpdate::default()), big],
            in_sync: true,
            guard: inflight.acquire(),
        })
        .expect("send");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(inflight.get(), 1, "a slow reader keeps the batch in flight");
        drop(tx);
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes).expect("read");
        w.join().expect("writer");
        assert_eq!(inflight.get(), 0, "released once written");
        let (msgs, err) = crate::dataplane::external::frame::decode_all::<pb::ToDataplane>(&bytes);
        assert!(err.is_none(), "{err:?}");
        let seqs: Vec<u64> = msgs.iter().map(|m| m.sequence_number).collect();
        assert_eq!(seqs, vec![0, 1, 2]);
        assert!(matches!(msgs[0].payload, Some(Payload::ConfigUpdate(_))));
        assert!(matches!(msgs[2].payload, Some(Payload::InSync(_))));
    }

    #[test]
    fn the_config_update_carries_every_layer_with_upstreams_numbers() {
        let env: BTreeMap<String, String> = [
            ("NFTablesMode".to_string(), "Enabled".to_string()),
            ("FelixHostname".to_string(), "node-a".to_string()),
        ]
        .into();
        let file: BTreeMap<String, String> =
            [("LogSeverityScreen".to_string(), "DEBUG".to_string())].into();
        let global: BTreeMap<String, String> = [(
            "DefaultEndpointToHostAction".to_string(),
            "ACCEPT".to_string(),
        )]
        .into();
        let (cfg, errs) = Config::build(&[
            (Source::DatastoreGlobal, global),
            (Source::ConfigFile, file),
            (Source::Environment, env),
        ]);
        assert!(errs.is_empty(), "{errs:?}");
        let cu = full_config_update(&cfg);
        assert_eq!(cu.source_to_raw_config[&5].source, "environment variable");
        assert_eq!(
            cu.source_to_raw_config[&5].config["NFTablesMode"],
            "Enabled"
        );
        assert_eq!(
            cu.source_to_raw_config[&4].config["LogSeverityScreen"],
            "DEBUG"
        );
        assert_eq!(
            cu.source_to_raw_config[&1].config["DefaultEndpointToHostAction"],
            "ACCEPT"
        );
        assert_eq!(cu.config["FelixHostname"], "node-a");
        assert!(
            !cu.config.contains_key("BPFEnabled"),
            "defaults are left out"
        );
        // A later update from the graph keeps felix's local layers.
        let later = pb::ConfigUpdate {
            source_to_raw_config: [(
                crate::calc::config_batcher::SOURCE_DATASTORE_GLOBAL,
                pb::RawConfig {
                    source: "DatastoreGlobal".into(),
                    config: [("LogSeverityScreen".to_string(), "INFO".to_string())].into(),
                },
            )]
            .into(),
            ..Default::default()
        };
        let local: Vec<(u32, pb::RawConfig)> = cu
            .source_to_raw_config
            .iter()
            .filter(|(n, _)| **n >= 4)
            .map(|(n, r)| (*n, r.clone()))
            .collect();
        let out = with_local_layers(&later, &local);
        assert_eq!(
            out.source_to_raw_config[&1].config["LogSeverityScreen"],
            "INFO"
        );
        assert_eq!(
            out.source_to_raw_config[&5].config["NFTablesMode"],
            "Enabled"
        );
    }
}
