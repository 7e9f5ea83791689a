//! The policy resolver and sorter: for each local endpoint, the ordered
//! list of tiers and policies that apply to it.
//!
//! Ordering (upstream's): tiers with a `Tier` resource first, then by order
//! (unset last), then by name; inside a tier, policies by order (unset
//! last), then by `name/namespace/kind`.
//!
//! Invariants:
//! * Nothing is emitted before the datastore is in sync (the endpoint list
//!   would be partial); the first flush after in-sync emits every endpoint.
//! * Work per flush is proportional to the dirty endpoints and their own
//!   policies, not to all policies (the historical 20,000-sorts bug).
//! * An endpoint's output is a function of the current endpoint, its
//!   matches and the current policy/tier metadata.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::active_rules::PolicyRef;
use super::computed::{ComputedUpdate, EndpointComputed};
use super::EndpointKey;
use super::EndpointValue;
use crate::hash::{FastMap as HashMap, FastSet as HashSet};
use crate::model::{Policy, PolicyKey, Tier, WorkloadEndpointKey};

/// Name of the tier a policy without one belongs to.
pub const DEFAULT_TIER: &str = "default";

/// What the resolver needs of a policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyMeta {
    /// Tier the policy belongs to.
    pub tier: String,
    /// `None` sorts last (upstream's +Inf).
    pub order: Option<f64>,
    /// Untracked policy (`doNotTrack`).
    pub do_not_track: bool,
    /// Applied before DNAT (`preDNAT`).
    pub pre_dnat: bool,
    /// Also applied to forwarded traffic (`applyOnForward`).
    pub apply_on_forward: bool,
    /// Has ingress rules to apply (from `types`, both when empty).
    pub ingress: bool,
    /// Has egress rules to apply (from `types`, both when empty).
    pub egress: bool,
    /// `name/namespace/kind`, the tie-break inside a tier, built once per
    /// policy rather than once per (endpoint, policy) at every resolve.
    pub sort_name: Box<str>,
}

impl PolicyMeta {
    /// Extracts the resolver's view of policy `key`.
    pub fn from_policy(key: &PolicyKey, p: &Policy) -> PolicyMeta {
        let (mut ingress, mut egress) = (false, false);
        if p.types.is_empty() {
            ingress = true;
            egress = true;
        }
        for t in &p.types {
            if t.eq_ignore_ascii_case("ingress") {
                ingress = true;
            } else if t.eq_ignore_ascii_case("egress") {
                egress = true;
            }
        }
        PolicyMeta {
            tier: if p.tier.is_empty() {
                DEFAULT_TIER.to_string()
            } else {
                p.tier.clone()
            },
            order: p.order,
            do_not_track: p.do_not_track,
            pre_dnat: p.pre_dnat,
            apply_on_forward: p.apply_on_forward,
            ingress,
            egress,
            sort_name: policy_sort_name(key).into(),
        }
    }
}

/// A tier as applied to one endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedTier {
    /// The tier's name.
    pub name: String,
    /// `"Deny"` / `"Pass"`; empty when the tier has no `Tier` resource.
    pub default_action: String,
    /// The tier's policies that match the endpoint, in order.
    pub policies: Vec<(PolicyRef, Arc<PolicyMeta>)>,
}

/// One endpoint's resolution, emitted at flush.
#[derive(Clone, Debug)]
pub struct EndpointTiers {
    /// The endpoint resolved.
    pub key: EndpointKey,
    /// `None`: the endpoint is gone.
    pub endpoint: Option<EndpointValue>,
    /// The endpoint's tiers, in order.
    pub tiers: Vec<ResolvedTier>,
    /// Data other nodes computed for a workload endpoint (default for host
    /// endpoints and removals).
    pub computed: EndpointComputed,
}

#[derive(Clone, Debug, PartialEq)]
struct TierMeta {
    order: Option<f64>,
    default_action: String,
}

