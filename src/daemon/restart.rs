//! Restarting `felix run` in place.
//!
//! Upstream Felix exits with code 129 and relies on its init system to
//! start it again when a restart-requiring parameter or the encapsulation
//! changes. felix-rs re-executes itself instead: the same binary
//! (`/proc/self/exe`, which works even if the file was replaced on disk)
//! with the same arguments and environment, keeping the process id, so a
//! supervisor (systemd, a container runtime, `ip netns exec`) sees one
//! long-lived process. Only if `exec` fails does the caller fall back to
//! exiting with [`super::RESTART_EXIT_CODE`].
//!
//! A restart never happens sooner than [`MIN_UPTIME`] after the process
//! image started, to avoid a tight restart loop when the datastore flaps.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// Minimum lifetime of one process image before it re-executes.
pub const MIN_UPTIME: Duration = Duration::from_secs(1);

/// Replaces this process with a fresh copy of itself. Returns only on
/// failure, with the error. Must run on the thread that will `exec` (any thread of the
/// process may, but the signal forwarding names the calling thread).
pub fn reexec(started: Instant) -> std::io::Error {
    let up = started.elapsed();
    if up < MIN_UPTIME {
        std::thread::sleep(MIN_UPTIME - up);
    }
    // From here a stop signal either was recorded (exit) or stays pending for the new
    // image, which handles it once its handlers are installed.
    if super::signals::prepare_exec() {
        tracing::info!("signal received while restarting; exiting instead of re-executing");
        std::process::exit(0);
    }
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "felix".into());
    Command::new("/proc/self/exe").arg0(argv0).args(args).exec()
}
