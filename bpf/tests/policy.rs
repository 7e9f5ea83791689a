//! Kernel tests of the policy interpreter (`cali_pol_rules`): `BPF_PROG_TEST_RUN` of
//! preamble -> main -> interpreter -> accepted/drop with crafted IPv4 and IPv6 packets, the
//! rules written as records (`felix_bpf::policy`) into the pinned policy maps.

mod common;

use common::PinRoot;
use felix_actors::metrics::Metrics;
use felix_actors::seam::{FaultRegistry, Seam};
use felix_bpf::dataplane::{Preamble, TC_ACT_OK, TC_ACT_SHOT};
use felix_bpf::layout::*;
use felix_bpf::policy::*;
use felix_bpf::polmaps::{test_run_repeat, PolicyMaps, PolicyProgram};
use std::os::fd::AsFd;

use felix_bpf::{BpfDataplane, BpfOps, Hook, Mechanism, SkbCtx, TcGlobals};

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMP6: u8 = 58;

fn addr(a: &[u8; 16], v6: bool) -> std::net::IpAddr {
    let x = std::net::Ipv6Addr::from(*a);
    match x.to_ipv4_mapped() {
        Some(v4) if !v6 => v4.into(),
        _ => x.into(),
    }
}

/// A crafted packet's facts.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    v6: bool,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    icmp: (u8, u8),
}

fn a4(a: [u8; 4]) -> [u8; 16] {
    let mut x = [0u8; 16];
    x[10] = 0xff;
    x[11] = 0xff;
    x[12..].copy_from_slice(&a);
    x
}

fn a6(last: u8) -> [u8; 16] {
    let mut x = [0u8; 16];
    x[0] = 0xfd;
    x[15] = last;
    x
}

impl Pkt {
    fn src_addr(&self) -> std::net::IpAddr {
        addr(&self.src, self.v6)
    }

    fn dst_addr(&self) -> std::net::IpAddr {
        addr(&self.dst, self.v6)
    }

    fn v4(proto: u8) -> Self {
        Pkt {
            v6: false,
            proto,
            src: a4([10, 65, 0, 1]),
            dst: a4([10, 65, 0, 2]),
            sport: 40000,
            dport: 80,
            icmp: (8, 0),
        }
    }

    fn v6(proto: u8) -> Self {
        Pkt {
            v6: true,
            src: a6(1),
            dst: a6(2),
            icmp: (128, 0),
            ..Pkt::v4(proto)
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let l4 = match self.proto {
            TCP => {
                let mut t = vec![0u8; 20];
                t[0..2].copy_from_slice(&self.sport.to_be_bytes());
                t[2..4].copy_from_slice(&self.dport.to_be_bytes());
                t[12] = 5 << 4;
                t[13] = 0x02;
                t
            }
            UDP => {
                let mut u = vec![0u8; 8];
                u[0..2].copy_from_slice(&self.sport.to_be_bytes());
                u[2..4].copy_from_slice(&self.dport.to_be_bytes());
                u[4..6].copy_from_slice(&8u16.to_be_bytes());
                u
            }
            _ => vec![self.icmp.0, self.icmp.1, 0, 0, 0, 1, 0, 1],
        };
        let mut p = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb];
        if self.v6 {
            p.extend_from_slice(&0x86ddu16.to_be_bytes());
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            p.extend_from_slice(&[self.proto, 64]);
            p.extend_from_slice(&self.src);
            p.extend_from_slice(&self.dst);
        } else {
            p.extend_from_slice(&0x0800u16.to_be_bytes());
            let len = (20 + l4.len()) as u16;
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[0, 1, 0x40, 0, 64, self.proto, 0, 0]);
            p.extend_from_slice(&self.src[12..]);
            p.extend_from_slice(&self.dst[12..]);
        }
        p.extend(l4);
        p
    }
}

/// One endpoint's chain: dataplane, policy maps, the interpreter in a slot, a preamble.
struct Rig {
    dp: BpfDataplane,
    maps: PolicyMaps,
    prog: PolicyProgram,
    pre: Preamble,
    ops: BpfOps,
    metrics: Metrics,
    mech: Mechanism,
    hook: Hook,
    flags: u32,
    slot: u32,
    next: u32,
    _root: PinRoot,
}

impl Rig {
    fn new(debug: bool) -> Self {
        Self::with(debug, Mechanism::Tcx, Hook::Egress, GLOBALS_F_WEP)
    }

    fn with(debug: bool, mech: Mechanism, hook: Hook, flags: u32) -> Self {
        let root = PinRoot::new();
        let metrics = Metrics::new();
        let ops = BpfOps::new(Seam::new(FaultRegistry::new(), metrics.clone()).for_actor("t"));
        let mut dp = BpfDataplane::start(ops.clone(), root.options(debug)).expect("start");
        dp.ensure_generic(mech, hook).expect("generic");
        let slot = dp.alloc_slot(mech, hook).expect("slot");
        let maps = PolicyMaps::open_or_create(&ops, &root.0).expect("policy maps");
        let prog = PolicyProgram::load(&ops, &maps, mech, hook, debug).expect("interpreter");
        prog.install(&ops, slot).expect("install");
        // The crafted sources are the workload's own (the test run's loopback).
        common::route_test_addrs(&dp, 1);
        let pre = Self::preamble(&mut dp, mech, hook, flags, slot);
        Rig {
            dp,
            maps,
            prog,
            pre,
            ops,
            metrics,
            mech,
            hook,
            flags,
            slot,
            next: 0,
            _root: root,
        }
    }

