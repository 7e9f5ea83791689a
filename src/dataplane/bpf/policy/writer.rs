//! The incremental writer: proto policies, profiles, endpoints and IP sets in, minimal map
//! writes out.
//!
//! # API model
//! The caller (the BPF driver) forwards the calc graph's updates: [`PolicyWriter::apply_policy`]
//! / [`PolicyWriter::remove_policy`], the same for profiles, [`PolicyWriter::set_workload`] (or
//! [`PolicyWriter::set_endpoint`] per policy slot and direction) once the endpoint's slots are
//! known, and the IP-set messages. Each call writes the kernel maps before it returns.
//!
//! # Design
//! * A policy (or profile) has one *handle* per direction: its key in `cali_pol_idx2`.
//!   [`PolicyWriter::apply_policy`] compiles the rules of each direction into IPv4 and IPv6
//!   streams, writes them into a free range of `cali_pol_ops2` (one batched write), swaps the
//!   handle's index entry (one write), then frees the old range. Every endpoint referring to
//!   the handle follows at once; no endpoint list is rewritten. An unchanged policy writes
//!   nothing.
//! * An endpoint list (tiers with their default action, policy handles, profile handles) is
//!   written the same way: new records, one swap of the endpoint's entry in `cali_pol_ep2`.
//!   A handle referenced before its policy is written has no index entry: the interpreter
//!   denies (fail closed) until the policy arrives.
//! * IP sets are written as member adds and deletes only: a full `IPSetUpdate` of a known
//!   set is turned into the delta against the members written before.
//!
//! # Restart
//! The maps are pinned and outlive the daemon. A new writer first [`PolicyWriter::adopt`]s
//! what the previous run left: the record ranges its index and endpoint entries point at
//! and its handle numbers are reserved, so nothing this run writes lands under a packet
//! still walking the old records. Rewriting an endpoint swaps its entry as usual (the old
//! range is freed); a set's members left by the previous run are the baseline of its first
//! update, so members removed while the daemon was down are deleted. After the first full
//! apply, [`PolicyWriter::sweep`] deletes whatever the new run did not rewrite or claim
//! (including the members of sets no longer sent).
//!
//! # Invariants (each with its test)
//! * A policy change writes its records into free space and swaps one index entry; no
//!   endpoint list is rewritten
//!   (`a_policy_change_is_one_record_write_and_one_index_swap_that_every_sharing_endpoint_follows`).
//! * An unchanged policy or endpoint writes nothing (`an_unchanged_policy_or_endpoint_writes_nothing`).
//! * An endpoint change is one list write and one swap; the old list's space is freed
//!   (`an_endpoint_change_is_one_list_write_and_one_swap`).
//! * IP sets change only by member adds and deletes (`a_full_ip_set_update_is_written_as_member_deltas`).
//! * A failed write leaves the old records in force and frees the new range
//!   (`a_failed_write_keeps_the_old_records_and_reports_the_operation`).
//! * A handle lives while an endpoint list refers to it or its policy is written
//!   (`handles_are_released_once_unreferenced_and_unwritten_and_staged_policies_never_written`).
//! * After a restart, nothing is written over records the previous run's entries point at
//!   until they are swapped away (`a_restarted_writer_never_writes_over_the_previous_runs_records`),
//!   and a set's members left by the previous run are the baseline of its deltas
//!   (`a_restarted_writer_deletes_members_removed_while_it_was_down`).
//! * The compiled records decide as the *tables renderer does
//!   (`compiled_records_agree_with_the_reference_semantics`, and in the kernel
//!   `bpf_verdicts_agree_with_the_reference_semantics`).
//!
//! # Thread safety
//! Not shared: one owner calls it from its blocking apply step.

use std::collections::{BTreeMap, BTreeSet};

use felix_bpf::attach::Mechanism;
use felix_bpf::ops::BpfError;
use felix_bpf::policy::{
    assemble_list, assemble_policy_spans, AssembleError, EndpointKey, EndpointList, IpSetKey, Op,
    PolicyIndex, TierIr, EP_END_DENY, EP_END_NO_MATCH, OP_EP_TIER_END, POL_DIR_EGRESS,
    POL_DIR_FORWARD_IN, POL_DIR_FORWARD_OUT, POL_DIR_INGRESS, POL_DIR_PREDNAT_IN,
    POL_DIR_UNTRACKED_IN, POL_DIR_UNTRACKED_OUT, POL_IDX_SIZE, POL_OPS_SIZE,
};
use felix_proto::{
    IpSetDeltaUpdate, IpSetRemove, IpSetUpdate, Policy, PolicyId, Profile, Rule, TierInfo,
    WorkloadEndpoint,
};

