//! `felix bench dataplane`: the Linux dataplane at scale, in a throwaway
//! network namespace, beside the raw tools.
//!
//! The workload (defaults, issue 5): 200 local workloads (real `cali*`
//! veths), 2,000 global policies of 5 rules (3 inbound, 2 outbound) each
//! selecting the workloads of one of 100 apps, every rule referencing one
//! of 50 network sets of 10,000 addresses (so 50 IP sets of 10,000
//! members), 10 namespace profiles.
//!
//! The path measured is the daemon's: model updates go through the real
//! calculation graph (`CalcGraph`) and the daemon's `to_dataplane` step,
//! then into a supervisor built with `crate::dataplane::wiring::register_with_interfaces`
//! (the managers and drivers `felix run` registers) over the real command
//! seam, with the daemon's interface monitor feeding them. The calc part is timed
//! separately. With `--pipe`, each backend is also measured with the same dataplane in a
//! `felix-dataplane-driver` process fed through the external driver protocol
//! ([`super::pipe`]).
//!
//! Three measurements per backend, each beside the raw tool in the same
//! run:
//! * start of day: `UpdateBatch` + `InSync` sent until the supervisor has
//!   finished a successful apply with no actor dirty. Raw: the programmed
//!   ruleset dumped (`ipset save` + `iptables-save`, or `nft list
//!   ruleset`) and replayed with `ipset restore` + `iptables-restore`, or
//!   `nft -f`, into a second, fresh namespace;
//! * one changed policy (one rule's port) and one endpoint added (its veth
//!   already exists, as CNI creates it first): the same, from the batch
//!   sent to convergence. Raw: the writes our drivers issued for that delta
//!   (every `*-restore` / `nft -f` input, recorded at the command seam)
//!   replayed with the same tools into the second namespace, which holds
//!   the same state.
//!
//! The `bpf` backend (`BPFEnabled=true`, `NFTablesMode=Disabled`: TC programs and pinned
//! maps, plus the iptables rules BPF mode keeps) has no raw tool to replay: its figures are
//! compared with the other backends' figures for the same step of the same run (the table
//! [`run_outer`] prints at the end), and each step lists the BPF operations `driver/bpf`
//! issued (from the seam's metrics: every syscall of `felix-bpf` is one seam operation; a
//! batched update counts once), with the number of map writes. The driver mounts its bpffs
//! at `/sys/fs/bpf` itself: `ip netns exec` gives the child a fresh sysfs, so the mount lives
//! in the child's mount namespace and goes (with every pin) when the child ends.
//!
//! Invariants: the process runs inside its own namespace (the outer
//! process starts it with `ip netns exec`), so nothing here touches the
//! host's tables; the outer process owns both namespaces and deletes them
//! whatever happens to this one. Figures are printed, never asserted.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Addr, System};
use felix_actors::{
    ApplyEvent, ApplyEventKind, InSync, Metrics, StatusHandle, Supervisor, SupervisorBuilder,
    UpdateBatch,
};
use felix_bpf::ops::op;
use felix_config::{Config, Source};
use felix_proto::to_dataplane::Payload;
use ipnet::{IpNet, Ipv4Net};

use crate::calc::view::DataplaneView;
use crate::calc::CalcGraph;
use crate::dataplane::kernel::{CommandOutput, CommandRequest, CommandRunner, SystemCommands};
use crate::model::{
    Action, Key, NetworkSet, NetworkSetKey, Policy, PolicyKey, Port, Profile, Protocol, Rule,
    SyncStatus, Update, Value, WorkloadEndpoint, WorkloadEndpointKey,
};
use felix_netns::{self as netns, Netns};

pub(super) const HOST: &str = "bench-node";
const NUM_PROFILES: usize = 10;
const SET_LABEL: &str = "bench-set";
const APP_LABEL: &str = "app";
/// How long to wait for one convergence before giving up.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(900);
/// Idle time before each delta, so the apply rate limiter has refilled and
/// the measurement starts from a quiet supervisor.
const SETTLE: Duration = Duration::from_millis(1500);

/// The dataplane backend to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// iptables (`iptables-restore`) with `ipset`.
    Iptables,
    /// nftables (`nft -f`) with native sets.
    Nftables,
    /// eBPF (`BPFEnabled=true`): TC programs and pinned maps, with iptables for the rules
    /// BPF mode keeps (`NFTablesMode=Disabled`).
    Bpf,
}

impl Backend {
    /// Every backend, in the order `felix bench dataplane` runs them by default.
    pub const ALL: [Backend; 3] = [Backend::Iptables, Backend::Nftables, Backend::Bpf];

    fn as_str(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
            Backend::Bpf => "bpf",
        }
    }
}

/// Workload size.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Sizes {
    /// Local workloads (one veth each).
    #[arg(long, default_value_t = 200)]
    pub workloads: usize,
    /// Global policies.
    #[arg(long, default_value_t = 2_000)]
    pub policies: usize,
    /// Rules per policy (the first three inbound, the rest outbound).
    #[arg(long, default_value_t = 5)]
    pub rules: usize,
    /// Network sets referenced by the rules (one IP set each).
    #[arg(long, default_value_t = 50)]
    pub ip_sets: usize,
    /// Addresses per network set.
    #[arg(long, default_value_t = 10_000)]
    pub members: usize,
    /// Distinct `app` labels; each policy selects one app.
    #[arg(long, default_value_t = 100)]
    pub apps: usize,
}

impl Sizes {
    /// The command-line arguments that give these sizes to a child `felix bench`.
    pub(super) fn to_args(self) -> Vec<String> {
        [
            ("--workloads", self.workloads),
            ("--policies", self.policies),
            ("--rules", self.rules),
            ("--ip-sets", self.ip_sets),
            ("--members", self.members),
            ("--apps", self.apps),
        ]
        .iter()
        .flat_map(|(flag, n)| [flag.to_string(), n.to_string()])
        .collect()
    }
}

/// The name prefix of every namespace the benchmark creates
/// (`felix-bench-dp-<pid>-<backend>-<a|b>`): [`netns::sweep_stale`] deletes
/// those of processes that no longer exist, and nothing else.
pub const NETNS_PREFIX: &str = "felix-bench-dp-";

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A namespace or raw-tool command failed.
    #[error(transparent)]
    Netns(#[from] netns::Error),
    /// The dataplane could not be set up or did not converge.
    #[error("{0}")]
    Dataplane(String),
}

/// One measurement: ours beside the raw tool.
#[derive(Debug, Clone, Default)]
pub struct Figure {
    /// Calc graph + `to_dataplane` time for the input of this step.
    pub calc: Duration,
    /// From the batch sent to the supervisor until converged.
    pub ours: Duration,
    /// Applies it took.
    pub applies: u64,
    /// The raw tool(s) on the same ruleset or delta.
    pub raw: Duration,
    /// What the raw figure consists of.
    pub raw_what: String,
    /// Kernel commands our drivers ran, aggregated: (command, count, time).
    pub commands: Vec<(String, usize, Duration)>,
    /// Time in each apply step (summed over the applies it took).
    pub steps: Vec<(String, Duration)>,
    /// BPF operations `driver/bpf` issued in this step: (operation, count, time). Empty
    /// outside BPF mode.
    pub bpf_ops: Vec<(String, u64, Duration)>,
}

