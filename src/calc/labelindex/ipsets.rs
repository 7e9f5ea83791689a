//! The shared IP-set membership index (upstream's
//! `SelectorAndNamedPortIndex`).
//!
//! It holds every labelled object in the cluster — workload endpoints, host
//! endpoints and network sets, local or not — and the profiles they inherit
//! labels from, and computes the members of every *active* IP set: a
//! selector, optionally combined with a named port and protocol.
//!
//! Memory: objects are stored in compact form (interned label ids, CIDRs,
//! ports, parent ids); the model values they came from are not kept.  Keys
//! are stored compactly too ([`ObjKey`]: the host, orchestrator and
//! endpoint names interned, one string for the rest), and the one-element
//! lists every endpoint has (its address, its profile, the sets it matches)
//! are kept inline.  The value index's per-value id sets are sized to
//! their membership ([`super::idset::IdSet`]): inline for one endpoint, a
//! compressed bitmap for a value a large share of the cluster carries.
//!
//! Invariants:
//! * Membership is reference counted: several objects may contribute the
//!   same member (two endpoints briefly sharing an IP, overlapping network
//!   sets).  A member is reported added when its count goes 0 -> 1 and
//!   removed when it goes 1 -> 0, never otherwise.
//! * Every contribution added is removed with exactly the same key
//!   (set index, member): contributions are recomputed from the stored
//!   compact object, never from the update that replaces it.
//! * Every interned id taken for an object, a parent or a set restriction
//!   is released when that object, parent or set goes.
//! * There is one index for all uses; do not create a second all-endpoint
//!   index (it is the graph's largest memory cost).
//! * Deleting a set reports no member removals: the set removal itself
//!   supersedes them (the sequencer drops pending deltas of a removed set).

use std::sync::Arc;

use ipnet::IpNet;
use smallvec::SmallVec;

use super::cidrs::Cidrs;
use super::idset::IdSet;
use super::interner::{lookup, IdLabels, Interner};
use super::keyindex::KeyIndex;
use super::member::{host_net, Member, NpProtocol};
use super::restriction::Choice;
use super::slots::Slots;
use crate::hash::{FastMap as HashMap, FastSet};
use crate::model::{EndpointPort, HostEndpoint, Labels, NetworkSet, WorkloadEndpoint};
use crate::selector::{LabelSource, Selector};

/// Identity of a labelled object in the index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelledKey {
    /// A workload endpoint.
    Workload(crate::model::WorkloadEndpointKey),
    /// A host endpoint.
    Host(crate::model::HostEndpointKey),
    /// A network set.
    NetworkSet(crate::model::NetworkSetKey),
}

/// A [`LabelledKey`] as the index stores it: the parts many keys share
/// are interned (one reference each, released with the key).  `T` is the
/// text of the rest: owned when stored, borrowed (`ObjKey<&str>`) for a
/// lookup, which then allocates nothing.  Both forms hash alike (the
/// derived hash of `Box<str>` and of `&str` is that of the `str`), and
/// [`hashbrown::Equivalent`] compares them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ObjKey<T = Box<str>> {
    Workload {
        host: u32,
        orchestrator: u32,
        endpoint: u32,
        workload: T,
    },
    Host {
        host: u32,
        endpoint: T,
    },
    NetworkSet(T),
}

impl ObjKey<&str> {
    /// The stored form (same interned ids, which it then owns).
    fn to_owned_key(&self) -> ObjKey {
        match *self {
            ObjKey::Workload {
                host,
                orchestrator,
                endpoint,
                workload,
            } => ObjKey::Workload {
                host,
                orchestrator,
                endpoint,
                workload: workload.into(),
            },
            ObjKey::Host { host, endpoint } => ObjKey::Host {
                host,
                endpoint: endpoint.into(),
            },
            ObjKey::NetworkSet(name) => ObjKey::NetworkSet(name.into()),
        }
    }
}

impl hashbrown::Equivalent<ObjKey> for ObjKey<&str> {
    fn equivalent(&self, key: &ObjKey) -> bool {
        match (self, key) {
            (
                ObjKey::Workload {
                    host,
                    orchestrator,
                    endpoint,
                    workload,
                },
                ObjKey::Workload {
                    host: h,
                    orchestrator: o,
                    endpoint: e,
                    workload: w,
                },
            ) => host == h && orchestrator == o && endpoint == e && *workload == &**w,
            (
                ObjKey::Host { host, endpoint },
                ObjKey::Host {
                    host: h,
                    endpoint: e,
                },
            ) => host == h && *endpoint == &**e,
            (ObjKey::NetworkSet(n), ObjKey::NetworkSet(m)) => *n == &**m,
            _ => false,
        }
    }
}

/// Small id lists (parents, matching sets): usually one or two entries,
/// kept inline.
type Ids = SmallVec<[u32; 2]>;

/// The value of a labelled object, as it arrives.
#[derive(Clone, Debug)]
pub enum LabelledValue {
    /// A workload endpoint's value.
    Workload(Arc<WorkloadEndpoint>),
    /// A host endpoint's value.
    Host(Arc<HostEndpoint>),
    /// A network set's value.
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
    fn cidrs(&self) -> Cidrs {
        let mut out = Cidrs::default();
        match self {
            LabelledValue::Workload(w) => {
                for n in w.ipv4_nets.iter().chain(w.ipv6_nets.iter()) {
                    out.push(host_net(n.addr()));
                }
            }
            LabelledValue::Host(h) => {
                for a in h
                    .expected_ipv4_addrs
                    .iter()
                    .chain(h.expected_ipv6_addrs.iter())
                {
                    out.push(host_net(*a));
                }
            }
            LabelledValue::NetworkSet(n) => {
                for net in &n.nets {
                    let net = net.trunc();
                    if net.prefix_len() == 0 {
                        let halves: [&str; 2] = match net {
                            IpNet::V4(_) => ["0.0.0.0/1", "128.0.0.0/1"],
                            IpNet::V6(_) => ["::/1", "8000::/1"],
                        };
                        out.extend(halves.iter().filter_map(|s| s.parse::<IpNet>().ok()));
                    } else {
                        out.push(net);
                    }
                }
            }
        }
        out
    }
}

