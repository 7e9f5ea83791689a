//! The dataplane view: the state a dataplane holds after applying the
//! graph's messages, plus a checker for the flush-order contract.
//!
//! Used by `felix calc` (its JSON lines are [`DataplaneView::to_json`]), by
//! the admin socket's `/dataplane`, and by the FV suite, where every
//! emitted stream is applied with [`DataplaneView::apply`] so that any
//! contract violation fails the test.
//!
//! Contract checked on every message:
//! * no reference before its referent: a policy or profile only names IP
//!   sets that exist; an endpoint only names policies and profiles that
//!   exist; a VXLAN route only names a node whose VTEP exists;
//! * removals in reverse: an IP set is not removed while a policy or
//!   profile uses it; a policy or profile is not removed while an endpoint
//!   uses it; a VTEP is not removed while a route uses it;
//! * no delta to an unknown set, no duplicate member add, no removal of an
//!   absent member, no removal of an unknown object;
//! * computed endpoint data: an endpoint marked Istio ambient is sent only
//!   while the `all-istio-weps` IP set exists (the Istio calculator
//!   announces it before any endpoint, and it is never removed while a
//!   marked endpoint exists); a live-migration role is a known value, and a
//!   live-migration UID comes only with a role.

use std::collections::{BTreeMap, BTreeSet};

use felix_proto as pb;
use pb::to_dataplane::Payload;
use serde_json::{json, Value as Json};

/// A broken contract, with the message that broke it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("flush-order contract violated by {message}: {reason}")]
pub struct ContractViolation {
    /// Name of the offending message's payload (e.g. `ipSetUpdate`).
    pub message: String,
    /// Which rule of the contract it broke.
    pub reason: String,
}

type PolicyIdKey = (String, String, String);
type WepIdKey = (String, String, String);

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct DataplaneView {
    /// An `InSync` message has been applied.
    pub in_sync: bool,
    /// The latest `ConfigUpdate`'s settings.
    pub config: BTreeMap<String, String>,
    /// IP sets by ID: set type and members.
    pub ip_sets: BTreeMap<String, (i32, BTreeSet<String>)>,
    /// Active policies.
    pub policies: BTreeMap<PolicyIdKey, pb::Policy>,
    /// Active profiles, by name.
    pub profiles: BTreeMap<String, pb::Profile>,
    /// Workload endpoints.
    pub workload_endpoints: BTreeMap<WepIdKey, pb::WorkloadEndpoint>,
    /// Host endpoints, by endpoint ID.
    pub host_endpoints: BTreeMap<String, pb::HostEndpoint>,
    /// Routes, by destination CIDR.
    pub routes: BTreeMap<String, pb::RouteUpdate>,
    /// VXLAN tunnel endpoints, by node.
    pub vteps: BTreeMap<String, pb::VxlanTunnelEndpointUpdate>,
    /// IPAM pools, by pool ID.
    pub ipam_pools: BTreeMap<String, pb::IpamPoolUpdate>,
    /// Host metadata, by node.
    pub host_metadata: BTreeMap<String, pb::HostMetadataUpdate>,
    /// The latest encapsulation settings, if any were sent.
    pub encapsulation: Option<pb::Encapsulation>,
    /// Namespaces, by name.
    pub namespaces: BTreeMap<String, pb::NamespaceUpdate>,
    /// Service accounts, by (namespace, name).
    pub service_accounts: BTreeMap<(String, String), pb::ServiceAccountUpdate>,
}

fn pid(id: &Option<pb::PolicyId>) -> PolicyIdKey {
    id.as_ref()
        .map(|i| (i.kind.clone(), i.namespace.clone(), i.name.clone()))
        .unwrap_or_default()
}

fn wid(id: &Option<pb::WorkloadEndpointId>) -> WepIdKey {
    id.as_ref()
        .map(|i| {
            (
                i.orchestrator_id.clone(),
                i.workload_id.clone(),
                i.endpoint_id.clone(),
            )
        })
        .unwrap_or_default()
}

