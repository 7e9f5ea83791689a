//! `manager/bpf-endpoints`: the desired state of eBPF mode ([`BpfDesired`]): per local
//! workload interface its kind and the policy interpreter on both hooks, with the endpoint
//! (tiers, profiles, addresses), and the policies, profiles and IP sets the calc graph has
//! made active, which `driver/bpf` compiles into the interpreter's maps.
//!
//! Consumes `WorkloadEndpointUpdate/Remove`, `HostEndpointUpdate/Remove`,
//! `ActivePolicyUpdate/Remove`, `ActiveProfileUpdate/Remove`, `IPSetUpdate/DeltaUpdate/Remove`
//! and `RouteUpdate/Remove`. No kernel access.
//!
//! Host endpoints resolve to interfaces as in the other modes (named: that interface; by
//! expected IPs: the non-workload interfaces carrying one, from the interface monitor's
//! state); an interface that is also a workload's stays the workload's. The routes map is the
//! calculation graph's routes (flags by route type, pool and NAT-outgoing) with every local
//! workload's addresses (and the source prefixes it may use) on top, naming its interface.
//! Several endpoints claiming one interface name: the last update wins (as the iptables
//! endpoint manager's newest claim).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use felix_actors::{ApplyCtx, ApplyError, DesiredInput, Manager};
use felix_bpf::routes::{self as rt, Failsafe};
use felix_bpf::{BpfAttachType, EndpointKind, PolicyKind};
use felix_proto::{HostEndpoint, RouteUpdate, WorkloadEndpoint};
use ipnet::IpNet;

use super::desired::{BpfDesired, IfaceDesired, PolicyKey, RouteEntry};
use crate::dataplane::ifacemon::{IfaceSubscription, InterfaceState};
use crate::dataplane::managers::resolve_host_endpoints;
use crate::dataplane::managers::Payload;

type WepKey = (String, String, String);

/// See the module docs.
pub struct BpfEndpointManager {
    out: DesiredInput<BpfDesired>,
    attach_type: BpfAttachType,
    workloads: BTreeMap<WepKey, (u64, Arc<WorkloadEndpoint>)>,
    policies: BTreeMap<PolicyKey, Arc<felix_proto::Policy>>,
    profiles: BTreeMap<String, Arc<felix_proto::Profile>>,
    ipsets: BTreeMap<String, BTreeSet<String>>,
    /// The shared member lists last published (rebuilt only for changed sets).
    published_sets: BTreeMap<String, Arc<Vec<String>>>,
    dirty_sets: BTreeSet<String>,
    hosts: BTreeMap<String, HostEndpoint>,
    /// The calculation graph's routes by destination.
    calc_routes: BTreeMap<String, RouteUpdate>,
    failsafes: Arc<Vec<Failsafe>>,
    /// Interface addresses for host endpoints matched by expected IPs, the subscription to
    /// their changes, and the workload interface prefixes.
    iface_state: Option<(InterfaceState, IfaceSubscription, Vec<String>)>,
    next_seq: u64,
    dirty: bool,
}

