//! [`BpfPolicyEngine`]: what the BPF driver holds for policy: the writer over the pinned
//! maps and the interpreter loaded once per (attach mechanism, TC direction).
//!
//! # Use (the driver's apply step)
//! 1. [`BpfPolicyEngine::start`] at start of day (after `BpfDataplane::start`, same root):
//!    opens the policy maps and adopts what a previous run left.
//! 2. Forward the calc graph's policy, profile and IP-set updates to [`BpfPolicyEngine::writer`].
//! 3. Per workload, once its hooks have policy slots: [`BpfPolicyEngine::install`] the
//!    interpreter into each slot, then `writer().set_workload(...)`. Until its list is
//!    written the interpreter denies the endpoint's traffic (fail closed).
//! 4. After the first full apply: `writer().sweep()`.

use std::collections::BTreeMap;
use std::path::Path;

use felix_bpf::attach::Mechanism;
use felix_bpf::layout::Hook;
use felix_bpf::{BpfOps, PolicyMaps, PolicyProgram};

use super::writer::{BpfPolicyStore, PolicyWriteError, PolicyWriter};

/// The writer and the loaded interpreters (see the module doc).
#[derive(Debug)]
pub struct BpfPolicyEngine {
    writer: PolicyWriter<BpfPolicyStore>,
    progs: BTreeMap<(Mechanism, Hook), PolicyProgram>,
    debug: bool,
}

impl BpfPolicyEngine {
    /// Opens (or creates) the policy maps under `root` (felix's pin root) and adopts a
    /// previous run's entries. `debug` loads the logging interpreter.
    pub fn start(ops: BpfOps, root: &Path, debug: bool) -> Result<Self, PolicyWriteError> {
        let bpf = |source| PolicyWriteError::Bpf {
            op: "start",
            what: root.display().to_string(),
            source,
        };
        let maps = PolicyMaps::open_or_create(&ops, root).map_err(bpf)?;
        let store = BpfPolicyStore { maps, ops };
        let existing = store.existing().map_err(bpf)?;
        let mut writer = PolicyWriter::new(store);
        writer.adopt(&existing);
        Ok(Self {
            writer,
            progs: BTreeMap::new(),
            debug,
        })
    }

    /// The incremental writer.
    pub fn writer(&mut self) -> &mut PolicyWriter<BpfPolicyStore> {
        &mut self.writer
    }

