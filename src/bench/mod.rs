//! Benchmarks behind `felix bench`: figures printed, never asserted.
//!
//! Each workload runs in a fresh child process (see `cli::bench`) so that
//! peak RSS is the workload's own.

pub mod bpf_path;
pub mod calc;
pub mod dataplane;
pub mod pipe;
pub mod pipeline;
mod rawchange;
pub mod routes;
pub mod traffic;
pub mod v3files;

/// Peak resident set size of this process, in MiB (`VmHWM`).
pub fn peak_rss_mib() -> f64 {
    read_status_kib("VmHWM:")
        .map(|k| k as f64 / 1024.0)
        .unwrap_or(0.0)
}

/// Current resident set size of this process, in MiB (`VmRSS`).
pub fn rss_mib() -> f64 {
    read_status_kib("VmRSS:")
        .map(|k| k as f64 / 1024.0)
        .unwrap_or(0.0)
}

/// A `kB` field of `/proc/self/status` (e.g. `"VmHWM:"`), in KiB.
pub fn read_status_kib(field: &str) -> Option<u64> {
    read_proc_status_kib("self", field)
}

/// A `kB` field of `/proc/<pid>/status` (`pid` may be `self`), in KiB.
pub fn read_proc_status_kib(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
