//! Interface-name dispatch chains: a shallow prefix tree, as upstream
//! renders it. Names are sorted and grouped by their first character after
//! the common prefix; a group of one gets a rule in the root chain, a larger
//! group gets a child chain `<root>-<char>` matched by `<prefix>+`. Every
//! chain ends in the end rules (for workloads, a drop of unknown `cali*`
//! interfaces), so a new interface passes nothing until its chain exists.

use std::collections::BTreeMap;

use crate::dataplane::generictables::{Action, Chain, MatchCriteria, Rule};

use super::names::{
    endpoint_chain_name, CHAIN_FROM_WORKLOAD_DISPATCH, CHAIN_TO_WORKLOAD_DISPATCH,
    WORKLOAD_FROM_ENDPOINT_PFX, WORKLOAD_TO_ENDPOINT_PFX,
};

/// Rendering settings shared by the dispatch builders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConfig {
    /// Interface wildcard suffix (`+`; the nftables renderer maps it).
    pub wildcard: String,
    /// What happens to packets of unknown interfaces.
    pub deny_action: Action,
    /// Longest chain name of the backend.
    pub max_name_len: usize,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            wildcard: "+".into(),
            deny_action: Action::Drop,
            max_name_len: super::names::MAX_CHAIN_NAME_LENGTH_IPTABLES,
        }
    }
}

/// Which interface a dispatch chain matches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointDirection {
    /// Packets from the endpoint (incoming interface).
    From,
    /// Packets to the endpoint (outgoing interface).
    To,
}

/// The chains for one direction: children first, root last.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DispatchChains {
    /// Chains from the workload side.
    pub from: Vec<Chain>,
    /// Chains to the workload side.
    pub to: Vec<Chain>,
}

impl DispatchChains {
    /// All chains, `from` then `to`.
    pub fn all(self) -> Vec<Chain> {
        let mut v = self.from;
        v.extend(self.to);
        v
    }
}