    /// Puts the interpreter into policy `slot` of `(mech, hook)`'s per-endpoint jump map,
    /// loading it for that pair on first use (or adopting the one an earlier run of the same
    /// layout pinned: `PolicyProgram::open_or_load`).
    pub fn install(
        &mut self,
        mech: Mechanism,
        hook: Hook,
        slot: u32,
    ) -> Result<(), PolicyWriteError> {
        let what = || format!("{} {hook:?} slot {slot}", mech.dir_name());
        if !self.progs.contains_key(&(mech, hook)) {
            let store = self.writer.store();
            let prog = PolicyProgram::open_or_load(&store.ops, &store.maps, mech, hook, self.debug)
                .map_err(|source| PolicyWriteError::Bpf {
                    op: "load interpreter",
                    what: what(),
                    source,
                })?;
            self.progs.insert((mech, hook), prog);
        }
        let ops = &self.writer.store().ops;
        match self.progs.get(&(mech, hook)) {
            Some(p) => p
                .install(ops, slot)
                .map_err(|source| PolicyWriteError::Bpf {
                    op: "install interpreter",
                    what: what(),
                    source,
                }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod kernel_tests {
    use std::net::IpAddr;
    use std::path::PathBuf;

    use felix_bpf::dataplane::{TC_ACT_OK, TC_ACT_SHOT};
    use felix_bpf::layout::{GLOBALS_F_INGRESS, GLOBALS_F_WEP};
    use felix_bpf::{BpfDataplane, Options, SkbCtx, TcGlobals};
    use felix_proto::{IpSetDeltaUpdate, Policy, PolicyId, Rule, TierInfo, WorkloadEndpoint};

    use super::*;
    use crate::dataplane::bpf::policy::kernel_tests::frame;
    use crate::dataplane::bpf::policy::reference::RefPkt;

    struct Root(PathBuf);

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn pid(name: &str) -> PolicyId {
        PolicyId {
            name: name.into(),
            kind: "GlobalNetworkPolicy".into(),
            ..PolicyId::default()
        }
    }

    #[test]
    fn a_workload_is_enforced_both_ways_and_survives_a_restart_of_the_engine() {
        felix_netns::require!(netns["ip"]);
        let ns = felix_netns::Netns::unique("feng").expect("netns");
        ns.spawn_in(|| {
            let root = Root(PathBuf::from(format!(
                "/sys/fs/bpf/felix-engtest-{}",
                std::process::id()
            )));
            let ops = BpfOps::default();
            let opts = Options {
                root: root.0.clone(),
                ..Options::default()
            };
            let mech = Mechanism::Tcx;
            let mut dp = BpfDataplane::start(ops.clone(), opts).expect("start");
            // The workload's address is its own (behind the test run's loopback).
            felix_bpf::routes::RouteMaps::open_or_create(&ops, &root.0)
                .expect("route maps")
                .set_route(
                    &ops,
                    &"10.65.0.1/32".parse().expect("net"),
                    felix_bpf::routes::RouteVal {
                        flags: felix_bpf::routes::RT_LOCAL_WORKLOAD,
                        ifindex: 1,
                    },
                )
                .expect("route");
            let mut slots = BTreeMap::new();
            let mut pres = BTreeMap::new();
            for (hook, flags) in [
                (Hook::Ingress, GLOBALS_F_WEP | GLOBALS_F_INGRESS),
                (Hook::Egress, GLOBALS_F_WEP),
            ] {
                dp.ensure_generic(mech, hook).expect("generic");
                let slot = dp.alloc_slot(mech, hook).expect("slot");
                slots.insert(hook, slot);
                let pre = dp
                    .load_preamble(mech, hook, &TcGlobals::new(flags, slot))
                    .expect("preamble");
                pres.insert(hook, pre);
            }
            // The workload may send to its set's members on tcp:443 and receive from
            // 10.0.0.0/8 only.
            let policy = Policy {
                outbound_rules: vec![Rule {
                    action: "allow".into(),
                    protocol: Some(felix_proto::Protocol {
                        number_or_name: Some(felix_proto::protocol::NumberOrName::Name(
                            "tcp".into(),
                        )),
                    }),
                    dst_ip_set_ids: vec!["s:dst".into()],
                    dst_ports: vec![felix_proto::PortRange {
                        first: 443,
                        last: 443,
                    }],
                    ..Rule::default()
                }],
                inbound_rules: vec![Rule {
                    action: "allow".into(),
                    src_net: vec!["10.0.0.0/8".into()],
                    ..Rule::default()
                }],
                ..Policy::default()
            };
            let wep = WorkloadEndpoint {
                tiers: vec![TierInfo {
                    name: "default".into(),
                    ingress_policies: vec![pid("p")],
                    egress_policies: vec![pid("p")],
                    default_action: "Deny".into(),
                }],
                ..WorkloadEndpoint::default()
            };
            let program = |e: &mut BpfPolicyEngine| {
                e.writer().apply_policy(&pid("p"), &policy).expect("policy");
                e.writer()
                    .ipset_delta(&IpSetDeltaUpdate {
                        id: "s:dst".into(),
                        added_members: vec!["192.168.1.0/24".into()],
                        removed_members: vec![],
                    })
                    .expect("set");
                for (hook, slot) in &slots {
                    e.install(mech, *hook, *slot).expect("install");
                }
                e.writer()
                    .set_workload(mech, slots[&Hook::Ingress], slots[&Hook::Egress], &wep)
                    .expect("workload");
            };
            let sent = RefPkt {
                src: IpAddr::from([10, 65, 0, 1]),
                dst: IpAddr::from([192, 168, 1, 7]),
                proto: 6,
                sport: 40000,
                dport: 443,
                icmp: (0, 0),
            };
            let received = RefPkt {
                src: IpAddr::from([10, 9, 9, 9]),
                dst: IpAddr::from([10, 65, 0, 1]),
                ..sent
            };
            let check = |pres: &mut BTreeMap<Hook, felix_bpf::dataplane::Preamble>| {
                let mut run = |hook: Hook, p: &RefPkt| {
                    // Each packet as a new flow: these checks judge policy.
                    dp.conntrack().clear(&ops).expect("clear conntrack");
                    pres.get_mut(&hook)
                        .expect("preamble")
                        .test_run(&ops, &frame(p), SkbCtx::default())
                        .expect("run")
                        .verdict
                };
                assert_eq!(run(Hook::Ingress, &sent), TC_ACT_OK, "egress allowed");
                assert_eq!(
                    run(Hook::Ingress, &RefPkt { dport: 80, ..sent }),
                    TC_ACT_SHOT,
                    "egress to another port denied"
                );
                assert_eq!(run(Hook::Egress, &received), TC_ACT_OK, "ingress allowed");
                assert_eq!(
                    run(
                        Hook::Egress,
                        &RefPkt {
                            src: IpAddr::from([172, 16, 0, 1]),
                            ..received
                        }
                    ),
                    TC_ACT_SHOT,
                    "ingress from outside 10/8 denied"
                );
            };
            let mut first = BpfPolicyEngine::start(ops.clone(), &root.0, false).expect("engine");
            program(&mut first);
            check(&mut pres);
            drop(first);
            // A restart: the pinned maps keep enforcing; the new engine adopts, rewrites and
            // sweeps without a wrong verdict in between.
            check(&mut pres);
            let mut second = BpfPolicyEngine::start(ops.clone(), &root.0, false).expect("engine");
            check(&mut pres);
            program(&mut second);
            check(&mut pres);
            second.writer().sweep().expect("sweep");
            check(&mut pres);
        })
        .join()
        .expect("test thread")
        .expect("entered netns");
    }
}
