//! The shared IP-set membership index (upstream's
//! `SelectorAndNamedPortIndex`).
//!
//! It holds every labelled object in the cluster — workload endpoints, host
//! endpoints and network sets, local or not — and the profiles they inherit
//! labels from, and computes the members of every *active* IP set: a
//! selector, optionally combined with a named port and protocol.
//!
//! Invariants:
//! * Membership is reference counted: several objects may contribute the
//!   same member (two endpoints briefly sharing an IP, overlapping network
//!   sets).  A member is reported added when its count goes 0 -> 1 and
//!   removed when it goes 1 -> 0, never otherwise.
//! * Every contribution added is removed with exactly the same key
//!   (set index, member): contributions are recomputed from the stored
//!   object, never from the update that replaces it.
//! * There is one index for all uses; do not create a second all-endpoint
//!   index (it is the graph's largest memory cost).
//! * Deleting a set reports no member removals: the set removal itself
//!   supersedes them (the sequencer drops pending deltas of a removed set).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ipnet::IpNet;

use super::member::{host_net, Member, NpProtocol};
use super::restriction::{Choice, RestrictionIndex, ValueIndex};
use crate::model::{EndpointPort, HostEndpoint, Labels, NetworkSet, WorkloadEndpoint};
use crate::selector::{Selector, WithParents};

/// Identity of a labelled object in the index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelledKey {
    Workload(crate::model::WorkloadEndpointKey),
    Host(crate::model::HostEndpointKey),
    NetworkSet(crate::model::NetworkSetKey),
}

/// The stored value of a labelled object.
#[derive(Clone, Debug)]
pub enum LabelledValue {
    Workload(Arc<WorkloadEndpoint>),
    Host(Arc<HostEndpoint>),
    NetworkSet(Arc<NetworkSet>),
}

impl LabelledValue {
    fn labels(&self) -> &Labels {
        match self {
            LabelledValue::Workload(w) => &w.labels,
            LabelledValue::Host(h) => &h.labels,
            LabelledValue::NetworkSet(n) => &n.labels,
        }
    }

    fn profile_ids(&self) -> &[String] {
        match self {
            LabelledValue::Workload(w) => &w.profile_ids,
            LabelledValue::Host(h) => &h.profile_ids,
            LabelledValue::NetworkSet(n) => &n.profile_ids,
        }
    }

    fn ports(&self) -> &[EndpointPort] {
        match self {
            LabelledValue::Workload(w) => &w.ports,
            LabelledValue::Host(h) => &h.ports,
            LabelledValue::NetworkSet(_) => &[],
        }
    }

    /// The CIDRs this object contributes: a workload's addresses as host
    /// CIDRs (any prefix length is ignored), a host endpoint's expected IPs,
    /// a network set's nets with host bits cleared and a /0 split into two
    /// halves (the Linux dataplane cannot hold a zero-length prefix).
    fn for_each_cidr(&self, mut f: impl FnMut(IpNet)) {
        match self {
            LabelledValue::Workload(w) => {
                for n in w.ipv4_nets.iter().chain(w.ipv6_nets.iter()) {
                    f(host_net(n.addr()));
                }
            }
            LabelledValue::Host(h) => {
                for a in h
                    .expected_ipv4_addrs
                    .iter()
                    .chain(h.expected_ipv6_addrs.iter())
                {
                    f(host_net(*a));
                }
            }
            LabelledValue::NetworkSet(n) => {
                for net in &n.nets {
                    let net = net.trunc();
                    if net.prefix_len() == 0 {
                        match net {
                            IpNet::V4(_) => {
                                for s in ["0.0.0.0/1", "128.0.0.0/1"] {
                                    if let Ok(half) = s.parse() {
                                        f(half);
                                    }
                                }
                            }
                            IpNet::V6(_) => {
                                for s in ["::/1", "8000::/1"] {
                                    if let Ok(half) = s.parse() {
                                        f(half);
                                    }
                                }
                            }
                        }
                    } else {
                        f(net);
                    }
                }
            }
        }
    }