fn rule_sets(r: &pb::Rule) -> impl Iterator<Item = &String> {
    r.src_ip_set_ids
        .iter()
        .chain(&r.dst_ip_set_ids)
        .chain(&r.dst_ip_port_set_ids)
        .chain(&r.src_named_port_ip_set_ids)
        .chain(&r.dst_named_port_ip_set_ids)
        .chain(&r.not_src_ip_set_ids)
        .chain(&r.not_dst_ip_set_ids)
        .chain(&r.not_src_named_port_ip_set_ids)
        .chain(&r.not_dst_named_port_ip_set_ids)
}

fn tier_policy_ids(tiers: &[pb::TierInfo]) -> impl Iterator<Item = PolicyIdKey> + '_ {
    tiers.iter().flat_map(|t| {
        t.ingress_policies
            .iter()
            .chain(&t.egress_policies)
            .map(|p| (p.kind.clone(), p.namespace.clone(), p.name.clone()))
    })
}

fn violation(p: &Payload, reason: String) -> ContractViolation {
    ContractViolation {
        message: payload_name(p).to_string(),
        reason,
    }
}

/// The oneof field name of a payload (as in the proto).
pub fn payload_name(p: &Payload) -> &'static str {
    match p {
        Payload::InSync(_) => "inSync",
        Payload::IpsetUpdate(_) => "ipsetUpdate",
        Payload::IpsetDeltaUpdate(_) => "ipsetDeltaUpdate",
        Payload::IpsetRemove(_) => "ipsetRemove",
        Payload::ActiveProfileUpdate(_) => "activeProfileUpdate",
        Payload::ActiveProfileRemove(_) => "activeProfileRemove",
        Payload::ActivePolicyUpdate(_) => "activePolicyUpdate",
        Payload::ActivePolicyRemove(_) => "activePolicyRemove",
        Payload::HostEndpointUpdate(_) => "hostEndpointUpdate",
        Payload::HostEndpointRemove(_) => "hostEndpointRemove",
        Payload::WorkloadEndpointUpdate(_) => "workloadEndpointUpdate",
        Payload::WorkloadEndpointRemove(_) => "workloadEndpointRemove",
        Payload::ConfigUpdate(_) => "configUpdate",
        Payload::HostMetadataUpdate(_) => "hostMetadataUpdate",
        Payload::HostMetadataRemove(_) => "hostMetadataRemove",
        Payload::IpamPoolUpdate(_) => "ipamPoolUpdate",
        Payload::IpamPoolRemove(_) => "ipamPoolRemove",
        Payload::ServiceAccountUpdate(_) => "serviceAccountUpdate",
        Payload::ServiceAccountRemove(_) => "serviceAccountRemove",
        Payload::NamespaceUpdate(_) => "namespaceUpdate",
        Payload::NamespaceRemove(_) => "namespaceRemove",
        Payload::RouteUpdate(_) => "routeUpdate",
        Payload::RouteRemove(_) => "routeRemove",
        Payload::VtepUpdate(_) => "vtepUpdate",
        Payload::VtepRemove(_) => "vtepRemove",
        Payload::WireguardEndpointUpdate(_) => "wireguardEndpointUpdate",
        Payload::WireguardEndpointRemove(_) => "wireguardEndpointRemove",
        Payload::GlobalBgpConfigUpdate(_) => "globalBgpConfigUpdate",
        Payload::Encapsulation(_) => "encapsulation",
        Payload::ServiceUpdate(_) => "serviceUpdate",
        Payload::ServiceRemove(_) => "serviceRemove",
        Payload::WireguardEndpointV6Update(_) => "wireguardEndpointV6Update",
        Payload::WireguardEndpointV6Remove(_) => "wireguardEndpointV6Remove",
    }
}

impl DataplaneView {
    /// An empty view, as before the first message.
    pub fn new() -> Self {
        Self::default()
    }