/// Receives membership changes.
pub trait MemberSink {
    /// `member` joined IP set `set_id`.
    fn member_added(&mut self, set_id: &str, member: Member);
    /// `member` left IP set `set_id`.
    fn member_removed(&mut self, set_id: &str, member: Member);

    /// Whether the members a set gets when it is first filled are wanted
    /// one by one.  A sink that reads a new set's members whole (the
    /// sequencer sends a new set in full at flush) answers false and is
    /// spared one call per member; later changes are always reported.
    fn wants_initial_members(&self, _set_id: &str) -> bool {
        true
    }
}

/// Definition of an active IP set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSetDef {
    /// Selector the set's members must match.
    pub selector: Selector,
    /// `None` for a selector-only set.
    pub np_protocol: NpProtocol,
    /// Empty for a selector-only set.
    pub np_name: String,
}

/// A selector restriction with interned ids.
#[derive(Clone, Debug)]
enum IdChoice {
    Values(u32, Vec<u32>),
    Present(u32),
    Unoptimized,
}

struct SetData {
    uid: Arc<str>,
    def: IpSetDef,
    choice: IdChoice,
    members: HashMap<Member, u32>,
}

/// An object in compact form.
#[derive(PartialEq)]
struct EpData {
    labels: IdLabels,
    cidrs: Cidrs,
    /// Named ports (`None` for none, as for nearly every object: boxed
    /// twice so that case takes one word).
    ports: Option<Box<Box<[EndpointPort]>>>,
    parents: Ids,
    /// Indices of the active sets this object matches (sorted).
    matching: Ids,
}

impl EpData {
    fn same_contribution(&self, other: &EpData) -> bool {
        self.labels == other.labels
            && self.cidrs == other.cidrs
            && self.ports == other.ports
            && self.parents == other.parents
    }
}

struct ParentData {
    /// Interned name (the parent holds one reference).
    name: u32,
    labels: Option<IdLabels>,
    /// Objects naming this parent (`None`: none; an [`IdSet`] is never
    /// empty).  Most profiles have one or a few, held inline.
    endpoints: Option<IdSet>,
}

impl ParentData {
    fn add_endpoint(&mut self, id: u32) {
        match &mut self.endpoints {
            Some(s) => s.insert(id),
            None => self.endpoints = Some(IdSet::One(id)),
        }
    }

    fn remove_endpoint(&mut self, id: u32) {
        if let Some(s) = &mut self.endpoints {
            if s.remove(id) {
                self.endpoints = None;
            }
        }
    }

    fn for_each_endpoint(&self, mut f: impl FnMut(u32)) {
        if let Some(s) = &self.endpoints {
            s.for_each(&mut f);
        }
    }
}

/// Objects indexed by their own interned label values: one map keyed by
/// (key, value), so adding an object costs one lookup per label, plus the
/// values present under each key (for presence restrictions), which
/// change only when a (key, value) pair appears or goes.
///
/// Invariant: `values[k]` lists exactly the `v` with `(k, v)` in `by_kv`
/// (no key maps to an empty list), and no set in `by_kv` is empty.
#[derive(Default)]
struct IdValueIndex {
    by_kv: HashMap<(u32, u32), IdSet>,
    values: HashMap<u32, FastSet<u32>>,
}

impl IdValueIndex {
    fn add(&mut self, id: u32, labels: &[(u32, u32)]) {
        for (k, v) in labels {
            match self.by_kv.entry((*k, *v)) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().insert(id),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(IdSet::One(id));
                    self.values.entry(*k).or_default().insert(*v);
                }
            }
        }
    }

    fn remove(&mut self, id: u32, labels: &[(u32, u32)]) {
        for (k, v) in labels {
            let emptied = self
                .by_kv
                .get_mut(&(*k, *v))
                .is_some_and(|set| set.remove(id));
            if !emptied {
                continue;
            }
            self.by_kv.remove(&(*k, *v));
            if let Some(vals) = self.values.get_mut(k) {
                vals.remove(v);
                if vals.is_empty() {
                    self.values.remove(k);
                }
            }
        }
    }

    /// Calls `f` for each object satisfying `choice`; false if the choice
    /// cannot be answered from the index (unoptimised selector).
    fn for_each_matching(&self, choice: &IdChoice, mut f: impl FnMut(u32)) -> bool {
        match choice {
            IdChoice::Values(k, vals) => {
                for v in vals {
                    if let Some(set) = self.by_kv.get(&(*k, *v)) {
                        set.for_each(&mut f);
                    }
                }
                true
            }
            IdChoice::Present(k) => {
                for v in self.values.get(k).into_iter().flatten() {
                    if let Some(set) = self.by_kv.get(&(*k, *v)) {
                        set.for_each(&mut f);
                    }
                }
                true
            }
            IdChoice::Unoptimized => false,
        }
    }
}

/// Active sets indexed by their restriction, for candidate lookup from an
/// object's labels.
#[derive(Default)]
struct SetRestrictions {
    by_value: HashMap<(u32, u32), Vec<u32>>,
    by_present: HashMap<u32, Vec<u32>>,
    unoptimized: Vec<u32>,
}

