//! `manager/bpf-endpoints`: per local workload interface, which policy program each direction
//! gets (part 1's simple policy, see [`crate::dataplane::bpf`]), written into
//! [`BpfDesired`].
//!
//! Consumes `WorkloadEndpointUpdate/Remove` and `ActivePolicyUpdate/Remove`,
//! `ActiveProfileUpdate/Remove` (only whether they allow, per direction). No kernel access.
//! Several endpoints claiming one interface name: the last update wins (as the iptables
//! endpoint manager's newest claim).

use std::collections::BTreeMap;

use felix_actors::{ApplyCtx, ApplyError, DesiredInput, Manager};
use felix_bpf::{BpfAttachType, EndpointKind, PolicyKind};
use felix_proto::{Rule, WorkloadEndpoint};

use super::desired::{BpfDesired, IfaceDesired};
use crate::dataplane::managers::Payload;

type WepKey = (String, String, String);
type PolicyKey = (String, String, String);

/// Whether rules allow anything: a rule with action `allow` (or none, which means allow).
fn allows(rules: &[Rule]) -> bool {
    rules
        .iter()
        .any(|r| r.action.is_empty() || r.action.eq_ignore_ascii_case("allow"))
}

/// Per direction: (inbound allows, outbound allows).
type Allows = (bool, bool);

/// See the module docs.
pub struct BpfEndpointManager {
    out: DesiredInput<BpfDesired>,
    attach_type: BpfAttachType,
    workloads: BTreeMap<WepKey, (u64, WorkloadEndpoint)>,
    policies: BTreeMap<PolicyKey, Allows>,
    profiles: BTreeMap<String, Allows>,
    next_seq: u64,
    dirty: bool,
}

impl BpfEndpointManager {
    /// A manager writing `out`, with the configured attach type.
    pub fn new(out: DesiredInput<BpfDesired>, attach_type: BpfAttachType) -> Self {
        Self {
            out,
            attach_type,
            workloads: BTreeMap::new(),
            policies: BTreeMap::new(),
            profiles: BTreeMap::new(),
            next_seq: 0,
            dirty: true,
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::WorkloadEndpointUpdate(_)
                | Payload::WorkloadEndpointRemove(_)
                | Payload::ActivePolicyUpdate(_)
                | Payload::ActivePolicyRemove(_)
                | Payload::ActiveProfileUpdate(_)
                | Payload::ActiveProfileRemove(_)
        )
    }

    /// The policy kind of one direction of `ep` (`inbound`: what it receives).
    fn kind_of(&self, ep: &WorkloadEndpoint, inbound: bool) -> PolicyKind {
        let pick = |a: &Allows| if inbound { a.0 } else { a.1 };
        let by_policy = ep.tiers.iter().any(|t| {
            let ids = if inbound {
                &t.ingress_policies
            } else {
                &t.egress_policies
            };
            ids.iter().any(|id| {
                let k = (id.name.clone(), id.namespace.clone(), id.kind.clone());
                self.policies.get(&k).is_some_and(pick)
            })
        });
        let by_profile = ep
            .profile_ids
            .iter()
            .any(|p| self.profiles.get(p).is_some_and(pick));
        if by_policy || by_profile {
            PolicyKind::Allow
        } else {
            PolicyKind::Deny
        }
    }

    /// The desired state for the current view.
    pub fn desired(&self) -> BpfDesired {
        let mut claims: Vec<&(u64, WorkloadEndpoint)> = self.workloads.values().collect();
        claims.sort_by_key(|(seq, _)| *seq);
        let mut ifaces = BTreeMap::new();
        let mut addrs = BTreeMap::new();
        for (_, ep) in claims {
            if ep.name.is_empty() {
                continue;
            }
            // Malformed nets are skipped: they only narrow the conntrack cleanup.
            let ips: Vec<std::net::IpAddr> = ep
                .ipv4_nets
                .iter()
                .chain(&ep.ipv6_nets)
                .filter_map(|n| n.split('/').next()?.parse().ok())
                .collect();
            addrs.insert(ep.name.clone(), ips);
            ifaces.insert(
                ep.name.clone(),
                IfaceDesired {
                    kind: EndpointKind::Workload,
                    from_endpoint: self.kind_of(ep, false),
                    to_endpoint: self.kind_of(ep, true),
                },
            );
        }
        BpfDesired {
            attach_type: self.attach_type,
            ifaces,
            addrs,
        }
    }
}