/// The routes-map flags of a calculation-graph route.
pub fn route_flags(r: &RouteUpdate) -> u32 {
    use felix_proto::{IpPoolType, RouteType};
    let has = |t: RouteType| r.types & (t as i32) != 0;
    let mut f = 0;
    if has(RouteType::LocalHost) {
        f |= rt::RT_LOCAL_HOST;
    }
    if has(RouteType::RemoteHost) {
        f |= rt::RT_REMOTE_HOST;
    }
    if has(RouteType::LocalWorkload) {
        f |= rt::RT_LOCAL_WORKLOAD;
    }
    if has(RouteType::RemoteWorkload) {
        f |= rt::RT_REMOTE_WORKLOAD;
    }
    if has(RouteType::RemoteTunnel) || has(RouteType::LocalTunnel) {
        f |= rt::RT_TUNNEL;
    }
    if r.ip_pool_type != IpPoolType::None as i32 {
        f |= rt::RT_IN_POOL;
    }
    if r.nat_outgoing {
        f |= rt::RT_NAT_OUT;
    }
    f
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
            ipsets: BTreeMap::new(),
            published_sets: BTreeMap::new(),
            dirty_sets: BTreeSet::new(),
            hosts: BTreeMap::new(),
            calc_routes: BTreeMap::new(),
            failsafes: Arc::default(),
            iface_state: None,
            next_seq: 0,
            dirty: true,
        }
    }

    /// The failsafe ports every host endpoint lets through.
    pub fn with_failsafes(mut self, failsafes: Vec<Failsafe>) -> Self {
        self.failsafes = Arc::new(failsafes);
        self
    }

    /// Resolves host endpoints without an interface name against `state`'s addresses
    /// (non-workload interfaces, by `workload_prefixes`), again whenever it changes.
    pub fn with_interfaces(mut self, state: &InterfaceState, workload_prefixes: &[String]) -> Self {
        self.iface_state = Some((state.clone(), state.subscribe(), workload_prefixes.to_vec()));
        self
    }

    fn routes(
        &self,
        endpoints: &BTreeMap<String, Arc<WorkloadEndpoint>>,
    ) -> BTreeMap<IpNet, RouteEntry> {
        let mut out = BTreeMap::new();
        for (dst, r) in &self.calc_routes {
            // A malformed destination is no route (the graph validated it already).
            let Ok(net) = dst.parse::<IpNet>() else {
                continue;
            };
            out.insert(
                net.trunc(),
                RouteEntry {
                    flags: route_flags(r),
                    iface: None,
                },
            );
        }
        for (iface, ep) in endpoints {
            let nets = ep.ipv4_nets.iter().chain(&ep.ipv6_nets);
            for n in nets.filter_map(|n| n.parse::<IpNet>().ok()) {
                let e = out.entry(n.trunc()).or_insert(RouteEntry {
                    flags: 0,
                    iface: None,
                });
                e.flags |= rt::RT_LOCAL_WORKLOAD;
                e.iface = Some(iface.clone());
            }
            for n in ep
                .allow_spoofed_source_prefixes
                .iter()
                .filter_map(|n| n.parse::<IpNet>().ok())
            {
                out.entry(n.trunc()).or_insert(RouteEntry {
                    flags: rt::RT_SPOOF_OK,
                    iface: Some(iface.clone()),
                });
            }
        }
        out
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
                | Payload::IpsetUpdate(_)
                | Payload::IpsetDeltaUpdate(_)
                | Payload::IpsetRemove(_)
                | Payload::HostEndpointUpdate(_)
                | Payload::HostEndpointRemove(_)
                | Payload::RouteUpdate(_)
                | Payload::RouteRemove(_)
        )
    }

    /// The desired state for the current view.
    pub fn desired(&mut self) -> BpfDesired {
        for id in std::mem::take(&mut self.dirty_sets) {
            match self.ipsets.get(&id) {
                Some(m) => {
                    self.published_sets
                        .insert(id, Arc::new(m.iter().cloned().collect()));
                }
                None => {
                    self.published_sets.remove(&id);
                }
            }
        }
        let mut claims: Vec<&(u64, Arc<WorkloadEndpoint>)> = self.workloads.values().collect();
        claims.sort_by_key(|(seq, _)| *seq);
        let mut ifaces = BTreeMap::new();
        let mut addrs = BTreeMap::new();
        let mut endpoints = BTreeMap::new();
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
            endpoints.insert(ep.name.clone(), ep.clone());
            ifaces.insert(
                ep.name.clone(),
                IfaceDesired {
                    kind: EndpointKind::Workload,
                    from_endpoint: PolicyKind::Rules,
                    to_endpoint: PolicyKind::Rules,
                },
            );
        }
        let mut hosts = BTreeMap::new();
        let resolved = resolve_host_endpoints(
            &self.hosts,
            self.iface_state
                .as_ref()
                .map(|(st, _, p)| (st, p.as_slice())),
        );
        for (id, names) in resolved {
            let Some(hep) = self.hosts.get(&id) else {
                continue;
            };
            let hep = Arc::new(hep.clone());
            for name in names {
                if ifaces.contains_key(&name) {
                    continue;
                }
                ifaces.insert(
                    name.clone(),
                    IfaceDesired {
                        kind: EndpointKind::Host,
                        from_endpoint: PolicyKind::Rules,
                        to_endpoint: PolicyKind::Rules,
                    },
                );
                hosts.insert(name, hep.clone());
            }
        }
        let routes = Arc::new(self.routes(&endpoints));
        BpfDesired {
            attach_type: self.attach_type,
            ifaces,
            addrs,
            endpoints,
            policies: self.policies.clone(),
            profiles: self.profiles.clone(),
            ipsets: self.published_sets.clone(),
            hosts,
            routes,
            failsafes: self.failsafes.clone(),
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
                let ep = Arc::new(u.endpoint.clone().unwrap_or_default());
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
                let k = (id.name.clone(), id.namespace.clone(), id.kind.clone());
                self.policies
                    .insert(k, Arc::new(u.policy.clone().unwrap_or_default()));
            }
            Payload::ActivePolicyRemove(r) => {
                let Some(id) = &r.id else { return };
                let k = (id.name.clone(), id.namespace.clone(), id.kind.clone());
                self.policies.remove(&k);
            }
            Payload::ActiveProfileUpdate(u) => {
                let Some(id) = &u.id else { return };
                self.profiles.insert(
                    id.name.clone(),
                    Arc::new(u.profile.clone().unwrap_or_default()),
                );
            }
            Payload::ActiveProfileRemove(r) => {
                let Some(id) = &r.id else { return };
                self.profiles.remove(&id.name);
            }
            Payload::IpsetUpdate(u) => {
                self.ipsets
                    .insert(u.id.clone(), u.members.iter().cloned().collect());
                self.dirty_sets.insert(u.id.clone());
            }
            Payload::IpsetDeltaUpdate(d) => {
                let set = self.ipsets.entry(d.id.clone()).or_default();
                for m in &d.removed_members {
                    set.remove(m);
                }
                set.extend(d.added_members.iter().cloned());
                self.dirty_sets.insert(d.id.clone());
            }
            Payload::IpsetRemove(r) => {
                self.ipsets.remove(&r.id);
                self.dirty_sets.insert(r.id.clone());
            }
            Payload::HostEndpointUpdate(u) => {
                let Some(id) = &u.id else { return };
                self.hosts.insert(
                    id.endpoint_id.clone(),
                    u.endpoint.clone().unwrap_or_default(),
                );
            }
            Payload::HostEndpointRemove(r) => {
                let Some(id) = &r.id else { return };
                self.hosts.remove(&id.endpoint_id);
            }
            Payload::RouteUpdate(u) => {
                self.calc_routes.insert(u.dst.clone(), u.clone());
            }
            Payload::RouteRemove(r) => {
                self.calc_routes.remove(&r.dst);
            }
            _ => return,
        }
        self.dirty = true;
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        // Interface addresses changed: host endpoints by expected IPs may move.
        if let Some((_, sub, _)) = &self.iface_state {
            if !sub.take().is_empty() && !self.hosts.is_empty() {
                self.dirty = true;
            }
        }
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
        ActiveProfileUpdate, Profile, ProfileId, Rule, WorkloadEndpointId, WorkloadEndpointRemove,
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
    fn every_workload_gets_the_interpreter_and_the_active_policy_content_is_carried() {
        let out = DesiredInput::new(BpfDesired::default());
        let mut m = BpfEndpointManager::new(out, BpfAttachType::Tc);
        m.on_update(&profile("open", &["allow"], &["allow"]));
        m.on_update(&wep("a", "cali-a", &["open"]));
        m.on_update(&Payload::IpsetUpdate(felix_proto::IpSetUpdate {
            id: "s:1".into(),
            members: vec!["10.0.0.1".into(), "10.0.0.2".into()],
            r#type: 0,
        }));
        m.on_update(&Payload::IpsetDeltaUpdate(felix_proto::IpSetDeltaUpdate {
            id: "s:1".into(),
            added_members: vec!["10.0.0.3".into()],
            removed_members: vec!["10.0.0.1".into()],
        }));
        let d = pass(&mut m);
        assert_eq!(d.attach_type, BpfAttachType::Tc);
        let i = d.ifaces["cali-a"];
        assert_eq!(
            (i.from_endpoint, i.to_endpoint),
            (PolicyKind::Rules, PolicyKind::Rules)
        );
        assert_eq!(d.endpoints["cali-a"].profile_ids, vec!["open".to_string()]);
        assert!(d.profiles.contains_key("open"));
        assert_eq!(
            d.ipsets["s:1"].as_slice(),
            &["10.0.0.2".to_string(), "10.0.0.3".to_string()]
        );
        m.on_update(&Payload::IpsetRemove(felix_proto::IpSetRemove {
            id: "s:1".into(),
        }));
        assert!(pass(&mut m).ipsets.is_empty());
    }

    #[test]
    fn a_removed_endpoint_leaves_the_desired_state_and_nothing_changed_writes_nothing() {
        let out = DesiredInput::new(BpfDesired::default());
        let mut m = BpfEndpointManager::new(out, BpfAttachType::Tcx);
        m.on_update(&profile("p", &[], &[]));
        m.on_update(&wep("a", "cali-a", &["p"]));
        m.on_update(&wep("b", "cali-b", &["p"]));
        assert_eq!(pass(&mut m).ifaces.len(), 2);
        m.on_update(&Payload::WorkloadEndpointRemove(WorkloadEndpointRemove {
            id: Some(WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: "b".into(),
                endpoint_id: "eth0".into(),
            }),
        }));
        let d = pass(&mut m);
        assert_eq!(d.ifaces.keys().collect::<Vec<_>>(), vec!["cali-a"]);
        assert!(!d.endpoints.contains_key("cali-b"));
        // Nothing changed: no write.
        let v = m.out.version();
        pass(&mut m);
        assert_eq!(m.out.version(), v);
    }
}