fn vec_remove(v: &mut Vec<u32>, x: u32) {
    if let Some(pos) = v.iter().position(|e| *e == x) {
        v.swap_remove(pos);
    }
}

impl SetRestrictions {
    fn add(&mut self, set: u32, choice: &IdChoice) {
        match choice {
            IdChoice::Values(k, vals) => {
                for v in vals {
                    self.by_value.entry((*k, *v)).or_default().push(set);
                }
            }
            IdChoice::Present(k) => self.by_present.entry(*k).or_default().push(set),
            IdChoice::Unoptimized => self.unoptimized.push(set),
        }
    }

    fn remove(&mut self, set: u32, choice: &IdChoice) {
        match choice {
            IdChoice::Values(k, vals) => {
                for v in vals {
                    if let Some(list) = self.by_value.get_mut(&(*k, *v)) {
                        vec_remove(list, set);
                        if list.is_empty() {
                            self.by_value.remove(&(*k, *v));
                        }
                    }
                }
            }
            IdChoice::Present(k) => {
                if let Some(list) = self.by_present.get_mut(k) {
                    vec_remove(list, set);
                    if list.is_empty() {
                        self.by_present.remove(k);
                    }
                }
            }
            IdChoice::Unoptimized => vec_remove(&mut self.unoptimized, set),
        }
    }
}

/// Label lookup over interned labels plus parents' labels.
struct IdView<'a> {
    interner: &'a Interner,
    own: &'a [(u32, u32)],
    parents: &'a [&'a [(u32, u32)]],
}

impl LabelSource for IdView<'_> {
    fn get_label(&self, key: &str) -> Option<&str> {
        let k = self.interner.get(key)?;
        if let Some(v) = lookup(self.own, k) {
            return Some(self.interner.resolve(v));
        }
        self.parents
            .iter()
            .find_map(|p| lookup(p, k))
            .map(|v| self.interner.resolve(v))
    }
}

/// The shared index; see the module docs.
#[derive(Default)]
pub struct IpSetIndex {
    interner: Interner,

    /// Looked up by the borrowed key form (hashbrown's `Equivalent`).
    ep_ids: KeyIndex<ObjKey>,
    /// By id, in chunks that never move (`slots.rs`).
    eps: Slots<EpData>,
    free_eps: Vec<u32>,
    ep_values: IdValueIndex,

    /// Interned parent name -> parent id.
    parent_ids: HashMap<u32, u32>,
    parents: Vec<Option<ParentData>>,
    free_parents: Vec<u32>,
    parent_values: IdValueIndex,

    set_ids: HashMap<Arc<str>, u32>,
    sets: Vec<Option<SetData>>,
    free_sets: Vec<u32>,
    set_restrictions: SetRestrictions,
}

/// Parents' label lists, in priority order (usually one: kept inline).
type ParentLabelRefs<'a> = SmallVec<[&'a [(u32, u32)]; 2]>;

fn parent_labels<'a>(parents: &'a [Option<ParentData>], ids: &[u32]) -> ParentLabelRefs<'a> {
    ids.iter()
        .filter_map(|p| parents.get(*p as usize).and_then(|p| p.as_ref()))
        .filter_map(|p| p.labels.as_deref())
        .collect()
}

impl IpSetIndex {
    /// An empty index.
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

    /// Number of parents tracked (labels or referenced); zero after a full
    /// teardown.
    pub fn num_parents(&self) -> usize {
        self.parent_ids.len()
    }

