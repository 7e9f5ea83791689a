//! A foreign writer sharing the node with felix, the way kube-proxy or
//! Tailscale do: its own iptables-nft chains and rules in the shared tables
//! (filter and nat, jumped to from the built-in chains), legacy iptables
//! rules, a native nftables table with a base chain and a set, routes and
//! IP sets, each added and removed at random while felix is churned,
//! killed and restarted.
//!
//! Invariant checked (`foreign-untouched`): before every change it makes,
//! the writer reads the kernel back and every object it holds is there with
//! exactly the content it wrote; at the end it removes all of it (so the
//! final inventory compares felix's state alone) and checks that too.
//! Nothing here matches any traffic of the soak's workloads (sources in
//! 198.51.100.0/24 and 2001:db8:5::/64, documentation ranges).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::Rng;

use super::{lock, Shared};
use felix_netns::Netns;

/// Slots per kind of object.
const SLOTS: u8 = 4;

/// A kind of foreign object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// An iptables-nft chain in filter with a rule, jumped to from FORWARD,
    /// and a rule in nat POSTROUTING.
    IptNft,
    /// A legacy iptables rule in FORWARD.
    Legacy,
    /// A chain and a set in the native table `inet soakforeign`.
    Nft,
    /// An IPv4 and an IPv6 route via the uplink's gateway.
    Route,
    /// An IP set with one member.
    Ipset,
}

const KINDS: [Kind; 5] = [
    Kind::IptNft,
    Kind::Legacy,
    Kind::Nft,
    Kind::Route,
    Kind::Ipset,
];

fn v4(n: u8) -> String {
    format!("198.51.100.{}", 10 + n)
}

fn v6(n: u8) -> String {
    format!("2001:db8:5::{}", 10 + n)
}

/// The `iptables` rules the writer appends for `k` (tool, table, chain, match and target);
/// the same arguments remove them with `-D` in place of `-A`.
fn rules(k: Kind, n: u8) -> Vec<(&'static str, Vec<String>)> {
    let src = format!("{}/32", v4(n));
    let chain = format!("KUBE-SOAK-{n}");
    let rule = |table: &str, parent: &str, matches: &[&str], comment: String, target: &str| {
        let mut a: Vec<String> = ["-t", table, "-A", parent].map(String::from).to_vec();
        a.extend(matches.iter().map(|m| m.to_string()));
        a.extend(["-m", "comment", "--comment"].map(String::from));
        a.push(comment);
        a.extend(["-j".to_string(), target.to_string()]);
        a
    };
    match k {
        Kind::IptNft => vec![
            (
                "iptables-nft",
                rule("filter", "FORWARD", &[], format!("soak-fw-{n}"), &chain),
            ),
            (
                "iptables-nft",
                rule(
                    "nat",
                    "POSTROUTING",
                    &["-s", &src],
                    format!("soak-nat-{n}"),
                    "RETURN",
                ),
            ),
        ],
        Kind::Legacy => vec![(
            "iptables-legacy",
            rule(
                "filter",
                "FORWARD",
                &["-s", &src],
                format!("soak-legacy-{n}"),
                "ACCEPT",
            ),
        )],
        Kind::Nft | Kind::Route | Kind::Ipset => Vec::new(),
    }
}

/// Runs `rules(k, n)` with `verb` (`-A` or `-D`).
fn run_rules(node: &Netns, k: Kind, n: u8, verb: &str) -> Result<()> {
    for (tool, mut args) in rules(k, n) {
        args[2] = verb.to_string();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.exec(tool, &args)?;
    }
    Ok(())
}

/// `ip route` arguments of the writer's two static routes, with `verb` (`add` or `del`).
fn routes(n: u8, verb: &'static str) -> [Vec<String>; 2] {
    let route = |six: bool, dst: String, via: &str| {
        let mut a: Vec<String> = if six { vec!["-6".into()] } else { Vec::new() };
        a.extend(["route", verb].map(String::from));
        a.extend([
            dst,
            "via".into(),
            via.into(),
            "proto".into(),
            "static".into(),
        ]);
        a
    };
    [
        route(false, format!("{}/32", v4(n)), "192.0.2.254"),
        route(true, format!("{}/128", v6(n)), "2001:db8:f::fe"),
    ]
}

