//! The active-rules calculator: which policies and profiles apply to this
//! node's endpoints.
//!
//! A policy is active while its selector matches at least one local
//! endpoint (or it carries the `AssumeNeededOnEveryNode` hint); a profile
//! while at least one local endpoint lists it.  Rule selectors are not
//! looked at here: the rule scanner turns them into IP sets.
//!
//! Invariants:
//! * A profile that is referenced but unknown (missing, or invalid and so
//!   absent) is reported active with deny-all rules: an endpoint must never
//!   be left open by a missing profile.
//! * Output depends on current state only: a policy or profile is reported
//!   active with its current rules whenever it (re)becomes active or its
//!   rules change while active, and inactive when it stops being active.
//! * Every match started for (policy, endpoint) is stopped before either
//!   side is forgotten (delegated to the inherit index).
//! * Extra *computed selectors* (upstream's `AddExtraComputedSelector`)
//!   share the same index: other nodes (the Istio and live-migration
//!   calculators) register a selector under a [`ComputedListener`] and are
//!   told which local endpoints it matches.  They never make a policy
//!   active and never reach the policy resolver as policy matches.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::compact::CompactPolicy;
use super::labelindex::{InheritIndex, MatchEvent, ParentLabelSource};
use super::EndpointKey;
use crate::hash::FastMap as HashMap;
use crate::model::{Action, Labels, Policy, PolicyKey, Profile, Rule};
use crate::selector;

/// Performance hint that forces a policy to be programmed on every node.
pub const HINT_ASSUME_NEEDED: &str = "AssumeNeededOnEveryNode";

/// A policy's key, shared and pre-hashed (`shared_key.rs`): one policy is
/// named in several maps per matching endpoint, and a clone must not copy
/// its strings nor an insert hash them.
pub type PolicyRef = super::shared_key::Shared<PolicyKey>;

/// Selector IDs in the inherit index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOwner {
    /// The selector of a policy's `selector` field.
    Policy(PolicyRef),
    /// An extra computed selector (its source text) and who listens to it.
    Computed(String, ComputedListener),
}

/// The nodes that register extra computed selectors.  Part of the selector
/// ID, so two listeners may register the same selector independently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComputedListener {
    /// The Istio ambient calculator.
    Istio,
    /// The live-migration calculator.
    LiveMigration,
}

/// Profile rules as the dataplane sees them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ProfileRules {
    /// Ingress rules.
    pub inbound: Vec<Rule>,
    /// Egress rules.
    pub outbound: Vec<Rule>,
}

/// What the calculator reports.
#[derive(Clone, Debug, PartialEq)]
pub enum ArcEvent {
    /// The policy became active (it matches a local endpoint, or its hints force it); carries its rules.
    PolicyActive(PolicyRef, Arc<Policy>),
    /// The policy is no longer active.
    PolicyInactive(PolicyRef),
    /// The profile is used by a local endpoint; carries its rules (deny-all if it does not exist).
    ProfileActive(String, Arc<ProfileRules>),
    /// The profile is no longer used by any local endpoint.
    ProfileInactive(String),
    /// The policy started matching the endpoint.
    MatchStarted(PolicyRef, EndpointKey),
    /// The policy stopped matching the endpoint.
    MatchStopped(PolicyRef, EndpointKey),
    /// A computed selector (source text) started matching a local endpoint.
    ComputedMatchStarted(ComputedListener, String, EndpointKey),
    /// A computed selector stopped matching a local endpoint.
    ComputedMatchStopped(ComputedListener, String, EndpointKey),
}

/// Placeholder for the forced "match" of an always-programmed policy.
#[derive(Clone, Debug, PartialEq, Eq)]
enum MatchTarget {
    Endpoint(EndpointKey),
    Forced,
}

/// What keeps one policy active.  Matched endpoints are counted, not
/// held: the inherit index reports each (selector, endpoint) pair started
/// exactly once before it reports it stopped (its invariant), so a count
/// is exact and costs no hashing of endpoint keys per match.
#[derive(Default)]
struct Activity {
    endpoints: u32,
    forced: bool,
}