fn common_prefix(names: &[&str]) -> String {
    let Some(first) = names.first() else {
        return String::new();
    };
    let mut len = first.len();
    for n in &names[1..] {
        len = first
            .bytes()
            .zip(n.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    // Interface names are ASCII; stay on a char boundary regardless.
    while !first.is_char_boundary(len) {
        len -= 1;
    }
    first[..len].to_string()
}

fn iface_match(dir: EndpointDirection, name: &str) -> MatchCriteria {
    match dir {
        EndpointDirection::From => MatchCriteria::new().in_interface(name),
        EndpointDirection::To => MatchCriteria::new().out_interface(name),
    }
}

/// One dispatch tree for `names` rooted at `root`, jumping (goto) to
/// `endpoint_pfx` + name chains.
fn tree(
    root: &str,
    names: &[String],
    endpoint_pfx: &str,
    dir: EndpointDirection,
    end_rules: &[Rule],
    cfg: &DispatchConfig,
) -> Vec<Chain> {
    let mut sorted: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !n.is_empty())
        .collect();
    sorted.sort_unstable();
    sorted.dedup();
    let common = common_prefix(&sorted);
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for n in &sorted {
        let key = match n[common.len()..].chars().next() {
            Some(c) => format!("{common}{c}"),
            None => common.clone(),
        };
        groups.entry(key).or_default().push(n);
    }
    let goto = |n: &str| Action::Goto(endpoint_chain_name(endpoint_pfx, n, cfg.max_name_len));
    let mut chains = Vec::new();
    let mut root_rules = Vec::new();
    for (prefix, members) in &groups {
        if members.len() > 1 {
            let next = &prefix[common.len()..];
            let child = format!("{root}-{next}");
            root_rules.push(Rule::new(
                iface_match(dir, &format!("{prefix}{}", cfg.wildcard)),
                Action::Goto(child.clone()),
            ));
            let mut rules: Vec<Rule> = members
                .iter()
                .map(|n| Rule::new(iface_match(dir, n), goto(n)))
                .collect();
            rules.extend(end_rules.iter().cloned());
            chains.push(Chain::new(&child, rules));
        } else {
            let n = members[0];
            root_rules.push(Rule::new(iface_match(dir, n), goto(n)));
        }
    }
    root_rules.extend(end_rules.iter().cloned());
    chains.push(Chain::new(root, root_rules));
    chains
}

/// Dispatch chains for a set of interface names, in either or both
/// directions (`None` skips a direction).
pub fn interface_dispatch_chains(
    names: &[String],
    from: Option<(&str, &str)>,
    to: Option<(&str, &str)>,
    from_end: &[Rule],
    to_end: &[Rule],
    cfg: &DispatchConfig,
) -> DispatchChains {
    DispatchChains {
        from: from
            .map(|(root, pfx)| tree(root, names, pfx, EndpointDirection::From, from_end, cfg))
            .unwrap_or_default(),
        to: to
            .map(|(root, pfx)| tree(root, names, pfx, EndpointDirection::To, to_end, cfg))
            .unwrap_or_default(),
    }
}

/// The workload dispatch chains (`cali-from-wl-dispatch`,
/// `cali-to-wl-dispatch` and their children), ending in a deny of unknown
/// interfaces.
pub fn workload_dispatch_chains(names: &[String], cfg: &DispatchConfig) -> DispatchChains {
    let end =
        vec![Rule::new(MatchCriteria::new(), cfg.deny_action.clone()).comment("Unknown interface")];
    interface_dispatch_chains(
        names,
        Some((CHAIN_FROM_WORKLOAD_DISPATCH, WORKLOAD_FROM_ENDPOINT_PFX)),
        Some((CHAIN_TO_WORKLOAD_DISPATCH, WORKLOAD_TO_ENDPOINT_PFX)),
        &end,
        &end,
        cfg,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::generictables::Match;

    fn iface_of(r: &Rule) -> &str {
        match &r.match_criteria.0[..] {
            [Match::InInterface { name, .. }] | [Match::OutInterface { name, .. }] => name,
            [] => "",
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn builds_shallow_prefix_tree_ending_in_deny() {
        let names: Vec<String> = ["cali1234", "cali1235", "cali2000", "cali1234"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let d = workload_dispatch_chains(&names, &DispatchConfig::default());
        // from: child for "cali1" (two names), root.
        assert_eq!(d.from.len(), 2);
        let child = &d.from[0];
        assert_eq!(child.name, "cali-from-wl-dispatch-1");
        assert_eq!(
            child.rules.iter().map(iface_of).collect::<Vec<_>>(),
            vec!["cali1234", "cali1235", ""]
        );
        assert_eq!(
            child.rules[0].action,
            Action::Goto("cali-fw-cali1234".into())
        );
        assert_eq!(child.rules.last().unwrap().action, Action::Drop);
        let root = &d.from[1];
        assert_eq!(root.name, CHAIN_FROM_WORKLOAD_DISPATCH);
        assert_eq!(
            root.rules.iter().map(iface_of).collect::<Vec<_>>(),
            vec!["cali1+", "cali2000", ""]
        );
        assert_eq!(
            root.rules[0].action,
            Action::Goto("cali-from-wl-dispatch-1".into())
        );
        assert_eq!(
            root.rules[1].action,
            Action::Goto("cali-fw-cali2000".into())
        );
        assert_eq!(
            root.rules[2].comments,
            vec!["Unknown interface".to_string()]
        );
        // to: same shape on the outgoing interface.
        assert_eq!(
            d.to[1].rules[1].action,
            Action::Goto("cali-tw-cali2000".into())
        );
        assert!(matches!(
            d.to[1].rules[1].match_criteria.0[0],
            Match::OutInterface { .. }
        ));
    }

    #[test]
    fn no_endpoints_means_only_the_deny() {
        let d = workload_dispatch_chains(&[], &DispatchConfig::default());
        assert_eq!(d.from.len(), 1);
        assert_eq!(d.from[0].rules.len(), 1);
        assert_eq!(d.from[0].rules[0].action, Action::Drop);
    }
}