    /// Number of interned strings; zero after a full teardown.
    pub fn num_interned(&self) -> usize {
        self.interner.len()
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

    /// Current members of an active set, unordered (empty if unknown).
    pub fn current_members(&self, uid: &str) -> Vec<Member> {
        self.set_ids
            .get(uid)
            .and_then(|idx| self.sets.get(*idx as usize))
            .and_then(|s| s.as_ref())
            .map(|s| s.members.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Keys of all held objects (for tests: a teardown must empty it).
    pub fn endpoint_keys(&self) -> Vec<LabelledKey> {
        let mut v: Vec<LabelledKey> = self.ep_ids.keys().map(|k| self.expand_key(k)).collect();
        v.sort();
        v
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
        // The key's shared parts are interned first (one reference each),
        // so the id is found or made with one hash and one probe; a key
        // already held keeps its own references.
        let probe = self.intern_key(&key);
        let (eps, free_eps) = (&mut self.eps, &mut self.free_eps);
        let (id, new) = self.ep_ids.get_or_insert_with(&probe, || {
            let id = free_eps.pop().unwrap_or_else(|| eps.push_empty());
            (probe.to_owned_key(), id)
        });
        if !new {
            self.release_key(&probe);
        }
        let parents: Ids = value
            .profile_ids()
            .iter()
            .map(|name| self.intern_parent(name))
            .collect();
        let labels = self.interner.intern_labels(value.labels());
        let new = EpData {
            labels,
            cidrs: value.cidrs(),
            ports: match value.ports() {
                [] => None,
                ports => Some(Box::new(ports.into())),
            },
            parents,
            matching: Ids::new(),
        };
        let old = self.eps[id as usize].take();
        if let Some(o) = &old {
            if o.same_contribution(&new) {
                // Undo the references taken for the new copy.
                self.interner.release_labels(&new.labels);
                for p in new.parents.iter() {
                    self.release_parent_ref(*p, None);
                }
                self.eps[id as usize] = old;
                return;
            }
        }
        let mut new = new;

        for p in new.parents.iter() {
            if let Some(Some(pd)) = self.parents.get_mut(*p as usize) {
                pd.add_endpoint(id);
            }
        }
        if let Some(o) = &old {
            self.ep_values.remove(id, &o.labels);
        }
        self.ep_values.add(id, &new.labels);

        new.matching = self.compute_matching(&new.labels, &new.parents);
        // Add new contributions first so shared members never flap.
        for s in &new.matching {
            self.add_contributions(*s, &new, sink);
        }
        if let Some(o) = old {
            for s in &o.matching {
                self.remove_contributions(*s, &o, sink);
            }
            self.interner.release_labels(&o.labels);
            for p in o.parents.iter() {
                let keep = new.parents.contains(p);
                self.release_parent_ref(*p, if keep { None } else { Some(id) });
            }
        }
        self.eps[id as usize] = Some(new);
    }

    /// Removes a labelled object (no-op if unknown).
    pub fn delete_endpoint(&mut self, key: &LabelledKey, sink: &mut dyn MemberSink) {
        let Some((k, id)) = self.find_key(key).and_then(|k| self.ep_ids.remove(&k)) else {
            return;
        };
        self.release_key(&k);
        let Some(old) = self.eps[id as usize].take() else {
            return;
        };
        for s in &old.matching {
            self.remove_contributions(*s, &old, sink);
        }
        self.ep_values.remove(id, &old.labels);
        self.interner.release_labels(&old.labels);
        for p in old.parents.iter() {
            self.release_parent_ref(*p, Some(id));
        }
        self.free_eps.push(id);
    }

    /// The stored form of `key`, borrowed, if every interned part of it
    /// is known (no references taken); `None` means the key is not held.
    fn find_key<'a>(&self, key: &'a LabelledKey) -> Option<ObjKey<&'a str>> {
        let i = &self.interner;
        Some(match key {
            LabelledKey::Workload(k) => ObjKey::Workload {
                host: i.get(&k.hostname)?,
                orchestrator: i.get(&k.orchestrator_id)?,
                endpoint: i.get(&k.endpoint_id)?,
                workload: k.workload_id.as_str(),
            },
            LabelledKey::Host(k) => ObjKey::Host {
                host: i.get(&k.hostname)?,
                endpoint: k.endpoint_id.as_str(),
            },
            LabelledKey::NetworkSet(k) => ObjKey::NetworkSet(k.name.as_str()),
        })
    }

    /// `key` with its shared parts interned, taking a reference on each
    /// (borrowing the rest: [`ObjKey::to_owned_key`] makes the stored form).
    fn intern_key<'a>(&mut self, key: &'a LabelledKey) -> ObjKey<&'a str> {
        let i = &mut self.interner;
        match key {
            LabelledKey::Workload(k) => ObjKey::Workload {
                host: i.intern(&k.hostname),
                orchestrator: i.intern(&k.orchestrator_id),
                endpoint: i.intern(&k.endpoint_id),
                workload: k.workload_id.as_str(),
            },
            LabelledKey::Host(k) => ObjKey::Host {
                host: i.intern(&k.hostname),
                endpoint: k.endpoint_id.as_str(),
            },
            LabelledKey::NetworkSet(k) => ObjKey::NetworkSet(k.name.as_str()),
        }
    }

    /// Releases what [`IpSetIndex::intern_key`] took.
    fn release_key<T>(&mut self, key: &ObjKey<T>) {
        match key {
            ObjKey::Workload {
                host,
                orchestrator,
                endpoint,
                ..
            } => {
                self.interner.release(*host);
                self.interner.release(*orchestrator);
                self.interner.release(*endpoint);
            }
            ObjKey::Host { host, .. } => self.interner.release(*host),
            ObjKey::NetworkSet(_) => {}
        }
    }

    /// The model key of a stored key.
    fn expand_key(&self, key: &ObjKey) -> LabelledKey {
        let s = |id: u32| self.interner.resolve(id).to_string();
        match key {
            ObjKey::Workload {
                host,
                orchestrator,
                endpoint,
                workload,
            } => LabelledKey::Workload(crate::model::WorkloadEndpointKey {
                hostname: s(*host),
                orchestrator_id: s(*orchestrator),
                workload_id: workload.to_string(),
                endpoint_id: s(*endpoint),
            }),
            ObjKey::Host { host, endpoint } => LabelledKey::Host(crate::model::HostEndpointKey {
                hostname: s(*host),
                endpoint_id: endpoint.to_string(),
            }),
            ObjKey::NetworkSet(name) => LabelledKey::NetworkSet(crate::model::NetworkSetKey {
                name: name.to_string(),
            }),
        }
    }

    // ------------------------------------------------------------------
    // Parents (profiles)
    // ------------------------------------------------------------------

    /// Sets (`Some`) or clears (`None`) the labels a profile applies.
    pub fn update_parent_labels(
        &mut self,
        name: &str,
        labels: Option<&Labels>,
        sink: &mut dyn MemberSink,
    ) {
        let pid = match self.find_parent(name) {
            Some(p) => p,
            None if labels.is_none() => return,
            None => self.create_parent(name),
        };
        let new_ids = labels.map(|l| self.interner.intern_labels(l));
        let Some(Some(pd)) = self.parents.get_mut(pid as usize) else {
            return;
        };
        if pd.labels == new_ids {
            if let Some(n) = new_ids {
                self.interner.release_labels(&n);
            }
            return;
        }
        let old = std::mem::replace(&mut pd.labels, new_ids.clone());
        let mut eps: Vec<u32> = Vec::new();
        pd.for_each_endpoint(|e| eps.push(e));
        if let Some(old) = &old {
            self.parent_values.remove(pid, old);
            self.interner.release_labels(old);
        }
        if let Some(new) = &new_ids {
            self.parent_values.add(pid, new);
        }
        for ep in eps {
            self.rematch_endpoint(ep, sink);
        }
        self.maybe_free_parent(pid);
    }

    /// The labels profile `name` applies, in no particular order; `None`
    /// if the profile is not known.  Every present profile has labels here
    /// (perhaps none), whether or not any object names it.
    pub fn parent_labels(&self, name: &str) -> Option<impl Iterator<Item = (&str, &str)> + '_> {
        let pid = self.find_parent(name)?;
        let labels = self.parents.get(pid as usize)?.as_ref()?.labels.as_ref()?;
        Some(
            labels
                .iter()
                .map(|(k, v)| (self.interner.resolve(*k), self.interner.resolve(*v))),
        )
    }

    /// Returns the parent id for `name`, taking one endpoint reference (the
    /// caller adds itself to `endpoints`).
    fn intern_parent(&mut self, name: &str) -> u32 {
        match self.find_parent(name) {
            Some(p) => p,
            None => self.create_parent(name),
        }
    }

    /// Adds parent `name`, which the caller has found absent.
    fn create_parent(&mut self, name: &str) -> u32 {
        let id = alloc(&mut self.parents, &mut self.free_parents);
        let name = self.interner.intern(name);
        self.parents[id as usize] = Some(ParentData {
            name,
            labels: None,
            endpoints: None,
        });
        self.parent_ids.insert(name, id);
        id
    }

    /// The id of the parent called `name`, if held.
    fn find_parent(&self, name: &str) -> Option<u32> {
        let n = self.interner.get(name)?;
        self.parent_ids.get(&n).copied()
    }

    /// Drops endpoint `ep` from parent `pid` (if given) and frees the
    /// parent when nothing refers to it.
    fn release_parent_ref(&mut self, pid: u32, ep: Option<u32>) {
        if let (Some(ep), Some(Some(pd))) = (ep, self.parents.get_mut(pid as usize)) {
            pd.remove_endpoint(ep);
        }
        self.maybe_free_parent(pid);
    }

    fn maybe_free_parent(&mut self, pid: u32) {
        let free = match self.parents.get(pid as usize) {
            Some(Some(pd)) => pd.labels.is_none() && pd.endpoints.is_none(),
            _ => false,
        };
        if free {
            if let Some(pd) = self.parents[pid as usize].take() {
                self.parent_ids.remove(&pd.name);
                self.interner.release(pd.name);
                self.free_parents.push(pid);
            }
        }
    }

    /// Re-evaluates one object's matches after its inherited labels
    /// changed; its own contributions are unchanged.
    fn rematch_endpoint(&mut self, ep: u32, sink: &mut dyn MemberSink) {
        let Some(mut data) = self.eps.get_mut(ep as usize).and_then(|e| e.take()) else {
            return;
        };
        let new_matching = self.compute_matching(&data.labels, &data.parents);
        for s in &new_matching {
            if data.matching.binary_search(s).is_err() {
                self.add_contributions(*s, &data, sink);
            }
        }
        for s in &data.matching {
            if new_matching.binary_search(s).is_err() {
                self.remove_contributions(*s, &data, sink);
            }
        }
        data.matching = new_matching;
        self.eps[ep as usize] = Some(data);
    }

    fn compute_matching(&self, own: &[(u32, u32)], parent_ids: &[u32]) -> Ids {
        if self.set_ids.is_empty() {
            return Ids::new();
        }
        let parents = parent_labels(&self.parents, parent_ids);
        let view = IdView {
            interner: &self.interner,
            own,
            parents: &parents,
        };
        let mut out = Ids::new();
        let mut consider = |s: u32| {
            if let Some(Some(set)) = self.sets.get(s as usize) {
                if presence_exact(&set.def.selector, &set.choice)
                    || set.def.selector.evaluate(&view)
                {
                    out.push(s);
                }
            }
        };
        for s in &self.set_restrictions.unoptimized {
            consider(*s);
        }
        let r = &self.set_restrictions;
        if !r.by_value.is_empty() || !r.by_present.is_empty() {
            let mut visit = |k: u32, v: u32| {
                if let Some(list) = r.by_value.get(&(k, v)) {
                    for s in list {
                        consider(*s);
                    }
                }
                if let Some(list) = r.by_present.get(&k) {
                    for s in list {
                        consider(*s);
                    }
                }
            };
            for (k, v) in own {
                visit(*k, *v);
            }
            for (i, p) in parents.iter().enumerate() {
                for (k, v) in p.iter() {
                    let shadowed = lookup(own, *k).is_some()
                        || parents[..i].iter().any(|q| lookup(q, *k).is_some());
                    if !shadowed {
                        visit(*k, *v);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    // ------------------------------------------------------------------
    // IP sets
    // ------------------------------------------------------------------

    fn intern_choice(&mut self, choice: Choice) -> IdChoice {
        match choice {
            Choice::Values(k, vals) => IdChoice::Values(
                self.interner.intern(&k),
                vals.iter().map(|v| self.interner.intern(v)).collect(),
            ),
            Choice::Present(k) => IdChoice::Present(self.interner.intern(&k)),
            Choice::Unoptimized => IdChoice::Unoptimized,
        }
    }

    fn release_choice(&mut self, choice: &IdChoice) {
        match choice {
            IdChoice::Values(k, vals) => {
                self.interner.release(*k);
                for v in vals {
                    self.interner.release(*v);
                }
            }
            IdChoice::Present(k) => self.interner.release(*k),
            IdChoice::Unoptimized => {}
        }
    }

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
        let choice = self.intern_choice(Choice::for_selector(&def.selector));

        let candidates = self.candidate_endpoints(&choice);
        let exact = presence_exact(&def.selector, &choice);
        let mut matched = Vec::new();
        for ep in candidates {
            let Some(Some(data)) = self.eps.get(ep as usize) else {
                continue;
            };
            if exact {
                matched.push(ep);
                continue;
            }
            let parents = parent_labels(&self.parents, &data.parents);
            let view = IdView {
                interner: &self.interner,
                own: &data.labels,
                parents: &parents,
            };
            if def.selector.evaluate(&view) {
                matched.push(ep);
            }
        }
        self.set_restrictions.add(idx, &choice);
        self.sets[idx as usize] = Some(SetData {
            uid: uid.clone(),
            def,
            choice,
            // Usually one member per matched object.
            members: HashMap::with_capacity_and_hasher(matched.len(), Default::default()),
        });
        self.set_ids.insert(uid.clone(), idx);
        let mut quiet = NoSink;
        let sink: &mut dyn MemberSink = if sink.wants_initial_members(&uid) {
            sink
        } else {
            &mut quiet
        };
        for ep in matched {
            let Some(data) = self.eps.get_mut(ep as usize).and_then(|e| e.take()) else {
                continue;
            };
            self.add_contributions(idx, &data, sink);
            let mut data = data;
            if let Err(pos) = data.matching.binary_search(&idx) {
                data.matching.insert(pos, idx);
            }
            self.eps[ep as usize] = Some(data);
        }
    }

    /// Deactivates IP set `uid` (no-op if unknown).  No member removals are
    /// reported (see the module docs).
    pub fn delete_ipset(&mut self, uid: &str) {
        let Some(idx) = self.set_ids.remove(uid) else {
            return;
        };
        let Some(set) = self.sets[idx as usize].take() else {
            return;
        };
        self.set_restrictions.remove(idx, &set.choice);
        for ep in self.candidate_endpoints(&set.choice) {
            if let Some(Some(data)) = self.eps.get_mut(ep as usize) {
                if let Ok(pos) = data.matching.binary_search(&idx) {
                    data.matching.remove(pos);
                }
            }
        }
        self.release_choice(&set.choice);
        self.free_sets.push(idx);
    }

    /// Objects that could match a selector with restriction `choice`:
    /// by own labels, or through a parent's labels; everything when the
    /// selector is unoptimisable.
    fn candidate_endpoints(&self, choice: &IdChoice) -> Vec<u32> {
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
                pd.for_each_endpoint(|e| out.push(e));
            }
        });
        out.sort_unstable();
        out.dedup();
        out
    }

    fn add_contributions(&mut self, set: u32, ep: &EpData, sink: &mut dyn MemberSink) {
        let Some(Some(data)) = self.sets.get_mut(set as usize) else {
            return;
        };
        for_each_contribution(&data.def, ep, |m| {
            let c = data.members.entry(m).or_insert(0);
            *c += 1;
            if *c == 1 {
                sink.member_added(&data.uid, m);
            }
        });
    }

    fn remove_contributions(&mut self, set: u32, ep: &EpData, sink: &mut dyn MemberSink) {
        let Some(Some(data)) = self.sets.get_mut(set as usize) else {
            return;
        };
        for_each_contribution(&data.def, ep, |m| {
            if let Some(c) = data.members.get_mut(&m) {
                *c -= 1;
                if *c == 0 {
                    data.members.remove(&m);
                    sink.member_removed(&data.uid, m);
                }
            }
        });
    }
}

