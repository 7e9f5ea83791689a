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
//! Summaries carry `_sum` and `_count` (no quantiles: the seam keeps totals, not samples).

use std::fmt::Write as _;
use std::sync::Arc;

use felix_actors::{Collector, Metrics};

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
    out
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