    fn check_computed(
        &self,
        p: &Payload,
        ep: &pb::WorkloadEndpoint,
    ) -> Result<(), ContractViolation> {
        if ep.is_istio_ambient && !self.ip_sets.contains_key(super::istio::ALL_ISTIO_WEPS) {
            return Err(violation(
                p,
                "endpoint marked Istio ambient before the all-istio-weps IP set".into(),
            ));
        }
        let role = pb::LiveMigrationRole::try_from(ep.live_migration_role).map_err(|_| {
            violation(
                p,
                format!("unknown live-migration role {}", ep.live_migration_role),
            )
        })?;
        if role == pb::LiveMigrationRole::NoRole && !ep.live_migration_uid.is_empty() {
            return Err(violation(
                p,
                format!(
                    "live-migration UID {} without a role",
                    ep.live_migration_uid
                ),
            ));
        }
        Ok(())
    }

    /// Whether a known pool uses VXLAN. VTEPs exist only then (the graph's VXLAN resolver
    /// is built only for such pools), so only then must a node's VTEP precede its VXLAN
    /// routes. Without one, a node's VXLAN tunnel address still yields a route with the
    /// VXLAN tunnel type (as upstream's route resolver emits it), and no VTEP ever comes.
    fn has_vxlan_pool(&self) -> bool {
        self.ipam_pools.values().any(|p| {
            p.pool.as_ref().is_some_and(|p| {
                !p.vxlan_mode.is_empty() && !p.vxlan_mode.eq_ignore_ascii_case("never")
            })
        })
    }

