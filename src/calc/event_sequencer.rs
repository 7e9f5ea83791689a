//! The event sequencer: the graph's output stage.
//!
//! Buffers at most one pending update per object between flushes
//! (coalescing is half of the back-pressure mechanism: buffered memory is
//! bounded by the number of objects, not the number of changes) and emits
//! them on [`EventSequencer::flush`] in the dependency order the dataplane
//! relies on:
//!
//! 1. config (datastore-not-ready is reported to the graph's owner
//!    directly, see `CalcGraph::take_datastore_not_ready`);
//! 2. IP-set adds (full updates), then IP-set deltas, then policies,
//!    profiles, endpoints;
//! 3. endpoint removes, profile removes, policy removes, IP-set removes;
//! 4. service accounts and namespaces;
//! 5. route removes, VTEP removes, VTEP adds, route adds (a route never
//!    exists without its VTEP);
//! 6. host metadata, IP pools, encapsulation.
//!
//! Invariants:
//! * No reference before its referent: an IP set is sent (full update)
//!   before any policy that uses it in the same or a later flush; a removal
//!   is sent only for objects previously sent.
//! * A delta is only sent for a set that was sent before and not removed;
//!   a set (re)added in this flush is sent in full instead, and keeps no
//!   member changes while it waits: its full update reads the members
//!   current at flush time from the [`FlushSource`] (the IP-set index).
//! * Pending policies and profiles wait in their proto encoding
//!   ([`Packed`]) and are decoded as they are emitted, so a start-of-day
//!   flush holds the compact form of every active policy, not the decoded
//!   one.
//! * Within each step objects are emitted in key order, so output is
//!   deterministic.

use std::collections::{BTreeMap, BTreeSet};

use felix_proto as pb;
use pb::to_dataplane::Payload;

use super::computed::EndpointComputed;
use super::ids::fill_rule_ids;
use super::labelindex::member::v4_cidr_text;
use super::labelindex::Member;
use super::policy_resolver::{EndpointTiers, ResolvedTier};
use super::rule_scanner::SetType;
use super::{EndpointKey, EndpointValue};
use crate::hash::FastSet;
use crate::model::PolicyKey;
use ipnet::IpNet;
use std::net::Ipv4Addr;

/// Host metadata as emitted.
#[derive(Clone, Debug, PartialEq)]
pub struct HostInfo {
    /// The node's IPv4 address (`HostMetadataUpdate.ipv4_addr`).
    pub ipv4_addr: String,
    /// The node's IPv6 address.
    pub ipv6_addr: String,
    /// The node's BGP AS number, as text.
    pub asnumber: String,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
}

/// An unordered set of members.
type MemberSet = FastSet<Member>;

/// A pending message in its proto encoding.
///
/// Policies wait here from activation to the next flush; at start of day
/// that is every active policy at once, and the decoded form of a rule
/// (every proto field present, most empty) is about ten times its
/// encoding.  Invariant: the bytes are always `M`'s own encoding, so
/// unpacking cannot fail; if it ever did, the message is emitted empty and
/// the failure logged, never a panic.
struct Packed<M> {
    bytes: Box<[u8]>,
    _kind: std::marker::PhantomData<M>,
}

impl<M: prost::Message + Default> Packed<M> {
    fn new(m: &M) -> Self {
        Packed {
            bytes: m.encode_to_vec().into_boxed_slice(),
            _kind: std::marker::PhantomData,
        }
    }

    fn unpack(&self) -> M {
        M::decode(&*self.bytes).unwrap_or_else(|e| {
            tracing::error!(error = %e, "pending message did not decode; emitting it empty");
            M::default()
        })
    }
}

/// What a flush reads from the graph's indexes instead of holding a copy:
/// a set's members for its full update, and the labels of a namespace or
/// service account (the labels of its `kns.` / `ksa.` profile, which the
/// label index holds anyway).
pub trait FlushSource {
    /// The members of active set `id`, in any order; empty if the set is
    /// not known to the source.
    fn current_members(&self, id: &str) -> Vec<Member>;
    /// The current labels of namespace `name` (prefix removed); empty if
    /// the source has none.
    fn namespace_labels(&self, name: &str) -> BTreeMap<String, String>;
    /// The current labels of service account `name` in `namespace`
    /// (prefix removed); empty if the source has none.
    fn service_account_labels(&self, namespace: &str, name: &str) -> BTreeMap<String, String>;
}

