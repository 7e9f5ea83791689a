//! Throwaway network namespaces for `felix bench dataplane`, and running a
//! raw tool inside one of them without any wrapper process.
//!
//! Invariants:
//! * every namespace this module creates is named
//!   `felix-bench-dp-<pid>-<suffix>`, where `<pid>` is the creating
//!   process, and is deleted when its [`Netns`] guard drops (also on error
//!   and on panic unwinding);
//! * [`sweep_stale`] deletes namespaces of that pattern whose creating
//!   process no longer exists (a run killed by a signal), and nothing else;
//! * [`run_in`] enters the namespace in the forked child only (`setns`
//!   between fork and exec), so the timed process is the tool itself, as it
//!   would be for a user typing the command inside the namespace.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The name prefix of every namespace the benchmark creates.
pub const PREFIX: &str = "felix-bench-dp-";

/// Why a namespace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A command exited unsuccessfully.
    #[error("{command} failed ({status:?}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: Option<i32>,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

/// A namespace deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `felix-bench-dp-<pid>-<suffix>` with its loopback up.
    pub fn create(suffix: &str) -> Result<Netns, NetnsError> {
        let name = format!("{PREFIX}{}-{suffix}", std::process::id());
        run_checked("ip", &["netns", "add", &name], None)?;
        let ns = Netns { name };
        run_checked("ip", &["-n", &ns.name, "link", "set", "lo", "up"], None)?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Deletes benchmark namespaces left behind by processes that no longer
/// exist. Returns how many were deleted.
pub fn sweep_stale() -> usize {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let ok = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            n += 1;
        }
    }
    n
}

/// Runs `program args` with `stdin`, failing on a non-zero exit; returns
/// stdout.
pub fn run_checked(
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Vec<u8>, NetnsError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    run_command(cmd, program, args, stdin).map(|(out, _)| out)
}

/// Runs `program args` with `stdin` inside namespace `netns` (entered by
/// the child between fork and exec) and returns its stdout and the wall
/// time from spawn to exit.
pub fn run_in(
    netns: &str,
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<(Vec<u8>, Duration), NetnsError> {
    let path = format!("/run/netns/{netns}");
    let file = std::fs::File::open(&path).map_err(|source| NetnsError::Spawn {
        command: format!("open {path}"),
        source,
    })?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls `setns(2)`, which is async-signal-safe; `fd` stays open in the
    // parent (`file` lives until this function returns) and is inherited.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run_command(cmd, program, args, stdin);
    drop(file);
    r
}

fn run_command(
    mut cmd: Command,
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<(Vec<u8>, Duration), NetnsError> {
    let command = format!("{program} {}", args.join(" "));
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    // Copy the input before the clock starts; the timed part is the tool.
    let data = stdin.map(<[u8]>::to_vec);
    let start = felix_actors::clock::real_now();
    let mut child = cmd.spawn().map_err(|source| NetnsError::Spawn {
        command: command.clone(),
        source,
    })?;
    let writer = match (child.stdin.take(), data) {
        (Some(mut pipe), Some(data)) => Some(std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })),
        _ => None,
    };
    let out = child
        .wait_with_output()
        .map_err(|source| NetnsError::Spawn {
            command: command.clone(),
            source,
        })?;
    let elapsed = start.elapsed();
    if let Some(w) = writer {
        let _ = w.join();
    }
    if !out.status.success() {
        return Err(NetnsError::Failed {
            command,
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok((out.stdout, elapsed))
}
