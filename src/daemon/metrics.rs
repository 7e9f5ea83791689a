//! Calc-graph metrics with upstream's names, rendered into `/metrics`
//! through `felix_actors::Metrics::add_collector`.
//!
//! | family | type | source |
//! |---|---|---|
//! | `felix_calc_graph_update_time_seconds` | summary | time of each update in the graph |
//! | `felix_calc_graph_updates_processed{type}` | counter | updates by key kind |
//! | `felix_calc_graph_output_events` | counter | messages flushed |
//! | `felix_resync_state` | gauge | 1 waiting, 2 resyncing, 3 in sync |
//! | `felix_active_local_endpoints` / `_policies` / `_selectors` | gauge | `CalcGraph::stats()` |
//! | `felix_cluster_num_hosts` | gauge | hosts owning a node, endpoint or per-host config ([`ClusterStats`]) |
//! | `felix_cluster_num_workload_endpoints` / `_host_endpoints` | gauge | [`ClusterStats`] |
//! | `felix_cluster_num_policies` / `_profiles` / `_tiers` | gauge | `CalcGraph::stats()` |
//!
//! The calc-graph thread writes; the admin thread reads a snapshot under a
//! short lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::calc::GraphStats;
use crate::model::{Key, SyncStatus, Update};

/// Counts of cluster-wide objects the graph does not count itself, kept as
/// upstream's stats collector does: per host, the nodes, endpoints and
/// per-host config keys it owns.
///
/// Invariant: `present` holds a fingerprint of every counted key that is
/// currently present, so repeated sets and deletes of absent keys do not
/// change any count.
#[derive(Debug, Default)]
pub struct ClusterStats {
    present: HashSet<u64>,
    per_host: HashMap<String, usize>,
    workload_endpoints: usize,
    host_endpoints: usize,
}

fn fingerprint(k: &Key) -> u64 {
    let mut h = DefaultHasher::new();
    k.hash(&mut h);
    h.finish()
}

impl ClusterStats {
    /// Records one datastore update.
    pub fn on_update(&mut self, u: &Update) {
        let (host, counter) = match &u.key {
            Key::WorkloadEndpoint(k) => (k.hostname.as_str(), Some(true)),
            Key::HostEndpoint(k) => (k.hostname.as_str(), Some(false)),
            Key::Node(name) => (name.as_str(), None),
            Key::HostConfig { host, .. } => (host.as_str(), None),
            _ => return,
        };
        let fp = fingerprint(&u.key);
        let delta: isize = if u.value.is_some() {
            if self.present.insert(fp) {
                1
            } else {
                return;
            }
        } else if self.present.remove(&fp) {
            -1
        } else {
            return;
        };
        let apply = |n: &mut usize| *n = n.saturating_add_signed(delta);
        match counter {
            Some(true) => apply(&mut self.workload_endpoints),
            Some(false) => apply(&mut self.host_endpoints),
            None => {}
        }
        let entry = self.per_host.entry(host.to_string()).or_default();
        apply(entry);
        if *entry == 0 {
            self.per_host.remove(host);
        }
    }

    /// Hosts with at least one counted key.
    pub fn num_hosts(&self) -> usize {
        self.per_host.len()
    }

    /// Workload endpoints cluster-wide.
    pub fn num_workload_endpoints(&self) -> usize {
        self.workload_endpoints
    }

    /// Host endpoints cluster-wide.
    pub fn num_host_endpoints(&self) -> usize {
        self.host_endpoints
    }
}

#[derive(Debug, Default, Clone)]
struct Inner {
    update_time_sum: f64,
    update_time_count: u64,
    updates_by_type: BTreeMap<&'static str, u64>,
    output_events: u64,
    resync_state: u8,
    graph: GraphStats,
    hosts: usize,
    weps: usize,
    heps: usize,
}

/// Shared calc-graph metrics. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct CalcMetrics {
    inner: Arc<Mutex<Inner>>,
}

/// Per-batch figures the calc-graph thread accumulates before publishing.
#[derive(Debug, Default)]
pub struct UpdateTally {
    time: Duration,
    count: u64,
    by_type: BTreeMap<&'static str, u64>,
}

impl UpdateTally {
    /// Records one update of kind `kind` that took `took` in the graph.
    pub fn record(&mut self, kind: &'static str, took: Duration) {
        self.time += took;
        self.count += 1;
        *self.by_type.entry(kind).or_default() += 1;
    }
}

impl CalcMetrics {
    /// Empty metrics (resync state "waiting").
    pub fn new() -> Self {
        let m = Self::default();
        m.inner.lock().resync_state = 1;
        m
    }

    /// Adds a tally of processed updates.
    pub fn add_updates(&self, t: UpdateTally) {
        if t.count == 0 {
            return;
        }
        let mut g = self.inner.lock();
        g.update_time_sum += t.time.as_secs_f64();
        g.update_time_count += t.count;
        for (k, n) in t.by_type {
            *g.updates_by_type.entry(k).or_default() += n;
        }
    }

    /// Records the syncer's status.
    pub fn set_resync_state(&self, s: SyncStatus) {
        self.inner.lock().resync_state = match s {
            SyncStatus::WaitForDatastore => 1,
            SyncStatus::ResyncInProgress => 2,
            SyncStatus::InSync => 3,
        };
    }

