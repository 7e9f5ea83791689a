//! Attribution of a refused *tables transaction to single policy or
//! profile chains, and their quarantine (see
//! [`super::attempts::RetriedTable::quarantine_rejected`]).
//!
//! When a whole transaction is refused, the changed policy and profile
//! chains are dry-run on their own ([`find_rejected`], by bisection, so
//! the cost is paid only on failure). A chain the kernel refuses alone is
//! programmed as a drop-everything chain of the same name (the references
//! to it stay valid and the endpoints it applies to fail closed), logged
//! once with the kernel's message ([`log_quarantined`]) and reported; a
//! later change of its desired content retries it. Failures that no single
//! chain explains keep the ordinary path (retries, then the node-wide
//! fail-closed exit).

use crate::dataplane::kernel::KernelError;

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, MatchCriteria, Rule};

/// The chains among `candidates` that the kernel refuses on their own, with
/// the kernel's message. `check` dry-runs a group of chains in one
/// transaction (`Err`: the kernel's message). Bisects: a group that passes
/// costs one dry run, so with one bad chain among `n` it takes about
/// `2 log2 n` runs. A group that fails while each half passes on its own is
/// a failure of the combination, attributable to no single chain: nothing
/// is reported for it.
pub fn find_rejected(
    candidates: &[String],
    check: &mut dyn FnMut(&[String]) -> Result<(), String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if candidates.is_empty() {
        return out;
    }
    let mut stack = vec![candidates];
    while let Some(group) = stack.pop() {
        let Err(msg) = check(group) else { continue };
        if let [one] = group {
            out.push((one.clone(), msg));
            continue;
        }
        let (a, b) = group.split_at(group.len() / 2);
        stack.push(b);
        stack.push(a);
    }
    out.sort();
    out
}

/// Name prefixes of the chains a refusal may be attributed to: policy and
/// profile chains (`rules::names`).
pub const QUARANTINABLE_PREFIXES: &[&str] = &["cali-pi-", "cali-po-", "cali-pri-", "cali-pro-"];

/// `name` without an nftables layer prefix (`filter-cali-pi-x` ->
/// `cali-pi-x`); iptables names are returned as they are.
fn unlayered(name: &str) -> &str {
    match name.split_once('-') {
        Some((_, rest)) if !name.starts_with("cali-") => rest,
        _ => name,
    }
}

/// True if chain `name` holds a policy or profile (directly or after an
/// nftables layer prefix such as `filter-`).
pub fn is_quarantinable(name: &str) -> bool {
    let n = unlayered(name);
    QUARANTINABLE_PREFIXES.iter().any(|p| n.starts_with(p))
}

/// A chain the kernel refused, replaced by a drop-everything chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedChain {
    /// Chain name as programmed.
    pub chain: String,
    /// The kernel's (or tool's) message.
    pub message: String,
}

/// The policy or profile a chain name stands for (its name without the
/// layer and chain-kind prefixes, e.g. `gnp/web`), for logs.
pub fn chain_owner(name: &str) -> &str {
    let n = unlayered(name);
    QUARANTINABLE_PREFIXES
        .iter()
        .find_map(|p| n.strip_prefix(p))
        .unwrap_or(name)
}

/// Logs a newly quarantined chain (once per distinct refusal: a chain is
/// quarantined again only after its content changed).
pub fn log_quarantined(table: &str, r: &RejectedChain) {
    let kind = if unlayered(&r.chain).starts_with("cali-pr") {
        "profile"
    } else {
        "policy"
    };
    tracing::error!(
        table = %table,
        chain = %r.chain,
        kind,
        name = %chain_owner(&r.chain),
        kernel_error = %r.message.trim(),
        "the kernel refuses this {kind}'s chain: programmed it as drop-everything \
         (its endpoints fail closed) and programmed everything else; retried when it changes"
    );
}

/// The tool's message if `e` is a refusal by the kernel or the tool (it ran
/// and exited with a failure status); `None` for anything else (injected
/// seam faults, a tool that could not start or was killed), which is never
/// attributed to a chain.
pub fn refusal(e: &KernelError) -> Option<String> {
    matches!(
        e,
        KernelError::Failed {
            status: Some(_),
            ..
        }
    )
    .then(|| kernel_message(e))
}

/// The verdict of a dry run: `Err` with the message only for a refusal
/// (see [`refusal`]); a dry run that fails otherwise proves nothing about
/// the chains and counts as passed.
pub fn dry_run_verdict<T>(r: Result<T, KernelError>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(e) => refusal(&e).map_or(Ok(()), Err),
    }
}

