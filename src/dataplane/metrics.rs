//! Dataplane metric families with upstream Felix's names, derived from the kernel seam's
//! per-operation records (every routing operation is one seam operation, so nothing else
//! needs instrumenting) and rendered into `/metrics` through
//! `felix_actors::Metrics::add_collector`.
//!
//! | family | type | seam operations of `driver/routes-*` |
//! |---|---|---|
//! | `felix_route_table_list_seconds` | summary | `link-list`, `addr-list` (listing the interfaces during a resync) |
//! | `felix_route_table_list_all_routes_seconds` | summary | `route-list` |
//! | `felix_route_table_per_iface_sync_seconds` | summary | `route-replace`, `route-del` (the writes of a sync) |
//! | `felix_route_table_sync_errors_total` | counter | failed operations of any of the above |
//!
//! | family | type | seam operations |
//! |---|---|---|
//! | `felix_iptables_restore_calls` / `_errors` | counter | `iptables-restore` of `driver/iptables-*` |
//! | `felix_iptables_save_calls` / `_errors` | counter | `iptables-save` of `driver/iptables-*` |
//! | `felix_ipset_calls` / `_errors` | counter | every operation of `driver/ipsets-*` (`ipset-restore`, `ipset-list`, ...) |
//!
//! | `felix_nft_calls` / `_errors` | counter | `nft-apply` of `driver/nftables-*` |
//! | `felix_nft_list_calls` / `_errors` | counter | `nft-list-table` of `driver/nftables-*` |
//!
//! Summaries carry `_sum` and `_count` (no quantiles: the seam keeps totals, not samples).
//!
//! Families the drivers feed themselves ([`report_table`], [`report_ipsets`]), labelled as
//! upstream's:
//!
//! | family | type | labels | what |
//! |---|---|---|---|
//! | `felix_iptables_chains` / `felix_nft_chains` | gauge | `ip_version`, `table` | chains of the desired state |
//! | `felix_iptables_rules` / `felix_nft_rules` | gauge | `ip_version`, `table` | rules of the desired state (inserted ones included) |
//! | `felix_iptables_lines_executed` / `felix_nftables_lines_executed` | counter | `ip_version`, `table` | rule and chain updates written |
//! | `felix_ipsets_calico` | gauge | `ip_version` | our desired IP sets |
//! | `felix_ipsets_total` | gauge | `ip_version` | every IP set the last listing saw |
//! | `felix_ipset_lines_executed` | counter | — | lines fed to `ipset restore` |

use std::fmt::Write as _;
use std::sync::Arc;

use felix_actors::{Collector, Metrics};

use crate::dataplane::desired::TableDesired;
use crate::dataplane::generictables::ApplyStats;
use crate::dataplane::IpVersion;

const ROUTES: &str = "driver/routes-";

/// The collector rendering the families above (routing, iptables, ipset) from `metrics`' seam
/// records.
pub fn dataplane_collector(metrics: Metrics) -> Collector {
    Arc::new(move || {
        let mut out = render(&metrics);
        out.push_str(&render_tables(&metrics));
        out
    })
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

/// The iptables and ipset families (upstream's, unlabelled counters).
fn render_tables(m: &Metrics) -> String {
    let mut out = String::new();
    let restore = m.seam_totals("driver/iptables-", &["iptables-restore"]);
    let save = m.seam_totals("driver/iptables-", &["iptables-save"]);
    counter(
        &mut out,
        "felix_iptables_restore_calls",
        "Number of iptables-restore calls.",
        restore.0,
    );
    counter(
        &mut out,
        "felix_iptables_restore_errors",
        "Number of iptables-restore errors.",
        restore.1,
    );
    counter(
        &mut out,
        "felix_iptables_save_calls",
        "Number of iptables-save calls.",
        save.0,
    );
    counter(
        &mut out,
        "felix_iptables_save_errors",
        "Number of iptables-save errors.",
        save.1,
    );
    let ipset = m.seam_totals(
        "driver/ipsets-",
        &[
            "ipset-restore",
            "ipset-list",
            "ipset-list-names",
            "ipset-destroy",
            "ipset",
        ],
    );
    counter(
        &mut out,
        "felix_ipset_calls",
        "Number of ipset commands executed.",
        ipset.0,
    );
    counter(
        &mut out,
        "felix_ipset_errors",
        "Number of ipset command failures.",
        ipset.1,
    );
    let nft = m.seam_totals("driver/nftables-", &["nft-apply"]);
    let list = m.seam_totals("driver/nftables-", &["nft-list-table"]);
    counter(&mut out, "felix_nft_calls", "Number of nft calls.", nft.0);
    counter(&mut out, "felix_nft_errors", "Number of nft errors.", nft.1);
    counter(
        &mut out,
        "felix_nft_list_calls",
        "Number of nft list calls.",
        list.0,
    );
    counter(
        &mut out,
        "felix_nft_list_errors",
        "Number of nft list errors.",
        list.1,
    );
    out
}

/// Which table families a driver feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFamily {
    /// `felix_iptables_*`.
    Iptables,
    /// `felix_nft_*` and `felix_nftables_lines_executed`.
    Nftables,
}

/// The `ip_version` label value.
fn ipv_label(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "4",
        IpVersion::V6 => "6",
    }
}