    /// Applies one message, checking the contract first; on a violation
    /// the view is left unchanged.
    pub fn apply(&mut self, p: &Payload) -> Result<(), ContractViolation> {
        match p {
            Payload::InSync(_) => self.in_sync = true,
            Payload::ConfigUpdate(c) => {
                self.config = c
                    .config
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
            }
            Payload::IpsetUpdate(u) => {
                self.ip_sets.insert(
                    u.id.clone(),
                    (u.r#type, u.members.iter().cloned().collect()),
                );
            }
            Payload::IpsetDeltaUpdate(u) => {
                let Some((_, members)) = self.ip_sets.get_mut(&u.id) else {
                    return Err(violation(p, format!("delta to unknown IP set {}", u.id)));
                };
                for m in &u.removed_members {
                    if !members.contains(m) {
                        return Err(violation(
                            p,
                            format!("removal of absent member {m} from {}", u.id),
                        ));
                    }
                }
                for m in &u.added_members {
                    if members.contains(m) && !u.removed_members.contains(m) {
                        return Err(violation(p, format!("duplicate add of {m} to {}", u.id)));
                    }
                }
                for m in &u.removed_members {
                    members.remove(m);
                }
                for m in &u.added_members {
                    members.insert(m.clone());
                }
            }
            Payload::IpsetRemove(u) => {
                if !self.ip_sets.contains_key(&u.id) {
                    return Err(violation(p, format!("removal of unknown IP set {}", u.id)));
                }
                if u.id == super::istio::ALL_ISTIO_WEPS
                    && self.workload_endpoints.values().any(|e| e.is_istio_ambient)
                {
                    return Err(violation(
                        p,
                        "all-istio-weps removed while an endpoint is marked Istio ambient".into(),
                    ));
                }
                let users = self
                    .policies
                    .values()
                    .flat_map(|pol| pol.inbound_rules.iter().chain(&pol.outbound_rules))
                    .chain(
                        self.profiles
                            .values()
                            .flat_map(|pr| pr.inbound_rules.iter().chain(&pr.outbound_rules)),
                    )
                    .any(|r| rule_sets(r).any(|s| *s == u.id));
                if users {
                    return Err(violation(
                        p,
                        format!("IP set {} removed while still referenced", u.id),
                    ));
                }
                self.ip_sets.remove(&u.id);
            }
            Payload::ActivePolicyUpdate(u) => {
                let pol = u.policy.clone().unwrap_or_default();
                for r in pol.inbound_rules.iter().chain(&pol.outbound_rules) {
                    for s in rule_sets(r) {
                        if !self.ip_sets.contains_key(s) {
                            return Err(violation(
                                p,
                                format!("policy references unknown IP set {s}"),
                            ));
                        }
                    }
                }
                self.policies.insert(pid(&u.id), pol);
            }
            Payload::ActivePolicyRemove(u) => {
                let key = pid(&u.id);
                if !self.policies.contains_key(&key) {
                    return Err(violation(p, format!("removal of unknown policy {key:?}")));
                }
                let used = self
                    .workload_endpoints
                    .values()
                    .flat_map(|e| tier_policy_ids(&e.tiers))
                    .chain(self.host_endpoints.values().flat_map(|e| {
                        tier_policy_ids(&e.tiers)
                            .chain(tier_policy_ids(&e.untracked_tiers))
                            .chain(tier_policy_ids(&e.pre_dnat_tiers))
                            .chain(tier_policy_ids(&e.forward_tiers))
                    }))
                    .any(|k| k == key);
                if used {
                    return Err(violation(
                        p,
                        format!("policy {key:?} removed while an endpoint uses it"),
                    ));
                }
                self.policies.remove(&key);
            }
            Payload::ActiveProfileUpdate(u) => {
                let prof = u.profile.clone().unwrap_or_default();
                for r in prof.inbound_rules.iter().chain(&prof.outbound_rules) {
                    for s in rule_sets(r) {
                        if !self.ip_sets.contains_key(s) {
                            return Err(violation(
                                p,
                                format!("profile references unknown IP set {s}"),
                            ));
                        }
                    }
                }
                let name = u.id.as_ref().map(|i| i.name.clone()).unwrap_or_default();
                self.profiles.insert(name, prof);
            }
            Payload::ActiveProfileRemove(u) => {
                let name = u.id.as_ref().map(|i| i.name.clone()).unwrap_or_default();
                if !self.profiles.contains_key(&name) {
                    return Err(violation(p, format!("removal of unknown profile {name}")));
                }
                let used = self
                    .workload_endpoints
                    .values()
                    .flat_map(|e| e.profile_ids.iter())
                    .chain(
                        self.host_endpoints
                            .values()
                            .flat_map(|e| e.profile_ids.iter()),
                    )
                    .any(|n| *n == name);
                if used {
                    return Err(violation(
                        p,
                        format!("profile {name} removed while an endpoint uses it"),
                    ));
                }
                self.profiles.remove(&name);
            }
            Payload::WorkloadEndpointUpdate(u) => {
                let ep = u.endpoint.clone().unwrap_or_default();
                self.check_endpoint_refs(p, &ep.profile_ids, tier_policy_ids(&ep.tiers))?;
                self.check_computed(p, &ep)?;
                self.workload_endpoints.insert(wid(&u.id), ep);
            }
            Payload::WorkloadEndpointRemove(u) => {
                if self.workload_endpoints.remove(&wid(&u.id)).is_none() {
                    return Err(violation(p, "removal of unknown workload endpoint".into()));
                }
            }
            Payload::HostEndpointUpdate(u) => {
                let ep = u.endpoint.clone().unwrap_or_default();
                let ids: Vec<PolicyIdKey> = tier_policy_ids(&ep.tiers)
                    .chain(tier_policy_ids(&ep.untracked_tiers))
                    .chain(tier_policy_ids(&ep.pre_dnat_tiers))
                    .chain(tier_policy_ids(&ep.forward_tiers))
                    .collect();
                self.check_endpoint_refs(p, &ep.profile_ids, ids.into_iter())?;
                let id =
                    u.id.as_ref()
                        .map(|i| i.endpoint_id.clone())
                        .unwrap_or_default();
                self.host_endpoints.insert(id, ep);
            }
            Payload::HostEndpointRemove(u) => {
                let id =
                    u.id.as_ref()
                        .map(|i| i.endpoint_id.clone())
                        .unwrap_or_default();
                if self.host_endpoints.remove(&id).is_none() {
                    return Err(violation(p, "removal of unknown host endpoint".into()));
                }
            }
            Payload::HostMetadataUpdate(u) => {
                self.host_metadata.insert(u.hostname.clone(), u.clone());
            }
            Payload::HostMetadataRemove(u) => {
                if self.host_metadata.remove(&u.hostname).is_none() {
                    return Err(violation(
                        p,
                        format!("removal of unknown host {}", u.hostname),
                    ));
                }
            }
            Payload::IpamPoolUpdate(u) => {
                self.ipam_pools.insert(u.id.clone(), u.clone());
            }
            Payload::IpamPoolRemove(u) => {
                if self.ipam_pools.remove(&u.id).is_none() {
                    return Err(violation(p, format!("removal of unknown pool {}", u.id)));
                }
            }
            Payload::NamespaceUpdate(u) => {
                let name = u.id.as_ref().map(|i| i.name.clone()).unwrap_or_default();
                self.namespaces.insert(name, u.clone());
            }
            Payload::NamespaceRemove(u) => {
                let name = u.id.as_ref().map(|i| i.name.clone()).unwrap_or_default();
                if self.namespaces.remove(&name).is_none() {
                    return Err(violation(p, format!("removal of unknown namespace {name}")));
                }
            }
            Payload::ServiceAccountUpdate(u) => {
                let id =
                    u.id.as_ref()
                        .map(|i| (i.namespace.clone(), i.name.clone()))
                        .unwrap_or_default();
                self.service_accounts.insert(id, u.clone());
            }
            Payload::ServiceAccountRemove(u) => {
                let id =
                    u.id.as_ref()
                        .map(|i| (i.namespace.clone(), i.name.clone()))
                        .unwrap_or_default();
                if self.service_accounts.remove(&id).is_none() {
                    return Err(violation(
                        p,
                        format!("removal of unknown service account {id:?}"),
                    ));
                }
            }
            Payload::RouteUpdate(u) => {
                let vxlan = u.tunnel_type.as_ref().is_some_and(|t| t.vxlan);
                if vxlan
                    && !u.dst_node_name.is_empty()
                    && self.has_vxlan_pool()
                    && !self.vteps.contains_key(&u.dst_node_name)
                {
                    return Err(violation(
                        p,
                        format!(
                            "VXLAN route {} before the VTEP of {}",
                            u.dst, u.dst_node_name
                        ),
                    ));
                }
                self.routes.insert(u.dst.clone(), u.clone());
            }
            Payload::RouteRemove(u) => {
                if self.routes.remove(&u.dst).is_none() {
                    return Err(violation(p, format!("removal of unknown route {}", u.dst)));
                }
            }
            Payload::VtepUpdate(u) => {
                self.vteps.insert(u.node.clone(), u.clone());
            }
            Payload::VtepRemove(u) => {
                let used = self.routes.values().any(|r| {
                    r.dst_node_name == u.node && r.tunnel_type.as_ref().is_some_and(|t| t.vxlan)
                });
                if used {
                    return Err(violation(
                        p,
                        format!("VTEP of {} removed while a route uses it", u.node),
                    ));
                }
                if self.vteps.remove(&u.node).is_none() {
                    return Err(violation(p, format!("removal of unknown VTEP {}", u.node)));
                }
            }
            Payload::Encapsulation(e) => self.encapsulation = Some(*e),
            // Not produced by this graph; accepted and ignored.
            Payload::WireguardEndpointUpdate(_)
            | Payload::WireguardEndpointRemove(_)
            | Payload::WireguardEndpointV6Update(_)
            | Payload::WireguardEndpointV6Remove(_)
            | Payload::GlobalBgpConfigUpdate(_)
            | Payload::ServiceUpdate(_)
            | Payload::ServiceRemove(_) => {}
        }
        Ok(())
    }

    fn check_endpoint_refs(
        &self,
        p: &Payload,
        profiles: &[String],
        policies: impl Iterator<Item = PolicyIdKey>,
    ) -> Result<(), ContractViolation> {
        for prof in profiles {
            if !self.profiles.contains_key(prof) {
                return Err(violation(
                    p,
                    format!("endpoint references unknown profile {prof}"),
                ));
            }
        }
        for pol in policies {
            if !self.policies.contains_key(&pol) {
                return Err(violation(
                    p,
                    format!("endpoint references unknown policy {pol:?}"),
                ));
            }
        }
        Ok(())
    }

    /// The view as one `felix calc` JSON object (INTERFACES.md §1).
    pub fn to_json(&self, state: usize) -> Json {
        serde_json::to_value(self.json(state)).unwrap_or(Json::Null)
    }

    /// The view as one `felix calc` JSON object, for writing out as it is serialised
    /// (without building the whole document first): the same text as [`Self::to_json`]'s.
    pub fn json(&self, state: usize) -> ViewJson<'_> {
        ViewJson { view: self, state }
    }
}

