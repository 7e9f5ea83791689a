//! Dataplane FV, `felix explain` against the kernel (issue 23, item 2): for
//! random policy worlds and random flows, the verdict `felix explain` gives
//! for a flow must be what real traffic through the dataplane gets, in
//! iptables and nftables modes.
//!
//! One node namespace, seven dual-stack workloads in three namespaces (see
//! `felix_fv::netfv::explain_gen`), each serving TCP and UDP on six ports and
//! answering pings. Per seed, a random world (labels, named ports, profiles,
//! tiers, global and namespaced policies) is written to the file datastore as
//! one file; once the daemon has applied it, each flow is asked of
//! `felix explain --socket` and sent for real (a TCP connection and a line
//! each way, a UDP datagram and its answer, an ICMP echo and its reply; the
//! answer must come back, so the request got through and the reply rode
//! conntrack). Every flow has a conntrack tuple of its own (explicit source
//! port or ICMP identifier), so no earlier allowed flow can let it through.
//!
//! Defaults: seeds 1..=40, 50 flows each (2,000 per mode), after a check of
//! every pair of workloads in the open world. Longer runs:
//! `FELIX_EXPLAIN_SEEDS=A..B` (inclusive, or `N` for 1..=N) and
//! `FELIX_EXPLAIN_FLOWS=<flows per seed>`. Each mode prints its figures
//! (flows, verdicts, wall time by phase) to stderr. A disagreement is
//! reported with the seed, the flow, the explain JSON and what the traffic
//! did, and the seed's world is saved to the temporary directory; a flow
//! that explain allows but whose probe timed out is probed once more with
//! the same tuple and a longer timeout before it counts (a slow first packet
//! is not a verdict), and those retries are counted in the figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use felix_fv::netfv::daemon::{felix_binary, BpfFs, DEADLINE};
use felix_fv::netfv::datastore::{cluster_yaml, Datastore};
use felix_fv::netfv::explain_gen::{
    Flow, Proto, TupleAlloc, World, MARKER_LABEL, NAMESPACES, SERVER_PORTS, WORKLOADS,
};
use felix_fv::netfv::probes::{self, Outcome, UdpServer};
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Daemon, Sandbox, TOOLS};

/// How long a probe waits for its answer (a denied flow costs this much).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// The timeout of the second probe of an allowed flow that timed out.
const RETRY_TIMEOUT: Duration = Duration::from_secs(2);
/// Probes in flight at once.
const PARALLEL_PROBES: usize = 128;
/// `felix explain` processes running at once.
const PARALLEL_EXPLAINS: usize = 4;
/// Seeds run by default.
const DEFAULT_SEEDS: RangeInclusive<u64> = 1..=40;
/// Flows per seed by default.
const DEFAULT_FLOWS: usize = 50;

/// The two modes run one after the other: they would compete for the CPU
/// (and the timing figures would mean little).
static SERIAL: Mutex<()> = Mutex::new(());

fn seeds() -> Result<RangeInclusive<u64>> {
    let Ok(s) = std::env::var("FELIX_EXPLAIN_SEEDS") else {
        return Ok(DEFAULT_SEEDS);
    };
    let s = s.trim();
    let bad = || anyhow!("FELIX_EXPLAIN_SEEDS={s:?}: expected N or A..B");
    if let Some((a, b)) = s.split_once("..") {
        let a: u64 = a.trim().parse().map_err(|_| bad())?;
        let b: u64 = b
            .trim_start_matches('=')
            .trim()
            .parse()
            .map_err(|_| bad())?;
        Ok(a..=b)
    } else {
        let n: u64 = s.parse().map_err(|_| bad())?;
        Ok(1..=n)
    }
}

fn flows_per_seed() -> Result<usize> {
    match std::env::var("FELIX_EXPLAIN_FLOWS") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| anyhow!("FELIX_EXPLAIN_FLOWS={s:?}: expected a number")),
        Err(_) => Ok(DEFAULT_FLOWS),
    }
}