/// See the module docs.
#[derive(Default)]
pub struct PolicyResolver {
    endpoints: HashMap<EndpointKey, EndpointValue>,
    policies: HashMap<PolicyRef, Arc<PolicyMeta>>,
    tiers: HashMap<String, TierMeta>,
    /// Unordered: [`PolicyResolver::resolve`] sorts each endpoint's
    /// policies by a total order of its own.
    ep_policies: HashMap<EndpointKey, HashSet<PolicyRef>>,
    policy_eps: HashMap<PolicyRef, HashSet<EndpointKey>>,
    computed: HashMap<WorkloadEndpointKey, EndpointComputed>,
    dirty: BTreeSet<EndpointKey>,
    /// The endpoint most recently added to `dirty` (cleared with it):
    /// matches arrive in runs for one endpoint, and re-inserting a key
    /// already present costs a walk of string comparisons.
    last_dirty: Option<EndpointKey>,
    in_sync: bool,
}

fn cmp_order(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

fn policy_sort_name(k: &PolicyKey) -> String {
    format!("{}/{}/{}", k.name, k.namespace, k.kind)
}

impl PolicyResolver {
    /// A resolver with no endpoints, policies or tiers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of local endpoints known.
    pub fn num_endpoints(&self) -> usize {
        self.endpoints.len()
    }

    /// Number of policies matching at least one local endpoint.
    pub fn num_active_policies(&self) -> usize {
        self.policy_eps.len()
    }

    /// The datastore is in sync; [`PolicyResolver::flush`] starts emitting.
    pub fn on_in_sync(&mut self) {
        self.in_sync = true;
    }

    /// A local endpoint changed.
    pub fn on_endpoint(&mut self, key: &EndpointKey, value: Option<EndpointValue>) {
        match value {
            Some(v) => {
                self.endpoints.insert(key.clone(), v);
            }
            None => {
                self.endpoints.remove(key);
                if let EndpointKey::Workload(wk) = key {
                    self.computed.remove(wk);
                }
            }
        }
        self.dirty.insert(key.clone());
    }

    /// Another node computed something about a local workload endpoint
    /// (upstream's `OnEndpointComputedDataUpdate`).  The endpoint need not
    /// be known yet: the live-migration calculator hears of it first.
    pub fn on_computed(&mut self, key: &WorkloadEndpointKey, update: &ComputedUpdate) {
        let entry = self.computed.entry(key.clone()).or_default();
        let before = entry.clone();
        entry.apply(update);
        let changed = *entry != before;
        if entry.is_empty() {
            self.computed.remove(key);
        }
        if changed {
            self.dirty
                .insert(EndpointKey::Workload(super::shared_key::Shared::new(
                    key.clone(),
                )));
        }
    }

    /// A policy changed: dirties its endpoints when its metadata changed.
    pub fn on_policy(&mut self, key: &PolicyRef, value: Option<&Policy>) {
        let new = value.map(|v| Arc::new(PolicyMeta::from_policy(key, v)));
        let old = match &new {
            Some(m) => self.policies.insert(key.clone(), m.clone()),
            None => self.policies.remove(key),
        };
        if old != new {
            if let Some(eps) = self.policy_eps.get(key) {
                self.dirty.extend(eps.iter().cloned());
            }
        }
    }

    /// A tier changed: every endpoint with policies is dirtied.
    pub fn on_tier(&mut self, name: &str, value: Option<&Tier>) {
        let new = value.map(|t| TierMeta {
            order: t.order,
            default_action: match t.default_action {
                crate::model::Action::Pass => "Pass".to_string(),
                _ => "Deny".to_string(),
            },
        });
        let old = match &new {
            Some(m) => self.tiers.insert(name.to_string(), m.clone()),
            None => self.tiers.remove(name),
        };
        if old != new {
            self.dirty.extend(self.ep_policies.keys().cloned());
        }
    }

    /// Policy `policy` now matches local endpoint `ep`.
    pub fn on_match_started(&mut self, policy: &PolicyRef, ep: &EndpointKey) {
        self.policy_eps
            .entry(policy.clone())
            .or_default()
            .insert(ep.clone());
        self.ep_policies
            .entry(ep.clone())
            .or_default()
            .insert(policy.clone());
        self.mark_dirty(ep);
    }

    /// Adds `ep` to the dirty set (cheaply when it was the last added).
    fn mark_dirty(&mut self, ep: &EndpointKey) {
        if self.last_dirty.as_ref().is_some_and(|l| l == ep) {
            return;
        }
        self.dirty.insert(ep.clone());
        self.last_dirty = Some(ep.clone());
    }

    /// Policy `policy` no longer matches local endpoint `ep`.
    pub fn on_match_stopped(&mut self, policy: &PolicyRef, ep: &EndpointKey) {
        if let Some(s) = self.policy_eps.get_mut(policy) {
            s.remove(ep);
            if s.is_empty() {
                self.policy_eps.remove(policy);
            }
        }
        if let Some(s) = self.ep_policies.get_mut(ep) {
            s.remove(policy);
            if s.is_empty() {
                self.ep_policies.remove(ep);
            }
        }
        self.mark_dirty(ep);
    }

    /// Emits the resolution of every dirty endpoint (nothing before
    /// in-sync).
    pub fn flush(&mut self) -> Vec<EndpointTiers> {
        if !self.in_sync {
            return Vec::new();
        }
        let dirty = std::mem::take(&mut self.dirty);
        self.last_dirty = None;
        dirty
            .into_iter()
            .map(|key| {
                let endpoint = self.endpoints.get(&key).cloned();
                let tiers = if endpoint.is_some() {
                    self.resolve(&key)
                } else {
                    Vec::new()
                };
                let computed = match (&key, &endpoint) {
                    (EndpointKey::Workload(wk), Some(_)) => {
                        self.computed.get(wk).cloned().unwrap_or_default()
                    }
                    _ => EndpointComputed::default(),
                };
                EndpointTiers {
                    key,
                    endpoint,
                    tiers,
                    computed,
                }
            })
            .collect()
    }

    fn resolve(&self, key: &EndpointKey) -> Vec<ResolvedTier> {
        let Some(pols) = self.ep_policies.get(key) else {
            return Vec::new();
        };
        type Entry<'a> = (&'a str, &'a PolicyRef, &'a Arc<PolicyMeta>);
        let mut by_tier: BTreeMap<&str, Vec<Entry<'_>>> = BTreeMap::new();
        for pk in pols {
            // A match can precede the policy's metadata only transiently
            // within one update; such a policy is left out until known.
            if let Some(meta) = self.policies.get(pk) {
                by_tier
                    .entry(meta.tier.as_str())
                    .or_default()
                    .push((&meta.sort_name, pk, meta));
            }
        }
        let mut tiers: Vec<ResolvedTier> = by_tier
            .into_iter()
            .map(|(name, mut pols)| {
                // Names are unique, so this order is total: the result
                // does not depend on the (hash) order of `ep_policies`.
                pols.sort_by(|a, b| cmp_order(a.2.order, b.2.order).then_with(|| a.0.cmp(b.0)));
                ResolvedTier {
                    name: name.to_string(),
                    default_action: self
                        .tiers
                        .get(name)
                        .map(|t| t.default_action.clone())
                        .unwrap_or_default(),
                    policies: pols
                        .into_iter()
                        .map(|(_, k, m)| (k.clone(), m.clone()))
                        .collect(),
                }
            })
            .collect();
        tiers.sort_by(|a, b| {
            let ta = self.tiers.get(&a.name);
            let tb = self.tiers.get(&b.name);
            // Tiers with a resource first.
            tb.is_some()
                .cmp(&ta.is_some())
                .then_with(|| cmp_order(ta.and_then(|t| t.order), tb.and_then(|t| t.order)))
                .then_with(|| a.name.cmp(&b.name))
        });
        tiers
    }
}
