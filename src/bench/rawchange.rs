//! The raw tools' version of one change, for `felix bench pipeline`: the chains that differ
//! between two ruleset listings, rewritten with the mode's own tool (`iptables-restore
//! --noflush` per family, or one `nft -f` for both), as a script written by hand for that
//! one change would do it. It is the floor felix's one-change figure is compared with: the
//! kernel's cost of replacing those chains (for nf_tables, the validation of the whole
//! table on every commit) is in both.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use felix_netns as netns;

/// A listing split into chains: (table, chain) to the chain's rule lines, in order. A
/// chain declared without rules has an empty body.
pub(super) type Chains = BTreeMap<(String, String), Vec<String>>;

/// One chain to rewrite: its (table, chain) and its rule lines.
pub(super) type Changed<'a> = (&'a (String, String), &'a [String]);

/// The chains of an `iptables-save` listing; tables by their `*name` line.
pub(super) fn iptables_chains(listing: &str) -> Chains {
    let mut chains = Chains::new();
    let mut table = String::new();
    for line in listing.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split_whitespace().next().unwrap_or_default();
            chains.entry((table.clone(), name.to_string())).or_default();
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let name = rule.split_whitespace().next().unwrap_or_default();
            chains
                .entry((table.clone(), name.to_string()))
                .or_default()
                .push(line.to_string());
        }
    }
    chains
}

/// The chains of an `nft list ruleset` listing; tables as `family name`. Only the
/// statements of a chain are kept (rules, and a base chain's `type ... hook` line).
pub(super) fn nft_chains(listing: &str) -> Chains {
    let mut chains = Chains::new();
    let mut table = String::new();
    let mut chain: Option<String> = None;
    for line in listing.lines() {
        let l = line.trim_end();
        if let Some(t) = l.strip_prefix("table ") {
            table = t.trim_end_matches('{').trim().to_string();
            chain = None;
        } else if let Some(c) = l.strip_prefix("\tchain ") {
            let name = c.trim_end_matches('{').trim().to_string();
            chains.entry((table.clone(), name.clone())).or_default();
            chain = Some(name);
        } else if l == "\t}" {
            chain = None;
        } else if let (Some(c), Some(stmt)) = (&chain, l.strip_prefix("\t\t")) {
            chains
                .entry((table.clone(), c.clone()))
                .or_default()
                .push(stmt.to_string());
        }
    }
    chains
}

/// The chains of `to` whose rules differ from `from`'s (new chains included). A chain only
/// `from` has is an error: the benchmark's changes never delete chains.
pub(super) fn changed<'a>(from: &Chains, to: &'a Chains) -> anyhow::Result<Vec<Changed<'a>>> {
    if let Some(gone) = from.keys().find(|k| !to.contains_key(*k)) {
        bail!("chain {} {} disappeared in the change", gone.0, gone.1);
    }
    Ok(to
        .iter()
        .filter(|(k, body)| from.get(*k) != Some(*body))
        .map(|(k, body)| (k, body.as_slice()))
        .collect())
}

