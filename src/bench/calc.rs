//! Calculation-graph workloads, input for input as upstream's
//! `calc_graph_bench_test.go`:
//!
//! * `a`: 250,000 remote + 200 local endpoints, 10,000 "tag" policies
//!   (5 rules each), 100 namespace profiles; `a-delete` then deletes the
//!   200 local endpoints.
//! * `b1k` / `b10k`: 10,000 endpoints (200 local) with 1,000 / 10,000
//!   network sets, each with a policy selecting it.
//! * `c1k` / `c10k` / `c100k`: the isolated-customers workload (one
//!   namespace, one pod and one isolation policy per customer, 100 local
//!   pods).
//! * `d`: churn: after `a` is in sync, 20,000 random endpoint label changes,
//!   flushed every 100 updates.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};

use crate::calc::CalcGraph;
use crate::model::{
    Action, Key, NetworkSet, NetworkSetKey, Policy, PolicyKey, Port, Profile, Protocol, Rule,
    SyncStatus, Update, Value, WorkloadEndpoint, WorkloadEndpointKey,
};

const NUM_NAMESPACES: usize = 100;
const MARKERS: [&str; 31] = [
    "FOO_BAR",
    "FOO_BAR",
    "BIFF_BOP",
    "calico/FizzBuzz",
    "calico/BoffBip",
    "calico/Bazzle",
    "calico/Razzle",
    "calico/DoopDeeDoo",
    "calico/SOME_LABEL",
    "calico/BORED_NOW",
    "MyMarkerLabel",
    "xFOO_BAR",
    "xBIFF_BOP",
    "xcalico/FizzBuzz",
    "xcalico/BoffBip",
    "xcalico/Bazzle",
    "xcalico/Razzle",
    "xcalico/DoopDeeDoo",
    "xcalico/SOME_LABEL",
    "xcalico/BORED_NOW",
    "yxMyMarkerLabel",
    "yxFOO_BAR",
    "yxBIFF_BOP",
    "yxcalico/FizzBuzz",
    "yxcalico/BoffBip",
    "yxcalico/Bazzle",
    "yxcalico/Razzle",
    "yxcalico/DoopDeeDoo",
    "yxcalico/SOME_LABEL",
    "yxcalico/BORED_NOW",
    "yxMyMarkerLabel",
];
const NS_LABEL: &str = "pcns.projectcalico.org/name";

/// The workloads, by name.
pub const WORKLOADS: [&str; 8] = ["a", "a-delete", "b1k", "b10k", "c1k", "c10k", "c100k", "d"];

/// Figures of one run.
#[derive(Debug, Clone)]
pub struct CalcReport {
    /// Name of the workload run (see [`WORKLOADS`]).
    pub workload: String,
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// CPU time of the benchmark thread over the same span (what one core
    /// did, even on a busy machine).
    pub cpu: Duration,
    /// Peak resident set size, MiB.
    pub peak_rss_mib: f64,
    /// Messages the graph emitted.
    pub messages: usize,
    /// `IPSetUpdate` messages emitted.
    pub ip_sets: usize,
    /// `ActivePolicyUpdate` messages emitted.
    pub policies: usize,
    /// For the churn workload: updates per second during the churn phase,
    /// per wall-clock second and per CPU-second of the benchmark thread.
    pub churn_updates_per_sec: Option<(f64, f64)>,
}

impl fmt::Display for CalcReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "calc {:<9} wall {:>8.3} s  cpu {:>8.3} s  peak RSS {:>7.1} MiB  messages {:>7}  IP sets {:>6}  policies {:>6}",
            self.workload,
            self.wall.as_secs_f64(),
            self.cpu.as_secs_f64(),
            self.peak_rss_mib,
            self.messages,
            self.ip_sets,
            self.policies
        )?;
        if let Some((wall, cpu)) = self.churn_updates_per_sec {
            write!(
                f,
                "  churn {wall:>10.0} updates/s ({cpu:.0} per CPU-second)"
            )?;
        }
        Ok(())
    }
}