fn run_routes(node: &Netns, n: u8, verb: &'static str) -> Result<()> {
    for args in routes(n, verb) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.ip(&args)?;
    }
    Ok(())
}

fn add(node: &Netns, k: Kind, n: u8) -> Result<()> {
    match k {
        Kind::IptNft => {
            let (src, chain) = (format!("{}/32", v4(n)), format!("KUBE-SOAK-{n}"));
            node.exec("iptables-nft", &["-t", "filter", "-N", &chain])?;
            node.exec(
                "iptables-nft",
                &["-t", "filter", "-A", &chain, "-s", &src, "-j", "RETURN"],
            )?;
            run_rules(node, k, n, "-A")?;
        }
        Kind::Legacy => run_rules(node, k, n, "-A")?,
        Kind::Nft => {
            node.exec(
                "nft",
                &[&format!(
                    "add table inet soakforeign; \
                     add chain inet soakforeign soakfwd {{ type filter hook forward priority 5; policy accept; }}; \
                     add set inet soakforeign s{n} {{ type ipv4_addr; }}; \
                     add element inet soakforeign s{n} {{ {} }}; \
                     add chain inet soakforeign c{n}; \
                     add rule inet soakforeign c{n} ip saddr @s{n} counter return; \
                     add rule inet soakforeign soakfwd ip saddr {} jump c{n}",
                    v4(n),
                    v4(n)
                )],
            )?;
        }
        Kind::Route => run_routes(node, n, "add")?,
        Kind::Ipset => {
            let set = format!("soak-foreign-{n}");
            node.exec("ipset", &["create", &set, "hash:ip"])?;
            node.exec("ipset", &["add", &set, &v4(n)])?;
        }
    }
    Ok(())
}

fn remove(node: &Netns, k: Kind, n: u8) -> Result<()> {
    match k {
        Kind::IptNft => {
            // The jumps go before the chain they reach.
            run_rules(node, k, n, "-D")?;
            let chain = format!("KUBE-SOAK-{n}");
            node.exec("iptables-nft", &["-t", "filter", "-F", &chain])?;
            node.exec("iptables-nft", &["-t", "filter", "-X", &chain])?;
        }
        Kind::Legacy => run_rules(node, k, n, "-D")?,
        Kind::Nft => {
            // The jump in `soakfwd` goes first (by its handle), then the chain and set.
            let listing = node.exec(
                "nft",
                &["-a", "list", "chain", "inet", "soakforeign", "soakfwd"],
            )?;
            let handle = listing
                .lines()
                .find(|l| l.contains(&format!("jump c{n} ")) || l.ends_with(&format!("jump c{n}")))
                .and_then(|l| l.rsplit("# handle ").next())
                .map(|h| h.trim().to_string())
                .with_context(|| format!("no jump to c{n} in:\n{listing}"))?;
            node.exec(
                "nft",
                &[&format!(
                    "delete rule inet soakforeign soakfwd handle {handle}; \
                     delete chain inet soakforeign c{n}; delete set inet soakforeign s{n}"
                )],
            )?;
        }
        Kind::Route => run_routes(node, n, "del")?,
        Kind::Ipset => {
            node.exec("ipset", &["destroy", &format!("soak-foreign-{n}")])?;
        }
    }
    Ok(())
}

/// The kernel as the writer reads it back: one listing per tool.
struct Readback {
    ipt_nft: String,
    legacy: String,
    nft: String,
    routes: String,
    ipsets: String,
}

