//! [`PolicySync`]: `driver/bpf`'s side of the policy engine. It keeps the interpreter's maps
//! in step with [`BpfDesired`]'s policies, profiles, IP sets and endpoint lists, in the order
//! the cross-layer invariant needs.
//!
//! # Invariants
//! * `sets_are_written_before_the_policies_that_reference_them_and_removed_after`: an apply
//!   first writes changed IP sets, then changed policies and profiles, then endpoints; it
//!   removes policies and profiles nobody wants only after the endpoints, and IP sets last.
//! * `an_endpoint_list_is_written_before_its_hook_can_run_it`: [`PolicySync::fill`] (called by
//!   `BpfDataplane::apply_with` before the preamble is attached) writes the endpoint's list for
//!   the slot and installs the interpreter there.
//! * Only what changed is written: a policy, profile or set whose shared content is the one
//!   already written is skipped (the writer also skips unchanged records).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use felix_bpf::ops::op;
use felix_bpf::policy::{
    POL_DIR_EGRESS, POL_DIR_FORWARD_IN, POL_DIR_FORWARD_OUT, POL_DIR_INGRESS, POL_DIR_PREDNAT_IN,
    POL_DIR_UNTRACKED_IN, POL_DIR_UNTRACKED_OUT,
};
use felix_bpf::{BpfError, BpfOps, Hook, Mechanism};
use felix_proto::{
    HostEndpoint, IpSetRemove, IpSetUpdate, Policy, PolicyId, Profile, TierInfo, WorkloadEndpoint,
};

use super::engine::BpfPolicyEngine;
use super::writer::{ListKind, PolicyDir, PolicyWriteError};
use crate::dataplane::bpf::desired::{BpfDesired, PolicyKey};
use crate::dataplane::bpf::driver::DropReports;

/// A writer error as the driver's typed BPF error (the map operation's own error when there
/// is one).
pub fn bpf_error(e: PolicyWriteError) -> BpfError {
    match e {
        PolicyWriteError::Bpf { source, .. } => source,
        other => BpfError::Unexpected {
            op: op::MAP_UPDATE,
            what: "policy maps".into(),
            reason: other.to_string(),
        },
    }
}

/// The policy direction a workload's hook enforces: its host-side device's TC ingress
/// carries what it sends (egress policy), TC egress what it receives.
pub fn workload_dir(hook: Hook) -> PolicyDir {
    match hook {
        Hook::Ingress => PolicyDir::Egress,
        Hook::Egress => PolicyDir::Ingress,
    }
}

