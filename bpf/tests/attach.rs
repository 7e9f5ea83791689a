//! Kernel tests of attaching: two workloads on veths in throwaway namespaces, their
//! host-side devices in a third ("host") namespace where the loader runs; real pings, TCX
//! and clsact, mechanism moves, restarts, old map versions and injected faults.

mod common;

use std::sync::Arc;

use common::*;
use felix_actors::seam::{Fault, FaultAction};
use felix_bpf::attach::query_tcx;
use felix_bpf::layout::*;
use felix_bpf::maps::{PinnedMap, IFACE_MAP};
use felix_bpf::ops::op;
use felix_bpf::{
    AttachOutcome, AttachPoint, BpfDataplane, BpfOps, EndpointKind, FeatureProbe as _, Hook,
    KernelProbe, Mechanism, Options, PolicyKind,
};
use felix_netns::Netns;

/// Host namespace with `caliA`/`caliB`, workloads `a` (10.65.0.1) and `b` (10.65.0.2).
struct Topo {
    host: Arc<Netns>,
    a: Arc<Netns>,
    b: Arc<Netns>,
    cali_a: u32,
    cali_b: u32,
}

fn topo() -> Topo {
    let host = Netns::unique("fbpf-h").expect("netns");
    let a = Netns::unique("fbpf-a").expect("netns");
    let b = Netns::unique("fbpf-b").expect("netns");
    host.sysctl("net.ipv4.ip_forward", "1").expect("forwarding");
    for (dev, wl, ip) in [("caliA", &a, "10.65.0.1"), ("caliB", &b, "10.65.0.2")] {
        host.ip(&[
            "link",
            "add",
            dev,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            wl.name(),
        ])
        .expect("veth");
        host.ip(&["link", "set", dev, "up"]).expect("up");
        host.ip(&["route", "add", &format!("{ip}/32"), "dev", dev])
            .expect("route");
        let mac = host
            .exec("cat", &[&format!("/sys/class/net/{dev}/address")])
            .expect("mac");
        for args in [
            &["addr", "add", &format!("{ip}/32"), "dev", "eth0"][..],
            &["link", "set", "eth0", "up"],
            &[
                "route",
                "add",
                "169.254.1.1",
                "dev",
                "eth0",
                "scope",
                "link",
            ],
            &[
                "route",
                "add",
                "default",
                "via",
                "169.254.1.1",
                "dev",
                "eth0",
            ],
            &[
                "neigh",
                "add",
                "169.254.1.1",
                "lladdr",
                mac.trim(),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        ] {
            wl.ip(args).expect("workload setup");
        }
    }
    let (cali_a, cali_b) = (ifindex(&host, "caliA"), ifindex(&host, "caliB"));
    Topo {
        host: Arc::new(host),
        a: Arc::new(a),
        b: Arc::new(b),
        cali_a,
        cali_b,
    }
}

fn ping(from: &Netns, to: &str) -> bool {
    from.exec_output("ping", &["-c", "1", "-W", "1", to])
        .expect("ping runs")
        .status
        .success()
}

fn point(
    ifindex: u32,
    name: &str,
    hook: Hook,
    mechanism: Mechanism,
    policy: PolicyKind,
) -> AttachPoint {
    AttachPoint {
        ifindex,
        name: name.into(),
        hook,
        mechanism,
        kind: EndpointKind::Workload,
        policy,
    }
}

/// Attaches both hooks of both workloads with `mech` and marks them ready.
fn attach_all(dp: &mut BpfDataplane, t: &Topo, mech: Mechanism) -> Vec<AttachOutcome> {
    let mut out = Vec::new();
    route_workloads(
        dp,
        &[("10.65.0.1/32", t.cali_a), ("10.65.0.2/32", t.cali_b)],
    );
    for (ifindex, name) in [(t.cali_a, "caliA"), (t.cali_b, "caliB")] {
        for hook in Hook::ALL {
            out.push(
                dp.apply(&point(ifindex, name, hook, mech, PolicyKind::Allow))
                    .expect("apply"),
            );
        }
        let ops = dp.ops().clone();
        dp.iface_map()
            .set(
                &ops,
                ifindex,
                &IfaceState::new(IFACE_STATE_WEP | IFACE_STATE_V4_READY, name),
            )
            .expect("ifstate");
    }
    out
}

/// Runs `f` in the host namespace of `t`.
/// A fresh topology and pin root (with debug programs when `debug`): runs `f` with them in
/// the host namespace; the pins go when it returns.
fn in_fresh_host(debug: bool, f: impl FnOnce(&Topo, Options) + Send + 'static) {
    let t = Arc::new(topo());
    let root = PinRoot::new();
    let opts = root.options(debug);
    let t2 = Arc::clone(&t);
    in_host(&t, move || f(&t2, opts));
}

fn in_host<T: Send + 'static>(t: &Topo, f: impl FnOnce() -> T + Send + 'static) -> T {
    t.host
        .spawn_in(f)
        .join()
        .expect("test thread panicked")
        .expect("entered netns")
}

