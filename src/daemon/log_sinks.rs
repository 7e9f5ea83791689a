//! The log outputs besides stderr: the log file (`LogFilePath`, `LogSeverityFile`), syslog
//! (`LogSeveritySys`, the local `/dev/log` socket, facility `user`) and a ring of the latest
//! lines (`GET /logs`, the diagnostics bundle). One [`SinkLayer`] formats each event once, as
//! the screen shows it, and hands the line to every sink whose level it reaches.
//!
//! Invariants:
//! * a sink that cannot be opened or written is reported once (as a returned problem or on
//!   stderr) and then skipped; logging never fails or blocks the daemon
//!   (`an_unwritable_log_file_is_reported_and_skipped`);
//! * the ring keeps at most [`RING_LINES`] lines, dropping the oldest
//!   (`the_ring_keeps_the_latest_lines`).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A sink level that nothing reaches: the sink is off.
pub const OFF: u8 = u8::MAX;

/// Lines the ring keeps.
pub const RING_LINES: usize = 2000;

/// Where syslog listens on Linux.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// The rank of a `tracing` level: trace 0 up to error 4.
pub fn level_rank(l: &Level) -> u8 {
    match *l {
        Level::TRACE => 0,
        Level::DEBUG => 1,
        Level::INFO => 2,
        Level::WARN => 3,
        Level::ERROR => 4,
    }
}

/// What [`LogSinks::configure`] sets: per sink the lowest rank it keeps ([`OFF`]: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkSettings {
    /// The ring's level.
    pub ring: u8,
    /// The log file and its level; `None`: no file.
    pub file: Option<(PathBuf, u8)>,
    /// The syslog level.
    pub sys: u8,
}

struct FileSink {
    path: PathBuf,
    file: File,
}

/// The file, syslog and ring outputs. Shared by the layer and the daemon's log handle.
pub struct LogSinks {
    ring_level: AtomicU8,
    file_level: AtomicU8,
    sys_level: AtomicU8,
    ring: Mutex<VecDeque<String>>,
    file: Mutex<Option<FileSink>>,
    sys: Mutex<Option<UnixDatagram>>,
    syslog_path: PathBuf,
}

impl Default for LogSinks {
    fn default() -> Self {
        Self::new()
    }
}

impl LogSinks {
    /// Sinks with every output off until configured; syslog at [`SYSLOG_SOCKET`].
    pub fn new() -> Self {
        Self::with_syslog(Path::new(SYSLOG_SOCKET))
    }

    /// Sinks sending syslog lines to the datagram socket at `path`.
    pub fn with_syslog(path: &Path) -> Self {
        LogSinks {
            ring_level: AtomicU8::new(OFF),
            file_level: AtomicU8::new(OFF),
            sys_level: AtomicU8::new(OFF),
            ring: Mutex::new(VecDeque::new()),
            file: Mutex::new(None),
            sys: Mutex::new(None),
            syslog_path: path.to_path_buf(),
        }
    }

    /// Applies `s`: opens (or re-opens on a new path, or closes) the log file, connects or
    /// disconnects syslog, and sets the levels. Returns what could not be done, one message
    /// each (the sink concerned stays off).
    pub fn configure(&self, s: &SinkSettings) -> Vec<String> {
        let mut problems = Vec::new();
        self.ring_level.store(s.ring, Ordering::Relaxed);
        {
            let mut file = self.file.lock();
            match &s.file {
                Some((path, level)) if *level != OFF => {
                    if file.as_ref().map(|f| &f.path) != Some(path) {
                        *file = match open_log_file(path) {
                            Ok(f) => Some(FileSink {
                                path: path.clone(),
                                file: f,
                            }),
                            Err(e) => {
                                problems.push(format!(
                                    "LogFilePath {}: cannot open the log file: {e}; not logging to a file",
                                    path.display()
                                ));
                                None
                            }
                        };
                    }
                    let level = if file.is_some() { *level } else { OFF };
                    self.file_level.store(level, Ordering::Relaxed);
                }
                _ => {
                    *file = None;
                    self.file_level.store(OFF, Ordering::Relaxed);
                }
            }
        }
        {
            let mut sys = self.sys.lock();
            if s.sys == OFF {
                *sys = None;
            } else if sys.is_none() {
                match UnixDatagram::unbound().and_then(|sock| {
                    sock.connect(&self.syslog_path)?;
                    Ok(sock)
                }) {
                    Ok(sock) => *sys = Some(sock),
                    Err(e) => problems.push(format!(
                        "LogSeveritySys: cannot reach syslog at {}: {e}; not logging to syslog",
                        self.syslog_path.display()
                    )),
                }
            }
            let level = if sys.is_some() { s.sys } else { OFF };
            self.sys_level.store(level, Ordering::Relaxed);
        }
        problems
    }

    fn lowest(&self) -> u8 {
        self.ring_level
            .load(Ordering::Relaxed)
            .min(self.file_level.load(Ordering::Relaxed))
            .min(self.sys_level.load(Ordering::Relaxed))
    }