/// Deterministic generator state (upstream's globals, made explicit).
struct Gen {
    next_ip: u32,
    label_seed: usize,
    next_netset_ip: u32,
    next_netset_size: usize,
    rng: u64,
}

impl Gen {
    fn new() -> Gen {
        Gen {
            next_ip: 0x0a00_0001,
            label_seed: 0,
            next_netset_ip: 0x0a00_0001,
            next_netset_size: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next_ip(&mut self) -> IpNet {
        let ip = Ipv4Addr::from(self.next_ip);
        self.next_ip = self.next_ip.wrapping_add(1);
        IpNet::V4(Ipv4Net::new(ip, 32).unwrap_or_default())
    }

    fn labels(&mut self) -> crate::model::Labels {
        self.label_seed += 1;
        let mut l = crate::model::Labels::new();
        for n in [10usize, 11, 20, 30, 40] {
            l.insert(
                format!("one-in-{n}"),
                format!("value-{}", self.label_seed % n),
            );
        }
        l.insert(
            MARKERS[self.label_seed % MARKERS.len()].to_string(),
            "true".to_string(),
        );
        l
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn wep_key(host: &str, workload: String) -> WorkloadEndpointKey {
    WorkloadEndpointKey {
        hostname: host.to_string(),
        orchestrator_id: "k8s".to_string(),
        workload_id: workload,
        endpoint_id: "eth0".to_string(),
    }
}

/// One endpoint update per call, in upstream's order (lazily: the caller
/// decides how much of the input is resident at once).
fn endpoint_updates<'a>(
    g: &'a mut Gen,
    num: usize,
    host: &'a str,
) -> impl Iterator<Item = Update> + 'a {
    (0..num).map(move |n| {
        let ip = g.next_ip();
        let ep = WorkloadEndpoint {
            labels: g.labels(),
            ipv4_nets: vec![ip],
            profile_ids: vec![format!("kns.namespace-{}", n % NUM_NAMESPACES)],
            ..Default::default()
        };
        Update::set(
            Key::WorkloadEndpoint(wep_key(host, format!("wep-{n}"))),
            Value::WorkloadEndpoint(Arc::new(ep)),
        )
    })
}

fn tag_policies(num: usize) -> impl Iterator<Item = Update> {
    (0..num).map(|i| {
        let rules = (0..5)
            .map(|j| Rule {
                action: Action::Allow,
                src_selector: format!("has({})", MARKERS[(i + j) % MARKERS.len()]),
                ..Default::default()
            })
            .collect();
        let p = Policy {
            tier: "default".to_string(),
            selector: format!("has({})", MARKERS[i % MARKERS.len()]),
            inbound_rules: rules,
            ..Default::default()
        };
        Update::set(
            Key::Policy(PolicyKey {
                name: format!("tag-pol-{i}"),
                namespace: String::new(),
                kind: String::new(),
            }),
            Value::Policy(Arc::new(p)),
        )
    })
}

fn namespace_profiles(num: usize) -> impl Iterator<Item = Update> {
    (0..num).map(|i| {
        let name = format!("namespace-{i}");
        let mut labels = BTreeMap::new();
        labels.insert(NS_LABEL.to_string(), name.clone());
        Update::set(
            Key::Profile(format!("kns.{name}")),
            Value::Profile(Arc::new(Profile {
                labels: labels.into(),
                ..Default::default()
            })),
        )
    })
}

const NETSET_SIZES: [usize; 10] = [1, 1, 1, 1, 2, 3, 4, 5, 100, 1000];

/// A network set and the policy selecting it, per set, lazily.
fn netset_updates(g: &mut Gen, num: usize) -> impl Iterator<Item = Update> + '_ {
    (0..num).flat_map(move |i| {
        let name = format!("network-set-{i}");
        let size = NETSET_SIZES[g.next_netset_size % NETSET_SIZES.len()];
        g.next_netset_size += 1;
        let nets = (0..size)
            .map(|_| {
                let ip = Ipv4Addr::from(g.next_netset_ip);
                g.next_netset_ip = g.next_netset_ip.wrapping_add(1);
                IpNet::V4(Ipv4Net::new(ip, 32).unwrap_or_default())
            })
            .collect();
        let mut labels = BTreeMap::new();
        labels.insert("network-set-name".to_string(), name.clone());
        let set = Update::set(
            Key::NetworkSet(NetworkSetKey { name: name.clone() }),
            Value::NetworkSet(Arc::new(NetworkSet {
                nets,
                labels: labels.into(),
                profile_ids: Vec::new(),
            })),
        );
        let pol = Update::set(
            Key::Policy(PolicyKey {
                name: format!("network-set-pol-{i}"),
                namespace: String::new(),
                kind: String::new(),
            }),
            Value::Policy(Arc::new(Policy {
                tier: "default".to_string(),
                selector: "all()".to_string(),
                inbound_rules: vec![Rule {
                    action: Action::Allow,
                    src_selector: format!("network-set-name == '{name}'"),
                    ..Default::default()
                }],
                ..Default::default()
            })),
        );
        [set, pol]
    })
}

fn deterministic_string(n: usize, len: usize) -> String {
    const CHARS: &[u8] = b"abcdef0123456789";
    let mut v = (n as u64).wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        s.push(CHARS[(v % CHARS.len() as u64) as usize] as char);
        v = v
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
    s
}

fn customer_pod_labels(i: usize) -> crate::model::Labels {
    const ENVS: [&str; 3] = ["dev", "staging", "prod"];
    const TIERS: [&str; 4] = ["frontend", "backend", "middleware", "data"];
    const REGIONS: [&str; 4] = ["us-east", "us-west", "eu-west", "ap-south"];
    const TEAMS: [&str; 5] = ["platform", "payments", "identity", "growth", "infra"];
    let pairs = [
        ("pod-id", deterministic_string(i * 5, 20)),
        ("instance-id", deterministic_string(i * 5 + 1, 20)),
        ("short-id", deterministic_string(i * 5 + 2, 10)),
        ("config-hash", deterministic_string(i * 5 + 3, 20)),
        ("version-tag", deterministic_string(i * 5 + 4, 8)),
        ("enabled", (i % 2).to_string()),
        ("debug", ((i / 2) % 2).to_string()),
        ("canary", ((i / 4) % 2).to_string()),
        ("managed", ((i / 8) % 2).to_string()),
        ("environment", ENVS[i % ENVS.len()].to_string()),
        ("tier", TIERS[i % TIERS.len()].to_string()),
        ("region", REGIONS[i % REGIONS.len()].to_string()),
        ("team", TEAMS[i % TEAMS.len()].to_string()),
        ("managed-by", "saas-controller".to_string()),
        ("tenant-id", deterministic_string(i % 5000, 10)),
    ];
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The isolated-customers workload: every update is a function of the
/// customer number, so each input can be generated when it is sent.
struct Customers {
    n: usize,
    num_local: usize,
    stride: usize,
    /// The address of customer 0's pod (customer `c` has `first_ip + c`).
    first_ip: u32,
}

impl Customers {
    fn new(g: &mut Gen, n: usize, num_local: usize) -> Customers {
        let num_local = num_local.min(n);
        let first_ip = g.next_ip;
        g.next_ip = g.next_ip.wrapping_add(n as u32);
        Customers {
            n,
            num_local,
            stride: n.checked_div(num_local).unwrap_or(1).max(1),
            first_ip,
        }
    }

    /// Every `stride`-th customer's pod, up to `num_local` of them, runs on
    /// this node.
    fn is_local(&self, c: usize) -> bool {
        c.is_multiple_of(self.stride) && c / self.stride < self.num_local
    }

    fn policy(c: usize) -> Update {
        let dns: IpNet =
            IpNet::V4(Ipv4Net::new(Ipv4Addr::new(10, 96, 0, 10), 32).unwrap_or_default());
        let ns = format!("customer-{c}");
        let sel = format!("{NS_LABEL} == '{ns}'");
        Update::set(
            Key::Policy(PolicyKey {
                name: format!("customer-{c}/isolation"),
                namespace: ns.clone(),
                kind: String::new(),
            }),
            Value::Policy(Arc::new(Policy {
                namespace: ns,
                tier: "default".to_string(),
                selector: sel.clone(),
                types: vec!["ingress".to_string(), "egress".to_string()],
                inbound_rules: vec![Rule {
                    action: Action::Allow,
                    src_selector: sel.clone(),
                    ..Default::default()
                }],
                outbound_rules: vec![
                    Rule {
                        action: Action::Allow,
                        dst_selector: sel,
                        ..Default::default()
                    },
                    Rule {
                        action: Action::Allow,
                        protocol: Some(Protocol::Name("udp".to_string())),
                        dst_nets: vec![dns],
                        dst_ports: vec![Port::Number(53)],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            })),
        )
    }

    fn profile(c: usize) -> Update {
        let ns = format!("customer-{c}");
        let mut labels = BTreeMap::new();
        labels.insert(NS_LABEL.to_string(), ns.clone());
        labels.insert("namespace-id".to_string(), deterministic_string(c, 20));
        labels.insert("production".to_string(), c.is_multiple_of(2).to_string());
        Update::set(
            Key::Profile(format!("kns.{ns}")),
            Value::Profile(Arc::new(Profile {
                labels: labels.into(),
                ..Default::default()
            })),
        )
    }

    fn pod(&self, c: usize) -> Update {
        let ns = format!("customer-{c}");
        let pod = format!("app-{:09x}-{:05x}", (c * 7 + 3) as u32, (c * 17 + 5) as u16);
        let ip = Ipv4Addr::from(self.first_ip.wrapping_add(c as u32));
        let host = if self.is_local(c) {
            "localhost"
        } else {
            "remotehost"
        };
        Update::set(
            Key::WorkloadEndpoint(wep_key(host, format!("{ns}/{pod}"))),
            Value::WorkloadEndpoint(Arc::new(WorkloadEndpoint {
                labels: customer_pod_labels(c),
                ipv4_nets: vec![IpNet::V4(Ipv4Net::new(ip, 32).unwrap_or_default())],
                profile_ids: vec![format!("kns.{ns}")],
                ..Default::default()
            })),
        )
    }

    /// Pods on other nodes, in customer order (sent before the local ones).
    fn remote(&self) -> impl Iterator<Item = Update> + '_ {
        (0..self.n)
            .filter(|c| !self.is_local(*c))
            .map(|c| self.pod(c))
    }

    /// This node's pods, in customer order.
    fn local(&self) -> impl Iterator<Item = Update> + '_ {
        (0..self.n)
            .filter(|c| self.is_local(*c))
            .map(|c| self.pod(c))
    }
}

struct Counts {
    messages: usize,
    ip_sets: usize,
    policies: usize,
}

impl Counts {
    /// Counts one message (upstream's benchmark counts in its callback and
    /// keeps nothing).
    fn count(&mut self, p: &felix_proto::to_dataplane::Payload) {
        use felix_proto::to_dataplane::Payload;
        self.messages += 1;
        match p {
            Payload::IpsetUpdate(_) => self.ip_sets += 1,
            Payload::ActivePolicyUpdate(_) => self.policies += 1,
            _ => {}
        }
    }
}

/// Flushes `graph`, counting the messages as they are emitted.
fn flush_counting(graph: &mut CalcGraph, c: &mut Counts) {
    graph.flush_with(|p| c.count(&p));
}

/// Updates generated per chunk: the input resident at any time.
const CHUNK: usize = 1_000;

/// The graph under test plus the clocks that only run while it works.
struct Timed {
    graph: CalcGraph,
    wall: Duration,
    cpu: Duration,
    counts: Counts,
}

impl Timed {
    fn new() -> Timed {
        Timed {
            graph: CalcGraph::new("localhost"),
            wall: Duration::ZERO,
            cpu: Duration::ZERO,
            counts: Counts {
                messages: 0,
                ip_sets: 0,
                policies: 0,
            },
        }
    }

    /// Runs `f` on the graph with the clocks running.  Never inlined, so
    /// an instruction-counting profiler can select exactly the timed work
    /// (`valgrind --tool=callgrind --toggle-collect='*Timed::time*'`).
    #[inline(never)]
    fn time(&mut self, f: impl FnOnce(&mut CalcGraph, &mut Counts)) {
        let t = felix_actors::clock::real_now();
        let c = crate::cputime::thread_cpu_time();
        f(&mut self.graph, &mut self.counts);
        self.cpu += crate::cputime::thread_cpu_time().saturating_sub(c);
        self.wall += t.elapsed();
    }

    /// Sends `updates` in order, generating them `CHUNK` at a time with the
    /// clocks stopped.
    fn send(&mut self, updates: impl Iterator<Item = Update>) {
        let mut updates = updates.peekable();
        while updates.peek().is_some() {
            let chunk: Vec<Update> = updates.by_ref().take(CHUNK).collect();
            self.time(|g, _| g.on_updates(chunk));
        }
        self.trace("sent");
    }

    /// With `FELIX_BENCH_TRACE_RSS` set, prints the resident set after each
    /// phase to stderr (to attribute memory to a kind of input).
    fn trace(&self, what: &str) {
        if std::env::var_os("FELIX_BENCH_TRACE_RSS").is_some() {
            eprintln!(
                "{what}: {} updates in, graph CPU so far {:.3} s, RSS {:.1} MiB",
                self.graph.stats().updates_processed,
                self.cpu.as_secs_f64(),
                super::rss_mib()
            );
        }
    }

    fn in_sync_and_flush(&mut self) {
        self.time(|g, c| {
            g.on_status(SyncStatus::InSync);
            flush_counting(g, c);
        });
        self.trace("in sync + flushed");
    }

    fn flush(&mut self) {
        self.time(flush_counting);
    }
}

/// Runs one workload and reports its figures.  The input is generated
/// lazily, `CHUNK` updates at a time, in exactly the order (and with exactly
/// the content) upstream's benchmark sends it; generation is not timed,
/// everything the graph does from the first update to the last flush is.
pub fn run(workload: &str) -> anyhow::Result<CalcReport> {
    let mut g = Gen::new();
    let mut t = Timed::new();
    let mut churn = None;
    match workload {
        "a" | "a-delete" | "d" => {
            t.send(tag_policies(10_000));
            t.send(namespace_profiles(NUM_NAMESPACES));
            t.send(endpoint_updates(&mut g, 250_000, "remotehost"));
            t.send(endpoint_updates(&mut g, 200, "localhost"));
            t.in_sync_and_flush();
            if workload == "a-delete" {
                t.send((0..200).map(|n| {
                    Update::delete(Key::WorkloadEndpoint(wep_key(
                        "localhost",
                        format!("wep-{n}"),
                    )))
                }));
                t.flush();
            }
            if workload == "d" {
                let n = 20_000;
                let (wall0, cpu0) = (t.wall, t.cpu);
                for _ in 0..n / 100 {
                    let chunk: Vec<Update> = (0..100).map(|_| churn_update(&mut g)).collect();
                    t.time(|graph, c| {
                        graph.on_updates(chunk);
                        flush_counting(graph, c);
                    });
                }
                let (wall, cpu) = (t.wall - wall0, t.cpu - cpu0);
                churn = Some((
                    n as f64 / wall.as_secs_f64().max(1e-9),
                    n as f64 / cpu.as_secs_f64().max(1e-9),
                ));
            }
        }
        "b1k" | "b10k" => {
            let num = if workload == "b1k" { 1_000 } else { 10_000 };
            // Upstream generates remote, local, then the network sets; the
            // sets draw on their own counters, so sending order is safe.
            t.send(namespace_profiles(NUM_NAMESPACES));
            t.send(endpoint_updates(&mut g, 10_000, "remotehost"));
            let local: Vec<Update> = endpoint_updates(&mut g, 200, "localhost").collect();
            t.send(netset_updates(&mut g, num));
            t.send(local.into_iter());
            t.in_sync_and_flush();
        }
        "c1k" | "c10k" | "c100k" => {
            let n = match workload {
                "c1k" => 1_000,
                "c10k" => 10_000,
                _ => 100_000,
            };
            let c = Customers::new(&mut g, n, 100);
            t.send((0..n).map(Customers::policy));
            t.send((0..n).map(Customers::profile));
            t.send(c.remote());
            t.send(c.local());
            t.in_sync_and_flush();
        }
        other => anyhow::bail!(
            "unknown calc workload {other:?} (known: {})",
            WORKLOADS.join(", ")
        ),
    }
    Ok(CalcReport {
        workload: workload.to_string(),
        wall: t.wall,
        cpu: t.cpu,
        peak_rss_mib: super::peak_rss_mib(),
        messages: t.counts.messages,
        ip_sets: t.counts.ip_sets,
        policies: t.counts.policies,
        churn_updates_per_sec: churn,
    })
}

/// Workload (a)'s input in upstream's order (tag policies, namespace profiles, remote then
/// local endpoints), one update at a time, for writing it as resource files.
pub(super) fn for_each_workload_a_update(mut f: impl FnMut(Update)) {
    let mut g = Gen::new();
    tag_policies(10_000).for_each(&mut f);
    namespace_profiles(NUM_NAMESPACES).for_each(&mut f);
    endpoint_updates(&mut g, 250_000, "remotehost").for_each(&mut f);
    endpoint_updates(&mut g, 200, "localhost").for_each(&mut f);
}

/// One churn update: a random endpoint of workload (a) gets fresh labels
/// (its address and profile unchanged).
fn churn_update(g: &mut Gen) -> Update {
    let n = (g.rand() % 250_200) as usize;
    let (host, idx) = if n < 250_000 {
        ("remotehost", n)
    } else {
        ("localhost", n - 250_000)
    };
    let ep = WorkloadEndpoint {
        labels: g.labels(),
        ipv4_nets: vec![IpNet::V4(
            Ipv4Net::new(Ipv4Addr::from(0x0a00_0001 + n as u32), 32).unwrap_or_default(),
        )],
        profile_ids: vec![format!("kns.namespace-{}", idx % NUM_NAMESPACES)],
        ..Default::default()
    };
    Update::set(
        Key::WorkloadEndpoint(wep_key(host, format!("wep-{idx}"))),
        Value::WorkloadEndpoint(Arc::new(ep)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lazy customers generator gives the same local/remote split and
    /// addresses as building the lists eagerly did (100 local pods, spread
    /// evenly, addresses in customer order).
    #[test]
    fn customers_split_and_addresses() {
        let mut g = Gen::new();
        let c = Customers::new(&mut g, 1_000, 100);
        let locals: Vec<usize> = (0..1_000).filter(|i| c.is_local(*i)).collect();
        assert_eq!(locals.len(), 100);
        assert_eq!(locals[..3], [0, 10, 20]);
        assert_eq!(g.next_ip, 0x0a00_0001 + 1_000);
        let remote: Vec<Update> = c.remote().collect();
        let local: Vec<Update> = c.local().collect();
        assert_eq!((remote.len(), local.len()), (900, 100));
        let last_remote = &remote[899];
        let first_local = &local[0];
        match (&last_remote.key, &first_local.key) {
            (Key::WorkloadEndpoint(r), Key::WorkloadEndpoint(l)) => {
                assert_eq!(r.hostname, "remotehost");
                assert_eq!(l.hostname, "localhost");
                assert!(l.workload_id.starts_with("customer-0/"));
            }
            other => panic!("unexpected keys {other:?}"),
        }
        match &first_local.value {
            Some(Value::WorkloadEndpoint(w)) => {
                assert_eq!(w.ipv4_nets[0].to_string(), "10.0.0.1/32");
            }
            other => panic!("unexpected value {other:?}"),
        }
    }
}