/// The endpoint whose lists a hook's slot holds.
#[derive(Debug, Clone, Copy)]
pub enum EndpointRef<'a> {
    /// A workload.
    Workload(&'a WorkloadEndpoint),
    /// A host endpoint.
    Host(&'a HostEndpoint),
}

/// The lists a host endpoint's `hook` walks: TC ingress what arrives (for the host or to be
/// forwarded), TC egress what leaves.
pub fn host_lists(hook: Hook) -> Vec<ListKind> {
    let wanted: &[u32] = match hook {
        Hook::Ingress => &[
            POL_DIR_UNTRACKED_IN,
            POL_DIR_PREDNAT_IN,
            POL_DIR_INGRESS,
            POL_DIR_FORWARD_IN,
        ],
        Hook::Egress => &[POL_DIR_UNTRACKED_OUT, POL_DIR_EGRESS, POL_DIR_FORWARD_OUT],
    };
    ListKind::host_lists()
        .into_iter()
        .filter(|k| wanted.contains(&k.list))
        .collect()
}

/// See the module doc.
#[derive(Debug)]
pub struct PolicySync {
    engine: BpfPolicyEngine,
    policies: BTreeMap<PolicyKey, Arc<Policy>>,
    profiles: BTreeMap<String, Arc<Profile>>,
    sets: BTreeMap<String, Arc<Vec<String>>>,
    swept: bool,
}

impl PolicySync {
    /// Opens the policy maps under `root` (adopting a previous run's entries), writes the
    /// drop-report switch and names reports in `drops.names` from now on.
    pub fn start(
        ops: BpfOps,
        root: &Path,
        debug: bool,
        drops: &DropReports,
    ) -> Result<Self, BpfError> {
        let mut engine = BpfPolicyEngine::start(ops, root, debug).map_err(bpf_error)?;
        engine.writer().set_names(drops.names.clone());
        let store = engine.writer().store();
        store.maps.drops().configure(&store.ops, drops.config)?;
        Ok(Self {
            engine,
            policies: BTreeMap::new(),
            profiles: BTreeMap::new(),
            sets: BTreeMap::new(),
            swept: false,
        })
    }

    /// Writes the IP sets, then the policies and profiles, that are new or changed.
    pub fn add_and_change(&mut self, d: &BpfDesired) -> Result<(), BpfError> {
        for (id, members) in &d.ipsets {
            if self.sets.get(id).is_some_and(|m| Arc::ptr_eq(m, members)) {
                continue;
            }
            self.engine
                .writer()
                .ipset_update(&IpSetUpdate {
                    id: id.clone(),
                    members: members.as_ref().clone(),
                    r#type: 0,
                })
                .map_err(bpf_error)?;
            self.sets.insert(id.clone(), members.clone());
        }
        for (k, p) in &d.policies {
            if self
                .policies
                .get(k)
                .is_some_and(|w| Arc::ptr_eq(w, p) || w == p)
            {
                continue;
            }
            let id = PolicyId {
                name: k.0.clone(),
                namespace: k.1.clone(),
                kind: k.2.clone(),
            };
            let bad = self
                .engine
                .writer()
                .apply_policy(&id, p)
                .map_err(bpf_error)?;
            for u in bad {
                tracing::warn!(policy = %k.0, rule = ?u, "rule cannot be rendered in BPF: it denies");
            }
            self.policies.insert(k.clone(), p.clone());
        }
        for (name, p) in &d.profiles {
            if self
                .profiles
                .get(name)
                .is_some_and(|w| Arc::ptr_eq(w, p) || w == p)
            {
                continue;
            }
            let bad = self
                .engine
                .writer()
                .apply_profile(name, p)
                .map_err(bpf_error)?;
            for u in bad {
                tracing::warn!(profile = %name, rule = ?u, "rule cannot be rendered in BPF: it denies");
            }
            self.profiles.insert(name.clone(), p.clone());
        }
        Ok(())
    }

    /// Removes the policies and profiles `d` no longer has, then its gone IP sets.
    pub fn remove_unwanted(&mut self, d: &BpfDesired) -> Result<(), BpfError> {
        let gone: Vec<PolicyKey> = self
            .policies
            .keys()
            .filter(|k| !d.policies.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            let id = PolicyId {
                name: k.0.clone(),
                namespace: k.1.clone(),
                kind: k.2.clone(),
            };
            self.engine.writer().remove_policy(&id).map_err(bpf_error)?;
            self.policies.remove(&k);
        }
        let gone: Vec<String> = self
            .profiles
            .keys()
            .filter(|k| !d.profiles.contains_key(*k))
            .cloned()
            .collect();
        for name in gone {
            self.engine
                .writer()
                .remove_profile(&name)
                .map_err(bpf_error)?;
            self.profiles.remove(&name);
        }
        let gone: Vec<String> = self
            .sets
            .keys()
            .filter(|k| !d.ipsets.contains_key(*k))
            .cloned()
            .collect();
        for id in gone {
            self.engine
                .writer()
                .ipset_remove(&IpSetRemove { id: id.clone() })
                .map_err(bpf_error)?;
            self.sets.remove(&id);
        }
        Ok(())
    }

    /// Writes the lists of `hook`'s slot `slot` of `mech` for `ep` (an unknown endpoint
    /// gets an empty list: default deny) and installs the interpreter into the slot. A
    /// workload's hook has one list (its host-side TC ingress: the workload's egress policy);
    /// a host endpoint's TC ingress has its inbound lists (untracked, pre-DNAT, normal,
    /// forward), its TC egress the outbound ones.
    pub fn fill(
        &mut self,
        mech: Mechanism,
        hook: Hook,
        slot: u32,
        ep: Option<EndpointRef<'_>>,
    ) -> Result<(), BpfError> {
        match ep {
            Some(EndpointRef::Host(h)) => {
                for kind in host_lists(hook) {
                    let tiers: &[TierInfo] = match kind.list {
                        POL_DIR_UNTRACKED_IN | POL_DIR_UNTRACKED_OUT => &h.untracked_tiers,
                        POL_DIR_PREDNAT_IN => &h.pre_dnat_tiers,
                        POL_DIR_FORWARD_IN | POL_DIR_FORWARD_OUT => &h.forward_tiers,
                        _ => &h.tiers,
                    };
                    self.engine
                        .writer()
                        .set_list(mech, slot, kind, tiers, &h.profile_ids)
                        .map_err(bpf_error)?;
                }
            }
            ep => {
                let (tiers, profiles) = match ep {
                    Some(EndpointRef::Workload(e)) => {
                        (e.tiers.as_slice(), e.profile_ids.as_slice())
                    }
                    _ => (&[][..], &[][..]),
                };
                self.engine
                    .writer()
                    .set_endpoint(mech, slot, workload_dir(hook), tiers, profiles)
                    .map_err(bpf_error)?;
            }
        }
        self.engine.install(mech, hook, slot).map_err(bpf_error)
    }

    /// Names interface `ifindex` (`name`, attached with `mech`) for drop reports.
    pub fn name_iface(&mut self, ifindex: u32, name: &str, mech: Mechanism) {
        self.engine.writer().names().set_iface(ifindex, name, mech);
    }

    /// Forgets interface `ifindex` for drop reports.
    pub fn forget_iface(&mut self, ifindex: u32) {
        self.engine.writer().names().remove_iface(ifindex);
    }

    /// How many IP-set members the kernel's map holds now (tests).
    #[cfg(test)]
    pub(crate) fn kernel_members(&mut self) -> Result<usize, BpfError> {
        let store = self.engine.writer().store();
        Ok(store.maps.members(&store.ops)?.len())
    }

    /// Removes every list of `slot` of `mech` (the hook is gone).
    pub fn forget(&mut self, mech: Mechanism, _hook: Hook, slot: u32) -> Result<(), BpfError> {
        for kind in ListKind::host_lists() {
            self.engine
                .writer()
                .remove_list(mech, slot, kind)
                .map_err(bpf_error)?;
        }
        Ok(())
    }

    /// After the first complete apply: removes what a previous run left and this one did not
    /// write again. Once per driver life.
    pub fn sweep_once(&mut self) -> Result<(), BpfError> {
        if !self.swept {
            self.engine.writer().sweep().map_err(bpf_error)?;
            self.swept = true;
        }
        Ok(())
    }
}