/// The members' wire forms in member order (deterministic output).
/// Sets of IPv4 CIDRs (nearly all of them) are sorted as packed integers
/// (address, then prefix length: the same order as `Member`'s), which is
/// several times cheaper than comparing the enums.
fn sorted_wire_forms(members: impl IntoIterator<Item = Member>) -> Vec<String> {
    let v: Vec<Member> = members.into_iter().collect();
    let packed: Option<Vec<u64>> = v
        .iter()
        .map(|m| match m {
            Member::Net(IpNet::V4(n)) => {
                Some((u64::from(u32::from(n.addr())) << 8) | u64::from(n.prefix_len()))
            }
            _ => None,
        })
        .collect();
    if let Some(mut keys) = packed {
        keys.sort_unstable();
        return keys
            .iter()
            .map(|k| v4_cidr_text(Ipv4Addr::from((k >> 8) as u32), (k & 0xff) as u8))
            .collect();
    }
    let mut v = v;
    v.sort_unstable();
    v.iter().map(Member::to_wire).collect()
}

/// Inserts `m` into `id`'s set, allocating the key only for a new set.
fn insert_member(map: &mut BTreeMap<String, MemberSet>, id: &str, m: Member) {
    match map.get_mut(id) {
        Some(set) => {
            set.insert(m);
        }
        None => {
            let mut set = MemberSet::default();
            set.insert(m);
            map.insert(id.to_string(), set);
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct EventSequencer {
    pending_config: Option<pb::ConfigUpdate>,

    pending_added_sets: BTreeMap<String, SetType>,
    pending_removed_sets: BTreeSet<String>,
    /// Pending membership changes per set, unordered: members are sorted
    /// once, when their set is flushed (a full set at start of day has one
    /// entry per endpoint in the cluster, and ordered inserts of that many
    /// cost more than the sort).
    pending_added_members: BTreeMap<String, MemberSet>,
    pending_removed_members: BTreeMap<String, MemberSet>,

    pending_policy_updates: BTreeMap<PolicyKey, Packed<pb::Policy>>,
    pending_policy_deletes: BTreeSet<PolicyKey>,
    pending_profile_updates: BTreeMap<String, Packed<pb::Profile>>,
    pending_profile_deletes: BTreeSet<String>,
    pending_endpoint_updates:
        BTreeMap<EndpointKey, (EndpointValue, Vec<ResolvedTier>, EndpointComputed)>,
    pending_endpoint_deletes: BTreeSet<EndpointKey>,

    pending_host_updates: BTreeMap<String, HostInfo>,
    pending_host_deletes: BTreeSet<String>,
    pending_pool_updates: BTreeMap<String, pb::IpamPool>,
    pending_pool_deletes: BTreeSet<String>,
    /// Namespaces and service accounts to send, by name only: their labels
    /// are read from the [`FlushSource`] at flush (a large cluster has one
    /// pending namespace per `kns.` profile at the first flush, and the
    /// label index holds those labels already).
    pending_ns_updates: BTreeSet<String>,
    pending_ns_deletes: BTreeSet<String>,
    pending_sa_updates: BTreeSet<(String, String)>,
    pending_sa_deletes: BTreeSet<(String, String)>,
    pending_route_updates: BTreeMap<String, pb::RouteUpdate>,
    pending_route_deletes: BTreeSet<String>,
    pending_vtep_updates: BTreeMap<String, pb::VxlanTunnelEndpointUpdate>,
    pending_vtep_deletes: BTreeSet<String>,
    pending_encap: Option<pb::Encapsulation>,

    // What the dataplane has been sent.  Only ever queried, never
    // iterated (output order comes from the pending maps), so hash sets:
    // a start-of-day flush inserts one entry per namespace in the cluster.
    sent_sets: FastSet<String>,
    sent_policies: FastSet<PolicyKey>,
    sent_profiles: FastSet<String>,
    sent_endpoints: FastSet<EndpointKey>,
    sent_hosts: FastSet<String>,
    sent_pools: FastSet<String>,
    sent_namespaces: FastSet<String>,
    sent_sas: FastSet<(String, String)>,
    sent_routes: FastSet<String>,
    sent_vteps: FastSet<String>,
}

fn set_type_proto(t: SetType) -> pb::ip_set_update::IpSetType {
    match t {
        SetType::Ip => pb::ip_set_update::IpSetType::Ip,
        SetType::IpAndPort => pb::ip_set_update::IpSetType::IpAndPort,
        SetType::Net => pb::ip_set_update::IpSetType::Net,
    }
}

fn policy_id(k: &PolicyKey) -> pb::PolicyId {
    pb::PolicyId {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        kind: k.kind.clone(),
    }
}

impl EventSequencer {
    /// A sequencer with nothing sent and nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of objects waiting for the next flush (a coalescing bound:
    /// at most one per object).
    pub fn pending_len(&self) -> usize {
        self.pending_added_sets.len()
            + self.pending_removed_sets.len()
            + self.pending_added_members.len()
            + self.pending_removed_members.len()
            + self.pending_policy_updates.len()
            + self.pending_policy_deletes.len()
            + self.pending_profile_updates.len()
            + self.pending_profile_deletes.len()
            + self.pending_endpoint_updates.len()
            + self.pending_endpoint_deletes.len()
            + self.pending_host_updates.len()
            + self.pending_host_deletes.len()
            + self.pending_pool_updates.len()
            + self.pending_pool_deletes.len()
            + self.pending_ns_updates.len()
            + self.pending_ns_deletes.len()
            + self.pending_sa_updates.len()
            + self.pending_sa_deletes.len()
            + self.pending_route_updates.len()
            + self.pending_route_deletes.len()
            + self.pending_vtep_updates.len()
            + self.pending_vtep_deletes.len()
            + usize::from(self.pending_encap.is_some())
            + usize::from(self.pending_config.is_some())
    }

    // ---------------------------------------------------------------- inputs

    /// Queues a config update; only the latest is sent.
    pub fn on_config_update(&mut self, update: pb::ConfigUpdate) {
        self.pending_config = Some(update);
    }

    /// Queues the creation of IP set `id` (members follow as deltas).
    pub fn on_ipset_added(&mut self, id: &str, t: SetType) {
        self.pending_added_sets.insert(id.to_string(), t);
        self.pending_removed_sets.remove(id);
        self.pending_added_members.remove(id);
        self.pending_removed_members.remove(id);
    }

    /// Queues the removal of IP set `id` if it was sent; drops pending work on it.
    pub fn on_ipset_removed(&mut self, id: &str) {
        if self.sent_sets.contains(id) {
            self.pending_removed_sets.insert(id.to_string());
        }
        self.pending_added_sets.remove(id);
        self.pending_added_members.remove(id);
        self.pending_removed_members.remove(id);
    }

    /// Whether set `id` waits for its full update (member changes to it
    /// are ignored until then, see [`EventSequencer::on_member_added`]).
    pub fn is_pending_full_update(&self, id: &str) -> bool {
        self.pending_added_sets.contains_key(id)
    }

    /// A member joined set `id`.  Ignored while the set waits for its
    /// full update: that update reads the members current at flush time
    /// from the [`FlushSource`] (at start of day that is every endpoint in
    /// the cluster, which is not worth buffering twice).
    pub fn on_member_added(&mut self, id: &str, m: Member) {
        if self.is_pending_full_update(id) {
            return;
        }
        if let Some(set) = self.pending_removed_members.get_mut(id) {
            if set.remove(&m) {
                if set.is_empty() {
                    self.pending_removed_members.remove(id);
                }
                return;
            }
        }
        insert_member(&mut self.pending_added_members, id, m);
    }

    /// A member left set `id` (ignored while the set waits for its full
    /// update, as for [`EventSequencer::on_member_added`]).
    pub fn on_member_removed(&mut self, id: &str, m: Member) {
        if self.pending_added_sets.contains_key(id) {
            return;
        }
        if let Some(set) = self.pending_added_members.get_mut(id) {
            if set.remove(&m) {
                if set.is_empty() {
                    self.pending_added_members.remove(id);
                }
                return;
            }
        }
        insert_member(&mut self.pending_removed_members, id, m);
    }

    /// `policy` is converted, without rule IDs (filled in at flush).
    pub fn on_policy_active(&mut self, key: &PolicyKey, policy: pb::Policy) {
        self.pending_policy_deletes.remove(key);
        let packed = Packed::new(&policy);
        self.pending_policy_updates.insert(key.clone(), packed);
    }

    /// Queues the removal of policy `key` if it was sent; drops a pending update.
    pub fn on_policy_inactive(&mut self, key: &PolicyKey) {
        self.pending_policy_updates.remove(key);
        if self.sent_policies.contains(key) {
            self.pending_policy_deletes.insert(key.clone());
        }
    }

    /// Only the rules of `rules` are used (the scanner converts profiles
    /// and policies alike); rule IDs are filled in at flush.
    pub fn on_profile_active(&mut self, name: &str, rules: pb::Policy) {
        self.pending_profile_deletes.remove(name);
        let packed = Packed::new(&pb::Profile {
            inbound_rules: rules.inbound_rules,
            outbound_rules: rules.outbound_rules,
        });
        self.pending_profile_updates
            .insert(name.to_string(), packed);
    }

    /// Queues the removal of profile `name` if it was sent; drops a pending update.
    pub fn on_profile_inactive(&mut self, name: &str) {
        self.pending_profile_updates.remove(name);
        if self.sent_profiles.contains(name) {
            self.pending_profile_deletes.insert(name.to_string());
        }
    }

    /// Queues an endpoint's update (with its tiers) or, for `endpoint: None`, its removal.
    pub fn on_endpoint_tiers(&mut self, update: EndpointTiers) {
        match update.endpoint {
            None => {
                self.pending_endpoint_updates.remove(&update.key);
                if self.sent_endpoints.contains(&update.key) {
                    self.pending_endpoint_deletes.insert(update.key);
                }
            }
            Some(ep) => {
                self.pending_endpoint_deletes.remove(&update.key);
                self.pending_endpoint_updates
                    .insert(update.key, (ep, update.tiers, update.computed));
            }
        }
    }

    /// Queues host metadata for `host`, or its removal when `info` is `None`.
    pub fn on_host_update(&mut self, host: &str, info: Option<HostInfo>) {
        match info {
            Some(i) => {
                self.pending_host_deletes.remove(host);
                self.pending_host_updates.insert(host.to_string(), i);
            }
            None => {
                self.pending_host_updates.remove(host);
                if self.sent_hosts.contains(host) {
                    self.pending_host_deletes.insert(host.to_string());
                }
            }
        }
    }

    /// `id` is the pool's ID as the dataplane knows it (its CIDR with `/`
    /// replaced by `-`).
    pub fn on_pool_update(&mut self, id: &str, pool: Option<pb::IpamPool>) {
        match pool {
            Some(p) => {
                self.pending_pool_deletes.remove(id);
                self.pending_pool_updates.insert(id.to_string(), p);
            }
            None => {
                self.pending_pool_updates.remove(id);
                if self.sent_pools.contains(id) {
                    self.pending_pool_deletes.insert(id.to_string());
                }
            }
        }
    }

    /// Namespace `name` was added or changed (`present`) or removed.  Its
    /// labels are read at flush, so they are always the current ones.
    pub fn on_namespace_update(&mut self, name: &str, present: bool) {
        if present {
            self.pending_ns_deletes.remove(name);
            self.pending_ns_updates.insert(name.to_string());
        } else {
            self.pending_ns_updates.remove(name);
            if self.sent_namespaces.contains(name) {
                self.pending_ns_deletes.insert(name.to_string());
            }
        }
    }

    /// Service account `name` in `namespace` was added or changed
    /// (`present`) or removed; as for namespaces, labels are read at flush.
    pub fn on_service_account_update(&mut self, namespace: &str, name: &str, present: bool) {
        let id = (namespace.to_string(), name.to_string());
        if present {
            self.pending_sa_deletes.remove(&id);
            self.pending_sa_updates.insert(id);
        } else {
            self.pending_sa_updates.remove(&id);
            if self.sent_sas.contains(&id) {
                self.pending_sa_deletes.insert(id);
            }
        }
    }

    /// Queues a route, keyed by its destination.
    pub fn on_route_update(&mut self, update: pb::RouteUpdate) {
        self.pending_route_deletes.remove(&update.dst);
        self.pending_route_updates
            .insert(update.dst.clone(), update);
    }

    /// Queues the removal of the route to `dst` if it was sent.
    pub fn on_route_remove(&mut self, dst: &str) {
        self.pending_route_updates.remove(dst);
        if self.sent_routes.contains(dst) {
            self.pending_route_deletes.insert(dst.to_string());
        }
    }

    /// Queues a VTEP, keyed by its node.
    pub fn on_vtep_update(&mut self, update: pb::VxlanTunnelEndpointUpdate) {
        self.pending_vtep_deletes.remove(&update.node);
        self.pending_vtep_updates
            .insert(update.node.clone(), update);
    }

    /// Queues the removal of `node`'s VTEP if it was sent.
    pub fn on_vtep_remove(&mut self, node: &str) {
        self.pending_vtep_updates.remove(node);
        if self.sent_vteps.contains(node) {
            self.pending_vtep_deletes.insert(node.to_string());
        }
    }

    /// Queues encapsulation settings; only the latest is sent.
    pub fn on_encap_update(&mut self, encap: pb::Encapsulation) {
        self.pending_encap = Some(encap);
    }

    // ---------------------------------------------------------------- flush

    /// Emits everything pending, in the order given in the module docs.
    /// `members` supplies the full membership of sets sent for the first
    /// time (or re-sent after a change of definition).
    pub fn flush(&mut self, source: &dyn FlushSource, out: &mut dyn FnMut(Payload)) {
        if let Some(c) = self.pending_config.take() {
            out(Payload::ConfigUpdate(c));
        }
        self.flush_added_sets(source, out);
        self.flush_set_deltas(out);
        for (key, packed) in std::mem::take(&mut self.pending_policy_updates) {
            out(Payload::ActivePolicyUpdate(policy_update(
                &key,
                packed.unpack(),
            )));
            self.sent_policies.insert(key);
        }
        for (name, packed) in std::mem::take(&mut self.pending_profile_updates) {
            out(Payload::ActiveProfileUpdate(profile_update(
                &name,
                packed.unpack(),
            )));
            self.sent_profiles.insert(name);
        }
        for (key, (ep, tiers, computed)) in std::mem::take(&mut self.pending_endpoint_updates) {
            out(endpoint_update(&key, &ep, &tiers, &computed));
            self.sent_endpoints.insert(key);
        }
        for key in std::mem::take(&mut self.pending_endpoint_deletes) {
            out(match &key {
                EndpointKey::Workload(k) => {
                    Payload::WorkloadEndpointRemove(pb::WorkloadEndpointRemove {
                        id: Some(wep_id(k)),
                    })
                }
                EndpointKey::Host(k) => Payload::HostEndpointRemove(pb::HostEndpointRemove {
                    id: Some(pb::HostEndpointId {
                        endpoint_id: k.endpoint_id.clone(),
                    }),
                }),
            });
            self.sent_endpoints.remove(&key);
        }
        for name in std::mem::take(&mut self.pending_profile_deletes) {
            out(Payload::ActiveProfileRemove(pb::ActiveProfileRemove {
                id: Some(pb::ProfileId { name: name.clone() }),
            }));
            self.sent_profiles.remove(&name);
        }
        for key in std::mem::take(&mut self.pending_policy_deletes) {
            out(Payload::ActivePolicyRemove(pb::ActivePolicyRemove {
                id: Some(policy_id(&key)),
            }));
            self.sent_policies.remove(&key);
        }
        for id in std::mem::take(&mut self.pending_removed_sets) {
            out(Payload::IpsetRemove(pb::IpSetRemove { id: id.clone() }));
            self.sent_sets.remove(&id);
        }
        for id in std::mem::take(&mut self.pending_sa_deletes) {
            out(Payload::ServiceAccountRemove(pb::ServiceAccountRemove {
                id: Some(pb::ServiceAccountId {
                    namespace: id.0.clone(),
                    name: id.1.clone(),
                }),
            }));
            self.sent_sas.remove(&id);
        }
        for id in std::mem::take(&mut self.pending_sa_updates) {
            let labels = source.service_account_labels(&id.0, &id.1);
            out(Payload::ServiceAccountUpdate(pb::ServiceAccountUpdate {
                id: Some(pb::ServiceAccountId {
                    namespace: id.0.clone(),
                    name: id.1.clone(),
                }),
                labels,
            }));
            self.sent_sas.insert(id);
        }
        for name in std::mem::take(&mut self.pending_ns_deletes) {
            out(Payload::NamespaceRemove(pb::NamespaceRemove {
                id: Some(pb::NamespaceId { name: name.clone() }),
            }));
            self.sent_namespaces.remove(&name);
        }
        for name in std::mem::take(&mut self.pending_ns_updates) {
            out(Payload::NamespaceUpdate(pb::NamespaceUpdate {
                labels: source.namespace_labels(&name),
                id: Some(pb::NamespaceId { name: name.clone() }),
            }));
            self.sent_namespaces.insert(name);
        }
        for dst in std::mem::take(&mut self.pending_route_deletes) {
            out(Payload::RouteRemove(pb::RouteRemove { dst: dst.clone() }));
            self.sent_routes.remove(&dst);
        }
        for node in std::mem::take(&mut self.pending_vtep_deletes) {
            out(Payload::VtepRemove(pb::VxlanTunnelEndpointRemove {
                node: node.clone(),
            }));
            self.sent_vteps.remove(&node);
        }
        for (node, u) in std::mem::take(&mut self.pending_vtep_updates) {
            out(Payload::VtepUpdate(u));
            self.sent_vteps.insert(node);
        }
        for (dst, u) in std::mem::take(&mut self.pending_route_updates) {
            out(Payload::RouteUpdate(u));
            self.sent_routes.insert(dst);
        }
        for host in std::mem::take(&mut self.pending_host_deletes) {
            out(Payload::HostMetadataRemove(pb::HostMetadataRemove {
                hostname: host.clone(),
                ..Default::default()
            }));
            self.sent_hosts.remove(&host);
        }
        for (host, info) in std::mem::take(&mut self.pending_host_updates) {
            out(Payload::HostMetadataUpdate(pb::HostMetadataUpdate {
                hostname: host.clone(),
                ipv4_addr: info.ipv4_addr,
                ipv6_addr: info.ipv6_addr,
                asnumber: info.asnumber,
                labels: info.labels.into_iter().collect(),
            }));
            self.sent_hosts.insert(host);
        }
        for id in std::mem::take(&mut self.pending_pool_deletes) {
            out(Payload::IpamPoolRemove(pb::IpamPoolRemove {
                id: id.clone(),
            }));
            self.sent_pools.remove(&id);
        }
        for (id, pool) in std::mem::take(&mut self.pending_pool_updates) {
            out(Payload::IpamPoolUpdate(pb::IpamPoolUpdate {
                id: id.clone(),
                pool: Some(pool),
            }));
            self.sent_pools.insert(id);
        }
        if let Some(e) = self.pending_encap.take() {
            out(Payload::Encapsulation(e));
        }
    }

    fn flush_added_sets(&mut self, source: &dyn FlushSource, out: &mut dyn FnMut(Payload)) {
        for (id, t) in std::mem::take(&mut self.pending_added_sets) {
            let members = sorted_wire_forms(source.current_members(&id));
            out(Payload::IpsetUpdate(pb::IpSetUpdate {
                id: id.clone(),
                members,
                r#type: set_type_proto(t) as i32,
            }));
            self.sent_sets.insert(id);
        }
    }

    fn flush_set_deltas(&mut self, out: &mut dyn FnMut(Payload)) {
        let mut added = std::mem::take(&mut self.pending_added_members);
        let mut removed = std::mem::take(&mut self.pending_removed_members);
        let ids: BTreeSet<String> = added.keys().chain(removed.keys()).cloned().collect();
        for id in ids {
            let a = added.remove(&id).unwrap_or_default();
            let r = removed.remove(&id).unwrap_or_default();
            if !self.sent_sets.contains(&id) {
                // Members of a set that was never sent (already superseded
                // by a removal): nothing to say.
                continue;
            }
            out(Payload::IpsetDeltaUpdate(pb::IpSetDeltaUpdate {
                id,
                added_members: sorted_wire_forms(a),
                removed_members: sorted_wire_forms(r),
            }));
        }
    }
}

fn policy_update(key: &PolicyKey, mut p: pb::Policy) -> pb::ActivePolicyUpdate {
    fill_rule_ids(
        &mut p.inbound_rules,
        &format!("pol-in-default/{}", key.name),
    );
    fill_rule_ids(
        &mut p.outbound_rules,
        &format!("pol-out-default/{}", key.name),
    );
    pb::ActivePolicyUpdate {
        id: Some(policy_id(key)),
        policy: Some(p),
    }
}

fn profile_update(name: &str, mut p: pb::Profile) -> pb::ActiveProfileUpdate {
    fill_rule_ids(&mut p.inbound_rules, &format!("prof-in-{name}"));
    fill_rule_ids(&mut p.outbound_rules, &format!("prof-out-{name}"));
    pb::ActiveProfileUpdate {
        id: Some(pb::ProfileId {
            name: name.to_string(),
        }),
        profile: Some(p),
    }
}

fn wep_id(k: &crate::model::WorkloadEndpointKey) -> pb::WorkloadEndpointId {
    pb::WorkloadEndpointId {
        orchestrator_id: k.orchestrator_id.clone(),
        workload_id: k.workload_id.clone(),
        endpoint_id: k.endpoint_id.clone(),
    }
}

/// The four tier lists of an endpoint: normal, untracked, pre-DNAT and
/// forward, as upstream splits them.  Untracked and pre-DNAT tiers end in
/// Pass so that normal policy is still evaluated; untracked and pre-DNAT
/// policies never contribute egress.
pub fn split_tiers(
    tiers: &[ResolvedTier],
) -> (
    Vec<pb::TierInfo>,
    Vec<pb::TierInfo>,
    Vec<pb::TierInfo>,
    Vec<pb::TierInfo>,
) {
    let (mut normal, mut untracked, mut pre_dnat, mut forward) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for t in tiers {
        let mk = |action: &str| pb::TierInfo {
            name: t.name.clone(),
            ingress_policies: Vec::new(),
            egress_policies: Vec::new(),
            default_action: action.to_string(),
        };
        let mut u = mk("Pass");
        let mut p = mk("Pass");
        let mut f = mk(&t.default_action);
        let mut n = mk(&t.default_action);
        for (key, meta) in &t.policies {
            let add = |ti: &mut pb::TierInfo, egress_ok: bool| {
                if meta.ingress {
                    ti.ingress_policies.push(policy_id(key));
                }
                if egress_ok && meta.egress {
                    ti.egress_policies.push(policy_id(key));
                }
            };
            if meta.do_not_track {
                add(&mut u, true);
            } else if meta.pre_dnat {
                add(&mut p, false);
            } else {
                if meta.apply_on_forward {
                    add(&mut f, true);
                }
                add(&mut n, true);
            }
        }
        let nonempty =
            |ti: &pb::TierInfo| !ti.ingress_policies.is_empty() || !ti.egress_policies.is_empty();
        if nonempty(&u) {
            untracked.push(u);
        }
        if nonempty(&p) {
            pre_dnat.push(p);
        }
        if nonempty(&f) {
            forward.push(f);
        }
        if nonempty(&n) {
            normal.push(n);
        }
    }
    (normal, untracked, pre_dnat, forward)
}

fn endpoint_update(
    key: &EndpointKey,
    ep: &EndpointValue,
    tiers: &[ResolvedTier],
    computed: &EndpointComputed,
) -> Payload {
    let (normal, untracked, pre_dnat, forward) = split_tiers(tiers);
    match (key, ep) {
        (EndpointKey::Workload(k), EndpointValue::Workload(w)) => {
            let mut endpoint = pb::WorkloadEndpoint {
                state: w.state.clone(),
                name: w.name.clone(),
                mac: w.mac.clone().unwrap_or_default(),
                profile_ids: w.profile_ids.clone(),
                ipv4_nets: w.ipv4_nets.iter().map(|n| n.to_string()).collect(),
                ipv6_nets: w.ipv6_nets.iter().map(|n| n.to_string()).collect(),
                tiers: normal,
                ipv4_nat: nats(&w.ipv4_nat),
                ipv6_nat: nats(&w.ipv6_nat),
                allow_spoofed_source_prefixes: w
                    .allow_spoofed_source_prefixes
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
                annotations: w
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                ..Default::default()
            };
            computed.apply_to(&mut endpoint);
            Payload::WorkloadEndpointUpdate(pb::WorkloadEndpointUpdate {
                id: Some(wep_id(k)),
                endpoint: Some(endpoint),
            })
        }
        (EndpointKey::Host(k), EndpointValue::Host(h)) => {
            Payload::HostEndpointUpdate(pb::HostEndpointUpdate {
                id: Some(pb::HostEndpointId {
                    endpoint_id: k.endpoint_id.clone(),
                }),
                endpoint: Some(pb::HostEndpoint {
                    name: h.name.clone(),
                    profile_ids: h.profile_ids.clone(),
                    tiers: normal,
                    untracked_tiers: untracked,
                    pre_dnat_tiers: pre_dnat,
                    forward_tiers: forward,
                    expected_ipv4_addrs: h
                        .expected_ipv4_addrs
                        .iter()
                        .map(|a| a.to_string())
                        .collect(),
                    expected_ipv6_addrs: h
                        .expected_ipv6_addrs
                        .iter()
                        .map(|a| a.to_string())
                        .collect(),
                    ..Default::default()
                }),
            })
        }
        // Key and value kinds always agree (the graph builds both from one
        // update); an impossible mix degrades to a removal, never an open
        // endpoint.
        (EndpointKey::Workload(k), _) => {
            Payload::WorkloadEndpointRemove(pb::WorkloadEndpointRemove {
                id: Some(wep_id(k)),
            })
        }
        (EndpointKey::Host(k), _) => Payload::HostEndpointRemove(pb::HostEndpointRemove {
            id: Some(pb::HostEndpointId {
                endpoint_id: k.endpoint_id.clone(),
            }),
        }),
    }
}

fn nats(n: &[crate::model::IpNat]) -> Vec<pb::NatInfo> {
    n.iter()
        .map(|n| pb::NatInfo {
            ext_ip: n.ext_ip.to_string(),
            int_ip: n.int_ip.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_member_order(members: &[Member]) -> Vec<String> {
        let mut v = members.to_vec();
        v.sort();
        v.iter().map(|m| m.to_string()).collect()
    }

    proptest! {
        /// The packed-integer sort gives exactly `Member` order and text,
        /// for pure IPv4 sets and (through the general path) mixed ones.
        #[test]
        fn wire_forms_are_sorted_members(
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..60),
            mixed in any::<bool>(),
        ) {
            let mut members: Vec<Member> = nets
                .iter()
                .map(|(a, p)| {
                    let n = ipnet::Ipv4Net::new(Ipv4Addr::from(*a), *p).unwrap_or_default();
                    Member::Net(IpNet::V4(n.trunc()))
                })
                .collect();
            if mixed {
                members.push(Member::Net("fd00::1/128".parse().unwrap_or_else(|_| IpNet::default())));
            }
            let want = by_member_order(&members);
            let unique: FastSet<Member> = members.iter().copied().collect();
            let mut want_unique = want.clone();
            want_unique.dedup();
            prop_assert_eq!(sorted_wire_forms(unique), want_unique);
        }
    }
}
