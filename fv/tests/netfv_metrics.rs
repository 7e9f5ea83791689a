//! Dataplane FV: the Prometheus metrics port. `felix run` with `PrometheusMetricsEnabled`
//! serves `GET /metrics` on `PrometheusMetricsPort` in its namespace: the families the admin
//! socket's `/metrics` serves (upstream's names: calc graph, dataplane apply, cluster and
//! local counts, resync state, tables and sets with their labels) plus the process families,
//! each family once with upstream's type; then the same in nftables mode for the `felix_nft_*`
//! families.

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

/// Family name to type (`# TYPE` lines); a family declared twice is an error.
fn typed_families(text: &str) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let mut it = l.split_whitespace();
        let (Some(name), Some(kind)) = (it.next(), it.next()) else {
            continue;
        };
        ensure!(
            out.insert(name.to_string(), kind.to_string()).is_none(),
            "family {name} declared twice"
        );
    }
    Ok(out)
}

/// The value of the first sample whose name and labels start with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Checks the expected `(family, type)` pairs and labelled samples that must be positive.
fn expect(body: &str, families: &[(&str, &str)], positive: &[&str]) -> Result<()> {
    let typed = typed_families(body)?;
    for (name, kind) in families {
        ensure!(
            typed.get(*name).map(String::as_str) == Some(*kind),
            "{name}: want a {kind}, the port has {:?}",
            typed.get(*name)
        );
    }
    for p in positive {
        ensure!(
            sample(body, p).is_some_and(|v| v > 0.0),
            "{p}: not positive ({:?})",
            sample(body, p)
        );
    }
    Ok(())
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
    expect(
        &body,
        &[
            ("felix_int_dataplane_apply_time_seconds", "summary"),
            ("felix_int_dataplane_msg_batch_size", "summary"),
            ("felix_int_dataplane_iface_msg_batch_size", "summary"),
            ("felix_int_dataplane_addr_msg_batch_size", "summary"),
            ("felix_int_dataplane_messages", "counter"),
            ("felix_int_dataplane_failures", "counter"),
            ("felix_iptables_chains", "gauge"),
            ("felix_iptables_rules", "gauge"),
            ("felix_iptables_lines_executed", "counter"),
            ("felix_ipset_lines_executed", "counter"),
            ("felix_ipsets_calico", "gauge"),
            ("felix_ipsets_total", "gauge"),
        ],
        &[
            "felix_iptables_chains{ip_version=\"4\",table=\"filter\"}",
            "felix_iptables_rules{ip_version=\"6\",table=\"filter\"}",
            "felix_iptables_lines_executed{ip_version=\"4\",table=\"filter\"}",
            "felix_int_dataplane_messages{type=\"WorkloadEndpointUpdate\"}",
            "felix_ipsets_total{ip_version=\"4\"}",
        ],
    )?;
    // Every family of the admin socket's /metrics is on the port too.
    let admin = families(&fv.d()?.metrics()?);
    let missing: Vec<&String> = admin.iter().filter(|f| !port.contains(f)).collect();
    ensure!(missing.is_empty(), "on the admin socket only: {missing:?}");
    fv.stop()?;

    // nftables mode: its own families.
    fv.start_with(
        Backend::Nftables,
        &[
            ("FELIX_PROMETHEUSMETRICSENABLED", "true"),
            ("FELIX_PROMETHEUSMETRICSPORT", "19091"),
        ],
    )?;
    let body = poll(Duration::from_secs(10), || {
        scrape(&fv).ok().filter(|b| b.contains("felix_nft_chains{"))
    })?;
    expect(
        &body,
        &[
            ("felix_nft_chains", "gauge"),
            ("felix_nft_rules", "gauge"),
            ("felix_nftables_lines_executed", "counter"),
            ("felix_nft_calls", "counter"),
            ("felix_nft_list_calls", "counter"),
        ],
        &[
            "felix_nft_chains{ip_version=\"4\",table=\"calico\"}",
            "felix_nft_rules{ip_version=\"6\",table=\"calico\"}",
            "felix_nftables_lines_executed{ip_version=\"4\",table=\"calico\"}",
            "felix_nft_calls ",
        ],
    )?;
    fv.stop()
}

#[test]
fn prometheus_port_serves_upstream_families_and_process_metrics() {
    felix_netns::require!(netns TOOLS);
    if let Err(e) = metrics_port() {
        panic!("{e:#}");
    }
}
