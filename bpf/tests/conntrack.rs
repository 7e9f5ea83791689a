//! Kernel tests of conntrack (`progs/conntrack.h`, `felix_bpf::conntrack`): `BPF_PROG_TEST_RUN`
//! of the chain on the hooks of two workloads with crafted packets of one flow in both
//! directions, the expiry scan, and the migration of the map.

mod common;

use std::net::IpAddr;

use common::*;
use felix_bpf::conntrack::*;
use felix_bpf::dataplane::{TC_ACT_OK, TC_ACT_SHOT};
use felix_bpf::layout::*;
use felix_bpf::maps::MapSpec;
use felix_bpf::migrate::{open_or_migrate, Migration, Upgrade};
use felix_bpf::{BpfOps, Hook, Mechanism, PolicyKind, Preamble, SkbCtx, TcGlobals};

const A: [u8; 4] = [10, 65, 0, 1];
const B: [u8; 4] = [10, 65, 0, 2];
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const RST: u8 = 0x04;

/// Ethernet + IPv4 + TCP `src:sport -> dst:dport` with TCP `flags`.
fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: u8) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    p.extend(ip);
    p.extend(t);
    p
}

/// Ethernet + IPv4 + UDP `src:sport -> dst:dport`.
fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 28, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&8u16.to_be_bytes());
    p.extend(ip);
    p.extend(u);
    p
}

/// An ICMPv4 "fragmentation needed" from `router` to `to`, about the TCP packet
/// `inner_src:sport -> inner_dst:dport`.
fn frag_needed(router: [u8; 4], to: [u8; 4], inner: ([u8; 4], u16, [u8; 4], u16)) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 56, 0, 1, 0x40, 0, 64, 1, 0, 0];
    ip.extend_from_slice(&router);
    ip.extend_from_slice(&to);
    p.extend(ip);
    p.extend_from_slice(&[3, 4, 0, 0, 0, 0, 0x05, 0xdc]);
    let mut inner_ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    inner_ip.extend_from_slice(&inner.0);
    inner_ip.extend_from_slice(&inner.2);
    p.extend(inner_ip);
    p.extend_from_slice(&inner.1.to_be_bytes());
    p.extend_from_slice(&inner.3.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p
}

/// The four hooks of workloads A and B: (A sends, A receives, B sends, B receives), each
/// with its own policy. A workload sends through its host-side device's TC ingress.
struct Hooks {
    a_out: Preamble,
    a_in: Preamble,
    b_out: Preamble,
    b_in: Preamble,
}

fn hooks(
    dp: &mut felix_bpf::BpfDataplane,
    a: (PolicyKind, PolicyKind),
    b: (PolicyKind, PolicyKind),
) -> Hooks {
    route_workloads(
        dp,
        &[
            ("10.65.0.1/32", 101),
            ("fd00::1/128", 101),
            ("10.65.0.2/32", 102),
            ("fd00::2/128", 102),
        ],
    );
    // Each workload's hooks carry its own host-side ifindex (101 for A, 102 for B).
    let mut one = |hook: Hook, policy, host_ifindex| {
        let flags = GLOBALS_F_WEP
            | if hook == Hook::Ingress {
                GLOBALS_F_INGRESS
            } else {
                0
            };
        dp.ensure_generic(Mechanism::Tcx, hook).expect("generic");
        let slot = dp.alloc_slot(Mechanism::Tcx, hook).expect("slot");
        dp.set_policy(Mechanism::Tcx, hook, slot, policy)
            .expect("policy");
        let mut g = TcGlobals::new(flags, slot);
        g.host_ifindex = host_ifindex;
        dp.load_preamble(Mechanism::Tcx, hook, &g)
            .expect("preamble")
    };
    Hooks {
        a_out: one(Hook::Ingress, a.0, 101),
        a_in: one(Hook::Egress, a.1, 101),
        b_out: one(Hook::Ingress, b.0, 102),
        b_in: one(Hook::Egress, b.1, 102),
    }
}

fn run(dp: &felix_bpf::BpfDataplane, pre: &mut Preamble, pkt: &[u8]) -> i32 {
    pre.test_run(dp.ops(), pkt, SkbCtx::default())
        .expect("test run")
        .verdict
}