use crate::dataplane::rules::{is_staged, policy_id_string};

use super::alloc::{Range, RecordAllocator};
use super::compile::{compile_rules, Compiled, Unrenderable};
use super::members::member_key;
use super::names::{Owner, SharedDropNames};
use super::setid::SetIdAllocator;

/// Where the writer's records go: the policy maps, or a fake in tests.
pub trait PolicyStore {
    /// Writes `records` at `base..`.
    fn write_records(&mut self, base: u32, records: &[Op]) -> Result<(), BpfError>;
    /// Points `handle` at `idx` (atomic swap).
    fn set_policy(&mut self, handle: u32, idx: &PolicyIndex) -> Result<(), BpfError>;
    /// Removes `handle`.
    fn delete_policy(&mut self, handle: u32) -> Result<(), BpfError>;
    /// Points an endpoint at `list` (atomic swap).
    fn set_endpoint(
        &mut self,
        mech: Mechanism,
        key: EndpointKey,
        list: &EndpointList,
    ) -> Result<(), BpfError>;
    /// Removes an endpoint's list.
    fn delete_endpoint(&mut self, mech: Mechanism, key: EndpointKey) -> Result<(), BpfError>;
    /// Adds an IP-set member.
    fn add_member(&mut self, key: &IpSetKey) -> Result<(), BpfError>;
    /// Removes an IP-set member.
    fn delete_member(&mut self, key: &IpSetKey) -> Result<(), BpfError>;
}

/// The kernel's policy maps as a [`PolicyStore`].
#[derive(Debug)]
pub struct BpfPolicyStore {
    /// The maps.
    pub maps: felix_bpf::PolicyMaps,
    /// The seam their writes go through.
    pub ops: felix_bpf::BpfOps,
}

impl PolicyStore for BpfPolicyStore {
    fn write_records(&mut self, base: u32, records: &[Op]) -> Result<(), BpfError> {
        self.maps.write_records(&self.ops, base, records)
    }
    fn set_policy(&mut self, handle: u32, idx: &PolicyIndex) -> Result<(), BpfError> {
        self.maps.set_policy(&self.ops, handle, idx)
    }
    fn delete_policy(&mut self, handle: u32) -> Result<(), BpfError> {
        self.maps.delete_policy(&self.ops, handle)
    }
    fn set_endpoint(
        &mut self,
        mech: Mechanism,
        key: EndpointKey,
        list: &EndpointList,
    ) -> Result<(), BpfError> {
        self.maps.set_endpoint(&self.ops, mech, key, list)
    }
    fn delete_endpoint(&mut self, mech: Mechanism, key: EndpointKey) -> Result<(), BpfError> {
        self.maps.delete_endpoint(&self.ops, mech, key)
    }
    fn add_member(&mut self, key: &IpSetKey) -> Result<(), BpfError> {
        self.maps.add_member(&self.ops, key)
    }
    fn delete_member(&mut self, key: &IpSetKey) -> Result<(), BpfError> {
        self.maps.delete_member(&self.ops, key)
    }
}

impl BpfPolicyStore {
    /// What the pinned maps hold (a previous run's entries), for [`PolicyWriter::adopt`].
    pub fn existing(&self) -> Result<Existing, BpfError> {
        let mut endpoints = Vec::new();
        for mech in [Mechanism::Tc, Mechanism::Tcx] {
            for (k, l) in self.maps.endpoints(&self.ops, mech)? {
                endpoints.push((mech, k, l));
            }
        }
        Ok(Existing {
            policies: self.maps.policies(&self.ops)?,
            endpoints,
            members: self.maps.members(&self.ops)?,
        })
    }
}

/// The entries a previous run left in the maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Existing {
    /// Policy index entries: handle -> streams.
    pub policies: Vec<(u32, PolicyIndex)>,
    /// Endpoint entries.
    pub endpoints: Vec<(Mechanism, EndpointKey, EndpointList)>,
    /// IP-set members.
    pub members: Vec<IpSetKey>,
}

