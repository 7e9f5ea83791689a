//! `felix dataplane-driver`: felix-rs's own dataplane (iptables, nftables or eBPF, the same
//! supervisor, actors, admin socket and faults as `felix run`) as the child of the external
//! driver protocol. It reads `ToDataplane` frames on descriptor 3 and reports on
//! descriptor 4, so upstream Go Felix with `UseInternalDataplaneDriver=false`, or `felix run`
//! in the same mode, can drive it.
//!
//! ```text
//!  fd 3 ─► reader thread ─(bounded channel)─► main loop: DataplaneView, batches ─► supervisor
//!  fd 4 ◄─ main loop: ProcessStatusUpdate, DataplaneInSync, endpoint status
//! ```
//!
//! # Invariants
//! * The first message must be a `ConfigUpdate`: the configuration is built from its layers
//!   (by upstream's source names or felix-rs's), so both processes resolve the same values.
//! * At most one batch is in flight to the supervisor; messages read meanwhile accumulate
//!   into the next batch, and the bounded channel stops the reader, so a slow dataplane
//!   fills the pipe and the driving felix coalesces.
//! * A malformed frame ends the driver with exit code 1 naming what was wrong; an end of
//!   stream (felix stopped) or SIGTERM stops it cleanly (exit 0), leaving kernel state.
//! * `DataplaneInSync` is reported once, after the first clean apply following `InSync`.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use felix_actors::start_admin_server;
use felix_config::{Config, Source};
use felix_proto as pb;
use felix_proto::from_dataplane::Payload as Report;
use felix_proto::to_dataplane::Payload;
use parking_lot::Mutex;

use super::calc_loop::{Batch, Inflight};
use super::dataplane::{Dataplane, Shared};
use super::{logging, signals, DaemonError, RuntimeError};
use crate::calc::view::DataplaneView;
use crate::dataplane::external::endpoint_status::EndpointReporter;
use crate::dataplane::external::frame::{FrameError, FrameReader, SeqWriter};
use crate::dataplane::external::proxy::DRIVER_SOCKET_ENV;

/// The admin socket without `--admin-socket` or [`DRIVER_SOCKET_ENV`].
pub const DEFAULT_DRIVER_SOCKET: &str = "/var/run/felix/driver.sock";

/// Messages read ahead of the supervisor before the reader waits.
const READ_AHEAD: usize = 4096;
/// Most messages in one batch to the supervisor.
const MAX_BATCH: usize = 20_000;
/// How often endpoint status and the in-sync report are looked at.
const REPORT_TICK: Duration = Duration::from_millis(200);

/// Options of `felix dataplane-driver`.
#[derive(Debug, Clone, Default)]
pub struct DriverOptions {
    /// `--admin-socket`; else [`DRIVER_SOCKET_ENV`], else [`DEFAULT_DRIVER_SOCKET`].
    pub admin_socket: Option<PathBuf>,
}

enum Input {
    Msg(Box<pb::ToDataplane>),
    End,
    Broken(FrameError),
    Signal(&'static str),
    Fatal(felix_actors::Fatal),
}

/// Takes descriptor `fd` (which felix opened for us), close-on-exec so the kernel tools the
/// dataplane runs do not inherit it.
fn claim(fd: RawFd, what: &str) -> Result<File, DaemonError> {
    // SAFETY: F_GETFD only reads the descriptor's flags; an unopened one fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(DaemonError::Input(format!(
            "file descriptor {fd} ({what}) is not open: `felix dataplane-driver` is started by \
             felix with UseInternalDataplaneDriver=false, which passes the ToDataplane pipe on \
             descriptor 3 and the FromDataplane pipe on descriptor 4"
        )));
    }
    // SAFETY: F_SETFD on the descriptor checked open above.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and, by the protocol, ours alone from here on.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The configuration layer a `RawConfig` stands for (upstream's source names, felix-rs's
/// names, else upstream's numbers).
fn layer_source(n: u32, raw: &pb::RawConfig) -> Option<Source> {
    match raw.source.as_str() {
        "datastore (global)" | "DatastoreGlobal" | "datastore (per-node-selector)" => {
            Some(Source::DatastoreGlobal)
        }
        "datastore (per-host)" | "DatastorePerHost" => Some(Source::DatastorePerHost),
        "config file" | "ConfigFile" => Some(Source::ConfigFile),
        "environment variable" | "Environment" => Some(Source::Environment),
        _ => match n {
            1 | 2 => Some(Source::DatastoreGlobal),
            3 => Some(Source::DatastorePerHost),
            4 => Some(Source::ConfigFile),
            5 => Some(Source::Environment),
            _ => None,
        },
    }
}

