//! Kernel tests of the TC program chain: `BPF_PROG_TEST_RUN` of preamble -> main -> policy
//! -> accepted/drop with crafted packets, each in a throwaway network namespace and its own
//! pin directory.

mod common;

use common::*;
use felix_bpf::dataplane::{TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT};
use felix_bpf::layout::*;
use felix_bpf::{Hook, IfaceState, Mechanism, PolicyKind, SkbCtx, TcGlobals};

/// The continuation a fast-path caller of policy leaves in cb[0]/cb[1].
const FAST: [u32; 2] = [PROG_INDEX_ALLOWED, PROG_INDEX_DROP];
/// ... and a debug-path caller.
const DEBUG: [u32; 2] = [
    PROG_INDEX_ALLOWED + PROG_DEBUG_OFFSET,
    PROG_INDEX_DROP + PROG_DEBUG_OFFSET,
];

#[test]
fn allow_policy_continues_at_the_fast_accepted_program() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Egress,
            GLOBALS_F_WEP,
            PolicyKind::Allow,
        );
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_ICMP), SkbCtx::default())
            .expect("test run");
        assert_eq!(r.verdict, TC_ACT_OK);
        assert_ne!(
            r.ctx.mark & SKB_MARK_SEEN,
            0,
            "accepted marks the packet seen"
        );
        assert_eq!([r.ctx.cb[CB_ALLOW], r.ctx.cb[CB_DENY]], FAST);
    });
}

#[test]
fn deny_policy_continues_at_the_drop_program() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tc,
            Hook::Ingress,
            GLOBALS_F_WEP,
            PolicyKind::Deny,
        );
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_TCP), SkbCtx::default())
            .expect("test run");
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!(r.ctx.mark & SKB_MARK_SEEN, 0, "accepted never ran");
        assert_eq!([r.ctx.cb[CB_ALLOW], r.ctx.cb[CB_DENY]], FAST);
    });
}

#[test]
fn preamble_stores_its_globals_in_cb_for_the_chain() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, slot) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Egress,
            GLOBALS_F_HEP,
            PolicyKind::Allow,
        );
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_UDP), SkbCtx::default())
            .expect("test run");
        assert_eq!(r.ctx.cb[CB_POLICY], slot);
        assert_eq!(r.ctx.cb[CB_FLAGS], GLOBALS_F_HEP);
        assert_eq!(r.ctx.cb[CB_HOSTIF], 0);
    });
}

#[test]
fn debug_log_level_sends_every_packet_down_the_debug_path_with_the_same_policy_slot() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(true);
        let (mut pre, slot) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Egress,
            GLOBALS_F_WEP,
            PolicyKind::Allow,
        );
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_ICMP), SkbCtx::default())
            .expect("test run");
        assert_eq!(r.verdict, TC_ACT_OK);
        assert_ne!(r.ctx.mark & SKB_MARK_SEEN, 0);
        assert_eq!(
            [r.ctx.cb[CB_ALLOW], r.ctx.cb[CB_DENY]],
            DEBUG,
            "debug main's continuation"
        );
        assert_eq!(
            r.ctx.cb[CB_POLICY], slot,
            "one policy slot serves both paths"
        );
        dp.set_policy(Mechanism::Tcx, Hook::Egress, slot, PolicyKind::Deny)
            .expect("deny");
        // A new flow (the ICMP one is tracked now and would bypass policy).
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_UDP), SkbCtx::default())
            .expect("test run");
        assert_eq!(r.verdict, TC_ACT_SHOT);
        assert_eq!([r.ctx.cb[CB_ALLOW], r.ctx.cb[CB_DENY]], DEBUG);
    });
}

