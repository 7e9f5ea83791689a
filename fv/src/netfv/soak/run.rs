//! One soak from setup to verdict: the node and its workloads, felix's
//! first start (RSS with no endpoint and with all of them), the chaos phase
//! (churn, probes, long-lived connections, foreign writer and the chaos
//! schedule all at once), a steady-churn phase without chaos for RSS, an
//! idle window for CPU, and the final inventory against a fresh felix
//! started on the final datastore in a fresh node with the same interfaces.
//!
//! Invariants checked here: `rss-growth`, `idle-cpu`, `inventory-matches`
//! (the others are checked by the modules that observe them).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::chaos::{self, Action, Felix};
use super::churn::{self, ChurnControl, Truth};
use super::flows::FlowBook;
use super::inventory;
use super::model::{
    self, fixed_policies_yaml, policy_file, policy_yaml, Model, WepState, ACCESS, GROUPS, PORT,
};
use super::prober::{self, Endpoint};
use super::report::Report;
use super::resources;
use super::timeline::Timeline;
use super::{foreign, lock, Config, Shared};
use crate::netfv::daemon::{Backend, BpfFs, Daemon};
use crate::netfv::datastore::{cluster_yaml, namespace_yaml};
use crate::netfv::sandbox::{plug_workload, Workload, WorkloadSpec};
use crate::netfv::{Datastore, Sandbox};
use felix_netns::Netns;

/// Stable workloads (the first ones): never churned, they hold the
/// long-lived connections.
pub const STABLE: usize = 8;
/// Flows sampled for the new-connection probes.
pub const FLOWS: usize = 400;
/// Allowed and denied probes started per 50 ms.
pub const PROBES_PER_KIND: usize = 2;
/// A probe's connect and answer timeout.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Time between two foreign-writer changes.
pub const FOREIGN_PERIOD: Duration = Duration::from_millis(400);

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The initial model: every endpoint present, random labels, a random
/// quarter of the allow policies, ten workloads in the network set.
fn initial_model(n: usize, rng: &mut StdRng) -> Model {
    let weps = (0..n)
        .map(|i| WepState {
            present: true,
            group: rng.random_range(0..GROUPS),
            access: rng.random_range(0..ACCESS),
            quarantined: false,
            stable: i < STABLE,
        })
        .collect();
    let mut policies = std::collections::BTreeSet::new();
    while policies.len() < usize::from(GROUPS) * usize::from(ACCESS) / 4 {
        policies.insert((rng.random_range(0..GROUPS), rng.random_range(0..ACCESS)));
    }
    let netset = (0..10).map(|_| rng.random_range(0..n)).collect();
    Model {
        weps,
        policies,
        netset,
    }
}

/// Plugs workloads `0..n` into `node` (four at a time), each serving [`PORT`].
fn plug_all(node: &Netns, n: usize, tag: &str) -> Result<Vec<Workload>> {
    let names: Vec<(usize, String, String)> = (0..n)
        .map(|i| (i, model::name(i), model::iface(i)))
        .collect();
    let mut out: Vec<Option<Workload>> = (0..n).map(|_| None).collect();
    for chunk in names.chunks(4) {
        let plugged: Vec<Result<Workload>> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .map(|(i, name, iface)| {
                    s.spawn(move || {
                        plug_workload(
                            node,
                            &format!("fvs2-{}-{tag}-{name}", std::process::id()),
                            WorkloadSpec {
                                name,
                                iface,
                                ip4: model::ip4(*i),
                                ip6: model::ip6(*i),
                                ports: &[PORT],
                            },
                            true,
                        )
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("plug thread panicked")))
                })
                .collect()
        });
        for ((i, name, _), w) in chunk.iter().zip(plugged) {
            out[*i] = Some(w.with_context(|| format!("plugging {name}"))?);
        }
    }
    out.into_iter()
        .map(|w| w.ok_or_else(|| anyhow!("workload not plugged")))
        .collect()
}