impl Activity {
    fn is_empty(&self) -> bool {
        self.endpoints == 0 && !self.forced
    }

    fn add(&mut self, target: &MatchTarget) {
        match target {
            MatchTarget::Endpoint(_) => self.endpoints += 1,
            MatchTarget::Forced => self.forced = true,
        }
    }

    fn remove(&mut self, target: &MatchTarget) {
        match target {
            MatchTarget::Endpoint(_) => {
                debug_assert!(self.endpoints > 0, "match stopped that never started");
                self.endpoints = self.endpoints.saturating_sub(1);
            }
            MatchTarget::Forced => self.forced = false,
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct ActiveRulesCalculator {
    /// Every policy, compact (`compact.rs`): most are never active.
    policies: HashMap<PolicyRef, CompactPolicy>,
    profile_rules: HashMap<String, Arc<ProfileRules>>,
    index: InheritIndex<SelectorOwner, EndpointKey>,
    /// What keeps each active policy active (absent: inactive).
    policy_matches: HashMap<PolicyRef, Activity>,
    endpoint_profiles: HashMap<EndpointKey, Vec<String>>,
    profile_users: HashMap<String, BTreeSet<EndpointKey>>,
    num_tiers: usize,
    in_sync: bool,
    /// Shared by every profile without rules (namespace and service-account
    /// profiles, the common case), so each does not hold its own copy.
    no_rules: Arc<ProfileRules>,
}

fn deny_all() -> Arc<ProfileRules> {
    let deny = Rule {
        action: Action::Deny,
        ..Default::default()
    };
    Arc::new(ProfileRules {
        inbound: vec![deny.clone()],
        outbound: vec![deny],
    })
}

fn forced(performance_hints: &[String]) -> bool {
    performance_hints.iter().any(|h| h == HINT_ASSUME_NEEDED)
}

impl ActiveRulesCalculator {
    /// A calculator with nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts for metrics: (tiers, policies, profiles).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.num_tiers,
            self.policies.len(),
            self.profile_rules.len(),
        )
    }

    /// Number of policies currently active.
    pub fn num_active_policies(&self) -> usize {
        self.policy_matches.len()
    }

    /// Records the datastore's in-sync (only affects logging of missing
    /// profiles).
    pub fn on_in_sync(&mut self) {
        self.in_sync = true;
    }

    /// Tier count bookkeeping.
    pub fn on_tier(&mut self, present: bool, was_present: bool) {
        match (present, was_present) {
            (true, false) => self.num_tiers += 1,
            (false, true) => self.num_tiers = self.num_tiers.saturating_sub(1),
            _ => {}
        }
    }

    /// A local endpoint was added, changed (`Some`) or removed (`None`).
    /// `source` supplies the labels of the profiles it names (the graph's
    /// IP-set index, which holds every profile's).
    pub fn on_endpoint(
        &mut self,
        key: &EndpointKey,
        value: Option<(&Labels, &[String])>,
        source: &dyn ParentLabelSource,
        out: &mut Vec<ArcEvent>,
    ) {
        let profiles: Vec<String> = value.map(|(_, p)| p.to_vec()).unwrap_or_default();
        self.update_endpoint_profiles(key, profiles, out);
        let mut matches = Vec::new();
        match value {
            Some((labels, parents)) => {
                self.index
                    .update_endpoint(key.clone(), labels, parents, source, &mut matches)
            }
            None => self.index.delete_endpoint(key, &mut matches),
        }
        self.handle_matches(matches, out);
    }

    /// A profile was added, changed or removed.
    pub fn on_profile(&mut self, name: &str, value: Option<&Profile>, out: &mut Vec<ArcEvent>) {
        // Labels feed inheritance.
        let mut matches = Vec::new();
        self.index
            .update_parent_labels(name, value.map(|p| &p.labels), &mut matches);
        // Rules.
        let new_rules = value.map(|p| {
            if p.inbound_rules.is_empty() && p.outbound_rules.is_empty() {
                self.no_rules.clone()
            } else {
                Arc::new(ProfileRules {
                    inbound: p.inbound_rules.clone(),
                    outbound: p.outbound_rules.clone(),
                })
            }
        });
        let old_rules = self.profile_rules.get(name).cloned();
        if old_rules.as_deref() != new_rules.as_deref() {
            match &new_rules {
                Some(r) => {
                    self.profile_rules.insert(name.to_string(), r.clone());
                }
                None => {
                    self.profile_rules.remove(name);
                }
            }
            if self.profile_users.contains_key(name) {
                self.send_profile(name, out);
            }
        }
        self.handle_matches(matches, out);
    }

    /// A policy was added, changed or removed.
    pub fn on_policy(
        &mut self,
        key: &PolicyRef,
        value: Option<Arc<Policy>>,
        out: &mut Vec<ArcEvent>,
    ) {
        let old = self.policies.get(key);
        let was_forced = old.is_some_and(|p| forced(&p.performance_hints()));
        let had_old = old.is_some();
        match value {
            Some(policy) => {
                let compact = CompactPolicy::new(&policy);
                if old == Some(&compact) {
                    return;
                }
                self.policies.insert(key.clone(), compact);
                let now_forced = forced(&policy.performance_hints);
                if !was_forced && now_forced {
                    self.match_started(key, MatchTarget::Forced, out);
                }
                let sel = selector::parse(&policy.selector).unwrap_or_else(|e| {
                    tracing::error!(policy = ?key, error = %e, "unparseable policy selector reached the calc graph; matching nothing");
                    never_selector()
                });
                let mut matches = Vec::new();
                self.index
                    .update_selector(SelectorOwner::Policy(key.clone()), sel, &mut matches);
                self.handle_matches(matches, out);
                if was_forced && !now_forced {
                    self.match_stopped(key, MatchTarget::Forced, out);
                }
                if self.policy_matches.contains_key(key) {
                    out.push(ArcEvent::PolicyActive(key.clone(), policy));
                }
            }
            None => {
                if !had_old {
                    return;
                }
                self.policies.remove(key);
                if was_forced {
                    self.match_stopped(key, MatchTarget::Forced, out);
                }
                let mut matches = Vec::new();
                self.index
                    .delete_selector(&SelectorOwner::Policy(key.clone()), &mut matches);
                self.handle_matches(matches, out);
            }
        }
    }

    /// Registers an extra computed selector for `listener` (upstream's
    /// `AddExtraComputedSelector`); matches against current local endpoints
    /// are reported at once.  An unparseable selector matches nothing.
    pub fn add_computed_selector(
        &mut self,
        sel: &str,
        listener: ComputedListener,
        out: &mut Vec<ArcEvent>,
    ) {
        let parsed = selector::parse(sel).unwrap_or_else(|e| {
            tracing::warn!(selector = sel, error = %e, "unparseable computed selector; matching nothing");
            never_selector()
        });
        let mut matches = Vec::new();
        self.index.update_selector(
            SelectorOwner::Computed(sel.to_string(), listener),
            parsed,
            &mut matches,
        );
        self.handle_matches(matches, out);
    }

    /// Removes a computed selector; every match it had is stopped first.
    pub fn remove_computed_selector(
        &mut self,
        sel: &str,
        listener: ComputedListener,
        out: &mut Vec<ArcEvent>,
    ) {
        let mut matches = Vec::new();
        self.index.delete_selector(
            &SelectorOwner::Computed(sel.to_string(), listener),
            &mut matches,
        );
        self.handle_matches(matches, out);
    }

    fn handle_matches(
        &mut self,
        matches: Vec<MatchEvent<SelectorOwner, EndpointKey>>,
        out: &mut Vec<ArcEvent>,
    ) {
        for m in matches {
            match m {
                MatchEvent::Started(SelectorOwner::Policy(pk), ek) => {
                    self.match_started(&pk, MatchTarget::Endpoint(ek), out)
                }
                MatchEvent::Stopped(SelectorOwner::Policy(pk), ek) => {
                    self.match_stopped(&pk, MatchTarget::Endpoint(ek), out)
                }
                MatchEvent::Started(SelectorOwner::Computed(sel, l), ek) => {
                    out.push(ArcEvent::ComputedMatchStarted(l, sel, ek))
                }
                MatchEvent::Stopped(SelectorOwner::Computed(sel, l), ek) => {
                    out.push(ArcEvent::ComputedMatchStopped(l, sel, ek))
                }
            }
        }
    }

    fn match_started(&mut self, key: &PolicyRef, target: MatchTarget, out: &mut Vec<ArcEvent>) {
        let activity = self.policy_matches.entry(key.clone()).or_default();
        let was_active = !activity.is_empty();
        activity.add(&target);
        if !was_active {
            if let Some(p) = self.policies.get(key) {
                out.push(ArcEvent::PolicyActive(key.clone(), Arc::new(p.expand())));
            }
        }
        if let MatchTarget::Endpoint(ek) = target {
            out.push(ArcEvent::MatchStarted(key.clone(), ek));
        }
    }

    fn match_stopped(&mut self, key: &PolicyRef, target: MatchTarget, out: &mut Vec<ArcEvent>) {
        let now_inactive = match self.policy_matches.get_mut(key) {
            Some(activity) => {
                activity.remove(&target);
                activity.is_empty()
            }
            None => false,
        };
        if now_inactive {
            self.policy_matches.remove(key);
            out.push(ArcEvent::PolicyInactive(key.clone()));
        }
        if let MatchTarget::Endpoint(ek) = target {
            out.push(ArcEvent::MatchStopped(key.clone(), ek));
        }
    }

    fn update_endpoint_profiles(
        &mut self,
        key: &EndpointKey,
        profiles: Vec<String>,
        out: &mut Vec<ArcEvent>,
    ) {
        let old = if profiles.is_empty() {
            self.endpoint_profiles.remove(key).unwrap_or_default()
        } else {
            self.endpoint_profiles
                .insert(key.clone(), profiles.clone())
                .unwrap_or_default()
        };
        for id in &profiles {
            if old.contains(id) {
                continue;
            }
            let users = self.profile_users.entry(id.clone()).or_default();
            let was_active = !users.is_empty();
            users.insert(key.clone());
            if !was_active {
                self.send_profile(id, out);
            }
        }
        for id in &old {
            if profiles.contains(id) {
                continue;
            }
            let now_inactive = match self.profile_users.get_mut(id) {
                Some(users) => {
                    users.remove(key);
                    users.is_empty()
                }
                None => false,
            };
            if now_inactive {
                self.profile_users.remove(id);
                self.send_profile(id, out);
            }
        }
    }

    fn send_profile(&mut self, name: &str, out: &mut Vec<ArcEvent>) {
        if self.profile_users.contains_key(name) {
            let rules = match self.profile_rules.get(name) {
                Some(r) => r.clone(),
                None => {
                    if self.in_sync {
                        tracing::warn!(
                            profile = name,
                            "endpoint uses a profile that does not exist; its rules are replaced by deny-all"
                        );
                    }
                    deny_all()
                }
            };
            out.push(ArcEvent::ProfileActive(name.to_string(), rules));
        } else {
            out.push(ArcEvent::ProfileInactive(name.to_string()));
        }
    }
}

/// A selector that matches nothing (used for a selector that should have
/// been rejected by validation: fail closed).
pub fn never_selector() -> selector::Selector {
    selector::parse("has(projectcalico.org/never) && !has(projectcalico.org/never)")
        .unwrap_or_else(|_| selector::Selector::all())
}
