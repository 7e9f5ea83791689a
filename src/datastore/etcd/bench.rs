//! The etcd syncer benchmark: initial sync throughput, memory, and recovery
//! after an etcd restart.  Run by `cargo test --release -p felix --test
//! etcd_bench -- --ignored --nocapture`, or call [`run`] from a CLI.
//!
//! Figures reported ([`EtcdBenchReport`]):
//! * `keys_per_sec`: stored keys delivered into the syncer channel per
//!   second, from [`EtcdSyncer::start`] to `InSync` (etcd reads, JSON and
//!   base64 decoding, validation, conversion and batching included);
//! * RSS of the process before and after the sync, and its high-water
//!   mark;
//! * `graph_keys_per_sec`: the same initial sync with a second syncer whose
//!   events go into a [`CalcGraph`] for `node0` (200 of the endpoints are
//!   local), as the daemon's calc loop does while loading (updates in,
//!   `InSync`, one flush): stored keys per second from the syncer's start
//!   to the end of that flush, etcd to dataplane messages;
//! * `recovery`: after etcd is killed, changed behind the syncer's back and
//!   started again, the time from etcd answering until the syncer has
//!   delivered the change;
//! * CPU time per key during the first sync, of the etcd process and of
//!   this process (all its threads: transport, decoding, merging and the
//!   bench's own receiving), from `/proc/<pid>/stat`: on two cores the sum
//!   bounds the throughput even when wall time is noisy.
//!
//! The listing page size and prefetching are the syncer's defaults unless
//! [`BenchOptions`] says otherwise.

use std::sync::mpsc;
use std::time::Duration;

use super::client::EtcdClient;
use super::config::EtcdConfig;
use super::keys;
use super::syncer::{EtcdSyncer, EtcdSyncerConfig};
use super::testing::EtcdTestServer;
use crate::calc::CalcGraph;
use crate::model::{Key, SyncStatus, SyncerEvent};
use crate::resources::Kind;

/// etcd's default limit on operations per transaction.
const TXN_OPS: usize = 128;

/// Figures from [`run`].
#[derive(Clone, Debug)]
pub struct EtcdBenchReport {
    /// Keys stored in etcd.
    pub keys: usize,
    /// Updates delivered by the initial sync.
    pub updates: usize,
    /// Time to load the keys into etcd.
    pub load_time: Duration,
    /// Time from the syncer's start to `InSync`.
    pub sync_time: Duration,
    /// Stored keys delivered per second of the initial sync.
    pub keys_per_sec: f64,
    /// Process RSS before the sync, KiB.
    pub rss_before_kib: u64,
    /// Process RSS after the sync, KiB.
    pub rss_after_kib: u64,
    /// Process RSS high-water mark, KiB.
    pub rss_peak_kib: u64,
    /// Time from etcd answering after a restart until the syncer delivered the change made meanwhile.
    pub recovery: Duration,
    /// Initial sync into the calculation graph (through its first flush).
    pub graph_time: Duration,
    /// Stored keys per second of the sync into the calculation graph.
    pub graph_keys_per_sec: f64,
    /// Messages of the graph's first flush.
    pub graph_messages: usize,
    /// Process RSS after the sync into the graph, KiB.
    pub graph_rss_after_kib: u64,
    /// CPU time of the etcd process during the first sync.
    pub etcd_cpu: Duration,
    /// CPU time of this process during the first sync.
    pub felix_cpu: Duration,
    /// The same, per thread name (the syncer's fetch, merge and gRPC threads; the
    /// benchmark's own thread counts the keys).
    pub felix_threads_cpu: std::collections::BTreeMap<String, Duration>,
    /// The decoding stage alone, CPU time per stored value (one thread, no etcd).
    pub decode_per_key: Duration,
    /// Minor page faults of this process during the first sync: first touches of memory,
    /// each a zeroed 4 KiB page from the kernel.
    pub felix_faults: u64,
    /// Keys per listing page.
    pub page_size: i64,
    /// Whether the next page was read while the current one decoded.
    pub prefetch: bool,
}

/// Settings of [`run_with`].
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Workload endpoints to store.
    pub workloads: usize,
    /// Policies to store.
    pub policies: usize,
    /// Keys per listing page (the syncer's default when `None`).
    pub page_size: Option<i64>,
    /// Read the next page while decoding the current one (the default).
    pub prefetch: bool,
}