/// The reference node: a fresh node namespace with the same `cali*`
/// interfaces (veths whose peers are up in a sink namespace) and the same
/// interface settings the CNI wiring made, nothing else.
fn reference_node(present: &[usize]) -> Result<(Sandbox, Netns)> {
    let sb = Sandbox::new()?;
    let sink = Netns::unique("fvs2-soaksink")?;
    let mut node_batch = String::new();
    let mut sink_batch = String::new();
    let mut sysctls = vec!["-q".to_string(), "-w".to_string()];
    for &i in present {
        let iface = model::iface(i);
        node_batch.push_str(&format!(
            "link add {iface} type veth peer name e{i} netns {}\nlink set {iface} address ee:ee:ee:ee:ee:ee\n\
             link set {iface} up\n",
            sink.name()
        ));
        sink_batch.push_str(&format!("link set e{i} up\n"));
        sysctls.extend([
            format!("net.ipv4.conf.{iface}.proxy_arp=1"),
            format!("net.ipv4.neigh.{iface}.proxy_delay=0"),
            format!("net.ipv4.conf.{iface}.forwarding=1"),
            format!("net.ipv6.conf.{iface}.forwarding=1"),
        ]);
    }
    felix_netns::run_checked(
        "ip",
        &["-n", sb.node.name(), "-batch", "-"],
        Some(node_batch.as_bytes()),
    )?;
    felix_netns::run_checked(
        "ip",
        &["-n", sink.name(), "-batch", "-"],
        Some(sink_batch.as_bytes()),
    )?;
    let args: Vec<&str> = sysctls.iter().map(String::as_str).collect();
    sb.node.exec("sysctl", &args)?;
    Ok((sb, sink))
}

/// RSS of `pid`: the median of five samples over two seconds.
fn steady_rss(pid: u32) -> u64 {
    resources::median_rss(&resources::sample_for(
        pid,
        Duration::from_secs(2),
        Duration::from_millis(500),
    ))
}