/// An `iptables-restore --noflush` script that replaces `chains` (declaring a chain that
/// exists flushes it).
pub(super) fn iptables_script(chains: &[Changed<'_>]) -> String {
    let mut by_table: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for ((table, name), body) in chains {
        by_table.entry(table).or_default().push((name, body));
    }
    let mut s = String::new();
    for (table, chains) in by_table {
        s.push_str(&format!("*{table}\n"));
        for (name, _) in &chains {
            s.push_str(&format!(":{name} - [0:0]\n"));
        }
        for (_, body) in &chains {
            for rule in body.iter() {
                s.push_str(rule);
                s.push('\n');
            }
        }
        s.push_str("COMMIT\n");
    }
    s
}

/// An `nft -f` script that flushes `chains` and adds their rules, in one transaction.
pub(super) fn nft_script(chains: &[Changed<'_>]) -> String {
    let mut s = String::new();
    for ((table, name), _) in chains {
        s.push_str(&format!("flush chain {table} {name}\n"));
    }
    for ((table, name), body) in chains {
        s.push_str(&format!("table {table} {{\n\tchain {name} {{\n"));
        for stmt in body.iter() {
            s.push_str(&format!("\t\t{stmt}\n"));
        }
        s.push_str("\t}\n}\n");
    }
    s
}

/// One family's (or, for nftables, both families') listings before and after the change,
/// with the tool that loads a script.
pub(super) struct Listings {
    /// `nft` or an `*tables-restore`.
    pub restore: &'static str,
    pub before: String,
    pub after: String,
}

/// Applies the change `runs` times in `ns`, which holds the `before` rulesets, alternating
/// forwards and back (so every run changes the same chains), each run one tool run per
/// listing in order; returns the median run and a description of one.
pub(super) fn time_change(
    ns: &str,
    listings: &[Listings],
    runs: usize,
) -> anyhow::Result<(Duration, String)> {
    let mut forth = Vec::new();
    let mut back = Vec::new();
    let mut what = Vec::new();
    for l in listings {
        let nft = l.restore == "nft";
        let split = if nft { nft_chains } else { iptables_chains };
        let (before, after) = (split(&l.before), split(&l.after));
        let fwd = changed(&before, &after)?;
        let rev = changed(&after, &before)?;
        let script = if nft { nft_script } else { iptables_script };
        let args: &[&str] = if nft { &["-f", "-"] } else { &["--noflush"] };
        what.push(format!(
            "{} ({} chain(s), {} rules)",
            l.restore,
            fwd.len(),
            fwd.iter().map(|(_, b)| b.len()).sum::<usize>()
        ));
        forth.push((l.restore, args, script(&fwd)));
        back.push((l.restore, args, script(&rev)));
    }
    let mut times = Vec::new();
    for run in 0..runs.max(1) {
        let steps = if run % 2 == 0 { &forth } else { &back };
        let mut total = Duration::ZERO;
        for (tool, args, script) in steps {
            let (_, t) = netns::run_in(ns, tool, args, Some(script.as_bytes()))
                .with_context(|| format!("{tool} {} of the changed chains", args.join(" ")))?;
            total += t;
        }
        times.push(total);
    }
    times.sort();
    Ok((times[times.len() / 2], what.join(" + ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE_A: &str = "*filter\n:INPUT ACCEPT [0:0]\n:cali-pi-a - [0:0]\n:cali-pi-b - [0:0]\n\
                          -A INPUT -j cali-pi-a\n-A cali-pi-a -p tcp --dport 1000 -j ACCEPT\n\
                          -A cali-pi-b -p tcp --dport 1001 -j ACCEPT\nCOMMIT\n";

    #[test]
    fn the_changed_iptables_chain_is_rewritten_alone() {
        let after = SAVE_A.replace("--dport 1000", "--dport 2000");
        let (a, b) = (iptables_chains(SAVE_A), iptables_chains(&after));
        let ch = changed(&a, &b).unwrap();
        assert_eq!(ch.len(), 1);
        assert_eq!(
            iptables_script(&ch),
            "*filter\n:cali-pi-a - [0:0]\n-A cali-pi-a -p tcp --dport 2000 -j ACCEPT\nCOMMIT\n"
        );
        assert!(changed(&a, &a).unwrap().is_empty());
    }

    #[test]
    fn the_changed_nft_chain_is_flushed_and_refilled() {
        let listing = "table ip calico {\n\tchain base {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tjump pi-a\n\t}\n\
                       \tchain pi-a {\n\t\ttcp dport 1000 accept\n\t}\n}\ntable ip6 calico {\n\tchain pi-a {\n\t\ttcp dport 1000 accept\n\t}\n}\n";
        let after = listing.replacen("dport 1000", "dport 2000", 1);
        let ch_a = nft_chains(listing);
        let ch_b = nft_chains(&after);
        let ch = changed(&ch_a, &ch_b).unwrap();
        assert_eq!(ch.len(), 1);
        assert_eq!(
            nft_script(&ch),
            "flush chain ip calico pi-a\ntable ip calico {\n\tchain pi-a {\n\t\ttcp dport 2000 accept\n\t}\n}\n"
        );
    }

    #[test]
    fn a_chain_that_disappears_is_refused() {
        let after = SAVE_A
            .replace(":cali-pi-b - [0:0]\n", "")
            .replace("-A cali-pi-b -p tcp --dport 1001 -j ACCEPT\n", "");
        let err = changed(&iptables_chains(SAVE_A), &iptables_chains(&after)).unwrap_err();
        assert!(err.to_string().contains("cali-pi-b"), "{err}");
    }
}