fn ip(a: [u8; 4]) -> IpAddr {
    IpAddr::from(a)
}

#[test]
fn a_packet_needs_the_approval_of_its_hook_endpoints_leg() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        // A may send anything and receives nothing; B receives anything and sends nothing.
        use PolicyKind::{Allow, Deny};
        let mut h = hooks(&mut dp, (Allow, Deny), (Deny, Allow));
        let syn = tcp(A, 40000, B, 80, SYN);
        let synack = tcp(B, 80, A, 40000, SYN | ACK);
        let ack = tcp(A, 40000, B, 80, ACK);
        // A opens: its own egress policy allows, B's ingress policy allows.
        assert_eq!(run(&dp, &mut h.a_out, &syn), TC_ACT_OK);
        assert_eq!(run(&dp, &mut h.b_in, &syn), TC_ACT_OK);
        // B's reply passes B's egress and A's ingress, both deny-all: the flow is approved.
        assert_eq!(run(&dp, &mut h.b_out, &synack), TC_ACT_OK, "reply leaves B");
        assert_eq!(run(&dp, &mut h.a_in, &synack), TC_ACT_OK, "reply reaches A");
        assert_eq!(run(&dp, &mut h.a_out, &ack), TC_ACT_OK);
        let key = CtKey::new(6, ip(A), 40000, ip(B), 80);
        let entries = dp.conntrack().entries(dp.ops()).expect("entries");
        let (k, v) = entries.iter().find(|(k, _)| *k == key).expect("tracked");
        assert_eq!(k.addr_a(), ip(A));
        for leg in [v.a, v.b] {
            assert_ne!(leg.flags & CT_LEG_APPROVED, 0, "{leg:?}");
            assert_ne!(leg.flags & CT_LEG_SYN, 0, "{leg:?}");
        }
        assert_ne!(v.a.flags & CT_LEG_OPENER, 0);

        // B opening towards A: B's egress policy denies it (a new flow).
        let syn_ba = tcp(B, 41000, A, 22, SYN);
        assert_eq!(run(&dp, &mut h.b_out, &syn_ba), TC_ACT_SHOT);
        // A flow approved by B only: its packets reaching A (routing still converging) are
        // judged by A's policy, whatever the addresses say.
        let c = [10, 65, 0, 3];
        let udp_cb = udp(c, 5000, B, 53);
        assert_eq!(
            run(&dp, &mut h.b_in, &udp_cb),
            TC_ACT_OK,
            "B's ingress allows"
        );
        assert_eq!(
            run(&dp, &mut h.a_in, &udp_cb),
            TC_ACT_SHOT,
            "A never approved it"
        );
        assert_eq!(
            run(&dp, &mut h.b_in, &udp_cb),
            TC_ACT_OK,
            "still approved by B"
        );
    });
}

#[test]
fn an_icmp_error_about_an_approved_flow_passes_where_the_flow_would() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        use PolicyKind::{Allow, Deny};
        // A sends anything and receives nothing.
        let mut h = hooks(&mut dp, (Allow, Deny), (Allow, Allow));
        let router = [10, 65, 0, 254];
        assert_eq!(
            run(&dp, &mut h.a_out, &tcp(A, 40000, B, 80, SYN)),
            TC_ACT_OK
        );
        let before = dp.conntrack().entries(dp.ops()).expect("entries");
        // A router on the path answers A's packet: "fragmentation needed" reaches A.
        let err = frag_needed(router, A, (A, 40000, B, 80));
        assert_eq!(
            run(&dp, &mut h.a_in, &err),
            TC_ACT_OK,
            "related to A's flow"
        );
        // About a flow A never opened: A's policy judges it (deny).
        let stray = frag_needed(router, A, (A, 40001, B, 80));
        assert_eq!(run(&dp, &mut h.a_in, &stray), TC_ACT_SHOT);
        // Errors change nothing in conntrack.
        assert_eq!(dp.conntrack().entries(dp.ops()).expect("entries"), before);
    });
}

