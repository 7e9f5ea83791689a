//! Network-namespace plumbing for the dataplane FV: a named namespace that
//! is deleted on drop, command execution inside it (`ip netns exec`), and
//! running a closure on a thread that has entered it (`setns`), which is how
//! the in-process TCP servers and probes get into workload namespaces.
//!
//! Invariant: every namespace this module creates carries the caller's
//! unique prefix and is removed by its guard, also when a test panics.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

/// A network namespace `name` that `ip netns del` removes on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates the namespace and brings its loopback up.
    pub fn create(name: &str) -> Result<Netns> {
        run("ip", &["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> args...`, failing with its stderr.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs `program args...` inside the namespace, failing with its stderr.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Like [`Netns::exec`] but returns the raw output whatever the exit code.
    pub fn exec_output(&self, program: &str, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", self.name.as_str(), program])
            .args(args)
            .output()
            .with_context(|| format!("spawning {program} in {}", self.name))
    }

    /// Sets `key` (slash or dot form) to `value` with sysctl in the namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.exec("sysctl", &["-q", "-w", &format!("{key}={value}")])
            .map(|_| ())
    }

    /// Moves the calling thread into this namespace. Only call this on a
    /// thread that is dedicated to the namespace (see [`Netns::spawn_in`]).
    pub fn enter(&self) -> Result<()> {
        enter_netns(&self.name)
    }

    /// Runs `f` on a new thread that has entered the namespace.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<Result<T>> {
        let name = self.name.clone();
        std::thread::spawn(move || {
            enter_netns(&name)?;
            Ok(f())
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Moves the calling thread into the named namespace (`setns(CLONE_NEWNET)`,
/// which Linux allows per thread).
pub fn enter_netns(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let f = File::open(&path).with_context(|| format!("opening {path}"))?;
    // SAFETY: plain syscall on a valid, owned file descriptor.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        bail!("setns({path}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs a program to completion, returning stdout or an error with stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("spawning {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether this process can create namespaces and has the tools the FV
/// needs; `Err` names what is missing.
pub fn preflight() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the dataplane FV needs root (network namespaces)");
    }
    for tool in ["ip", "iptables-save", "ipset", "nft", "sysctl"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            bail!("`{tool}` is not installed");
        }
    }
    Ok(())
}
