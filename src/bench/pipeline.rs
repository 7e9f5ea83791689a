//! `felix bench pipeline`: the whole path from resource files to the kernel, timed from
//! the user's side, beside the figures of its stages alone (issue 25).
//!
//! Three measurements, each run as a user would run felix (a child process, real files):
//!
//! * **`felix calc` at scale**: upstream's calc benchmark workload (a: 250,000 remote and 200
//!   local endpoints, 10,000 policies, 100 profiles) written as v3 resource files in each
//!   document style ([`Style`]), read by `felix calc`; wall time and peak RSS from `wait4`.
//!   Beside it, the graph alone on the same workload (`felix bench calc --workload a`).
//! * **`felix run` start of day**: the dataplane benchmark's workload as one file per kind,
//!   `felix run` started in a fresh network namespace; the time from spawning the process
//!   to the end of the apply that leaves every driver clean (read from the admin socket's
//!   `/status`, whose `lastApply.at` is taken after the kernel command returned).  Beside
//!   it, the raw tools loading the final ruleset, dumped from that namespace, into another.
//! * **One changed policy**: one policy's port changed in the policy file (written aside and
//!   renamed into place, as editors and `kubectl` do); the time from the rename to the end
//!   of the apply that programs it, checked in the kernel's ruleset.  Beside it, the raw
//!   tools rewriting the same changed chains in the raw tools' namespace ([`rawchange`]).
//!
//! Figures are printed, never asserted.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context};
use felix_netns::{self as netns, Netns};

use super::dataplane::{self as dp, Sizes};
use super::rawchange;
use super::v3files::{self, FileWriter, Style};
use crate::model::{Key, Update};

/// The name prefix of every namespace this benchmark creates.
pub const NETNS_PREFIX: &str = "felix-bench-pl-";

