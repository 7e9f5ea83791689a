//! Kernel tests of a restart of the loader over many interfaces: what a restart with the
//! same layout costs and re-does, and what a layout change still sets aside.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use felix_actors::seam::{FaultRegistry, Seam};
use felix_actors::Metrics;
use felix_bpf::ops::op;
use felix_bpf::{
    AttachOutcome, AttachPoint, BpfDataplane, BpfOps, EndpointKind, Hook, Mechanism, Options,
    PolicyKind, PolicyMaps, PolicyProgram,
};
use felix_netns::Netns;

/// `n` veth pairs `caliN` / `peerN`, both ends in `ns`, up; their `cali` ifindices.
fn veths(ns: &Netns, n: usize) -> Vec<(String, u32)> {
    let batch = std::env::temp_dir().join(format!("felix-restart-{}.ip", ns.name()));
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "link add cali{i} type veth peer name peer{i}\nlink set cali{i} up\nlink set peer{i} up\n"
        ));
    }
    std::fs::write(&batch, text).expect("batch file");
    ns.ip(&["-batch", &batch.display().to_string()])
        .expect("veths");
    let _ = std::fs::remove_file(&batch);
    (0..n)
        .map(|i| {
            let name = format!("cali{i}");
            let idx = ifindex(ns, &name);
            (name, idx)
        })
        .collect()
}

/// A loader whose operations are counted in `metrics`.
fn counted(opts: &Options) -> (BpfDataplane, BpfOps, Metrics) {
    let metrics = Metrics::new();
    let seam = Seam::new(FaultRegistry::new(), metrics.clone()).for_actor("driver/bpf");
    let ops = BpfOps::new(seam);
    let dp = BpfDataplane::start(ops.clone(), opts.clone()).expect("start");
    (dp, ops, metrics)
}

/// Programs both hooks of every interface with the policy interpreter in its slot (loaded
/// once per direction, as the driver's policy engine does).
fn program_all(
    dp: &mut BpfDataplane,
    ops: &BpfOps,
    ifaces: &[(String, u32)],
    mech: Mechanism,
) -> Vec<AttachOutcome> {
    let maps = PolicyMaps::open_or_create(ops, &dp.options().root).expect("policy maps");
    let mut interp: BTreeMap<Hook, PolicyProgram> = BTreeMap::new();
    let mut out = Vec::new();
    for (name, ifindex) in ifaces {
        for hook in Hook::ALL {
            let ap = AttachPoint {
                ifindex: *ifindex,
                name: name.clone(),
                hook,
                mechanism: mech,
                kind: EndpointKind::Workload,
                policy: PolicyKind::Rules,
            };
            let o = dp
                .apply_with(&ap, &mut |slot| {
                    let p = match interp.entry(hook) {
                        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::btree_map::Entry::Vacant(e) => {
                            let p = PolicyProgram::open_or_load(ops, &maps, mech, hook, false)?;
                            println!(
                                "interpreter {hook:?}: {} ({} ms)",
                                if p.adopted() { "adopted" } else { "loaded" },
                                ms(p.load_time())
                            );
                            e.insert(p)
                        }
                    };
                    p.install(ops, slot)
                })
                .expect("apply");
            out.push(o);
        }
        dp.set_iface(*ifindex, name, EndpointKind::Workload, true)
            .expect("ready");
    }
    out
}

/// Pins an identity no binary has in the TCX directory under `root` (what the next start
/// finds after an upgrade that changed the layout).
fn pin_other_identity(root: &std::path::Path) {
    felix_bpf::identity::pin_identity(&BpfOps::default(), &root.join("tcx"), 0x1a7e)
        .expect("other identity");
}