/// A failed writer operation: which one, on what, and why.
#[derive(Debug, thiserror::Error)]
pub enum PolicyWriteError {
    /// A map write failed.
    #[error("{op} {what}: {source}")]
    Bpf {
        /// The writer operation (`apply policy`, `set endpoint`, `ip set delta`, ...).
        op: &'static str,
        /// What it was applied to.
        what: String,
        /// The map operation's error.
        #[source]
        source: BpfError,
    },
    /// `cali_pol_ops2` has no free run long enough.
    #[error("{op} {what}: no room for {need} policy records")]
    NoSpace {
        /// The writer operation.
        op: &'static str,
        /// What it was applied to.
        what: String,
        /// Records needed.
        need: usize,
    },
    /// Every policy handle is in use.
    #[error("{op} {what}: no free policy handle")]
    NoHandle {
        /// The writer operation.
        op: &'static str,
        /// What it was applied to.
        what: String,
    },
    /// A stream could not be assembled.
    #[error("{op} {what}: {source}")]
    Assemble {
        /// The writer operation.
        op: &'static str,
        /// What it was applied to.
        what: String,
        /// Why.
        #[source]
        source: AssembleError,
    },
    /// An IP-set member that is not an address, CIDR or `addr,proto:port`.
    #[error("{op} IP set {set}: malformed member {member:?}")]
    BadMember {
        /// The writer operation.
        op: &'static str,
        /// The set's ID.
        set: String,
        /// The member.
        member: String,
    },
}

/// Policy direction of an endpoint list / a policy's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyDir {
    /// Traffic to the endpoint (`inbound_rules`, `ingress_policies`).
    Ingress,
    /// Traffic from the endpoint (`outbound_rules`, `egress_policies`).
    Egress,
}

impl PolicyDir {
    /// The interpreter's number (`POL_DIR_*`).
    pub fn number(self) -> u32 {
        match self {
            PolicyDir::Ingress => POL_DIR_INGRESS,
            PolicyDir::Egress => POL_DIR_EGRESS,
        }
    }

    fn name(self) -> &'static str {
        match self {
            PolicyDir::Ingress => "ingress",
            PolicyDir::Egress => "egress",
        }
    }
}

/// One list of an endpoint's policy slot: which list (`cali_pol_ep2` key direction), which
/// rules its policies contribute, and how it ends, as the *tables renderer's chain of the
/// same kind:
///
/// | kind | tiers' end | profiles | list end |
/// |---|---|---|---|
/// | normal (workload, host endpoint to/from the host) | the tier's default action | yes | deny |
/// | untracked, pre-DNAT | pass | no | no match |
/// | forward (applyOnForward) | the tier's default action | no | no match (allowed) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListKind {
    /// The list's number (`POL_DIR_*`).
    pub list: u32,
    /// The policies' rules it walks (inbound or outbound).
    pub rules: PolicyDir,
    /// A tier whose default action is not Pass ends in a deny.
    pub tier_end_denies: bool,
    /// The endpoint's profiles follow the tiers.
    pub profiles: bool,
    /// The list ends in a deny (else: no match).
    pub end_denies: bool,
}

impl ListKind {
    /// Normal policy, to (`Ingress`) or from (`Egress`) the endpoint.
    pub fn normal(dir: PolicyDir) -> Self {
        Self {
            list: dir.number(),
            rules: dir,
            tier_end_denies: true,
            profiles: true,
            end_denies: true,
        }
    }

    /// A host endpoint's every list, in no particular order.
    pub fn host_lists() -> [ListKind; 7] {
        let stage = |list, rules| Self {
            list,
            rules,
            tier_end_denies: false,
            profiles: false,
            end_denies: false,
        };
        let fwd = |list, rules| Self {
            list,
            rules,
            tier_end_denies: true,
            profiles: false,
            end_denies: false,
        };
        [
            Self::normal(PolicyDir::Ingress),
            Self::normal(PolicyDir::Egress),
            stage(POL_DIR_UNTRACKED_IN, PolicyDir::Ingress),
            stage(POL_DIR_UNTRACKED_OUT, PolicyDir::Egress),
            stage(POL_DIR_PREDNAT_IN, PolicyDir::Ingress),
            fwd(POL_DIR_FORWARD_IN, PolicyDir::Ingress),
            fwd(POL_DIR_FORWARD_OUT, PolicyDir::Egress),
        ]
    }

    fn name(self) -> &'static str {
        match self.list {
            POL_DIR_INGRESS => "ingress",
            POL_DIR_EGRESS => "egress",
            POL_DIR_UNTRACKED_IN => "untracked ingress",
            POL_DIR_UNTRACKED_OUT => "untracked egress",
            POL_DIR_PREDNAT_IN => "pre-DNAT ingress",
            POL_DIR_FORWARD_IN => "forward ingress",
            POL_DIR_FORWARD_OUT => "forward egress",
            _ => "unknown list",
        }
    }
}

/// Who owns a handle: `(owner string, direction)`; policies as `np/ns/name`, profiles as
/// `pro/name`.
type HandleKey = (String, PolicyDir);