/// The id of the map pinned at `pin`.
fn map_id(pin: &std::path::Path) -> u32 {
    let m = libbpf_rs::MapHandle::from_pinned_path(pin).expect("pinned map");
    libbpf_rs::MapCore::info(&m).expect("info").info.id
}

fn tc_filters(host: &Netns, dev: &str, dir: &str) -> String {
    host.exec("tc", &["filter", "show", "dev", dev, dir])
        .unwrap_or_default()
}

fn ping_passes_with_allow_and_fails_with_deny(mech: Mechanism) {
    let t = topo();
    let (a, b) = (t.a.clone(), t.b.clone());
    let (cali_b, host) = (t.cali_b, t.host.clone());
    let root = PinRoot::new();
    let opts = root.options(false);
    let t = Arc::new(t);
    let t2 = t.clone();
    in_host(&t, move || {
        let mut dp = BpfDataplane::start(BpfOps::default(), opts).expect("start");
        let outcomes = attach_all(&mut dp, &t2, mech);
        assert!(outcomes.iter().all(|o| *o == AttachOutcome::Attached));
        match mech {
            Mechanism::Tcx => {
                for hook in Hook::ALL {
                    let ids = query_tcx(dp.ops(), cali_b, hook).expect("query");
                    assert_eq!(ids, vec![dp.record(cali_b, hook).expect("record").prog_id]);
                }
                assert!(!tc_filters(&host, "caliB", "ingress").contains("cali"));
            }
            _ => {
                assert!(tc_filters(&host, "caliB", "ingress").contains("cali_tc_preambl"));
                assert!(query_tcx(dp.ops(), cali_b, Hook::Ingress)
                    .expect("query")
                    .is_empty());
            }
        }
        assert!(ping(&a, "10.65.0.2"), "allow: a reaches b");
        assert!(ping(&b, "10.65.0.1"), "allow: b reaches a");
        // Deny into b: only b's slot changes, the preamble stays.
        let deny = point(cali_b, "caliB", Hook::Egress, mech, PolicyKind::Deny);
        assert_eq!(dp.apply(&deny).expect("deny"), AttachOutcome::Unchanged);
        assert!(!ping(&a, "10.65.0.2"), "deny: a no longer reaches b");
        let allow = point(cali_b, "caliB", Hook::Egress, mech, PolicyKind::Allow);
        assert_eq!(dp.apply(&allow).expect("allow"), AttachOutcome::Unchanged);
        assert!(ping(&a, "10.65.0.2"), "allow again");
        // Other globals (a host endpoint's flags): the preamble is re-loaded and swapped.
        let old = *dp.record(cali_b, Hook::Egress).expect("record");
        let hep = AttachPoint {
            kind: EndpointKind::Host,
            ..allow
        };
        assert_eq!(dp.apply(&hep).expect("hep"), AttachOutcome::Attached);
        let new = *dp.record(cali_b, Hook::Egress).expect("record");
        assert_ne!(new.prog_id, old.prog_id);
        assert_eq!(new.globals.flags, GLOBALS_F_HEP);
        assert_eq!(
            new.globals.policy_slot, old.globals.policy_slot,
            "slot kept"
        );
        if mech == Mechanism::Tcx {
            assert_eq!(
                query_tcx(dp.ops(), cali_b, Hook::Egress).expect("query"),
                vec![new.prog_id]
            );
        }
        assert!(
            ping(&a, "10.65.0.2"),
            "traffic flows through the swapped preamble"
        );
    });
    drop(root);
}