/// The configuration a `ConfigUpdate` describes: its layers, or without layers its
/// effective values as one local layer.
pub fn config_from_update(cu: &pb::ConfigUpdate) -> Config {
    let mut layers: Vec<(Source, BTreeMap<String, String>)> = Vec::new();
    for (n, raw) in &cu.source_to_raw_config {
        match layer_source(*n, raw) {
            Some(s) => layers.push((s, raw.config.clone().into_iter().collect())),
            None => {
                tracing::warn!(source = %raw.source, number = n, "unknown configuration source in ConfigUpdate; ignored")
            }
        }
    }
    if layers.is_empty() {
        layers.push((Source::Environment, cu.config.clone().into_iter().collect()));
    }
    let (cfg, errs) = Config::build(&layers);
    super::config_load::log_local_errors(&errs);
    cfg
}

/// Reports on descriptor 4; a failed write (felix gone) stops reporting.
struct Reporter {
    w: Option<SeqWriter<File>>,
}

impl Reporter {
    fn send(&mut self, reports: Vec<Report>) {
        let Some(w) = self.w.as_mut() else { return };
        let mut res = Ok(());
        for r in reports {
            res = w.from_dataplane(r);
            if res.is_err() {
                break;
            }
        }
        if let Err(e) = res.and_then(|()| w.flush()) {
            tracing::warn!("cannot report to felix (descriptor 4): {e}; reporting stops");
            self.w = None;
        }
    }
}

fn process_status(started: std::time::Instant) -> Report {
    Report::ProcessStatusUpdate(pb::ProcessStatusUpdate {
        iso_timestamp: felix_actors::status::rfc3339(std::time::SystemTime::now()),
        uptime: started.elapsed().as_secs_f64(),
    })
}