    fn preamble(
        dp: &mut BpfDataplane,
        mech: Mechanism,
        hook: Hook,
        flags: u32,
        slot: u32,
    ) -> Preamble {
        let mut g = TcGlobals::new(flags, slot);
        if dp.options().debug {
            g.log_filter_slot = felix_bpf::dataplane::LOG_FILTER_ALL_SLOT;
        }
        dp.load_preamble(mech, hook, &g).expect("preamble")
    }

    fn dir(&self) -> u32 {
        let ingress = self.flags & GLOBALS_F_INGRESS != 0;
        match (self.flags & GLOBALS_F_WEP != 0, ingress) {
            (true, true) | (false, false) => POL_DIR_EGRESS,
            _ => POL_DIR_INGRESS,
        }
    }

    fn alloc(&mut self, n: usize) -> u32 {
        let b = self.next;
        self.next += n as u32;
        b
    }

    /// Writes a policy's streams (same rules for both versions) and points `handle` at them.
    fn policy(&mut self, handle: u32, v4: &[RuleIr], v6: &[RuleIr]) {
        let s4 = assemble_policy(v4).expect("v4");
        let s6 = assemble_policy(v6).expect("v6");
        let b4 = self.alloc(s4.len());
        let b6 = self.alloc(s6.len());
        self.maps
            .write_records(&self.ops, b4, &s4)
            .expect("v4 records");
        self.maps
            .write_records(&self.ops, b6, &s6)
            .expect("v6 records");
        let idx = PolicyIndex {
            base: [b4, b6],
            len: [s4.len() as u32, s6.len() as u32],
        };
        self.maps
            .set_policy(&self.ops, handle, &idx)
            .expect("index");
    }

    fn rules(&mut self, handle: u32, rules: &[RuleIr]) {
        self.policy(handle, rules, rules);
    }

    fn endpoint_at(&mut self, slot: u32, tiers: &[TierIr], profiles: &[u32]) {
        let list = assemble_endpoint(tiers, profiles);
        let base = self.alloc(list.len());
        self.maps
            .write_records(&self.ops, base, &list)
            .expect("list");
        let key = EndpointKey {
            slot,
            dir: self.dir(),
        };
        let val = EndpointList {
            base,
            len: list.len() as u32,
        };
        self.maps
            .set_endpoint(&self.ops, self.mech, key, &val)
            .expect("endpoint");
    }

    /// Writes list `dir` of the rig's slot: `tiers`, `profiles`, then `end`.
    fn list(&mut self, dir: u32, tiers: &[TierIr], profiles: &[u32], end: u8) {
        let list = assemble_list(tiers, profiles, end);
        let base = self.alloc(list.len());
        self.maps
            .write_records(&self.ops, base, &list)
            .expect("list");
        let key = EndpointKey {
            slot: self.slot,
            dir,
        };
        let val = EndpointList {
            base,
            len: list.len() as u32,
        };
        self.maps
            .set_endpoint(&self.ops, self.mech, key, &val)
            .expect("endpoint");
    }

    fn endpoint(&mut self, tiers: &[TierIr], profiles: &[u32]) {
        self.endpoint_at(self.slot, tiers, profiles);
    }

    /// One tier with one policy (`handle`), default deny.
    fn single(&mut self, handle: u32, rules: &[RuleIr]) {
        self.rules(handle, rules);
        self.endpoint(&[tier(&[handle], false)], &[]);
    }

    /// One packet as a new flow (conntrack emptied first: these tests judge policy).
    fn run(&mut self, p: &Pkt) -> i32 {
        self.dp
            .conntrack()
            .clear(&self.ops)
            .expect("clear conntrack");
        self.pre
            .test_run(&self.ops, &p.bytes(), SkbCtx::default())
            .expect("test run")
            .verdict
    }

    fn allows(&mut self, p: &Pkt) -> bool {
        match self.run(p) {
            TC_ACT_OK => true,
            TC_ACT_SHOT => false,
            v => panic!("unexpected verdict {v}"),
        }
    }

    fn updates(&self) -> u64 {
        self.metrics.seam_op_counts("t", "map_update").0
    }
}

fn tier(pols: &[u32], default_pass: bool) -> TierIr {
    TierIr {
        policies: pols.to_vec(),
        default_pass,
    }
}

fn rule(groups: Vec<Group>, action: RuleAction) -> RuleIr {
    RuleIr { groups, action }
}

fn any(tests: Vec<Test>) -> Group {
    Group {
        negate: false,
        any_of: tests,
    }
}

fn none(tests: Vec<Test>) -> Group {
    Group {
        negate: true,
        any_of: tests,
    }
}

fn allow_if(groups: Vec<Group>) -> Vec<RuleIr> {
    vec![rule(groups, RuleAction::Allow)]
}

fn net(dst: bool, addr: [u8; 16], prefix: u8) -> Test {
    Test::Net { dst, addr, prefix }
}