#[test]
fn ping_passes_with_allow_and_fails_with_deny_over_tcx() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    ping_passes_with_allow_and_fails_with_deny(Mechanism::Tcx);
}

#[test]
fn ping_passes_with_allow_and_fails_with_deny_over_clsact() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    ping_passes_with_allow_and_fails_with_deny(Mechanism::Tc);
}

#[test]
fn ping_passes_on_the_debug_path_and_deny_still_drops() {
    felix_netns::require!(netns ["ip", "ping"]);
    in_fresh_host(true, move |t, opts| {
        let mut dp = BpfDataplane::start(BpfOps::default(), opts).expect("start");
        attach_all(&mut dp, t, Mechanism::Tcx);
        let rec = *dp.record(t.cali_a, Hook::Ingress).expect("record");
        assert_eq!(
            rec.globals.log_filter_slot,
            felix_bpf::dataplane::LOG_FILTER_ALL_SLOT
        );
        for slot in [PROG_INDEX_MAIN, PROG_INDEX_ALLOWED, PROG_INDEX_DROP] {
            let debug = dp.slot_prog_id(Mechanism::Tcx, Hook::Ingress, true, debug_slot(slot));
            assert!(
                debug.expect("lookup").is_some(),
                "debug program at {}",
                debug_slot(slot)
            );
        }
        assert!(ping(&t.a, "10.65.0.2"), "debug path forwards");
        let deny = point(
            t.cali_b,
            "caliB",
            Hook::Egress,
            Mechanism::Tcx,
            PolicyKind::Deny,
        );
        assert_eq!(dp.apply(&deny).expect("deny"), AttachOutcome::Unchanged);
        assert!(!ping(&t.a, "10.65.0.2"), "debug path drops on deny");
    });
}