    /// Publishes the graph's and the cluster counters.
    pub fn set_counts(&self, graph: GraphStats, cluster: &ClusterStats) {
        let mut g = self.inner.lock();
        g.output_events = graph.output_events;
        g.graph = graph;
        g.hosts = cluster.num_hosts();
        g.weps = cluster.num_workload_endpoints();
        g.heps = cluster.num_host_endpoints();
    }

    /// Prometheus text of every family in the module docs.
    pub fn render(&self) -> String {
        let g = self.inner.lock().clone();
        let mut out = String::new();
        let name = "felix_calc_graph_update_time_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Seconds to update the calculation graph for each datastore update.\n\
             # TYPE {name} summary\n{name}_sum {}\n{name}_count {}",
            g.update_time_sum, g.update_time_count
        );
        let name = "felix_calc_graph_updates_processed";
        let _ = writeln!(
            out,
            "# HELP {name} Number of datastore updates processed by the calculation graph.\n\
             # TYPE {name} counter"
        );
        for (t, n) in &g.updates_by_type {
            let _ = writeln!(out, "{name}{{type=\"{t}\"}} {n}");
        }
        let mut one = |name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        let s = &g.graph;
        let n = |x: usize| x as u64;
        one(
            "felix_calc_graph_output_events",
            "counter",
            "Number of events emitted by the calculation graph.",
            g.output_events,
        );
        one(
            "felix_resync_state",
            "gauge",
            "Current datastore state (1 waiting, 2 resyncing, 3 in sync).",
            u64::from(g.resync_state),
        );
        one(
            "felix_active_local_endpoints",
            "gauge",
            "Number of active endpoints on this host.",
            n(s.active_local_endpoints),
        );
        one(
            "felix_active_local_policies",
            "gauge",
            "Number of active policies on this host.",
            n(s.active_local_policies),
        );
        one(
            "felix_active_local_selectors",
            "gauge",
            "Number of active selectors on this host.",
            n(s.active_local_selectors),
        );
        one(
            "felix_cluster_num_hosts",
            "gauge",
            "Total number of calico hosts in the cluster.",
            n(g.hosts),
        );
        one(
            "felix_cluster_num_workload_endpoints",
            "gauge",
            "Total number of workload endpoints cluster-wide.",
            n(g.weps),
        );
        one(
            "felix_cluster_num_host_endpoints",
            "gauge",
            "Total number of host endpoints cluster-wide.",
            n(g.heps),
        );
        one(
            "felix_cluster_num_policies",
            "gauge",
            "Total number of policies cluster-wide.",
            n(s.cluster_policies),
        );
        one(
            "felix_cluster_num_profiles",
            "gauge",
            "Total number of profiles cluster-wide.",
            n(s.cluster_profiles),
        );
        one(
            "felix_cluster_num_tiers",
            "gauge",
            "Total number of tiers cluster-wide.",
            n(s.cluster_tiers),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostEndpointKey, UpdateType, Value, WorkloadEndpointKey};

    fn wep(host: &str, ep: &str) -> Key {
        Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: host.into(),
            orchestrator_id: "k8s".into(),
            workload_id: "ns/pod".into(),
            endpoint_id: ep.into(),
        })
    }

    fn set(k: Key) -> Update {
        Update {
            key: k,
            value: Some(Value::Config("x".into())),
            update_type: UpdateType::Unknown,
        }
    }

    #[test]
    fn cluster_counts_are_exact_under_repeats_and_spurious_deletes() {
        let mut s = ClusterStats::default();
        s.on_update(&set(wep("a", "e1")));
        s.on_update(&set(wep("a", "e1")));
        s.on_update(&set(wep("b", "e1")));
        s.on_update(&set(Key::HostEndpoint(HostEndpointKey {
            hostname: "c".into(),
            endpoint_id: "eth0".into(),
        })));
        assert_eq!(
            (
                s.num_hosts(),
                s.num_workload_endpoints(),
                s.num_host_endpoints()
            ),
            (3, 2, 1)
        );
        s.on_update(&Update::delete(wep("a", "e1")));
        s.on_update(&Update::delete(wep("a", "e1")));
        s.on_update(&Update::delete(wep("z", "e9")));
        assert_eq!((s.num_hosts(), s.num_workload_endpoints()), (2, 1));
        s.on_update(&set(Key::Node("a".into())));
        assert_eq!(s.num_hosts(), 3);
    }

    #[test]
    fn render_has_every_upstream_family() {
        let m = CalcMetrics::new();
        let mut t = UpdateTally::default();
        t.record("WorkloadEndpoint", Duration::from_millis(2));
        m.add_updates(t);
        m.set_resync_state(SyncStatus::InSync);
        let text = m.render();
        for fam in [
            "felix_calc_graph_update_time_seconds_count 1",
            "felix_calc_graph_updates_processed{type=\"WorkloadEndpoint\"} 1",
            "felix_calc_graph_output_events 0",
            "felix_resync_state 3",
            "felix_active_local_endpoints",
            "felix_active_local_policies",
            "felix_active_local_selectors",
            "felix_cluster_num_hosts",
            "felix_cluster_num_workload_endpoints",
            "felix_cluster_num_host_endpoints",
            "felix_cluster_num_policies",
            "felix_cluster_num_profiles",
            "felix_cluster_num_tiers",
        ] {
            assert!(text.contains(fam), "missing {fam} in\n{text}");
        }
    }
}
