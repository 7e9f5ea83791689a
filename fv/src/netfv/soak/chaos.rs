//! The chaos schedule and the felix it acts on: SIGKILL at random points and
//! while an apply is held open (the admin socket's delay fault on the
//! supervisor's apply, or on the policy driver's first kernel operation, so
//! the kill lands between two phases), SIGTERM restarts, injected driver
//! errors and actor panics, and once per soak a persistent fault to measure
//! how retries are paced.
//!
//! Invariants checked here:
//! * `recovers-in-time`: after every start, felix is in sync and its first
//!   apply succeeded within the recovery bound (measured from the spawn);
//! * `no-unexpected-exit`: felix never exits unless the schedule stopped it
//!   (no crash, no crash loop next to the foreign writer);
//! * `clean-stop`: a SIGTERM ends felix with exit code 0;
//! * `retries-paced`: under a persistent fault on one driver, its failed
//!   kernel operations stay under the retry-rate bound and felix's CPU
//!   under the fault-CPU bound.
//!
//! Every action first closes felix's up interval in the
//! [`super::timeline::Timeline`] and opens it again only once felix has
//! settled, so the probes never hold felix to a deadline it could not meet.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::Value;

use super::resources;
use super::{lock, Shared};
use crate::netfv::daemon::{Backend, Daemon};
use felix_netns::Netns;

/// How long a held apply is held.
pub const HOLD: Duration = Duration::from_millis(3000);
/// How long a persistent fault is kept armed for the pacing check.
pub const PERSISTENT: Duration = Duration::from_secs(4);
/// How long felix gets to settle after a fault is cleared (not a bound of
/// the issue: a fault's retry is at the retry ticker's mercy when nothing
/// else schedules an apply).
const SETTLE: Duration = Duration::from_secs(15);

/// felix under the schedule: how to start it, and the running daemon.
pub struct Felix<'a> {
    /// The node namespace.
    pub node: &'a Netns,
    /// The datastore directory.
    pub ds_dir: PathBuf,
    /// Logs and the admin socket.
    pub scratch: &'a Path,
    /// The dataplane mode.
    pub backend: Backend,
    /// The bpffs to bind-mount in eBPF mode.
    pub bpffs: Option<&'a Path>,
    /// The running daemon.
    pub daemon: Option<Daemon>,
}

fn settled(s: &Value, after: u64) -> bool {
    s["inSync"] == Value::Bool(true)
        && s["lastApply"]["ok"] == Value::Bool(true)
        && s["applies"].as_u64().is_some_and(|a| a > after)
}