impl Figure {
    /// BPF map writes issued in this step (`map_update` and `map_delete` operations; a
    /// batched update counts once).
    pub fn map_writes(&self) -> u64 {
        self.bpf_ops
            .iter()
            .filter(|(o, _, _)| o == op::MAP_UPDATE || o == op::MAP_DELETE)
            .map(|(_, n, _)| n)
            .sum()
    }

    fn bpf_op_count(&self, name: &str) -> u64 {
        self.bpf_ops
            .iter()
            .filter(|(o, _, _)| o == name)
            .map(|(_, n, _)| n)
            .sum()
    }

    /// The time of all BPF operations of this step.
    fn bpf_time(&self) -> Duration {
        self.bpf_ops.iter().map(|(_, _, d)| *d).sum()
    }
}

/// The figures of one backend.
#[derive(Debug, Clone)]
pub struct Report {
    /// Backend measured.
    pub backend: Backend,
    /// Workload.
    pub sizes: Sizes,
    /// Dataplane messages of the start-of-day batch.
    pub messages: usize,
    /// Size of the programmed ruleset (rules, set members).
    pub ruleset: String,
    /// Start of day.
    pub start_of_day: Figure,
    /// One changed policy.
    pub policy_change: Figure,
    /// One endpoint added.
    pub endpoint_add: Figure,
    /// RSS after start of day, MiB.
    pub rss_mib: f64,
    /// Peak RSS of the whole run, MiB.
    pub peak_rss_mib: f64,
    /// BPF only: the CPU parts of the changed-policy path, timed in process afterwards.
    pub bpf_path: Option<super::bpf_path::PolicyPath>,
    /// Measured through the external driver protocol ([`super::pipe`]).
    pub via_pipe: bool,
}

/// The name of a run in the summary: the backend, with `-pipe` when measured through the
/// external driver protocol.
fn run_label(backend: Backend, via_pipe: bool) -> String {
    if via_pipe {
        format!("{}-pipe", backend.as_str())
    } else {
        backend.as_str().to_string()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.sizes;
        writeln!(
            f,
            "dataplane {}: {} workloads, {} policies x {} rules, {} IP sets x {} members; {} messages; programmed {}",
            run_label(self.backend, self.via_pipe),
            s.workloads,
            s.policies,
            s.rules,
            s.ip_sets,
            s.members,
            self.messages,
            self.ruleset
        )?;
        writeln!(
            f,
            "  {:<16} {:>10} {:>12} {:>8} {:>12} {:>7}   raw tool",
            "step", "calc ms", "dataplane ms", "applies", "raw ms", "ratio"
        )?;
        for (name, fig) in [
            ("start of day", &self.start_of_day),
            ("changed policy", &self.policy_change),
            ("endpoint added", &self.endpoint_add),
        ] {
            let (raw, ratio) = if fig.raw.is_zero() {
                ("-".to_string(), "-".to_string())
            } else {
                (
                    format!("{:.1}", ms(fig.raw)),
                    format!("{:.2}x", fig.ours.as_secs_f64() / fig.raw.as_secs_f64()),
                )
            };
            writeln!(
                f,
                "  {:<16} {:>10.1} {:>12.1} {:>8} {:>12} {:>7}   {}",
                name,
                ms(fig.calc),
                ms(fig.ours),
                fig.applies,
                raw,
                ratio,
                fig.raw_what
            )?;
        }
        writeln!(
            f,
            "  RSS after start of day {:.1} MiB, peak {:.1} MiB (whole process: calc graph, input, dataplane)",
            self.rss_mib, self.peak_rss_mib
        )?;
        for (name, fig) in [
            ("start of day", &self.start_of_day),
            ("changed policy", &self.policy_change),
            ("endpoint added", &self.endpoint_add),
        ] {
            let parts: Vec<String> = fig
                .commands
                .iter()
                .map(|(c, n, d)| format!("{c} x{n} {:.1} ms", ms(*d)))
                .collect();
            writeln!(f, "  commands, {name}: {}", parts.join("; "))?;
            let steps: Vec<String> = fig
                .steps
                .iter()
                .map(|(st, d)| format!("{st} {:.1} ms", ms(*d)))
                .collect();
            writeln!(f, "  apply steps, {name}: {}", steps.join("; "))?;
            if self.backend == Backend::Bpf {
                let ops: Vec<String> = fig
                    .bpf_ops
                    .iter()
                    .map(|(o, n, d)| format!("{o} x{n} {:.1} ms", ms(*d)))
                    .collect();
                writeln!(
                    f,
                    "  bpf ops, {name}: {} map writes, {:.1} ms in BPF syscalls: {}",
                    fig.map_writes(),
                    ms(fig.bpf_time()),
                    ops.join("; ")
                )?;
            }
        }
        if let Some(p) = &self.bpf_path {
            writeln!(f, "{p}")?;
        }
        Ok(())
    }
}

impl Report {
    /// The report as one line the outer process collects for its summary table.
    pub fn summary_line(&self) -> String {
        let figs = [&self.start_of_day, &self.policy_change, &self.endpoint_add];
        SummaryLine {
            backend: run_label(self.backend, self.via_pipe),
            ours: figs.map(|f| ms(f.ours)),
            raw: figs.map(|f| ms(f.raw)),
            writes: figs.map(Figure::map_writes),
        }
        .line()
    }
}

/// One backend's figures in the summary table: (start of day, changed policy, endpoint
/// added), milliseconds; the raw tool's (0 when there is none) and the BPF map writes.
#[derive(Debug, Clone, PartialEq)]
struct SummaryLine {
    backend: String,
    ours: [f64; 3],
    raw: [f64; 3],
    writes: [u64; 3],
}

const SUMMARY_PREFIX: &str = "DATAPLANE ";
const STEPS: [&str; 3] = ["start of day", "changed policy", "endpoint added"];
/// The target for one changed policy in BPF mode.
const BPF_POLICY_TARGET_MS: f64 = 10.0;

impl SummaryLine {
    fn line(&self) -> String {
        format!(
            "{SUMMARY_PREFIX}backend={} ours={:.3},{:.3},{:.3} raw={:.3},{:.3},{:.3} writes={},{},{}",
            self.backend,
            self.ours[0],
            self.ours[1],
            self.ours[2],
            self.raw[0],
            self.raw[1],
            self.raw[2],
            self.writes[0],
            self.writes[1],
            self.writes[2]
        )
    }

    fn parse(line: &str) -> Option<SummaryLine> {
        let rest = line.strip_prefix(SUMMARY_PREFIX)?;
        let kv: BTreeMap<&str, &str> = rest.split(' ').filter_map(|p| p.split_once('=')).collect();
        fn three<T: std::str::FromStr + Copy + Default>(s: &str) -> Option<[T; 3]> {
            let v: Vec<T> = s
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            <[T; 3]>::try_from(v).ok()
        }
        Some(SummaryLine {
            backend: kv.get("backend")?.to_string(),
            ours: three(kv.get("ours")?)?,
            raw: three(kv.get("raw")?)?,
            writes: three(kv.get("writes")?)?,
        })
    }
}

