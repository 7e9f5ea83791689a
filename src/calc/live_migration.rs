//! The live-migration calculator (upstream `LiveMigrationCalculator`).
//!
//! Correlates this node's workload endpoints with `LiveMigration`
//! resources and gives each endpoint its live-migration role (source,
//! target or none) and the UID of the migration that gave it; the policy
//! resolver attaches both to the endpoint's `WorkloadEndpointUpdate`.
//!
//! A migration names its source as a whole workload or as one endpoint,
//! and its target as one endpoint and/or a selector.  Selector targets
//! are matched by the active-rules calculator as computed selectors (one
//! registration per distinct selector, refcounted over migrations).
//!
//! Role precedence: a selector match makes a target; otherwise a direct
//! target reference; otherwise a direct source reference.  When several
//! migrations name one endpoint (a transient overlap) the UID is the
//! greatest of theirs, so the answer is deterministic.
//!
//! Invariants:
//! * **Registration order (load-bearing):** the graph hands a local
//!   workload endpoint to this calculator *before* the active-rules
//!   calculator, so the endpoint is known here when a selector match for
//!   it arrives.  A match for an unknown endpoint is ignored, so the
//!   opposite order would silently lose the target role.  On deletion the
//!   endpoint is forgotten first and its match-stopped event is then
//!   ignored: the resolver drops the endpoint's computed data with it.
//! * Output is emitted whenever an endpoint's role *or UID* changes.
//!   Deviation from upstream, which skips a UID change under the same role
//!   (to avoid churn during overlapping migrations): that makes the output
//!   depend on history, which the graph's contract forbids (the FV
//!   expanders would see different UIDs for the same datastore).
//! * A migration that disappears unreferences everything it referenced;
//!   references to endpoints not (yet) known are kept and applied when
//!   the endpoint arrives, in either order.
//! * Hostnames are ignored for the `k8s` orchestrator, whose workload IDs
//!   (`namespace/pod`) are already unique across nodes.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::computed::{ComputedUpdate, LiveMigrationRole};
use crate::hash::FastMap as HashMap;
use crate::model::{
    LiveMigration, LiveMigrationKey, LiveMigrationSource, LiveMigrationTarget,
    WorkloadEndpointIdentifier, WorkloadEndpointKey, WorkloadIdentifier,
};

/// What the calculator asks the graph to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LmAction {
    /// New computed live-migration data for a local endpoint.
    Computed(WorkloadEndpointKey, ComputedUpdate),
    /// Register a target selector with the active-rules calculator.
    AddSelector(String),
    /// Remove a target selector from the active-rules calculator.
    RemoveSelector(String),
}

const SOURCE: usize = 0;
const TARGET: usize = 1;

/// One endpoint (all fields) or a whole workload (`endpoint_id` empty).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct OwnerId {
    hostname: String,
    orchestrator_id: String,
    workload_id: String,
    endpoint_id: String,
}

fn host_for(orchestrator_id: &str, hostname: &str) -> String {
    if orchestrator_id == "k8s" {
        String::new()
    } else {
        hostname.to_string()
    }
}

impl OwnerId {
    fn of_key(k: &WorkloadEndpointKey) -> OwnerId {
        OwnerId {
            hostname: host_for(&k.orchestrator_id, &k.hostname),
            orchestrator_id: k.orchestrator_id.clone(),
            workload_id: k.workload_id.clone(),
            endpoint_id: k.endpoint_id.clone(),
        }
    }

    fn of_workload(w: &WorkloadIdentifier) -> OwnerId {
        OwnerId {
            hostname: host_for(&w.orchestrator_id, &w.hostname),
            orchestrator_id: w.orchestrator_id.clone(),
            workload_id: w.workload_id.clone(),
            endpoint_id: String::new(),
        }
    }

    fn of_endpoint(e: &WorkloadEndpointIdentifier) -> OwnerId {
        OwnerId {
            hostname: host_for(&e.orchestrator_id, &e.hostname),
            orchestrator_id: e.orchestrator_id.clone(),
            workload_id: e.workload_id.clone(),
            endpoint_id: e.endpoint_id.clone(),
        }
    }

    fn is_empty(&self) -> bool {
        *self == OwnerId::default()
    }

    fn is_workload_level(&self) -> bool {
        self.endpoint_id.is_empty()
    }