#[derive(Debug, Default)]
struct HandleState {
    handle: u32,
    /// Written streams (and their records, to skip unchanged rewrites).
    written: Option<(Range, Vec<Op>)>,
    /// Endpoint lists referring to it.
    refs: u32,
}

#[derive(Debug)]
struct EndpointState {
    range: Range,
    records: Vec<Op>,
    handles: Vec<HandleKey>,
}

/// The incremental writer (see the module doc).
#[derive(Debug)]
pub struct PolicyWriter<S> {
    store: S,
    space: RecordAllocator,
    sets: SetIdAllocator,
    members: BTreeMap<String, BTreeSet<IpSetKey>>,
    handles: BTreeMap<HandleKey, HandleState>,
    free_handles: Vec<u32>,
    next_handle: u32,
    endpoints: BTreeMap<(Mechanism, EndpointKey), EndpointState>,
    /// A previous run's handles (not reused until [`PolicyWriter::sweep`]) and their ranges.
    stale_handles: BTreeMap<u32, Vec<Range>>,
    /// A previous run's endpoint entries not rewritten yet.
    stale_endpoints: BTreeMap<(Mechanism, EndpointKey), Range>,
    /// A previous run's IP-set members, by set id, of sets not seen yet this run.
    stale_members: BTreeMap<u64, BTreeSet<IpSetKey>>,
    /// What drop reports' handles and records mean (kept in step with every write).
    names: SharedDropNames,
}

/// The owner string of a policy.
pub fn policy_owner(id: &PolicyId) -> String {
    policy_id_string(id)
}

/// The owner string of a profile.
pub fn profile_owner(name: &str) -> String {
    format!("pro/{name}")
}

impl<S: PolicyStore> PolicyWriter<S> {
    /// A writer over empty maps (all of `cali_pol_ops2` free).
    pub fn new(store: S) -> Self {
        Self::with_space(store, POL_OPS_SIZE)
    }

    /// A writer using only `records` records of `cali_pol_ops2` (tests).
    pub fn with_space(store: S, records: u32) -> Self {
        Self {
            store,
            space: RecordAllocator::new(records),
            sets: SetIdAllocator::new(),
            members: BTreeMap::new(),
            handles: BTreeMap::new(),
            free_handles: Vec::new(),
            next_handle: 1,
            endpoints: BTreeMap::new(),
            stale_handles: BTreeMap::new(),
            stale_endpoints: BTreeMap::new(),
            stale_members: BTreeMap::new(),
            names: SharedDropNames::new(),
        }
    }

    /// Names drop reports in `names` from now on (cleared: this writer's numbers replace
    /// whatever it held).
    pub fn set_names(&mut self, names: SharedDropNames) {
        names.clear();
        self.names = names;
    }

    /// Where this writer names drop reports.
    pub fn names(&self) -> &SharedDropNames {
        &self.names
    }

    /// Start of day over maps a previous run wrote: reserves the record ranges its entries
    /// point at and its handle numbers (see the module doc). Call before any write.
    pub fn adopt(&mut self, existing: &Existing) {
        for (handle, idx) in &existing.policies {
            let ranges: Vec<Range> = (0..2)
                .map(|f| Range {
                    base: idx.base[f],
                    len: idx.len[f],
                })
                .filter(|r| r.len > 0 && self.space.reserve(*r))
                .collect();
            self.stale_handles.insert(*handle, ranges);
            self.next_handle = self.next_handle.max(handle.saturating_add(1));
        }
        for k in &existing.members {
            self.stale_members.entry(k.set_id).or_default().insert(*k);
        }
        for (mech, key, list) in &existing.endpoints {
            let r = Range {
                base: list.base,
                len: list.len,
            };
            if self.space.reserve(r) {
                self.stale_endpoints.insert((*mech, *key), r);
            } else {
                self.stale_endpoints
                    .insert((*mech, *key), Range { base: 0, len: 0 });
            }
        }
    }