/// The side-by-side table of every backend measured in one run: per step, each backend's
/// figure with its comparison (the raw tool's time, or for bpf the map writes).
fn summary_table(rows: &[SummaryLine], sizes: &Sizes) -> String {
    let mut out = format!(
        "dataplane summary, one run: {} workloads, {} policies x {} rules, {} IP sets x {} members (ms; in brackets the raw tool's ms, or for bpf the BPF map writes)\n",
        sizes.workloads, sizes.policies, sizes.rules, sizes.ip_sets, sizes.members
    );
    out.push_str(&format!("  {:<16}", "step"));
    for r in rows {
        let what = if r.backend.starts_with(Backend::Bpf.as_str()) {
            "(writes)"
        } else {
            "(raw)"
        };
        out.push_str(&format!(" {:>12} {:<12}", r.backend, what));
    }
    out.push('\n');
    for (i, step) in STEPS.iter().enumerate() {
        out.push_str(&format!("  {step:<16}"));
        for r in rows {
            let cmp = if r.backend.starts_with(Backend::Bpf.as_str()) {
                format!("({})", r.writes[i])
            } else if r.raw[i] > 0.0 {
                format!("({:.1})", r.raw[i])
            } else {
                "(-)".to_string()
            };
            out.push_str(&format!(" {:>12.1} {cmp:<12}", r.ours[i]));
        }
        out.push('\n');
    }
    out.push_str(&pipe_comparison(rows));
    if let Some(b) = rows.iter().find(|r| r.backend == Backend::Bpf.as_str()) {
        let verdict = if b.ours[1] <= BPF_POLICY_TARGET_MS {
            "met"
        } else {
            "not met"
        };
        out.push_str(&format!(
            "  bpf changed policy {:.1} ms against the target of at most {BPF_POLICY_TARGET_MS} ms: {verdict}\n",
            b.ours[1]
        ));
    }
    out
}

/// Start of day through the pipe may take at most this many times the in-process figure.
const PIPE_START_RATIO_TARGET: f64 = 1.1;
/// One changed policy through the pipe may take at most this much longer (ms).
const PIPE_POLICY_EXTRA_TARGET_MS: f64 = 5.0;

/// For each backend measured both in process and through the pipe in this run, the pipe's
/// cost against the targets.
fn pipe_comparison(rows: &[SummaryLine]) -> String {
    let mut out = String::new();
    for pipe in rows.iter().filter(|r| r.backend.ends_with("-pipe")) {
        let base = pipe.backend.trim_end_matches("-pipe");
        let Some(own) = rows.iter().find(|r| r.backend == base) else {
            continue;
        };
        let ratio = pipe.ours[0] / own.ours[0].max(f64::MIN_POSITIVE);
        let extra = pipe.ours[1] - own.ours[1];
        let verdict = |ok: bool| if ok { "met" } else { "not met" };
        out.push_str(&format!(
            "  {base} through the pipe: start of day {ratio:.3}x in-process (target at most {PIPE_START_RATIO_TARGET}x: {}), changed policy {extra:+.1} ms (target at most +{PIPE_POLICY_EXTRA_TARGET_MS} ms: {}), endpoint added {:+.1} ms\n",
            verdict(ratio <= PIPE_START_RATIO_TARGET),
            verdict(extra <= PIPE_POLICY_EXTRA_TARGET_MS),
            pipe.ours[2] - own.ours[2],
        ));
    }
    out
}

/// Where the benchmark's batches go: a supervisor in this process, or a driver process
/// through the external driver protocol.
enum Plane {
    Local(Running),
    Pipe(super::pipe::PipeRunning),
}

impl Plane {
    fn send_and_converge(
        &self,
        payloads: Vec<Payload>,
        in_sync: bool,
    ) -> Result<Converged, BenchError> {
        match self {
            Plane::Local(r) => r.send_and_converge(payloads, in_sync),
            Plane::Pipe(p) => p.send_and_converge(payloads, in_sync),
        }
    }

    fn bpf_ops(&self) -> BpfOpTotals {
        match self {
            Plane::Local(r) => r.bpf_ops(),
            Plane::Pipe(_) => BpfOpTotals::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// Workload generation.

fn iface(n: usize) -> String {
    format!("calibench{n:05}")
}

fn peer(n: usize) -> String {
    format!("pbench{n:05}")
}

pub(super) fn net32(ip: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(ip), 32).unwrap_or_default())
}

fn workload(n: usize, sizes: &Sizes) -> Update {
    let mut labels = BTreeMap::new();
    labels.insert(
        APP_LABEL.to_string(),
        format!("app-{}", n % sizes.apps.max(1)),
    );
    labels.insert(
        "projectcalico.org/namespace".to_string(),
        format!("bench-ns-{}", n % NUM_PROFILES),
    );
    let ep = WorkloadEndpoint {
        state: "active".to_string(),
        name: iface(n),
        profile_ids: vec![format!("kns.bench-ns-{}", n % NUM_PROFILES)],
        ipv4_nets: vec![net32(0x0a41_0001 + n as u32)],
        labels: labels.into(),
        ..Default::default()
    };
    Update::set(
        Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: HOST.to_string(),
            orchestrator_id: "k8s".to_string(),
            workload_id: format!("bench-ns-{}/pod-{n}", n % NUM_PROFILES),
            endpoint_id: "eth0".to_string(),
        }),
        Value::WorkloadEndpoint(Arc::new(ep)),
    )
}

pub(super) fn policy(i: usize, sizes: &Sizes, port_shift: u16) -> Update {
    let rule = |j: usize, inbound: bool| {
        let k = i * sizes.rules + j;
        let sel = format!("{SET_LABEL} == 'set-{}'", k % sizes.ip_sets.max(1));
        let port = Port::Number(1000 + (k % 1000) as u16 + port_shift);
        let mut r = Rule {
            action: Action::Allow,
            protocol: Some(Protocol::Name("tcp".to_string())),
            dst_ports: vec![port],
            ..Default::default()
        };
        if inbound {
            r.src_selector = sel;
        } else {
            r.dst_selector = sel;
        }
        r
    };
    let inbound = sizes.rules.min(3);
    let p = Policy {
        tier: "default".to_string(),
        order: Some(i as f64),
        selector: format!("{APP_LABEL} == 'app-{}'", i % sizes.apps.max(1)),
        types: vec!["ingress".to_string(), "egress".to_string()],
        inbound_rules: (0..inbound).map(|j| rule(j, true)).collect(),
        outbound_rules: (inbound..sizes.rules).map(|j| rule(j, false)).collect(),
        ..Default::default()
    };
    Update::set(
        Key::Policy(PolicyKey {
            name: format!("bench-pol-{i:05}"),
            namespace: String::new(),
            kind: String::new(),
        }),
        Value::Policy(Arc::new(p)),
    )
}

