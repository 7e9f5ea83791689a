//! Throwaway network namespaces, shared by every user in the workspace:
//! the library's kernel unit tests, the dataplane FV, the etcd daemon tests
//! and `felix bench dataplane` (production code).
//!
//! * [`Netns`] is a namespace (loopback up) that is deleted when the guard
//!   drops, also on error and on panic unwinding; it runs commands inside
//!   (`ip netns exec`, or `setns` in the forked child for timed runs) and
//!   closures on a thread that entered it ([`Netns::spawn_in`]).
//! * [`sweep_stale`] deletes namespaces of a prefix whose creating process
//!   is gone (a run killed by a signal), and nothing else.
//! * [`require!`] is the one gate of tests that need the kernel, root or an
//!   external tool (see [`gate`]): locally a missing requirement is a skip
//!   with the reason printed; under `CI` or `FELIX_REQUIRE_KERNEL_TESTS` it
//!   is a failure; every test that passes the gate is recorded for the
//!   ran-versus-exist count of `.ci/test`.
//!
//! No dependencies: the two libc calls are declared here.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod gate;

pub use gate::{enforced, ensure, gate, missing_netns, missing_tools, Skip, LOG_VAR};

#[doc(hidden)]
pub use gate::test_name as __test_name;

extern "C" {
    fn setns(fd: std::ffi::c_int, nstype: std::ffi::c_int) -> std::ffi::c_int;
    fn geteuid() -> u32;
}

/// `CLONE_NEWNET` from `<sched.h>`.
const CLONE_NEWNET: std::ffi::c_int = 0x4000_0000;

/// True when the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

/// Why a command (or a namespace operation) failed.
#[derive(Debug)]
pub enum Error {
    /// The command could not be started (or waited for).
    Spawn {
        /// The command line.
        command: String,
        /// Cause.
        source: io::Error,
    },
    /// The command exited unsuccessfully.
    Failed {
        /// The command line.
        command: String,
        /// Exit code (`None`: killed by a signal).
        status: Option<i32>,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spawn { command, source } => write!(f, "cannot run {command}: {source}"),
            Error::Failed {
                command,
                status,
                stderr,
            } => match status {
                Some(c) => write!(f, "{command} failed (exit {c}): {stderr}"),
                None => write!(f, "{command} failed (killed by a signal): {stderr}"),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn { source, .. } => Some(source),
            Error::Failed { .. } => None,
        }
    }
}

/// A network namespace, deleted (`ip netns del`) when the guard drops.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Netns {
    /// Creates namespace `name` and brings its loopback up.
    pub fn create(name: &str) -> Result<Netns, Error> {
        run("ip", &["netns", "add", name])?;
        // From here the guard deletes it, also when the next step fails.
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Creates `<prefix><pid>-<suffix>`: the creating process's id is in
    /// the name, so [`sweep_stale`] can tell leftovers from live ones.
    pub fn create_owned(prefix: &str, suffix: &str) -> Result<Netns, Error> {
        Netns::create(&format!("{prefix}{}-{suffix}", std::process::id()))
    }

    /// Creates `<prefix><pid>-<unique>`, a name no other namespace of this
    /// or another process has.
    pub fn unique(prefix: &str) -> Result<Netns, Error> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        Netns::create_owned(prefix, &format!("{seq}{:06x}", rand_u32() & 0xff_ffff))
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command running `program` inside the namespace (`ip netns exec`),
    /// to be configured and spawned by the caller.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `ip -n <ns> args...`; stdout, or an error with its stderr.
    pub fn ip(&self, args: &[&str]) -> Result<String, Error> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs `program args...` inside the namespace; stdout, or an error
    /// with its stderr.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, Error> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Like [`Netns::exec`] but returns the raw output whatever the exit
    /// code.
    pub fn exec_output(&self, program: &str, args: &[&str]) -> Result<Output, Error> {
        self.command(program)
            .args(args)
            .output()
            .map_err(|source| Error::Spawn {
                command: format!("{program} in {}", self.name),
                source,
            })
    }

    /// Sets `key` (slash or dot form) to `value` with sysctl in the
    /// namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<(), Error> {
        self.exec("sysctl", &["-q", "-w", &format!("{key}={value}")])
            .map(|_| ())
    }

    /// Moves the calling thread into this namespace. Only call this on a
    /// thread that is dedicated to the namespace (see [`Netns::spawn_in`]).
    pub fn enter(&self) -> io::Result<()> {
        enter_netns(&self.name)
    }

    /// Runs `f` on a new thread that has entered the namespace.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<io::Result<T>> {
        let name = self.name.clone();
        std::thread::spawn(move || {
            enter_netns(&name)?;
            Ok(f())
        })
    }

    /// [`run_in`] this namespace.
    pub fn run_timed(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Duration), Error> {
        run_in(&self.name, program, args, stdin)
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

/// Moves the calling thread into the named namespace (`setns(CLONE_NEWNET)`,
/// which Linux allows per thread).
pub fn enter_netns(name: &str) -> io::Result<()> {
    let path = format!("/run/netns/{name}");
    let f = File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    // SAFETY: plain syscall on a valid, owned file descriptor.
    if unsafe { setns(f.as_raw_fd(), CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns({path}): {e}")));
    }
    Ok(())
}

/// Deletes namespaces named `<prefix><pid>-...` whose creating process no
/// longer exists (see [`Netns::create_owned`]). Returns how many were
/// deleted.
pub fn sweep_stale(prefix: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if run("ip", &["netns", "del", &name]).is_ok() {
            n += 1;
        }
    }
    n
}

/// Runs `program args` to completion; stdout (lossy UTF-8), or an error
/// with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    run_checked(program, args, None).map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// Runs `program args` with `stdin`, failing on a non-zero exit; returns
/// stdout.
pub fn run_checked(program: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>, Error> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    run_command(cmd, program, args, stdin).map(|(out, _)| out)
}

/// Runs `program args` with `stdin` inside namespace `netns`, entered by
/// the child between fork and exec (so the timed process is the tool
/// itself, as for a user typing the command inside the namespace), and
/// returns its stdout and the wall time from spawn to exit.
pub fn run_in(
    netns: &str,
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<(Vec<u8>, Duration), Error> {
    let path = format!("/run/netns/{netns}");
    let file = File::open(&path).map_err(|source| Error::Spawn {
        command: format!("open {path}"),
        source,
    })?;
    let fd = file.as_raw_fd();
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls `setns(2)`, which is async-signal-safe; `fd` stays open in the
    // parent (`file` lives until this function returns) and is inherited.
    unsafe {
        cmd.pre_exec(move || {
            if setns(fd, CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
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
) -> Result<(Vec<u8>, Duration), Error> {
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
    #[expect(
        clippy::disallowed_methods,
        reason = "measures the tool's run for benchmarks; this crate has no clock dependency"
    )]
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        command: command.clone(),
        source,
    })?;
    let writer = match (child.stdin.take(), data) {
        (Some(mut pipe), Some(data)) => Some(std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })),
        _ => None,
    };
    let out = child.wait_with_output().map_err(|source| Error::Spawn {
        command: command.clone(),
        source,
    })?;
    let elapsed = start.elapsed();
    if let Some(w) = writer {
        let _ = w.join();
    }
    if !out.status.success() {
        return Err(Error::Failed {
            command,
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok((out.stdout, elapsed))
}

/// Not cryptographic: enough to keep concurrent runs' names apart.
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}