#[test]
fn policy_update_rewrites_only_the_endpoint_slot() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mech, hook) = (Mechanism::Tcx, Hook::Ingress);
        let (mut pre, slot) = chain(&mut dp, mech, hook, GLOBALS_F_HEP, PolicyKind::Allow);
        let generic = |dp: &mut felix_bpf::BpfDataplane| {
            [PROG_INDEX_MAIN, PROG_INDEX_ALLOWED, PROG_INDEX_DROP]
                .map(|s| dp.slot_prog_id(mech, hook, true, s).expect("lookup"))
        };
        let before = generic(&mut dp);
        assert!(
            before.iter().all(Option::is_some),
            "generic programs loaded: {before:?}"
        );
        let policy_before = dp.slot_prog_id(mech, hook, false, slot).expect("lookup");
        assert_eq!(
            pre.test_run(dp.ops(), &ipv4(IPPROTO_TCP), SkbCtx::default())
                .expect("run")
                .verdict,
            TC_ACT_OK
        );
        dp.set_policy(mech, hook, slot, PolicyKind::Deny)
            .expect("deny");
        assert_eq!(generic(&mut dp), before, "generic programs untouched");
        assert_ne!(
            dp.slot_prog_id(mech, hook, false, slot).expect("lookup"),
            policy_before
        );
        // The same preamble (not re-loaded) now drops.
        assert_eq!(
            pre.test_run(dp.ops(), &ipv4(IPPROTO_TCP), SkbCtx::default())
                .expect("run")
                .verdict,
            TC_ACT_SHOT
        );
    });
}

#[test]
fn an_empty_policy_slot_fails_closed() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        dp.ensure_generic(Mechanism::Tc, Hook::Egress)
            .expect("generic");
        let slot = dp.alloc_slot(Mechanism::Tc, Hook::Egress).expect("slot");
        let mut pre = dp
            .load_preamble(
                Mechanism::Tc,
                Hook::Egress,
                &TcGlobals::new(GLOBALS_F_WEP, slot),
            )
            .expect("preamble");
        let r = pre
            .test_run(dp.ops(), &ipv4(IPPROTO_ICMP), SkbCtx::default())
            .expect("run");
        assert_eq!(r.verdict, TC_ACT_SHOT);
        let mut none = dp
            .load_preamble(
                Mechanism::Tc,
                Hook::Egress,
                &TcGlobals::new(GLOBALS_F_WEP, SLOT_NONE),
            )
            .expect("preamble");
        assert_eq!(
            none.test_run(dp.ops(), &ipv4(IPPROTO_ICMP), SkbCtx::default())
                .expect("run")
                .verdict,
            TC_ACT_SHOT
        );
    });
}

#[test]
fn main_parses_tcp_udp_icmp_over_ipv4_and_ipv6_passes_non_ip_and_drops_truncated_ip() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Egress,
            GLOBALS_F_WEP,
            PolicyKind::Allow,
        );
        let mut run = |pkt: &[u8]| pre.test_run(dp.ops(), pkt, SkbCtx::default()).expect("run");
        for proto in [IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP] {
            let r = run(&ipv4(proto));
            assert_eq!(
                (r.verdict, r.ctx.mark & SKB_MARK_SEEN),
                (TC_ACT_OK, SKB_MARK_SEEN),
                "ipv4 {proto}"
            );
        }
        for proto in [IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMPV6] {
            let r = run(&ipv6(proto));
            assert_eq!(
                (r.verdict, r.ctx.mark & SKB_MARK_SEEN),
                (TC_ACT_OK, SKB_MARK_SEEN),
                "ipv6 {proto}"
            );
        }
        let arp = run(&arp());
        assert_eq!(
            (arp.verdict, arp.ctx.mark),
            (TC_ACT_OK, 0),
            "ARP passes without policy"
        );
        let mut short = ipv4(IPPROTO_TCP);
        short.truncate(14 + 20 + 8); // TCP header cut
        assert_eq!(run(&short).verdict, TC_ACT_SHOT);
    });
}