    fn workload_level(&self) -> OwnerId {
        OwnerId {
            endpoint_id: String::new(),
            ..self.clone()
        }
    }
}

fn source_id(s: Option<&LiveMigrationSource>) -> OwnerId {
    match s {
        Some(LiveMigrationSource {
            workload: Some(w), ..
        }) => OwnerId::of_workload(w),
        Some(LiveMigrationSource {
            workload_endpoint: Some(e),
            ..
        }) => OwnerId::of_endpoint(e),
        _ => OwnerId::default(),
    }
}

fn target_id(t: Option<&LiveMigrationTarget>) -> OwnerId {
    t.and_then(|t| t.workload_endpoint.as_ref())
        .map(OwnerId::of_endpoint)
        .unwrap_or_default()
}

fn target_selector(t: Option<&LiveMigrationTarget>) -> String {
    t.and_then(|t| t.selector.clone()).unwrap_or_default()
}

/// The last role and UID already queued for `key` in `out`.
fn last_said(out: &[LmAction], key: &WorkloadEndpointKey) -> Option<(LiveMigrationRole, String)> {
    out.iter().rev().find_map(|a| match a {
        LmAction::Computed(k, ComputedUpdate::LiveMigration { role, uid }) if k == key => {
            Some((*role, uid.clone()))
        }
        _ => None,
    })
}

struct WepData {
    key: WorkloadEndpointKey,
    /// Migrations naming this endpoint (or its workload) as source / target.
    direct: [BTreeSet<LiveMigrationKey>; 2],
    /// The target selector currently matching it, if any.
    selector_matched: Option<String>,
}

/// See the module docs.
#[derive(Default)]
pub struct LiveMigrationCalculator {
    weps: HashMap<OwnerId, WepData>,
    migrations: HashMap<LiveMigrationKey, Arc<LiveMigration>>,
    endpoint_refs: [HashMap<OwnerId, BTreeSet<LiveMigrationKey>>; 2],
    workload_refs: [HashMap<OwnerId, BTreeSet<LiveMigrationKey>>; 2],
    selector_refs: HashMap<String, BTreeSet<LiveMigrationKey>>,
}

impl LiveMigrationCalculator {
    /// A calculator with no migrations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of migrations known.
    pub fn num_migrations(&self) -> usize {
        self.migrations.len()
    }

    /// A local workload endpoint exists (`true`) or is gone.  Only its key
    /// matters.  Must be called before the active-rules calculator hears
    /// of the endpoint (see the module docs).
    pub fn on_endpoint(
        &mut self,
        key: &WorkloadEndpointKey,
        present: bool,
        out: &mut Vec<LmAction>,
    ) {
        let id = OwnerId::of_key(key);
        if !present {
            self.weps.remove(&id);
            return;
        }
        if self.weps.contains_key(&id) {
            return;
        }
        let mut wd = WepData {
            key: key.clone(),
            direct: Default::default(),
            selector_matched: None,
        };
        let workload = id.workload_level();
        for sot in [SOURCE, TARGET] {
            if let Some(keys) = self.endpoint_refs[sot].get(&id) {
                wd.direct[sot].extend(keys.iter().cloned());
            }
            if let Some(keys) = self.workload_refs[sot].get(&workload) {
                wd.direct[sot].extend(keys.iter().cloned());
            }
        }
        let (role, uid) = self.role_and_uid(&wd);
        if role != LiveMigrationRole::NoRole {
            out.push(LmAction::Computed(
                key.clone(),
                ComputedUpdate::LiveMigration { role, uid },
            ));
        }
        self.weps.insert(id, wd);
    }