    /// Hands one formatted line of level `rank` to every sink it reaches.
    pub fn write(&self, rank: u8, line: &str) {
        if rank >= self.ring_level.load(Ordering::Relaxed) {
            let mut ring = self.ring.lock();
            if ring.len() == RING_LINES {
                ring.pop_front();
            }
            ring.push_back(line.to_string());
        }
        if rank >= self.file_level.load(Ordering::Relaxed) {
            let mut file = self.file.lock();
            if let Some(f) = file.as_mut() {
                if let Err(e) = writeln!(f.file, "{line}") {
                    eprintln!(
                        "felix: writing the log file {} failed: {e}; not logging to it any more",
                        f.path.display()
                    );
                    *file = None;
                    self.file_level.store(OFF, Ordering::Relaxed);
                }
            }
        }
        if rank >= self.sys_level.load(Ordering::Relaxed) {
            if let Some(sock) = self.sys.lock().as_ref() {
                // A full or restarting syslog loses the line; felix never waits for it.
                let _ = sock.send(syslog_datagram(rank, line).as_bytes());
            }
        }
    }

    /// The ring's lines, oldest first.
    pub fn recent(&self) -> Vec<String> {
        self.ring.lock().iter().cloned().collect()
    }
}

fn open_log_file(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// One syslog datagram: facility `user` (1), the line's severity, tag `felix[PID]`.
fn syslog_datagram(rank: u8, line: &str) -> String {
    let severity = match rank {
        4 => 3, // err
        3 => 4, // warning
        2 => 6, // info
        _ => 7, // debug
    };
    format!("<{}>felix[{}]: {line}", 8 + severity, std::process::id())
}

/// Fields of a span, formatted once when it is created.
struct SpanFields(String);

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// The `tracing` layer feeding [`LogSinks`].
pub struct SinkLayer {
    sinks: Arc<LogSinks>,
}

impl SinkLayer {
    /// A layer writing into `sinks`.
    pub fn new(sinks: Arc<LogSinks>) -> Self {
        Self { sinks }
    }
}

impl<S> Layer<S> for SinkLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut()
                .insert(SpanFields(f.rest.trim_start().to_string()));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        let rank = level_rank(meta.level());
        if rank < self.sinks.lowest() {
            return;
        }
        let mut line = felix_actors::status::rfc3339(std::time::SystemTime::now());
        let _ = write!(line, " {:>5} ", meta.level());
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                line.push_str(span.name());
                if let Some(SpanFields(f)) = span.extensions().get::<SpanFields>() {
                    if !f.is_empty() {
                        let _ = write!(line, "{{{f}}}");
                    }
                }
                line.push(':');
            }
            line.push(' ');
        }
        let mut f = Fields::default();
        event.record(&mut f);
        let _ = write!(line, "{}: {}{}", meta.target(), f.message, f.rest);
        self.sinks.write(rank, &line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(file: Option<(PathBuf, u8)>, sys: u8) -> SinkSettings {
        SinkSettings { ring: 2, file, sys }
    }

    #[test]
    fn file_level_is_independent_of_the_screen_level() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/felix.log");
        let sinks = LogSinks::with_syslog(&dir.path().join("no-syslog"));
        assert!(sinks
            .configure(&settings(Some((path.clone(), 1)), OFF))
            .is_empty());
        sinks.write(1, "a debug line");
        sinks.write(2, "an info line");
        let text = std::fs::read_to_string(&path).expect("log file written");
        assert_eq!(text, "a debug line\nan info line\n");
        assert_eq!(sinks.recent(), vec!["an info line"], "the ring keeps INFO+");
        // `none`: the file is closed and nothing more is written.
        sinks.configure(&settings(None, OFF));
        sinks.write(4, "after close");
        assert!(!std::fs::read_to_string(&path)
            .expect("read")
            .contains("after close"));
    }

    #[test]
    fn an_unwritable_log_file_is_reported_and_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").expect("write");
        let sinks = LogSinks::with_syslog(&dir.path().join("no-syslog"));
        let problems = sinks.configure(&settings(Some((blocker.join("felix.log"), 2)), 2));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("LogFilePath"), "{problems:?}");
        assert!(problems[1].contains("LogSeveritySys"), "{problems:?}");
        sinks.write(4, "still fine");
        assert_eq!(sinks.recent(), vec!["still fine"]);
    }

    #[test]
    fn syslog_gets_lines_at_its_level_with_priority_and_tag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock_path = dir.path().join("log");
        let server = UnixDatagram::bind(&sock_path).expect("bind");
        let sinks = LogSinks::with_syslog(&sock_path);
        assert!(sinks.configure(&settings(None, 3)).is_empty());
        sinks.write(2, "info, below the syslog level");
        sinks.write(4, "an error");
        let mut buf = [0u8; 512];
        let n = server.recv(&mut buf).expect("one datagram");
        let got = String::from_utf8_lossy(&buf[..n]).to_string();
        assert_eq!(got, format!("<11>felix[{}]: an error", std::process::id()));
        server.set_nonblocking(true).expect("nonblocking");
        assert!(server.recv(&mut buf).is_err(), "the info line was not sent");
    }

    #[test]
    fn the_ring_keeps_the_latest_lines() {
        let sinks = LogSinks::with_syslog(Path::new("/nonexistent"));
        sinks.configure(&settings(None, OFF));
        for i in 0..RING_LINES + 5 {
            sinks.write(2, &format!("line {i}"));
        }
        let r = sinks.recent();
        assert_eq!(r.len(), RING_LINES);
        assert_eq!(r[0], "line 5");
        assert_eq!(r[RING_LINES - 1], format!("line {}", RING_LINES + 4));
    }
}
