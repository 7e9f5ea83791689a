//! Every valid policy rule loads, in every backend and family.
//!
//! A seeded generator produces random calc-graph `Rule`s over every field
//! and combination the v3 API allows (protocols by name and number and
//! their negations, ports, ranges and named ports, nets and not-nets,
//! selector IP sets, service IP+port sets, ICMP type/code and their
//! negations, IP version, every action including Log under varied log
//! prefixes, rule annotations). Each batch is rendered by the real
//! [`Renderer`] into a policy chain and loaded through the real tools in a
//! throwaway namespace: `iptables-restore` (nft and legacy backends) and
//! `nft`, IPv4 and IPv6, with the referenced IP sets created first. A
//! refused batch is bisected to the rule the tool refuses, and the test
//! fails naming it, its rendering and the tool's error.
//!
//! `FELIX_RULE_SEED` (default 1) replays a run; `FELIX_RULE_COUNT`
//! (default 2,000) sets the rules per backend and family.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use felix_config::{Config, Source};
use felix_proto::rule::{Icmp, NotIcmp};
use felix_proto::{
    protocol::NumberOrName, IcmpTypeAndCode, Policy, PolicyId, PortRange as ProtoPortRange,
    Protocol as ProtoProtocol, Rule as ProtoRule, RuleMetadata,
};

use super::{Backend, RenderConfig, Renderer, TableName};
use crate::dataplane::generictables::Chain;
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::iptables::IptablesRenderer;
use crate::dataplane::kernel::testns::{env_count, SeededRng, TestNetns};
use crate::dataplane::nftables::{legalize_set_name, NftRenderer, NftSetKind};
use crate::dataplane::IpVersion;

/// Rules per proto batch (one restore script or nft transaction).
const BATCH: usize = 500;

/// Selector IP sets (`hash:net`).
const SELECTOR_SETS: [&str; 3] = ["s:sel-a", "s:sel-b", "s:sel-c"];
/// Named-port and service IP sets (`hash:ip,port`).
const PORT_SETS: [&str; 3] = ["n:np-a", "n:np-b", "svc:web"];

// ---- the generator ------------------------------------------------------

/// Protocols as the v3 API spells them.
const PROTO_NAMES: [&str; 6] = ["TCP", "UDP", "SCTP", "UDPLite", "ICMP", "ICMPv6"];

fn gen_protocol(rng: &mut SeededRng) -> ProtoProtocol {
    let n = if rng.one_in(2) {
        NumberOrName::Name(rng.pick(&PROTO_NAMES).to_string())
    } else if rng.one_in(2) {
        NumberOrName::Number(*rng.pick(&[1, 6, 17, 58, 132, 136]))
    } else {
        NumberOrName::Number(1 + rng.below(255) as i32)
    };
    ProtoProtocol {
        number_or_name: Some(n),
    }
}

/// True if the v3 API allows ports with `p` (TCP, UDP, SCTP, UDPLite).
fn supports_ports(p: &ProtoProtocol) -> bool {
    match &p.number_or_name {
        Some(NumberOrName::Name(n)) => {
            ["tcp", "udp", "sctp", "udplite"].contains(&n.to_ascii_lowercase().as_str())
        }
        Some(NumberOrName::Number(n)) => [6, 17, 132, 136].contains(n),
        None => false,
    }
}

/// `Some(6)` for ICMPv6, `Some(4)` for ICMP (by name: the v3 API allows
/// ICMP fields only with the protocol named `ICMP` or `ICMPv6`).
fn icmp_version(p: &ProtoProtocol) -> Option<i32> {
    match &p.number_or_name {
        Some(NumberOrName::Name(n)) if n.eq_ignore_ascii_case("icmp") => Some(4),
        Some(NumberOrName::Name(n)) if n.eq_ignore_ascii_case("icmpv6") => Some(6),
        _ => None,
    }
}

fn gen_ports(rng: &mut SeededRng) -> Vec<ProtoPortRange> {
    // Up to 20 entries: more than one multiport match holds (15 slots).
    let n = 1 + if rng.one_in(4) {
        rng.below(20)
    } else {
        rng.below(3)
    } as usize;
    (0..n)
        .map(|_| {
            let a = rng.below(65536) as i32;
            if rng.one_in(3) {
                let b = rng.below(65536) as i32;
                ProtoPortRange {
                    first: a.min(b),
                    last: a.max(b),
                }
            } else {
                ProtoPortRange { first: a, last: a }
            }
        })
        .collect()
}