    /// A `LiveMigration` was created, changed (`Some`) or deleted.
    pub fn on_migration(
        &mut self,
        key: &LiveMigrationKey,
        value: Option<Arc<LiveMigration>>,
        out: &mut Vec<LmAction>,
    ) {
        let (old_src, old_tgt, old_sel) = match self.migrations.get(key) {
            Some(lm) => (
                source_id(lm.source.as_ref()),
                target_id(lm.target.as_ref()),
                target_selector(lm.target.as_ref()),
            ),
            None => Default::default(),
        };
        let (new_src, new_tgt, new_sel) = match &value {
            Some(lm) => (
                source_id(lm.source.as_ref()),
                target_id(lm.target.as_ref()),
                target_selector(lm.target.as_ref()),
            ),
            None => Default::default(),
        };
        // Endpoints whose UID could change without a change of reference
        // (the migration's own UID changed): checked again at the end.
        let watched: Vec<(OwnerId, (LiveMigrationRole, String))> = self
            .weps
            .iter()
            .filter(|(_, wd)| {
                wd.direct.iter().any(|s| s.contains(key))
                    || wd
                        .selector_matched
                        .as_deref()
                        .is_some_and(|s| s == old_sel || s == new_sel)
            })
            .map(|(id, wd)| (id.clone(), self.role_and_uid(wd)))
            .collect();
        match value {
            Some(lm) => {
                self.migrations.insert(key.clone(), lm);
            }
            None => {
                self.migrations.remove(key);
            }
        }
        // One migration never names the same endpoint as both source and
        // target, so the two sides are independent.
        for (old, new, sot) in [(old_src, new_src, SOURCE), (old_tgt, new_tgt, TARGET)] {
            if old != new {
                if !old.is_empty() {
                    self.update_direct(&old, key, sot, false, out);
                }
                if !new.is_empty() {
                    self.update_direct(&new, key, sot, true, out);
                }
            }
        }
        for (id, before) in watched {
            let Some(wd) = self.weps.get(&id) else {
                continue;
            };
            let selector_going = wd.selector_matched.as_deref().is_some_and(|s| {
                s == old_sel
                    && old_sel != new_sel
                    && self.selector_refs.get(s).is_none_or(|k| k.len() <= 1)
            });
            if selector_going {
                // Its selector is about to be removed; the match-stopped
                // that follows reports the endpoint's new role.
                continue;
            }
            let now = self.role_and_uid(wd);
            let said = last_said(out, &wd.key).unwrap_or(before);
            if now != said {
                out.push(LmAction::Computed(
                    wd.key.clone(),
                    ComputedUpdate::LiveMigration {
                        role: now.0,
                        uid: now.1,
                    },
                ));
            }
        }
        if old_sel != new_sel {
            if !old_sel.is_empty() {
                if let Some(keys) = self.selector_refs.get_mut(&old_sel) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.selector_refs.remove(&old_sel);
                        out.push(LmAction::RemoveSelector(old_sel));
                    }
                }
            }
            if !new_sel.is_empty() {
                let keys = self.selector_refs.entry(new_sel.clone()).or_default();
                keys.insert(key.clone());
                if keys.len() == 1 {
                    out.push(LmAction::AddSelector(new_sel));
                }
            }
        }
    }

    /// A target selector started or stopped matching a local endpoint.
    pub fn on_selector_match(
        &mut self,
        selector: &str,
        key: &WorkloadEndpointKey,
        matched: bool,
        out: &mut Vec<LmAction>,
    ) {
        let id = OwnerId::of_key(key);
        let Some(wd) = self.weps.get(&id) else {
            // Endpoint already forgotten (deletion) or never local: nothing
            // to say; see the registration-order invariant.
            return;
        };
        let before = self.role_and_uid(wd);
        let new_match = matched.then(|| selector.to_string());
        if let Some(wd) = self.weps.get_mut(&id) {
            wd.selector_matched = new_match;
        }
        self.emit_if_changed(&id, before, out);
    }

    fn update_direct(
        &mut self,
        owner: &OwnerId,
        lm: &LiveMigrationKey,
        sot: usize,
        add: bool,
        out: &mut Vec<LmAction>,
    ) {
        let affected: Vec<OwnerId> = if owner.is_workload_level() {
            self.weps
                .keys()
                .filter(|id| id.workload_level() == *owner)
                .cloned()
                .collect()
        } else if self.weps.contains_key(owner) {
            vec![owner.clone()]
        } else {
            Vec::new()
        };
        for id in affected {
            let Some(wd) = self.weps.get(&id) else {
                continue;
            };
            let before = self.role_and_uid(wd);
            if let Some(wd) = self.weps.get_mut(&id) {
                if add {
                    wd.direct[sot].insert(lm.clone());
                } else {
                    wd.direct[sot].remove(lm);
                }
            }
            self.emit_if_changed(&id, before, out);
        }
        let refs = if owner.is_workload_level() {
            &mut self.workload_refs[sot]
        } else {
            &mut self.endpoint_refs[sot]
        };
        if add {
            refs.entry(owner.clone()).or_default().insert(lm.clone());
        } else if let Some(keys) = refs.get_mut(owner) {
            keys.remove(lm);
            if keys.is_empty() {
                refs.remove(owner);
            }
        }
    }

    fn emit_if_changed(
        &self,
        id: &OwnerId,
        before: (LiveMigrationRole, String),
        out: &mut Vec<LmAction>,
    ) {
        let Some(wd) = self.weps.get(id) else {
            return;
        };
        let (role, uid) = self.role_and_uid(wd);
        if (role, uid.as_str()) != (before.0, before.1.as_str()) {
            out.push(LmAction::Computed(
                wd.key.clone(),
                ComputedUpdate::LiveMigration { role, uid },
            ));
        }
    }

    fn role_and_uid(&self, wd: &WepData) -> (LiveMigrationRole, String) {
        if let Some(sel) = &wd.selector_matched {
            return (
                LiveMigrationRole::Target,
                self.greatest_uid(self.selector_refs.get(sel)),
            );
        }
        if !wd.direct[TARGET].is_empty() {
            return (
                LiveMigrationRole::Target,
                self.greatest_uid(Some(&wd.direct[TARGET])),
            );
        }
        if !wd.direct[SOURCE].is_empty() {
            return (
                LiveMigrationRole::Source,
                self.greatest_uid(Some(&wd.direct[SOURCE])),
            );
        }
        (LiveMigrationRole::NoRole, String::new())
    }

    fn greatest_uid(&self, keys: Option<&BTreeSet<LiveMigrationKey>>) -> String {
        keys.into_iter()
            .flatten()
            .filter_map(|k| self.migrations.get(k))
            .map(|lm| lm.uid.as_str())
            .max()
            .unwrap_or("")
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wep(host: &str, orch: &str, wl: &str, ep: &str) -> WorkloadEndpointKey {
        WorkloadEndpointKey {
            hostname: host.into(),
            orchestrator_id: orch.into(),
            workload_id: wl.into(),
            endpoint_id: ep.into(),
        }
    }

    fn lmk(name: &str) -> LiveMigrationKey {
        LiveMigrationKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn ep_ident(k: &WorkloadEndpointKey) -> WorkloadEndpointIdentifier {
        WorkloadEndpointIdentifier {
            hostname: k.hostname.clone(),
            orchestrator_id: k.orchestrator_id.clone(),
            workload_id: k.workload_id.clone(),
            endpoint_id: k.endpoint_id.clone(),
        }
    }

    fn lm(
        uid: &str,
        source: Option<LiveMigrationSource>,
        target: Option<LiveMigrationTarget>,
    ) -> Option<Arc<LiveMigration>> {
        Some(Arc::new(LiveMigration {
            uid: uid.into(),
            source,
            target,
        }))
    }

    fn role(k: &WorkloadEndpointKey, role: LiveMigrationRole, uid: &str) -> LmAction {
        LmAction::Computed(
            k.clone(),
            ComputedUpdate::LiveMigration {
                role,
                uid: uid.into(),
            },
        )
    }

    #[test]
    fn direct_endpoint_source_in_either_order() {
        let k = wep("node1", "openstack", "vm1", "tap1");
        let src = LiveMigrationSource {
            workload: None,
            workload_endpoint: Some(ep_ident(&k)),
        };
        // Migration first, endpoint later.
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_migration(&lmk("m"), lm("u1", Some(src.clone()), None), &mut out);
        assert!(out.is_empty());
        c.on_endpoint(&k, true, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Source, "u1")]);
        // A repeated endpoint update says nothing.
        out.clear();
        c.on_endpoint(&k, true, &mut out);
        assert!(out.is_empty());
        // Deleting the migration clears the role.
        c.on_migration(&lmk("m"), None, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::NoRole, "")]);

        // Endpoint first, migration later.
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_endpoint(&k, true, &mut out);
        c.on_migration(&lmk("m"), lm("u1", Some(src), None), &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Source, "u1")]);
        // Endpoint deleted: nothing emitted (the resolver drops its data),
        // and a re-added endpoint gets its role again.
        out.clear();
        c.on_endpoint(&k, false, &mut out);
        assert!(out.is_empty());
        c.on_endpoint(&k, true, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Source, "u1")]);
    }

    #[test]
    fn workload_source_covers_every_endpoint_and_ignores_k8s_hostname() {
        let a = wep("node1", "k8s", "ns/virt-launcher", "eth0");
        let b = wep("node1", "k8s", "ns/virt-launcher", "net1");
        let other = wep("node1", "k8s", "ns/other", "eth0");
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        for k in [&a, &b, &other] {
            c.on_endpoint(k, true, &mut out);
        }
        let src = LiveMigrationSource {
            workload: Some(WorkloadIdentifier {
                hostname: "some-other-node".into(),
                orchestrator_id: "k8s".into(),
                workload_id: "ns/virt-launcher".into(),
            }),
            workload_endpoint: None,
        };
        c.on_migration(&lmk("m"), lm("u1", Some(src), None), &mut out);
        out.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(
            out,
            vec![
                role(&a, LiveMigrationRole::Source, "u1"),
                role(&b, LiveMigrationRole::Source, "u1"),
            ]
        );
    }

    #[test]
    fn selector_target_is_refcounted_and_wins_over_source() {
        let k = wep("node1", "k8s", "ns/pod", "eth0");
        let sel = "vm == 'a'".to_string();
        let tgt = LiveMigrationTarget {
            selector: Some(sel.clone()),
            workload_endpoint: None,
        };
        let src = LiveMigrationSource {
            workload: None,
            workload_endpoint: Some(ep_ident(&k)),
        };
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_endpoint(&k, true, &mut out);
        c.on_migration(&lmk("m1"), lm("u1", None, Some(tgt.clone())), &mut out);
        assert_eq!(out, vec![LmAction::AddSelector(sel.clone())]);
        out.clear();
        c.on_migration(&lmk("m2"), lm("u2", Some(src), Some(tgt)), &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Source, "u2")]);
        out.clear();
        c.on_selector_match(&sel, &k, true, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Target, "u2")]);
        out.clear();
        // Only the last user of the selector removes it.
        c.on_migration(&lmk("m1"), None, &mut out);
        assert!(out.is_empty());
        c.on_migration(&lmk("m2"), None, &mut out);
        assert_eq!(out, vec![LmAction::RemoveSelector(sel.clone())]);
        out.clear();
        c.on_selector_match(&sel, &k, false, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::NoRole, "")]);
    }

    #[test]
    fn overlapping_migrations_take_the_greatest_uid_and_do_not_churn() {
        let k = wep("node1", "openstack", "vm1", "tap1");
        let tgt = LiveMigrationTarget {
            selector: None,
            workload_endpoint: Some(ep_ident(&k)),
        };
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_migration(&lmk("a"), lm("uid-a", None, Some(tgt.clone())), &mut out);
        c.on_migration(&lmk("b"), lm("uid-b", None, Some(tgt)), &mut out);
        c.on_endpoint(&k, true, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Target, "uid-b")]);
        out.clear();
        // Same role, different UID: updated (deviation, see module docs).
        c.on_migration(&lmk("b"), None, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Target, "uid-a")]);
        out.clear();
        c.on_migration(&lmk("a"), None, &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::NoRole, "")]);
    }

    #[test]
    fn uid_change_alone_is_reported_once() {
        let k = wep("node1", "k8s", "ns/pod", "eth0");
        let src = LiveMigrationSource {
            workload: None,
            workload_endpoint: Some(ep_ident(&k)),
        };
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_endpoint(&k, true, &mut out);
        c.on_migration(&lmk("m"), lm("u1", Some(src.clone()), None), &mut out);
        out.clear();
        c.on_migration(&lmk("m"), lm("u2", Some(src.clone()), None), &mut out);
        assert_eq!(out, vec![role(&k, LiveMigrationRole::Source, "u2")]);
        out.clear();
        c.on_migration(&lmk("m"), lm("u2", Some(src), None), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn match_for_unknown_endpoint_is_ignored() {
        let k = wep("node1", "k8s", "ns/pod", "eth0");
        let mut c = LiveMigrationCalculator::new();
        let mut out = Vec::new();
        c.on_selector_match("vm == 'a'", &k, true, &mut out);
        assert!(out.is_empty());
    }
}
