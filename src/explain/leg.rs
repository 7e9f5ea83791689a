//! One endpoint's verdict on a flow (a "leg"): the walk over its tiers,
//! policies and profiles in the order the endpoint chains of the `*tables`
//! renderer (and the eBPF interpreter's endpoint lists) take them.
//!
//! Invariants, each named by a test in `super::tests`:
//! * a tier with no (non-staged) policy for the direction is skipped whole,
//!   with no end-of-tier action (`a_tier_without_policies_for_the_direction_is_skipped`);
//! * in a tier, the first matching Allow or Deny rule decides; Pass leaves the
//!   tier at once (its later policies and its end are skipped); Log matches
//!   and the walk goes on (`pass_skips_the_rest_of_its_tier_and_log_continues`);
//! * a tier in which nothing matched ends with its default action: Deny
//!   decides, Pass goes on to the next tier
//!   (`a_tier_ends_with_its_default_action`);
//! * profiles come after the tiers; a profile's Pass goes on to the next
//!   profile; nothing allowing at the end: denied, "noMatch"
//!   (`profiles_follow_the_tiers_and_nothing_allowing_is_no_match`);
//! * staged policies never take part (`staged_policies_are_never_evaluated`).

use felix_bpf::policy::RuleAction;
use felix_proto as pb;
use serde::Serialize;

use crate::calc::view::DataplaneView;
use crate::dataplane::rules::is_staged;

use super::flow::Flow;
use super::rules::{eval_rule, RuleOutcome, Sets};

/// A verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The packet passes.
    Allow,
    /// The packet is dropped.
    Deny,
}

/// What decided a leg (INTERFACES.md, "`felix explain`").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum DecidedBy {
    /// A rule of a policy (with its tier) or of a profile.
    #[serde(rename_all = "camelCase")]
    Rule {
        /// The policy's tier.
        #[serde(skip_serializing_if = "Option::is_none")]
        tier: Option<String>,
        /// The policy (`ns/name` when namespaced).
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
        /// The profile.
        #[serde(skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        /// 0-based index in its direction's rules.
        rule: usize,
        /// `Allow` or `Deny`.
        action: String,
        /// Set when the rule cannot be rendered and a deny stands in its place.
        #[serde(skip_serializing_if = "Option::is_none")]
        unrenderable: Option<String>,
    },
    /// The end of a tier in which no policy matched.
    TierDefault {
        /// The tier.
        tier: String,
        /// `Deny` (a `Pass` default never decides).
        action: String,
    },
    /// No policy or profile allowed the flow (or, for forwarded traffic of a
    /// host endpoint, none decided it: then allowed).
    NoMatch {},
    /// Decided before any policy (this build's addition to the contract): a
    /// failsafe port, an admin-down endpoint, encapsulated traffic from a
    /// workload, or the workload-to-host default action.
    Endpoint {
        /// What decided.
        reason: String,
    },
}

/// One rule considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceStep {
    /// Host endpoint stage other than normal policy (`untracked`, `preDnat`,
    /// `forward`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<&'static str>,
    /// The policy's tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The rule's index.
    pub rule: usize,
    /// Whether the flow matched it.
    pub matched: bool,
}

/// One endpoint's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leg {
    /// The endpoint's ID, as `felix calc` prints it.
    pub endpoint: serde_json::Value,
    /// Its verdict.
    pub verdict: Verdict,
    /// What decided it.
    pub decided_by: DecidedBy,
    /// The rules considered, in order.
    pub trace: Vec<TraceStep>,
}

/// Which rule lists a walk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Policies' inbound rules.
    Ingress,
    /// Outbound rules.
    Egress,
}

/// How a walk ends (mirrors the renderer's chain kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkKind {
    /// Normal policy: end-of-tier deny, then profiles, then deny.
    Normal,
    /// Untracked or pre-DNAT policy: no tier end, no profiles; no match goes on.
    Optional(&'static str),
    /// applyOnForward policy of a host endpoint: end-of-tier deny, no
    /// profiles; no match allows.
    Forward,
}

/// A walk's result before it becomes a leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// Decided.
    Decided(Verdict, DecidedBy),
    /// Nothing decided (only [`WalkKind::Optional`] and [`WalkKind::Forward`]).
    Undecided,
}

/// Everything a walk reads.
pub struct Walker<'a> {
    /// The desired view.
    pub view: &'a DataplaneView,
    /// Its IP sets.
    pub sets: &'a mut Sets,
    /// The flow.
    pub flow: &'a Flow,
    /// The rules considered so far.
    pub trace: Vec<TraceStep>,
}

/// The name a user knows a policy by: `ns/name` when namespaced.
pub fn policy_name(id: &pb::PolicyId) -> String {
    if id.namespace.is_empty() {
        id.name.clone()
    } else {
        format!("{}/{}", id.namespace, id.name)
    }
}

