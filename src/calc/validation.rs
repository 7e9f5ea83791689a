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
//!   migration's target selector parses.

use crate::model::{Key, Policy, Rule, Update, Value};
use crate::selector;

/// Returns the update unchanged, or with `value: None` if it is invalid.
pub fn filter(mut update: Update) -> Update {
    if let Some(v) = &update.value {
        if let Err(reason) = check(&update.key, v) {
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
        Value::Profile(p) => check_rules(p.inbound_rules.iter().chain(&p.outbound_rules)),
        Value::LiveMigration(lm) => match lm.target.as_ref().and_then(|t| t.selector.as_deref()) {
            Some(sel) if !sel.is_empty() && selector::validate(sel).is_err() => {
                Err("live-migration target selector does not parse")
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

fn check_policy(p: &Policy) -> Result<(), &'static str> {
    if selector::validate(&p.selector).is_err() {
        return Err("policy selector does not parse");
    }
    check_rules(p.inbound_rules.iter().chain(&p.outbound_rules))
}

fn check_rules<'a>(rules: impl Iterator<Item = &'a Rule>) -> Result<(), &'static str> {
    for r in rules {
        for s in [
            &r.src_selector,
            &r.dst_selector,
            &r.not_src_selector,
            &r.not_dst_selector,
        ] {
            if !s.is_empty() && selector::validate(s).is_err() {
                return Err("rule selector does not parse");
            }
        }
    }
    Ok(())
}
