//! `manager/policy-v4` / `-v6`: owns the policy chains (`cali-pi-*`,
//! `cali-po-*`) and profile chains (`cali-pri-*`, `cali-pro-*`).
//!
//! Placement is the renderer's: a normal policy goes into the filter table,
//! an untracked one into raw, a pre-DNAT one into mangle; profiles into
//! filter; the outbound chains of normal policies and profiles also into
//! mangle, where host endpoints' egress chain jumps to them. Dirty tracking is per policy / profile; a changed object's
//! chains are re-rendered and its stale chains removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use felix_actors::{ApplyCtx, ApplyError, Manager};
use felix_proto::{Policy, PolicyId, Profile, ProfileId};

use crate::dataplane::generictables::Chain;
use crate::dataplane::rules::TableName;

use super::chains::{OwnedChains, TablePlan};
use super::render::ChainSource;
use super::targets::TableInputs;
use super::Payload;

/// Identity of a policy or profile.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Policy {
        name: String,
        namespace: String,
        kind: String,
    },
    Profile(String),
}

fn policy_key(id: &PolicyId) -> Key {
    Key::Policy {
        name: id.name.clone(),
        namespace: id.namespace.clone(),
        kind: id.kind.clone(),
    }
}

enum Obj {
    Policy(PolicyId, Policy),
    Profile(ProfileId, Profile),
}

/// See the module docs.
pub struct PolicyManager {
    name: String,
    source: Arc<dyn ChainSource>,
    tables: TableInputs,
    objs: BTreeMap<Key, Obj>,
    dirty: BTreeSet<Key>,
    chains: OwnedChains<Key>,
}

impl PolicyManager {
    /// A manager writing as `name` into `tables`.
    pub fn new(name: &str, source: Arc<dyn ChainSource>, tables: TableInputs) -> Self {
        PolicyManager {
            name: name.to_string(),
            source,
            tables,
            objs: BTreeMap::new(),
            dirty: BTreeSet::new(),
            chains: OwnedChains::default(),
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::ActivePolicyUpdate(_)
                | Payload::ActivePolicyRemove(_)
                | Payload::ActiveProfileUpdate(_)
                | Payload::ActiveProfileRemove(_)
        )
    }

    fn render(&self, obj: &Obj) -> Vec<(TableName, Chain)> {
        match obj {
            Obj::Policy(id, p) => self.source.policy_chains(id, p),
            Obj::Profile(id, p) => self.source.profile_chains(id, p),
        }
    }
}

impl Manager<Payload> for PolicyManager {
    fn on_update(&mut self, msg: &Payload) {
        let (key, obj) = match msg {
            Payload::ActivePolicyUpdate(u) => {
                let Some(id) = &u.id else { return };
                let policy = u.policy.clone().unwrap_or_default();
                (policy_key(id), Some(Obj::Policy(id.clone(), policy)))
            }
            Payload::ActivePolicyRemove(r) => {
                let Some(id) = &r.id else { return };
                (policy_key(id), None)
            }
            Payload::ActiveProfileUpdate(u) => {
                let Some(id) = &u.id else { return };
                let profile = u.profile.clone().unwrap_or_default();
                (
                    Key::Profile(id.name.clone()),
                    Some(Obj::Profile(id.clone(), profile)),
                )
            }
            Payload::ActiveProfileRemove(r) => {
                let Some(id) = &r.id else { return };
                (Key::Profile(id.name.clone()), None)
            }
            _ => return,
        };
        match obj {
            Some(o) => {
                self.objs.insert(key.clone(), o);
            }
            None => {
                self.objs.remove(&key);
            }
        }
        self.dirty.insert(key);
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if ctx.full_rewrite() {
            let all = self
                .objs
                .iter()
                .map(|(k, o)| (k.clone(), self.render(o)))
                .collect();
            let mut chains = std::mem::take(&mut self.chains);
            chains.rewrite_all(&self.tables, ctx, &self.name, all);
            self.chains = chains;
            self.dirty.clear();
            return Ok(());
        }
        if self.dirty.is_empty() {
            return Ok(());
        }
        let mut plan = TablePlan::default();
        for key in std::mem::take(&mut self.dirty) {
            let rendered = self.objs.get(&key).map(|o| self.render(o));
            self.chains.update(&mut plan, &key, rendered);
        }
        plan.flush(&self.tables, ctx, &self.name);
        Ok(())
    }
}
