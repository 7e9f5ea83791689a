//! `felix run` inside the node namespace, and its admin socket through the
//! `felix admin` client: start, wait for convergence, faults, status,
//! metrics, stop with SIGTERM.
//!
//! Invariant: a [`Daemon`] that is dropped without [`Daemon::stop`] is
//! killed and reaped, so no test leaves a daemon behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use super::datastore::NODE;
use felix_netns::Netns;

/// The dataplane backend a daemon is started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// iptables and ipset (`FELIX_NFTABLESMODE=Disabled`).
    Iptables,
    /// nftables (`FELIX_NFTABLESMODE=Enabled`).
    Nftables,
    /// eBPF mode (`FELIX_BPFENABLED=true`; the rules it keeps are iptables rules). The
    /// daemon needs a bpffs ([`BpfFs`]), which [`crate::netfv::topology::Fv`] provides.
    Bpf,
}

/// A bpffs mounted for one test, unmounted on drop (which frees every pin in it: maps,
/// programs and links felix left).
#[derive(Debug)]
pub struct BpfFs(PathBuf);

impl BpfFs {
    /// Mounts a fresh bpffs under `/run` named after the process and `tag`.
    pub fn new(tag: &str) -> Result<BpfFs> {
        let dir = PathBuf::from(format!("/run/felix-fv-bpffs-{}-{tag}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.to_string_lossy().into_owned();
        felix_netns::run("mount", &["-t", "bpf", "bpffs", &path]).context("mounting a bpffs")?;
        Ok(BpfFs(dir))
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// felix's pin root in it (`cali`).
    pub fn root(&self) -> PathBuf {
        self.0.join("cali")
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let path = self.0.to_string_lossy().into_owned();
        let _ = felix_netns::run("umount", &["-l", &path]);
        let _ = fs::remove_dir(&self.0);
    }
}

impl Backend {
    /// `FELIX_NFTABLESMODE` for this backend.
    pub fn nftables_mode(self) -> &'static str {
        match self {
            Backend::Iptables | Backend::Bpf => "Disabled",
            Backend::Nftables => "Enabled",
        }
    }

    /// The `dataplane` value `/status` reports.
    pub fn status_name(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
            Backend::Bpf => "bpf",
        }
    }

    /// The driver that programs policy: the IPv4 filter-table driver, or `driver/bpf`.
    pub fn policy_driver(self) -> &'static str {
        match self {
            Backend::Bpf => "driver/bpf",
            other => other.filter_driver(),
        }
    }

    /// The IPv4 filter-table driver's actor name.
    pub fn filter_driver(self) -> &'static str {
        match self {
            Backend::Iptables | Backend::Bpf => "driver/iptables-filter-v4",
            Backend::Nftables => "driver/nftables-v4",
        }
    }
}

/// Whether this test run drives felix-rs's dataplane as an external driver
/// (`FELIX_FV_EXTERNAL_DRIVER=1`): every daemon is `felix run` with
/// `UseInternalDataplaneDriver=false` and `DataplaneDriver` a link to the same binary named
/// `felix-dataplane-driver`, so the whole suite runs with two processes and one pipe pair.
pub fn external_driver_mode() -> bool {
    std::env::var("FELIX_FV_EXTERNAL_DRIVER").is_ok_and(|v| v == "1")
}

/// The dataplane a `/status` names: its `dataplane`, or in external-driver mode the
/// driver's (`driver.dataplane`).
pub fn dataplane_name(status: &Value) -> &Value {
    if status["dataplane"] == "external" {
        &status["driver"]["dataplane"]
    } else {
        &status["dataplane"]
    }
}

/// True for the environment variables of the test harness itself (the kernel-test gate,
/// the soak's parameters, `FELIX_BIN`, `FELIX_FV_*`), which share felix's `FELIX_` prefix
/// but are no felix setting.
pub fn is_test_variable(name: &str) -> bool {
    matches!(
        name,
        "FELIX_REQUIRE_KERNEL_TESTS" | "FELIX_KERNEL_TEST_LOG" | "FELIX_BIN" | "FELIX_SOAK"
    ) || name.starts_with("FELIX_SOAK_")
        || name.starts_with("FELIX_FV_")
}

/// Locates the `felix` binary: `$FELIX_BIN`, else `felix` in the target
/// directory the running test executable was built into.
pub fn felix_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FELIX_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("current_exe")?;
    // target/<profile>/deps/<test> -> target/<profile>/felix
    let mut dir = exe.parent();
    while let Some(d) = dir {
        let candidate = d.join("felix");
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent();
    }
    bail!(
        "the felix binary is not built next to {} (run `cargo build --bin felix` or \
         `cargo test --workspace`, or set FELIX_BIN)",
        exe.display()
    )
}