fn gen_net(rng: &mut SeededRng, ipv: IpVersion) -> String {
    match ipv {
        IpVersion::V4 => {
            let a = std::net::Ipv4Addr::from(rng.next_u64() as u32);
            if rng.one_in(6) {
                return a.to_string();
            }
            format!("{a}/{}", rng.below(33))
        }
        IpVersion::V6 => {
            let hi = u128::from(rng.next_u64()) << 64;
            let a = std::net::Ipv6Addr::from(hi | u128::from(rng.next_u64()));
            if rng.one_in(6) {
                return a.to_string();
            }
            format!("{a}/{}", rng.below(129))
        }
    }
}

fn gen_nets(rng: &mut SeededRng, ipv: IpVersion) -> Vec<String> {
    if !rng.one_in(4) {
        return Vec::new();
    }
    (0..1 + rng.below(3)).map(|_| gen_net(rng, ipv)).collect()
}

fn gen_ids(rng: &mut SeededRng, pool: &[&str], one_in: u64) -> Vec<String> {
    if !rng.one_in(one_in) {
        return Vec::new();
    }
    let mut v: Vec<String> = (0..1 + rng.below(2))
        .map(|_| rng.pick(pool).to_string())
        .collect();
    v.dedup();
    v
}

fn gen_icmp(rng: &mut SeededRng) -> Option<IcmpTypeAndCode> {
    Some(IcmpTypeAndCode {
        r#type: rng.below(255) as i32,
        code: rng.below(256) as i32,
    })
}

/// Arbitrary text for annotations (quotes, backslashes, non-ASCII, long).
fn gen_text(rng: &mut SeededRng) -> String {
    const PIECES: [&str; 12] = [
        "a", "Z9", " ", "\"", "'", "\\", "é", "日本", "-", "%", ";", "\t",
    ];
    let n = if rng.one_in(8) {
        300
    } else {
        1 + rng.below(12)
    };
    (0..n).map(|_| *rng.pick(&PIECES)).collect()
}

/// A random rule valid for the v3 API whose nets are of `ipv`.
fn gen_rule(rng: &mut SeededRng, ipv: IpVersion) -> ProtoRule {
    let mut r = ProtoRule {
        action: rng
            .pick(&["allow", "deny", "pass", "next-tier", "log", ""])
            .to_string(),
        ..Default::default()
    };
    if !rng.one_in(3) {
        r.protocol = Some(gen_protocol(rng));
    }
    if rng.one_in(5) {
        r.not_protocol = Some(gen_protocol(rng));
    }
    let icmp_v = r.protocol.as_ref().and_then(icmp_version);
    // The v3 API refuses an IP version that conflicts with an ICMP
    // protocol; otherwise any version (or none) goes.
    r.ip_version = match (rng.one_in(2), icmp_v) {
        (false, _) => 0,
        (true, Some(v)) => v,
        (true, None) => i32::from(ipv.number()),
    };
    if r.ip_version != 0 && r.ip_version != i32::from(ipv.number()) && rng.one_in(2) {
        // Mostly rules of this family, so that most rules render.
        r.ip_version = 0;
    }
    if r.protocol.as_ref().is_some_and(supports_ports) {
        if rng.one_in(3) {
            r.src_ports = gen_ports(rng);
        }
        if rng.one_in(2) {
            r.dst_ports = gen_ports(rng);
        }
        if rng.one_in(5) {
            r.not_src_ports = gen_ports(rng);
        }
        if rng.one_in(5) {
            r.not_dst_ports = gen_ports(rng);
        }
        r.src_named_port_ip_set_ids = gen_ids(rng, &PORT_SETS[..2], 8);
        r.dst_named_port_ip_set_ids = gen_ids(rng, &PORT_SETS[..2], 5);
        r.not_src_named_port_ip_set_ids = gen_ids(rng, &PORT_SETS[..2], 10);
        r.not_dst_named_port_ip_set_ids = gen_ids(rng, &PORT_SETS[..2], 10);
    }
    if icmp_v.is_some() {
        r.icmp = match rng.below(3) {
            0 => None,
            1 => Some(Icmp::IcmpType(rng.below(255) as i32)),
            _ => gen_icmp(rng).map(Icmp::IcmpTypeCode),
        };
        r.not_icmp = match rng.below(3) {
            0 => None,
            1 => Some(NotIcmp::NotIcmpType(rng.below(255) as i32)),
            _ => gen_icmp(rng).map(NotIcmp::NotIcmpTypeCode),
        };
    }
    r.src_net = gen_nets(rng, ipv);
    r.dst_net = gen_nets(rng, ipv);
    r.not_src_net = gen_nets(rng, ipv);
    r.not_dst_net = gen_nets(rng, ipv);
    r.src_ip_set_ids = gen_ids(rng, &SELECTOR_SETS, 3);
    r.dst_ip_set_ids = gen_ids(rng, &SELECTOR_SETS, 3);
    r.not_src_ip_set_ids = gen_ids(rng, &SELECTOR_SETS, 6);
    r.not_dst_ip_set_ids = gen_ids(rng, &SELECTOR_SETS, 6);
    r.dst_ip_port_set_ids = gen_ids(rng, &PORT_SETS[2..], 10);
    if rng.one_in(6) {
        let annotations: BTreeMap<String, String> = (0..1 + rng.below(3))
            .map(|i| (format!("example.org/k{i}"), gen_text(rng)))
            .collect();
        r.metadata = Some(RuleMetadata { annotations });
    }
    r
}

