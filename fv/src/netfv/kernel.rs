//! Read-back of the node namespace's kernel state for assertions: our
//! iptables chains (in both iptables flavours), our nftables tables, IP
//! sets, routes, per-rule packet counters, and (as JSON from `ip -j` /
//! `bridge -j`) routes, links, neighbour and FDB entries.
//!
//! Everything here only reads; the FV never repairs state behind the
//! daemon's back.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use serde_json::Value;

use super::daemon::Backend;
use felix_netns::Netns;

/// The iptables save tools, both flavours and families.
pub const IPTABLES_SAVES: [&str; 4] = [
    "iptables-legacy-save",
    "iptables-nft-save",
    "ip6tables-legacy-save",
    "ip6tables-nft-save",
];

/// `cali-*` chains and rules with a `cali:` hash comment, per save tool
/// that has any (a tool that is missing or fails counts as empty).
pub fn iptables_calico_state(node: &Netns) -> BTreeMap<String, (BTreeSet<String>, usize)> {
    let mut out = BTreeMap::new();
    for tool in IPTABLES_SAVES {
        let Ok(o) = node.exec_output(tool, &[]) else {
            continue;
        };
        if !o.status.success() {
            continue;
        }
        let text = String::from_utf8_lossy(&o.stdout);
        let chains: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| c.starts_with("cali-"))
            .map(str::to_string)
            .collect();
        let rules = text
            .lines()
            .filter(|l| l.starts_with("-A ") && l.contains("cali:"))
            .count();
        if !chains.is_empty() || rules > 0 {
            out.insert(tool.to_string(), (chains, rules));
        }
    }
    out
}

/// The `calico` tables nftables has (e.g. `ip calico`, `ip6 calico`).
pub fn nft_calico_tables(node: &Netns) -> Result<BTreeSet<String>> {
    let text = node.exec("nft", &["list", "tables"])?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table "))
        .filter(|t| t.ends_with(" calico"))
        .map(str::to_string)
        .collect())
}