    /// After the first full apply of a restarted run: deletes the previous run's endpoint
    /// and index entries this run did not rewrite, and frees their records and handles.
    pub fn sweep(&mut self) -> Result<(), PolicyWriteError> {
        let eps: Vec<_> = std::mem::take(&mut self.stale_endpoints)
            .into_iter()
            .collect();
        for ((mech, key), r) in eps {
            if let Err(source) = self.store.delete_endpoint(mech, key) {
                self.stale_endpoints.insert((mech, key), r);
                return Err(PolicyWriteError::Bpf {
                    op: "sweep",
                    what: format!("{} slot {} dir {}", mech.dir_name(), key.slot, key.dir),
                    source,
                });
            }
            self.space.free(r);
        }
        let sets: Vec<_> = std::mem::take(&mut self.stale_members)
            .into_iter()
            .collect();
        for (id, keys) in sets {
            for k in &keys {
                if let Err(source) = self.store.delete_member(k) {
                    self.stale_members.insert(id, keys.clone());
                    return Err(PolicyWriteError::Bpf {
                        op: "sweep",
                        what: format!("IP set id {id:#x}"),
                        source,
                    });
                }
            }
        }
        let handles: Vec<_> = std::mem::take(&mut self.stale_handles)
            .into_iter()
            .collect();
        for (h, ranges) in handles {
            if let Err(source) = self.store.delete_policy(h) {
                self.stale_handles.insert(h, ranges);
                return Err(PolicyWriteError::Bpf {
                    op: "sweep",
                    what: format!("policy handle {h}"),
                    source,
                });
            }
            for r in ranges {
                self.space.free(r);
            }
            self.free_handles.insert(0, h);
        }
        Ok(())
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutable.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// The set id the maps use for the calc graph's set `name`, if allocated.
    pub fn set_id(&self, name: &str) -> Option<u64> {
        self.sets.get(name)
    }

    /// The handle of `(owner, dir)`, if one is allocated.
    pub fn handle(&self, owner: &str, dir: PolicyDir) -> Option<u32> {
        self.handles
            .get(&(owner.to_string(), dir))
            .map(|h| h.handle)
    }

    fn handle_for(
        &mut self,
        key: &HandleKey,
        owner: impl FnOnce() -> Owner,
        op: &'static str,
    ) -> Result<u32, PolicyWriteError> {
        if let Some(h) = self.handles.get(key) {
            return Ok(h.handle);
        }
        let handle = if let Some(h) = self.free_handles.pop() {
            h
        } else if self.next_handle < POL_IDX_SIZE {
            while self.stale_handles.contains_key(&self.next_handle) {
                self.next_handle += 1;
            }
            self.next_handle += 1;
            self.next_handle - 1
        } else {
            return Err(PolicyWriteError::NoHandle {
                op,
                what: format!("{} {}", key.0, key.1.name()),
            });
        };
        self.handles.insert(
            key.clone(),
            HandleState {
                handle,
                ..HandleState::default()
            },
        );
        self.names.add_handle(handle, owner(), key.1);
        Ok(handle)
    }

    fn release_if_unused(&mut self, key: &HandleKey) {
        if let Some(h) = self.handles.get(key) {
            if h.refs == 0 && h.written.is_none() {
                // Freed handles are reused last (the vector is used as a stack of the
                // oldest-freed at the bottom).
                self.free_handles.insert(0, h.handle);
                self.names.remove_handle(h.handle);
                self.handles.remove(key);
            }
        }
    }

    /// Writes one direction's rules of `owner`: new streams, one index swap, old range freed.
    fn write_rules(
        &mut self,
        op: &'static str,
        (owner, named): (&str, &Owner),
        dir: PolicyDir,
        rules: &[Rule],
    ) -> Result<Vec<Unrenderable>, PolicyWriteError> {
        let key = (owner.to_string(), dir);
        let what = format!("{owner} {}", dir.name());
        let Compiled {
            rules: [v4, v6],
            sources,
            bad,
        } = compile_rules(&what, rules, &mut self.sets);
        let assemble = |r| {
            assemble_policy_spans(r).map_err(|source| PolicyWriteError::Assemble {
                op,
                what: what.clone(),
                source,
            })
        };
        let (s4, spans4) = assemble(&v4)?;
        let (s6, spans6) = assemble(&v6)?;
        // A span's position is in the version's compiled rules; the report names the proto
        // rule it came from.
        let source = |spans: Vec<(u32, usize)>, fam: usize| -> Vec<(u32, usize)> {
            spans
                .into_iter()
                .filter_map(|(start, i)| Some((start, *sources[fam].get(i)?)))
                .collect()
        };
        let spans = [source(spans4, 0), source(spans6, 1)];
        let mut records = s4.clone();
        records.extend_from_slice(&s6);
        let handle = self.handle_for(&key, || named.clone(), op)?;
        self.names.set_spans(handle, spans);
        if let Some(h) = self.handles.get(&key) {
            if h.written.as_ref().is_some_and(|(_, old)| *old == records) {
                return Ok(bad);
            }
        }
        let need = records.len();
        let range = self
            .space
            .alloc(need as u32)
            .ok_or_else(|| PolicyWriteError::NoSpace {
                op,
                what: what.clone(),
                need,
            })?;
        let bpf = |source| PolicyWriteError::Bpf {
            op,
            what: what.clone(),
            source,
        };
        let written = self
            .store
            .write_records(range.base, &records)
            .and_then(|()| {
                let idx = PolicyIndex {
                    base: [range.base, range.base + s4.len() as u32],
                    len: [s4.len() as u32, s6.len() as u32],
                };
                self.store.set_policy(handle, &idx)
            });
        if let Err(e) = written {
            self.space.free(range);
            return Err(bpf(e));
        }
        if let Some(h) = self.handles.get_mut(&key) {
            if let Some((old, _)) = h.written.replace((range, records)) {
                self.space.free(old);
            }
        }
        Ok(bad)
    }

    fn remove_rules(
        &mut self,
        op: &'static str,
        owner: &str,
        dir: PolicyDir,
    ) -> Result<(), PolicyWriteError> {
        let key = (owner.to_string(), dir);
        let Some(h) = self.handles.get(&key) else {
            return Ok(());
        };
        if h.written.is_none() {
            return Ok(());
        }
        let handle = h.handle;
        self.store
            .delete_policy(handle)
            .map_err(|source| PolicyWriteError::Bpf {
                op,
                what: format!("{owner} {}", dir.name()),
                source,
            })?;
        if let Some(h) = self.handles.get_mut(&key) {
            if let Some((old, _)) = h.written.take() {
                self.space.free(old);
            }
        }
        self.names.set_spans(handle, [Vec::new(), Vec::new()]);
        self.release_if_unused(&key);
        Ok(())
    }

    /// Writes (or rewrites) a policy: per direction, new records and one index swap; an
    /// unchanged direction writes nothing. Staged policies are never programmed. Returns the
    /// rules that could not be compiled (each became a deny).
    pub fn apply_policy(
        &mut self,
        id: &PolicyId,
        policy: &Policy,
    ) -> Result<Vec<Unrenderable>, PolicyWriteError> {
        if is_staged(&id.kind) {
            return Ok(Vec::new());
        }
        let owner = policy_owner(id);
        let named = Owner::Policy(id.clone());
        let mut bad = self.write_rules(
            "apply policy",
            (&owner, &named),
            PolicyDir::Ingress,
            &policy.inbound_rules,
        )?;
        bad.extend(self.write_rules(
            "apply policy",
            (&owner, &named),
            PolicyDir::Egress,
            &policy.outbound_rules,
        )?);
        Ok(bad)
    }

    /// Removes a policy's index entries (endpoints still referring to it then deny).
    pub fn remove_policy(&mut self, id: &PolicyId) -> Result<(), PolicyWriteError> {
        let owner = policy_owner(id);
        for dir in [PolicyDir::Ingress, PolicyDir::Egress] {
            self.remove_rules("remove policy", &owner, dir)?;
        }
        Ok(())
    }

    /// Writes (or rewrites) a profile, as [`PolicyWriter::apply_policy`].
    pub fn apply_profile(
        &mut self,
        name: &str,
        profile: &Profile,
    ) -> Result<Vec<Unrenderable>, PolicyWriteError> {
        let owner = profile_owner(name);
        let named = Owner::Profile(name.to_string());
        let mut bad = self.write_rules(
            "apply profile",
            (&owner, &named),
            PolicyDir::Ingress,
            &profile.inbound_rules,
        )?;
        bad.extend(self.write_rules(
            "apply profile",
            (&owner, &named),
            PolicyDir::Egress,
            &profile.outbound_rules,
        )?);
        Ok(bad)
    }

    /// Removes a profile's index entries.
    pub fn remove_profile(&mut self, name: &str) -> Result<(), PolicyWriteError> {
        let owner = profile_owner(name);
        for dir in [PolicyDir::Ingress, PolicyDir::Egress] {
            self.remove_rules("remove profile", &owner, dir)?;
        }
        Ok(())
    }

    /// Writes the list of the endpoint in policy `slot` of `mech` for `dir`: the tiers (in
    /// order, staged policies left out, default action Pass or Deny), then the profiles, then
    /// the default deny; new records and one swap of its `cali_pol_ep2` entry. An unchanged
    /// list writes nothing.
    pub fn set_endpoint(
        &mut self,
        mech: Mechanism,
        slot: u32,
        dir: PolicyDir,
        tiers: &[TierInfo],
        profile_ids: &[String],
    ) -> Result<(), PolicyWriteError> {
        self.set_list(mech, slot, ListKind::normal(dir), tiers, profile_ids)
    }

    /// Writes list `kind` of the endpoint in policy `slot` of `mech` (see [`ListKind`] for
    /// what each kind ends with); new records and one swap of its `cali_pol_ep2` entry. An
    /// unchanged list writes nothing.
    pub fn set_list(
        &mut self,
        mech: Mechanism,
        slot: u32,
        kind: ListKind,
        tiers: &[TierInfo],
        profile_ids: &[String],
    ) -> Result<(), PolicyWriteError> {
        const OP: &str = "set endpoint";
        let dir = kind.rules;
        let what = format!("{} slot {slot} {}", mech.dir_name(), kind.name());
        let mut keys: Vec<HandleKey> = Vec::new();
        let mut tier_irs = Vec::new();
        // The tiers that get a tier-end record (those with policies), in list order.
        let mut tier_names = Vec::new();
        for t in tiers {
            let pols = match dir {
                PolicyDir::Ingress => &t.ingress_policies,
                PolicyDir::Egress => &t.egress_policies,
            };
            let mut handles = Vec::new();
            for p in pols.iter().filter(|p| !is_staged(&p.kind)) {
                let k = (policy_owner(p), dir);
                handles.push(self.handle_for(&k, || Owner::Policy(p.clone()), OP)?);
                keys.push(k);
            }
            if !handles.is_empty() {
                tier_names.push(t.name.clone());
            }
            tier_irs.push(TierIr {
                policies: handles,
                default_pass: !kind.tier_end_denies
                    || t.default_action.eq_ignore_ascii_case("pass"),
            });
        }
        let mut profiles = Vec::new();
        if kind.profiles {
            for name in profile_ids {
                let k = (profile_owner(name), dir);
                profiles.push(self.handle_for(&k, || Owner::Profile(name.clone()), OP)?);
                keys.push(k);
            }
        }
        let end = if kind.end_denies {
            EP_END_DENY
        } else {
            EP_END_NO_MATCH
        };
        let records = assemble_list(&tier_irs, &profiles, end);
        let ep = (
            mech,
            EndpointKey {
                slot,
                dir: kind.list,
            },
        );
        let tier_ends: Vec<(u32, String)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.code == OP_EP_TIER_END)
            .map(|(i, _)| i as u32)
            .zip(tier_names)
            .collect();
        if self
            .endpoints
            .get(&ep)
            .is_some_and(|e| e.records == records)
        {
            for k in &keys {
                self.release_if_unused(k);
            }
            // Same records; a renamed tier still renames its reports.
            self.names.set_list(mech, ep.1, tier_ends);
            return Ok(());
        }
        let need = records.len();
        let Some(range) = self.space.alloc(need as u32) else {
            for k in &keys {
                self.release_if_unused(k);
            }
            return Err(PolicyWriteError::NoSpace { op: OP, what, need });
        };
        let list = EndpointList {
            base: range.base,
            len: range.len,
        };
        let written = self
            .store
            .write_records(range.base, &records)
            .and_then(|()| self.store.set_endpoint(mech, ep.1, &list));
        if let Err(source) = written {
            self.space.free(range);
            for k in &keys {
                self.release_if_unused(k);
            }
            return Err(PolicyWriteError::Bpf {
                op: OP,
                what,
                source,
            });
        }
        for k in &keys {
            if let Some(h) = self.handles.get_mut(k) {
                h.refs += 1;
            }
        }
        if let Some(r) = self.stale_endpoints.remove(&ep) {
            self.space.free(r);
        }
        self.names.set_list(mech, ep.1, tier_ends);
        if let Some(old) = self.endpoints.insert(
            ep,
            EndpointState {
                range,
                records,
                handles: keys,
            },
        ) {
            self.drop_endpoint_state(old);
        }
        Ok(())
    }