impl Manager<Payload> for BpfEndpointManager {
    fn on_update(&mut self, msg: &Payload) {
        match msg {
            Payload::WorkloadEndpointUpdate(u) => {
                let Some(id) = &u.id else { return };
                let key = (
                    id.orchestrator_id.clone(),
                    id.workload_id.clone(),
                    id.endpoint_id.clone(),
                );
                let ep = u.endpoint.clone().unwrap_or_default();
                let seq = self.next_seq;
                self.next_seq += 1;
                self.workloads.insert(key, (seq, ep));
            }
            Payload::WorkloadEndpointRemove(r) => {
                let Some(id) = &r.id else { return };
                let key = (
                    id.orchestrator_id.clone(),
                    id.workload_id.clone(),
                    id.endpoint_id.clone(),
                );
                self.workloads.remove(&key);
            }
            Payload::ActivePolicyUpdate(u) => {
                let Some(id) = &u.id else { return };
                let p = u.policy.clone().unwrap_or_default();
                let k = (id.name.clone(), id.namespace.clone(), id.kind.clone());
                self.policies
                    .insert(k, (allows(&p.inbound_rules), allows(&p.outbound_rules)));
            }
            Payload::ActivePolicyRemove(r) => {
                let Some(id) = &r.id else { return };
                let k = (id.name.clone(), id.namespace.clone(), id.kind.clone());
                self.policies.remove(&k);
            }
            Payload::ActiveProfileUpdate(u) => {
                let Some(id) = &u.id else { return };
                let p = u.profile.clone().unwrap_or_default();
                self.profiles.insert(
                    id.name.clone(),
                    (allows(&p.inbound_rules), allows(&p.outbound_rules)),
                );
            }
            Payload::ActiveProfileRemove(r) => {
                let Some(id) = &r.id else { return };
                self.profiles.remove(&id.name);
            }
            _ => return,
        }
        self.dirty = true;
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if !self.dirty && !ctx.full_rewrite() {
            return Ok(());
        }
        let want = self.desired();
        if self.out.read(|d| *d != want) || ctx.full_rewrite() {
            ctx.write(&self.out, |d| *d = want);
        }
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_proto::{
        ActiveProfileUpdate, Profile, ProfileId, WorkloadEndpointId, WorkloadEndpointRemove,
        WorkloadEndpointUpdate,
    };

    fn wep(name: &str, iface: &str, profiles: &[&str]) -> Payload {
        Payload::WorkloadEndpointUpdate(WorkloadEndpointUpdate {
            id: Some(WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: name.into(),
                endpoint_id: "eth0".into(),
            }),
            endpoint: Some(WorkloadEndpoint {
                name: iface.into(),
                state: "active".into(),
                profile_ids: profiles.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            }),
        })
    }

    fn profile(name: &str, inbound: &[&str], outbound: &[&str]) -> Payload {
        let rules = |a: &[&str]| {
            a.iter()
                .map(|action| Rule {
                    action: action.to_string(),
                    ..Default::default()
                })
                .collect()
        };
        Payload::ActiveProfileUpdate(ActiveProfileUpdate {
            id: Some(ProfileId { name: name.into() }),
            profile: Some(Profile {
                inbound_rules: rules(inbound),
                outbound_rules: rules(outbound),
            }),
        })
    }

    fn pass(m: &mut BpfEndpointManager) -> BpfDesired {
        m.complete_deferred_work(&mut ApplyCtx::new("manager/bpf-endpoints", false, 1))
            .expect("pass");
        m.out.read(Clone::clone)
    }

    #[test]
    fn a_profile_that_allows_gets_allow_and_no_policy_gets_deny() {
        let out = DesiredInput::new(BpfDesired::default());
        let mut m = BpfEndpointManager::new(out, BpfAttachType::Tc);
        m.on_update(&profile("open", &["allow"], &["allow"]));
        m.on_update(&profile("ingress-only", &["allow"], &["deny"]));
        m.on_update(&profile("closed", &[], &[]));
        m.on_update(&wep("a", "cali-a", &["open"]));
        m.on_update(&wep("b", "cali-b", &["closed"]));
        m.on_update(&wep("c", "cali-c", &["ingress-only"]));
        m.on_update(&wep("d", "cali-d", &["unknown-profile"]));
        let d = pass(&mut m);
        assert_eq!(d.attach_type, BpfAttachType::Tc);
        let kinds = |n: &str| {
            let i = d.ifaces[n];
            (i.from_endpoint, i.to_endpoint)
        };
        use PolicyKind::{Allow, Deny};
        assert_eq!(kinds("cali-a"), (Allow, Allow));
        assert_eq!(kinds("cali-b"), (Deny, Deny));
        assert_eq!(kinds("cali-c"), (Deny, Allow));
        assert_eq!(kinds("cali-d"), (Deny, Deny));
    }

    #[test]
    fn a_removed_endpoint_leaves_the_desired_state_and_a_profile_change_flips_the_kind() {
        let out = DesiredInput::new(BpfDesired::default());
        let mut m = BpfEndpointManager::new(out, BpfAttachType::Tcx);
        m.on_update(&profile("p", &[], &[]));
        m.on_update(&wep("a", "cali-a", &["p"]));
        m.on_update(&wep("b", "cali-b", &["p"]));
        assert_eq!(pass(&mut m).ifaces["cali-a"].to_endpoint, PolicyKind::Deny);
        m.on_update(&profile("p", &["allow"], &[]));
        m.on_update(&Payload::WorkloadEndpointRemove(WorkloadEndpointRemove {
            id: Some(WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: "b".into(),
                endpoint_id: "eth0".into(),
            }),
        }));
        let d = pass(&mut m);
        assert_eq!(d.ifaces.keys().collect::<Vec<_>>(), vec!["cali-a"]);
        assert_eq!(d.ifaces["cali-a"].to_endpoint, PolicyKind::Allow);
        // Nothing changed: no write.
        let v = m.out.version();
        pass(&mut m);
        assert_eq!(m.out.version(), v);
    }
}