fn ports(dst: bool, lo: u16, hi: u16) -> Test {
    Test::Ports { dst, lo, hi }
}

#[test]
fn every_rule_test_matches_and_negates_over_ipv4_and_ipv6() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        let tcp4 = Pkt::v4(TCP);
        let udp4 = Pkt::v4(UDP);
        let icmp4 = Pkt::v4(ICMP);
        let tcp6 = Pkt::v6(TCP);
        let udp6 = Pkt::v6(UDP);
        let icmp6 = Pkt::v6(ICMP6);
        let cases: Vec<(&str, Group, Pkt, bool)> = vec![
            ("proto tcp", any(vec![Test::Proto(TCP)]), tcp4, true),
            ("proto tcp vs udp", any(vec![Test::Proto(TCP)]), udp4, false),
            ("not proto tcp", none(vec![Test::Proto(TCP)]), udp6, true),
            (
                "not proto tcp vs tcp",
                none(vec![Test::Proto(TCP)]),
                tcp6,
                false,
            ),
            (
                "src net",
                any(vec![net(false, a4([10, 65, 0, 0]), 96 + 24)]),
                tcp4,
                true,
            ),
            (
                "src net miss",
                any(vec![net(false, a4([10, 66, 0, 0]), 96 + 16)]),
                tcp4,
                false,
            ),
            (
                "src nets (any)",
                any(vec![
                    net(false, a4([192, 168, 0, 0]), 96 + 16),
                    net(false, a4([10, 65, 0, 1]), 128),
                ]),
                udp4,
                true,
            ),
            ("dst net v6", any(vec![net(true, a6(0), 64)]), tcp6, true),
            (
                "dst net v6 miss",
                any(vec![net(true, a6(3), 128)]),
                tcp6,
                false,
            ),
            (
                "not dst net",
                none(vec![net(true, a4([10, 65, 0, 2]), 128)]),
                tcp4,
                false,
            ),
            (
                "not dst nets (none)",
                none(vec![
                    net(true, a4([1, 1, 1, 1]), 128),
                    net(true, a4([2, 2, 0, 0]), 112),
                ]),
                tcp4,
                true,
            ),
            ("dst port", any(vec![ports(true, 80, 80)]), tcp4, true),
            ("dst port range", any(vec![ports(true, 70, 90)]), udp6, true),
            (
                "dst ports miss",
                any(vec![ports(true, 81, 90), ports(true, 1, 79)]),
                tcp4,
                false,
            ),
            (
                "src port range",
                any(vec![ports(false, 32768, 60999)]),
                udp4,
                true,
            ),
            (
                "not src port",
                none(vec![ports(false, 40000, 40000)]),
                tcp6,
                false,
            ),
            (
                "not dst ports",
                none(vec![ports(true, 443, 443), ports(true, 8000, 8080)]),
                tcp4,
                true,
            ),
            (
                "ports need ports",
                any(vec![ports(true, 0, 65535)]),
                icmp4,
                false,
            ),
            (
                "icmp type",
                any(vec![Test::Icmp {
                    icmp_type: 8,
                    code: None,
                }]),
                icmp4,
                true,
            ),
            (
                "icmp type code",
                any(vec![Test::Icmp {
                    icmp_type: 8,
                    code: Some(0),
                }]),
                icmp4,
                true,
            ),
            (
                "icmp code miss",
                any(vec![Test::Icmp {
                    icmp_type: 8,
                    code: Some(1),
                }]),
                icmp4,
                false,
            ),
            (
                "icmp6 type",
                any(vec![Test::Icmp {
                    icmp_type: 128,
                    code: None,
                }]),
                icmp6,
                true,
            ),
            (
                "icmp on tcp",
                any(vec![Test::Icmp {
                    icmp_type: 8,
                    code: None,
                }]),
                tcp4,
                false,
            ),
            (
                "not icmp type",
                none(vec![Test::Icmp {
                    icmp_type: 0,
                    code: None,
                }]),
                icmp4,
                true,
            ),
            (
                "not icmp type hit",
                none(vec![Test::Icmp {
                    icmp_type: 128,
                    code: None,
                }]),
                icmp6,
                false,
            ),
        ];
        for (i, (name, group, pkt, want)) in cases.into_iter().enumerate() {
            rig.single(100 + i as u32, &allow_if(vec![group]));
            assert_eq!(rig.allows(&pkt), want, "{name}");
        }
    });
}

#[test]
fn rule_actions_deny_pass_log_and_rule_order() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        let tcp = Pkt::v4(TCP);
        // Log counts and continues; the deny after it decides before the allow.
        rig.single(
            1,
            &[
                rule(vec![], RuleAction::Log),
                rule(vec![any(vec![Test::Proto(TCP)])], RuleAction::Deny),
                rule(vec![], RuleAction::Allow),
            ],
        );
        let before = rig.maps.log_hits(&rig.ops, 1).expect("hits");
        assert!(!rig.allows(&tcp));
        assert_eq!(rig.maps.log_hits(&rig.ops, 1).expect("hits"), before + 1);
        assert!(rig.allows(&Pkt::v4(UDP)), "the deny does not match udp");
        // A policy without a decision: end-of-tier deny.
        rig.single(
            2,
            &[rule(vec![any(vec![Test::Proto(UDP)])], RuleAction::Allow)],
        );
        assert!(!rig.allows(&tcp));
        // An empty policy decides nothing either.
        rig.single(3, &[]);
        assert!(!rig.allows(&tcp));
        // A rule per family: the IPv6 stream of the policy is used for IPv6.
        rig.policy(4, &allow_if(vec![]), &[]);
        rig.endpoint(&[tier(&[4], false)], &[]);
        assert!(rig.allows(&tcp));
        assert!(!rig.allows(&Pkt::v6(TCP)));
    });
}