fn read_back(node: &Netns) -> Result<Readback> {
    Ok(Readback {
        ipt_nft: node.exec("iptables-nft-save", &[])?,
        legacy: node.exec("iptables-legacy-save", &[])?,
        nft: node
            .exec_output("nft", &["list", "table", "inet", "soakforeign"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())?,
        routes: format!(
            "{}{}",
            node.ip(&["-4", "route", "show", "proto", "static"])?,
            node.ip(&["-6", "route", "show", "proto", "static"])?
        ),
        ipsets: node.exec("ipset", &["save"])?,
    })
}

/// What of object (k, n) is missing from `rb` (empty when it is all there).
fn missing(rb: &Readback, k: Kind, n: u8) -> Vec<String> {
    let src = format!("{}/32", v4(n));
    let want: Vec<(&str, String)> = match k {
        Kind::IptNft => vec![
            (rb.ipt_nft.as_str(), format!(":KUBE-SOAK-{n} ")),
            (
                rb.ipt_nft.as_str(),
                format!("-A KUBE-SOAK-{n} -s {src} -j RETURN"),
            ),
            (
                &rb.ipt_nft,
                format!("-A FORWARD -m comment --comment soak-fw-{n} -j KUBE-SOAK-{n}"),
            ),
            (
                &rb.ipt_nft,
                format!("-A POSTROUTING -s {src} -m comment --comment soak-nat-{n} -j RETURN"),
            ),
        ],
        Kind::Legacy => vec![(
            &rb.legacy,
            format!("-A FORWARD -s {src} -m comment --comment soak-legacy-{n} -j ACCEPT"),
        )],
        Kind::Nft => vec![
            (rb.nft.as_str(), format!("set s{n} ")),
            (rb.nft.as_str(), format!("elements = {{ {} }}", v4(n))),
            (rb.nft.as_str(), format!("chain c{n} ")),
            (rb.nft.as_str(), format!("ip saddr @s{n} counter")),
            (rb.nft.as_str(), format!("ip saddr {} jump c{n}", v4(n))),
        ],
        Kind::Route => vec![
            (rb.routes.as_str(), format!("{} via 192.0.2.254", v4(n))),
            (rb.routes.as_str(), format!("{} via 2001:db8:f::fe", v6(n))),
        ],
        Kind::Ipset => vec![
            (
                rb.ipsets.as_str(),
                format!("create soak-foreign-{n} hash:ip"),
            ),
            (
                rb.ipsets.as_str(),
                format!("add soak-foreign-{n} {}", v4(n)),
            ),
        ],
    };
    want.into_iter()
        .filter(|(text, line)| !text.contains(line.as_str()))
        .map(|(_, line)| line)
        .collect()
}

/// Runs until `stop`: every `period`, checks every object it holds, then
/// adds or removes one; at the end removes all of them. Returns an error
/// only when a tool fails for the writer itself (not a violation).
pub fn run(
    node: &Netns,
    shared: &Shared,
    period: Duration,
    stop: &AtomicBool,
    mut rng: StdRng,
) -> Result<()> {
    let mut held: BTreeSet<(Kind, u8)> = BTreeSet::new();
    let check = |held: &BTreeSet<(Kind, u8)>, when: &str| -> Result<()> {
        let rb = read_back(node)?;
        let at = felix_actors::clock::real_now();
        for &(k, n) in held {
            let gone = missing(&rb, k, n);
            if !gone.is_empty() {
                let tl = lock(&shared.timeline);
                let detail = format!(
                    "{k:?} #{n} changed behind the writer's back ({when}, read at {}): missing {gone:?}; {}",
                    tl.rel(at),
                    tl.around(at)
                );
                drop(tl);
                lock(&shared.report).violate("foreign-untouched", detail);
            }
        }
        lock(&shared.report).foreign_checks += 1;
        Ok(())
    };
    while !stop.load(Ordering::Relaxed) {
        check(&held, "during the soak")?;
        let k = KINDS[rng.random_range(0..KINDS.len())];
        let n = rng.random_range(0..SLOTS);
        if held.remove(&(k, n)) {
            remove(node, k, n).with_context(|| format!("removing foreign {k:?} #{n}"))?;
        } else {
            add(node, k, n).with_context(|| format!("adding foreign {k:?} #{n}"))?;
            held.insert((k, n));
        }
        lock(&shared.report).foreign_ops += 1;
        std::thread::sleep(period);
    }
    check(&held, "at the end")?;
    for &(k, n) in &held {
        remove(node, k, n).with_context(|| format!("removing foreign {k:?} #{n}"))?;
    }
    // An empty native table is the writer's too.
    let _ = node.exec("nft", &["delete table inet soakforeign"]);
    Ok(())
}