#[test]
fn moving_a_device_between_tcx_and_clsact_removes_the_old_attachment() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    in_fresh_host(false, move |t, opts| {
        let opts_root = opts.root.clone();
        let mut dp = BpfDataplane::start(BpfOps::default(), opts).expect("start");
        attach_all(&mut dp, t, Mechanism::Tcx);
        assert!(ping(&t.a, "10.65.0.2"));
        let slot_of = |dp: &BpfDataplane, idx, hook| {
            dp.record(idx, hook).expect("record").globals.policy_slot
        };
        let tcx_slots: Vec<u32> = [t.cali_a, t.cali_b]
            .iter()
            .flat_map(|i| Hook::ALL.map(|h| slot_of(&dp, *i, h)))
            .collect();
        attach_all(&mut dp, t, Mechanism::Tc);
        let tc_slots: Vec<u32> = [t.cali_a, t.cali_b]
            .iter()
            .flat_map(|i| Hook::ALL.map(|h| slot_of(&dp, *i, h)))
            .collect();
        assert_eq!(
            tc_slots, tcx_slots,
            "an endpoint keeps its slot across a move"
        );
        for (idx, dev) in [(t.cali_a, "caliA"), (t.cali_b, "caliB")] {
            for hook in Hook::ALL {
                assert!(
                    query_tcx(dp.ops(), idx, hook).expect("query").is_empty(),
                    "TCX link removed"
                );
                assert_eq!(
                    dp.record(idx, hook).expect("record").mechanism,
                    Mechanism::Tc
                );
                let slot = slot_of(&dp, idx, hook);
                assert_eq!(
                    dp.slot_prog_id(Mechanism::Tcx, hook, false, slot)
                        .expect("lookup"),
                    None,
                    "the old mechanism's jump map forgot the slot"
                );
            }
            assert!(tc_filters(&t.host, dev, "ingress").contains("cali_tc_preambl"));
        }
        assert!(ping(&t.a, "10.65.0.2"), "clsact carries traffic");
        attach_all(&mut dp, t, Mechanism::Tcx);
        for (idx, dev) in [(t.cali_a, "caliA"), (t.cali_b, "caliB")] {
            for dir in ["ingress", "egress"] {
                assert!(
                    !tc_filters(&t.host, dev, dir).contains("cali"),
                    "clsact filter removed"
                );
            }
            assert_eq!(
                query_tcx(dp.ops(), idx, Hook::Egress).expect("query").len(),
                1
            );
        }
        assert!(ping(&t.a, "10.65.0.2"), "TCX carries traffic");
        // Removing a hook detaches it, drops its pins and frees its slot.
        let slot = dp
            .record(t.cali_a, Hook::Ingress)
            .expect("record")
            .globals
            .policy_slot;
        dp.remove(t.cali_a, Hook::Ingress).expect("remove");
        assert!(query_tcx(dp.ops(), t.cali_a, Hook::Ingress)
            .expect("query")
            .is_empty());
        assert!(dp.record(t.cali_a, Hook::Ingress).is_none());
        let dir = format!("tcx/hooks/if{}_ing", t.cali_a);
        assert!(!opts_root.join(dir).exists(), "hook pins removed");
        let used = dp
            .slots_in_use(Mechanism::Tcx, Hook::Ingress)
            .expect("slots");
        assert!(!used.contains(&slot));
        assert_eq!(
            dp.slot_prog_id(Mechanism::Tcx, Hook::Ingress, false, slot)
                .expect("lookup"),
            None
        );
    });
}

