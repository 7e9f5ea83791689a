//! Upstream's selector rewrites for the v3 -> model conversion.
//!
//! The strings built here must equal upstream's byte for byte *after
//! canonicalisation* (IP-set IDs are derived from canonical selectors), so
//! the composition below follows upstream's update processors exactly,
//! including their quirks (e.g. the textual `all()` replacement applied to
//! the whole combined selector of a global policy).

use crate::selector::{self, SelectorError};

/// Label prefix of namespace labels copied onto endpoints.
pub(crate) const NAMESPACE_LABEL_PREFIX: &str = "pcns.";
/// Label prefix of service-account labels copied onto endpoints.
pub(crate) const SERVICE_ACCOUNT_LABEL_PREFIX: &str = "pcsa.";
/// Label carrying an endpoint's namespace.
pub(crate) const LABEL_NAMESPACE: &str = "projectcalico.org/namespace";
/// Label carrying an endpoint's orchestrator.
pub(crate) const LABEL_ORCHESTRATOR: &str = "projectcalico.org/orchestrator";
/// Label carrying an endpoint's service account.
pub(crate) const LABEL_SERVICE_ACCOUNT: &str = "projectcalico.org/serviceaccount";
/// Label carrying a namespace's / service account's own name.
pub(crate) const LABEL_NAME: &str = "projectcalico.org/name";

/// Returns the canonical form of `sel` with `prefix` prepended to every
/// label name it mentions (upstream's `PrefixVisitor`): `a == "b"` with
/// prefix `pcns.` becomes `pcns.a == "b"`.
pub fn prefix_selector_labels(sel: &str, prefix: &str) -> Result<String, SelectorError> {
    let canonical = selector::normalize(sel)?;
    // Text produced by the selector module always has the shape that
    // `rewrite_canonical` walks, so the fallback is never taken.
    Ok(rewrite_canonical(&canonical, prefix).unwrap_or(canonical))
}

/// Walks canonical selector text term by term and prefixes label names.
///
/// Canonical text is a sequence of terms joined by ` && ` / ` || `, with
/// `(`, `)` and `!` around them; a term is `all()`, `global()`,
/// `has(<label>)` or `<label> <operator> <quoted value | {set}>`.  Quoted
/// values never contain their own quote character.  Returns `None` on any
/// other shape.
fn rewrite_canonical(c: &str, prefix: &str) -> Option<String> {
    let mut out = String::with_capacity(c.len() + 4 * prefix.len());
    let mut rest = c;
    let mut expect_term = true;
    while !rest.is_empty() {
        if expect_term {
            if let Some(r) = rest.strip_prefix('(') {
                out.push('(');
                rest = r;
            } else if let Some(r) = rest.strip_prefix('!') {
                out.push('!');
                rest = r;
            } else if let Some(r) = rest.strip_prefix("has(") {
                let end = r.find(')')?;
                out.push_str("has(");
                out.push_str(prefix);
                out.push_str(&r[..=end]);
                rest = &r[end + 1..];
                expect_term = false;
            } else if let Some(r) = rest.strip_prefix("all()") {
                out.push_str("all()");
                rest = r;
                expect_term = false;
            } else if let Some(r) = rest.strip_prefix("global()") {
                out.push_str("global()");
                rest = r;
                expect_term = false;
            } else {
                let label_end = rest.find(' ')?;
                out.push_str(prefix);
                out.push_str(&rest[..label_end]);
                rest = &rest[label_end..];
                // Operator text up to the value.
                let value_start = rest.find(['"', '\'', '{'])?;
                out.push_str(&rest[..value_start]);
                rest = &rest[value_start..];
                let value_len = value_len(rest)?;
                out.push_str(&rest[..value_len]);
                rest = &rest[value_len..];
                expect_term = false;
            }
        } else if let Some(r) = rest.strip_prefix(')') {
            out.push(')');
            rest = r;
        } else if rest.starts_with(" && ") || rest.starts_with(" || ") {
            out.push_str(&rest[..4]);
            rest = &rest[4..];
            expect_term = true;
        } else {
            return None;
        }
    }
    Some(out)
}

/// Length of the quoted string or `{...}` set at the start of `s`.
fn value_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    match b.first()? {
        q @ (b'"' | b'\'') => {
            let close = s[1..].find(*q as char)?;
            Some(close + 2)
        }
        b'{' => {
            let mut i = 1;
            while i < b.len() {
                match b[i] {
                    b'}' => return Some(i + 1),
                    q @ (b'"' | b'\'') => {
                        let close = s[i + 1..].find(q as char)?;
                        i += close + 2;
                    }
                    _ => i += 1,
                }
            }
            None
        }
        _ => None,
    }
}