/// Reports one table: its desired `chains` and `rules`, and the updates one apply wrote.
pub fn report_table(
    m: &Metrics,
    family: TableFamily,
    ipv: IpVersion,
    table: &str,
    (chains, rules): (usize, usize),
    written: Option<&ApplyStats>,
) {
    let labels = format!("ip_version=\"{}\",table=\"{table}\"", ipv_label(ipv));
    let (c, r, l) = match family {
        TableFamily::Iptables => (
            ("felix_iptables_chains", "Number of active iptables chains."),
            ("felix_iptables_rules", "Number of active iptables rules."),
            (
                "felix_iptables_lines_executed",
                "Number of iptables rule updates executed.",
            ),
        ),
        TableFamily::Nftables => (
            ("felix_nft_chains", "Number of active nft chains."),
            ("felix_nft_rules", "Number of active nftables rules."),
            (
                "felix_nftables_lines_executed",
                "Number of nftables rule updates executed.",
            ),
        ),
    };
    m.set_gauge(c.0, c.1, &labels, chains as f64);
    m.set_gauge(r.0, r.1, &labels, rules as f64);
    let lines = written.map_or(0, |s| {
        s.rules_written + s.rules_deleted + s.chains_created + s.chains_deleted
    });
    m.add_counter(l.0, l.1, &labels, lines as f64);
}

/// Chains and rules of a desired table (inserted rules count as rules).
pub fn table_size(d: &TableDesired) -> (usize, usize) {
    let rules = d
        .chains
        .iter()
        .map(|(_, c)| c.value.rules.len())
        .sum::<usize>()
        + d.inserts.iter().map(|(_, r)| r.value.len()).sum::<usize>();
    (d.chains.len(), rules)
}

/// Reports the IP-set families of one IP version: our desired sets, and (when a listing was
/// made) every set the kernel holds.
pub fn report_ipsets(m: &Metrics, ipv: IpVersion, ours: usize, total: Option<usize>) {
    let labels = format!("ip_version=\"{}\"", ipv_label(ipv));
    m.set_gauge(
        "felix_ipsets_calico",
        "Number of active Calico IP sets.",
        &labels,
        ours as f64,
    );
    if let Some(t) = total {
        m.set_gauge(
            "felix_ipsets_total",
            "Total number of active IP sets.",
            &labels,
            t as f64,
        );
    }
}

/// Counts the lines of one `ipset restore` input.
pub fn report_ipset_lines(m: &Metrics, lines: usize) {
    m.add_counter(
        "felix_ipset_lines_executed",
        "Number of ipset operations executed.",
        "",
        lines as f64,
    );
}

fn summary(out: &mut String, name: &str, help: &str, (count, _, secs): (u64, u64, f64)) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
    let _ = writeln!(out, "{name}_sum {secs}\n{name}_count {count}");
}

fn render(m: &Metrics) -> String {
    let mut out = String::new();
    let list = m.seam_totals(ROUTES, &["link-list", "addr-list"]);
    let all = m.seam_totals(ROUTES, &["route-list"]);
    let sync = m.seam_totals(ROUTES, &["route-replace", "route-del"]);
    summary(
        &mut out,
        "felix_route_table_list_seconds",
        "Time taken to list all the interfaces during a resync.",
        list,
    );
    summary(
        &mut out,
        "felix_route_table_list_all_routes_seconds",
        "Time taken to list all the routes during a resync.",
        all,
    );
    summary(
        &mut out,
        "felix_route_table_per_iface_sync_seconds",
        "Time taken to sync the routes of the route table.",
        sync,
    );
    let errors = list.1 + all.1 + sync.1;
    let _ = writeln!(
        out,
        "# HELP felix_route_table_sync_errors_total Route table operations that failed.\n\
         # TYPE felix_route_table_sync_errors_total counter\n\
         felix_route_table_sync_errors_total {errors}"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn iptables_and_ipset_families_count_their_drivers_commands_and_failures() {
        let m = Metrics::new();
        let ms = Duration::from_millis(1);
        m.record_seam_op("driver/iptables-filter-v4", "iptables-restore", ms, true);
        m.record_seam_op("driver/iptables-nat-v6", "iptables-restore", ms, false);
        m.record_seam_op("driver/iptables-raw-v4", "iptables-save", ms, true);
        m.record_seam_op("driver/ipsets-v4", "ipset-restore", ms, true);
        m.record_seam_op("driver/ipsets-v6", "ipset-list", ms, false);
        // Another driver's commands of the same name do not count.
        m.record_seam_op("driver/cleanup-v4", "iptables-save", ms, true);
        let text = render_tables(&m);
        for line in [
            "felix_iptables_restore_calls 2",
            "felix_iptables_restore_errors 1",
            "felix_iptables_save_calls 1",
            "felix_iptables_save_errors 0",
            "felix_ipset_calls 2",
            "felix_ipset_errors 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.contains("# TYPE felix_ipset_calls counter"));
    }

    #[test]
    fn route_table_families_follow_the_routes_drivers_seam_operations_only() {
        let m = Metrics::new();
        m.record_seam_op(
            "driver/routes-v4",
            "route-list",
            Duration::from_millis(20),
            true,
        );
        m.record_seam_op(
            "driver/routes-v6",
            "route-list",
            Duration::from_millis(10),
            true,
        );
        m.record_seam_op(
            "driver/routes-v4",
            "route-replace",
            Duration::from_millis(5),
            false,
        );
        m.record_seam_op(
            "driver/vxlan-v4",
            "route-list",
            Duration::from_millis(99),
            true,
        );
        let text = dataplane_collector(m)();
        assert!(
            text.contains("felix_route_table_list_all_routes_seconds_count 2"),
            "{text}"
        );
        assert!(
            text.contains("felix_route_table_per_iface_sync_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("felix_route_table_sync_errors_total 1"),
            "{text}"
        );
        assert!(
            text.contains("felix_route_table_list_seconds_count 0"),
            "{text}"
        );
    }
}