/// A log prefix: mostly from the alphabet the v3 API allows
/// (`[a-zA-Z0-9%: /_-]`) with the `%` specifiers the renderer expands;
/// sometimes anything, as the config file and environment take any string.
fn gen_log_prefix(rng: &mut SeededRng) -> String {
    if rng.one_in(4) {
        return gen_text(rng);
    }
    const PIECES: [&str; 12] = [
        "calico", "-", "_", " ", ":", "/", "%k", "%n", "%p", "%t", "%", "X9",
    ];
    let n = if rng.one_in(6) { 40 } else { rng.below(6) };
    (0..n).map(|_| *rng.pick(&PIECES)).collect()
}

/// A renderer under a random Felix configuration (log prefix, rate limit,
/// connection-transition logging, deny action).
fn gen_renderer(rng: &mut SeededRng, backend: Backend, ipv: IpVersion) -> (Renderer, String) {
    let mut kv: BTreeMap<String, String> = BTreeMap::new();
    kv.insert("LogPrefix".into(), gen_log_prefix(rng));
    if rng.one_in(2) {
        kv.insert("LogActionRateLimit".into(), "10/second".into());
        kv.insert(
            "LogActionRateLimitBurst".into(),
            rng.below(10000).to_string(),
        );
    }
    if rng.one_in(2) {
        kv.insert(
            "LogConnectionTransitions".into(),
            "FirstResponseAfterLog".into(),
        );
        if rng.one_in(2) {
            kv.insert("LogConnectionTransitionsPrefix".into(), gen_text(rng));
        }
    }
    let deny = rng.pick(&["DROP", "REJECT"]).to_string();
    kv.insert("IptablesFilterDenyAction".into(), deny.clone());
    kv.insert("NftablesFilterDenyAction".into(), deny);
    let (cfg, errs) = Config::build(&[(Source::ConfigFile, kv.clone())]);
    assert!(errs.is_empty(), "{kv:?}: {errs:?}");
    let r = Renderer::new(RenderConfig::build(&cfg, ipv, backend).unwrap());
    (r, format!("{kv:?}"))
}

/// A random policy identity (kind, namespace, tier feed the log prefix).
fn gen_policy_id(rng: &mut SeededRng, n: usize) -> (PolicyId, String) {
    let kind = rng
        .pick(&[
            "GlobalNetworkPolicy",
            "NetworkPolicy",
            "KubernetesNetworkPolicy",
        ])
        .to_string();
    let namespace = if kind == "GlobalNetworkPolicy" {
        String::new()
    } else {
        format!("ns-{}", rng.below(100))
    };
    let tier = rng.pick(&["default", "security.tier-1"]).to_string();
    let id = PolicyId {
        name: format!("{tier}.rules-{n}"),
        namespace,
        kind,
    };
    (id, tier)
}

// ---- loading ------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loader {
    IptablesNft,
    IptablesLegacy,
    Nft,
}

impl Loader {
    fn backend(self) -> Backend {
        match self {
            Loader::Nft => Backend::Nftables,
            _ => Backend::Iptables,
        }
    }

    fn restore(self, ipv: IpVersion) -> &'static str {
        match (self, ipv) {
            (Loader::IptablesNft, IpVersion::V4) => "iptables-nft-restore",
            (Loader::IptablesNft, IpVersion::V6) => "ip6tables-nft-restore",
            (Loader::IptablesLegacy, IpVersion::V4) => "iptables-legacy-restore",
            (Loader::IptablesLegacy, IpVersion::V6) => "ip6tables-legacy-restore",
            (Loader::Nft, _) => "nft",
        }
    }
}