#[test]
fn tiers_pass_end_of_tier_deny_default_pass_then_profiles_then_default_deny() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        let tcp = Pkt::v4(TCP);
        let pass = [rule(vec![], RuleAction::Pass)];
        let allow = [rule(vec![], RuleAction::Allow)];
        let deny = [rule(vec![], RuleAction::Deny)];
        let nothing = [rule(vec![any(vec![Test::Proto(UDP)])], RuleAction::Deny)];
        rig.rules(10, &pass);
        rig.rules(11, &allow);
        rig.rules(12, &deny);
        rig.rules(13, &nothing);
        // Pass skips the rest of its tier (the deny policy) and its end-of-tier deny.
        rig.endpoint(&[tier(&[10, 12], false), tier(&[11], false)], &[]);
        assert!(rig.allows(&tcp));
        // No decision in a tier: end-of-tier deny, the next tier never runs.
        rig.endpoint(&[tier(&[13], false), tier(&[11], false)], &[]);
        assert!(!rig.allows(&tcp));
        // ... unless the tier's default action is Pass.
        rig.endpoint(&[tier(&[13], true), tier(&[11], false)], &[]);
        assert!(rig.allows(&tcp));
        // A tier without policies is skipped (no end-of-tier deny).
        rig.endpoint(&[tier(&[], false)], &[11]);
        assert!(rig.allows(&tcp));
        // Tiers all passed: profiles decide; a profile's Pass goes to the next profile.
        rig.endpoint(&[tier(&[10], false)], &[10, 11]);
        assert!(rig.allows(&tcp));
        rig.endpoint(&[tier(&[10], false)], &[13, 12, 11]);
        assert!(!rig.allows(&tcp));
        // Nothing matched anywhere: default deny.
        rig.endpoint(&[tier(&[13], true)], &[13]);
        assert!(!rig.allows(&tcp));
        rig.endpoint(&[], &[]);
        assert!(!rig.allows(&tcp));
        // A missing policy index fails closed.
        rig.endpoint(&[tier(&[999], true)], &[11]);
        assert!(!rig.allows(&tcp));
        // No list for the endpoint at all: deny.
        let key = EndpointKey {
            slot: rig.slot,
            dir: rig.dir(),
        };
        rig.maps
            .delete_endpoint(&rig.ops, rig.mech, key)
            .expect("delete");
        assert!(!rig.allows(&tcp));
    });
}

#[test]
fn ip_set_cidr_members_ignore_ports_ip_port_members_match_exactly_and_deltas_change_verdicts() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        let set = 0x1122_3344_5566_7788u64;
        let cidr = IpSetKey {
            set_id: set,
            addr: a4([10, 65, 0, 0]),
            addr_prefix: 96 + 24,
            port: None,
        };
        let ipport = IpSetKey {
            set_id: set + 1,
            addr: a4([10, 65, 0, 2]),
            addr_prefix: 128,
            port: Some((TCP, 80)),
        };
        let v6 = IpSetKey {
            set_id: set,
            addr: a6(2),
            addr_prefix: 128,
            port: None,
        };
        rig.rules(
            1,
            &allow_if(vec![any(vec![Test::Set {
                dst: false,
                id: set,
            }])]),
        );
        rig.rules(
            2,
            &allow_if(vec![any(vec![Test::Set {
                dst: true,
                id: set + 1,
            }])]),
        );
        rig.rules(
            3,
            &allow_if(vec![none(vec![Test::Set { dst: true, id: set }])]),
        );
        let src_set = |rig: &mut Rig| rig.endpoint(&[tier(&[1], false)], &[]);
        src_set(&mut rig);
        let tcp = Pkt::v4(TCP);
        assert!(!rig.allows(&tcp), "empty set");
        rig.maps.add_member(&rig.ops, &cidr).expect("add");
        assert!(rig.allows(&tcp), "CIDR member, any port");
        assert!(rig.allows(&Pkt::v4(UDP)));
        assert!(rig.allows(&Pkt::v4(ICMP)));
        assert!(
            !rig.allows(&Pkt::v6(TCP)),
            "an IPv4 member never matches IPv6"
        );
        rig.maps.delete_member(&rig.ops, &cidr).expect("delete");
        assert!(!rig.allows(&tcp), "delta removed the member");
        // IP and port: exact address, protocol and port.
        rig.endpoint(&[tier(&[2], false)], &[]);
        assert!(!rig.allows(&tcp));
        rig.maps.add_member(&rig.ops, &ipport).expect("add");
        assert!(rig.allows(&tcp));
        assert!(!rig.allows(&Pkt { dport: 81, ..tcp }));
        assert!(!rig.allows(&Pkt::v4(UDP)), "udp 40000->80 is not tcp:80");
        assert!(!rig.allows(&Pkt {
            dst: a4([10, 65, 0, 3]),
            ..tcp
        }));
        // Negated set over IPv6.
        rig.endpoint(&[tier(&[3], false)], &[]);
        assert!(rig.allows(&Pkt::v6(UDP)));
        rig.maps.add_member(&rig.ops, &v6).expect("add");
        assert!(!rig.allows(&Pkt::v6(UDP)));
        assert!(rig.has_member(&v6));
    });
}