impl std::fmt::Display for EtcdBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "etcd keys stored:        {}", self.keys)?;
        writeln!(f, "load into etcd:          {:.2?}", self.load_time)?;
        writeln!(
            f,
            "initial sync:            {:.2?} ({} updates)",
            self.sync_time, self.updates
        )?;
        writeln!(
            f,
            "throughput:              {:.0} keys/s",
            self.keys_per_sec
        )?;
        writeln!(
            f,
            "RSS before/after/peak:   {} / {} / {} MiB",
            self.rss_before_kib / 1024,
            self.rss_after_kib / 1024,
            self.rss_peak_kib / 1024
        )?;
        writeln!(f, "recovery after restart:  {:.2?}", self.recovery)?;
        let per_key = |d: Duration| d.as_secs_f64() * 1e6 / self.keys.max(1) as f64;
        writeln!(
            f,
            "CPU during the sync:     etcd {:.2?} ({:.1} us/key), felix {:.2?} ({:.1} us/key), pages of {}{}",
            self.etcd_cpu,
            per_key(self.etcd_cpu),
            self.felix_cpu,
            per_key(self.felix_cpu),
            self.page_size,
            if self.prefetch { "" } else { ", no prefetch" }
        )?;
        let mut threads: Vec<String> = self
            .felix_threads_cpu
            .iter()
            .map(|(name, cpu)| format!("{name} {:.1} us", per_key(*cpu)))
            .collect();
        // Threads that ended before the sync did (the listing's fetcher) are gone from /proc.
        let seen: Duration = self.felix_threads_cpu.values().sum();
        threads.push(format!(
            "threads ended since (the fetcher) {:.1} us",
            per_key(self.felix_cpu.saturating_sub(seen))
        ));
        writeln!(f, "felix CPU per key by thread: {}", threads.join(", "))?;
        writeln!(
            f,
            "felix page faults:       {} ({:.2} per key, {} MiB first touched)",
            self.felix_faults,
            self.felix_faults as f64 / self.keys.max(1) as f64,
            self.felix_faults * 4 / 1024
        )?;
        writeln!(
            f,
            "stage alone:             decoding {:.1} us/key (one thread, values in memory)",
            self.decode_per_key.as_secs_f64() * 1e6
        )?;
        writeln!(
            f,
            "into the calc graph:     {:.2?} ({:.0} keys/s, {} messages, RSS after {} MiB)",
            self.graph_time,
            self.graph_keys_per_sec,
            self.graph_messages,
            self.graph_rss_after_kib / 1024
        )
    }
}

/// A workload endpoint as calicoctl would store it (index `i`).
pub fn sample_workload_endpoint(i: usize) -> (String, String) {
    let ns = format!("ns{}", i % 100);
    let node = format!("node{}", i % 500);
    let pod = format!("pod-{i}");
    let name = format!("{node}-k8s-{pod}-eth0");
    let key = keys::resource_key(Kind::WorkloadEndpoint, Some(&ns), &name);
    let ip = format!(
        "10.{}.{}.{}/32",
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    );
    let value = serde_json::json!({
        "kind": "WorkloadEndpoint",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {
            "name": name, "namespace": ns,
            "uid": super::apply::new_uuid(),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "app": format!("app{}", i % 50),
                "tier": if i.is_multiple_of(3) { "frontend" } else { "backend" },
                "projectcalico.org/namespace": ns,
                "projectcalico.org/orchestrator": "k8s",
            }
        },
        "spec": {
            "orchestrator": "k8s", "node": node, "pod": pod, "endpoint": "eth0",
            "containerID": format!("c{i:012x}"),
            "ipNetworks": [ip],
            "profiles": [format!("kns.{ns}"), "ksa.default.default"],
            "interfaceName": format!("cali{i:011x}"),
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
        }
    });
    (key, value.to_string())
}

/// A policy as calicoctl would store it (index `i`; namespaced for even
/// `i`, global for odd).
pub fn sample_policy(i: usize) -> (String, String) {
    let name = format!("policy-{i}");
    let rules = serde_json::json!([
        {"action": "Allow", "protocol": "TCP",
         "source": {"selector": format!("app == 'app{}'", i % 50)},
         "destination": {"ports": [80, 443, "8000:8100"]}},
        {"action": "Deny", "source": {"nets": ["192.168.0.0/16"]}}
    ]);
    let annotation = serde_json::json!({ "name": name }).to_string();
    if i.is_multiple_of(2) {
        let ns = format!("ns{}", i % 100);
        let key = keys::resource_key(Kind::NetworkPolicy, Some(&ns), &name);
        let value = serde_json::json!({
            "kind": "NetworkPolicy", "apiVersion": "projectcalico.org/v3",
            "metadata": {"name": name, "namespace": ns, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"projectcalico.org/metadata": annotation}},
            "spec": {"order": i as f64, "selector": format!("app == 'app{}'", i % 50),
                     "types": ["Ingress"], "ingress": rules}
        });
        (key, value.to_string())
    } else {
        let key = keys::resource_key(Kind::GlobalNetworkPolicy, None, &name);
        let value = serde_json::json!({
            "kind": "GlobalNetworkPolicy", "apiVersion": "projectcalico.org/v3",
            "metadata": {"name": name, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"projectcalico.org/metadata": annotation}},
            "spec": {"order": i as f64, "selector": format!("tier == 'backend' && app == 'app{}'", i % 50),
                     "types": ["Ingress", "Egress"], "ingress": rules, "egress": [{"action": "Allow"}]}
        });
        (key, value.to_string())
    }
}