/// Chain names in our nftables table of `family` (`ip` / `ip6`).
pub fn nft_chains(node: &Netns, family: &str) -> Result<BTreeSet<String>> {
    let text = node.exec("nft", &["list", "table", family, "calico"])?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("chain "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Set names in our nftables table of `family`.
pub fn nft_sets(node: &Netns, family: &str) -> Result<BTreeSet<String>> {
    let text = node.exec("nft", &["list", "table", family, "calico"])?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("set "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The IPv4 iptables save tool (`iptables-legacy-save` or `iptables-nft-save`) holding our
/// chains: the flavour the daemon programs.
pub fn iptables_save_tool(node: &Netns) -> Option<String> {
    iptables_calico_state(node)
        .into_keys()
        .find(|t| !t.starts_with("ip6"))
}

/// Our IPv4 `cali-*` chains for the backend (iptables: all tables of
/// `iptables-save`, the flavour the daemon picked; nftables: `ip calico`).
pub fn calico_chains(node: &Netns, backend: Backend) -> Result<BTreeSet<String>> {
    match backend {
        Backend::Nftables => nft_chains(node, "ip"),
        Backend::Iptables | Backend::Bpf => Ok(iptables_calico_state(node)
            .into_iter()
            .filter(|(t, _)| !t.starts_with("ip6"))
            .flat_map(|(_, (c, _))| c)
            .collect()),
    }
}

/// Our IPv4 IP sets for the backend (`ipset` names or nftables sets).
pub fn calico_sets(node: &Netns, backend: Backend) -> Result<BTreeSet<String>> {
    match backend {
        Backend::Nftables => nft_sets(node, "ip"),
        Backend::Iptables | Backend::Bpf => Ok(node
            .exec("ipset", &["list", "-n"])?
            .lines()
            .filter(|l| l.starts_with("cali4"))
            .map(str::to_string)
            .collect()),
    }
}

/// Routes in the main table that point down a `cali*` interface, in
/// `family` (`-4` / `-6`), one line each. (Felix writes them with the
/// device route protocol, `boot` by default, like the CNI plugin does, so
/// the interface, not the protocol, is what identifies them.)
pub fn workload_routes(node: &Netns, family: &str) -> Result<Vec<String>> {
    Ok(node
        .ip(&[family, "-o", "route", "show", "table", "main"])?
        .lines()
        .filter(|l| l.contains(" dev cali"))
        .map(|l| l.trim().to_string())
        .collect())
}

/// Packet counters of our IPv4 rules, keyed by table/chain and rule text
/// (without the counter), for the backend.
pub fn rule_counters(node: &Netns, backend: Backend) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    match backend {
        Backend::Iptables | Backend::Bpf => {
            // The flavour the daemon programs: the one holding our chains.
            let tool = iptables_save_tool(node).unwrap_or_else(|| "iptables-save".to_string());
            let text = node.exec(&tool, &["-c"])?;
            let mut table = String::new();
            for l in text.lines() {
                if let Some(t) = l.strip_prefix('*') {
                    table = t.to_string();
                } else if let Some(rest) = l.strip_prefix('[') {
                    let Some((counts, rule)) = rest.split_once("] ") else {
                        continue;
                    };
                    if !rule.starts_with("-A cali-") {
                        continue;
                    }
                    let pkts = counts
                        .split(':')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(0);
                    out.insert(format!("{table} {rule}"), pkts);
                }
            }
        }
        Backend::Nftables => {
            let text = node.exec("nft", &["list", "table", "ip", "calico"])?;
            let mut chain: Option<String> = None;
            for l in text.lines().map(str::trim) {
                if let Some(c) = l.strip_prefix("chain ") {
                    chain = c.split_whitespace().next().map(str::to_string);
                } else if l == "}" {
                    chain = None;
                } else if let (Some(c), Some((before, after))) =
                    (&chain, l.split_once("counter packets "))
                {
                    let mut it = after.splitn(4, ' ');
                    let pkts = it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                    let rest: Vec<&str> = it.skip(2).collect();
                    out.insert(format!("{c} {before}{}", rest.join(" ")), pkts);
                }
            }
        }
    }
    Ok(out)
}

fn json(ns: &Netns, program: &str, args: &[&str]) -> Result<Vec<Value>> {
    let out = ns.exec(program, args)?;
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: Value = serde_json::from_str(&out)
        .with_context(|| format!("{program} {args:?} printed {out:?}"))?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

/// Whether link `dev` exists in the namespace.
pub fn has_link(ns: &Netns, dev: &str) -> bool {
    ns.ip(&["link", "show", "dev", dev]).is_ok()
}

/// Main-table routes of `family` (`-4` / `-6`): `ip -j route show`.
pub fn routes(ns: &Netns, family: &str) -> Result<Vec<Value>> {
    json(ns, "ip", &["-j", family, "route", "show", "table", "main"])
}

/// The main-table route to exactly `dst` (`10.65.2.0/26`), if any.
pub fn route_to(ns: &Netns, dst: &str) -> Result<Option<Value>> {
    let family = if dst.contains(':') { "-6" } else { "-4" };
    Ok(routes(ns, family)?
        .into_iter()
        .find(|r| r["dst"].as_str() == Some(dst)))
}

/// Neighbour entries on `dev` (empty when the device is absent).
pub fn neighbours(ns: &Netns, dev: &str) -> Result<Vec<Value>> {
    if !has_link(ns, dev) {
        return Ok(Vec::new());
    }
    let mut v = json(ns, "ip", &["-j", "-4", "neigh", "show", "dev", dev])?;
    v.extend(json(ns, "ip", &["-j", "-6", "neigh", "show", "dev", dev])?);
    Ok(v)
}

/// FDB entries on `dev` (empty when the device is absent).
pub fn fdb(ns: &Netns, dev: &str) -> Result<Vec<Value>> {
    if !has_link(ns, dev) {
        return Ok(Vec::new());
    }
    json(ns, "bridge", &["-j", "fdb", "show", "dev", dev])
}

/// `ip -j -d link show dev` (details: VXLAN id, port, local address).
pub fn link_details(ns: &Netns, dev: &str) -> Result<Option<Value>> {
    if !has_link(ns, dev) {
        return Ok(None);
    }
    Ok(json(ns, "ip", &["-j", "-d", "link", "show", "dev", dev])?
        .into_iter()
        .next())
}

/// A one-line description of a route (`dst type via gw dev d flags`).
pub fn describe_route(r: &Value) -> String {
    format!(
        "{} {} via {} dev {} flags {}",
        r["dst"].as_str().unwrap_or("?"),
        r["type"].as_str().unwrap_or("unicast"),
        r["gateway"].as_str().unwrap_or("-"),
        r["dev"].as_str().unwrap_or("-"),
        r["flags"]
    )
}