pub(super) fn network_set(k: usize, sizes: &Sizes) -> Update {
    // Every other address, so that nftables' interval sets cannot merge
    // neighbours into ranges (real network sets are not contiguous).
    let base = 0x6440_0000u32 + (2 * k * sizes.members) as u32;
    let nets = (0..sizes.members as u32)
        .map(|m| net32(base + 2 * m))
        .collect();
    let mut labels = BTreeMap::new();
    labels.insert(SET_LABEL.to_string(), format!("set-{k}"));
    Update::set(
        Key::NetworkSet(NetworkSetKey {
            name: format!("set-{k}"),
        }),
        Value::NetworkSet(Arc::new(NetworkSet {
            nets,
            labels: labels.into(),
            profile_ids: Vec::new(),
        })),
    )
}

pub(super) fn profile(i: usize) -> Update {
    let allow = Rule {
        action: Action::Allow,
        ..Default::default()
    };
    let mut labels = BTreeMap::new();
    labels.insert(
        "pcns.projectcalico.org/name".to_string(),
        format!("bench-ns-{i}"),
    );
    Update::set(
        Key::Profile(format!("kns.bench-ns-{i}")),
        Value::Profile(Arc::new(Profile {
            inbound_rules: vec![allow.clone()],
            outbound_rules: vec![allow],
            labels: labels.into(),
        })),
    )
}

/// The start-of-day input, in the order a syncer would deliver it.
pub(super) fn start_of_day_input(sizes: &Sizes) -> Vec<Update> {
    let mut v = Vec::new();
    v.extend((0..NUM_PROFILES).map(profile));
    v.extend((0..sizes.ip_sets).map(|k| network_set(k, sizes)));
    v.extend((0..sizes.policies).map(|i| policy(i, sizes, 0)));
    v.extend((0..sizes.workloads).map(|n| workload(n, sizes)));
    v
}

// ---------------------------------------------------------------------------
// The command seam, recorded.

#[derive(Debug, Clone)]
struct Recorded {
    req: CommandRequest,
    elapsed: Duration,
}

/// The real command seam, with every request and its wall time recorded.
#[derive(Debug, Default)]
pub(super) struct RecordingCommands {
    inner: SystemCommands,
    log: Mutex<Vec<Recorded>>,
}