/// Runs the driver until its input ends, a signal, or a failure.
pub fn run(opts: DriverOptions) -> Result<(), DaemonError> {
    let started = felix_actors::clock::real_now();
    let input = claim(3, "ToDataplane")?;
    let output = claim(4, "FromDataplane")?;
    // Logging from the environment until the ConfigUpdate arrives; never to felix's log
    // file (felix logs this process's stderr there).
    let no_file: BTreeMap<String, String> =
        [("LogFilePath".to_string(), "none".to_string())].into();
    let env = felix_config::process_env_overrides();
    let (boot_cfg, _) =
        Config::build(&[(Source::Environment, env), (Source::Environment, no_file)]);
    let log = logging::init(&boot_cfg);

    let (tx, rx) = mpsc::sync_channel::<Input>(READ_AHEAD);
    {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("driver-input".into())
            .spawn(move || {
                let mut r = FrameReader::new(std::io::BufReader::with_capacity(256 << 10, input));
                loop {
                    let ev = match r.read::<pb::ToDataplane>() {
                        Ok(Some(m)) => Input::Msg(Box::new(m)),
                        Ok(None) => Input::End,
                        Err(e) => Input::Broken(e),
                    };
                    let last = !matches!(ev, Input::Msg(_));
                    if tx.send(ev).is_err() || last {
                        return;
                    }
                }
            })
            .map_err(|e| {
                DaemonError::Runtime(RuntimeError::Io {
                    what: "starting the driver's input thread",
                    source: e,
                })
            })?;
    }
    {
        let tx = tx.clone();
        signals::install(move |s| {
            let _ = tx.try_send(Input::Signal(s));
        })
        .map_err(|e| {
            DaemonError::Runtime(RuntimeError::Io {
                what: "installing signal handlers",
                source: e,
            })
        })?;
    }

    // The first message: the configuration.
    let first = match rx.recv() {
        Ok(Input::Msg(m)) => m,
        Ok(Input::End) => {
            tracing::info!("felix closed the pipe before sending anything; stopping");
            return Ok(());
        }
        Ok(Input::Broken(e)) => return Err(broken(e)),
        Ok(Input::Signal(s)) => {
            tracing::info!(signal = s, "stopping before start");
            return Ok(());
        }
        Ok(Input::Fatal(_)) | Err(_) => {
            return Err(DaemonError::Runtime(RuntimeError::ControlClosed))
        }
    };
    let Some(Payload::ConfigUpdate(cu)) = &first.payload else {
        let what = first
            .payload
            .as_ref()
            .map(felix_proto::ext::payload_name)
            .unwrap_or("nothing");
        return Err(DaemonError::Input(format!(
            "message #{} is {what}: the first message from felix must be a ConfigUpdate",
            first.sequence_number
        )));
    };
    let cfg = config_from_update(cu);
    log.configure(&logging_config(&cfg));
    tracing::info!(
        dataplane = cfg.dataplane_mode().as_str(),
        "dataplane driver configured by felix"
    );

    let shared = Shared::default();
    shared
        .metrics
        .add_collector(crate::dataplane::metrics::dataplane_collector(
            shared.metrics.clone(),
        ));
    let fatal_tx = tx.clone();
    let dp = Dataplane::start(&cfg, &shared, move |f| {
        tracing::error!("{f}");
        let _ = fatal_tx.send(Input::Fatal(f));
    })
    .map_err(|e| DaemonError::Runtime(RuntimeError::DataplaneStart(e)))?;
    drop(tx);
    let view = Arc::new(Mutex::new(DataplaneView::new()));
    let admin = dp.admin_context();
    {
        let view = view.clone();
        admin.set_dataplane_view(Arc::new(move || view.lock().to_json(0)));
    }
    super::diag_routes::add_routes(&admin, &cfg, &log);
    let drops = super::drops::start_drops(&cfg, &shared, view.clone(), &admin);
    let socket = opts
        .admin_socket
        .or_else(|| std::env::var_os(DRIVER_SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DRIVER_SOCKET));
    let server = start_admin_server(&socket, &admin).map_err(|source| {
        DaemonError::Runtime(RuntimeError::AdminSocket {
            path: socket.clone(),
            source,
        })
    })?;
    tracing::info!(socket = %socket.display(), "driver admin socket listening");

    let mut reporter = Reporter {
        w: Some(SeqWriter::new(output)),
    };
    let inflight = Inflight::new();
    let mut pending: Vec<Payload> = vec![Payload::ConfigUpdate(cu.clone())];
    let mut endpoints = EndpointReporter::default();
    let mut in_sync_sent = false;
    let mut got_in_sync = false;
    let interval = cfg.reporting_interval();
    let mut next_status = None;
    let mut last_tick = felix_actors::clock::real_now();
    let outcome: Result<(), DaemonError> = loop {
        // A stop signal whose message did not fit in the full input channel.
        if signals::received() {
            tracing::info!("stopping on a signal; kernel state left in place");
            break Ok(());
        }
        // Send what accumulated once the previous batch was taken.
        if !pending.is_empty() && inflight.get() == 0 {
            let msgs = std::mem::take(&mut pending);
            let (payloads, in_sync) = super::messages::to_dataplane(&mut view.lock(), msgs, true);
            if in_sync && !got_in_sync {
                tracing::info!(
                    read_ms = started.elapsed().as_secs_f64() * 1e3,
                    "start of day read from felix; dataplane programming may begin"
                );
            }
            got_in_sync |= in_sync;
            dp.send(Batch {
                payloads,
                in_sync,
                guard: inflight.acquire(),
            });
        }
        let wait = if pending.is_empty() {
            REPORT_TICK
        } else {
            Duration::from_millis(1)
        };
        let ev = match rx.recv_timeout(wait) {
            Ok(ev) => Some(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
        };
        match ev {
            Some(Input::Msg(m)) => {
                if let Some(p) = m.payload {
                    pending.push(p);
                }
                let mut stop = None;
                while pending.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(Input::Msg(m)) => pending.extend(m.payload),
                        Ok(other) => {
                            stop = terminal(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if let Some(done) = stop {
                    break done;
                }
                if let Some(Payload::ConfigUpdate(c)) = pending
                    .iter()
                    .rev()
                    .find(|p| matches!(p, Payload::ConfigUpdate(_)))
                {
                    log.configure(&logging_config(&config_from_update(c)));
                }
            }
            Some(other) => {
                if let Some(done) = terminal(other) {
                    break done;
                }
            }
            None => {}
        }
        let now = felix_actors::clock::real_now();
        if now.duration_since(last_tick) < REPORT_TICK {
            continue;
        }
        last_tick = now;
        // Reports: in-sync once, then status on its interval, endpoint status on change.
        let snap = admin.status.snapshot();
        let clean = snap.in_sync
            && snap.applies > 0
            && snap.last_apply.as_ref().is_some_and(|a| a.ok)
            && snap.actors.iter().all(|a| !a.dirty);
        if got_in_sync && !in_sync_sent && clean && inflight.get() == 0 {
            in_sync_sent = true;
            let mut r = endpoints.changes(&view.lock(), dp.interfaces());
            r.push(process_status(started));
            r.push(Report::DataplaneInSync(pb::DataplaneInSync {}));
            reporter.send(r);
            next_status = (!interval.is_zero()).then(|| now + interval);
            tracing::info!("dataplane in sync; reported to felix");
        } else if in_sync_sent {
            let mut r = endpoints.changes(&view.lock(), dp.interfaces());
            if next_status.is_some_and(|t| now >= t) {
                r.push(process_status(started));
                next_status = Some(now + interval);
            }
            if !r.is_empty() {
                reporter.send(r);
            }
        }
    };
    finish(dp, server, drops, &socket, outcome)
}

/// The stop a control input means, if it is one.
fn terminal(ev: Input) -> Option<Result<(), DaemonError>> {
    match ev {
        Input::Msg(_) => None,
        Input::End => {
            tracing::info!("felix closed the pipe; stopping (kernel state left in place)");
            Some(Ok(()))
        }
        Input::Broken(e) => Some(Err(broken(e))),
        Input::Signal(s) => {
            tracing::info!(signal = s, "stopping; kernel state left in place");
            Some(Ok(()))
        }
        Input::Fatal(f) => Some(Err(DaemonError::Runtime(RuntimeError::DataplaneFatal(f)))),
    }
}

fn broken(e: FrameError) -> DaemonError {
    tracing::error!("malformed message from felix: {e}");
    DaemonError::Runtime(RuntimeError::Driver(format!(
        "malformed message from felix on descriptor 3: {e}"
    )))
}

fn finish(
    dp: Dataplane,
    server: felix_actors::server::ServerHandle,
    drops: Option<crate::dataplane::drops::reader::DropReader>,
    socket: &std::path::Path,
    outcome: Result<(), DaemonError>,
) -> Result<(), DaemonError> {
    if let Some(d) = drops {
        d.stop();
    }
    dp.stop(Duration::from_secs(10));
    server.shutdown();
    let _ = std::fs::remove_file(socket);
    outcome
}

/// `cfg` without file logging (felix writes this process's stderr to its log).
fn logging_config(cfg: &Config) -> Config {
    let mut layers: Vec<(Source, BTreeMap<String, String>)> = Vec::new();
    for s in [
        Source::DatastoreGlobal,
        Source::DatastorePerHost,
        Source::ConfigFile,
        Source::Environment,
    ] {
        layers.push((s, cfg.raw_from(s)));
    }
    layers.push((
        Source::Environment,
        [("LogFilePath".to_string(), "none".to_string())].into(),
    ));
    Config::build(&layers).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_resolves_the_configuration_felix_sent() {
        let mk = |n: u32, source: &str, k: &str, v: &str| {
            (
                n,
                pb::RawConfig {
                    source: source.into(),
                    config: [(k.to_string(), v.to_string())].into(),
                },
            )
        };
        // Upstream Go Felix's numbering and names: the environment beats the datastore.
        let cu = pb::ConfigUpdate {
            source_to_raw_config: [
                mk(1, "datastore (global)", "NFTablesMode", "Enabled"),
                mk(5, "environment variable", "NFTablesMode", "Disabled"),
                mk(3, "datastore (per-host)", "LogSeverityScreen", "DEBUG"),
            ]
            .into(),
            ..Default::default()
        };
        let cfg = config_from_update(&cu);
        assert_eq!(cfg.dataplane_mode().as_str(), "iptables");
        assert_eq!(
            cfg.source(felix_config::Param::LogSeverityScreen),
            Source::DatastorePerHost
        );
        // felix-rs's own datastore-only update (its numbering) and a bare `config` map.
        let cu = pb::ConfigUpdate {
            source_to_raw_config: [mk(2, "DatastoreGlobal", "NFTablesMode", "Enabled")].into(),
            ..Default::default()
        };
        assert_eq!(
            config_from_update(&cu).dataplane_mode().as_str(),
            "nftables"
        );
        let cu = pb::ConfigUpdate {
            config: [("BPFEnabled".to_string(), "true".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(config_from_update(&cu).dataplane_mode().as_str(), "bpf");
        assert_eq!(logging_config(&config_from_update(&cu)).log_file_path(), "");
    }
}