/// The node, its workloads and servers, the datastore and the daemon.
struct Bench {
    // Field order is drop order: the daemon, the UDP servers, then the
    // namespaces, then the files.
    daemon: Daemon,
    _udp: Vec<UdpServer>,
    sandbox: Sandbox,
    ds: Datastore,
    /// eBPF mode's bpffs (after the daemon: unmounted once it is gone).
    _bpffs: Option<BpfFs>,
    backend: Backend,
    felix: PathBuf,
    socket: PathBuf,
    /// How much of the daemon's log has been checked for rejected resources.
    log_seen: usize,
}

impl Bench {
    /// Plugs the workloads in, writes the open world and starts the daemon.
    fn new(backend: Backend) -> Result<Bench> {
        let ds = Datastore::new()?;
        ds.write("cluster", &cluster_yaml(&[]))?;
        let mut sandbox = Sandbox::new()?;
        let mut udp = Vec::new();
        for w in &WORKLOADS {
            sandbox.add_workload(w.pod, w.iface, w.ip4(), w.ip6(), &SERVER_PORTS)?;
            let ns = sandbox.workload(w.pod)?.ns.name().to_string();
            udp.push(UdpServer::start(&ns, w.pod, &SERVER_PORTS)?);
        }
        write_world(&ds, &World::open())?;
        let bpffs = match backend {
            Backend::Bpf => Some(BpfFs::new("explain")?),
            _ => None,
        };
        let mut daemon = match &bpffs {
            Some(fs) => Daemon::start_with_bpffs(
                &sandbox.node,
                &ds.path(),
                ds.scratch(),
                backend,
                &[],
                fs.path(),
            )?,
            None => Daemon::start(&sandbox.node, &ds.path(), ds.scratch(), backend, &[])?,
        };
        daemon.wait_converged(0)?;
        let st = daemon.status().unwrap_or_default();
        anyhow::ensure!(
            felix_fv::netfv::daemon::dataplane_name(&st) == backend.status_name(),
            "daemon reports dataplane {} instead of {}",
            st["dataplane"],
            backend.status_name()
        );
        let socket = ds.scratch().join("admin.sock");
        let mut bench = Bench {
            daemon,
            _udp: udp,
            sandbox,
            ds,
            _bpffs: bpffs,
            backend,
            felix: felix_binary()?,
            socket,
            log_seen: 0,
        };
        bench.wait_world(&World::open(), 0)?;
        Ok(bench)
    }

    /// Writes `world` and waits until the daemon has applied it.
    fn apply(&mut self, world: &World) -> Result<()> {
        let before = self.daemon.applies();
        write_world(&self.ds, world)?;
        self.wait_world(world, before)
    }

