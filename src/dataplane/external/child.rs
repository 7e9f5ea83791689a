//! Starting the external driver: a child process with the `ToDataplane` pipe's read end on
//! its file descriptor 3 and the `FromDataplane` pipe's write end on its descriptor 4, as
//! upstream starts its VPP driver; its stdout and stderr are piped back for felix's log.
//!
//! # Invariants
//! * `the_child_sees_the_pipes_on_3_and_4_and_nothing_else_of_ours`: the child's ends are
//!   first moved above descriptor 9, so placing them on 3 and 4 cannot overwrite one with the
//!   other; every descriptor felix opens is close-on-exec, so the child inherits only
//!   0, 1, 2, 3 and 4.
//! * felix's ends stay in felix: the child never holds the write end of its own input pipe,
//!   so felix closing it is an end of stream the child sees.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};

/// Why the driver could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// A pipe could not be created.
    #[error("creating the {which} pipe: {source}")]
    Pipe {
        /// `ToDataplane` or `FromDataplane`.
        which: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The executable could not be started.
    #[error("starting the dataplane driver {path}: {source}")]
    Exec {
        /// `DataplaneDriver`.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A started driver and felix's ends of its pipes.
#[derive(Debug)]
pub struct DriverChild {
    /// The process.
    pub child: Child,
    /// Where felix writes `ToDataplane` frames (the child reads them on fd 3).
    pub to_driver: File,
    /// Where felix reads `FromDataplane` frames (the child writes them on fd 4).
    pub from_driver: File,
    /// The child's stdout.
    pub stdout: ChildStdout,
    /// The child's stderr.
    pub stderr: ChildStderr,
}

/// A close-on-exec pipe: `(read end, write end)`.
fn pipe(which: &'static str) -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(SpawnError::Pipe {
            which,
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec duplicate of `fd` numbered 10 or above.
fn dup_high(fd: &OwnedFd, which: &'static str) -> Result<OwnedFd, SpawnError> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; the result is checked.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if new < 0 {
        return Err(SpawnError::Pipe {
            which,
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: fcntl returned a new descriptor that only this OwnedFd owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Starts `path` with no arguments (looked up on `PATH` if it has no slash), the pipes on
/// descriptors 3 and 4 and `env` added to felix's environment.
pub fn spawn(path: &str, env: &[(String, String)]) -> Result<DriverChild, SpawnError> {
    let (to_read, to_write) = pipe("ToDataplane")?;
    let (from_read, from_write) = pipe("FromDataplane")?;
    let child_in = dup_high(&to_read, "ToDataplane")?;
    let child_out = dup_high(&from_write, "FromDataplane")?;
    drop((to_read, from_write));
    let (cin, cout) = (child_in.as_raw_fd(), child_out.as_raw_fd());
    let mut cmd = Command::new(path);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: the closure runs in the forked child before exec and calls only dup2, which
    // is async-signal-safe; `cin` and `cout` are open (held by `child_in`/`child_out` until
    // after spawn) and above 9, so neither dup2 overwrites the other's source. dup2 clears
    // close-on-exec on 3 and 4 only.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(cin, 3) < 0 || libc::dup2(cout, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| SpawnError::Exec {
        path: path.to_string(),
        source,
    })?;
    drop((child_in, child_out));
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        // Both were asked for as pipes; std always provides them.
        let _ = child.kill();
        let _ = child.wait();
        return Err(SpawnError::Exec {
            path: path.to_string(),
            source: std::io::Error::other("the child's stdout/stderr pipes are missing"),
        });
    };
    Ok(DriverChild {
        child,
        to_driver: File::from(to_write),
        from_driver: File::from(from_read),
        stdout,
        stderr,
    })
}

/// Whether `path` names an executable file, directly or on `PATH` (checked before start so
/// a wrong `DataplaneDriver` is named in a clear error).
pub fn resolve(path: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if path.contains('/') {
        let p = Path::new(path);
        return executable(p).then(|| p.to_path_buf());
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(path))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn the_child_sees_the_pipes_on_3_and_4_and_nothing_else_of_ours() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // A shell that lists where each of its descriptors points, then copies fd 3 to fd 4.
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("drv");
        std::fs::write(
            &script,
            "#!/bin/sh\nfor f in /proc/self/fd/*; do echo \"${f##*/} $(readlink $f)\"; done\ncat <&3 >&4\n",
        )
        .expect("write script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = script.to_string_lossy().into_owned();
        assert_eq!(resolve(&path), Some(script.clone()));
        assert_eq!(resolve("/nonexistent/driver"), None);
        let mut c = spawn(&path, &[]).expect("spawn");
        let ours = [
            c.to_driver.metadata().expect("fstat").ino(),
            c.from_driver.metadata().expect("fstat").ino(),
        ];
        c.to_driver.write_all(b"hello").expect("write");
        drop(c.to_driver);
        let mut back = String::new();
        c.from_driver.read_to_string(&mut back).expect("read");
        assert_eq!(back, "hello");
        let mut listing = String::new();
        c.stdout.read_to_string(&mut listing).expect("stdout");
        // Every descriptor of the child on one of our two pipes.
        let on_ours: Vec<(u32, u64)> = listing
            .lines()
            .filter_map(|l| {
                let (fd, target) = l.split_once(' ')?;
                let ino = target.strip_prefix("pipe:[")?.strip_suffix(']')?;
                Some((fd.parse().ok()?, ino.parse().ok()?))
            })
            .filter(|(_, ino)| ours.contains(ino))
            .collect();
        assert_eq!(
            on_ours,
            vec![(3, ours[0]), (4, ours[1])],
            "the child's descriptors:\n{listing}"
        );
        assert!(c.child.wait().expect("wait").success());
        let err = spawn("/nonexistent/driver", &[]).expect_err("no such driver");
        assert!(err.to_string().contains("/nonexistent/driver"), "{err}");
    }
}