/// The tool's own message in a failure (its stderr without the usage
/// hint), or the whole error if it printed nothing.
pub fn kernel_message(e: &KernelError) -> String {
    let text: Vec<&str> = e
        .stderr()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Try `"))
        .collect();
    if text.is_empty() {
        e.to_string()
    } else {
        text.join("; ")
    }
}

/// The rules a quarantined chain is programmed with: drop everything.
pub fn drop_everything() -> Vec<Rule> {
    vec![Rule::new(MatchCriteria::new(), Action::Drop)
        .comment("felix: the kernel refused this chain so it drops everything")]
}

/// A refused chain's stand-in (drop everything) and the kernel's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The kernel's (or tool's) message about the refused content.
    pub message: String,
    /// What is programmed instead: drop everything.
    pub rules: Vec<Rule>,
    /// The stand-in's rule hashes.
    pub hashes: Vec<String>,
}

/// A table's desired chain that can be quarantined.
pub trait HoldsQuarantine {
    /// The chain's quarantine slot (`Some` while the kernel refuses its content).
    fn quarantine_mut(&mut self) -> &mut Option<Quarantined>;
    /// True while the chain is quarantined.
    fn is_quarantined(&self) -> bool;
}

/// The chains of a refused transaction that may be to blame: those it wrote (`written`: each
/// chain the transaction touched, and whether it wrote content rather than deleting it) that
/// are policy or profile chains and are not already quarantined.
pub fn refused_candidates<'a, D: HoldsQuarantine>(
    written: impl Iterator<Item = (&'a String, bool)>,
    chains: &BTreeMap<String, D>,
) -> Vec<String> {
    written
        .filter(|(n, wrote)| {
            *wrote && is_quarantinable(n) && chains.get(*n).is_some_and(|d| !d.is_quarantined())
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// Quarantines each refused chain `found` names (`(chain, kernel message)`, as
/// [`find_rejected`] returns them) that is still desired in `chains`: logs it once, records its
/// drop-everything stand-in (hashed by `hashes`) and marks it dirty. Returns how many it
/// quarantined. Shared by the iptables and nftables tables.
pub fn quarantine_found<D: HoldsQuarantine>(
    table: &str,
    found: Vec<(String, String)>,
    chains: &mut BTreeMap<String, D>,
    dirty: &mut BTreeSet<String>,
    hashes: impl Fn(&str, &[Rule]) -> Vec<String>,
) -> usize {
    let mut n = 0;
    for (name, message) in found {
        let Some(d) = chains.get_mut(&name) else {
            continue;
        };
        log_quarantined(
            table,
            &RejectedChain {
                chain: name.clone(),
                message: message.clone(),
            },
        );
        let rules = drop_everything();
        let hashes = hashes(&name, &rules);
        *d.quarantine_mut() = Some(Quarantined {
            message,
            rules,
            hashes,
        });
        dirty.insert(name);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bisection_finds_each_bad_chain_and_costs_one_run_when_none_is_bad() {
        let c = names(&["a", "b", "c", "d", "e"]);
        let mut runs = 0;
        let mut check = |g: &[String]| {
            runs += 1;
            match g.iter().find(|n| *n == "b" || *n == "e") {
                Some(n) => Err(format!("{n} refused")),
                None => Ok(()),
            }
        };
        let found = find_rejected(&c, &mut check);
        assert_eq!(
            found,
            vec![
                ("b".to_string(), "b refused".to_string()),
                ("e".to_string(), "e refused".to_string())
            ]
        );
        let mut runs2 = 0;
        assert!(find_rejected(&c, &mut |_: &[String]| {
            runs2 += 1;
            Ok(())
        })
        .is_empty());
        assert_eq!(runs2, 1);
    }

    #[test]
    fn only_a_tool_refusal_counts_against_a_chain_never_an_injected_fault() {
        let failed = KernelError::Failed {
            op: "iptables-restore-test".into(),
            command: "iptables-restore --test".into(),
            status: Some(2),
            stderr: "Set cali40x doesn't exist.\n\nTry `iptables-restore -h' for more".into(),
        };
        assert_eq!(
            dry_run_verdict::<()>(Err(failed)),
            Err("Set cali40x doesn't exist.".to_string())
        );
        let injected = KernelError::Injected(felix_actors::Injected {
            actor: "driver/iptables-filter-v4".into(),
            op: "iptables-restore".into(),
        });
        assert_eq!(dry_run_verdict::<()>(Err(injected)), Ok(()));
        let killed = KernelError::Failed {
            op: "nft-check".into(),
            command: "nft -c -f -".into(),
            status: None,
            stderr: String::new(),
        };
        assert!(refusal(&killed).is_none());
    }

    #[test]
    fn a_failure_of_a_combination_is_attributed_to_no_chain() {
        let c = names(&["a", "b"]);
        let found = find_rejected(&c, &mut |g: &[String]| {
            if g.len() == 2 {
                Err("together".into())
            } else {
                Ok(())
            }
        });
        assert!(found.is_empty());
    }

    #[test]
    fn policy_and_profile_chains_are_quarantinable_in_both_namings() {
        assert!(is_quarantinable("cali-pi-gnp/web"));
        assert!(is_quarantinable("filter-cali-pro-kns.x"));
        assert!(is_quarantinable("raw-cali-po-gnp/u"));
        assert!(!is_quarantinable("cali-tw-cali1"));
        assert!(!is_quarantinable("filter-cali-FORWARD"));
        assert!(!is_quarantinable("filter-INPUT"));
        assert_eq!(chain_owner("filter-cali-pi-gnp/web"), "gnp/web");
        assert_eq!(chain_owner("cali-pri-kns.x"), "kns.x");
    }
}