    fn drop_endpoint_state(&mut self, old: EndpointState) {
        self.space.free(old.range);
        for k in &old.handles {
            if let Some(h) = self.handles.get_mut(k) {
                h.refs = h.refs.saturating_sub(1);
            }
            self.release_if_unused(k);
        }
    }

    /// Writes both lists of a workload whose TC-ingress hook has policy slot `tc_ingress_slot`
    /// and TC-egress hook `tc_egress_slot` (both in `mech`'s jump maps): the TC-ingress hook
    /// sees what the workload sends (its egress policy), the TC-egress hook what it receives.
    pub fn set_workload(
        &mut self,
        mech: Mechanism,
        tc_ingress_slot: u32,
        tc_egress_slot: u32,
        wep: &WorkloadEndpoint,
    ) -> Result<(), PolicyWriteError> {
        self.set_endpoint(
            mech,
            tc_ingress_slot,
            PolicyDir::Egress,
            &wep.tiers,
            &wep.profile_ids,
        )?;
        self.set_endpoint(
            mech,
            tc_egress_slot,
            PolicyDir::Ingress,
            &wep.tiers,
            &wep.profile_ids,
        )
    }

    /// Removes the list of the endpoint in `slot` of `mech` for `dir` (its packets then deny).
    pub fn remove_endpoint(
        &mut self,
        mech: Mechanism,
        slot: u32,
        dir: PolicyDir,
    ) -> Result<(), PolicyWriteError> {
        self.remove_list(mech, slot, ListKind::normal(dir))
    }