#[test]
fn a_tcp_syn_always_goes_through_policy() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let (mut dp, _root) = dataplane(false);
        let (mut pre, slot) = chain(
            &mut dp,
            Mechanism::Tcx,
            Hook::Ingress,
            GLOBALS_F_WEP | GLOBALS_F_INGRESS,
            PolicyKind::Allow,
        );
        let syn = tcp(A, 40000, B, 80, SYN);
        let ack = tcp(A, 40000, B, 80, ACK);
        assert_eq!(run(&dp, &mut pre, &syn), TC_ACT_OK);
        dp.set_policy(Mechanism::Tcx, Hook::Ingress, slot, PolicyKind::Deny)
            .expect("deny");
        // The established flow survives the policy change (as iptables' ESTABLISHED)...
        assert_eq!(run(&dp, &mut pre, &ack), TC_ACT_OK);
        // ...but a SYN on it (a retransmission, a reused tuple) is judged again.
        assert_eq!(run(&dp, &mut pre, &syn), TC_ACT_SHOT);
        // A RST is recorded with its time.
        let rst = tcp(A, 40000, B, 80, RST | ACK);
        assert_eq!(run(&dp, &mut pre, &rst), TC_ACT_OK);
        let key = CtKey::new(6, ip(A), 40000, ip(B), 80);
        let entries = dp.conntrack().entries(dp.ops()).expect("entries");
        let v = entries.iter().find(|(k, _)| *k == key).expect("tracked").1;
        assert_ne!(v.rst_seen, 0);
        assert_ne!(v.a.flags & CT_LEG_RST, 0);
    });
}

#[test]
fn the_scan_expires_entries_on_the_programs_clock_and_cleans_removed_endpoints() {
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
        let ctx = SkbCtx {
            cb: [0, 0, 0, 0, 0],
            ..SkbCtx::default()
        };
        for port in [1000u16, 1001, 1002] {
            pre.test_run(dp.ops(), &tcp(A, port, B, 80, SYN), ctx)
                .expect("run");
        }
        let ops = BpfOps::default();
        let ct = dp.conntrack();
        assert_eq!(ct.entries(&ops).expect("entries").len(), 3);
        let now = monotonic_ns(&ops).expect("clock");
        let t = Timeouts::default();
        // The programs' clock is CLOCK_MONOTONIC: nothing has expired yet.
        let s = ct.scan(&ops, now, &t, |_| false, |_| false).expect("scan");
        assert_eq!((s.used, s.cleaned()), (3, 0));
        // Half a minute on, the unanswered SYNs have.
        let later = now + 21_000_000_000;
        let s = ct
            .scan(&ops, later, &t, |_| false, |_| false)
            .expect("scan");
        assert_eq!(s.removed.get(&Expiry::TcpSynSent), Some(&3));
        assert!(ct.entries(&ops).expect("entries").is_empty());
        // An entry approved on a hook whose endpoint is gone goes at once.
        let k = CtKey::new(17, ip(A), 5, ip(B), 6);
        let v = CtValue {
            created: now,
            last_seen: now,
            a: CtLeg {
                flags: CT_LEG_APPROVED,
                ifindex: 42,
            },
            ..CtValue::default()
        };
        ct.put(&ops, &k, &v).expect("put");
        let s = ct
            .scan(&ops, now, &t, |i| i == 42, |_| false)
            .expect("scan");
        assert_eq!(s.removed.get(&Expiry::EndpointRemoved), Some(&1));
        // So does one with an end at a deleted endpoint's address, approved or not.
        let k = CtKey::new(17, ip(A), 5, ip(B), 6);
        ct.put(
            &ops,
            &k,
            &CtValue {
                created: now,
                last_seen: now,
                ..CtValue::default()
            },
        )
        .expect("put");
        let s = ct
            .scan(&ops, now, &t, |_| false, |a| a == ip(B))
            .expect("scan");
        assert_eq!(s.removed.get(&Expiry::EndpointRemoved), Some(&1));
        assert!(ct.entries(&ops).expect("entries").is_empty());
    });
}