#[test]
fn a_restart_across_a_layout_change_sets_the_old_jump_maps_aside_until_every_hook_is_reattached() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    in_fresh_host(false, move |t, opts| {
        for mech in [Mechanism::Tcx, Mechanism::Tc] {
            let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("start");
            attach_all(&mut dp, t, mech);
            assert!(
                ping(&t.a, "10.65.0.2"),
                "{mech:?}: traffic flows before the restart"
            );
            let before: Vec<_> = dp.records().map(|(k, r)| (k, *r)).collect();
            assert_eq!(before.len(), 4);
            let jump_pin = opts.root.join(mech.dir_name()).join("cali_jump_ing2");
            let old_jump = map_id(&jump_pin);
            drop(dp);
            // The next binary's layout differs: its identity is not the pinned one.
            let dir = opts.root.join(mech.dir_name());
            felix_bpf::identity::pin_identity(&BpfOps::default(), &dir, 0x1a7e)
                .expect("older identity");
            // A new process: nothing in memory.
            let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("restart");
            let after: Vec<_> = dp.records().map(|(k, r)| (k, *r)).collect();
            assert_eq!(after, before, "records rebuilt from the pins");
            assert_eq!(dp.stale_hooks().count(), 4, "every found hook is stale");
            assert!(!dp.adopted(mech), "nothing of another layout is adopted");
            assert!(dp.has_set_aside_maps());
            let aside = opts.root.join(mech.dir_name()).join("old/0/cali_jump_ing2");
            assert_eq!(map_id(&aside), old_jump, "the old jump map is set aside");
            // The fresh maps are empty, yet the old preambles still run over the old ones.
            assert!(
                ping(&t.a, "10.65.0.2"),
                "{mech:?}: traffic flows over the set-aside maps"
            );
            let outcomes = attach_all(&mut dp, t, mech);
            assert!(
                outcomes.iter().all(|o| *o == AttachOutcome::Attached),
                "stale hooks are re-attached: {outcomes:?}"
            );
            assert_ne!(map_id(&jump_pin), old_jump, "fresh jump maps");
            assert_eq!(dp.stale_hooks().count(), 0);
            assert!(!dp.has_set_aside_maps(), "set-aside maps removed");
            assert!(
                ping(&t.a, "10.65.0.2"),
                "{mech:?}: traffic flows over the fresh maps"
            );
            let outcomes = attach_all(&mut dp, t, mech);
            assert!(
                outcomes.iter().all(|o| *o == AttachOutcome::Unchanged),
                "{outcomes:?}"
            );
            // A new endpoint after the restart gets a slot no surviving endpoint uses.
            let used: Vec<u32> = after.iter().map(|(_, r)| r.globals.policy_slot).collect();
            let fresh = dp.alloc_slot(mech, Hook::Egress).expect("slot");
            assert!(!used.contains(&fresh), "{fresh} in {used:?}");
            // The attachment disappears behind felix's back: re-attached.
            match mech {
                Mechanism::Tc => {
                    t.host
                        .exec("tc", &["filter", "del", "dev", "caliA", "ingress"])
                        .expect("tc del");
                }
                _ => {
                    let pin = opts
                        .root
                        .join("tcx/hooks")
                        .join(format!("if{}_ing", t.cali_a))
                        .join("link");
                    std::fs::remove_file(pin).expect("unpin link");
                }
            }
            let again = dp
                .apply(&point(
                    t.cali_a,
                    "caliA",
                    Hook::Ingress,
                    mech,
                    PolicyKind::Allow,
                ))
                .expect("apply");
            assert_eq!(again, AttachOutcome::Attached);
            if mech == Mechanism::Tcx {
                // The kernel releases a link whose last pin went in deferred work: wait for it.
                let mut ids = Vec::new();
                for _ in 0..100 {
                    ids = query_tcx(dp.ops(), t.cali_a, Hook::Ingress).expect("query");
                    if ids.len() == 1 {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                assert_eq!(
                    ids.len(),
                    1,
                    "an unpinned link is gone, one new link: {ids:?}"
                );
            }
            assert!(ping(&t.a, "10.65.0.2"));
        }
    });
}

#[test]
fn a_restart_with_the_same_layout_adopts_every_hook_and_loads_or_attaches_nothing() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    in_fresh_host(false, move |t, opts| {
        for mech in [Mechanism::Tcx, Mechanism::Tc] {
            let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("start");
            attach_all(&mut dp, t, mech);
            let before: Vec<_> = dp.records().map(|(k, r)| (k, *r)).collect();
            let dir = opts.root.join(mech.dir_name());
            let pins = [
                "cali_progs_ing2",
                "cali_jump_ing2",
                "cali_progs_egr2",
                "cali_jump_egr2",
            ];
            let maps_before: Vec<u32> = pins.iter().map(|p| map_id(&dir.join(p))).collect();
            let generic_before = dp
                .slot_prog_id(mech, Hook::Ingress, true, PROG_INDEX_MAIN)
                .expect("lookup");
            drop(dp);
            // A new process of the same binary: nothing in memory, every operation counted.
            let metrics = felix_actors::Metrics::new();
            let seam = felix_actors::Seam::new(felix_actors::FaultRegistry::new(), metrics.clone())
                .for_actor("driver/bpf");
            let mut dp = BpfDataplane::start(BpfOps::new(seam), opts.clone()).expect("restart");
            assert!(dp.adopted(mech), "{mech:?}: same layout, maps adopted");
            assert_eq!(dp.stale_hooks().count(), 0, "no hook is stale");
            assert!(!dp.has_set_aside_maps(), "nothing set aside");
            let after: Vec<_> = dp.records().map(|(k, r)| (k, *r)).collect();
            assert_eq!(after, before, "records rebuilt from the pins");
            let maps_after: Vec<u32> = pins.iter().map(|p| map_id(&dir.join(p))).collect();
            assert_eq!(maps_after, maps_before, "the same jump maps");
            assert!(
                ping(&t.a, "10.65.0.2"),
                "{mech:?}: traffic flows through the adopted maps"
            );
            let outcomes = attach_all(&mut dp, t, mech);
            assert!(
                outcomes.iter().all(|o| *o == AttachOutcome::Unchanged),
                "{mech:?}: nothing re-attached: {outcomes:?}"
            );
            assert_eq!(
                dp.slot_prog_id(mech, Hook::Ingress, true, PROG_INDEX_MAIN)
                    .expect("lookup"),
                generic_before,
                "the generic programs are kept"
            );
            for o in [
                op::PROG_LOAD,
                op::TCX_ATTACH,
                op::LINK_UPDATE,
                op::TC_ATTACH,
                op::SET_ASIDE,
                op::MAP_CREATE,
            ] {
                assert_eq!(
                    metrics.seam_op_counts("driver/bpf", o).0,
                    0,
                    "{mech:?}: a restart of the same layout runs no {o}"
                );
            }
            assert!(ping(&t.a, "10.65.0.2"), "{mech:?}: traffic still flows");
        }
    });
}