/// `prefix_selector_labels` for selectors that were already validated.
pub(crate) fn prefixed(sel: &str, prefix: &str) -> String {
    // Validation runs before conversion, so this cannot fail; an empty
    // result mirrors upstream's behaviour on a parse failure.
    prefix_selector_labels(sel, prefix).unwrap_or_default()
}

/// Upstream's `prefixAndAppendSelector`.
pub(crate) fn prefix_and_append(current: String, new: &str, prefix: &str) -> String {
    if new.is_empty() {
        return current;
    }
    let p = prefixed(new, prefix);
    if p.is_empty() {
        current
    } else if current.is_empty() {
        p
    } else {
        format!("({current}) && {p}")
    }
}

/// The selector of a service-account match: the `pcsa.`-prefixed selector
/// ANDed with a `projectcalico.org/serviceaccount in {...}` term for the
/// names.
pub(crate) fn service_account_selector(names: &[String], sel: &str) -> String {
    let updated = if sel.is_empty() {
        String::new()
    } else {
        prefixed(sel, SERVICE_ACCOUNT_LABEL_PREFIX)
    };
    if names.is_empty() {
        return updated;
    }
    let raw = format!("{LABEL_SERVICE_ACCOUNT} in {{ '{}' }}", names.join("', '"));
    let names_sel = selector::normalize(&raw).unwrap_or_default();
    if updated.is_empty() {
        names_sel
    } else {
        format!("({updated}) && ({names_sel})")
    }
}

/// Upstream's `getEndpointSelector`: the combined selector of one side of
/// a rule.  `ns` is the policy's namespace ("" for global policies and
/// profiles).
pub(crate) fn endpoint_selector(
    namespace_selector: &str,
    endpoint_selector: &str,
    service_account_selector: &str,
    not_selector: &str,
    ns: &str,
) -> String {
    let ns_selector = if !namespace_selector.is_empty() {
        prefixed(namespace_selector, NAMESPACE_LABEL_PREFIX)
            .replace("all()", "has(projectcalico.org/namespace)")
            .replace("global()", "!has(projectcalico.org/namespace)")
    } else if !ns.is_empty() {
        format!("{LABEL_NAMESPACE} == '{ns}'")
    } else {
        String::new()
    };

    let mut selector = match (
        service_account_selector.is_empty(),
        endpoint_selector.is_empty(),
    ) {
        (true, true) => String::new(),
        (false, true) => service_account_selector.to_owned(),
        (true, false) => endpoint_selector.to_owned(),
        (false, false) => format!("({service_account_selector}) && ({endpoint_selector})"),
    };

    if !ns_selector.is_empty()
        && (!selector.is_empty() || !not_selector.is_empty() || !namespace_selector.is_empty())
    {
        selector = if selector.is_empty() {
            ns_selector
        } else {
            format!("({ns_selector}) && ({selector})")
        };
    }
    selector
}

/// The model selector of a namespaced `NetworkPolicy`.
pub(crate) fn network_policy_selector(sel: &str, ns: &str, sa_selector: &str) -> String {
    let mut selector = sel.to_owned();
    if !ns.is_empty() {
        let ns_selector = format!("{LABEL_NAMESPACE} == '{ns}'");
        selector = if selector.is_empty() {
            ns_selector
        } else {
            format!("({selector}) && {ns_selector}")
        };
    }
    prefix_and_append(selector, sa_selector, SERVICE_ACCOUNT_LABEL_PREFIX)
}

/// The model selector of a `GlobalNetworkPolicy`.
pub(crate) fn global_policy_selector(sel: &str, ns_selector: &str, sa_selector: &str) -> String {
    let mut selector = sel.to_owned();
    if !ns_selector.is_empty() {
        selector = prefix_and_append(selector, ns_selector, NAMESPACE_LABEL_PREFIX)
            .replace("all()", "has(projectcalico.org/namespace)");
    }
    if !sa_selector.is_empty() {
        selector = prefix_and_append(selector, sa_selector, SERVICE_ACCOUNT_LABEL_PREFIX)
            .replace("all()", "has(projectcalico.org/serviceaccount)");
    }
    selector
}