impl Rig {
    fn has_member(&self, k: &IpSetKey) -> bool {
        self.maps.has_member(&self.ops, k).expect("lookup")
    }
}

#[test]
fn a_policy_update_is_new_records_and_one_index_swap_that_every_sharing_endpoint_follows() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        // A second endpoint (its own slot and preamble) sharing policy 7.
        let slot2 = rig.dp.alloc_slot(rig.mech, rig.hook).expect("slot");
        rig.prog.install(&rig.ops, slot2).expect("install");
        let mut pre2 = Rig::preamble(&mut rig.dp, rig.mech, rig.hook, rig.flags, slot2);
        rig.rules(7, &[rule(vec![], RuleAction::Allow)]);
        rig.rules(8, &[rule(vec![], RuleAction::Allow)]);
        rig.endpoint(&[tier(&[7], false)], &[]);
        rig.endpoint_at(slot2, &[tier(&[7], false)], &[8]);
        let tcp = Pkt::v4(TCP);
        let run2 = |rig: &Rig, pre2: &mut Preamble| {
            rig.dp.conntrack().clear(&rig.ops).expect("clear conntrack");
            pre2.test_run(&rig.ops, &tcp.bytes(), SkbCtx::default())
                .expect("run")
                .verdict
        };
        assert!(rig.allows(&tcp));
        assert_eq!(run2(&rig, &mut pre2), TC_ACT_OK);
        let dir = rig.dir();
        let key = |slot| EndpointKey { slot, dir };
        let lists_before =
            [rig.slot, slot2].map(|s| rig.maps.endpoint(&rig.ops, rig.mech, key(s)).expect("ep"));
        let old = rig.maps.policy(&rig.ops, 7).expect("idx").expect("present");
        let updates = rig.updates();
        // The change: records elsewhere (one batched write per version) + one index swap.
        rig.rules(
            7,
            &[rule(vec![any(vec![Test::Proto(TCP)])], RuleAction::Deny)],
        );
        assert_eq!(
            rig.updates() - updates,
            3,
            "v4 records, v6 records, one index entry"
        );
        let new = rig.maps.policy(&rig.ops, 7).expect("idx").expect("present");
        assert_ne!(new.base, old.base, "written elsewhere, not in place");
        assert!(!rig.allows(&tcp));
        assert_eq!(run2(&rig, &mut pre2), TC_ACT_SHOT);
        let lists_after =
            [rig.slot, slot2].map(|s| rig.maps.endpoint(&rig.ops, rig.mech, key(s)).expect("ep"));
        assert_eq!(lists_before, lists_after, "no endpoint list rewritten");
        assert_eq!(
            rig.maps.policy(&rig.ops, 8).expect("idx").map(|i| i.base),
            Some(rig.maps.policy(&rig.ops, 8).expect("idx").expect("8").base),
            "the other policy untouched"
        );
        // An endpoint change: its list written elsewhere and one swap; the other endpoint
        // keeps its verdict.
        rig.rules(9, &[rule(vec![], RuleAction::Allow)]);
        let updates = rig.updates();
        rig.endpoint(&[tier(&[9], false)], &[]);
        assert_eq!(
            rig.updates() - updates,
            2,
            "list records + one endpoint entry"
        );
        assert!(rig.allows(&tcp));
        assert_eq!(run2(&rig, &mut pre2), TC_ACT_SHOT);
    });
}

/// Invariant: **the interpreter verifies in a small share of the verifier's budget** (one
/// million processed instructions). `walk_list` is a global BPF function, verified once
/// rather than at each of its five call sites: inlined, a 6.18 stable kernel processed
/// over a million instructions and refused the program (`E2BIG`). A quarter of the budget
/// leaves room for a kernel whose verifier explores more states.
#[test]
fn the_interpreter_verifies_in_a_small_share_of_the_verifiers_budget() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        for debug in [false, true] {
            let rig = Rig::new(debug);
            let insns = rig.prog.verified_insns(&rig.ops).expect("program info");
            assert!(insns > 0, "the kernel reports verified instructions");
            assert!(
                insns < 250_000,
                "debug {debug}: {insns} instructions processed by the verifier"
            );
        }
    });
}