impl RecordingCommands {
    fn take(&self) -> Vec<Recorded> {
        self.log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

impl CommandRunner for RecordingCommands {
    fn exec(&self, req: &CommandRequest) -> std::io::Result<CommandOutput> {
        let start = felix_actors::clock::real_now();
        let r = self.inner.exec(req);
        let elapsed = start.elapsed();
        if let (Some(dir), Some(input)) = (std::env::var_os("FELIX_BENCH_DUMP"), &req.stdin) {
            let n = self.log.lock().map(|l| l.len()).unwrap_or(0);
            let file = std::path::Path::new(&dir).join(format!("{n:04}-{}.txt", req.program));
            let _ = std::fs::write(file, input);
        }
        if let Ok(mut l) = self.log.lock() {
            l.push(Recorded {
                req: req.clone(),
                elapsed,
            });
        }
        r
    }

    fn program_exists(&self, program: &str) -> bool {
        self.inner.program_exists(program)
    }

    fn netlink(&self) -> std::sync::Arc<dyn crate::dataplane::netlink::NetlinkProvider> {
        self.inner.netlink()
    }

    fn path_exists(&self, path: &str) -> bool {
        self.inner.path_exists(path)
    }
}

/// A short name for a command: the program and its first non-option
/// argument words (`ip route`, `ipset restore`, `iptables-restore`).
fn command_label(req: &CommandRequest) -> String {
    let mut s = req.program.clone();
    let words: Vec<&str> = req
        .args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .take(if req.program == "ip" { 2 } else { 1 })
        .collect();
    if matches!(req.program.as_str(), "ip" | "ipset" | "nft") {
        for w in words {
            s.push(' ');
            s.push_str(w);
        }
    }
    if req.program == "nft" && req.args.iter().any(|a| a == "-f") {
        s.push_str(" -f");
    }
    s
}

fn aggregate(log: &[Recorded]) -> Vec<(String, usize, Duration)> {
    if std::env::var_os("FELIX_BENCH_TRACE").is_some() {
        for r in log {
            let input = r
                .req
                .stdin
                .as_deref()
                .map(|s| String::from_utf8_lossy(&s[..s.len().min(400)]).into_owned())
                .unwrap_or_default();
            eprintln!("{:>9.2} ms {} | {input}", ms(r.elapsed), r.req.display());
        }
    }
    let mut m: BTreeMap<String, (usize, Duration)> = BTreeMap::new();
    for r in log {
        let e = m.entry(command_label(&r.req)).or_default();
        e.0 += 1;
        e.1 += r.elapsed;
    }
    m.into_iter().map(|(k, (n, d))| (k, n, d)).collect()
}

/// True for the commands that write the backend's tables or sets (what
/// the raw tool replays for a delta); the cleanup of the other backend is
/// not part of the delta.
fn is_write(backend: Backend, req: &CommandRequest) -> bool {
    let p = req.program.rsplit('/').next().unwrap_or(&req.program);
    match backend {
        Backend::Iptables => {
            p == "iptables-nft-restore"
                || p == "iptables-restore"
                || (p == "ipset" && req.args.iter().any(|a| a == "restore"))
        }
        Backend::Nftables => p == "nft" && req.args.iter().any(|a| a == "-f"),
        // BPF mode's map writes are not commands (see `bpf_op_delta`); no raw replay.
        Backend::Bpf => false,
    }
}

// ---------------------------------------------------------------------------
// BPF operations, from the seam's metrics.

/// The actor whose BPF operations are counted.
const BPF_DRIVER: &str = "driver/bpf";

/// Every operation name of `felix_bpf::ops::op`.
const BPF_OPS: [&str; 24] = [
    op::MAP_CREATE,
    op::MAP_PIN,
    op::MAP_OPEN,
    op::MAP_LOOKUP,
    op::MAP_UPDATE,
    op::MAP_DELETE,
    op::PROG_LOAD,
    op::PROG_PIN,
    op::PROG_OPEN,
    op::TEST_RUN,
    op::TCX_ATTACH,
    op::LINK_UPDATE,
    op::LINK_PIN,
    op::LINK_OPEN,
    op::LINK_DETACH,
    op::TC_QDISC,
    op::TC_ATTACH,
    op::TC_QUERY,
    op::TC_DETACH,
    op::PROBE,
    op::UNPIN,
    op::MOUNT,
    op::SET_ASIDE,
    op::TC_LIST,
];

/// Cumulative (count, seconds) per BPF operation of `driver/bpf`.
type BpfOpTotals = BTreeMap<&'static str, (u64, f64)>;

fn bpf_op_totals(metrics: &Metrics) -> BpfOpTotals {
    BPF_OPS
        .iter()
        .map(|o| {
            let (n, _, secs) = metrics.seam_totals(BPF_DRIVER, &[o]);
            (*o, (n, secs))
        })
        .collect()
}

/// The operations issued between two snapshots: (operation, count, time), those with a
/// count only.
fn bpf_op_delta(before: &BpfOpTotals, after: &BpfOpTotals) -> Vec<(String, u64, Duration)> {
    after
        .iter()
        .filter_map(|(o, (n, secs))| {
            let (n0, s0) = before.get(o).copied().unwrap_or_default();
            let n = n.saturating_sub(n0);
            (n > 0).then(|| {
                (
                    o.to_string(),
                    n,
                    Duration::from_secs_f64((secs - s0).max(0.0)),
                )
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The supervisor, as `felix run` builds it.

/// Time to convergence, applies it took, time per apply step.
pub(super) type Converged = (Duration, u64, Vec<(String, Duration)>);

pub(super) struct Running {
    addr: Addr<Supervisor<Payload>>,
    /// The interface monitor feeding the route and interface drivers, as in `felix run`.
    monitor: Option<crate::dataplane::ifacemon::InterfaceMonitor>,
    status: StatusHandle,
    /// The supervisor's metrics (the seam's per-operation counts).
    metrics: Metrics,
    events: mpsc::Receiver<(ApplyEvent, Instant)>,
    /// Set by the supervisor's fatal hook: the dataplane gave up, so no
    /// convergence will come and the benchmark must end with this message.
    fatal: Arc<Mutex<Option<String>>>,
    system: System,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    pub(super) fn start(cfg: &Config, seam: Arc<RecordingCommands>) -> Result<Running, BenchError> {
        let (tx, rx) = mpsc::channel();
        let (fin_tx, events) = mpsc::channel();
        let monitor_cfg = cfg.clone();
        let cfg = cfg.clone();
        let excl = cfg.clone();
        let ifaces =
            crate::dataplane::ifacemon::InterfaceState::new(move |n| excl.is_excluded_iface(n));
        let wiring_ifaces = ifaces.clone();
        let fatal: Arc<Mutex<Option<String>>> = Arc::default();
        let fatal_slot = fatal.clone();
        let thread = std::thread::Builder::new()
            .name("dataplane".into())
            .spawn(move || {
                let sys = System::new();
                let fin_tx = Mutex::new(fin_tx);
                let observer: felix_actors::ApplyObserver = Arc::new(move |e: &ApplyEvent| {
                    if let Ok(t) = fin_tx.lock() {
                        let _ = t.send((*e, felix_actors::clock::real_now()));
                    }
                });
                let started = sys.block_on(async move {
                    let b = SupervisorBuilder::new(
                        crate::daemon::dataplane::supervisor_config(&cfg),
                        crate::daemon::messages::state_key,
                    )
                    .observer(observer)
                    .on_fatal(move |f| {
                        tracing::error!("dataplane fatal: {}", f.message);
                        if let Ok(mut slot) = fatal_slot.lock() {
                            slot.get_or_insert_with(|| f.message.clone());
                        }
                    });
                    let b = crate::dataplane::wiring::register_with_interfaces(
                        b,
                        &cfg,
                        seam,
                        &wiring_ifaces,
                        &Default::default(),
                    )
                    .map_err(|e| e.to_string())?;
                    b.start()
                        .map(|h| {
                            (
                                h.addr.clone(),
                                h.status.clone(),
                                h.metrics.clone(),
                                System::current(),
                                felix_actors::Seam::new(h.faults.clone(), h.metrics.clone()),
                            )
                        })
                        .map_err(|e| e.to_string())
                });
                let ok = started.is_ok();
                let _ = tx.send(started);
                if ok {
                    let _ = sys.run();
                }
            })
            .map_err(|e| {
                BenchError::Dataplane(format!("cannot start the dataplane thread: {e}"))
            })?;
        let (addr, status, metrics, system, kernel_seam) = rx
            .recv()
            .map_err(|_| BenchError::Dataplane("dataplane thread vanished".into()))?
            .map_err(BenchError::Dataplane)?;
        let monitor = crate::daemon::dataplane::start_monitor(
            &monitor_cfg,
            ifaces,
            kernel_seam,
            addr.clone(),
        );
        Ok(Running {
            monitor,
            addr,
            status,
            metrics,
            events,
            fatal,
            system,
            thread: Some(thread),
        })
    }

    /// The BPF operations `driver/bpf` has issued so far.
    fn bpf_ops(&self) -> BpfOpTotals {
        bpf_op_totals(&self.metrics)
    }

    /// Sends one flushed batch (and in-sync), then waits until an apply
    /// started after the send finished successfully with nothing dirty.
    /// Returns the time from the send to the end of that apply, how many
    /// applies it took and the time spent in each apply step.
    pub(super) fn send_and_converge(
        &self,
        payloads: Vec<Payload>,
        in_sync: bool,
    ) -> Result<Converged, BenchError> {
        while self.events.try_recv().is_ok() {}
        let mut started: BTreeMap<String, Instant> = BTreeMap::new();
        let mut steps: BTreeMap<String, Duration> = BTreeMap::new();
        let before = self.status.snapshot().applies;
        let t0 = felix_actors::clock::real_now();
        if !payloads.is_empty() {
            self.addr.do_send(UpdateBatch(payloads));
        }
        if in_sync {
            self.addr.do_send(InSync);
        }
        let mut last_end = None;
        loop {
            match self.events.recv_timeout(Duration::from_millis(200)) {
                Ok((e, at)) => match e.kind {
                    ApplyEventKind::Finished { ok: true } => last_end = Some(at),
                    ApplyEventKind::Finished { ok: false } => {}
                    ApplyEventKind::Started => {
                        started.insert("apply".into(), at);
                    }
                    ApplyEventKind::StepStarted(st) => {
                        started.insert(format!("{st:?}"), at);
                    }
                    ApplyEventKind::StepFinished(st) => {
                        let k = format!("{st:?}");
                        if let Some(t) = started.remove(&k) {
                            *steps.entry(k).or_default() += at - t;
                        }
                    }
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(BenchError::Dataplane("dataplane thread ended".into()))
                }
            }
            if let Some(msg) = self.fatal.lock().ok().and_then(|s| s.clone()) {
                return Err(BenchError::Dataplane(format!("dataplane gave up: {msg}")));
            }
            if t0.elapsed() > CONVERGE_TIMEOUT {
                return Err(BenchError::Dataplane(format!(
                    "no convergence within {CONVERGE_TIMEOUT:?}"
                )));
            }
            // The status is published just after the observer's event; poll
            // it briefly until it reflects the apply we saw.
            let Some(end) = last_end else { continue };
            let settle = felix_actors::clock::real_now();
            loop {
                let snap = self.status.snapshot();
                let seen = snap.applies > before;
                let clean = snap.actors.iter().all(|a| !a.dirty);
                let ok = snap.last_apply.as_ref().is_some_and(|l| l.ok);
                if seen && ok && clean {
                    return Ok((end - t0, snap.applies - before, steps.into_iter().collect()));
                }
                if settle.elapsed() > Duration::from_millis(50) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(m) = self.monitor.take() {
            m.stop();
        }
        self.system.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// The run.

fn config(backend: Backend) -> Result<Config, BenchError> {
    config_with(match backend {
        Backend::Iptables => &[("NFTablesMode", "Disabled")],
        Backend::Nftables => &[("NFTablesMode", "Enabled")],
        Backend::Bpf => &[("NFTablesMode", "Disabled"), ("BPFEnabled", "true")],
    })
}

/// The benchmarks' configuration with `extra` settings (the mode) on top.
pub(super) fn config_with(extra: &[(&str, &str)]) -> Result<Config, BenchError> {
    let mut env = BTreeMap::new();
    for (k, v) in [
        ("Ipv6Support", "false"),
        // Auto detection may pick legacy when its modules are loaded; the
        // raw replay must use the same backend, so name it.
        ("IptablesBackend", "nft"),
        // Background refreshes would land in the middle of a measurement.
        ("IptablesRefreshInterval", "3600"),
        ("NftablesRefreshInterval", "3600"),
        ("IpsetsRefreshInterval", "3600"),
        ("RouteRefreshInterval", "3600"),
    ]
    .iter()
    .chain(extra)
    {
        env.insert(k.to_string(), v.to_string());
    }
    let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
    if !errs.is_empty() {
        return Err(BenchError::Dataplane(format!("bench config: {errs:?}")));
    }
    Ok(cfg)
}

pub(super) fn create_veths(n: usize) -> Result<(), BenchError> {
    let mut script = String::new();
    for i in 0..n {
        let (a, b) = (iface(i), peer(i));
        script.push_str(&format!("link add {a} type veth peer name {b}\n"));
        script.push_str(&format!("link set {a} up\nlink set {b} up\n"));
    }
    netns::run_checked("ip", &["-batch", "-"], Some(script.as_bytes()))?;
    Ok(())
}

pub(super) fn calc_step(
    graph: &mut CalcGraph,
    view: &mut DataplaneView,
    updates: Vec<Update>,
    in_sync: bool,
) -> (Vec<Payload>, bool, Duration) {
    let t = felix_actors::clock::real_now();
    graph.on_updates(updates);
    if in_sync {
        graph.on_status(SyncStatus::InSync);
    }
    let flushed = graph.flush();
    let (payloads, in_sync) = crate::daemon::messages::to_dataplane(view, flushed, true);
    (payloads, in_sync, t.elapsed())
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

/// Dumps what we programmed here and replays it into `replay_ns` with the
/// raw tools; returns (raw time, description, ruleset size).
fn replay_start_of_day(
    backend: Backend,
    replay_ns: &str,
) -> Result<(Duration, String, String), BenchError> {
    match backend {
        Backend::Iptables => {
            let sets = netns::run_checked("ipset", &["save"], None)?;
            let rules = netns::run_checked("iptables-nft-save", &[], None)?;
            let members = text(sets.clone())
                .lines()
                .filter(|l| l.starts_with("add "))
                .count();
            let n_rules = text(rules.clone())
                .lines()
                .filter(|l| l.starts_with("-A "))
                .count();
            let (_, t_sets) = netns::run_in(replay_ns, "ipset", &["restore"], Some(&sets))?;
            let (_, t_rules) = netns::run_in(replay_ns, "iptables-nft-restore", &[], Some(&rules))?;
            Ok((
                t_sets + t_rules,
                format!(
                    "ipset restore {:.1} ms + iptables-nft-restore {:.1} ms",
                    ms(t_sets),
                    ms(t_rules)
                ),
                format!("{n_rules} iptables rules, {members} ipset members"),
            ))
        }
        Backend::Nftables => {
            let rules = netns::run_checked("nft", &["list", "ruleset"], None)?;
            let s = text(rules.clone());
            let n_rules = nft_rule_count(&s);
            let (_, t) = netns::run_in(replay_ns, "nft", &["-f", "-"], Some(&rules))?;
            Ok((
                t,
                format!("nft -f {:.1} ms", ms(t)),
                format!("{n_rules} nft rules, {} bytes listed", s.len()),
            ))
        }
        Backend::Bpf => {
            // No raw tool: the comparison is the other backends' figure for the step.
            let rules = netns::run_checked("iptables-nft-save", &[], None)?;
            let n_rules = text(rules).lines().filter(|l| l.starts_with("-A ")).count();
            Ok((
                Duration::ZERO,
                String::new(),
                format!("TC programs and BPF maps, plus {n_rules} iptables rules (static and dispatch chains)"),
            ))
        }
    }
}

/// What the raw column says for a bpf step: there is no raw tool; the driver's map writes.
fn bpf_raw_what(fig: &Figure) -> String {
    format!(
        "no raw tool; {} BPF map writes ({} map_update, {} map_delete)",
        fig.map_writes(),
        fig.bpf_op_count(op::MAP_UPDATE),
        fig.bpf_op_count(op::MAP_DELETE)
    )
}

/// Rules in `nft list ruleset` output: lines inside a chain block that are
/// not the chain's `type ... hook` or `policy` line.
pub(super) fn nft_rule_count(listing: &str) -> usize {
    let mut in_chain = false;
    let mut n = 0;
    for l in listing.lines().map(str::trim) {
        if l.starts_with("chain ") {
            in_chain = true;
        } else if l == "}" {
            in_chain = false;
        } else if in_chain && !l.is_empty() && !l.starts_with("type ") && !l.starts_with("policy ")
        {
            n += 1;
        }
    }
    n
}

/// Replays the recorded writes of a delta into `replay_ns`.
fn replay_delta(
    backend: Backend,
    log: &[Recorded],
    replay_ns: &str,
) -> Result<(Duration, String), BenchError> {
    let mut total = Duration::ZERO;
    let mut parts = Vec::new();
    for r in log.iter().filter(|r| is_write(backend, &r.req)) {
        let args: Vec<&str> = r.req.args.iter().map(String::as_str).collect();
        let (_, t) = netns::run_in(replay_ns, &r.req.program, &args, r.req.stdin.as_deref())?;
        total += t;
        let lines = r
            .req
            .stdin
            .as_deref()
            .map(|s| s.iter().filter(|b| **b == b'\n').count())
            .unwrap_or(0);
        parts.push(format!(
            "{} ({lines} lines) {:.1} ms",
            command_label(&r.req),
            ms(t)
        ));
    }
    if parts.is_empty() {
        parts.push("no table or set writes".to_string());
    }
    Ok((total, parts.join(" + ")))
}

/// Runs the measurements inside the current namespace (the child side).
/// One backend, in this process (inside its namespace). With `via_pipe` the dataplane is a
/// `felix-dataplane-driver` child fed through the external driver protocol; the raw replay
/// of the deltas is then left out (the driver's commands are in the other process), and
/// the in-process run of the same backend is the comparison.
pub fn run_inner(
    backend: Backend,
    replay_ns: &str,
    sizes: &Sizes,
    via_pipe: bool,
) -> Result<Report, BenchError> {
    let cfg = config(backend)?;
    create_veths(sizes.workloads + 1)?;
    let input = start_of_day_input(sizes);
    let changed = policy(0, sizes, 1);
    let added = workload(sizes.workloads, sizes);

    let seam = Arc::new(RecordingCommands::default());
    let running = if via_pipe {
        Plane::Pipe(super::pipe::PipeRunning::start(&cfg)?)
    } else {
        Plane::Local(Running::start(&cfg, seam.clone())?)
    };
    let mut graph = CalcGraph::new(HOST);
    let mut view = DataplaneView::new();

    // Start of day.
    let (payloads, in_sync, calc) = calc_step(&mut graph, &mut view, input, true);
    let messages = payloads.len();
    // Kept for the in-process breakdown of the BPF changed-policy path.
    let bpf_start = (backend == Backend::Bpf).then(|| payloads.clone());
    let ops_before = running.bpf_ops();
    let (ours, applies, steps) = running.send_and_converge(payloads, in_sync)?;
    let bpf_ops = bpf_op_delta(&ops_before, &running.bpf_ops());
    let rss_mib = super::rss_mib();
    let log = seam.take();
    let (raw, raw_what, ruleset) = replay_start_of_day(backend, replay_ns)?;
    let mut start_of_day = Figure {
        calc,
        ours,
        applies,
        raw,
        raw_what,
        commands: aggregate(&log),
        steps,
        bpf_ops,
    };
    if backend == Backend::Bpf {
        start_of_day.raw_what = bpf_raw_what(&start_of_day);
    }

    let mut delta = |update: Update| -> Result<Figure, BenchError> {
        std::thread::sleep(SETTLE);
        let _ = seam.take();
        let (payloads, _, calc) = calc_step(&mut graph, &mut view, vec![update], false);
        let ops_before = running.bpf_ops();
        let (ours, applies, steps) = running.send_and_converge(payloads, false)?;
        let bpf_ops = bpf_op_delta(&ops_before, &running.bpf_ops());
        let log = seam.take();
        let mut fig = Figure {
            calc,
            ours,
            applies,
            commands: aggregate(&log),
            steps,
            bpf_ops,
            ..Figure::default()
        };
        if via_pipe {
            fig.raw_what = "compare with the in-process run".into();
        } else if backend == Backend::Bpf {
            fig.raw_what = bpf_raw_what(&fig);
        } else {
            (fig.raw, fig.raw_what) = replay_delta(backend, &log, replay_ns)?;
        }
        Ok(fig)
    };
    let policy_change = delta(changed)?;
    let endpoint_add = delta(added)?;
    drop(running);
    let peak_rss_mib = super::peak_rss_mib();
    let bpf_path = bpf_start.filter(|_| !via_pipe).map(|start| {
        // Two more versions of the changed policy, each differing from the one before.
        let mut change = |shift| {
            let (out, _, _) =
                calc_step(&mut graph, &mut view, vec![policy(0, sizes, shift)], false);
            out.into_iter()
                .next()
                .unwrap_or(Payload::InSync(Default::default()))
        };
        let changes = [change(2), change(3)];
        super::bpf_path::measure(&start, &changes, std::path::Path::new("/sys/class/net"))
    });
    Ok(Report {
        backend,
        sizes: *sizes,
        messages,
        ruleset,
        start_of_day,
        policy_change,
        endpoint_add,
        rss_mib,
        peak_rss_mib,
        bpf_path,
        via_pipe,
    })
}

/// Runs each backend in a child process inside its own pair of throwaway
/// namespaces (one programmed by the dataplane, one for the raw replays),
/// printing the child's report as it comes, then the summary table of every
/// backend side by side. Both namespaces are deleted afterwards, whatever the
/// child did.
/// With `pipe`, each backend is measured twice in the same run: in process, then through
/// the external driver protocol (`--through-pipe`), each in fresh namespaces.
pub fn run_outer(backends: &[Backend], sizes: &Sizes, pipe: bool) -> anyhow::Result<()> {
    use std::io::BufRead;
    let swept = netns::sweep_stale(NETNS_PREFIX);
    if swept > 0 {
        eprintln!("removed {swept} stale benchmark namespace(s)");
    }
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    let runs: Vec<(Backend, bool)> = backends
        .iter()
        .flat_map(|&b| std::iter::once((b, false)).chain(pipe.then_some((b, true))))
        .collect();
    for (b, via_pipe) in runs {
        let label = run_label(b, via_pipe);
        let ours = Netns::create_owned(NETNS_PREFIX, &format!("{label}-a"))?;
        let replay = Netns::create_owned(NETNS_PREFIX, &format!("{label}-b"))?;
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", ours.name()]).arg(&exe).args([
            "bench",
            "dataplane",
            "--inner",
            "--backend",
            b.as_str(),
        ]);
        if via_pipe {
            cmd.arg("--through-pipe");
        }
        let mut child = cmd
            .args(["--replay-netns", replay.name()])
            .args(sizes.to_args())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut row = None;
        if let Some(out) = child.stdout.take() {
            for line in std::io::BufReader::new(out).lines() {
                let line = line?;
                match SummaryLine::parse(&line) {
                    Some(r) => row = Some(r),
                    None => println!("{line}"),
                }
            }
        }
        let status = child.wait()?;
        if !status.success() {
            anyhow::bail!("the {label} run failed ({status})");
        }
        rows.push(row.ok_or_else(|| anyhow::anyhow!("no summary from the {label} run"))?);
    }
    print!("{}", summary_table(&rows, sizes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Sizes {
        // More workloads than profiles, so every profile is already active
        // when the extra endpoint arrives (as in the full-size run).
        Sizes {
            workloads: NUM_PROFILES + 2,
            policies: 10,
            rules: 5,
            ip_sets: 3,
            members: 7,
            apps: 2,
        }
    }

    #[test]
    fn the_generated_input_yields_one_ip_set_per_network_set_and_every_policy() {
        let sizes = small();
        let mut graph = CalcGraph::new(HOST);
        let mut view = DataplaneView::new();
        let (out, in_sync, _) = calc_step(&mut graph, &mut view, start_of_day_input(&sizes), true);
        assert!(in_sync);
        let sets: Vec<_> = out
            .iter()
            .filter_map(|p| match p {
                Payload::IpsetUpdate(u) => Some(u.members.len()),
                _ => None,
            })
            .collect();
        assert_eq!(sets, vec![sizes.members; sizes.ip_sets]);
        let pols = out
            .iter()
            .filter(|p| matches!(p, Payload::ActivePolicyUpdate(_)))
            .count();
        assert_eq!(pols, sizes.policies);
        let weps = out
            .iter()
            .filter(|p| matches!(p, Payload::WorkloadEndpointUpdate(_)))
            .count();
        assert_eq!(weps, sizes.workloads);
    }

    #[test]
    fn a_changed_policy_and_an_added_endpoint_are_single_messages() {
        let sizes = small();
        let mut graph = CalcGraph::new(HOST);
        let mut view = DataplaneView::new();
        calc_step(&mut graph, &mut view, start_of_day_input(&sizes), true);
        let (out, _, _) = calc_step(&mut graph, &mut view, vec![policy(0, &sizes, 1)], false);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(matches!(out[0], Payload::ActivePolicyUpdate(_)));
        let (out, _, _) = calc_step(
            &mut graph,
            &mut view,
            vec![workload(sizes.workloads, &sizes)],
            false,
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(matches!(out[0], Payload::WorkloadEndpointUpdate(_)));
    }

    #[test]
    fn writes_are_restores_and_nft_transactions_only() {
        let req = |p: &str, a: &[&str]| CommandRequest {
            program: p.to_string(),
            args: a.iter().map(|s| s.to_string()).collect(),
            stdin: None,
        };
        let ipt = Backend::Iptables;
        let nft = Backend::Nftables;
        assert!(is_write(ipt, &req("iptables-nft-restore", &["--noflush"])));
        assert!(is_write(ipt, &req("ipset", &["restore", "-exist"])));
        assert!(!is_write(
            ipt,
            &req("iptables-legacy-restore", &["--noflush"])
        ));
        assert!(!is_write(ipt, &req("iptables-nft-save", &["-t", "filter"])));
        assert!(!is_write(ipt, &req("ipset", &["list", "-n"])));
        assert!(!is_write(ipt, &req("nft", &["-f", "-"])));
        assert!(is_write(nft, &req("nft", &["-f", "-"])));
        assert!(!is_write(
            nft,
            &req("nft", &["-j", "list", "table", "ip", "calico"])
        ));
        assert_eq!(
            command_label(&req("ip", &["-4", "route", "show", "table", "main"])),
            "ip route show"
        );
    }

    #[test]
    fn the_default_backends_are_all_three_and_each_configures_its_mode() {
        use clap::ValueEnum;
        use felix_config::DataplaneMode;
        assert_eq!(
            Backend::ALL,
            [Backend::Iptables, Backend::Nftables, Backend::Bpf]
        );
        for b in Backend::ALL {
            // The name the outer process passes to the child parses back.
            assert_eq!(Backend::from_str(b.as_str(), false), Ok(b));
        }
        let mode = |b| config(b).expect("valid config").dataplane_mode();
        assert_eq!(mode(Backend::Iptables), DataplaneMode::Iptables);
        assert_eq!(mode(Backend::Nftables), DataplaneMode::Nftables);
        assert_eq!(mode(Backend::Bpf), DataplaneMode::Bpf);
        let bpf = config(Backend::Bpf).expect("valid config");
        assert_eq!(
            bpf.nftables_mode(),
            felix_config::NftablesMode::Disabled,
            "BPF mode keeps iptables rules"
        );
        assert!(!is_write(
            Backend::Bpf,
            &CommandRequest {
                program: "iptables-nft-restore".into(),
                args: vec!["--noflush".into()],
                stdin: None,
            }
        ));
    }

    #[test]
    fn bpf_operations_are_counted_per_step_from_the_seam_metrics() {
        let m = Metrics::new();
        m.record_seam_op(BPF_DRIVER, op::MAP_UPDATE, Duration::from_millis(2), true);
        m.record_seam_op(
            "driver/iptables-filter-v4",
            op::MAP_UPDATE,
            Duration::ZERO,
            true,
        );
        let before = bpf_op_totals(&m);
        for _ in 0..3 {
            m.record_seam_op(BPF_DRIVER, op::MAP_UPDATE, Duration::from_millis(1), true);
        }
        m.record_seam_op(BPF_DRIVER, op::MAP_DELETE, Duration::from_millis(1), true);
        m.record_seam_op(BPF_DRIVER, op::MAP_LOOKUP, Duration::from_millis(1), true);
        let fig = Figure {
            bpf_ops: bpf_op_delta(&before, &bpf_op_totals(&m)),
            ..Figure::default()
        };
        let names: Vec<&str> = fig.bpf_ops.iter().map(|(o, _, _)| o.as_str()).collect();
        assert_eq!(names, vec!["map_delete", "map_lookup", "map_update"]);
        assert_eq!(fig.map_writes(), 4, "updates and deletes, lookups not");
        assert_eq!(
            bpf_raw_what(&fig),
            "no raw tool; 4 BPF map writes (3 map_update, 1 map_delete)"
        );
        let t = fig.bpf_time().as_secs_f64() * 1e3;
        assert!((t - 5.0).abs() < 1e-6, "{t}");
    }

    #[test]
    fn summary_lines_round_trip_and_the_table_puts_the_backends_side_by_side() {
        let ipt = SummaryLine {
            backend: "iptables".into(),
            ours: [4119.0, 29.0, 35.8],
            raw: [3662.0, 35.2, 47.6],
            writes: [0, 0, 0],
        };
        let bpf = SummaryLine {
            backend: "bpf".into(),
            ours: [2500.5, 12.3, 20.0],
            raw: [0.0; 3],
            writes: [500_123, 3, 9],
        };
        for r in [&ipt, &bpf] {
            assert_eq!(SummaryLine::parse(&r.line()).as_ref(), Some(r));
        }
        assert_eq!(SummaryLine::parse("dataplane bpf: 200 workloads"), None);
        assert_eq!(SummaryLine::parse("DATAPLANE backend=bpf ours=1,2"), None);
        let t = summary_table(&[ipt, bpf], &small());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(
            lines[1].contains("iptables") && lines[1].contains("bpf"),
            "{t}"
        );
        assert!(lines[3].starts_with("  changed policy"), "{t}");
        assert!(lines[3].contains("29.0 (35.2)"), "{t}");
        assert!(lines[3].contains("12.3 (3)"), "{t}");
        assert!(
            lines[5].contains("12.3 ms") && lines[5].ends_with("not met"),
            "{t}"
        );
    }

    #[test]
    fn the_bpf_policy_path_breakdown_writes_each_change_of_the_generated_input() {
        let sizes = small();
        let mut graph = CalcGraph::new(HOST);
        let mut view = DataplaneView::new();
        let (start, _, _) = calc_step(&mut graph, &mut view, start_of_day_input(&sizes), true);
        let mut change = |shift| {
            let (mut out, _, _) =
                calc_step(&mut graph, &mut view, vec![policy(0, &sizes, shift)], false);
            out.remove(0)
        };
        let changes = [change(1), change(2)];
        let p = super::super::bpf_path::measure(
            &start,
            &changes,
            std::path::Path::new("/nonexistent-sysfs"),
        );
        assert_eq!(p.interfaces, sizes.workloads);
        assert!(p.records > 0, "every round is a real change: {p:?}");
        assert!(p.to_string().contains("manager pass"), "{p}");
    }

    #[test]
    fn nft_rule_count_skips_chain_headers() {
        let listing = "table ip calico {\n\tchain a {\n\t\ttype filter hook input priority 0; policy accept;\n\t\tct state established accept\n\t\tdrop\n\t}\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n";
        assert_eq!(nft_rule_count(listing), 2);
    }
}