/// Whether a set's candidates are exactly its matches: its selector is
/// `has(k)` and it is indexed under the presence of `k` (its only
/// restriction).  An object is a candidate for a presence restriction
/// exactly when it carries the key, own or inherited, which is when
/// `has(k)` matches; evaluating it again would look the key up again.
fn presence_exact(selector: &Selector, choice: &IdChoice) -> bool {
    selector.presence_only().is_some() && matches!(choice, IdChoice::Present(_))
}

/// A sink that wants nothing (a new set's first fill, for a sink that
/// reads it whole).
struct NoSink;

impl MemberSink for NoSink {
    fn member_added(&mut self, _: &str, _: Member) {}
    fn member_removed(&mut self, _: &str, _: Member) {}
}

/// Calls `f` with every member `ep` contributes to a set defined by `def`.
fn for_each_contribution(def: &IpSetDef, ep: &EpData, mut f: impl FnMut(Member)) {
    if def.np_protocol == NpProtocol::None {
        for n in ep.cidrs.iter() {
            f(Member::Net(n));
        }
        return;
    }
    for p in ep.ports.iter().flat_map(|p| p.iter()) {
        if p.name != def.np_name || !def.np_protocol.matches(&p.protocol) {
            continue;
        }
        let proto = NpProtocol::from_rule_protocol(Some(&p.protocol));
        for n in ep.cidrs.iter() {
            f(Member::IpPort {
                addr: n.addr(),
                proto,
                port: p.port,
            });
        }
    }
}