#[test]
fn fast_and_debug_paths_give_the_same_verdicts() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut verdicts = Vec::new();
        for debug in [false, true] {
            let mut rig = Rig::new(debug);
            rig.rules(
                1,
                &[
                    rule(vec![], RuleAction::Log),
                    rule(
                        vec![any(vec![Test::Proto(TCP)]), any(vec![ports(true, 80, 80)])],
                        RuleAction::Allow,
                    ),
                    rule(vec![any(vec![Test::Proto(UDP)])], RuleAction::Pass),
                ],
            );
            rig.rules(
                2,
                &[rule(
                    vec![any(vec![Test::Proto(ICMP6), Test::Proto(UDP)])],
                    RuleAction::Allow,
                )],
            );
            rig.endpoint(&[tier(&[1], false)], &[2]);
            let pkts = [
                Pkt::v4(TCP),
                Pkt {
                    dport: 81,
                    ..Pkt::v4(TCP)
                },
                Pkt::v4(UDP),
                Pkt::v6(ICMP6),
                Pkt::v6(UDP),
            ];
            let mut v = Vec::new();
            for p in &pkts {
                rig.dp.conntrack().clear(&rig.ops).expect("clear conntrack");
                let r = rig
                    .pre
                    .test_run(&rig.ops, &p.bytes(), SkbCtx::default())
                    .expect("run");
                let path = if debug { PROG_DEBUG_OFFSET } else { 0 };
                assert_eq!(
                    r.ctx.cb[CB_ALLOW],
                    PROG_INDEX_ALLOWED + path,
                    "debug {debug}"
                );
                v.push(r.verdict);
            }
            verdicts.push(v);
        }
        assert_eq!(verdicts[0], verdicts[1]);
        assert_eq!(
            verdicts[0],
            vec![TC_ACT_OK, TC_ACT_SHOT, TC_ACT_OK, TC_ACT_SHOT, TC_ACT_OK]
        );
    });
}

#[test]
fn the_policy_direction_follows_the_hook_and_endpoint_kind() {
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        for (mech, hook, flags, dir) in [
            (
                Mechanism::Tcx,
                Hook::Ingress,
                GLOBALS_F_WEP | GLOBALS_F_INGRESS,
                POL_DIR_EGRESS,
            ),
            (Mechanism::Tc, Hook::Egress, GLOBALS_F_WEP, POL_DIR_INGRESS),
        ] {
            let mut rig = Rig::with(false, mech, hook, flags);
            assert_eq!(rig.dir(), dir);
            rig.single(1, &[rule(vec![], RuleAction::Allow)]);
            assert!(rig.allows(&Pkt::v4(TCP)), "{mech:?} {hook:?}");
            // The other direction's list does not apply.
            let key = EndpointKey {
                slot: rig.slot,
                dir,
            };
            let list = rig
                .maps
                .endpoint(&rig.ops, mech, key)
                .expect("ep")
                .expect("some");
            rig.maps.delete_endpoint(&rig.ops, mech, key).expect("del");
            let other = EndpointKey {
                slot: rig.slot,
                dir: 1 - dir,
            };
            rig.maps
                .set_endpoint(&rig.ops, mech, other, &list)
                .expect("set");
            assert!(
                !rig.allows(&Pkt::v4(TCP)),
                "{mech:?} {hook:?} other direction"
            );
        }
    });
}

/// Figures for the issue: verifier-processed instructions and load time of the interpreter,
/// and ns per packet through the whole chain for 10 / 100 / 1,000 rules (the last one
/// matches) beside `cali_pol_allow`, from one run. `cargo test -p felix-bpf --test policy
/// -- --ignored --nocapture interpreter_figures`.
#[test]
#[ignore = "benchmark: prints figures"]
fn interpreter_figures() {
    // A benchmark run by hand as root, not a gated kernel test (CI counts gated tests).
    common::in_netns(|| {
        const REPEAT: u32 = 200_000;
        let mut rig = Rig::new(false);
        println!(
            "interpreter: {} verified insns, load {:?}",
            rig.prog.verified_insns(&rig.ops).expect("info"),
            rig.prog.load_time()
        );
        let pkt = Pkt::v4(TCP).bytes();
        // Baseline: cali_pol_allow in the same kind of slot.
        let base_slot = rig.dp.alloc_slot(rig.mech, rig.hook).expect("slot");
        rig.dp
            .set_policy(rig.mech, rig.hook, base_slot, felix_bpf::PolicyKind::Allow)
            .expect("allow");
        let base_pre = Rig::preamble(&mut rig.dp, rig.mech, rig.hook, rig.flags, base_slot);
        let base = test_run_repeat(
            &rig.ops,
            base_pre.program().expect("p").as_fd(),
            &pkt,
            REPEAT,
        )
        .expect("run");
        assert_eq!(base.verdict, TC_ACT_OK);
        println!("cali_pol_allow baseline: {} ns/packet", base.avg.as_nanos());
        for n in [10u32, 100, 1000] {
            // n rules of "tcp to port 1000+i from 192.168.0.0/16"; only the last matches.
            let mut rules: Vec<RuleIr> = (0..n - 1)
                .map(|i| {
                    rule(
                        vec![
                            any(vec![Test::Proto(TCP)]),
                            any(vec![ports(true, 1000 + i as u16, 1000 + i as u16)]),
                            any(vec![net(false, a4([192, 168, 0, 0]), 96 + 16)]),
                        ],
                        RuleAction::Allow,
                    )
                })
                .collect();
            rules.push(rule(
                vec![
                    any(vec![Test::Proto(TCP)]),
                    any(vec![ports(true, 80, 80)]),
                    any(vec![net(false, a4([10, 65, 0, 0]), 96 + 16)]),
                ],
                RuleAction::Allow,
            ));
            let t0 = felix_actors::clock::real_now();
            rig.rules(n, &rules);
            let write = t0.elapsed();
            rig.endpoint(&[tier(&[n], false)], &[]);
            let r = test_run_repeat(
                &rig.ops,
                rig.pre.program().expect("p").as_fd(),
                &pkt,
                REPEAT,
            )
            .expect("run");
            assert_eq!(r.verdict, TC_ACT_OK, "{n} rules: the last allows");
            println!(
                "{n} rules (last matches): {} ns/packet; policy write (records + index swap) {:?}",
                r.avg.as_nanos(),
                write
            );
        }
    });
}