#[test]
fn a_hook_left_on_set_aside_maps_by_an_interrupted_run_is_stale_in_an_adopted_directory() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    in_fresh_host(false, move |t, opts| {
        let mech = Mechanism::Tcx;
        let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("start");
        attach_all(&mut dp, t, mech);
        drop(dp);
        // An upgrade: the next run sets the maps aside, re-attaches one hook and is killed.
        let dir = opts.root.join(mech.dir_name());
        felix_bpf::identity::pin_identity(&BpfOps::default(), &dir, 0x1a7e)
            .expect("older identity");
        let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("upgrade");
        assert_eq!(dp.stale_hooks().count(), 4);
        let first = point(t.cali_a, "caliA", Hook::Ingress, mech, PolicyKind::Allow);
        assert_eq!(dp.apply(&first).expect("apply"), AttachOutcome::Attached);
        drop(dp);
        // The run after that has the upgrade's identity: the directory is adopted, but the
        // three hooks still on the set-aside maps are stale and their maps stay pinned.
        let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("restart");
        assert!(dp.adopted(mech));
        let stale: Vec<_> = dp.stale_hooks().collect();
        assert_eq!(stale.len(), 3, "{stale:?}");
        assert!(!stale.contains(&(t.cali_a, Hook::Ingress)));
        assert!(dp.has_set_aside_maps(), "still used by three preambles");
        assert!(
            ping(&t.a, "10.65.0.2"),
            "traffic flows over both generations"
        );
        let outcomes = attach_all(&mut dp, t, mech);
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == AttachOutcome::Attached)
                .count(),
            3,
            "only the stale hooks are re-attached: {outcomes:?}"
        );
        assert!(!dp.has_set_aside_maps(), "set-aside maps removed");
        assert!(
            ping(&t.a, "10.65.0.2"),
            "traffic flows over the current maps"
        );
    });
}

