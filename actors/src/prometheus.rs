//! The Prometheus metrics port (`PrometheusMetricsEnabled`, `PrometheusMetricsHost`,
//! `PrometheusMetricsPort`): `GET /metrics` over TCP, the same families the admin socket's
//! `/metrics` serves, plus the standard process families when
//! `PrometheusProcessMetricsEnabled` (as upstream's Go client exposes them).
//!
//! | family | type | source |
//! |---|---|---|
//! | `process_cpu_seconds_total` | counter | `/proc/self/stat` utime + stime (USER_HZ: 100) |
//! | `process_resident_memory_bytes` | gauge | `/proc/self/status` `VmRSS` |
//! | `process_virtual_memory_bytes` | gauge | `/proc/self/stat` vsize |
//! | `process_start_time_seconds` | gauge | boot time (`/proc/stat` `btime`) + starttime ticks |
//! | `process_open_fds` | gauge | entries of `/proc/self/fd` |
//! | `process_max_fds` | gauge | `/proc/self/limits` "Max open files" soft limit |
//!
//! A process figure that cannot be read is left out (never a made-up value).

use std::fmt::Write as _;
use std::io;
use std::sync::Arc;

use crate::http::{Request, Response};
use crate::metrics::Metrics;
use crate::server::{spawn_server, Listener, ServerHandle};

/// The metrics port's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusConfig {
    /// Serve the port at all (`PrometheusMetricsEnabled`).
    pub enabled: bool,
    /// Address to bind (`PrometheusMetricsHost`; empty: every address).
    pub host: String,
    /// Port to bind (`PrometheusMetricsPort`).
    pub port: u16,
    /// Add the process families (`PrometheusProcessMetricsEnabled`).
    pub process: bool,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            host: String::new(),
            port: 9091,
            process: true,
        }
    }
}

/// Starts the metrics port if `cfg.enabled`.
pub fn start_prometheus_server(
    cfg: &PrometheusConfig,
    metrics: &Metrics,
) -> io::Result<Option<ServerHandle>> {
    if !cfg.enabled {
        return Ok(None);
    }
    let host = if cfg.host.is_empty() {
        "::"
    } else {
        cfg.host.as_str()
    };
    let l = match std::net::TcpListener::bind((host, cfg.port)) {
        // No IPv6 on this host: every IPv4 address instead.
        Err(e) if cfg.host.is_empty() && e.kind() == io::ErrorKind::AddrNotAvailable => {
            std::net::TcpListener::bind(("0.0.0.0", cfg.port))?
        }
        r => r?,
    };
    let local = l.local_addr()?.to_string();
    let (m, process) = (metrics.clone(), cfg.process);
    let handler = Arc::new(move |req: &Request| {
        if req.method != "GET" && req.method != "HEAD" {
            return Response::error(405, "method not allowed");
        }
        if req.path != "/metrics" {
            return Response::error(404, "not found: the metrics port serves GET /metrics");
        }
        let mut body = m.render_prometheus();
        if process {
            body.push_str(&process_metrics());
        }
        Response::text(200, body)
    });
    spawn_server("felix-prometheus", Listener::Tcp(l), local, handler).map(Some)
}

/// `VmRSS` of `/proc/self/status`, in bytes.
fn rss_bytes() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some((kb * 1024) as f64)
}

/// The process families (see the module docs) in the text exposition format.
pub fn process_metrics() -> String {
    let mut out = String::new();
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // `fields[0]` is field 3 (state) of proc(5): field n is `fields[n - 3]`.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    // /proc reports times in USER_HZ, which Linux fixes at 100 for user space (the ABI does
    // not follow the kernel's CONFIG_HZ).
    const USER_HZ: f64 = 100.0;
    let mut family = |name: &str, kind: &str, help: &str, v: Option<f64>| {
        if let Some(v) = v {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {v}");
        }
    };
    let cpu = match (field(14), field(15)) {
        (Some(u), Some(s)) => Some((u + s) as f64 / USER_HZ),
        _ => None,
    };
    family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        cpu,
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        rss_bytes(),
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        field(23).map(|v| v as f64),
    );
    let btime = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    let start = match (btime, field(22)) {
        (Some(b), Some(st)) => Some(b as f64 + st as f64 / USER_HZ),
        _ => None,
    };
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        start,
    );
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        open,
    );
    let max = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<u64>().ok())
        });
    family(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        max.map(|v| v as f64),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: &str, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn the_metrics_port_serves_the_admin_families_and_the_process_families() {
        let metrics = Metrics::new();
        metrics.publish(
            "test_family",
            "# TYPE test_family gauge\ntest_family 7\n".into(),
        );
        let cfg = PrometheusConfig {
            enabled: true,
            host: "127.0.0.1".into(),
            port: 0,
            process: true,
        };
        let h = start_prometheus_server(&cfg, &metrics)
            .expect("bind")
            .expect("enabled");
        let body = get(h.local_addr(), "/metrics");
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(body.contains("test_family 7"), "{body}");
        for f in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(body.contains(f), "{f} missing: {body}");
        }
        assert!(get(h.local_addr(), "/status").starts_with("HTTP/1.1 404"));
        h.shutdown();

        let off = PrometheusConfig {
            process: false,
            ..cfg.clone()
        };
        let h = start_prometheus_server(&off, &metrics)
            .expect("bind")
            .expect("enabled");
        assert!(!get(h.local_addr(), "/metrics").contains("process_cpu_seconds_total"));
        h.shutdown();
        let disabled = PrometheusConfig {
            enabled: false,
            ..cfg
        };
        assert!(start_prometheus_server(&disabled, &metrics)
            .expect("nothing to bind")
            .is_none());
    }
}