/// Writes `kvs` with multi-put transactions.
pub fn put_all(client: &EtcdClient, kvs: &[(String, String)]) -> Result<(), String> {
    for chunk in kvs.chunks(TXN_OPS) {
        let pairs: Vec<(&[u8], &[u8])> = chunk
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
            .collect();
        client.put_many(&pairs).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Resident set size and its peak, in KiB, from `/proc/self/status`.
pub fn rss_kib() -> (u64, u64) {
    let field = |name: &str| crate::bench::read_status_kib(name).unwrap_or(0);
    (field("VmRSS:"), field("VmHWM:"))
}

/// Loads `workloads` endpoints and `policies` policies into `server`,
/// measures the initial sync, then restarts etcd with one endpoint deleted
/// behind the syncer's back and measures the recovery.
pub fn run(
    server: &mut EtcdTestServer,
    workloads: usize,
    policies: usize,
) -> Result<EtcdBenchReport, String> {
    run_with(
        server,
        BenchOptions {
            workloads,
            policies,
            page_size: None,
            prefetch: true,
        },
    )
}

/// The numeric fields of `/proc/<pid>/stat` after the parenthesised command name (the
/// state, field 3, is index 0); empty when unreadable.
fn stat_fields(pid: &str) -> Vec<u64> {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Vec::new();
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Vec::new();
    };
    rest.split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .collect()
}

/// Minor page faults (first touches of memory) of process `pid` so far, its ended threads
/// included (`/proc/<pid>/stat` field 10); zero when unreadable.
pub fn process_minor_faults(pid: &str) -> u64 {
    stat_fields(pid).get(7).copied().unwrap_or(0)
}

/// CPU time (user + system) of process `pid` ("self" for this one) from
/// `/proc/<pid>/stat`; zero when unreadable.
pub fn process_cpu(pid: &str) -> Duration {
    // utime and stime are fields 14 and 15.
    let fields = stat_fields(pid);
    let (Some(&user), Some(&system)) = (fields.get(11), fields.get(12)) else {
        return Duration::ZERO;
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0).unwrap_or(100);
    Duration::from_secs_f64((user + system) as f64 / hz as f64)
}

/// CPU time (scheduler nanoseconds, `/proc/self/task/*/schedstat`) of this process's threads,
/// summed per thread name.
pub fn threads_cpu() -> std::collections::BTreeMap<String, Duration> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_insert(Duration::ZERO) += Duration::from_nanos(ns);
    }
    out
}

/// The decoding stage alone: the CPU time per stored value of [`super::value::decode`]
/// (JSON, validation and conversion into model entries, as the listing's fetcher does),
/// on this thread, best of three rounds over `kvs`.
fn decode_alone(kvs: &[(String, String)]) -> Result<Duration, String> {
    let parsed: Vec<_> = kvs
        .iter()
        .map(|(k, v)| {
            let id = keys::parse_key(k).ok_or_else(|| format!("{k}: not a key of the layout"))?;
            Ok((k.as_str(), id, v.as_bytes()))
        })
        .collect::<Result<_, String>>()?;
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let start = crate::cputime::thread_cpu_time();
        for (key, id, value) in &parsed {
            super::value::decode(key, id, value)?;
        }
        best = best.min(crate::cputime::thread_cpu_time().saturating_sub(start));
    }
    Ok(best / u32::try_from(parsed.len().max(1)).unwrap_or(u32::MAX))
}