/// Invariant (host endpoints, as the *tables renderer's raw, mangle and filter chains): a
/// host endpoint's TC ingress walks failsafe ports, untracked policy (an allow is final and
/// creates no conntrack entry), pre-DNAT policy (an allow is final), then normal policy
/// (default deny) for traffic to the host or applyOnForward policy (no match: allowed) for
/// traffic forwarded through it; the routes map says which is the host's.
#[test]
fn a_host_endpoint_walks_failsafes_untracked_pre_dnat_then_normal_or_forward_policy() {
    use felix_bpf::routes::{
        Failsafe, RouteMaps, RouteVal, FSAFE_IN, RT_LOCAL_HOST, RT_REMOTE_WORKLOAD,
    };
    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::with(
            false,
            Mechanism::Tcx,
            Hook::Ingress,
            GLOBALS_F_HEP | GLOBALS_F_INGRESS,
        );
        let ops = rig.ops.clone();
        let routes = RouteMaps::open_or_create(&ops, &rig._root.0).expect("route maps");
        let dst: ipnet::IpNet = "10.65.0.2/32".parse().expect("net");
        let set_dst = |flags| {
            routes
                .set_route(&ops, &dst, RouteVal { flags, ifindex: 0 })
                .expect("route")
        };
        let allow_all = rule(vec![], RuleAction::Allow);
        let deny_all = rule(vec![], RuleAction::Deny);
        rig.rules(1, std::slice::from_ref(&allow_all));
        rig.rules(2, std::slice::from_ref(&deny_all));
        let none: &[TierIr] = &[];
        let lists = |rig: &mut Rig,
                     untracked: &[TierIr],
                     prednat: &[TierIr],
                     normal: &[TierIr],
                     fwd: &[TierIr]| {
            rig.list(POL_DIR_UNTRACKED_IN, untracked, &[], EP_END_NO_MATCH);
            rig.list(POL_DIR_PREDNAT_IN, prednat, &[], EP_END_NO_MATCH);
            rig.list(POL_DIR_INGRESS, normal, &[], EP_END_DENY);
            rig.list(POL_DIR_FORWARD_IN, fwd, &[], EP_END_NO_MATCH);
        };
        let p = Pkt::v4(TCP);
        let tracked = |rig: &Rig| rig.dp.conntrack().entries(&rig.ops).expect("ct").len();

        // No policy at all: the host is closed (default deny), forwarding open.
        lists(&mut rig, none, none, none, none);
        set_dst(RT_LOCAL_HOST);
        assert!(!rig.allows(&p), "to the host: default deny");
        set_dst(RT_REMOTE_WORKLOAD);
        assert!(
            rig.allows(&p),
            "forwarded: no applyOnForward policy, allowed"
        );

        // A failsafe port opens the host.
        let fs = Failsafe {
            dir: FSAFE_IN,
            proto: TCP,
            port: 80,
            net: "0.0.0.0/0".parse().expect("net"),
        };
        routes.add_failsafe(&ops, &fs).expect("failsafe");
        set_dst(RT_LOCAL_HOST);
        assert!(rig.allows(&p), "failsafe tcp:80 to the host");
        assert!(!rig.allows(&Pkt { dport: 81, ..p }), "not a failsafe port");
        routes.retain_failsafes(&ops, &[]).expect("no failsafes");
        assert!(!rig.allows(&p));

        // Untracked deny is final, untracked allow too (and tracks nothing).
        lists(
            &mut rig,
            &[tier(&[2], false)],
            none,
            &[tier(&[1], false)],
            none,
        );
        assert!(!rig.allows(&p), "untracked deny");
        lists(
            &mut rig,
            &[tier(&[1], false)],
            &[tier(&[2], false)],
            none,
            none,
        );
        assert!(rig.allows(&p), "untracked allow wins over a pre-DNAT deny");
        assert_eq!(tracked(&rig), 0, "untracked: no conntrack entry");

        // Pre-DNAT allow is final (normal policy would deny), and tracked.
        lists(&mut rig, none, &[tier(&[1], false)], none, none);
        assert!(rig.allows(&p), "pre-DNAT allow");
        assert_eq!(tracked(&rig), 1);
        lists(
            &mut rig,
            none,
            &[tier(&[2], false)],
            &[tier(&[1], false)],
            none,
        );
        assert!(!rig.allows(&p), "pre-DNAT deny");

        // Normal policy for the host, applyOnForward policy for forwarded traffic.
        lists(
            &mut rig,
            none,
            none,
            &[tier(&[1], false)],
            &[tier(&[2], false)],
        );
        assert!(rig.allows(&p), "normal allow to the host");
        set_dst(RT_REMOTE_WORKLOAD);
        assert!(!rig.allows(&p), "forward deny");
        lists(
            &mut rig,
            none,
            none,
            &[tier(&[2], false)],
            &[tier(&[1], false)],
        );
        assert!(
            rig.allows(&p),
            "forward allow; the normal deny does not apply"
        );
    });
}

