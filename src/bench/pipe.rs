//! `felix bench dataplane --pipe`: the same dataplane, driven through the external driver
//! protocol. The benchmark process plays felix: it starts `felix-dataplane-driver` (this
//! binary through a link of that name) with the pipes on descriptors 3 and 4, writes the
//! batches as `ToDataplane` frames and waits for the driver's `/status` (over its admin
//! socket) to show a clean apply after the write, polled every [`POLL`]; the figure is the
//! time from the first byte written to the poll that saw the apply (so it includes the
//! frames' encoding, the pipe, the driver's decoding and up to one poll interval).

use std::path::PathBuf;
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

use felix_actors::http::request_blocking;
use felix_config::Config;
use felix_proto::to_dataplane::Payload;
use serde_json::Value;

use super::dataplane::BenchError;
use crate::dataplane::external::child;
use crate::dataplane::external::frame::SeqWriter;
use crate::dataplane::external::proxy::DRIVER_SOCKET_ENV;

/// How often the driver's status is polled while waiting for an apply.
pub const POLL: Duration = Duration::from_millis(1);
/// How long one convergence may take.
const TIMEOUT: Duration = Duration::from_secs(900);

/// A driver process fed by this one.
pub struct PipeRunning {
    w: Mutex<SeqWriter<std::fs::File>>,
    first: Mutex<Option<felix_proto::ConfigUpdate>>,
    socket: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

fn fail(what: impl std::fmt::Display) -> BenchError {
    BenchError::Dataplane(format!("external driver: {what}"))
}

impl PipeRunning {
    /// Starts the driver; `cfg` is sent as its first message with the first batch.
    pub fn start(cfg: &Config) -> Result<PipeRunning, BenchError> {
        let dir = tempfile::tempdir().map_err(fail)?;
        let link = dir.path().join(crate::cli::driver::DRIVER_PROGRAM_NAME);
        let exe = std::env::current_exe().map_err(fail)?;
        std::os::unix::fs::symlink(exe, &link).map_err(fail)?;
        let socket = dir.path().join("driver.sock");
        let c = child::spawn(
            &link.to_string_lossy(),
            &[(DRIVER_SOCKET_ENV.to_string(), socket.display().to_string())],
        )
        .map_err(fail)?;
        // The driver logs to stderr; pass it on as this process's.
        let mut err = c.stderr;
        let _ = std::thread::Builder::new()
            .name("driver-stderr".into())
            .spawn(move || std::io::copy(&mut err, &mut std::io::stderr()));
        drop(c.stdout);
        drop(c.from_driver);
        Ok(PipeRunning {
            w: Mutex::new(SeqWriter::new(c.to_driver)),
            first: Mutex::new(Some(crate::daemon::external::full_config_update(cfg))),
            socket,
            child: c.child,
            _dir: dir,
        })
    }

    fn status(&self) -> Option<Value> {
        let (code, _, body) =
            request_blocking(&self.socket, "GET", "/status", None, Duration::from_secs(5)).ok()?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// Writes one batch (and in-sync) and waits for a clean apply after it: the time, and
    /// how many applies it took.
    pub fn send_and_converge(
        &self,
        payloads: Vec<Payload>,
        in_sync: bool,
    ) -> Result<(Duration, u64), BenchError> {
        let before = self
            .status()
            .and_then(|s| s["applies"].as_u64())
            .unwrap_or(0);
        let t0 = felix_actors::clock::real_now();
        {
            let mut w = self.w.lock().map_err(|_| fail("writer poisoned"))?;
            let first = self.first.lock().map_err(|_| fail("poisoned"))?.take();
            if let Some(cu) = first {
                w.to_dataplane(Payload::ConfigUpdate(cu)).map_err(fail)?;
            }
            for p in payloads {
                w.to_dataplane(p).map_err(fail)?;
            }
            if in_sync {
                w.to_dataplane(Payload::InSync(Default::default()))
                    .map_err(fail)?;
            }
            w.flush().map_err(fail)?;
        }
        loop {
            if let Some(s) = self.status() {
                let applies = s["applies"].as_u64().unwrap_or(0);
                let ok = s["lastApply"]["ok"] == true;
                let clean = s["actors"]
                    .as_array()
                    .is_some_and(|a| a.iter().all(|a| a["dirty"] == false));
                if applies > before && ok && clean && s["inSync"] == true {
                    return Ok((t0.elapsed(), applies - before));
                }
            }
            if t0.elapsed() > TIMEOUT {
                return Err(fail(format!("no convergence within {TIMEOUT:?}")));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for PipeRunning {
    fn drop(&mut self) {
        // Closing the pipe ends the driver (it leaves the kernel state; the namespace goes).
        if let Ok(mut w) = self.w.lock() {
            let _ = w.flush();
        }
        let dead = std::fs::File::open("/dev/null").map(SeqWriter::new);
        if let (Ok(mut w), Ok(d)) = (self.w.lock(), dead) {
            *w = d;
        }
        let _ = self.child.wait();
    }
}
