//! The validation filter: the graph's first node.
//!
//! Resources are fully validated when they are decoded (see
//! [`crate::resources`]); this node re-checks the invariants the rest of
//! the graph relies on and, like upstream's filter, turns a value that
//! breaks them into "absent" rather than altering it.
//!
//! Invariants guaranteed downstream of this node:
//! * a present value's variant matches its key's variant;
//! * every selector in a policy (its own and its rules') and a live
//!   migration's target selector parses;
//! * a workload endpoint carries `allowSpoofedSourcePrefixes` only if
//!   `WorkloadSourceSpoofing` is `Any` (the `spoofing_allowed` argument).

use crate::model::{Key, Policy, Rule, Update, Value};
use crate::selector;
use smallvec::SmallVec;

/// Returns the update unchanged, or with `value: None` if it is invalid.
/// `spoofing_allowed`: `WorkloadSourceSpoofing` is `Any`.
pub fn filter(mut update: Update, spoofing_allowed: bool) -> Update {
    if let Some(v) = &update.value {
        let verdict = check(&update.key, v).and_then(|()| check_spoofing(v, spoofing_allowed));
        if let Err(reason) = verdict {
            tracing::warn!(key = %update.key, reason, "invalid value treated as absent");
            update.value = None;
        }
    }
    update
}

fn check(key: &Key, value: &Value) -> Result<(), &'static str> {
    let kinds_match = matches!(
        (key, value),
        (Key::Policy(_), Value::Policy(_))
            | (Key::Tier(_), Value::Tier(_))
            | (Key::Profile(_), Value::Profile(_))
            | (Key::WorkloadEndpoint(_), Value::WorkloadEndpoint(_))
            | (Key::HostEndpoint(_), Value::HostEndpoint(_))
            | (Key::NetworkSet(_), Value::NetworkSet(_))
            | (Key::IpPool(_), Value::IpPool(_))
            | (Key::IpamBlock(_), Value::IpamBlock(_))
            | (Key::Node(_), Value::Node(_))
            | (Key::Namespace(_), Value::Namespace(_))
            | (Key::ServiceAccount { .. }, Value::ServiceAccount(_))
            | (Key::GlobalConfig(_), Value::Config(_))
            | (Key::HostConfig { .. }, Value::Config(_))
            | (Key::Ready, Value::Ready(_))
            | (Key::LiveMigration(_), Value::LiveMigration(_))
    );
    if !kinds_match {
        return Err("value kind does not match key kind");
    }
    match value {
        Value::Policy(p) => check_policy(p),
        Value::Profile(p) => check_rules(
            p.inbound_rules.iter().chain(&p.outbound_rules),
            &mut Validated::default(),
        ),
        Value::LiveMigration(lm) => match lm.target.as_ref().and_then(|t| t.selector.as_deref()) {
            Some(sel) if !sel.is_empty() && selector::validate(sel).is_err() => {
                Err("live-migration target selector does not parse")
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Upstream's rule: an endpoint asking to send from other prefixes is
/// invalid unless the node allows it.
fn check_spoofing(value: &Value, allowed: bool) -> Result<(), &'static str> {
    match value {
        Value::WorkloadEndpoint(w) if !allowed && !w.allow_spoofed_source_prefixes.is_empty() => {
            Err("source IP spoofing requested but WorkloadSourceSpoofing is not Any")
        }
        _ => Ok(()),
    }
}

fn check_policy(p: &Policy) -> Result<(), &'static str> {
    let mut seen = Validated::default();
    if !seen.check(&p.selector) {
        return Err("policy selector does not parse");
    }
    check_rules(p.inbound_rules.iter().chain(&p.outbound_rules), &mut seen)
}

/// Selector texts already validated within one resource: a policy's
/// selector often reappears in its rules (an isolation policy uses the
/// same text three times), and a text is validated only once.  At most
/// [`Validated::MAX`] texts are remembered, so a policy with many distinct
/// selectors costs linear, not quadratic, work.
#[derive(Default)]
struct Validated<'a> {
    texts: SmallVec<[&'a str; 4]>,
}

impl<'a> Validated<'a> {
    const MAX: usize = 8;

    /// Whether `s` is a valid selector.
    fn check(&mut self, s: &'a str) -> bool {
        if self.texts.contains(&s) {
            return true;
        }
        if selector::validate(s).is_err() {
            return false;
        }
        if self.texts.len() < Self::MAX {
            self.texts.push(s);
        }
        true
    }
}

fn check_rules<'a>(
    rules: impl Iterator<Item = &'a Rule>,
    seen: &mut Validated<'a>,
) -> Result<(), &'static str> {
    for r in rules {
        for s in [
            &r.src_selector,
            &r.dst_selector,
            &r.not_src_selector,
            &r.not_dst_selector,
        ] {
            if !s.is_empty() && !seen.check(s) {
                return Err("rule selector does not parse");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(sel: &str, rule_sels: &[&str]) -> Policy {
        Policy {
            selector: sel.to_string(),
            inbound_rules: rule_sels
                .iter()
                .map(|s| Rule {
                    src_selector: s.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// `WorkloadSourceSpoofing`: an endpoint with spoofed source prefixes is
    /// absent unless spoofing is allowed; one without is kept either way.
    #[test]
    fn spoofing_endpoints_exist_only_when_spoofing_is_allowed() {
        use crate::model::{WorkloadEndpoint, WorkloadEndpointKey};
        use std::sync::Arc;
        let key = Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: "node1".into(),
            orchestrator_id: "k8s".into(),
            workload_id: "ns/pod".into(),
            endpoint_id: "eth0".into(),
        });
        let wep = |prefixes: &[&str]| {
            Value::WorkloadEndpoint(Arc::new(WorkloadEndpoint {
                allow_spoofed_source_prefixes: prefixes
                    .iter()
                    .map(|p| p.parse().unwrap())
                    .collect(),
                ..Default::default()
            }))
        };
        let spoofing = Update::set(key.clone(), wep(&["10.9.0.0/16"]));
        assert!(filter(spoofing.clone(), false).value.is_none());
        assert!(filter(spoofing, true).value.is_some());
        let plain = Update::set(key, wep(&[]));
        assert!(filter(plain.clone(), false).value.is_some());
        assert!(filter(plain, true).value.is_some());
    }

    #[test]
    fn repeated_selector_texts_are_checked_once_but_every_text_is_checked() {
        let ok = "ns == 'a'";
        assert!(check_policy(&policy(ok, &[ok, ok, "has(b)"])).is_ok());
        // A bad text is rejected wherever it appears, even after good ones.
        assert_eq!(
            check_policy(&policy(ok, &[ok, "has(", ok])),
            Err("rule selector does not parse")
        );
        assert_eq!(
            check_policy(&policy("has(", &["has("])),
            Err("policy selector does not parse")
        );
        // Past the remembered limit, texts are still validated.
        let many: Vec<String> = (0..20).map(|i| format!("k == 'v{i}'")).collect();
        let mut sels: Vec<&str> = many.iter().map(String::as_str).collect();
        sels.push("k ==");
        assert!(check_policy(&policy(ok, &sels)).is_err());
    }
}
