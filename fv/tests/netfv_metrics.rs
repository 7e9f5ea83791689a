//! Dataplane FV: the Prometheus metrics port. `felix run` with `PrometheusMetricsEnabled`
//! serves `GET /metrics` on `PrometheusMetricsPort` in its namespace: the families the admin
//! socket's `/metrics` serves (upstream's names: calc graph, dataplane apply, cluster and
//! local counts, resync state) plus the process families.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{anyhow, ensure, Result};
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Fv, TOOLS};

const PORT: u16 = 19091;

/// `GET /metrics` on the metrics port, from inside the node namespace.
fn scrape(fv: &Fv) -> Result<String> {
    fv.sandbox
        .node
        .spawn_in(|| -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n"
            )?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })
        .join()
        .map_err(|_| anyhow!("scrape thread panicked"))?
        .map_err(|e| anyhow!("entering the node namespace: {e}"))?
        .map_err(|e| anyhow!("scraping 127.0.0.1:{PORT}: {e}"))
}

/// The family names (`# TYPE` lines) of an exposition.
fn families(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

fn metrics_port() -> Result<()> {
    let mut fv = Fv::standard(Backend::Iptables, &[])?;
    fv.start(&[
        ("FELIX_PROMETHEUSMETRICSENABLED", "true"),
        ("FELIX_PROMETHEUSMETRICSPORT", "19091"),
    ])?;
    let body = poll(Duration::from_secs(10), || scrape(&fv).ok())?;
    ensure!(
        body.starts_with("HTTP/1.1 200"),
        "metrics port answered: {body}"
    );
    let port = families(&body);
    // iptables mode has written its tables and sets by now.
    let value = |name: &str| -> Option<f64> {
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
    };
    for name in ["felix_iptables_restore_calls", "felix_ipset_calls"] {
        ensure!(
            value(name).is_some_and(|v| v > 0.0),
            "{name} is not positive after start of day: {:?}",
            value(name)
        );
    }
    for want in [
        "felix_calc_graph_update_time_seconds",
        "felix_calc_graph_updates_processed",
        "felix_int_dataplane_apply_time_seconds",
        "felix_int_dataplane_msg_batch_size",
        "felix_resync_state",
        "felix_active_local_endpoints",
        "felix_active_local_policies",
        "felix_cluster_num_hosts",
        "felix_cluster_num_workload_endpoints",
        "felix_iptables_restore_calls",
        "felix_iptables_save_calls",
        "felix_ipset_calls",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        ensure!(
            port.iter().any(|f| f == want),
            "{want} missing from the metrics port: {port:?}"
        );
    }
    // Every family of the admin socket's /metrics is on the port too.
    let admin = families(&fv.d()?.metrics()?);
    let missing: Vec<&String> = admin.iter().filter(|f| !port.contains(f)).collect();
    ensure!(missing.is_empty(), "on the admin socket only: {missing:?}");
    fv.stop()
}

#[test]
fn prometheus_port_serves_upstream_families_and_process_metrics() {
    felix_netns::require!(netns TOOLS);
    if let Err(e) = metrics_port() {
        panic!("{e:#}");
    }
}