/// [`DataplaneView::json`]: serialises the view's JSON object entry by entry.
///
/// Invariant: **the same text as the whole-document form** (`to_json`): the keys of every
/// object in byte-wise order (serde_json's map order), each message in its proto3 JSON form.
pub struct ViewJson<'a> {
    view: &'a DataplaneView,
    state: usize,
}

/// A sequence serialised from an iterator, once.
struct Seq<I>(std::cell::Cell<Option<I>>);

fn seq<I: Iterator<Item = Json>>(items: I) -> Seq<I> {
    Seq(std::cell::Cell::new(Some(items)))
}

impl<I: Iterator<Item = Json>> serde::Serialize for Seq<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.take() {
            Some(items) => s.collect_seq(items),
            None => s.collect_seq(std::iter::empty::<Json>()),
        }
    }
}

/// A map serialised from an iterator of entries (keys already in order), once.
struct MapOf<I>(std::cell::Cell<Option<I>>);

impl<'k, I: Iterator<Item = (&'k String, Json)>> serde::Serialize for MapOf<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.take() {
            Some(entries) => s.collect_map(entries),
            None => s.collect_map(std::iter::empty::<(&String, Json)>()),
        }
    }
}

impl serde::Serialize for ViewJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let v = self.view;
        let ip_sets = v.ip_sets.iter().map(|(id, (t, members))| {
            let type_name = pb::ip_set_update::IpSetType::try_from(*t)
                .map(|t| t.as_str_name())
                .unwrap_or("IP");
            (
                id,
                json!({"members": members.iter().collect::<Vec<_>>(), "type": type_name}),
            )
        });
        let policies = v.policies.iter().map(|((kind, ns, name), pol)| {
            json!({
                "id": to_json(&pb::PolicyId { name: name.clone(), namespace: ns.clone(), kind: kind.clone() }),
                "policy": to_json(pol),
            })
        });
        let profiles = v.profiles.iter().map(|(name, prof)| {
            json!({"id": to_json(&pb::ProfileId { name: name.clone() }), "profile": to_json(prof)})
        });
        let weps = v.workload_endpoints.iter().map(|((o, w, e), ep)| {
            json!({
                "endpoint": to_json(ep),
                "id": to_json(&pb::WorkloadEndpointId {
                    orchestrator_id: o.clone(),
                    workload_id: w.clone(),
                    endpoint_id: e.clone(),
                }),
            })
        });
        let heps = v.host_endpoints.iter().map(|(id, ep)| {
            json!({
                "endpoint": to_json(ep),
                "id": to_json(&pb::HostEndpointId { endpoint_id: id.clone() }),
            })
        });
        // Keys in byte-wise order, as serde_json's map orders them.
        let mut m = s.serialize_map(Some(15))?;
        m.serialize_entry("config", &v.config)?;
        m.serialize_entry(
            "encapsulation",
            &v.encapsulation.as_ref().map(to_json).unwrap_or(Json::Null),
        )?;
        m.serialize_entry("hostEndpoints", &seq(heps))?;
        m.serialize_entry("hostMetadata", &seq(v.host_metadata.values().map(to_json)))?;
        m.serialize_entry("inSync", &v.in_sync)?;
        m.serialize_entry("ipSets", &MapOf(std::cell::Cell::new(Some(ip_sets))))?;
        m.serialize_entry("ipamPools", &seq(v.ipam_pools.values().map(to_json)))?;
        m.serialize_entry("namespaces", &seq(v.namespaces.values().map(to_json)))?;
        m.serialize_entry("policies", &seq(policies))?;
        m.serialize_entry("profiles", &seq(profiles))?;
        m.serialize_entry("routes", &seq(v.routes.values().map(to_json)))?;
        m.serialize_entry(
            "serviceAccounts",
            &seq(v.service_accounts.values().map(to_json)),
        )?;
        m.serialize_entry("state", &self.state)?;
        m.serialize_entry("vteps", &seq(v.vteps.values().map(to_json)))?;
        m.serialize_entry("workloadEndpoints", &seq(weps))?;
        m.end()
    }
}