    /// Removes list `kind` of `slot` of `mech` (a missing one is not an error).
    pub fn remove_list(
        &mut self,
        mech: Mechanism,
        slot: u32,
        kind: ListKind,
    ) -> Result<(), PolicyWriteError> {
        let key = EndpointKey {
            slot,
            dir: kind.list,
        };
        if !self.endpoints.contains_key(&(mech, key))
            && !self.stale_endpoints.contains_key(&(mech, key))
        {
            return Ok(());
        }
        self.store
            .delete_endpoint(mech, key)
            .map_err(|source| PolicyWriteError::Bpf {
                op: "remove endpoint",
                what: format!("{} slot {slot} {}", mech.dir_name(), kind.name()),
                source,
            })?;
        if let Some(old) = self.endpoints.remove(&(mech, key)) {
            self.drop_endpoint_state(old);
        }
        self.names.remove_list(mech, key);
        if let Some(r) = self.stale_endpoints.remove(&(mech, key)) {
            self.space.free(r);
        }
        Ok(())
    }

    fn member_keys(
        &mut self,
        op: &'static str,
        set: &str,
        members: &[String],
    ) -> Result<Vec<IpSetKey>, PolicyWriteError> {
        let id = self.sets.get_or_alloc(set);
        if !self.members.contains_key(set) {
            // First sight this run: what a previous run wrote for this id is the baseline
            // of the deltas.
            let old = self.stale_members.remove(&id).unwrap_or_default();
            self.members.insert(set.to_string(), old);
        }
        members
            .iter()
            .map(|m| {
                member_key(id, m).ok_or_else(|| PolicyWriteError::BadMember {
                    op,
                    set: set.to_string(),
                    member: m.clone(),
                })
            })
            .collect()
    }