#[test]
fn forward_to_a_workload_that_is_not_ready_is_refused_and_handed_to_the_host_stack() {
    felix_netns::require!(netns["ip"]);
    let ns = felix_netns::Netns::unique("fbpf-gap").expect("netns");
    // The destination workload's host-side device, with a route and a resolved neighbour.
    for args in [
        &[
            "link", "add", "cali-dst", "type", "veth", "peer", "name", "wl-dst",
        ][..],
        &[
            "link", "add", "cali-src", "type", "veth", "peer", "name", "wl-src",
        ],
        &["link", "set", "cali-dst", "up"],
        &["link", "set", "wl-dst", "up"],
        &["link", "set", "cali-src", "up"],
        &["link", "set", "wl-src", "up"],
        &["route", "add", "10.65.0.2/32", "dev", "cali-dst"],
        &["-6", "route", "add", "fd00::2/128", "dev", "cali-dst"],
        &[
            "-6",
            "neigh",
            "add",
            "fd00::2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "cali-dst",
            "nud",
            "permanent",
        ],
        &[
            "neigh",
            "add",
            "10.65.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "cali-dst",
            "nud",
            "permanent",
        ],
    ] {
        ns.ip(args).expect("ip");
    }
    ns.sysctl("net.ipv4.ip_forward", "1").expect("forwarding");
    ns.sysctl("net.ipv6.conf.all.forwarding", "1")
        .expect("forwarding");
    let dst = ifindex(&ns, "cali-dst");
    let src = ifindex(&ns, "cali-src");
    ns.spawn_in(move || {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Ingress,
            GLOBALS_F_WEP | GLOBALS_F_INGRESS,
            PolicyKind::Allow,
        );
        let ctx = SkbCtx {
            ifindex: src,
            ..SkbCtx::default()
        };
        let pkt = ipv4(IPPROTO_ICMP);
        let ops = dp.ops().clone();
        route_test_addrs(&dp, src);
        // Unknown to felix: the host stack decides, nothing refused.
        let r = pre.test_run(&ops, &pkt, ctx).expect("run");
        assert_eq!((r.verdict, r.ctx.mark & SKB_MARK_SKIP_FIB), (TC_ACT_OK, 0));
        // A workload whose programs are not attached yet: refused.
        dp.iface_map()
            .set(&ops, dst, &IfaceState::new(IFACE_STATE_WEP, "cali-dst"))
            .expect("ifstate");
        let r = pre.test_run(&ops, &pkt, ctx).expect("run");
        assert_eq!(r.verdict, TC_ACT_OK);
        assert_ne!(
            r.ctx.mark & SKB_MARK_SKIP_FIB,
            0,
            "refused forward is marked for the host stack"
        );
        // Ready for IPv6 only is not ready for IPv4.
        dp.iface_map()
            .set(
                &ops,
                dst,
                &IfaceState::new(IFACE_STATE_WEP | IFACE_STATE_V6_READY, "cali-dst"),
            )
            .expect("ifstate");
        assert_ne!(
            pre.test_run(&ops, &pkt, ctx).expect("run").ctx.mark & SKB_MARK_SKIP_FIB,
            0
        );
        // Ready: forwarded straight to its device.
        dp.iface_map()
            .set(
                &ops,
                dst,
                &IfaceState::new(IFACE_STATE_WEP | IFACE_STATE_V4_READY, "cali-dst"),
            )
            .expect("ifstate");
        let r = pre.test_run(&ops, &pkt, ctx).expect("run");
        assert_eq!(r.verdict, TC_ACT_REDIRECT);
        assert_eq!(r.ctx.mark & SKB_MARK_SKIP_FIB, 0);
        // IPv6 has its own READY flag.
        let v6 = ipv6(IPPROTO_UDP);
        let r = pre.test_run(&ops, &v6, ctx).expect("run");
        assert_eq!(
            (r.verdict, r.ctx.mark & SKB_MARK_SKIP_FIB),
            (TC_ACT_OK, SKB_MARK_SKIP_FIB)
        );
        dp.iface_map()
            .set(
                &ops,
                dst,
                &IfaceState::new(IFACE_STATE_WEP | IFACE_STATE_V6_READY, "cali-dst"),
            )
            .expect("ifstate");
        assert_eq!(
            pre.test_run(&ops, &v6, ctx).expect("run").verdict,
            TC_ACT_REDIRECT
        );
    })
    .join()
    .expect("thread")
    .expect("entered netns");
}