#[test]
fn bpf_drop_reports_name_the_record_and_respect_the_switch_and_the_rate() {
    use felix_bpf::drops::{DropConfig, DropEvent, DropRingReader, DropWhy};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;

    felix_netns::require!(netns["ip"]);
    common::in_netns(|| {
        let mut rig = Rig::new(false);
        let got: Rc<RefCell<Vec<DropEvent>>> = Rc::default();
        let sink = got.clone();
        let reader = DropRingReader::open(&rig.ops, &rig._root.0, move |e| {
            sink.borrow_mut().push(e.expect("event parses"));
        })
        .expect("open ring")
        .expect("ring pinned");
        let take = |rig: &mut Rig| -> Vec<DropEvent> {
            reader
                .poll(&rig.ops, Duration::from_millis(50))
                .expect("poll");
            got.borrow_mut().drain(..).collect()
        };
        let tcp = Pkt::v4(TCP);
        // Rule 0 (one record) allows UDP; rule 1 (record 1) denies TCP.
        let rules = [
            rule(vec![any(vec![Test::Proto(UDP)])], RuleAction::Allow),
            rule(vec![any(vec![Test::Proto(TCP)])], RuleAction::Deny),
        ];
        rig.single(1, &rules);

        // Off (the maps' initial state): a deny reports nothing.
        assert!(!rig.allows(&tcp));
        assert!(take(&mut rig).is_empty(), "reported while off");

        let on = |per_sec| DropConfig {
            enabled: true,
            per_sec,
        };
        rig.maps
            .drops()
            .configure(&rig.ops, on(1000))
            .expect("configure");
        assert!(!rig.allows(&tcp));
        let e = take(&mut rig);
        assert_eq!(e.len(), 1, "{e:?}");
        let e = e[0];
        assert_eq!(
            (e.why, e.handle, e.index, e.slot, e.list),
            (DropWhy::Rule, 1, 1, rig.slot, rig.dir())
        );
        assert_eq!(
            (e.src_addr(), e.dst_addr(), e.proto, e.sport, e.dport),
            (tcp.src_addr(), tcp.dst_addr(), TCP, tcp.sport, tcp.dport)
        );
        // An allowed packet is not reported.
        assert!(rig.allows(&Pkt::v4(UDP)));
        assert!(take(&mut rig).is_empty());

        // A tier's end: record 1 of [REF 13, TIER_END].
        rig.rules(
            13,
            &[rule(vec![any(vec![Test::Proto(UDP)])], RuleAction::Deny)],
        );
        rig.endpoint(&[tier(&[13], false)], &[]);
        assert!(!rig.allows(&tcp));
        let e = take(&mut rig);
        assert_eq!((e[0].why, e[0].index), (DropWhy::TierEnd, 1), "{e:?}");
        // The list's end: [REF 13, TIER_END(pass), REF 13, END] -> record 3.
        rig.endpoint(&[tier(&[13], true)], &[13]);
        assert!(!rig.allows(&tcp));
        let e = take(&mut rig);
        assert_eq!((e[0].why, e[0].index), (DropWhy::ListEnd, 3), "{e:?}");
        // A policy not written: fail closed, naming the handle.
        rig.endpoint(&[tier(&[999], true)], &[]);
        assert!(!rig.allows(&tcp));
        let e = take(&mut rig);
        assert_eq!((e[0].why, e[0].handle), (DropWhy::Missing, 999), "{e:?}");

        // The rate: at most `per_sec` reports per rule per second; the rest are counted.
        rig.single(1, &rules);
        rig.maps
            .drops()
            .configure(&rig.ops, on(3))
            .expect("configure");
        let before = rig.maps.drops().stats(&rig.ops).expect("stats");
        for _ in 0..20 {
            assert!(!rig.allows(&tcp));
        }
        let reported = take(&mut rig).len() as u64;
        let after = rig.maps.drops().stats(&rig.ops).expect("stats");
        assert_eq!(
            (after.reported - before.reported) + (after.suppressed - before.suppressed),
            20,
            "{before:?} -> {after:?}"
        );
        assert_eq!(after.reported - before.reported, reported);
        // Within one second 3 pass; a run spanning a second's edge lets another 3 through.
        assert!((1..=6).contains(&reported), "{reported} reported of 20");
        assert_eq!(after.lost, 0);

        // Off again: nothing more.
        rig.maps
            .drops()
            .configure(&rig.ops, DropConfig::default())
            .expect("configure");
        assert!(!rig.allows(&tcp));
        assert!(take(&mut rig).is_empty());
    });
}