    fn apply_members(
        &mut self,
        op: &'static str,
        set: &str,
        add: Vec<IpSetKey>,
        del: Vec<IpSetKey>,
    ) -> Result<(), PolicyWriteError> {
        let bpf = |source| PolicyWriteError::Bpf {
            op,
            what: format!("IP set {set}"),
            source,
        };
        let cur = self.members.entry(set.to_string()).or_default();
        // Adds first: a member moving between CIDR and address keys never drops out.
        for k in add {
            if !cur.contains(&k) {
                self.store.add_member(&k).map_err(bpf)?;
                cur.insert(k);
            }
        }
        for k in del {
            if cur.contains(&k) {
                self.store.delete_member(&k).map_err(bpf)?;
                cur.remove(&k);
            }
        }
        Ok(())
    }

    /// A full set: written as the delta against the members written before (never a
    /// rewrite of the set).
    pub fn ipset_update(&mut self, u: &IpSetUpdate) -> Result<(), PolicyWriteError> {
        const OP: &str = "ip set update";
        let want: BTreeSet<IpSetKey> = self
            .member_keys(OP, &u.id, &u.members)?
            .into_iter()
            .collect();
        let cur = self.members.get(&u.id).cloned().unwrap_or_default();
        let add = want.difference(&cur).copied().collect();
        let del = cur.difference(&want).copied().collect();
        self.apply_members(OP, &u.id, add, del)
    }

    /// Member adds and removes.
    pub fn ipset_delta(&mut self, d: &IpSetDeltaUpdate) -> Result<(), PolicyWriteError> {
        const OP: &str = "ip set delta";
        let add = self.member_keys(OP, &d.id, &d.added_members)?;
        let del = self.member_keys(OP, &d.id, &d.removed_members)?;
        self.apply_members(OP, &d.id, add, del)
    }

    /// Removes every member of the set and releases its id.
    pub fn ipset_remove(&mut self, r: &IpSetRemove) -> Result<(), PolicyWriteError> {
        let del: Vec<IpSetKey> = self
            .members
            .get(&r.id)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default();
        self.apply_members("ip set remove", &r.id, Vec::new(), del)?;
        self.members.remove(&r.id);
        self.sets.release(&r.id);
        Ok(())
    }

    /// Free records left in `cali_pol_ops2`.
    pub fn free_records(&self) -> u64 {
        self.space.free_records()
    }
}