/// How long a daemon gets to converge or to exit.
pub const DEADLINE: Duration = Duration::from_secs(45);

/// A running `felix run`.
pub struct Daemon {
    child: Option<Child>,
    felix: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts `felix run` in `node` on datastore `ds_dir`, with the admin
    /// socket and the log in `scratch` (the log of start N is `felix-N.log`).
    pub fn start(
        node: &Netns,
        ds_dir: &Path,
        scratch: &Path,
        backend: Backend,
        env: &[(&str, &str)],
    ) -> Result<Daemon> {
        let datastore = format!("file:{}", ds_dir.display());
        Daemon::spawn(node, Some(NODE), &datastore, scratch, backend, env, None)
    }

    /// [`Daemon::start`] with `bpffs` (a bpffs mounted in the test's mount namespace)
    /// bind-mounted on `/sys/fs/bpf` of the daemon: `ip netns exec` mounts a fresh sysfs,
    /// which hides the host's `/sys/fs/bpf`, and a bpffs the daemon mounted itself would die
    /// with its mount namespace (and its pins with it), so pins could not outlive a restart
    /// as they do on a node.
    pub fn start_with_bpffs(
        node: &Netns,
        ds_dir: &Path,
        scratch: &Path,
        backend: Backend,
        env: &[(&str, &str)],
        bpffs: &Path,
    ) -> Result<Daemon> {
        let datastore = format!("file:{}", ds_dir.display());
        Daemon::spawn(
            node,
            Some(NODE),
            &datastore,
            scratch,
            backend,
            env,
            Some(bpffs),
        )
    }

    /// Starts `felix run` in `netns` as node `name` (set through
    /// `FELIX_FELIXHOSTNAME`, as a node's environment does) on the
    /// datastore `datastore` (`file:DIR` or `etcdv3:URL`), with the admin
    /// socket and the logs in `scratch`, which must be this node's own.
    pub fn start_node(
        netns: &Netns,
        name: &str,
        datastore: &str,
        scratch: &Path,
        backend: Backend,
        env: &[(&str, &str)],
    ) -> Result<Daemon> {
        let mut all = vec![("FELIX_FELIXHOSTNAME", name)];
        all.extend_from_slice(env);
        Daemon::spawn(netns, None, datastore, scratch, backend, &all, None)
    }