#[test]
fn a_resized_or_upgraded_conntrack_map_keeps_its_entries() {
    felix_netns::require!(netns["ip"]);
    in_netns(|| {
        let root = PinRoot::new();
        let opts = root.options(false);
        let ops = BpfOps::default();
        felix_bpf::maps::ensure_bpffs(&ops, &opts.bpffs).expect("bpffs");
        std::fs::create_dir_all(&opts.root).expect("root");
        let ct = Conntrack::open(&ops, &opts.root, 1000).expect("open");
        assert_eq!(ct.migration(), &Migration::Created);
        let entries: Vec<(CtKey, CtValue)> = (0..50u16)
            .map(|p| {
                (
                    CtKey::new(6, ip(A), 1000 + p, ip(B), 80),
                    CtValue {
                        created: u64::from(p),
                        ..CtValue::default()
                    },
                )
            })
            .collect();
        for (k, v) in &entries {
            ct.put(&ops, k, v).expect("put");
        }
        drop(ct);
        // BPFMapSizeConntrack changed: copied, not emptied.
        let ct = Conntrack::open(&ops, &opts.root, 2000).expect("resize");
        assert_eq!(
            ct.migration(),
            &Migration::Copied {
                from: "cali_ct".into(),
                copied: 50,
                dropped: 0
            }
        );
        let mut got = ct.entries(&ops).expect("entries");
        got.sort_by_key(|(k, _)| *k);
        let mut want = entries.clone();
        want.sort_by_key(|(k, _)| *k);
        assert_eq!(got, want);
        assert!(!opts.root.join("cali_ct_migrating").exists());
        drop(ct);
        assert_eq!(
            Conntrack::open(&ops, &opts.root, 2000)
                .expect("reopen")
                .migration(),
            &Migration::Opened
        );

        // A layout change: a (test) version 1 with 8-byte values migrates into version 2 with
        // 16-byte values, through a conversion; a crash left a half-written copy behind.
        let v1 = MapSpec {
            name: "cali_tst",
            version: 1,
            map_type: libbpf_rs::MapType::Hash,
            key_size: 4,
            value_size: 8,
            max_entries: 100,
            flags: 0,
        };
        let v2 = MapSpec {
            name: "cali_tst",
            version: 2,
            value_size: 16,
            ..v1
        };
        let (old, m) = open_or_migrate(&ops, &opts.root, v1, &[]).expect("v1");
        assert_eq!(m, Migration::Created);
        drop(old);
        let old =
            libbpf_rs::MapHandle::from_pinned_path(opts.root.join("cali_tst")).expect("v1 pin");
        for i in 0..10u32 {
            libbpf_rs::MapCore::update(
                &old,
                &i.to_ne_bytes(),
                &u64::from(i * 7).to_ne_bytes(),
                libbpf_rs::MapFlags::ANY,
            )
            .expect("v1 entry");
        }
        drop(old);
        let leftover = felix_bpf::maps::PinnedMap::open_or_create(&ops, v2, &opts.root)
            .expect("half-written copy");
        std::fs::rename(
            opts.root.join("cali_tst2"),
            opts.root.join("cali_tst2_migrating"),
        )
        .expect("rename");
        drop(leftover);
        fn widen(k: &[u8], v: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
            let mut nv = v.to_vec();
            nv.extend_from_slice(&[0xee; 8]);
            // Entry 3 has no meaning in the new layout: dropped, and counted.
            (k != 3u32.to_ne_bytes()).then(|| (k.to_vec(), nv))
        }
        let up = [Upgrade {
            from: v1,
            convert: widen,
        }];
        let (new, m) = open_or_migrate(&ops, &opts.root, v2, &up).expect("v2");
        assert_eq!(
            m,
            Migration::Copied {
                from: "cali_tst".into(),
                copied: 9,
                dropped: 1
            }
        );
        assert!(!opts.root.join("cali_tst").exists(), "old version removed");
        assert!(!opts.root.join("cali_tst2_migrating").exists());
        drop(new);
        let h = libbpf_rs::MapHandle::from_pinned_path(opts.root.join("cali_tst2")).expect("v2");
        let v = libbpf_rs::MapCore::lookup(&h, &5u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .expect("lookup")
            .expect("entry 5");
        assert_eq!(&v[..8], &35u64.to_ne_bytes());
        assert_eq!(&v[8..], &[0xee; 8]);
    });
}
