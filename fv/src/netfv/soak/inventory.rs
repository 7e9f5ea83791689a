//! An inventory of every kind of kernel state felix programs in a node
//! namespace, normalised so two namespaces can be compared: iptables
//! (both flavours, both families), nftables, IP sets, routes and route
//! rules, permanent and proxy neighbours, links, the interface sysctls felix
//! sets, and in eBPF mode the pins, the TCX programs attached per hook and
//! the entries of the policy and route maps.
//!
//! Invariants: an item is one object (a chain, one rule at its position in
//! its chain, one set member, one route, one pin, ...), so a difference
//! names the object; what differs between two namespaces for reasons that
//! are not felix's is normalised away and only that: counters, nftables
//! handles, the kernel's hash-table sizing (`hashsize`, `bucketsize`,
//! `initval`) and element order of IP sets, the order chains and tables are
//! listed in (rules keep their position), interface indexes (replaced by
//! names), the uplink's random link-local address, and iptables tables that
//! hold nothing but empty built-in chains (a table a foreign tool loaded
//! once and emptied).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use felix_netns::Netns;

/// A multiset of normalised kernel objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Object -> how many times it is present.
    pub items: BTreeMap<String, usize>,
}

impl Inventory {
    fn add(&mut self, item: String) {
        *self.items.entry(item).or_default() += 1;
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.items.values().sum()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// (objects only here, objects only in `other`).
    pub fn diff(&self, other: &Inventory) -> (Vec<String>, Vec<String>) {
        let mut extra = Vec::new();
        let mut missing = Vec::new();
        let keys: BTreeSet<&String> = self.items.keys().chain(other.items.keys()).collect();
        for k in keys {
            let a = self.items.get(k).copied().unwrap_or(0);
            let b = other.items.get(k).copied().unwrap_or(0);
            for _ in b..a {
                extra.push(k.clone());
            }
            for _ in a..b {
                missing.push(k.clone());
            }
        }
        (extra, missing)
    }
}

/// Takes the inventory of `node`; `bpf_root` is felix's pin root in eBPF mode.
pub fn take(node: &Netns, bpf_root: Option<&Path>) -> Result<Inventory> {
    let mut inv = Inventory::default();
    let links = links(node, &mut inv)?;
    for tool in crate::netfv::kernel::IPTABLES_SAVES {
        let Ok(out) = node.exec_output(tool, &[]) else {
            continue;
        };
        if out.status.success() {
            iptables(tool, &String::from_utf8_lossy(&out.stdout), &mut inv);
        }
    }
    nftables(node, &mut inv)?;
    ipsets(&node.exec("ipset", &["save"])?, &mut inv);
    for fam in ["-4", "-6"] {
        for l in node.ip(&[fam, "route", "show", "table", "all"])?.lines() {
            if l.contains("fe80::") && l.contains("dev uplink") {
                continue;
            }
            let l = strip_word_pair(l, "expires");
            inv.add(format!("route{fam} {l}"));
        }
        for l in node.ip(&[fam, "rule", "show"])?.lines() {
            inv.add(format!("rule{fam} {}", l.trim()));
        }
        // Permanent entries are written by a program (felix's VXLAN ARP
        // entries are); NOARP ones are the kernel's multicast mappings.
        for l in node
            .ip(&[fam, "neigh", "show", "nud", "permanent"])?
            .lines()
        {
            inv.add(format!("neigh{fam} {}", l.trim()));
        }
        for l in node.ip(&[fam, "neigh", "show", "proxy"])?.lines() {
            inv.add(format!("neigh-proxy{fam} {}", l.trim()));
        }
    }
    sysctls(node, &mut inv)?;
    if let Some(root) = bpf_root {
        bpf(node, root, &links, &mut inv)?;
    }
    Ok(inv)
}

/// Removes `word N` (e.g. `expires 299sec`) from a line.
fn strip_word_pair(line: &str, word: &str) -> String {
    let mut out = Vec::new();
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            it.next();
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

/// Links (name, kind, MTU, flags, state; the MAC of `cali*` ones); returns
/// ifindex -> name.
fn links(node: &Netns, inv: &mut Inventory) -> Result<BTreeMap<u64, String>> {
    let out = node.ip(&["-j", "-d", "link", "show"])?;
    let v: Value = serde_json::from_str(&out).context("ip -j link")?;
    let mut names = BTreeMap::new();
    for l in v.as_array().into_iter().flatten() {
        let name = l["ifname"].as_str().unwrap_or("?").to_string();
        if let Some(i) = l["ifindex"].as_u64() {
            names.insert(i, name.clone());
        }
        let mut flags: Vec<&str> = l["flags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        flags.sort_unstable();
        let mac = if name.starts_with("cali") {
            l["address"].as_str().unwrap_or("")
        } else {
            ""
        };
        inv.add(format!(
            "link {name} kind={} mtu={} state={} flags={} {mac} xdp={}",
            l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
            l["mtu"],
            l["operstate"].as_str().unwrap_or("-"),
            flags.join(","),
            !l["xdp"].is_null()
        ));
    }
    Ok(names)
}

/// One `*-save` listing: chains (with policy) and rules at their position.
fn iptables(tool: &str, text: &str, inv: &mut Inventory) {
    let mut tables: Vec<(String, Vec<String>, bool)> = Vec::new();
    let mut pos: BTreeMap<String, usize> = BTreeMap::new();
    for l in text.lines() {
        if let Some(t) = l.strip_prefix('*') {
            tables.push((t.to_string(), Vec::new(), false));
            pos.clear();
            continue;
        }
        let Some((table, items, used)) = tables.last_mut() else {
            continue;
        };
        if let Some(c) = l.strip_prefix(':') {
            let mut w = c.split_whitespace();
            let (name, policy) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
            if policy != "ACCEPT" {
                *used = true;
            }
            items.push(format!("{tool} {table} chain {name} {policy}"));
        } else if let Some(r) = l.strip_prefix("-A ") {
            *used = true;
            let chain = r.split_whitespace().next().unwrap_or("").to_string();
            let n = pos.entry(chain.clone()).or_default();
            items.push(format!("{tool} {table} {chain}#{n} -A {r}"));
            *n += 1;
        }
    }
    for (_, items, used) in tables {
        if used {
            for i in items {
                inv.add(i);
            }
        }
    }
}

/// Removes handles and counter values, recursively.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "handle" | "packets" | "bytes"))
                .map(|(k, v)| (k.clone(), canonical(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Every nftables object outside the iptables-nft tables (which the
/// `iptables-nft-save` listings cover).
fn nftables(node: &Netns, inv: &mut Inventory) -> Result<()> {
    let out = node.exec("nft", &["-j", "list", "ruleset"])?;
    let v: Value = serde_json::from_str(&out).context("nft -j list ruleset")?;
    let xt = ["filter", "nat", "mangle", "raw", "security"];
    let is_xt = |o: &Value| {
        let fam = o["family"].as_str().unwrap_or("");
        let table = o["table"].as_str().or(o["name"].as_str()).unwrap_or("");
        matches!(fam, "ip" | "ip6") && xt.contains(&table)
    };
    let mut pos: BTreeMap<String, usize> = BTreeMap::new();
    for entry in v["nftables"].as_array().into_iter().flatten() {
        let Some((kind, obj)) = entry.as_object().and_then(|m| m.iter().next()) else {
            continue;
        };
        if kind == "metainfo" || is_xt(obj) {
            continue;
        }
        let fam = obj["family"].as_str().unwrap_or("");
        let table = obj["table"].as_str().unwrap_or("");
        let c = canonical(obj);
        match kind.as_str() {
            "table" => inv.add(format!(
                "nft table {fam} {}",
                obj["name"].as_str().unwrap_or("")
            )),
            "rule" => {
                let chain = obj["chain"].as_str().unwrap_or("");
                let key = format!("{fam} {table} {chain}");
                let n = pos.entry(key.clone()).or_default();
                inv.add(format!("nft rule {key}#{n} {c}"));
                *n += 1;
            }
            "set" | "map" => {
                let name = obj["name"].as_str().unwrap_or("");
                let mut head = c.clone();
                if let Some(m) = head.as_object_mut() {
                    m.remove("elem");
                }
                inv.add(format!("nft {kind} {fam} {table} {name} {head}"));
                for e in c["elem"].as_array().into_iter().flatten() {
                    inv.add(format!("nft {kind} {fam} {table} {name} elem {e}"));
                }
            }
            _ => inv.add(format!(
                "nft {kind} {fam} {table} {} {c}",
                obj["name"].as_str().unwrap_or("")
            )),
        }
    }
    Ok(())
}

/// `ipset save`: each set's header without the kernel's sizing, each member.
fn ipsets(text: &str, inv: &mut Inventory) {
    for l in text.lines() {
        if l.starts_with("create ") {
            let mut out = Vec::new();
            let mut it = l.split_whitespace();
            while let Some(w) = it.next() {
                if matches!(w, "hashsize" | "bucketsize" | "initval") {
                    it.next();
                } else {
                    out.push(w);
                }
            }
            inv.add(format!("ipset {}", out.join(" ")));
        } else if !l.trim().is_empty() {
            inv.add(format!("ipset {}", l.trim()));
        }
    }
}

/// The node-wide forwarding switches and, per `cali*` interface, the
/// settings felix (or the CNI plugin) manages.
fn sysctls(node: &Netns, inv: &mut Inventory) -> Result<()> {
    let script = "cd /proc/sys/net && grep -H . ipv4/ip_forward ipv6/conf/all/forwarding \
                  ipv4/conf/cali*/proxy_arp ipv4/conf/cali*/forwarding ipv4/conf/cali*/rp_filter \
                  ipv4/conf/cali*/route_localnet ipv4/neigh/cali*/proxy_delay \
                  ipv6/conf/cali*/forwarding ipv6/conf/cali*/accept_ra ipv6/conf/cali*/proxy_ndp \
                  ipv6/conf/cali*/disable_ipv6 2>/dev/null; true";
    for l in node.exec("sh", &["-c", script])?.lines() {
        inv.add(format!("sysctl {l}"));
    }
    Ok(())
}

/// eBPF state: the pin tree, TCX programs per `cali*` hook, and the policy,
/// IP-set and route map entries (interface indexes as names).
fn bpf(
    node: &Netns,
    root: &Path,
    links: &BTreeMap<u64, String>,
    inv: &mut Inventory,
) -> Result<()> {
    let by_index = |s: &str| -> String {
        // `if<ifindex>_<dir>` -> `if<name>_<dir>`.
        let Some(rest) = s.strip_prefix("if") else {
            return s.to_string();
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<u64>().ok().and_then(|i| links.get(&i)) {
            Some(name) => format!("if{name}{}", &rest[digits.len()..]),
            None => s.to_string(),
        }
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p);
            let shown: Vec<String> = rel.iter().map(|c| by_index(&c.to_string_lossy())).collect();
            inv.add(format!("bpf pin {}", shown.join("/")));
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    let cali: Vec<(u32, String)> = links
        .iter()
        .filter(|(_, n)| n.starts_with("cali"))
        .filter_map(|(&i, n)| Some((u32::try_from(i).ok()?, n.clone())))
        .collect();
    let attached = node
        .spawn_in(move || {
            let ops = felix_bpf::BpfOps::default();
            let mut out = Vec::new();
            for (idx, name) in cali {
                for (hook, h) in [
                    ("ingress", felix_bpf::Hook::Ingress),
                    ("egress", felix_bpf::Hook::Egress),
                ] {
                    let n = felix_bpf::attach::query_tcx(&ops, idx, h).map(|v| v.len());
                    out.push(format!("bpf tcx {name} {hook} {n:?}"));
                }
            }
            out
        })
        .join()
        .map_err(|_| anyhow::anyhow!("TCX query thread panicked"))??;
    for a in attached {
        inv.add(a);
    }
    let ops = felix_bpf::BpfOps::default();
    let maps = felix_bpf::PolicyMaps::open_or_create(&ops, root)?;
    inv.add(format!("bpf policies {}", maps.policies(&ops)?.len()));
    inv.add(format!("bpf ip-set members {}", maps.members(&ops)?.len()));
    let routes = felix_bpf::routes::RouteMaps::open_or_create(&ops, root)?;
    for (net, v) in routes.routes(&ops)? {
        let dev = links
            .get(&u64::from(v.ifindex))
            .cloned()
            .unwrap_or_else(|| v.ifindex.to_string());
        inv.add(format!("bpf route {net} flags={:#x} dev={dev}", v.flags));
    }
    Ok(())
}