/// Proto3 canonical JSON of a message.
pub fn to_json<T: serde::Serialize>(m: &T) -> Json {
    serde_json::to_value(m).unwrap_or(Json::Null)
}

/// A full `ToDataplane` message as proto3 JSON (for `--stream`).
pub fn payload_json(seq: u64, p: &Payload) -> Json {
    to_json(&pb::ToDataplane {
        sequence_number: seq,
        payload: Some(p.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wep_update(f: impl FnOnce(&mut pb::WorkloadEndpoint)) -> Payload {
        let mut ep = pb::WorkloadEndpoint::default();
        f(&mut ep);
        Payload::WorkloadEndpointUpdate(pb::WorkloadEndpointUpdate {
            id: Some(pb::WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: "ns/p".into(),
                endpoint_id: "eth0".into(),
            }),
            endpoint: Some(ep),
        })
    }

    fn istio_set() -> Payload {
        Payload::IpsetUpdate(pb::IpSetUpdate {
            id: crate::calc::istio::ALL_ISTIO_WEPS.into(),
            members: vec![],
            r#type: pb::ip_set_update::IpSetType::Ip as i32,
        })
    }

    #[test]
    fn istio_mark_needs_the_istio_set_and_pins_it() {
        let mut v = DataplaneView::new();
        let marked = wep_update(|e| e.is_istio_ambient = true);
        assert!(v.apply(&marked).is_err());
        v.apply(&istio_set()).unwrap();
        v.apply(&marked).unwrap();
        let remove = Payload::IpsetRemove(pb::IpSetRemove {
            id: crate::calc::istio::ALL_ISTIO_WEPS.into(),
        });
        assert!(v.apply(&remove).is_err());
        v.apply(&wep_update(|_| {})).unwrap();
        v.apply(&remove).unwrap();
    }

    fn pool(vxlan_mode: &str) -> Payload {
        Payload::IpamPoolUpdate(pb::IpamPoolUpdate {
            id: "10.65.0.0-16".into(),
            pool: Some(pb::IpamPool {
                cidr: "10.65.0.0/16".into(),
                vxlan_mode: vxlan_mode.into(),
                ..Default::default()
            }),
        })
    }

    fn vxlan_route() -> Payload {
        Payload::RouteUpdate(pb::RouteUpdate {
            dst: "10.65.1.1/32".into(),
            dst_node_name: "node1".into(),
            tunnel_type: Some(pb::TunnelType {
                vxlan: true,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A VXLAN route needs its node's VTEP first while a VXLAN pool exists; without one
    /// (no-encap pools, a node that still has a VXLAN tunnel address) no VTEP is ever sent
    /// and the route is no violation.
    #[test]
    fn vxlan_routes_need_a_vtep_only_with_a_vxlan_pool() {
        let mut v = DataplaneView::new();
        v.apply(&pool("")).unwrap();
        v.apply(&vxlan_route()).unwrap();
        let mut v = DataplaneView::new();
        v.apply(&pool("always")).unwrap();
        let err = v.apply(&vxlan_route()).unwrap_err();
        assert!(
            err.to_string().contains("before the VTEP of node1"),
            "{err}"
        );
        v.apply(&Payload::VtepUpdate(pb::VxlanTunnelEndpointUpdate {
            node: "node1".into(),
            ..Default::default()
        }))
        .unwrap();
        v.apply(&vxlan_route()).unwrap();
    }

    #[test]
    fn live_migration_uid_needs_a_known_role() {
        let mut v = DataplaneView::new();
        assert!(v
            .apply(&wep_update(|e| e.live_migration_uid = "u".into()))
            .is_err());
        assert!(v.apply(&wep_update(|e| e.live_migration_role = 7)).is_err());
        v.apply(&wep_update(|e| {
            e.live_migration_role = pb::LiveMigrationRole::Source as i32;
            e.live_migration_uid = "u".into();
        }))
        .unwrap();
    }
}
