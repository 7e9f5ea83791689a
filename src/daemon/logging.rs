//! Logging for `felix run` (INTERFACES.md §5): `tracing` events to stderr, one line each,
//! filtered by `LogSeverityScreen`; and, as upstream Felix does, the same lines to the file
//! `LogFilePath` at `LogSeverityFile` and to syslog at `LogSeveritySys` (see
//! [`super::log_sinks`]), plus a ring of the latest lines for `GET /logs` and the diagnostics
//! bundle.
//!
//! The levels are first taken from the local layers (so `FELIX_LOGSEVERITYSCREEN` works
//! before the datastore is read) and are changed in place once the full configuration is
//! known ([`LogHandle::configure`]). Actor names appear as the `actor` field of the
//! runtime's spans/events. The netlink packet decoder's warnings about attributes newer than
//! it knows (one per interface and dump, harmless) are dropped; its errors are kept.
//! `LogDebugFilenameRegex`, when set, keeps debug and trace lines only from source files
//! whose path matches.
//!
//! Invariant: every sink decides on its own level; the subscriber never filters for all of
//! them at once, so a file at `DEBUG` gets debug lines while the screen stays at `INFO`
//! (`file_level_is_independent_of_the_screen_level`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use felix_config::{Config, LogLevel, Param, Pattern};
use parking_lot::RwLock;
use tracing::Metadata;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use super::log_sinks::{level_rank, LogSinks, SinkSettings, OFF};

/// Changes the log levels and outputs after start. Cloning shares them.
#[derive(Clone)]
pub struct LogHandle {
    screen: Arc<AtomicU8>,
    debug_files: Arc<RwLock<Option<Pattern>>>,
    sinks: Arc<LogSinks>,
    installed: bool,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle")
            .field("installed", &self.installed)
            .finish()
    }
}

/// The rank of a configured level (`None`: the sink is off).
fn rank(level: Option<LogLevel>) -> u8 {
    level.map_or(OFF, |l| level_rank(&l.to_tracing()))
}

/// A sink's level from its parameter; `none` (an empty value) turns the sink off.
fn sink_level(cfg: &Config, p: Param) -> Option<LogLevel> {
    let v = cfg.value(p).as_str();
    (!v.is_empty()).then(|| LogLevel::from_param(v))
}

/// The netlink decoder's harmless warnings (every sink drops them; its errors are kept).
fn is_netlink_noise(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with("netlink_packet_route") && *meta.level() != tracing::Level::ERROR
}

/// Whether an event or span of `meta` passes the screen's filters.
fn keep(meta: &Metadata<'_>, screen: &AtomicU8, debug_files: &RwLock<Option<Pattern>>) -> bool {
    if is_netlink_noise(meta) {
        return false;
    }
    if level_rank(meta.level()) < screen.load(Ordering::Relaxed) {
        return false;
    }
    debug_file_allowed(meta, debug_files)
}

/// `LogDebugFilenameRegex`: debug and trace lines only from matching source files.
fn debug_file_allowed(meta: &Metadata<'_>, debug_files: &RwLock<Option<Pattern>>) -> bool {
    if *meta.level() < tracing::Level::DEBUG {
        return true;
    }
    match &*debug_files.read() {
        Some(re) => meta.file().is_some_and(|f| re.is_match(f)),
        None => true,
    }
}

/// Installs the global subscriber configured from `cfg` (the local layers at start). If a
/// subscriber is already installed (tests, embedding), that one is kept and the handle only
/// records settings.
pub fn init(cfg: &Config) -> LogHandle {
    let handle = LogHandle {
        screen: Arc::new(AtomicU8::new(rank(Some(cfg.log_severity_screen())))),
        debug_files: Arc::new(RwLock::new(None)),
        sinks: Arc::new(LogSinks::new()),
        installed: false,
    };
    let (screen, files) = (handle.screen.clone(), handle.debug_files.clone());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .with_filter(filter_fn(move |meta| keep(meta, &screen, &files)));
    let files = handle.debug_files.clone();
    let sinks = super::log_sinks::SinkLayer::new(handle.sinks.clone()).with_filter(filter_fn(
        move |meta| !is_netlink_noise(meta) && debug_file_allowed(meta, &files),
    ));
    let installed = tracing_subscriber::registry()
        .with(fmt)
        .with(sinks)
        .try_init()
        .is_ok();
    let handle = LogHandle {
        installed,
        ..handle
    };
    handle.configure(cfg);
    handle
}

impl LogHandle {
    /// Applies the logging parameters of `cfg`: the screen, file and syslog levels, the log
    /// file (re-opened when its path changes; `none` closes it) and the debug file filter.
    pub fn configure(&self, cfg: &Config) {
        self.screen
            .store(rank(Some(cfg.log_severity_screen())), Ordering::Relaxed);
        *self.debug_files.write() = cfg.value(Param::LogDebugFilenameRegex).as_regex().cloned();
        let file_path = cfg.value(Param::LogFilePath).as_str();
        let settings = SinkSettings {
            ring: rank(Some(cfg.log_severity_screen())),
            file: if file_path.is_empty() {
                None
            } else {
                Some((
                    std::path::PathBuf::from(file_path),
                    rank(sink_level(cfg, Param::LogSeverityFile)),
                ))
            },
            sys: rank(sink_level(cfg, Param::LogSeveritySys)),
        };
        if self.installed {
            for problem in self.sinks.configure(&settings) {
                tracing::warn!("{problem}");
            }
        }
    }

    /// The latest log lines, oldest first (`GET /logs`).
    pub fn recent(&self) -> Vec<String> {
        self.sinks.recent()
    }
}