    /// Waits until the daemon's view holds `world` (every namespace carries
    /// its marker label, every endpoint is there), an apply after `before` left everything clean and no
    /// further apply follows; fails when the daemon rejected a resource of
    /// the world (a generator bug, or a validation difference to report).
    fn wait_world(&mut self, world: &World, before: u64) -> Result<()> {
        let marker = world.marker.as_str();
        poll(DEADLINE, || {
            let view = self.daemon.admin_json(&["dataplane"])?;
            let weps = view["workloadEndpoints"].as_array()?;
            let namespaces = view["namespaces"].as_array()?;
            let all = weps.len() == WORKLOADS.len()
                && namespaces.len() == NAMESPACES.len()
                && namespaces
                    .iter()
                    .all(|n| n["labels"][MARKER_LABEL] == marker);
            all.then_some(())
        })
        .with_context(|| format!("the daemon's view never showed world {marker}"))?;
        let mut applies = self.daemon.wait_converged(before)?;
        // Settled: still clean, with no new apply, a moment later.
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let now = self.daemon.wait_converged(0)?;
            if now == applies {
                break;
            }
            applies = now;
        }
        let log = self.daemon.log_text();
        let fresh = log.get(self.log_seen..).unwrap_or_default();
        let rejected: Vec<&str> = fresh
            .lines()
            .filter(|l| l.contains("ERROR") && l.contains("world.json"))
            .collect();
        self.log_seen = log.len();
        if !rejected.is_empty() {
            bail!(
                "the daemon rejected resources of world {marker}:\n{}\nworld:\n{}",
                rejected.join("\n"),
                world.json()
            );
        }
        Ok(())
    }

    /// `felix explain --socket S FLOW` for every flow, a few at a time.
    fn explain_all(&self, flows: &[Flow]) -> Vec<Result<Value>> {
        let chunk = flows.len().div_ceil(PARALLEL_EXPLAINS).max(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = flows
                .chunks(chunk)
                .map(|c| {
                    s.spawn(move || {
                        c.iter()
                            .map(|f| explain(&self.felix, &self.socket, f))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| vec![Err(anyhow!("explain thread panicked"))])
                })
                .collect()
        })
    }

    /// Probes every flow (many at once), with `timeout` per probe.
    fn probe_all(&self, flows: &[&Flow], timeout: Duration) -> Result<Vec<Outcome>> {
        let mut namespaces = Vec::new();
        for w in &WORKLOADS {
            namespaces.push(self.sandbox.workload(w.pod)?.ns.name().to_string());
        }
        let mut out = Vec::with_capacity(flows.len());
        for batch in flows.chunks(PARALLEL_PROBES) {
            let results: Vec<Result<Outcome>> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|f| {
                        let ns = namespaces[f.src].as_str();
                        s.spawn(move || probe(ns, f, timeout))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow!("probe thread panicked")))
                    })
                    .collect()
            });
            for (f, r) in batch.iter().zip(results) {
                let o = r.with_context(|| format!("probing {f}"))?;
                if o.reached && f.proto != Proto::Icmp && o.detail != f.dst_wl().pod {
                    bail!("probe {f} was answered by {:?}", o.detail);
                }
                out.push(o);
            }
        }
        Ok(out)
    }
}

fn write_world(ds: &Datastore, world: &World) -> Result<()> {
    let tmp = ds.scratch().join(".world.json.tmp");
    std::fs::write(&tmp, world.json()).context("writing the world")?;
    std::fs::rename(&tmp, ds.path().join("world.json")).context("renaming the world")?;
    Ok(())
}