    fn spawn(
        node: &Netns,
        node_arg: Option<&str>,
        datastore: &str,
        scratch: &Path,
        backend: Backend,
        env: &[(&str, &str)],
        bpffs: Option<&Path>,
    ) -> Result<Daemon> {
        let felix = felix_binary()?;
        let mut n = 0;
        while scratch.join(format!("felix-{n}.log")).exists() {
            n += 1;
        }
        let log = scratch.join(format!("felix-{n}.log"));
        let socket = scratch.join("admin.sock");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", node.name()]);
        if let Some(b) = bpffs {
            // `exec` keeps the daemon the child (signals reach felix itself).
            cmd.args(["sh", "-c", "mount --bind \"$0\" /sys/fs/bpf && exec \"$@\""])
                .arg(b);
        }
        cmd.arg(&felix).arg("run");
        if let Some(n) = node_arg {
            cmd.args(["--node", n]);
        }
        // The tests' own variables are not felix settings (felix would log each as an
        // unknown parameter).
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(is_test_variable) {
                cmd.env_remove(&k);
            }
        }
        cmd.args(["--datastore", datastore])
            .arg("--admin-socket")
            .arg(&socket)
            .env("FELIX_NFTABLESMODE", backend.nftables_mode())
            .env(
                "FELIX_BPFENABLED",
                if backend == Backend::Bpf {
                    "true"
                } else {
                    "false"
                },
            )
            .env("FELIX_HEALTHENABLED", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log)?);
        if external_driver_mode() {
            let link = scratch.join("felix-dataplane-driver");
            if !link.exists() {
                std::os::unix::fs::symlink(&felix, &link)
                    .context("linking felix-dataplane-driver")?;
            }
            cmd.env("FELIX_USEINTERNALDATAPLANEDRIVER", "false")
                .env("FELIX_DATAPLANEDRIVER", &link)
                .env("FELIX_ENDPOINTSTATUSPATHPREFIX", scratch);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().context("spawning felix run")?;
        Ok(Daemon {
            child: Some(child),
            felix,
            socket,
            log,
        })
    }

    /// The path of this start's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log (for error messages).
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Runs `felix admin --socket S args...`.
    pub fn admin(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.felix)
            .arg("admin")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .context("running felix admin")
    }

    /// Runs `felix explain --socket S args...` against this daemon.
    pub fn explain(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.felix)
            .arg("explain")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .context("running felix explain")
    }

    /// `felix admin args...` parsed as JSON; `None` when the call failed.
    pub fn admin_json(&self, args: &[&str]) -> Option<Value> {
        let out = self.admin(args).ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `GET /status`.
    pub fn status(&self) -> Option<Value> {
        self.admin_json(&["status"])
    }

    /// `GET /metrics` as text.
    pub fn metrics(&self) -> Result<String> {
        let out = self.admin(&["metrics"])?;
        if !out.status.success() {
            bail!(
                "felix admin metrics: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Polls `f` on the status until it returns `Some`; fails (with the log
    /// tail) at the deadline or when the daemon exits.
    pub fn wait_status<T>(
        &mut self,
        what: &str,
        mut f: impl FnMut(&Value) -> Option<T>,
    ) -> Result<T> {
        let start = felix_actors::clock::real_now();
        loop {
            let status = self.status();
            if let Some(v) = status.as_ref().and_then(&mut f) {
                return Ok(v);
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "daemon exited ({st}) while waiting for {what}:\n{}",
                    self.log_tail(40)
                );
            }
            if start.elapsed() > DEADLINE {
                bail!(
                    "timed out waiting for {what}; last status {}\nlog:\n{}",
                    status.unwrap_or_default(),
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the daemon is in sync, its last apply succeeded after
    /// more than `after` applies, and no actor is dirty; returns the apply
    /// count.
    pub fn wait_converged(&mut self, after: u64) -> Result<u64> {
        self.wait_status("convergence", |s| {
            let applies = s["applies"].as_u64()?;
            let clean = s["actors"]
                .as_array()?
                .iter()
                .all(|a| a["dirty"] == Value::Bool(false) && a["state"] == "running");
            (s["inSync"] == Value::Bool(true)
                && s["lastApply"]["ok"] == Value::Bool(true)
                && applies > after
                && clean)
                .then_some(applies)
        })
    }

    /// The current apply count (0 before the first status answer).
    pub fn applies(&self) -> u64 {
        self.status()
            .and_then(|s| s["applies"].as_u64())
            .unwrap_or(0)
    }

    /// Arms a fault through `felix admin fault add`.
    pub fn add_fault(&self, target: &str, op: &str, action: &str, count: u32) -> Result<()> {
        let count = count.to_string();
        let out = self.admin(&[
            "fault", "add", "--target", target, "--op", op, "--action", action, "--count", &count,
        ])?;
        if !out.status.success() {
            bail!("fault add: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) -> Result<()> {
        let out = self.admin(&["fault", "clear"])?;
        if !out.status.success() {
            bail!("fault clear: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// The restart count `/status` reports for `actor`.
    pub fn restarts(&self, actor: &str) -> Option<u64> {
        self.status()?["actors"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == actor)?["restarts"]
            .as_u64()
    }

    /// Sends SIGTERM and waits for a clean exit (code 0).
    pub fn stop(mut self) -> Result<()> {
        let mut child = self.child.take().ok_or_else(|| anyhow!("no child"))?;
        let pid = child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()?;
        if !sent.success() {
            bail!("kill -TERM {pid} failed: {sent}");
        }
        let start = felix_actors::clock::real_now();
        loop {
            if let Some(st) = child.try_wait()? {
                if st.code() != Some(0) {
                    bail!(
                        "felix exited with {st} after SIGTERM:\n{}",
                        self.log_tail(40)
                    );
                }
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                bail!("felix did not exit after SIGTERM:\n{}", self.log_tail(40));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Daemon {
    /// The daemon's exit status if it has exited (reaped), else `None`.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Kills the daemon with SIGKILL (no shutdown at all) and reaps it.
    pub fn kill(mut self) -> Result<()> {
        let mut child = self.child.take().ok_or_else(|| anyhow!("no child"))?;
        child.kill().context("SIGKILL")?;
        child.wait().context("reaping the killed daemon")?;
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_test_variable;

    #[test]
    fn the_harness_variables_are_not_passed_to_felix_but_its_settings_are() {
        for v in [
            "FELIX_BIN",
            "FELIX_SOAK",
            "FELIX_SOAK_SECONDS",
            "FELIX_REQUIRE_KERNEL_TESTS",
            "FELIX_KERNEL_TEST_LOG",
            "FELIX_FV_EXTERNAL_DRIVER",
        ] {
            assert!(is_test_variable(v), "{v}");
        }
        for v in [
            "FELIX_BPFENABLED",
            "FELIX_LOGSEVERITYSCREEN",
            "FELIX_SOAKING",
            "FELIX_TEST_DRIVER_MODE",
        ] {
            assert!(!is_test_variable(v), "{v}");
        }
    }
}
