//! Necessary conditions on labels, derived from a selector, that a label
//! index can use to skip items that cannot match.
//!
//! **Invariant:** for every label set `L` with `selector.evaluate(L)` true,
//! and every `(key, r)` in `selector.label_restrictions()`, `L` satisfies
//! `r` (see [`LabelRestriction::is_satisfied_by`]). The restrictions are a
//! lower bound: labels that satisfy them may still fail to match. The
//! derivation follows upstream's rules:
//!
//! * `k == v`, `k in {..}` require `k` with one of those values; `has(k)`,
//!   `k contains/starts with/ends with ..` require `k` to be present.
//! * `!has(k)` requires `k` to be absent. No other negation yields anything
//!   (`!(k == v)` allows `k` to be present with another value), and neither
//!   do `!=`, `not in`, `all()` or `global()`.
//! * `&&` merges its operands' restrictions key by key (flags are OR-ed and
//!   value sets intersected; an empty set means nothing can match).
//! * `||` keeps only keys restricted by every operand: present if all
//!   operands require presence (values are then the union, or unrestricted
//!   if any operand leaves them open), absent if all require absence.

use std::collections::{BTreeMap, BTreeSet};

use super::ast::Node;
use super::LabelSource;

/// What every matching label set must satisfy for one label key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelRestriction {
    /// The label must be present.
    pub must_be_present: bool,
    /// The label must be absent.
    pub must_be_absent: bool,
    /// If `Some`, the label must be present with one of these values.
    /// `Some` of an empty set means no label set can satisfy it (e.g.
    /// `a == "x" && a == "y"`); `None` means no value restriction.
    pub must_have_one_of_values: Option<BTreeSet<String>>,
}

impl LabelRestriction {
    /// False if no label set can satisfy this restriction, i.e. the
    /// selector it came from can match nothing.
    pub fn possible_to_satisfy(&self) -> bool {
        let contradictory_flags = self.must_be_present && self.must_be_absent;
        let no_allowed_value = self
            .must_have_one_of_values
            .as_ref()
            .is_some_and(BTreeSet::is_empty);
        !contradictory_flags && !no_allowed_value
    }

    /// True if `labels` satisfies this restriction for label `key`.
    pub fn is_satisfied_by<L: LabelSource + ?Sized>(&self, key: &str, labels: &L) -> bool {
        let value = labels.get_label(key);
        if self.must_be_present && value.is_none() {
            return false;
        }
        if self.must_be_absent && value.is_some() {
            return false;
        }
        match (&self.must_have_one_of_values, value) {
            (Some(allowed), Some(v)) => allowed.contains(v),
            (Some(_), None) => false,
            (None, _) => true,
        }
    }
}

/// Restrictions of `node`, keyed by label name.
pub(crate) fn restrictions(node: &Node) -> BTreeMap<String, LabelRestriction> {
    let present = |key: &str, values: Option<BTreeSet<String>>| {
        BTreeMap::from([(
            key.to_owned(),
            LabelRestriction {
                must_be_present: true,
                must_be_absent: false,
                must_have_one_of_values: values,
            },
        )])
    };
    match node {
        Node::Eq(k, v) => present(k, Some(BTreeSet::from([v.to_string()]))),
        Node::In(k, set) => present(k, Some(set.iter().map(|v| v.to_string()).collect())),
        Node::Has(k) | Node::Contains(k, _) | Node::StartsWith(k, _) | Node::EndsWith(k, _) => {
            present(k, None)
        }
        Node::Not(inner) => match &**inner {
            Node::Has(k) => BTreeMap::from([(
                k.to_string(),
                LabelRestriction {
                    must_be_absent: true,
                    ..LabelRestriction::default()
                },
            )]),
            _ => BTreeMap::new(),
        },
        Node::And(ops) => {
            let mut acc: BTreeMap<String, LabelRestriction> = BTreeMap::new();
            for op in ops.iter() {
                for (key, r) in restrictions(op) {
                    let base = acc.entry(key).or_default();
                    base.must_be_present |= r.must_be_present;
                    base.must_be_absent |= r.must_be_absent;
                    base.must_have_one_of_values = match (
                        base.must_have_one_of_values.take(),
                        r.must_have_one_of_values,
                    ) {
                        (None, other) | (other, None) => other,
                        (Some(a), Some(b)) => Some(a.intersection(&b).cloned().collect()),
                    };
                }
            }
            acc
        }
        Node::Or(ops) => {
            let Some((first, rest)) = ops.split_first() else {
                return BTreeMap::new();
            };
            let mut acc = restrictions(first);
            for op in rest {
                if acc.is_empty() {
                    break;
                }
                let other = restrictions(op);
                acc.retain(|key, r| {
                    let Some(o) = other.get(key) else {
                        return false;
                    };
                    r.must_be_present = r.must_be_present && o.must_be_present;
                    r.must_have_one_of_values = if r.must_be_present {
                        match (r.must_have_one_of_values.take(), &o.must_have_one_of_values) {
                            (Some(mut a), Some(b)) => {
                                a.extend(b.iter().cloned());
                                Some(a)
                            }
                            _ => None,
                        }
                    } else {
                        None
                    };
                    r.must_be_absent = r.must_be_absent && o.must_be_absent;
                    r.must_be_present || r.must_be_absent
                });
            }
            acc
        }
        Node::Ne(..) | Node::NotIn(..) | Node::All | Node::Global => BTreeMap::new(),
    }
}
