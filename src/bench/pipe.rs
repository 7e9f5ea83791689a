//! `felix bench dataplane --pipe`: the same dataplane, driven through the external driver
//! protocol. The benchmark process plays felix: it starts `felix-dataplane-driver` (this
//! binary through a link of that name) with the pipes on descriptors 3 and 4, writes the
//! batches as `ToDataplane` frames and waits for the driver's `/status` (over its admin
//! socket) to show a clean apply after the write, polled (see [`POLL_MIN`]); the figure is the
//! time from the first byte written to the poll that saw the apply (so it includes the
//! frames' encoding, the pipe, the driver's decoding and up to one poll interval). The apply
//! steps come from the driver's `GET /timings`.

use std::path::PathBuf;
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

use felix_actors::http::request_blocking;
use felix_config::Config;
use felix_proto::to_dataplane::Payload;
use serde_json::Value;

use super::dataplane::{BenchError, Converged};
use crate::dataplane::external::child;
use crate::dataplane::external::frame::SeqWriter;
use crate::dataplane::external::proxy::DRIVER_SOCKET_ENV;

/// How often the driver's status is polled while waiting for an apply: every
/// [`POLL_MIN`] at first, then every 2 % of the time waited so far, at most [`POLL_MAX`]
/// (so a seconds-long start of day is not slowed by the polling, and a change of a few
/// milliseconds is seen within a fraction of a millisecond).
pub const POLL_MIN: Duration = Duration::from_micros(500);
/// See [`POLL_MIN`].
pub const POLL_MAX: Duration = Duration::from_millis(10);
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

    /// The driver's apply steps of the applies after the `before`-th, summed by step.
    fn steps(&self, before: u64) -> Vec<(String, Duration)> {
        let Ok((200, _, body)) = request_blocking(
            &self.socket,
            "GET",
            "/timings",
            None,
            Duration::from_secs(5),
        ) else {
            return Vec::new();
        };
        let t: Value = serde_json::from_str(&body).unwrap_or_default();
        let mut sum: std::collections::BTreeMap<String, f64> = Default::default();
        for a in t["applies"].as_array().into_iter().flatten() {
            if a["seq"].as_u64().unwrap_or(0) <= before {
                continue;
            }
            for (k, v) in a["steps"].as_object().into_iter().flatten() {
                *sum.entry(k.clone()).or_default() += v.as_f64().unwrap_or(0.0);
            }
        }
        sum.into_iter()
            .map(|(k, ms)| (k, Duration::from_secs_f64(ms / 1e3)))
            .collect()
    }

    /// Writes one batch (and in-sync) and waits for a clean apply after it: the time, how
    /// many applies it took, and the time in each apply step.
    pub fn send_and_converge(
        &self,
        payloads: Vec<Payload>,
        in_sync: bool,
    ) -> Result<Converged, BenchError> {
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
                    let took = t0.elapsed();
                    return Ok((took, applies - before, self.steps(before)));
                }
            }
            let waited = t0.elapsed();
            if waited > TIMEOUT {
                return Err(fail(format!("no convergence within {TIMEOUT:?}")));
            }
            std::thread::sleep((waited / 50).clamp(POLL_MIN, POLL_MAX));
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