/// Sum of `felix_seam_op_errors_total` for `actor`.
pub fn seam_errors(metrics: &str, actor: &str) -> f64 {
    let label = format!("actor=\"{actor}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("felix_seam_op_errors_total") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Felix<'_> {
    /// The running daemon.
    pub fn d(&mut self) -> Result<&mut Daemon> {
        self.daemon
            .as_mut()
            .ok_or_else(|| anyhow!("felix is not running"))
    }

    /// The admin socket.
    pub fn socket(&self) -> PathBuf {
        self.scratch.join("admin.sock")
    }

    /// felix's pid.
    pub fn pid(&self) -> Option<u32> {
        resources::felix_pid(&self.socket())
    }

    fn spawn(&mut self) -> Result<()> {
        anyhow::ensure!(self.daemon.is_none(), "felix already running");
        let d = match self.bpffs {
            Some(fs) => Daemon::start_with_bpffs(
                self.node,
                &self.ds_dir,
                self.scratch,
                self.backend,
                &[],
                fs,
            )?,
            None => Daemon::start(self.node, &self.ds_dir, self.scratch, self.backend, &[])?,
        };
        self.daemon = Some(d);
        Ok(())
    }

    /// Polls `/status` every 50 ms until `f` holds; `Err` when felix exits
    /// (with its log tail) or at `deadline`.
    fn wait(
        &mut self,
        what: &str,
        deadline: Duration,
        f: impl Fn(&Value) -> bool,
    ) -> Result<Instant> {
        let start = felix_actors::clock::real_now();
        loop {
            let d = self.d()?;
            if d.status().is_some_and(|s| f(&s)) {
                return Ok(felix_actors::clock::real_now());
            }
            if let Some(st) = d.try_exit() {
                let tail = d.log_tail(30);
                self.daemon = None;
                return Err(anyhow!(
                    "felix exited ({st}) while waiting for {what}:\n{tail}"
                ));
            }
            if start.elapsed() > deadline {
                return Err(anyhow!(
                    "felix not {what} after {deadline:?}:\n{}",
                    d.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts felix and waits until it settled; records the recovery time
    /// and opens an up interval. Fails only when felix cannot be started
    /// or never settles within the daemon deadline.
    pub fn recover(&mut self, shared: &Shared, why: &str) -> Result<()> {
        let spawned = felix_actors::clock::real_now();
        self.spawn()?;
        let ready = self.wait(
            "settled after its start",
            crate::netfv::daemon::DEADLINE,
            |s| settled(s, 0),
        )?;
        let took = ready.duration_since(spawned);
        // Timeline before report: the lock order of every thread.
        let bound = match self.backend {
            Backend::Bpf => shared.bounds.bpf_recovery,
            _ => shared.bounds.recovery,
        };
        let late = {
            let mut tl = lock(&shared.timeline);
            tl.up_from(ready);
            (took > bound).then(|| {
                format!(
                    "start at {} ({why}) settled after {} ms (bound {} ms); {}",
                    tl.rel(spawned),
                    took.as_millis(),
                    bound.as_millis(),
                    tl.around(spawned)
                )
            })
        };
        let mut report = lock(&shared.report);
        report.recoveries.push(took);
        if let Some(detail) = late {
            report.violate("recovers-in-time", detail);
        }
        Ok(())
    }

    /// Waits until felix applied successfully after `after` applies, then
    /// opens an up interval.
    fn settle(&mut self, shared: &Shared, after: u64) -> Result<()> {
        let at = self.wait("settled after a fault", SETTLE, |s| settled(s, after))?;
        lock(&shared.timeline).up_from(at);
        Ok(())
    }

    /// If felix exited on its own: a `no-unexpected-exit` violation, and
    /// felix is started again.
    pub fn check_alive(&mut self, shared: &Shared) -> Result<()> {
        let Some(d) = self.daemon.as_mut() else {
            return Ok(());
        };
        if let Some(st) = d.try_exit() {
            let tail = d.log_tail(30);
            self.daemon = None;
            let now = felix_actors::clock::real_now();
            lock(&shared.timeline).down_now();
            let tl = lock(&shared.timeline);
            let detail = format!(
                "felix exited ({st}) at {}; {}; log:\n{tail}",
                tl.rel(now),
                tl.around(now)
            );
            drop(tl);
            lock(&shared.report).violate("no-unexpected-exit", detail);
            lock(&shared.timeline).event("felix exited on its own");
            self.recover(shared, "after an unexpected exit")?;
        }
        Ok(())
    }

    /// SIGKILL now (and reap).
    fn kill(&mut self, shared: &Shared, what: &str) -> Result<()> {
        lock(&shared.timeline).down_now();
        let pid = self.pid();
        let d = self
            .daemon
            .take()
            .ok_or_else(|| anyhow!("felix is not running"))?;
        lock(&shared.timeline).event(format!("SIGKILL pid {pid:?} ({what})"));
        d.kill()?;
        lock(&shared.report).kills += 1;
        Ok(())
    }

    /// Arms a fault through the admin socket.
    fn fault(
        &mut self,
        target: &str,
        op: &str,
        action: &str,
        count: u32,
        delay: Duration,
    ) -> Result<()> {
        let count = count.to_string();
        let delay = delay.as_millis().to_string();
        let out = self.d()?.admin(&[
            "fault",
            "add",
            "--target",
            target,
            "--op",
            op,
            "--action",
            action,
            "--count",
            &count,
            "--delay-ms",
            &delay,
        ])?;
        anyhow::ensure!(
            out.status.success(),
            "fault add {target} {op} {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Waits (up to `deadline`) until no armed fault is left; whether they
    /// all fired.
    fn fired(&mut self, deadline: Duration) -> Result<bool> {
        let start = felix_actors::clock::real_now();
        loop {
            let left = self.d()?.admin_json(&["faults"]);
            if left
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|a| a.is_empty())
            {
                return Ok(true);
            }
            if start.elapsed() > deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every actor `/status` lists, by role prefix.
    fn actors(&mut self, prefix: &str) -> Result<Vec<String>> {
        let s = self.d()?.status().ok_or_else(|| anyhow!("no status"))?;
        Ok(s["actors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["name"].as_str())
            .filter(|n| n.starts_with(prefix))
            .map(str::to_string)
            .collect())
    }
}

/// One chaos action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL at a random point, restart.
    Kill,
    /// SIGKILL while the supervisor's apply is held open, restart.
    KillHeldApply,
    /// SIGKILL while the policy driver's kernel operation is held open
    /// (after the IP-set phase of the apply), restart.
    KillHeldDriver,
    /// SIGTERM (exit code 0 required), restart.
    Restart,
    /// 1-3 injected errors on a random driver.
    DriverErrors,
    /// A panic of a random driver or manager.
    Panic,
}

impl Action {
    /// A weighted random action.
    pub fn pick(rng: &mut StdRng) -> Action {
        match rng.random_range(0..100) {
            0..30 => Action::Kill,
            30..45 => Action::KillHeldApply,
            45..60 => Action::KillHeldDriver,
            60..70 => Action::Restart,
            70..85 => Action::DriverErrors,
            _ => Action::Panic,
        }
    }
}

/// Performs `action` and brings felix back to settled.
pub fn act(f: &mut Felix<'_>, shared: &Shared, action: Action, rng: &mut StdRng) -> Result<()> {
    match action {
        Action::Kill => {
            f.kill(shared, "random point")?;
            f.recover(shared, "after SIGKILL")
        }
        Action::KillHeldApply | Action::KillHeldDriver => {
            lock(&shared.timeline).down_now();
            let (target, op) = if action == Action::KillHeldApply {
                ("supervisor".to_string(), "apply")
            } else {
                (f.backend.policy_driver().to_string(), "*")
            };
            f.fault(&target, op, "delay", 1, HOLD)?;
            lock(&shared.report).faults += 1;
            let held = f.fired(HOLD)?;
            if held {
                // Somewhere inside the held operation.
                std::thread::sleep(Duration::from_millis(
                    rng.random_range(50..HOLD.as_millis() as u64 / 2),
                ));
                lock(&shared.report).mid_apply_kills += 1;
            }
            let what = if held {
                format!("{target} {op} held open")
            } else {
                format!("{target} {op} delay armed but not reached")
            };
            f.kill(shared, &what)?;
            f.recover(shared, "after SIGKILL mid-apply")
        }
        Action::Restart => {
            lock(&shared.timeline).down_now();
            let d = f
                .daemon
                .take()
                .ok_or_else(|| anyhow!("felix is not running"))?;
            lock(&shared.timeline).event("SIGTERM");
            if let Err(e) = d.stop() {
                let now = felix_actors::clock::real_now();
                let tl = lock(&shared.timeline);
                let detail = format!("SIGTERM at {}: {e:#}", tl.rel(now));
                drop(tl);
                lock(&shared.report).violate("clean-stop", detail);
            }
            lock(&shared.report).kills += 1;
            f.recover(shared, "after SIGTERM")
        }
        Action::DriverErrors | Action::Panic => {
            let (targets, what, count) = if action == Action::DriverErrors {
                (f.actors("driver/")?, "error", rng.random_range(1..=3))
            } else {
                let mut t = f.actors("driver/")?;
                t.extend(f.actors("manager/")?);
                (t, "panic", 1)
            };
            anyhow::ensure!(!targets.is_empty(), "no actor to fault");
            let target = targets[rng.random_range(0..targets.len())].clone();
            let before = f.d()?.applies();
            lock(&shared.timeline).down_now();
            lock(&shared.timeline).event(format!("{count} x {what} armed on {target}"));
            f.fault(&target, "*", what, count, Duration::ZERO)?;
            lock(&shared.report).faults += 1;
            // A driver with nothing to do may never meet its fault: disarm it then.
            f.fired(Duration::from_secs(3))?;
            f.d()?.clear_faults()?;
            let after = f.d()?.applies().max(before);
            match f.settle(shared, after) {
                Ok(()) => Ok(()),
                Err(e) if f.daemon.is_none() => {
                    let now = felix_actors::clock::real_now();
                    let tl = lock(&shared.timeline);
                    let detail = format!("after {what} on {target}, at {}: {e:#}", tl.rel(now));
                    drop(tl);
                    lock(&shared.report).violate("no-unexpected-exit", detail);
                    f.recover(shared, "after an exit under faults")
                }
                Err(e) => Err(e).context(format!("settling after {what} on {target}")),
            }
        }
    }
}

/// Arms a persistent error on one route driver (a subsystem whose failure
/// the daemon does not treat as fatal) for [`PERSISTENT`] and checks that
/// its retries are paced and felix does not spin.
pub fn pacing_check(f: &mut Felix<'_>, shared: &Shared) -> Result<()> {
    let drivers = f.actors("driver/")?;
    let target = drivers
        .iter()
        .find(|d| d.starts_with("driver/routes"))
        .or_else(|| drivers.iter().find(|d| d.contains("route")))
        .cloned()
        .ok_or_else(|| anyhow!("no route driver in {drivers:?}"))?;
    let pid = f.pid().ok_or_else(|| anyhow!("no felix pid"))?;
    lock(&shared.timeline).down_now();
    lock(&shared.timeline).event(format!("persistent error armed on {target}"));
    let e0 = seam_errors(&f.d()?.metrics()?, &target);
    let s0 = resources::sample(pid).ok_or_else(|| anyhow!("no sample of {pid}"))?;
    f.fault(&target, "*", "error", 1_000_000, Duration::ZERO)?;
    lock(&shared.report).faults += 1;
    let start = felix_actors::clock::real_now();
    while start.elapsed() < PERSISTENT {
        std::thread::sleep(Duration::from_millis(100));
        if f.d()?.try_exit().is_some() {
            break;
        }
    }
    let s1 = resources::sample(pid);
    let e1 = seam_errors(&f.d()?.metrics()?, &target);
    f.d()?.clear_faults()?;
    lock(&shared.timeline).event(format!("persistent error cleared on {target}"));
    let secs = start.elapsed().as_secs_f64();
    let rate = (e1 - e0) / secs;
    let cpu = s1
        .and_then(|s1| resources::cpu_between(&s0, &s1))
        .unwrap_or(0.0);
    {
        let mut r = lock(&shared.report);
        r.fault_retry_rates.push((target.clone(), rate));
        r.fault_cpu.push(cpu);
        if e1 <= e0 {
            r.violate(
                "retries-paced",
                format!("no failed operation of {target} counted under a persistent fault: the check saw nothing"),
            );
        }
        if rate > shared.bounds.retry_rate {
            r.violate(
                "retries-paced",
                format!(
                    "{target}: {} failed operations in {secs:.1} s under a persistent fault ({rate:.1}/s, bound {}/s)",
                    e1 - e0,
                    shared.bounds.retry_rate
                ),
            );
        }
        if cpu > shared.bounds.fault_cpu {
            r.violate(
                "retries-paced",
                format!(
                    "felix used {:.0} % of a core under a persistent fault on {target}",
                    cpu * 100.0
                ),
            );
        }
    }
    let after = f.d()?.applies();
    f.settle(shared, after)
}