/// Dataplane modes the start-of-day and change figures are taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// nftables (`NFTablesMode=Enabled`).
    Nftables,
    /// iptables through the nf_tables kernel API (`iptables-nft`).
    IptablesNft,
    /// iptables with the legacy kernel tables (`IptablesBackend=Legacy`).
    IptablesLegacy,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Nftables => "nftables",
            Mode::IptablesNft => "iptables-nft",
            Mode::IptablesLegacy => "iptables-legacy",
        }
    }

    /// Per family this mode programs separately (IPv4 first), the tool that lists its
    /// rules, with its arguments, and the one that loads such a listing.  felix programs
    /// both families, so the raw tools' start of day loads both.
    fn rule_tools(self) -> &'static [((&'static str, &'static [&'static str]), &'static str)] {
        match self {
            // One listing holds both tables.
            Mode::Nftables => &[(("nft", &["list", "ruleset"]), "nft")],
            Mode::IptablesNft => &[
                (("iptables-nft-save", &[]), "iptables-nft-restore"),
                (("ip6tables-nft-save", &[]), "ip6tables-nft-restore"),
            ],
            Mode::IptablesLegacy => &[
                (("iptables-legacy-save", &[]), "iptables-legacy-restore"),
                (("ip6tables-legacy-save", &[]), "ip6tables-legacy-restore"),
            ],
        }
    }

    fn env(self) -> [(&'static str, &'static str); 2] {
        match self {
            Mode::Nftables => [
                ("FELIX_NFTABLESMODE", "Enabled"),
                ("FELIX_IPTABLESBACKEND", "Auto"),
            ],
            Mode::IptablesNft => [
                ("FELIX_NFTABLESMODE", "Disabled"),
                ("FELIX_IPTABLESBACKEND", "NFT"),
            ],
            Mode::IptablesLegacy => [
                ("FELIX_NFTABLESMODE", "Disabled"),
                ("FELIX_IPTABLESBACKEND", "Legacy"),
            ],
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Document styles of the `felix calc` figure (empty: skip it).
    pub styles: Vec<Style>,
    /// Modes of the start-of-day and change figures (empty: skip them).
    pub modes: Vec<Mode>,
    /// The dataplane workload.
    pub sizes: Sizes,
    /// Policy changes timed per mode.
    pub changes: usize,
    /// Also run the stage-alone benchmarks (`bench calc --workload a`, `bench dataplane`).
    pub stages: bool,
    /// Where to write the workload files and logs, kept afterwards (`None`: a temporary
    /// directory, removed at the end).
    pub keep: Option<PathBuf>,
}

/// A child's end: status, peak RSS and CPU time, from `wait4`.
struct Reaped {
    status: ExitStatus,
    max_rss_mib: f64,
    cpu: Duration,
}

/// Waits for `child` with `wait4`, which reports the child's own peak RSS and CPU time.
fn wait_rusage(child: &mut Child) -> std::io::Result<Reaped> {
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: all-zero bytes are a valid `rusage` (plain integers and timevals).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are valid, writable and live across the call; `pid` is
        // our own unreaped child, so no other process's status is taken.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(Reaped {
        status: ExitStatus::from_raw(status),
        max_rss_mib: ru.ru_maxrss as f64 / 1024.0,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------
// felix calc at scale.

/// Writes workload (a) into `dir` in `style`: policies, profiles, and the endpoints in
/// files of 25,000.  Returns the total size in bytes.
pub fn write_calc_workload(dir: &Path, style: Style) -> anyhow::Result<u64> {
    const PER_FILE: usize = 25_000;
    fs::create_dir_all(dir)?;
    let mut total = 0;
    let mut current: Option<(String, FileWriter, usize)> = None;
    let mut endpoints = 0usize;
    let mut files = 0usize;
    let mut result = Ok(());
    super::calc::for_each_workload_a_update(|u: Update| {
        if result.is_err() {
            return;
        }
        let group = match &u.key {
            Key::Policy(_) => "policies".to_string(),
            Key::Profile(_) => "profiles".to_string(),
            _ => {
                endpoints += 1;
                format!("endpoints-{:03}", (endpoints - 1) / PER_FILE)
            }
        };
        if current.as_ref().is_some_and(|(g, _, _)| *g != group) {
            if let Some((g, w, _)) = current.take() {
                match w.finish(dir, &g) {
                    Ok((_, n)) => total += n,
                    Err(e) => result = Err(e),
                }
                files += 1;
            }
        }
        let (_, w, n) = current.get_or_insert_with(|| (group, FileWriter::new(style), 0));
        if let Some(r) = v3files::from_model(&u, endpoints) {
            w.push(&r);
            *n += 1;
        }
    });
    result?;
    if let Some((g, w, _)) = current.take() {
        total += w.finish(dir, &g)?.1;
    }
    Ok(total)
}

/// One `felix calc` run: wall, CPU, peak RSS.
struct CalcFigure {
    style: Style,
    bytes: u64,
    wall: Duration,
    cpu: Duration,
    max_rss_mib: f64,
}

fn time_felix_calc(exe: &Path, dir: &Path, style: Style, bytes: u64) -> anyhow::Result<CalcFigure> {
    let t0 = felix_actors::clock::real_now();
    let mut child = Command::new(exe)
        .args(["calc", "--node", "localhost"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting felix calc")?;
    let stderr = child.stderr.take();
    let reaped = wait_rusage(&mut child)?;
    let wall = t0.elapsed();
    if !reaped.status.success() {
        let mut msg = String::new();
        if let Some(e) = stderr {
            for line in BufReader::new(e).lines().map_while(Result::ok).take(20) {
                msg.push_str(&line);
                msg.push('\n');
            }
        }
        bail!(
            "felix calc ({}) failed: {}\n{msg}",
            style.as_str(),
            reaped.status
        );
    }
    Ok(CalcFigure {
        style,
        bytes,
        wall,
        cpu: reaped.cpu,
        max_rss_mib: reaped.max_rss_mib,
    })
}

/// The graph alone on workload (a), as `felix bench calc --workload a` prints it.
fn graph_alone(exe: &Path) -> anyhow::Result<(String, f64)> {
    let mut child = Command::new(exe)
        .args(["bench", "calc", "--workload", "a"])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting felix bench calc")?;
    let mut out = String::new();
    if let Some(o) = child.stdout.take() {
        for line in BufReader::new(o).lines().map_while(Result::ok) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    let reaped = wait_rusage(&mut child)?;
    if !reaped.status.success() {
        bail!("felix bench calc failed: {}", reaped.status);
    }
    Ok((out.trim_end().to_string(), reaped.max_rss_mib))
}

fn run_calc(exe: &Path, opts: &Options, scratch: &Path) -> anyhow::Result<()> {
    println!("== felix calc of upstream's workload (a) as v3 files ==");
    let mut figs = Vec::new();
    for &style in &opts.styles {
        let dir = scratch.join(format!("calc-{}", style.as_str()));
        let bytes = write_calc_workload(&dir, style)?;
        let fig = time_felix_calc(exe, &dir, style, bytes)?;
        println!(
            "felix calc {:<10} {:>6.1} MB: wall {:>7.0} ms, CPU {:>7.0} ms, peak RSS {:>6.1} MiB",
            style.as_str(),
            bytes as f64 / 1e6,
            ms(fig.wall),
            ms(fig.cpu),
            fig.max_rss_mib
        );
        figs.push(fig);
        if opts.keep.is_none() {
            let _ = fs::remove_dir_all(&dir);
        }
    }
    if opts.stages {
        let (line, rss) = graph_alone(exe)?;
        println!("graph alone (felix bench calc --workload a, peak RSS {rss:.1} MiB):");
        for l in line.lines() {
            println!("  {l}");
        }
    }
    println!();
    println!("| felix calc, workload (a) | size | wall | CPU | peak RSS |");
    println!("|---|---|---|---|---|");
    for f in &figs {
        println!(
            "| {} | {:.1} MB | {:.2} s | {:.2} s | {:.0} MiB |",
            f.style.as_str(),
            f.bytes as f64 / 1e6,
            f.wall.as_secs_f64(),
            f.cpu.as_secs_f64(),
            f.max_rss_mib
        );
    }
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------
// felix run: start of day and one change.

/// Writes the dataplane workload as one block-YAML file per kind; returns the policy
/// file's path.
fn write_dataplane_workload(dir: &Path, sizes: &Sizes) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut by_kind: Vec<(&str, FileWriter)> = Vec::new();
    for (i, u) in dp::start_of_day_input(sizes).iter().enumerate() {
        let kind = match &u.key {
            Key::Profile(_) => "profiles",
            Key::NetworkSet(_) => "networksets",
            Key::Policy(_) => "policies",
            _ => "workloadendpoints",
        };
        let Some(r) = v3files::from_model(u, i) else {
            continue;
        };
        match by_kind.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, w)) => w.push(&r),
            None => {
                let mut w = FileWriter::new(Style::Yaml);
                w.push(&r);
                by_kind.push((kind, w));
            }
        }
    }
    let mut policies = None;
    for (kind, w) in by_kind {
        let (path, _) = w.finish(dir, kind)?;
        if kind == "policies" {
            policies = Some(path);
        }
    }
    policies.ok_or_else(|| anyhow!("the workload has no policies"))
}

/// The policy file's text with policy 0's ports shifted by `shift`.
fn policy_file(sizes: &Sizes, shift: u16) -> Vec<u8> {
    let mut w = FileWriter::new(Style::Yaml);
    for i in 0..sizes.policies {
        let u = dp::policy(i, sizes, if i == 0 { shift } else { 0 });
        if let Some(r) = v3files::from_model(&u, i) {
            w.push(&r);
        }
    }
    w.into_bytes()
}

/// What `/status` says about applies.
#[derive(Debug, Clone, PartialEq)]
struct ApplyState {
    applies: u64,
    /// The last apply's end, when it was ok and every actor is clean.
    settled_at: Option<SystemTime>,
}

fn apply_state(socket: &Path) -> Option<ApplyState> {
    let (code, _, body) = felix_actors::http::request_blocking(
        socket,
        "GET",
        "/status",
        None,
        Duration::from_secs(5),
    )
    .ok()?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let applies = v["applies"].as_u64()?;
    let clean = v["inSync"].as_bool() == Some(true)
        && v["lastApply"]["ok"].as_bool() == Some(true)
        && v["actors"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["dirty"].as_bool() != Some(true)));
    let at = v["lastApply"]["at"]
        .as_str()
        .and_then(|s| humantime::parse_rfc3339(s).ok());
    Some(ApplyState {
        applies,
        settled_at: if clean { at } else { None },
    })
}

/// Polls `/status` until an apply after `after` applies leaves everything clean, and no
/// further apply follows within `quiet`; returns the end of that apply.
fn wait_settled(
    socket: &Path,
    after: u64,
    quiet: Duration,
    child: &mut Child,
) -> anyhow::Result<SystemTime> {
    let deadline = felix_actors::clock::real_now() + Duration::from_secs(300);
    let mut candidate: Option<(ApplyState, std::time::Instant)> = None;
    loop {
        if felix_actors::clock::real_now() > deadline {
            bail!("felix did not settle within 300 s");
        }
        if let Some(status) = child.try_wait()? {
            bail!("felix exited ({status}) before settling");
        }
        match apply_state(socket) {
            Some(
                s @ ApplyState {
                    applies,
                    settled_at: Some(at),
                },
            ) if applies > after => match &candidate {
                Some((c, since)) if *c == s => {
                    if since.elapsed() >= quiet {
                        return Ok(at);
                    }
                }
                _ => candidate = Some((s, felix_actors::clock::real_now())),
            },
            _ => candidate = None,
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn since(t0: SystemTime, t: SystemTime) -> Duration {
    t.duration_since(t0).unwrap_or_default()
}

/// Milestones of a start of day, from felix's log (`<RFC 3339> <LEVEL> ...: <message>`):
/// (label, message prefix).
const MILESTONES: [(&str, &str); 4] = [
    ("files read", "file datastore in sync"),
    ("first batch computed", "first dataplane batch computed"),
    (
        "supervisor in sync",
        "datastore in sync; dataplane programming may begin",
    ),
    ("first apply done", "initial dataplane resync complete"),
];

/// When each milestone was logged, from `t0`; the first log line is "process up".
fn timeline(log: &str, t0: SystemTime) -> Vec<(&'static str, Duration)> {
    let mut out = Vec::new();
    for (i, line) in log.lines().enumerate() {
        let Some((stamp, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(at) = humantime::parse_rfc3339(stamp) else {
            continue;
        };
        if i == 0 {
            out.push(("process up", since(t0, at)));
        }
        for (label, message) in MILESTONES {
            if rest.contains(&format!(": {message}")) && !out.iter().any(|(l, _)| *l == label) {
                out.push((label, since(t0, at)));
            }
        }
    }
    out
}

/// Figures of one mode.
struct ModeFigures {
    mode: Mode,
    timeline: Vec<(&'static str, Duration)>,
    start_of_day: Duration,
    raw: Duration,
    raw_what: String,
    changes: Vec<Duration>,
    /// The raw tools applying the same change (median), and what they ran.
    raw_change: Option<(Duration, String)>,
    rss_mib: f64,
}

/// Dumps the ruleset in `ns` and loads it into `replay` with the raw tools; returns the
/// time, what was loaded, and the listings (one per rule tool) for [`raw_change`].
fn raw_start_of_day(
    mode: Mode,
    ns: &str,
    replay: &str,
) -> anyhow::Result<(Duration, String, Vec<String>)> {
    if mode == Mode::Nftables {
        let ((save, save_args), restore) = mode.rule_tools()[0];
        let rules = netns::run_in(ns, save, save_args, None)?.0;
        let n = dp::nft_rule_count(&String::from_utf8_lossy(&rules));
        let (_, t) = netns::run_in(replay, restore, &["-f", "-"], Some(&rules))?;
        let listing = String::from_utf8_lossy(&rules).into_owned();
        return Ok((
            t,
            format!("nft -f ({n} rules, both families)"),
            vec![listing],
        ));
    }
    let sets = netns::run_in(ns, "ipset", &["save"], None)?.0;
    let (_, mut total) = netns::run_in(replay, "ipset", &["restore"], Some(&sets))?;
    let mut what = format!("ipset restore {:.0} ms", ms(total));
    let mut listings = Vec::new();
    for &((save, save_args), restore) in mode.rule_tools() {
        let rules = netns::run_in(ns, save, save_args, None)?.0;
        let n = String::from_utf8_lossy(&rules)
            .lines()
            .filter(|l| l.starts_with("-A "))
            .count();
        let (_, t) = netns::run_in(replay, restore, &[], Some(&rules))?;
        total += t;
        what.push_str(&format!(" + {restore} {:.0} ms ({n} rules)", ms(t)));
        listings.push(String::from_utf8_lossy(&rules).into_owned());
    }
    Ok((total, what, listings))
}

/// The current listings of `ns`, one per rule tool of `mode`.
fn listings(mode: Mode, ns: &str) -> anyhow::Result<Vec<String>> {
    mode.rule_tools()
        .iter()
        .map(|&((save, save_args), _)| {
            let out = netns::run_in(ns, save, save_args, None)?.0;
            Ok(String::from_utf8_lossy(&out).into_owned())
        })
        .collect()
}

/// The raw tools applying the same change as felix's changed policy, in `replay` (which
/// holds the start-of-day rulesets, `before`), `runs` times: see [`rawchange`].
fn raw_change(
    mode: Mode,
    replay: &str,
    before: Vec<String>,
    after: Vec<String>,
    runs: usize,
) -> anyhow::Result<(Duration, String)> {
    let sets: Vec<rawchange::Listings> = mode
        .rule_tools()
        .iter()
        .zip(before.into_iter().zip(after))
        .map(|(&(_, restore), (before, after))| rawchange::Listings {
            restore,
            before,
            after,
        })
        .collect();
    rawchange::time_change(replay, &sets, runs)
}

fn kernel_has_port(mode: Mode, ns: &str, port: u16) -> anyhow::Result<bool> {
    let ((program, args), _) = mode.rule_tools()[0];
    let out = String::from_utf8_lossy(&netns::run_in(ns, program, args, None)?.0).into_owned();
    let needles = [
        format!("dport {port} "),
        format!("dports {port} "),
        format!("--dport {port} "),
        format!("dports {port},"),
        format!(",{port} "),
    ];
    Ok(needles.iter().any(|n| out.contains(n.as_str())))
}

fn run_mode(exe: &Path, mode: Mode, opts: &Options, scratch: &Path) -> anyhow::Result<ModeFigures> {
    let sizes = &opts.sizes;
    let ours = Netns::create_owned(NETNS_PREFIX, &format!("{}-a", mode.as_str()))?;
    let replay = Netns::create_owned(NETNS_PREFIX, &format!("{}-b", mode.as_str()))?;
    let mut veths = String::new();
    for i in 0..sizes.workloads {
        veths.push_str(&format!(
            "link add calibench{i:05} type veth peer name pbench{i:05}\nlink set calibench{i:05} up\nlink set pbench{i:05} up\n"
        ));
    }
    netns::run_checked(
        "ip",
        &["-n", ours.name(), "-batch", "-"],
        Some(veths.as_bytes()),
    )?;

    let dir = scratch.join(format!("ds-{}", mode.as_str()));
    let policy_path = write_dataplane_workload(&dir, sizes)?;
    let socket = scratch.join(format!("{}.sock", mode.as_str()));
    let log = scratch.join(format!("felix-{}.log", mode.as_str()));
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ours.name()])
        .arg(exe)
        .arg("run")
        .args(["--node", dp::HOST])
        .arg("--datastore")
        .arg(format!("file:{}", dir.display()))
        .arg("--admin-socket")
        .arg(&socket)
        .env("FELIX_HEALTHENABLED", "false")
        // Info unless the caller asks for more (a change's steps are logged at Debug).
        .env(
            "FELIX_LOGSEVERITYSCREEN",
            std::env::var("FELIX_LOGSEVERITYSCREEN").unwrap_or_else(|_| "Info".into()),
        )
        .env("FELIX_LOGFILEPATH", "none")
        .env("FELIX_BPFENABLED", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log)?);
    for (k, v) in mode.env() {
        cmd.env(k, v);
    }
    let t0 = SystemTime::now();
    let mut child = cmd.spawn().context("starting felix run")?;
    let sandbox = Sandbox {
        ns: ours.name(),
        replay: replay.name(),
        socket: &socket,
        policy_path: &policy_path,
    };
    let result = measure_running(mode, opts, &mut child, t0, &sandbox).map(|mut f| {
        f.timeline = timeline(&fs::read_to_string(&log).unwrap_or_default(), t0);
        f
    });
    // SAFETY: `kill` with our own child's pid and SIGTERM has no memory effects.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let _ = child.wait();
    match result {
        Ok(f) => Ok(f),
        Err(e) => {
            let tail = fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(20).collect();
            Err(e.context(format!(
                "felix run in {} mode; its log ends:\n{}",
                mode.as_str(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )))
        }
    }
}

/// Where a running felix's measurements are taken.
struct Sandbox<'a> {
    /// felix's namespace.
    ns: &'a str,
    /// The raw tools' namespace.
    replay: &'a str,
    /// felix's admin socket.
    socket: &'a Path,
    /// The policy file in felix's datastore.
    policy_path: &'a Path,
}

fn measure_running(
    mode: Mode,
    opts: &Options,
    child: &mut Child,
    t0: SystemTime,
    sb: &Sandbox<'_>,
) -> anyhow::Result<ModeFigures> {
    let (ns, replay, socket, policy_path) = (sb.ns, sb.replay, sb.socket, sb.policy_path);
    let settled = wait_settled(socket, 0, Duration::from_millis(500), child)?;
    let start_of_day = since(t0, settled);
    let rss_mib = super::read_proc_status_kib(&child.id().to_string(), "VmHWM:")
        .map_or(0.0, |k| k as f64 / 1024.0);
    let (raw, raw_what, start_listings) = raw_start_of_day(mode, ns, replay)?;

    let mut changes = Vec::new();
    let mut shifted_listings = None;
    for k in 1..=opts.changes {
        let shift = if k % 2 == 1 { 1000 } else { 0 };
        let before = apply_state(socket)
            .ok_or_else(|| anyhow!("no /status from felix"))?
            .applies;
        let tmp = policy_path.with_file_name(".policies.yaml.tmp");
        fs::write(&tmp, policy_file(&opts.sizes, shift as u16))?;
        let t = SystemTime::now();
        fs::rename(&tmp, policy_path)?;
        let done = wait_settled(socket, before, Duration::from_millis(200), child)?;
        changes.push(since(t, done));
        // Port 2000 belongs to policy 0 alone, and only while it is shifted (the others'
        // ports are 1000-1999).
        let shifted = shift != 0;
        if kernel_has_port(mode, ns, 2000)? != shifted {
            bail!("after change {k}, the kernel's rules for port 2000 do not match the policy file (policy 0 shifted: {shifted})");
        }
        if shifted && shifted_listings.is_none() {
            shifted_listings = Some(listings(mode, ns)?);
        }
    }
    let raw_change = match shifted_listings {
        Some(after) => Some(raw_change(
            mode,
            replay,
            start_listings,
            after,
            opts.changes,
        )?),
        None => None,
    };
    Ok(ModeFigures {
        mode,
        timeline: Vec::new(),
        start_of_day,
        raw,
        raw_what,
        changes,
        raw_change,
        rss_mib,
    })
}

/// The dataplane benchmark's summary for `mode` (its stage-alone figures), from a child.
fn dataplane_alone(exe: &Path, mode: Mode, sizes: &Sizes) -> anyhow::Result<String> {
    let backend = match mode {
        Mode::Nftables => "nftables",
        Mode::IptablesNft => "iptables",
        Mode::IptablesLegacy => return Ok("(no stage-alone run for iptables-legacy)".into()),
    };
    let out = Command::new(exe)
        .args(["bench", "dataplane", "--backend", backend])
        .args(sizes.to_args())
        .stderr(Stdio::null())
        .output()
        .context("starting felix bench dataplane")?;
    if !out.status.success() {
        bail!(
            "felix bench dataplane --backend {backend} failed: {}",
            out.status
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("dataplane summary"))
        .collect();
    Ok(table.join("\n"))
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn run_dataplane(exe: &Path, opts: &Options, scratch: &Path) -> anyhow::Result<()> {
    let swept = netns::sweep_stale(NETNS_PREFIX);
    if swept > 0 {
        eprintln!("removed {swept} stale benchmark namespace(s)");
    }
    let s = &opts.sizes;
    println!(
        "== felix run: {} workloads, {} policies of {} rules, {} sets of {} members, one file per kind ==",
        s.workloads, s.policies, s.rules, s.ip_sets, s.members
    );
    let mut figs = Vec::new();
    for &mode in &opts.modes {
        let f = run_mode(exe, mode, opts, scratch)?;
        println!(
            "{:<16} start of day {:>7.0} ms (raw tools {:>7.0} ms: {}), changes {:?} ms, peak RSS {:.0} MiB",
            mode.as_str(),
            ms(f.start_of_day),
            ms(f.raw),
            f.raw_what,
            f.changes.iter().map(|d| ms(*d).round()).collect::<Vec<_>>(),
            f.rss_mib
        );
        let steps: Vec<String> = f
            .timeline
            .iter()
            .map(|(l, d)| format!("{l} +{:.0} ms", ms(*d)))
            .collect();
        println!("{:<16} timeline: {}", "", steps.join(", "));
        if let Some((t, what)) = &f.raw_change {
            println!(
                "{:<16} raw tools, the same change: {:.1} ms (median of {}; {what})",
                "",
                ms(*t),
                opts.changes
            );
        }
        figs.push(f);
    }
    println!();
    println!("| mode | start of day, process start to settled | raw tools, same ruleset | ratio | one changed policy, rename to kernel (median of {}) | raw tools, same change | peak RSS |", opts.changes);
    println!("|---|---|---|---|---|---|---|");
    for f in &figs {
        let raw_change = f
            .raw_change
            .as_ref()
            .map_or("-".to_string(), |(t, _)| format!("{:.1} ms", ms(*t)));
        println!(
            "| {} | {:.0} ms | {:.0} ms | {:.2}x | {:.1} ms | {raw_change} | {:.0} MiB |",
            f.mode.as_str(),
            ms(f.start_of_day),
            ms(f.raw),
            f.start_of_day.as_secs_f64() / f.raw.as_secs_f64().max(1e-9),
            ms(median(&f.changes)),
            f.rss_mib
        );
    }
    println!();
    if opts.stages {
        for &mode in &opts.modes {
            println!(
                "stage alone ({}): felix bench dataplane, in process",
                mode.as_str()
            );
            println!("{}", dataplane_alone(exe, mode, &opts.sizes)?);
            println!();
        }
    }
    Ok(())
}

/// Runs the benchmark; see the module docs.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let temporary;
    let scratch = match &opts.keep {
        Some(dir) => {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.as_path()
        }
        None => {
            temporary = tempfile::Builder::new()
                .prefix("felix-bench-pipeline-")
                .tempdir()?;
            temporary.path()
        }
    };
    if !opts.styles.is_empty() {
        run_calc(&exe, opts, scratch)?;
    }
    if !opts.modes.is_empty() {
        run_dataplane(&exe, opts, scratch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{decode_documents, Format};

    fn small() -> Sizes {
        Sizes {
            workloads: 12,
            policies: 4,
            rules: 5,
            ip_sets: 2,
            members: 3,
            apps: 2,
        }
    }

    #[test]
    fn the_timeline_reads_milestones_from_the_log() {
        let t0 = humantime::parse_rfc3339("2026-12-03T06:00:00.000Z").unwrap();
        let log = "2026-12-03T06:00:00.040Z  INFO felix::daemon: starting\n\
                   2026-12-03T06:00:00.250Z  INFO felix::datastore::file: file datastore in sync files=4\n\
                   garbage line\n\
                   2026-12-03T06:00:01.000Z  INFO felix_actors::supervisor: initial dataplane resync complete seconds=0.7\n";
        let t = timeline(log, t0);
        let ms_of = |label: &str| {
            t.iter()
                .find(|(l, _)| *l == label)
                .map(|(_, d)| d.as_millis())
        };
        assert_eq!(ms_of("process up"), Some(40));
        assert_eq!(ms_of("files read"), Some(250));
        assert_eq!(ms_of("first apply done"), Some(1000));
        assert_eq!(ms_of("first batch computed"), None);
    }

    /// The files `felix run` reads decode, without invalid resources, to the updates the
    /// in-process dataplane benchmark feeds its graph.
    #[test]
    fn the_dataplane_workload_files_decode_to_the_benchmark_input() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = small();
        let policies = write_dataplane_workload(dir.path(), &sizes).unwrap();
        let mut keys = Vec::new();
        for entry in fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let text = fs::read_to_string(&path).unwrap();
            for d in decode_documents(&text, "x", Format::Yaml).unwrap() {
                let entries = d
                    .result
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                keys.extend(entries.into_iter().map(|(k, _)| format!("{k:?}")));
            }
        }
        let mut want: Vec<String> = dp::start_of_day_input(&sizes)
            .iter()
            .map(|u| format!("{:?}", u.key))
            // The benchmark's model keys leave the policy kind out; files say it.
            .map(|k| k.replace("kind: \"\"", "kind: \"GlobalNetworkPolicy\""))
            .collect();
        keys.sort();
        want.sort();
        assert_eq!(keys, want);
        // The changed file differs from the original in policy 0's ports only.
        let changed = String::from_utf8(policy_file(&sizes, 1000)).unwrap();
        let original = fs::read_to_string(policies).unwrap();
        assert_ne!(changed, original);
        assert_eq!(String::from_utf8(policy_file(&sizes, 0)).unwrap(), original);
        assert!(changed.contains("- 2000"), "{changed}");
    }
}