#[test]
fn ipv6_neighbour_discovery_skips_policy_and_goes_to_the_host_stack() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Ingress,
            GLOBALS_F_WEP | GLOBALS_F_INGRESS,
            PolicyKind::Deny,
        );
        let with_type = |t: u8| {
            let mut p = ipv6(IPPROTO_ICMPV6);
            p[14 + 40] = t;
            p
        };
        for t in [130u8, 131, 132, 133, 135, 136] {
            let r = pre
                .test_run(dp.ops(), &with_type(t), SkbCtx::default())
                .expect("test run");
            assert_eq!(r.verdict, TC_ACT_OK, "ICMPv6 type {t}");
            assert_ne!(r.ctx.mark & SKB_MARK_SKIP_FIB, 0, "type {t}: host stack");
        }
        // Echo requests (and router advertisements from a workload) are policy's.
        for t in [128u8, 134] {
            let r = pre
                .test_run(dp.ops(), &with_type(t), SkbCtx::default())
                .expect("test run");
            assert_eq!(r.verdict, TC_ACT_SHOT, "ICMPv6 type {t}");
        }
    });
}

/// Invariant (anti-spoofing): what a workload sends must come from a source the routes map
/// gives to that very workload (its host-side ifindex), or the chain drops it before
/// conntrack and policy; another workload's address, an unknown one, or an address of the
/// host all fail. IPv6 link-local sources (neighbour discovery) pass.
#[test]
fn a_workload_sending_from_an_address_that_is_not_its_own_is_dropped() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, _) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Ingress,
            GLOBALS_F_WEP | GLOBALS_F_INGRESS,
            PolicyKind::Allow,
        );
        let ops = dp.ops().clone();
        let run = |pre: &mut felix_bpf::Preamble, pkt: &[u8]| {
            pre.test_run(&ops, pkt, SkbCtx::default())
                .expect("run")
                .verdict
        };
        // chain() gave the crafted sources to the loopback (the test run's ifindex).
        assert_eq!(
            run(&mut pre, &ipv4(IPPROTO_UDP)),
            TC_ACT_OK,
            "own v4 source"
        );
        assert_eq!(
            run(&mut pre, &ipv6(IPPROTO_UDP)),
            TC_ACT_OK,
            "own v6 source"
        );
        // The same addresses now belong to a workload behind ifindex 77.
        route_test_addrs(&dp, 77);
        assert_eq!(
            run(&mut pre, &ipv4(IPPROTO_UDP)),
            TC_ACT_SHOT,
            "another's v4"
        );
        assert_eq!(
            run(&mut pre, &ipv6(IPPROTO_UDP)),
            TC_ACT_SHOT,
            "another's v6"
        );
        // A host route is no workload's.
        let maps =
            felix_bpf::routes::RouteMaps::open_or_create(&ops, &dp.options().root).expect("maps");
        let host = felix_bpf::routes::RouteVal {
            flags: felix_bpf::routes::RT_LOCAL_HOST,
            ifindex: 1,
        };
        maps.set_route(&ops, &"10.65.0.1/32".parse().expect("net"), host)
            .expect("route");
        assert_eq!(
            run(&mut pre, &ipv4(IPPROTO_UDP)),
            TC_ACT_SHOT,
            "a host address"
        );
        // Unknown: removed from the map.
        maps.delete_route(&ops, &"10.65.0.1/32".parse().expect("net"))
            .expect("delete");
        assert_eq!(
            run(&mut pre, &ipv4(IPPROTO_UDP)),
            TC_ACT_SHOT,
            "unknown source"
        );
        // A spoof-allowed prefix of this workload passes.
        let spoof = felix_bpf::routes::RouteVal {
            flags: felix_bpf::routes::RT_SPOOF_OK,
            ifindex: 1,
        };
        maps.set_route(&ops, &"10.65.0.0/24".parse().expect("net"), spoof)
            .expect("route");
        assert_eq!(
            run(&mut pre, &ipv4(IPPROTO_UDP)),
            TC_ACT_OK,
            "allowed prefix"
        );
    });
}