    /// Whether two values contribute identically (same labels, profiles,
    /// addresses and ports).
    fn same_contribution(&self, other: &LabelledValue) -> bool {
        let ptr_eq = match (self, other) {
            (LabelledValue::Workload(a), LabelledValue::Workload(b)) => Arc::ptr_eq(a, b),
            (LabelledValue::Host(a), LabelledValue::Host(b)) => Arc::ptr_eq(a, b),
            (LabelledValue::NetworkSet(a), LabelledValue::NetworkSet(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if ptr_eq {
            return true;
        }
        if self.labels() != other.labels()
            || self.profile_ids() != other.profile_ids()
            || self.ports() != other.ports()
        {
            return false;
        }
        let mut a = Vec::new();
        self.for_each_cidr(|n| a.push(n));
        let mut b = Vec::new();
        other.for_each_cidr(|n| b.push(n));
        a == b
    }
}

/// Receives membership changes.
pub trait MemberSink {
    fn member_added(&mut self, set_id: &str, member: Member);
    fn member_removed(&mut self, set_id: &str, member: Member);
}

/// Definition of an active IP set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSetDef {
    pub selector: Selector,
    /// `None` for a selector-only set.
    pub np_protocol: NpProtocol,
    /// Empty for a selector-only set.
    pub np_name: String,
}

struct SetData {
    uid: Arc<str>,
    def: IpSetDef,
    members: HashMap<Member, u32>,
}

struct EpData {
    key: LabelledKey,
    value: LabelledValue,
    parents: Vec<u32>,
    /// Indices of the active sets this object matches.
    matching: Vec<u32>,
}

struct ParentData {
    name: String,
    labels: Option<Arc<Labels>>,
    endpoints: HashSet<u32>,
}

/// The shared index; see the module docs.
#[derive(Default)]
pub struct IpSetIndex {
    ep_ids: HashMap<LabelledKey, u32>,
    eps: Vec<Option<EpData>>,
    free_eps: Vec<u32>,
    ep_values: ValueIndex<u32>,

    parent_ids: HashMap<String, u32>,
    parents: Vec<Option<ParentData>>,
    free_parents: Vec<u32>,
    parent_values: ValueIndex<u32>,

    set_ids: HashMap<Arc<str>, u32>,
    sets: Vec<Option<SetData>>,
    free_sets: Vec<u32>,
    set_restrictions: RestrictionIndex<u32>,
}

/// Labels of an object plus those of its parents, for evaluation.
fn parent_labels<'a>(parents: &'a [Option<ParentData>], ids: &[u32]) -> Vec<&'a Labels> {
    ids.iter()
        .filter_map(|p| parents.get(*p as usize).and_then(|p| p.as_ref()))
        .filter_map(|p| p.labels.as_deref())
        .collect()
}

/// Effective (key, value) pairs: own labels shadow parents', earlier
/// parents shadow later ones.
fn effective_pairs<'a>(own: &'a Labels, parents: &[&'a Labels]) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = own.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if parents.is_empty() {
        return out;
    }
    for (i, p) in parents.iter().enumerate() {
        for (k, v) in p.iter() {
            if own.contains_key(k) || parents[..i].iter().any(|q| q.contains_key(k)) {
                continue;
            }
            out.push((k.as_str(), v.as_str()));
        }
    }
    out
}