fn explain(felix: &Path, socket: &Path, flow: &Flow) -> Result<Value> {
    let args = flow.explain_args();
    let out = Command::new(felix)
        .arg("explain")
        .arg("--socket")
        .arg(socket)
        .args(&args)
        .output()
        .context("running felix explain")?;
    if !out.status.success() {
        bail!(
            "felix explain {} exited with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "felix explain {} printed no JSON: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn probe(ns: &str, f: &Flow, timeout: Duration) -> Result<Outcome> {
    match f.proto {
        Proto::Tcp => probes::tcp(ns, f.src_port, f.dst_ip(), f.dst_port, timeout),
        Proto::Udp => probes::udp(ns, f.src_port, f.dst_ip(), f.dst_port, timeout),
        Proto::Icmp => probes::icmp_echo(ns, f.dst_ip(), f.icmp_id, timeout),
    }
}

/// What one mode's run found.
#[derive(Default)]
struct Figures {
    flows: usize,
    allowed: usize,
    by_proto: [(usize, usize); 3],
    retried: usize,
    retried_ok: usize,
    /// How the legs were decided: `egress rule Allow (policy)`, ... -> count.
    decided: BTreeMap<String, usize>,
    disagreements: Vec<String>,
    errors: Vec<String>,
    apply_time: Duration,
    explain_time: Duration,
    probe_time: Duration,
}

/// What decided a leg, without the names: `ingress rule Deny (policy)`,
/// `egress tierDefault Deny`, `ingress noMatch`, ...
fn decided_key(dir: &str, leg: &Value) -> String {
    let d = &leg["decidedBy"];
    let kind = d["kind"].as_str().unwrap_or("?");
    let mut key = format!("{dir} {kind}");
    if let Some(a) = d["action"].as_str() {
        let _ = write!(key, " {a}");
    }
    if kind == "rule" {
        key.push_str(if d.get("profile").is_some() {
            " (profile)"
        } else {
            " (policy)"
        });
    }
    key
}

fn proto_index(p: Proto) -> usize {
    match p {
        Proto::Tcp => 0,
        Proto::Udp => 1,
        Proto::Icmp => 2,
    }
}

/// Runs `flows` in the world now applied and records what they show.
fn check_flows(
    b: &Bench,
    label: &str,
    world: &World,
    flows: &[Flow],
    fig: &mut Figures,
) -> Result<()> {
    let t = felix_actors::clock::real_now();
    let explained = b.explain_all(flows);
    fig.explain_time += t.elapsed();
    let t = felix_actors::clock::real_now();
    let all: Vec<&Flow> = flows.iter().collect();
    let outcomes = b.probe_all(&all, PROBE_TIMEOUT)?;
    // An allowed flow whose probe got no answer gets a second, slower probe
    // with the same tuple (a denied first packet left no conntrack entry).
    let slow: Vec<usize> = (0..flows.len())
        .filter(|&i| {
            !outcomes[i].reached && explained[i].as_ref().is_ok_and(|v| v["verdict"] == "allow")
        })
        .collect();
    let retry_flows: Vec<&Flow> = slow.iter().map(|&i| &flows[i]).collect();
    let retries = b.probe_all(&retry_flows, RETRY_TIMEOUT)?;
    fig.probe_time += t.elapsed();
    let mut saved = false;
    for (i, (flow, (exp, outcome))) in flows
        .iter()
        .zip(explained.iter().zip(&outcomes))
        .enumerate()
    {
        fig.flows += 1;
        let exp = match exp {
            Ok(v) => v,
            Err(e) => {
                fig.errors.push(format!("{label} flow {flow}: {e:#}"));
                continue;
            }
        };
        let allow = match exp["verdict"].as_str() {
            Some("allow") => true,
            Some("deny") => false,
            _ => {
                fig.errors.push(format!(
                    "{label} flow {flow}: explain gave no verdict: {exp}"
                ));
                continue;
            }
        };
        for dir in ["egress", "ingress"] {
            let leg = &exp[dir];
            if leg.is_object() {
                *fig.decided.entry(decided_key(dir, leg)).or_default() += 1;
            }
        }
        let p = proto_index(flow.proto);
        if allow {
            fig.allowed += 1;
            fig.by_proto[p].0 += 1;
        } else {
            fig.by_proto[p].1 += 1;
        }
        let retry = slow
            .iter()
            .position(|&j| j == i)
            .and_then(|k| retries.get(k));
        if retry.is_some() {
            fig.retried += 1;
        }
        let reached = outcome.reached || retry.is_some_and(|r| r.reached);
        if retry.is_some_and(|r| r.reached) {
            fig.retried_ok += 1;
        }
        if reached == allow {
            continue;
        }
        let mut msg = format!(
            "{label} flow {flow}: felix explain says {}, traffic {}: {}",
            if allow { "allow" } else { "deny" },
            if outcome.reached {
                "got through (answer from the server)"
            } else {
                "was blocked"
            },
            if outcome.detail.is_empty() {
                "echo reply"
            } else {
                &outcome.detail
            }
        );
        if let Some(r) = retry {
            let _ = write!(msg, "; again with {RETRY_TIMEOUT:?}: {}", r.detail);
        }
        let _ = write!(
            msg,
            "\n    felix explain {}\n    {}",
            flow.explain_args().join(" "),
            serde_json::to_string_pretty(exp)
                .unwrap_or_default()
                .replace('\n', "\n    ")
        );
        if !saved {
            saved = true;
            let path = std::env::temp_dir().join(format!(
                "felix-explain-fv-{}-seed-{}.json",
                b.backend.status_name(),
                world.seed
            ));
            match std::fs::write(&path, world.json()) {
                Ok(()) => {
                    let _ = write!(msg, "\n    world: {}", path.display());
                }
                Err(e) => {
                    let _ = write!(msg, "\n    world not saved: {e}");
                }
            }
        }
        fig.disagreements.push(msg);
    }
    Ok(())
}

fn differential(backend: Backend) -> Result<()> {
    let seeds = seeds()?;
    let per_seed = flows_per_seed()?;
    let start = felix_actors::clock::real_now();
    let mut bench = Bench::new(backend)?;
    let setup = start.elapsed();
    let mut alloc = TupleAlloc::new();
    let mut fig = Figures::default();

    // The open world: every pair, every protocol, both families, allowed.
    let open = World::open();
    let pairs = World::all_pairs(&mut alloc);
    check_flows(&bench, "open world", &open, &pairs, &mut fig)?;
    let open_flows = fig.flows;
    if fig.allowed != open_flows || !fig.disagreements.is_empty() || !fig.errors.is_empty() {
        bail!(
            "the open world does not let every flow through (the harness or the daemon is \
             broken):\n{}\n{}",
            fig.errors.join("\n"),
            fig.disagreements.join("\n")
        );
    }
    let mut fig = Figures::default();
    let mut policies = 0;
    for seed in seeds.clone() {
        let world = World::generate(seed);
        policies += world.policies;
        let t = felix_actors::clock::real_now();
        bench
            .apply(&world)
            .with_context(|| format!("{backend:?} seed {seed}"))?;
        fig.apply_time += t.elapsed();
        let flows = world.flows(per_seed, &mut alloc);
        check_flows(&bench, &format!("seed {seed}"), &world, &flows, &mut fig)?;
        let done = seed - seeds.start() + 1;
        if done % 100 == 0 {
            eprintln!(
                "netfv_explain {}: {done} seeds, {} flows, {} disagreements so far ({:.0?})",
                backend.status_name(),
                fig.flows,
                fig.disagreements.len() + fig.errors.len(),
                start.elapsed()
            );
        }
    }
    let total = start.elapsed();
    let [tcp, udp, icmp] = fig.by_proto;
    eprintln!(
        "netfv_explain {mode}: seeds {a}..={b}, {flows} flows ({per_seed} per seed; plus {open_flows} \
         open-world flows), {policies} policies; explain allow {allowed} / deny {denied} \
         (tcp {t0}/{t1}, udp {u0}/{u1}, icmp {i0}/{i1}); {retried} allowed flows probed again \
         ({retried_ok} answered then); {dis} disagreements, {err} errors; wall time {total:.1?} \
         (setup {setup:.1?}, applying worlds {apply:.1?}, explain {explain:.1?}, probes {probe:.1?})",
        mode = backend.status_name(),
        a = seeds.start(),
        b = seeds.end(),
        flows = fig.flows,
        allowed = fig.allowed,
        denied = fig.flows - fig.allowed - fig.errors.len(),
        t0 = tcp.0,
        t1 = tcp.1,
        u0 = udp.0,
        u1 = udp.1,
        i0 = icmp.0,
        i1 = icmp.1,
        retried = fig.retried,
        retried_ok = fig.retried_ok,
        dis = fig.disagreements.len(),
        err = fig.errors.len(),
        apply = fig.apply_time,
        explain = fig.explain_time,
        probe = fig.probe_time,
    );
    let decided: Vec<String> = fig
        .decided
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    eprintln!(
        "netfv_explain {}: legs decided by {}",
        backend.status_name(),
        decided.join(", ")
    );
    if !fig.disagreements.is_empty() || !fig.errors.is_empty() {
        let mut msg = format!(
            "{} of {} flows disagree with felix explain, {} could not be explained",
            fig.disagreements.len(),
            fig.flows,
            fig.errors.len()
        );
        for d in fig.errors.iter().chain(&fig.disagreements).take(60) {
            let _ = write!(msg, "\n  {d}");
        }
        bail!(msg);
    }
    Ok(())
}

fn run(backend: Backend) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = differential(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn explain_matches_kernel_iptables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Iptables);
}

#[test]
fn explain_matches_kernel_nftables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Nftables);
}

#[test]
fn explain_matches_kernel_bpf() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Bpf);
}