/// [`run`] with explicit settings.
pub fn run_with(
    server: &mut EtcdTestServer,
    options: BenchOptions,
) -> Result<EtcdBenchReport, String> {
    let BenchOptions {
        workloads,
        policies,
        page_size,
        prefetch,
    } = options;
    let client = server.client();
    let t = felix_actors::clock::real_now();
    let mut kvs: Vec<(String, String)> = (0..workloads).map(sample_workload_endpoint).collect();
    kvs.extend((0..policies).map(sample_policy));
    put_all(&client, &kvs)?;
    let load_time = t.elapsed();
    let decode_per_key = decode_alone(&kvs)?;
    let keys = kvs.len();
    let victim = kvs.first().map(|(k, _)| k.clone());
    drop(kvs);

    let (rss_before, _) = rss_kib();
    let (tx, rx) = mpsc::sync_channel(64);
    let mut config = EtcdSyncerConfig::new(
        EtcdConfig::with_endpoints(&server.url()).map_err(|e| e.to_string())?,
    );
    if let Some(p) = page_size {
        config.page_size = p;
    }
    config.prefetch = prefetch;
    let page_size = config.page_size;
    let etcd_pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let etcd_cpu_before = process_cpu(&etcd_pid);
    let felix_cpu_before = process_cpu("self");
    let faults_before = process_minor_faults("self");
    let threads_before = threads_cpu();
    let start = felix_actors::clock::real_now();
    let syncer = EtcdSyncer::start(config, tx).map_err(|e| e.to_string())?;
    // Counting is all this thread does: its CPU time is part of the figure.
    let mut updates = 0usize;
    loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(SyncerEvent::Updates(u)) => updates += u.len(),
            Ok(SyncerEvent::Status(SyncStatus::InSync)) => break,
            Ok(SyncerEvent::Status(_)) => {}
            Err(e) => return Err(format!("no InSync: {e}")),
        }
    }
    let sync_time = start.elapsed();
    let etcd_cpu = process_cpu(&etcd_pid).saturating_sub(etcd_cpu_before);
    let felix_cpu = process_cpu("self").saturating_sub(felix_cpu_before);
    let felix_faults = process_minor_faults("self").saturating_sub(faults_before);
    let felix_threads_cpu = threads_cpu()
        .into_iter()
        .map(|(name, cpu)| {
            let before = threads_before.get(&name).copied().unwrap_or_default();
            (name, cpu.saturating_sub(before))
        })
        .filter(|(_, cpu)| !cpu.is_zero())
        .collect();
    let (rss_after, rss_peak) = rss_kib();

    // Recovery: kill etcd, delete one endpoint while the syncer cannot
    // see it, bring etcd back and time until the deletion arrives.
    let victim = victim.ok_or("no keys loaded")?;
    server
        .offline(|c| c.delete(victim.as_bytes()).map_err(|e| e.to_string()))
        .map_err(|e| e.to_string())??;
    let back = felix_actors::clock::real_now();
    // The victim is the only endpoint deleted.
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(SyncerEvent::Updates(u)) => {
                let gone = |up: &crate::model::Update| {
                    matches!((&up.key, &up.value), (Key::WorkloadEndpoint(_), None))
                };
                if u.iter().any(gone) {
                    break;
                }
            }
            Ok(SyncerEvent::Status(s)) => {
                return Err(format!("unexpected status {s:?} after InSync"))
            }
            Err(e) => return Err(format!("no recovery: {e}")),
        }
    }
    let recovery = back.elapsed();
    syncer.stop();
    drop(rx);

    let (graph_time, graph_messages) = sync_into_graph(server, "node0", page_size, prefetch)?;
    let (graph_rss_after, _) = rss_kib();
    Ok(EtcdBenchReport {
        keys,
        updates,
        load_time,
        sync_time,
        keys_per_sec: keys as f64 / sync_time.as_secs_f64(),
        rss_before_kib: rss_before,
        rss_after_kib: rss_after,
        rss_peak_kib: rss_peak,
        recovery,
        graph_time,
        graph_keys_per_sec: keys as f64 / graph_time.as_secs_f64(),
        graph_messages,
        graph_rss_after_kib: graph_rss_after,
        etcd_cpu,
        felix_cpu,
        felix_threads_cpu,
        decode_per_key,
        felix_faults,
        page_size,
        prefetch,
    })
}

/// Starts a syncer on `server` and feeds a calculation graph for `node`
/// with its events until `InSync` and the first flush (as the daemon's
/// calc loop does while loading); returns the time taken and the number
/// of messages flushed.  Listing pages have `page_size` keys; `prefetch`
/// as [`EtcdSyncerConfig::prefetch`].
pub fn sync_into_graph(
    server: &EtcdTestServer,
    node: &str,
    page_size: i64,
    prefetch: bool,
) -> Result<(Duration, usize), String> {
    let (tx, rx) = mpsc::sync_channel(64);
    let mut config = EtcdSyncerConfig::new(
        EtcdConfig::with_endpoints(&server.url()).map_err(|e| e.to_string())?,
    );
    config.page_size = page_size;
    config.prefetch = prefetch;
    let start = felix_actors::clock::real_now();
    let syncer = EtcdSyncer::start(config, tx).map_err(|e| e.to_string())?;
    let mut graph = CalcGraph::new(node);
    let messages = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(SyncerEvent::Updates(u)) => graph.on_updates(u),
            Ok(SyncerEvent::Status(s)) => {
                graph.on_status(s);
                if s == SyncStatus::InSync {
                    break graph.flush().len();
                }
            }
            Err(e) => return Err(format!("no InSync: {e}")),
        }
    };
    let elapsed = start.elapsed();
    syncer.stop();
    Ok((elapsed, messages))
}