impl IpSetIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of labelled objects held.
    pub fn num_endpoints(&self) -> usize {
        self.ep_ids.len()
    }

    /// Number of active IP sets.
    pub fn num_sets(&self) -> usize {
        self.set_ids.len()
    }

    /// Current members of an active set (sorted), for tests and
    /// introspection.
    pub fn members(&self, uid: &str) -> Option<Vec<Member>> {
        let idx = *self.set_ids.get(uid)?;
        let set = self.sets.get(idx as usize)?.as_ref()?;
        let mut m: Vec<Member> = set.members.keys().copied().collect();
        m.sort();
        Some(m)
    }

    // ------------------------------------------------------------------
    // Labelled objects
    // ------------------------------------------------------------------

    /// Adds or updates a labelled object.
    pub fn update_endpoint(
        &mut self,
        key: LabelledKey,
        value: LabelledValue,
        sink: &mut dyn MemberSink,
    ) {
        let id = match self.ep_ids.get(&key) {
            Some(id) => *id,
            None => {
                let id = alloc(&mut self.eps, &mut self.free_eps);
                self.ep_ids.insert(key.clone(), id);
                id
            }
        };
        let old = match self.eps[id as usize].take() {
            Some(mut o) if o.value.same_contribution(&value) => {
                o.value = value;
                self.eps[id as usize] = Some(o);
                return;
            }
            other => other,
        };

        // Parents (profile label inheritance).
        let new_parents: Vec<u32> = value
            .profile_ids()
            .iter()
            .map(|name| self.intern_parent(name))
            .collect();
        let old_parents = old.as_ref().map(|o| o.parents.clone()).unwrap_or_default();
        for p in &old_parents {
            if !new_parents.contains(p) {
                if let Some(Some(pd)) = self.parents.get_mut(*p as usize) {
                    pd.endpoints.remove(&id);
                }
            }
        }
        for p in &new_parents {
            if let Some(Some(pd)) = self.parents.get_mut(*p as usize) {
                pd.endpoints.insert(id);
            }
        }

        // Own-label value index.
        match &old {
            Some(o) if o.value.labels() == value.labels() => {}
            Some(o) => {
                self.ep_values.remove(id, o.value.labels());
                self.ep_values.add(id, value.labels());
            }
            None => self.ep_values.add(id, value.labels()),
        }

        let new_matching = self.compute_matching(value.labels(), &new_parents);
        let old_matching = old.as_ref().map(|o| o.matching.clone()).unwrap_or_default();

        // Add new contributions first so shared members never flap.
        for s in &new_matching {
            self.add_contributions(*s, &value, sink);
        }
        if let Some(o) = &old {
            for s in &old_matching {
                self.remove_contributions(*s, &o.value, sink);
            }
        }
        for p in &old_parents {
            if !new_parents.contains(p) {
                self.maybe_free_parent(*p);
            }
        }
        self.eps[id as usize] = Some(EpData {
            key,
            value,
            parents: new_parents,
            matching: new_matching,
        });
    }

    /// Removes a labelled object (no-op if unknown).
    pub fn delete_endpoint(&mut self, key: &LabelledKey, sink: &mut dyn MemberSink) {
        let Some(id) = self.ep_ids.remove(key) else {
            return;
        };
        let Some(old) = self.eps[id as usize].take() else {
            return;
        };
        for s in &old.matching {
            self.remove_contributions(*s, &old.value, sink);
        }
        self.ep_values.remove(id, old.value.labels());
        for p in &old.parents {
            if let Some(Some(pd)) = self.parents.get_mut(*p as usize) {
                pd.endpoints.remove(&id);
            }
            self.maybe_free_parent(*p);
        }
        self.free_eps.push(id);
    }

    // ------------------------------------------------------------------
    // Parents (profiles)
    // ------------------------------------------------------------------

    /// Sets (`Some`) or clears (`None`) the labels a profile applies.
    pub fn update_parent_labels(
        &mut self,
        name: &str,
        labels: Option<Arc<Labels>>,
        sink: &mut dyn MemberSink,
    ) {
        let pid = match (self.parent_ids.get(name), &labels) {
            (Some(p), _) => *p,
            (None, None) => return,
            (None, Some(_)) => self.intern_parent(name),
        };
        let Some(Some(pd)) = self.parents.get_mut(pid as usize) else {
            return;
        };
        if pd.labels.as_deref() == labels.as_deref() {
            return;
        }
        let old = std::mem::replace(&mut pd.labels, labels.clone());
        let eps: Vec<u32> = pd.endpoints.iter().copied().collect();
        if let Some(old) = &old {
            self.parent_values.remove(pid, old);
        }
        if let Some(new) = &labels {
            self.parent_values.add(pid, new);
        }
        for ep in eps {
            self.rematch_endpoint(ep, sink);
        }
        self.maybe_free_parent(pid);
    }

    fn intern_parent(&mut self, name: &str) -> u32 {
        if let Some(p) = self.parent_ids.get(name) {
            return *p;
        }
        let id = alloc(&mut self.parents, &mut self.free_parents);
        self.parents[id as usize] = Some(ParentData {
            name: name.to_string(),
            labels: None,
            endpoints: HashSet::new(),
        });
        self.parent_ids.insert(name.to_string(), id);
        id
    }

    fn maybe_free_parent(&mut self, pid: u32) {
        let free = match self.parents.get(pid as usize) {
            Some(Some(pd)) => pd.labels.is_none() && pd.endpoints.is_empty(),
            _ => false,
        };
        if free {
            if let Some(pd) = self.parents[pid as usize].take() {
                self.parent_ids.remove(&pd.name);
                self.free_parents.push(pid);
            }
        }
    }

    /// Re-evaluates one object's matches after its inherited labels
    /// changed; its own contributions are unchanged.
    fn rematch_endpoint(&mut self, ep: u32, sink: &mut dyn MemberSink) {
        let Some(data) = self.eps.get_mut(ep as usize).and_then(|e| e.take()) else {
            return;
        };
        let new_matching = self.compute_matching(data.value.labels(), &data.parents);
        for s in &new_matching {
            if !data.matching.contains(s) {
                self.add_contributions(*s, &data.value, sink);
            }
        }
        for s in &data.matching {
            if !new_matching.contains(s) {
                self.remove_contributions(*s, &data.value, sink);
            }
        }
        self.eps[ep as usize] = Some(EpData {
            matching: new_matching,
            ..data
        });
    }

    fn compute_matching(&self, own: &Labels, parent_ids: &[u32]) -> Vec<u32> {
        let parents = parent_labels(&self.parents, parent_ids);
        let pairs = effective_pairs(own, &parents);
        let lookup = WithParents {
            own,
            parents: &parents,
        };
        let mut out = Vec::new();
        self.set_restrictions
            .for_each_candidate(pairs.iter().copied(), |s| {
                if let Some(Some(set)) = self.sets.get(*s as usize) {
                    if set.def.selector.evaluate(&lookup) {
                        out.push(*s);
                    }
                }
            });
        out.sort_unstable();
        out.dedup();
        out
    }

    // ------------------------------------------------------------------
    // IP sets
    // ------------------------------------------------------------------

    /// Activates (or redefines) IP set `uid`, scanning for its members.
    pub fn update_ipset(&mut self, uid: &str, def: IpSetDef, sink: &mut dyn MemberSink) {
        if let Some(idx) = self.set_ids.get(uid) {
            if let Some(Some(existing)) = self.sets.get(*idx as usize) {
                if existing.def == def {
                    return;
                }
            }
            self.delete_ipset(uid);
        }
        let idx = alloc(&mut self.sets, &mut self.free_sets);
        let uid: Arc<str> = Arc::from(uid);
        let choice = Choice::for_selector(&def.selector);
        self.sets[idx as usize] = Some(SetData {
            uid: uid.clone(),
            def,
            members: HashMap::new(),
        });
        self.set_ids.insert(uid, idx);

        let candidates = self.candidate_endpoints(&choice);
        for ep in candidates {
            let matches = {
                let Some(Some(data)) = self.eps.get(ep as usize) else {
                    continue;
                };
                let parents = parent_labels(&self.parents, &data.parents);
                let lookup = WithParents {
                    own: data.value.labels(),
                    parents: &parents,
                };
                match &self.sets[idx as usize] {
                    Some(set) => set.def.selector.evaluate(&lookup),
                    None => false,
                }
            };
            if matches {
                let value = match &mut self.eps[ep as usize] {
                    Some(data) => {
                        data.matching.push(idx);
                        data.matching.sort_unstable();
                        data.value.clone()
                    }
                    None => continue,
                };
                self.add_contributions(idx, &value, sink);
            }
        }
        self.set_restrictions.add(idx, choice);
    }

    /// Deactivates IP set `uid` (no-op if unknown).  No member removals are
    /// reported (see the module docs).
    pub fn delete_ipset(&mut self, uid: &str) {
        let Some(idx) = self.set_ids.remove(uid) else {
            return;
        };
        let choice = match &self.sets[idx as usize] {
            Some(set) => Choice::for_selector(&set.def.selector),
            None => Choice::Unoptimized,
        };
        self.set_restrictions.remove(&idx);
        for ep in self.candidate_endpoints(&choice) {
            if let Some(Some(data)) = self.eps.get_mut(ep as usize) {
                data.matching.retain(|s| *s != idx);
            }
        }
        self.sets[idx as usize] = None;
        self.free_sets.push(idx);
    }

    /// Objects that could match a selector with restriction `choice`:
    /// by own labels, or through a parent's labels; everything when the
    /// selector is unoptimisable.
    fn candidate_endpoints(&self, choice: &Choice) -> Vec<u32> {
        let mut out = Vec::new();
        let indexed = self.ep_values.for_each_matching(choice, |ep| out.push(ep));
        if !indexed {
            return self
                .eps
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_some())
                .map(|(i, _)| i as u32)
                .collect();
        }
        self.parent_values.for_each_matching(choice, |p| {
            if let Some(Some(pd)) = self.parents.get(p as usize) {
                out.extend(pd.endpoints.iter().copied());
            }
        });
        out.sort_unstable();
        out.dedup();
        out
    }

    fn add_contributions(&mut self, set: u32, value: &LabelledValue, sink: &mut dyn MemberSink) {
        let Some(Some(data)) = self.sets.get_mut(set as usize) else {
            return;
        };
        for_each_contribution(&data.def, value, |m| {
            let c = data.members.entry(m).or_insert(0);
            *c += 1;
            if *c == 1 {
                sink.member_added(&data.uid, m);
            }
        });
    }

    fn remove_contributions(
        &mut self,
        set: u32,
        value: &LabelledValue,
        sink: &mut dyn MemberSink,
    ) {
        let Some(Some(data)) = self.sets.get_mut(set as usize) else {
            return;
        };
        for_each_contribution(&data.def, value, |m| {
            if let Some(c) = data.members.get_mut(&m) {
                *c -= 1;
                if *c == 0 {
                    data.members.remove(&m);
                    sink.member_removed(&data.uid, m);
                }
            }
        });
    }

    /// Keys of all held objects (for tests: the teardown must empty it).
    pub fn endpoint_keys(&self) -> Vec<LabelledKey> {
        let mut v: Vec<LabelledKey> = self
            .eps
            .iter()
            .flatten()
            .map(|e| e.key.clone())
            .collect();
        v.sort();
        v
    }

    /// Number of parents tracked (labels or referenced); zero after a full
    /// teardown.
    pub fn num_parents(&self) -> usize {
        self.parent_ids.len()
    }
}

/// Calls `f` with every member `value` contributes to a set defined by
/// `def`.
fn for_each_contribution(def: &IpSetDef, value: &LabelledValue, mut f: impl FnMut(Member)) {
    if def.np_protocol == NpProtocol::None {
        value.for_each_cidr(|n| f(Member::Net(n)));
        return;
    }
    for p in value.ports() {
        if p.name != def.np_name || !def.np_protocol.matches(&p.protocol) {
            continue;
        }
        let proto = NpProtocol::from_rule_protocol(Some(&p.protocol));
        value.for_each_cidr(|n| {
            f(Member::IpPort {
                addr: n.addr(),
                proto,
                port: p.port,
            })
        });
    }
}

fn alloc<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>) -> u32 {
    if let Some(id) = free.pop() {
        return id;
    }
    slots.push(None);
    (slots.len() - 1) as u32
}

/// Sorted member strings of a set, for tests.
pub fn member_strings(members: &[Member]) -> Vec<String> {
    let mut v: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    v.sort();
    v
}