enum ListEnd {
    Verdict(Verdict, usize, Option<String>),
    Pass,
    Nothing,
}

impl Walker<'_> {
    /// Walks one rule list; records each rule considered.
    fn rules(&mut self, rules: &[pb::Rule], mk: &dyn Fn(usize, bool) -> TraceStep) -> ListEnd {
        for (i, r) in rules.iter().enumerate() {
            let outcome = eval_rule(r, self.flow, self.sets);
            let matched = matches!(
                outcome,
                RuleOutcome::Match(_) | RuleOutcome::Unrenderable(_)
            );
            if outcome != RuleOutcome::Absent {
                self.trace.push(mk(i, matched));
            }
            match outcome {
                RuleOutcome::Absent
                | RuleOutcome::NoMatch
                | RuleOutcome::Match(RuleAction::Log) => {}
                RuleOutcome::Match(RuleAction::Allow) => {
                    return ListEnd::Verdict(Verdict::Allow, i, None)
                }
                RuleOutcome::Match(RuleAction::Deny) => {
                    return ListEnd::Verdict(Verdict::Deny, i, None)
                }
                RuleOutcome::Unrenderable(why) => {
                    return ListEnd::Verdict(Verdict::Deny, i, Some(why))
                }
                RuleOutcome::Match(RuleAction::Pass) => return ListEnd::Pass,
            }
        }
        ListEnd::Nothing
    }

    /// Walks `tiers` (and, for [`WalkKind::Normal`], `profiles`) in `dir`.
    pub fn walk(
        &mut self,
        tiers: &[pb::TierInfo],
        profiles: &[String],
        dir: Dir,
        kind: WalkKind,
    ) -> WalkEnd {
        let stage = match kind {
            WalkKind::Normal => None,
            WalkKind::Optional(s) => Some(s),
            WalkKind::Forward => Some("forward"),
        };
        let view = self.view;
        for tier in tiers {
            let ids = match dir {
                Dir::Ingress => &tier.ingress_policies,
                Dir::Egress => &tier.egress_policies,
            };
            let ids: Vec<&pb::PolicyId> = ids.iter().filter(|p| !is_staged(&p.kind)).collect();
            if ids.is_empty() {
                continue;
            }
            let mut passed = false;
            for id in ids {
                let key = (id.kind.clone(), id.namespace.clone(), id.name.clone());
                let Some(pol) = view.policies.get(&key) else {
                    continue;
                };
                let rules = match dir {
                    Dir::Ingress => &pol.inbound_rules,
                    Dir::Egress => &pol.outbound_rules,
                };
                let name = policy_name(id);
                let tier_name = tier.name.clone();
                let mk = |rule, matched| TraceStep {
                    stage,
                    tier: Some(tier_name.clone()),
                    policy: Some(name.clone()),
                    profile: None,
                    rule,
                    matched,
                };
                match self.rules(rules, &mk) {
                    ListEnd::Verdict(v, rule, unrenderable) => {
                        return WalkEnd::Decided(
                            v,
                            DecidedBy::Rule {
                                tier: Some(tier.name.clone()),
                                policy: Some(name),
                                profile: None,
                                rule,
                                action: action_word(v).into(),
                                unrenderable,
                            },
                        );
                    }
                    ListEnd::Pass => {
                        passed = true;
                        break;
                    }
                    ListEnd::Nothing => {}
                }
            }
            let tier_passes = tier.default_action.eq_ignore_ascii_case("pass");
            if !passed && !tier_passes && !matches!(kind, WalkKind::Optional(_)) {
                return WalkEnd::Decided(
                    Verdict::Deny,
                    DecidedBy::TierDefault {
                        tier: tier.name.clone(),
                        action: "Deny".into(),
                    },
                );
            }
        }
        if kind != WalkKind::Normal {
            return WalkEnd::Undecided;
        }
        for prof in profiles {
            let Some(p) = view.profiles.get(prof) else {
                continue;
            };
            let rules = match dir {
                Dir::Ingress => &p.inbound_rules,
                Dir::Egress => &p.outbound_rules,
            };
            let mk = |rule, matched| TraceStep {
                stage: None,
                tier: None,
                policy: None,
                profile: Some(prof.clone()),
                rule,
                matched,
            };
            if let ListEnd::Verdict(v, rule, unrenderable) = self.rules(rules, &mk) {
                return WalkEnd::Decided(
                    v,
                    DecidedBy::Rule {
                        tier: None,
                        policy: None,
                        profile: Some(prof.clone()),
                        rule,
                        action: action_word(v).into(),
                        unrenderable,
                    },
                );
            }
        }
        WalkEnd::Decided(Verdict::Deny, DecidedBy::NoMatch {})
    }
}

fn action_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "Allow",
        Verdict::Deny => "Deny",
    }
}