/// Seconds and counts per seam operation.
fn per_op(metrics: &Metrics) -> String {
    let mut parts = Vec::new();
    for o in op::ALL {
        let (n, _, secs) = metrics.seam_totals("driver/bpf", &[o]);
        if n > 0 {
            parts.push(format!("{o} {n}x {:.0} ms", secs * 1000.0));
        }
    }
    parts.join(", ")
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Where a restart over `FELIX_RESTART_IFACES` (100) interfaces spends its time.
#[test]
#[ignore = "figures: cargo test -p felix-bpf --test restart -- --ignored --nocapture restart_figures"]
fn restart_figures() {
    // Figures run by hand as root, not a gated kernel test (CI counts gated tests).
    let n: usize = std::env::var("FELIX_RESTART_IFACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let ns = std::sync::Arc::new(Netns::unique("frst").expect("netns"));
    let ifaces = veths(&ns, n);
    let root = PinRoot::new();
    let opts = root.options(false);
    ns.spawn_in(move || {
        for run in [
            "first start",
            "restart, same layout",
            "restart across a layout change",
        ] {
            if run.contains("layout change") {
                pin_other_identity(&opts.root);
            }
            let t0 = felix_actors::clock::real_now();
            let (mut dp, ops, metrics) = counted(&opts);
            let started = t0.elapsed();
            let tg = felix_actors::clock::real_now();
            for hook in Hook::ALL {
                dp.ensure_generic(Mechanism::Tcx, hook).expect("generic");
            }
            let generic = tg.elapsed();
            let t1 = felix_actors::clock::real_now();
            let outcomes = program_all(&mut dp, &ops, &ifaces, Mechanism::Tcx);
            let applied = t1.elapsed();
            let attached = outcomes
                .iter()
                .filter(|o| **o == AttachOutcome::Attached)
                .count();
            println!("{run}: generic programs {} ms", ms(generic));
            println!(
                "{run}: {n} interfaces, start {} ms, apply {} ms ({attached} of {} hooks attached); {}",
                ms(started),
                ms(applied),
                outcomes.len(),
                per_op(&metrics)
            );
        }
    })
    .join()
    .expect("test thread")
    .expect("entered netns");
}

/// Runs `f` with `n` veths in a throwaway namespace, in that namespace.
fn with_veths(n: usize, f: impl FnOnce(Vec<(String, u32)>) + Send + 'static) {
    let ns = Netns::unique("frst").expect("netns");
    let ifaces = veths(&ns, n);
    ns.spawn_in(move || f(ifaces))
        .join()
        .expect("test thread")
        .expect("entered netns");
}

#[test]
fn a_restart_with_the_same_layout_adopts_the_interpreter_and_rewrites_no_slot() {
    felix_netns::require!(netns["ip"]);
    let root = PinRoot::new();
    let opts = root.options(false);
    with_veths(4, move |ifaces| {
        let (mut dp, ops, _) = counted(&opts);
        program_all(&mut dp, &ops, &ifaces, Mechanism::Tcx);
        let interp = libbpf_rs::Program::fd_from_pinned_path(opts.root.join("tcx/cali_polr_ing"))
            .expect("interpreter pinned");
        let interp_id =
            libbpf_rs::Program::id_from_fd(std::os::fd::AsFd::as_fd(&interp)).expect("id");
        drop(dp);
        let (mut dp, ops, metrics) = counted(&opts);
        let outcomes = program_all(&mut dp, &ops, &ifaces, Mechanism::Tcx);
        assert!(
            outcomes.iter().all(|o| *o == AttachOutcome::Unchanged),
            "{outcomes:?}"
        );
        let maps = PolicyMaps::open_or_create(&ops, &opts.root).expect("policy maps");
        let p = PolicyProgram::open_or_load(&ops, &maps, Mechanism::Tcx, Hook::Ingress, false)
            .expect("interpreter");
        assert!(p.adopted(), "the pinned interpreter is adopted");
        for (_, ifindex) in &ifaces {
            let slot = dp
                .record(*ifindex, Hook::Ingress)
                .expect("record")
                .globals
                .policy_slot;
            assert_eq!(
                dp.slot_prog_id(Mechanism::Tcx, Hook::Ingress, false, slot)
                    .expect("lookup"),
                Some(interp_id),
                "the slot keeps the earlier run's interpreter"
            );
        }
        assert_eq!(metrics.seam_op_counts("driver/bpf", op::PROG_LOAD).0, 0);
        // The only map writes are the READY entries of `cali_iface`: no slot is rewritten.
        assert_eq!(
            metrics.seam_op_counts("driver/bpf", op::MAP_UPDATE).0,
            ifaces.len() as u64
        );
    });
}

#[test]
fn a_restart_across_a_layout_change_sets_the_interpreter_aside_and_loads_a_new_one() {
    felix_netns::require!(netns["ip"]);
    let root = PinRoot::new();
    let opts = root.options(false);
    with_veths(2, move |ifaces| {
        let (mut dp, ops, _) = counted(&opts);
        program_all(&mut dp, &ops, &ifaces, Mechanism::Tcx);
        drop(dp);
        pin_other_identity(&opts.root);
        let (mut dp, ops, metrics) = counted(&opts);
        assert!(!dp.adopted(Mechanism::Tcx));
        assert_eq!(dp.stale_hooks().count(), 2 * ifaces.len());
        assert!(
            opts.root.join("tcx/old/0/cali_polr_ing").exists(),
            "the old interpreter is set aside with its maps"
        );
        assert!(!opts.root.join("tcx/cali_polr_ing").exists());
        let outcomes = program_all(&mut dp, &ops, &ifaces, Mechanism::Tcx);
        assert!(
            outcomes.iter().all(|o| *o == AttachOutcome::Attached),
            "{outcomes:?}"
        );
        // Both interpreters and every preamble loaded for the fresh maps.
        assert_eq!(
            metrics.seam_op_counts("driver/bpf", op::PROG_LOAD).0,
            2 + 2 + 2 * ifaces.len() as u64
        );
        assert!(!dp.has_set_aside_maps(), "set-aside maps removed");
        assert!(
            opts.root.join("tcx/cali_polr_ing").exists(),
            "new interpreter pinned"
        );
        drop(dp);
        // And the run after that adopts again.
        let (dp, _, _) = counted(&opts);
        assert!(dp.adopted(Mechanism::Tcx));
        assert_eq!(dp.stale_hooks().count(), 0);
    });
}