/// The active-rules calculator's index reads profile labels from here
/// (every profile's labels are held once, in this index).
impl super::ParentLabelSource for IpSetIndex {
    fn for_each_parent_label(&self, name: &str, f: &mut dyn FnMut(&str, &str)) -> bool {
        match self.parent_labels(name) {
            Some(labels) => {
                for (k, v) in labels {
                    f(k, v);
                }
                true
            }
            None => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NetworkSetKey, WorkloadEndpointKey};

    #[derive(Default)]
    struct Rec(Vec<(bool, String, String)>);
    impl MemberSink for Rec {
        fn member_added(&mut self, s: &str, m: Member) {
            self.0.push((true, s.to_string(), m.to_string()));
        }
        fn member_removed(&mut self, s: &str, m: Member) {
            self.0.push((false, s.to_string(), m.to_string()));
        }
    }

    fn wep(
        name: &str,
        ip: &str,
        labels: &[(&str, &str)],
        profiles: &[&str],
    ) -> (LabelledKey, LabelledValue) {
        let key = LabelledKey::Workload(WorkloadEndpointKey {
            hostname: "h".into(),
            orchestrator_id: "k8s".into(),
            workload_id: name.into(),
            endpoint_id: "eth0".into(),
        });
        let v = WorkloadEndpoint {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ipv4_nets: vec![ip.parse().expect("ip")],
            profile_ids: profiles.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        };
        (key, LabelledValue::Workload(Arc::new(v)))
    }

    fn def(sel: &str) -> IpSetDef {
        IpSetDef {
            selector: crate::selector::parse(sel).expect("selector"),
            np_protocol: NpProtocol::None,
            np_name: String::new(),
        }
    }

    #[test]
    fn shared_ip_is_refcounted_not_flapped() {
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        idx.update_ipset("s1", def("app == 'a'"), &mut rec);
        let (k1, v1) = wep("w1", "10.0.0.1/32", &[("app", "a")], &[]);
        let (k2, v2) = wep("w2", "10.0.0.1/32", &[("app", "a")], &[]);
        idx.update_endpoint(k1.clone(), v1, &mut rec);
        idx.update_endpoint(k2.clone(), v2, &mut rec);
        assert_eq!(rec.0, vec![(true, "s1".into(), "10.0.0.1/32".into())]);
        idx.delete_endpoint(&k1, &mut rec);
        assert_eq!(rec.0.len(), 1, "still contributed by w2");
        idx.delete_endpoint(&k2, &mut rec);
        assert_eq!(
            rec.0.last(),
            Some(&(false, "s1".into(), "10.0.0.1/32".into()))
        );
    }

    /// A sink that reads new sets whole is not told a new set's first
    /// members, but is told every later change; the set's membership (and
    /// its counts) are the same either way.
    #[test]
    fn first_fill_skips_a_sink_that_reads_sets_whole() {
        struct Whole(Rec);
        impl MemberSink for Whole {
            fn member_added(&mut self, s: &str, m: Member) {
                self.0.member_added(s, m);
            }
            fn member_removed(&mut self, s: &str, m: Member) {
                self.0.member_removed(s, m);
            }
            fn wants_initial_members(&self, _: &str) -> bool {
                false
            }
        }
        let mut idx = IpSetIndex::new();
        let mut sink = Whole(Rec::default());
        let (k1, v1) = wep("w1", "10.0.0.1/32", &[("app", "a")], &[]);
        idx.update_endpoint(k1.clone(), v1, &mut sink);
        idx.update_ipset("s1", def("app == 'a'"), &mut sink);
        assert!(sink.0 .0.is_empty(), "first fill reported: {:?}", sink.0 .0);
        assert_eq!(idx.members("s1").map(|m| m.len()), Some(1));
        let (k2, v2) = wep("w2", "10.0.0.2/32", &[("app", "a")], &[]);
        idx.update_endpoint(k2, v2, &mut sink);
        idx.delete_endpoint(&k1, &mut sink);
        assert_eq!(
            sink.0 .0,
            vec![
                (true, "s1".into(), "10.0.0.2/32".into()),
                (false, "s1".into(), "10.0.0.1/32".into()),
            ]
        );
    }
    /// A bare `has(k)` set (filled without evaluating its selector, see
    /// `presence_exact`) holds exactly the objects carrying `k`, own or
    /// inherited, both when the set comes first and when the objects do.
    #[test]
    fn presence_sets_hold_own_and_inherited_carriers() {
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        let mut team = Labels::new();
        team.insert("team".into(), "x".into());
        idx.update_parent_labels("kns.ns1", Some(&team), &mut rec);
        let (k1, v1) = wep("own", "10.0.0.1/32", &[("team", "y")], &[]);
        let (k2, v2) = wep("inh", "10.0.0.2/32", &[], &["kns.ns1"]);
        let (k3, v3) = wep("none", "10.0.0.3/32", &[("other", "y")], &[]);
        idx.update_endpoint(k1, v1, &mut rec);
        idx.update_endpoint(k2, v2, &mut rec);
        idx.update_endpoint(k3, v3, &mut rec);
        idx.update_ipset("s", def("has(team)"), &mut rec);
        let strings = |idx: &IpSetIndex| member_strings(&idx.members("s").unwrap_or_default());
        assert_eq!(strings(&idx), ["10.0.0.1/32", "10.0.0.2/32"]);
        let (k4, v4) = wep("late", "10.0.0.4/32", &[], &["kns.ns1"]);
        idx.update_endpoint(k4, v4, &mut rec);
        assert_eq!(strings(&idx), ["10.0.0.1/32", "10.0.0.2/32", "10.0.0.4/32"]);
        idx.update_parent_labels("kns.ns1", None, &mut rec);
        assert_eq!(strings(&idx), ["10.0.0.1/32"]);
    }

    #[test]
    fn inherited_labels_match_and_teardown_releases_everything() {
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        let (k, v) = wep("w1", "10.0.0.2/32", &[], &["kns.ns1"]);
        idx.update_endpoint(k.clone(), v, &mut rec);
        idx.update_ipset("s", def("team == 'x'"), &mut rec);
        assert!(rec.0.is_empty());
        let mut l = Labels::new();
        l.insert("team".into(), "x".into());
        idx.update_parent_labels("kns.ns1", Some(&l), &mut rec);
        assert_eq!(rec.0, vec![(true, "s".into(), "10.0.0.2/32".into())]);
        // Asymmetric teardown: the profile goes while the endpoint stays.
        idx.update_parent_labels("kns.ns1", None, &mut rec);
        assert_eq!(
            rec.0.last(),
            Some(&(false, "s".into(), "10.0.0.2/32".into()))
        );
        idx.delete_endpoint(&k, &mut rec);
        idx.delete_ipset("s");
        assert_eq!(idx.num_endpoints(), 0);
        assert_eq!(idx.num_parents(), 0);
        assert_eq!(idx.num_interned(), 0, "every interned id released");
    }

    #[test]
    fn a_profile_with_many_endpoints_rematches_them_all_and_is_freed_last() {
        // 40 endpoints take the parent's endpoint set through its inline,
        // short-list and bitmap forms; a label that is also a parent name
        // shares the interner with it.
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        idx.update_ipset("s", def("team == 'kns.big'"), &mut rec);
        let keys: Vec<LabelledKey> = (0..40)
            .map(|i| {
                let (k, v) = wep(
                    &format!("w{i}"),
                    &format!("10.1.0.{i}/32"),
                    &[],
                    &["kns.big"],
                );
                idx.update_endpoint(k.clone(), v, &mut rec);
                k
            })
            .collect();
        assert!(rec.0.is_empty());
        let mut l = Labels::new();
        l.insert("team".into(), "kns.big".into());
        idx.update_parent_labels("kns.big", Some(&l), &mut rec);
        assert_eq!(rec.0.iter().filter(|(added, ..)| *added).count(), 40);
        // Endpoints leave one by one; the parent stays while it has labels.
        for k in &keys[..39] {
            idx.delete_endpoint(k, &mut rec);
        }
        assert_eq!(idx.num_parents(), 1);
        idx.update_parent_labels("kns.big", None, &mut rec);
        assert_eq!(rec.0.iter().filter(|(added, ..)| !*added).count(), 40);
        assert_eq!(idx.num_parents(), 1, "still named by the last endpoint");
        idx.delete_endpoint(&keys[39], &mut rec);
        idx.delete_ipset("s");
        assert_eq!(idx.num_parents(), 0);
        assert_eq!(idx.num_interned(), 0, "every interned id released");
    }

    #[test]
    fn compact_keys_round_trip_and_release() {
        use crate::model::HostEndpointKey;
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        idx.update_ipset("s", def("all()"), &mut rec);
        let (w, wv) = wep("ns/pod", "10.0.0.7/32", &[("a", "b")], &["kns.ns"]);
        let h = LabelledKey::Host(HostEndpointKey {
            hostname: "h".into(),
            endpoint_id: "eth1".into(),
        });
        let hv = LabelledValue::Host(Arc::new(HostEndpoint {
            expected_ipv4_addrs: vec!["10.0.0.8".parse().expect("ip")],
            ..Default::default()
        }));
        let n = LabelledKey::NetworkSet(NetworkSetKey { name: "n".into() });
        let nv = LabelledValue::NetworkSet(Arc::new(NetworkSet {
            nets: vec!["10.9.0.0/16".parse().expect("net")],
            ..Default::default()
        }));
        idx.update_endpoint(w.clone(), wv.clone(), &mut rec);
        idx.update_endpoint(h.clone(), hv, &mut rec);
        idx.update_endpoint(n.clone(), nv, &mut rec);
        // Same key again: an update of the held object, not a new one.
        idx.update_endpoint(w.clone(), wv, &mut rec);
        let mut want = vec![w.clone(), h.clone(), n.clone()];
        want.sort();
        assert_eq!(idx.endpoint_keys(), want);
        assert_eq!(idx.num_endpoints(), 3);
        // A key whose host was never seen is simply not held.
        let mut other = w.clone();
        if let LabelledKey::Workload(k) = &mut other {
            k.hostname = "never-seen".into();
        }
        idx.delete_endpoint(&other, &mut rec);
        assert_eq!(idx.num_endpoints(), 3);
        for k in [&w, &h, &n] {
            idx.delete_endpoint(k, &mut rec);
        }
        idx.delete_ipset("s");
        assert_eq!(idx.num_endpoints(), 0);
        assert_eq!(idx.num_interned(), 0, "key parts released with the keys");
        assert_eq!(
            rec.0.iter().filter(|(added, _, _)| !added).count(),
            3,
            "each member removed once"
        );
    }

    #[test]
    fn network_set_slash_zero_is_split() {
        let mut idx = IpSetIndex::new();
        let mut rec = Rec::default();
        idx.update_ipset("s", def("all()"), &mut rec);
        let ns = NetworkSet {
            nets: vec![
                "0.0.0.0/0".parse().expect("net"),
                "10.1.2.3/8".parse().expect("net"),
            ],
            ..Default::default()
        };
        idx.update_endpoint(
            LabelledKey::NetworkSet(NetworkSetKey { name: "n".into() }),
            LabelledValue::NetworkSet(Arc::new(ns)),
            &mut rec,
        );
        let m = member_strings(&idx.members("s").expect("set"));
        assert_eq!(m, vec!["0.0.0.0/1", "10.0.0.0/8", "128.0.0.0/1"]);
    }
}