#[test]
fn an_adopted_program_using_a_replaced_map_is_loaded_again() {
    felix_netns::require!(netns["ip"]);
    let root = PinRoot::new();
    let opts = root.options(false);
    in_netns(move || {
        let ops = BpfOps::default();
        let mut dp = BpfDataplane::start(ops.clone(), opts.clone()).expect("start");
        dp.ensure_generic(Mechanism::Tcx, Hook::Ingress)
            .expect("generic");
        let main = dp
            .slot_prog_id(Mechanism::Tcx, Hook::Ingress, true, PROG_INDEX_MAIN)
            .expect("lookup");
        drop(dp);
        // Same layout, but the conntrack map main uses was replaced while felix was down
        // (as a capacity change migrates it).
        let mut same = BpfDataplane::start(ops.clone(), opts.clone()).expect("restart");
        same.ensure_generic(Mechanism::Tcx, Hook::Ingress)
            .expect("generic");
        assert_eq!(
            same.slot_prog_id(Mechanism::Tcx, Hook::Ingress, true, PROG_INDEX_MAIN)
                .expect("lookup"),
            main,
            "nothing replaced: main adopted"
        );
        drop(same);
        let resized = felix_bpf::Options {
            ct_capacity: opts.ct_capacity / 2,
            ..opts.clone()
        };
        let mut dp = BpfDataplane::start(ops.clone(), resized).expect("restart");
        assert!(
            dp.adopted(Mechanism::Tcx),
            "the jump maps are still adopted"
        );
        dp.ensure_generic(Mechanism::Tcx, Hook::Ingress)
            .expect("generic");
        let reloaded = dp
            .slot_prog_id(Mechanism::Tcx, Hook::Ingress, true, PROG_INDEX_MAIN)
            .expect("lookup");
        assert!(reloaded.is_some() && reloaded != main, "main re-loaded");
    });
}

#[test]
fn old_map_versions_are_removed_at_start_of_day() {
    felix_netns::require!(netns["ip"]);
    let root = PinRoot::new();
    let ops = BpfOps::default();
    felix_bpf::maps::ensure_bpffs(&ops, std::path::Path::new("/sys/fs/bpf")).expect("bpffs");
    std::fs::create_dir_all(root.0.join("tc")).expect("mkdir");
    let old_iface = felix_bpf::maps::MapSpec {
        version: 3,
        ..IFACE_MAP
    };
    PinnedMap::open_or_create(&ops, old_iface, &root.0).expect("old iface map");
    let old_progs = felix_bpf::maps::MapSpec {
        version: 1,
        ..felix_bpf::maps::progs_map(Hook::Ingress)
    };
    PinnedMap::open_or_create(&ops, old_progs, &root.0.join("tc")).expect("old progs map");
    assert!(root.0.join("cali_iface3").exists() && root.0.join("tc/cali_progs_ing").exists());
    let _dp = BpfDataplane::start(ops, root.options(false)).expect("start");
    assert!(
        !root.0.join("cali_iface3").exists(),
        "old cali_iface removed"
    );
    assert!(
        !root.0.join("tc/cali_progs_ing").exists(),
        "old jump map removed"
    );
    assert!(
        root.0.join("cali_iface4").exists(),
        "current cali_iface pinned"
    );
}