/// Runs one soak in `backend` mode with `cfg`; the report (also when it
/// holds violations). `Err` only when the soak itself could not run.
pub fn soak(backend: Backend, cfg: &Config) -> Result<Report> {
    let mode = format!("{backend:?}").to_lowercase();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let tag = format!("soak{}", SEQ.fetch_add(1, Ordering::Relaxed));
    let n = cfg.workloads;

    // The datastore without endpoints, the node and its workloads.
    let ds = Datastore::new()?;
    ds.write("cluster", &cluster_yaml(&[]))?;
    ds.write("namespaces", &namespace_yaml("soak", &[]))?;
    ds.write("pol-soak-fixed", &fixed_policies_yaml())?;
    let model0 = initial_model(n, &mut rng);
    for &(g, a) in &model0.policies {
        ds.write(&policy_file(g, a), &policy_yaml(g, a))?;
    }
    ds.write("netset-trusted", &model0.netset_yaml())?;
    let sandbox = Sandbox::new()?;
    let bpffs = match backend {
        Backend::Bpf => Some(BpfFs::new(&tag)?),
        _ => None,
    };
    let t_plug = felix_actors::clock::real_now();
    let workloads = plug_all(&sandbox.node, n, &tag)?;
    eprintln!(
        "soak {mode}: {n} workloads plugged in {:.1} s",
        t_plug.elapsed().as_secs_f64()
    );
    let endpoints: Vec<Endpoint> = workloads
        .iter()
        .map(|w| Endpoint {
            ns: w.ns.name().to_string(),
            ip4: w.ip4.into(),
            ip6: w.ip6.into(),
        })
        .collect();

    let shared = Shared {
        truth: Truth {
            model: Mutex::new(model0.clone()),
            flows: Mutex::new(FlowBook::sample(
                &model0,
                0,
                &mut rng,
                felix_actors::clock::real_now(),
            )),
        },
        timeline: Mutex::new(Timeline::new()),
        report: Mutex::new(Report::default()),
        bounds: cfg.bounds,
    };
    let mut felix = Felix {
        node: &sandbox.node,
        ds_dir: ds.path(),
        scratch: ds.scratch(),
        backend,
        bpffs: bpffs.as_ref().map(BpfFs::path),
        daemon: None,
    };

    // First start with no endpoint, then every endpoint: RSS per endpoint.
    felix.daemon = Some(match felix.bpffs {
        Some(fs) => {
            Daemon::start_with_bpffs(felix.node, &felix.ds_dir, felix.scratch, backend, &[], fs)?
        }
        None => Daemon::start(felix.node, &felix.ds_dir, felix.scratch, backend, &[])?,
    });
    felix.d()?.wait_converged(0)?;
    let pid = felix
        .pid()
        .ok_or_else(|| anyhow!("felix's pid not found"))?;
    let rss0 = steady_rss(pid);
    let before = felix.d()?.applies();
    for i in 0..n {
        churn::write_wep(&ds, &model0, i)?;
    }
    let written = felix_actors::clock::real_now();
    *lock(&shared.truth.flows) = FlowBook::sample(&model0, FLOWS, &mut rng, written);
    felix.d()?.wait_converged(before)?;
    let rss_all = steady_rss(pid);
    {
        let mut tl = lock(&shared.timeline);
        let now = felix_actors::clock::real_now();
        tl.up_from(now);
        tl.event("all endpoints programmed");
    }
    lock(&shared.report).rss_endpoints = (rss0, rss_all, n);

    // The chaos phase, then steady churn for the memory figures.
    let churn_ctl = ChurnControl::default();
    churn_ctl.set_rate(cfg.churn_rate);
    let stop = AtomicBool::new(false);
    let pairs: Vec<(usize, usize, bool)> = (0..STABLE)
        .map(|i| (i, (i + 1) % STABLE, i % 2 == 1))
        .collect();
    let seeds: [u64; 5] = std::array::from_fn(|_| rng.random());
    let mut memory: Vec<(resources::Sample, u64)> = Vec::new();
    let phase_result: Result<()> = std::thread::scope(|s| {
        let churn_h = s.spawn(|| {
            churn::run(
                &ds,
                &shared.truth,
                &churn_ctl,
                StdRng::seed_from_u64(seeds[0]),
            )
        });
        let probe_h = s.spawn(|| {
            prober::probe_loop(
                &shared,
                &endpoints,
                PROBES_PER_KIND,
                PROBE_TIMEOUT,
                &stop,
                StdRng::seed_from_u64(seeds[1]),
            )
        });
        let hold_h =
            s.spawn(|| prober::hold_loop(&shared, &endpoints, &pairs, cfg.bounds.stall, &stop));
        let foreign_h = s.spawn(|| {
            foreign::run(
                &sandbox.node,
                &shared,
                FOREIGN_PERIOD,
                &stop,
                StdRng::seed_from_u64(seeds[2]),
            )
        });
        let mut chaos_rng = StdRng::seed_from_u64(seeds[3]);
        let phases = (|| -> Result<()> {
            let start = felix_actors::clock::real_now();
            let mut paced = false;
            while start.elapsed() < cfg.duration {
                let wait = cfg.kill_interval.mul_f64(chaos_rng.random_range(0.5..1.5));
                let t = felix_actors::clock::real_now();
                while t.elapsed() < wait && start.elapsed() < cfg.duration {
                    felix.check_alive(&shared)?;
                    std::thread::sleep(Duration::from_millis(100));
                }
                if start.elapsed() >= cfg.duration {
                    break;
                }
                if !paced && start.elapsed() >= cfg.duration / 2 {
                    paced = true;
                    chaos::pacing_check(&mut felix, &shared).context("pacing check")?;
                    continue;
                }
                let action = Action::pick(&mut chaos_rng);
                chaos::act(&mut felix, &shared, action, &mut chaos_rng)
                    .with_context(|| format!("chaos action {action:?}"))?;
            }
            lock(&shared.timeline).event("chaos phase over");
            churn_ctl.set_rate(cfg.memory_churn_rate);
            let pid = felix
                .pid()
                .ok_or_else(|| anyhow!("felix's pid not found"))?;
            let start = felix_actors::clock::real_now();
            while start.elapsed() < cfg.memory_phase {
                felix.check_alive(&shared)?;
                if let Some(s) = resources::sample(pid) {
                    memory.push((s, churn_ctl.updates.load(Ordering::Relaxed)));
                }
                std::thread::sleep(Duration::from_millis(1000));
            }
            Ok(())
        })();
        churn_ctl.stop.store(true, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        let joined = [
            ("churn", churn_h.join()),
            (
                "probes",
                probe_h.join().map(|()| Ok::<(), anyhow::Error>(())),
            ),
            ("long-lived connections", hold_h.join()),
            ("foreign writer", foreign_h.join()),
        ];
        phases?;
        for (what, j) in joined {
            j.map_err(|_| anyhow!("{what} thread panicked"))?
                .with_context(|| what.to_string())?;
        }
        Ok(())
    });
    let updates = churn_ctl.updates.load(Ordering::Relaxed);
    lock(&shared.report).updates = updates;
    if let Err(e) = phase_result {
        let r = std::mem::take(&mut *lock(&shared.report));
        eprintln!("{}", r.summary(&mode, 0.0));
        return Err(e);
    }
    rss_growth(&shared, &memory);

    // Endpoints absent at the end are deleted pods: their interfaces go, as
    // the CNI plugin deletes them (felix configured them while they were
    // endpoints and, as upstream, leaves an interface's settings to the
    // interface's own lifetime).
    let final_model = lock(&shared.truth.model).clone();
    let present: Vec<usize> = (0..n).filter(|&i| final_model.weps[i].present).collect();
    for i in (0..n).filter(|&i| !final_model.weps[i].present) {
        sandbox.node.ip(&["link", "del", &model::iface(i)])?;
    }

    // Idle: no change at all (once felix has handled the interfaces' removal).
    std::thread::sleep(Duration::from_millis(1500));
    felix.check_alive(&shared)?;
    let applies = felix.d()?.applies();
    felix.d()?.wait_converged(applies.saturating_sub(1))?;
    let pid = felix
        .pid()
        .ok_or_else(|| anyhow!("felix's pid not found"))?;
    let idle = resources::sample_for(pid, cfg.idle_phase, cfg.idle_phase);
    let idle_cpu = match (idle.first(), idle.last()) {
        (Some(a), Some(b)) => resources::cpu_between(a, b).unwrap_or(f64::NAN),
        _ => f64::NAN,
    };
    {
        let mut r = lock(&shared.report);
        r.idle_cpu = idle_cpu;
        if idle_cpu.is_nan() || idle_cpu > cfg.bounds.idle_cpu {
            r.violate(
                "idle-cpu",
                format!(
                    "felix used {:.2} % of a core over {:?} with no change (bound {:.2} %)",
                    idle_cpu * 100.0,
                    cfg.idle_phase,
                    cfg.bounds.idle_cpu * 100.0
                ),
            );
        }
    }

    // The final inventory against a fresh felix on the final datastore.
    let ours = inventory::take(&sandbox.node, bpffs.as_ref().map(BpfFs::root).as_deref())?;
    let (ref_sb, _sink) = reference_node(&present)?;
    let ref_scratch = tempfile::Builder::new().prefix("fvs2-soakref-").tempdir()?;
    let ref_fs = match backend {
        Backend::Bpf => Some(BpfFs::new(&format!("{tag}-ref"))?),
        _ => None,
    };
    let mut reference = match &ref_fs {
        Some(fs) => Daemon::start_with_bpffs(
            &ref_sb.node,
            &ds.path(),
            ref_scratch.path(),
            backend,
            &[],
            fs.path(),
        )?,
        None => Daemon::start(&ref_sb.node, &ds.path(), ref_scratch.path(), backend, &[])?,
    };
    reference.wait_converged(0)?;
    let theirs = inventory::take(&ref_sb.node, ref_fs.as_ref().map(BpfFs::root).as_deref())?;
    reference.stop().context("stopping the reference felix")?;
    let (extra, missing) = ours.diff(&theirs);
    {
        let mut r = lock(&shared.report);
        r.inventory_items = ours.len();
        if theirs.is_empty() {
            r.violate(
                "inventory-matches",
                "the reference inventory is empty: nothing compared",
            );
        }
        if !extra.is_empty() || !missing.is_empty() {
            let show = |v: &[String]| {
                v.iter()
                    .take(40)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n    ")
            };
            r.violate(
                "inventory-matches",
                format!(
                    "the kernel after the soak differs from a fresh felix on the final datastore: \
                     {} object(s) left over (leaked):\n    {}\n  {} object(s) missing:\n    {}",
                    extra.len(),
                    show(&extra),
                    missing.len(),
                    show(&missing)
                ),
            );
        }
    }

    if let Some(d) = felix.daemon.take() {
        if let Err(e) = d.stop() {
            lock(&shared.report).violate("clean-stop", format!("final SIGTERM: {e:#}"));
        }
    }
    let secs = lock(&shared.timeline).start().elapsed().as_secs_f64();
    let report = std::mem::take(&mut *lock(&shared.report));
    eprintln!("{}", report.summary(&mode, secs));
    drop(workloads);
    Ok(report)
}

/// RSS growth over the steady-churn phase, after a warm-up half (a young
/// process fills its caches, log ring and metric windows first): the
/// least-squares slope of RSS over datastore updates, as a percentage of the
/// mean RSS per hour-equivalent of churn (3,600 updates, one a second for an
/// hour).
fn rss_growth(shared: &Shared, samples: &[(resources::Sample, u64)]) {
    let rest = &samples[samples.len() / 2..];
    let mut r = lock(&shared.report);
    let span = match (rest.first(), rest.last()) {
        (Some(a), Some(b)) => b.1.saturating_sub(a.1),
        _ => 0,
    };
    if rest.len() < 5 || span == 0 || rest.iter().any(|(s, _)| s.pid != rest[0].0.pid) {
        r.violate(
            "rss-growth",
            format!(
                "{} RSS samples over {span} updates after the warm-up (one process): too few to measure",
                rest.len()
            ),
        );
        return;
    }
    let n = rest.len() as f64;
    let mx = rest.iter().map(|(_, u)| *u as f64).sum::<f64>() / n;
    let my = rest.iter().map(|(s, _)| s.rss_kib as f64).sum::<f64>() / n;
    let sxy: f64 = rest
        .iter()
        .map(|(s, u)| (*u as f64 - mx) * (s.rss_kib as f64 - my))
        .sum();
    let sxx: f64 = rest.iter().map(|(_, u)| (*u as f64 - mx).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let pct = slope * 3600.0 / my * 100.0;
    r.rss_kib = (rest[0].0.rss_kib, rest[rest.len() - 1].0.rss_kib);
    r.rss_growth_pct_per_hour_eq = pct;
    if pct > shared.bounds.rss_growth_pct {
        let series: Vec<String> = samples
            .iter()
            .map(|(s, u)| format!("{u}:{}", s.rss_kib))
            .collect();
        r.violate(
            "rss-growth",
            format!(
                "RSS grows {slope:.2} KiB per update over {span} updates of steady churn after \
                 the warm-up: {pct:.2} % per hour-equivalent (3,600 updates), bound {} %; \
                 (updates:KiB) {}",
                shared.bounds.rss_growth_pct,
                series.join(" ")
            ),
        );
    }
}
