//! Differential kernel test: the calc graph's policies compiled and written by
//! [`PolicyWriter`] into the pinned maps, packets run through preamble -> main ->
//! `cali_pol_rules` with `BPF_PROG_TEST_RUN`, verdicts checked against the reference
//! semantics.

use std::path::PathBuf;

use felix_bpf::dataplane::{TC_ACT_OK, TC_ACT_SHOT};
use felix_bpf::layout::GLOBALS_F_WEP;
use felix_bpf::{
    BpfDataplane, BpfOps, Hook, Mechanism, Options, PolicyMaps, PolicyProgram, SkbCtx, TcGlobals,
};
use felix_proto::IpSetUpdate;

use super::reference::*;
use super::tests::gen_case;
use super::*;

/// An Ethernet frame carrying `p`.
pub(crate) fn frame(p: &RefPkt) -> Vec<u8> {
    let l4 = match p.proto {
        6 => {
            let mut t = vec![0u8; 20];
            t[0..2].copy_from_slice(&p.sport.to_be_bytes());
            t[2..4].copy_from_slice(&p.dport.to_be_bytes());
            t[12] = 5 << 4;
            t
        }
        17 => {
            let mut u = vec![0u8; 8];
            u[0..2].copy_from_slice(&p.sport.to_be_bytes());
            u[2..4].copy_from_slice(&p.dport.to_be_bytes());
            u[4..6].copy_from_slice(&8u16.to_be_bytes());
            u
        }
        _ => vec![p.icmp.0, p.icmp.1, 0, 0, 0, 1, 0, 1],
    };
    let mut f = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb];
    match (p.src, p.dst) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 1, 0x40, 0, 64, p.proto, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let six = |a: std::net::IpAddr| match a {
                std::net::IpAddr::V6(a) => a.octets(),
                std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[p.proto, 64]);
            f.extend_from_slice(&six(s));
            f.extend_from_slice(&six(d));
        }
    }
    f.extend(l4);
    f
}

struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn bpf_verdicts_agree_with_the_reference_semantics() {
    felix_netns::require!(netns["ip"]);
    let ns = felix_netns::Netns::unique("fpol").expect("netns");
    ns.spawn_in(|| {
        let root = Root(PathBuf::from(format!(
            "/sys/fs/bpf/felix-poltest-{}",
            std::process::id()
        )));
        let ops = BpfOps::default();
        let opts = Options {
            root: root.0.clone(),
            ..Options::default()
        };
        let (mech, hook) = (Mechanism::Tcx, Hook::Egress);
        let mut dp = BpfDataplane::start(ops.clone(), opts).expect("start");
        dp.ensure_generic(mech, hook).expect("generic");
        let maps = PolicyMaps::open_or_create(&ops, &root.0).expect("maps");
        let prog = PolicyProgram::load(&ops, &maps, mech, hook, false).expect("load");
        let mut w = PolicyWriter::new(BpfPolicyStore {
            maps,
            ops: ops.clone(),
        });
        let mut g = Gen(0x2545_f491_4f6c_dd1d);
        let mut checked = 0;
        for round in 0..40 {
            let slot = dp.alloc_slot(mech, hook).expect("slot");
            prog.install(&ops, slot).expect("install");
            let pre = dp
                .load_preamble(mech, hook, &TcGlobals::new(GLOBALS_F_WEP, slot))
                .expect("preamble");
            let mut pre = pre;
            let sets = gen_sets(&mut g);
            for (id, ms) in &sets {
                w.ipset_update(&IpSetUpdate {
                    id: id.clone(),
                    members: ms.clone(),
                    r#type: 0,
                })
                .expect("set");
            }
            let mut case = gen_case(&mut g, round);
            case.write(&mut w, slot);
            let mut sets = sets;
            for phase in 0..2 {
                for _ in 0..13 {
                    let p = gen_pkt(&mut g);
                    let want = case.reference(&p, &sets);
                    // Each packet is judged as a new flow.
                    dp.conntrack().clear(&ops).expect("clear conntrack");
                    let r = pre
                        .test_run(&ops, &frame(&p), SkbCtx::default())
                        .expect("run");
                    let got = match r.verdict {
                        TC_ACT_OK => true,
                        TC_ACT_SHOT => false,
                        v => panic!("verdict {v}"),
                    };
                    assert_eq!(got, want, "round {round} phase {phase}: {p:?}\n{case:#?}");
                    checked += 1;
                }
                // A policy rewritten and the sets changed, incrementally.
                sets = case.mutate(&mut g, &mut w);
            }
        }
        assert_eq!(checked, 40 * 26);
    })
    .join()
    .expect("test thread")
    .expect("entered netns");
}