#[test]
fn an_injected_fault_fails_the_named_bpf_operation_and_the_retry_succeeds() {
    felix_netns::require!(netns ["ip", "tc"]);
    in_fresh_host(false, move |t, opts| {
        let ops = BpfOps::default();
        let mut dp = BpfDataplane::start(ops.clone(), opts).expect("start");
        let arm = |op: &str| {
            ops.seam()
                .shared()
                .faults()
                .arm(Fault {
                    target: ops.seam().actor().into(),
                    op: op.into(),
                    action: FaultAction::Error,
                    count: 1,
                    delay_ms: 0,
                })
                .expect("arm");
        };
        let ap = point(
            t.cali_a,
            "caliA",
            Hook::Ingress,
            Mechanism::Tcx,
            PolicyKind::Allow,
        );
        for name in [op::PROG_LOAD, op::MAP_UPDATE, op::TCX_ATTACH, op::LINK_PIN] {
            arm(name);
            let err = dp.apply(&ap).expect_err("injected fault fails apply");
            assert!(err.is_injected(), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        assert_eq!(dp.apply(&ap).expect("retry"), AttachOutcome::Attached);
        // Slot 0 is the log filter's; the failed attempts leaked none.
        let rec = *dp.record(t.cali_a, Hook::Ingress).expect("record");
        let used = dp
            .slots_in_use(Mechanism::Tcx, Hook::Ingress)
            .expect("slots");
        assert_eq!(used, vec![0, rec.globals.policy_slot]);
        assert_eq!(
            query_tcx(dp.ops(), t.cali_a, Hook::Ingress)
                .expect("query")
                .len(),
            1
        );
    });
}

#[test]
fn kernel_probe_finds_tcx_on_this_kernel() {
    felix_netns::require!(netns["ip"]);
    let support = KernelProbe::default().probe();
    assert!(support.tcx, "kernel 6.6+ has TCX");
}

#[test]
fn teardown_removes_every_attachment_qdisc_and_pin() {
    felix_netns::require!(netns ["ip", "ping", "tc"]);
    in_fresh_host(false, move |t, opts| {
        let opts_root = opts.root.clone();
        let mut dp = BpfDataplane::start(BpfOps::default(), opts.clone()).expect("start");
        attach_all(&mut dp, t, Mechanism::Tcx);
        // Both over clsact; caliA's clsact qdisc also carries another program's filter.
        for (ifindex, name) in [(t.cali_a, "caliA"), (t.cali_b, "caliB")] {
            for hook in Hook::ALL {
                dp.apply(&point(
                    ifindex,
                    name,
                    hook,
                    Mechanism::Tc,
                    PolicyKind::Allow,
                ))
                .expect("apply");
            }
        }
        let foreign = dp
            .load_preamble(Mechanism::Tc, Hook::Ingress, &TcGlobals::new(0, 1))
            .expect("load");
        let prog = foreign.program().expect("prog");
        let mut hook = libbpf_rs::TcHookBuilder::new(std::os::fd::AsFd::as_fd(&prog));
        hook.ifindex(t.cali_a as i32)
            .replace(true)
            .handle(0x77)
            .priority(7);
        let mut hook = hook.hook(libbpf_rs::TC_INGRESS);
        hook.attach().expect("foreign filter");
        let mut listed = dp.iface_map().ifindices(dp.ops()).expect("keys");
        listed.sort_unstable();
        let mut want = vec![t.cali_a, t.cali_b];
        want.sort_unstable();
        assert_eq!(listed, want, "cali_iface lists both interfaces");
        let ops = dp.ops().clone();
        drop(dp);
        let done = felix_bpf::teardown(ops.clone(), opts.clone(), &[t.cali_a, t.cali_b])
            .expect("teardown");
        assert!(done.root_removed);
        assert_eq!(done.hooks.len(), 4);
        assert_eq!(done.qdiscs, vec![t.cali_b], "a shared clsact qdisc stays");
        let shared = tc_filters(&t.host, "caliA", "ingress");
        assert!(
            shared.contains("handle 0x77") && !shared.contains("handle 0xca11"),
            "the other filter stays, felix's goes: {shared}"
        );
        hook.detach().expect("foreign filter detached");
        drop(foreign);
        assert!(!opts_root.exists(), "pin root removed");
        for idx in [t.cali_a, t.cali_b] {
            for hook in Hook::ALL {
                assert!(query_tcx(&ops, idx, hook).expect("query").is_empty());
            }
        }
        let qdiscs = t
            .host
            .exec("tc", &["qdisc", "show", "dev", "caliB"])
            .unwrap_or_default();
        assert!(!qdiscs.contains("clsact"), "clsact qdisc removed: {qdiscs}");
        assert!(!tc_filters(&t.host, "caliB", "ingress").contains("cali"));
        // Nothing left: a second teardown does nothing (and mounts nothing).
        let again = felix_bpf::teardown(ops, opts, &[]).expect("no-op");
        assert_eq!(again, felix_bpf::Teardown::default());
        // With no programs, no traffic is policed any more: the plain host routes carry it.
        assert!(ping(&t.a, "10.65.0.2"));
    });
}