fn nft_family(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "ip",
        IpVersion::V6 => "ip6",
    }
}

/// Runs `program args` in the namespace with `stdin`; `Err(stderr)` on failure.
fn run(ns: &TestNetns, program: &str, args: &[&str], stdin: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A tool that refuses a line may exit before reading the rest.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Creates the IP sets the generated rules reference.
fn create_sets(ns: &TestNetns, loader: Loader, ipv: IpVersion) {
    let names = IpVersionConfig::new(ipv);
    let sets = SELECTOR_SETS
        .iter()
        .map(|id| (*id, "hash:net", NftSetKind::Net))
        .chain(
            PORT_SETS
                .iter()
                .map(|id| (*id, "hash:ip,port", NftSetKind::IpPort)),
        );
    if loader == Loader::Nft {
        let fam = nft_family(ipv);
        let mut script = format!("add table {fam} calico\n");
        for (id, _, kind) in sets {
            let n = legalize_set_name(&names.name_for_main_ipset(id));
            script.push_str(&format!(
                "add set {fam} calico {n} {{ {} }}\n",
                kind.declaration(ipv)
            ));
        }
        run(ns, "nft", &["-f", "-"], &script).unwrap();
    } else {
        for (id, ty, _) in sets {
            let n = names.name_for_main_ipset(id);
            // The two iptables backends share the kernel's IP sets.
            let _ = run(
                ns,
                "ipset",
                &["create", &n, ty, "family", names.family(), "-exist"],
                "",
            );
        }
    }
}

/// The load script for `chains` in `loader`'s syntax.
fn script(loader: Loader, ipv: IpVersion, chains: &[Chain]) -> String {
    let mut s = String::new();
    if loader == Loader::Nft {
        let fam = nft_family(ipv);
        let r = NftRenderer::new(ipv, "cali:");
        for c in chains {
            s.push_str(&format!("add chain {fam} calico {}\n", c.name));
            for (rule, hash) in c.rules.iter().zip(r.hashes(&c.name, &c.rules)) {
                s.push_str(&r.add_rule(fam, "calico", &c.name, &hash, rule));
                s.push('\n');
            }
        }
    } else {
        let r = IptablesRenderer::default();
        s.push_str("*filter\n");
        for c in chains {
            s.push_str(&format!(":{} - [0:0]\n", c.name));
        }
        for c in chains {
            for (rule, hash) in c.rules.iter().zip(r.hashes(&c.name, &c.rules)) {
                s.push_str(&r.line(&format!("-A {}", c.name), &hash, rule));
                s.push('\n');
            }
        }
        s.push_str("COMMIT\n");
    }
    s
}

/// One backend and family: a namespace with the sets, and the renderer of
/// the current batch.
struct Run<'a> {
    ns: &'a TestNetns,
    loader: Loader,
    ipv: IpVersion,
    renderer: Renderer,
    /// The Felix configuration of `renderer`, for failure messages.
    config: String,
    id: PolicyId,
    tier: String,
    loads: Cell<usize>,
    /// Kernel rules loaded by successful loads.
    kernel_rules: Cell<usize>,
}

