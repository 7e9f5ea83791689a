//! felix's memory and CPU from `/proc`: the process found by its admin
//! socket on its command line, RSS from `status`, CPU time (all threads)
//! from `stat`.
//!
//! Invariants: a sample belongs to one process (its pid is part of the
//! sample, so a restart between two samples is never mistaken for a drop in
//! CPU time); CPU time is in clock ticks of `USER_HZ`, 100 on Linux.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Linux's `USER_HZ` (the unit of `utime`/`stime` in `/proc/<pid>/stat`).
const USER_HZ: f64 = 100.0;

/// One reading of a process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// The process.
    pub pid: u32,
    /// When.
    pub at: Instant,
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// User plus system CPU time so far, seconds.
    pub cpu_s: f64,
}

/// The pid of the `felix run` whose command line names `socket`.
pub fn felix_pid(socket: &Path) -> Option<u32> {
    let want = socket.to_string_lossy().into_owned();
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        // Any binary named felix* (`$FELIX_BIN` may be a copy).
        let is_felix = args
            .first()
            .and_then(|a| a.rsplit(|b| *b == b'/').next())
            .is_some_and(|n| n.starts_with(b"felix"));
        if is_felix && args.get(1).is_some_and(|a| *a == b"run") && args.contains(&want.as_bytes())
        {
            return Some(pid);
        }
    }
    None
}

/// Reads process `pid` now.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(Sample {
        pid,
        at: felix_actors::clock::real_now(),
        rss_kib,
        cpu_s: (utime + stime) / USER_HZ,
    })
}

/// CPU used between two samples of the same process, as a fraction of one
/// core; `None` across a restart.
pub fn cpu_between(a: &Sample, b: &Sample) -> Option<f64> {
    if a.pid != b.pid {
        return None;
    }
    let wall = b.at.duration_since(a.at).as_secs_f64();
    (wall > 0.0).then(|| (b.cpu_s - a.cpu_s) / wall)
}

/// Samples `pid` every `every` for `span`; the samples taken.
pub fn sample_for(pid: u32, span: Duration, every: Duration) -> Vec<Sample> {
    let start = felix_actors::clock::real_now();
    let mut out = Vec::new();
    loop {
        if let Some(s) = sample(pid) {
            out.push(s);
        }
        if start.elapsed() >= span {
            return out;
        }
        std::thread::sleep(every);
    }
}

/// The median RSS of `samples`.
pub fn median_rss(samples: &[Sample]) -> u64 {
    let mut v: Vec<u64> = samples.iter().map(|s| s.rss_kib).collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}