impl Run<'_> {
    /// Renders `rules` as one policy (a fresh chain name per load) and
    /// loads it; the script and the tool's error on refusal.
    fn load(&self, rules: &[ProtoRule]) -> Result<(), (String, String)> {
        let n = self.loads.get();
        self.loads.set(n + 1);
        let id = PolicyId {
            name: format!("{}-{n}", self.id.name),
            ..self.id.clone()
        };
        let policy = Policy {
            inbound_rules: rules.to_vec(),
            tier: self.tier.clone(),
            ..Default::default()
        };
        let names = IpVersionConfig::new(self.ipv);
        let namer = |id: &str| names.name_for_main_ipset(id);
        let chains = self
            .renderer
            .policy_chains_in(TableName::Filter, &id, &policy, &namer);
        let text = script(self.loader, self.ipv, &chains);
        let rendered: usize = chains.iter().map(|c| c.rules.len()).sum();
        run(self.ns, self.program(), self.args(), &text).map_err(|e| (text, e))?;
        self.kernel_rules.set(self.kernel_rules.get() + rendered);
        Ok(())
    }

    /// Loads the static chain whose rules depend on the log settings
    /// (`cali-log-conn`, present with connection-transition logging).
    fn load_log_conn_chain(&self) {
        let chains: Vec<Chain> = self
            .renderer
            .static_chains(TableName::Filter)
            .into_iter()
            .filter(|c| c.name.ends_with(super::CHAIN_LOG_CONN))
            .collect();
        if chains.is_empty() {
            return;
        }
        let text = script(self.loader, self.ipv, &chains);
        if let Err(e) = run(self.ns, self.program(), self.args(), &text) {
            panic!(
                "{:?} {:?} refuses the log chain under config {}:\n{text}\nerror:\n{e}",
                self.loader, self.ipv, self.config
            );
        }
    }

    fn program(&self) -> &'static str {
        self.loader.restore(self.ipv)
    }

    fn args(&self) -> &'static [&'static str] {
        match self.loader {
            Loader::Nft => &["-f", "-"],
            _ => &["--noflush"],
        }
    }

    /// Loads `rules`; on refusal finds a rule refused on its own and fails
    /// naming it.
    fn load_or_name_culprit(&self, rules: &[ProtoRule]) {
        let Err((_, batch_err)) = self.load(rules) else {
            return;
        };
        let mut cur = rules;
        while cur.len() > 1 {
            let (a, b) = cur.split_at(cur.len() / 2);
            if self.load(a).is_err() {
                cur = a;
            } else if self.load(b).is_err() {
                cur = b;
            } else {
                break;
            }
        }
        let culprit = if cur.len() == 1 {
            self.load(cur).err().map(|e| (cur[0].clone(), e))
        } else {
            cur.iter().find_map(|r| {
                self.load(std::slice::from_ref(r))
                    .err()
                    .map(|e| (r.clone(), e))
            })
        };
        match culprit {
            Some((rule, (text, err))) => panic!(
                "{:?} {:?} refuses a valid rule:\n{rule:#?}\nunder config {}\nrendered as:\n{text}\nerror:\n{err}",
                self.loader, self.ipv, self.config
            ),
            None => panic!(
                "{:?} {:?} refuses a batch but no single rule of it:\n{batch_err}",
                self.loader, self.ipv
            ),
        }
    }
}

fn every_valid_rule_loads(loader: Loader) {
    let ns = TestNetns::create();
    let count = env_count("FELIX_RULE_COUNT", 2000);
    let seed = std::env::var("FELIX_RULE_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1u64);
    eprintln!("FELIX_RULE_SEED={seed} FELIX_RULE_COUNT={count}");
    for ipv in [IpVersion::V4, IpVersion::V6] {
        let started = felix_actors::clock::real_now();
        create_sets(&ns, loader, ipv);
        // The same rules for every backend of a family.
        let mut rng = SeededRng::new(seed ^ u64::from(ipv.number()));
        let mut done = 0;
        let mut batch_no = 0;
        let mut kernel_rules = 0;
        while done < count {
            let n = BATCH.min(count - done);
            let (id, tier) = gen_policy_id(&mut rng, batch_no);
            let (renderer, config) = gen_renderer(&mut rng, loader.backend(), ipv);
            let run = Run {
                ns: &ns,
                loader,
                ipv,
                renderer,
                config,
                id,
                tier,
                loads: Cell::new(0),
                kernel_rules: Cell::new(0),
            };
            let rules: Vec<ProtoRule> = (0..n).map(|_| gen_rule(&mut rng, ipv)).collect();
            run.load_log_conn_chain();
            run.load_or_name_culprit(&rules);
            kernel_rules += run.kernel_rules.get();
            done += n;
            batch_no += 1;
        }
        eprintln!(
            "{loader:?} {ipv:?}: {count} random rules loaded as {kernel_rules} kernel rules in {:?}",
            started.elapsed()
        );
        // Most generated rules are of this family and match something, so
        // they render (a rule renders as at least two kernel rules).
        assert!(
            kernel_rules >= count,
            "too few rules rendered: {kernel_rules} for {count}"
        );
    }
}

#[test]
fn kernel_every_valid_rule_loads_with_iptables_nft_restore() {
    felix_netns::require!(netns ["iptables-nft-restore", "ip6tables-nft-restore", "ipset"]);
    every_valid_rule_loads(Loader::IptablesNft);
}

#[test]
fn kernel_every_valid_rule_loads_with_iptables_legacy_restore() {
    felix_netns::require!(netns ["iptables-legacy-restore", "ip6tables-legacy-restore", "ipset"]);
    every_valid_rule_loads(Loader::IptablesLegacy);
}

#[test]
fn kernel_every_valid_rule_loads_with_nft() {
    felix_netns::require!(netns["nft"]);
    every_valid_rule_loads(Loader::Nft);
}
