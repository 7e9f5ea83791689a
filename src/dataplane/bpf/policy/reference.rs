//! A reference evaluator of the calc graph's policy semantics, written from the *tables
//! renderer's rules (not from the compiler), and a random generator of (policy, packet)
//! cases for the differential tests.

use std::collections::BTreeMap;
use std::net::IpAddr;

use felix_proto::protocol::NumberOrName;
use felix_proto::rule::{Icmp, NotIcmp};
use felix_proto::{IcmpTypeAndCode, PolicyId, PortRange, Protocol, Rule, TierInfo};
use ipnet::IpNet;

/// A packet's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefPkt {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub icmp: (u8, u8),
}

impl RefPkt {
    pub fn v6(&self) -> bool {
        self.src.is_ipv6()
    }
    fn has_ports(&self) -> bool {
        matches!(self.proto, 6 | 17 | 132)
    }
    fn is_icmp(&self) -> bool {
        self.proto == if self.v6() { 58 } else { 1 }
    }
}

/// IP sets by ID: members as the calc graph sends them.
pub type RefSets = BTreeMap<String, Vec<String>>;

fn member_matches(m: &str, addr: IpAddr, proto: u8, port: u16) -> bool {
    if let Some((a, pp)) = m.rsplit_once(',') {
        let a = a.trim_start_matches('[').trim_end_matches(']');
        let Some((p, n)) = pp.split_once(':') else {
            return false;
        };
        let pn = match p {
            "tcp" => 6,
            "udp" => 17,
            "sctp" => 132,
            _ => return false,
        };
        return a.parse::<IpAddr>().ok() == Some(addr) && pn == proto && n.parse() == Ok(port);
    }
    match m.parse::<IpNet>() {
        Ok(n) => n.contains(&addr),
        Err(_) => m.parse::<IpAddr>().ok() == Some(addr),
    }
}

fn in_set(sets: &RefSets, id: &str, addr: IpAddr, p: &RefPkt, port: u16) -> bool {
    sets.get(id)
        .is_some_and(|ms| ms.iter().any(|m| member_matches(m, addr, p.proto, port)))
}

fn proto_num(p: &Option<Protocol>) -> Option<Option<u8>> {
    match p.as_ref().and_then(|p| p.number_or_name.as_ref()) {
        None => Some(None),
        Some(NumberOrName::Number(n)) => u8::try_from(*n).ok().map(Some),
        Some(NumberOrName::Name(n)) => match n.to_ascii_lowercase().as_str() {
            "tcp" => Some(Some(6)),
            "udp" => Some(Some(17)),
            "icmp" => Some(Some(1)),
            "icmpv6" => Some(Some(58)),
            _ => None,
        },
    }
}

/// What a rule does to the packet: `None` the rule is absent for the packet's IP version (or
/// does not match), `Some(action)` it matches. An unrenderable rule matches as "deny".
pub fn rule_verdict(r: &Rule, p: &RefPkt, sets: &RefSets) -> Option<String> {
    let v6 = p.v6();
    let ipv = if v6 { 6 } else { 4 };
    if r.ip_version != 0 && r.ip_version != ipv {
        return None;
    }
    // Nets of the family; a list without any: the rule is absent.
    let fam = |v: &[String]| -> Vec<IpNet> {
        v.iter()
            .filter(|s| s.contains(':') == v6)
            .filter_map(|s| s.parse::<IpNet>().ok())
            .collect()
    };
    let (sn, dn, nsn, ndn) = (
        fam(&r.src_net),
        fam(&r.dst_net),
        fam(&r.not_src_net),
        fam(&r.not_dst_net),
    );
    for (list, kept, neg) in [
        (&r.src_net, &sn, false),
        (&r.dst_net, &dn, false),
        (&r.not_src_net, &nsn, true),
        (&r.not_dst_net, &ndn, true),
    ] {
        if !list.is_empty()
            && (kept.is_empty() || (neg && kept.iter().any(|n| n.prefix_len() == 0)))
        {
            return None;
        }
    }
    let (Some(proto), Some(not_proto)) = (proto_num(&r.protocol), proto_num(&r.not_protocol))
    else {
        return Some("deny".into());
    };
    let other_icmp = if v6 { 1 } else { 58 };
    if (r.icmp.is_some() || r.not_icmp.is_some()) && proto == Some(other_icmp) {
        return None;
    }
    if proto.is_some() && proto == not_proto {
        return None;
    }
    let not_proto = if proto.is_some() { None } else { not_proto };
    let action = match r.action.as_str() {
        "" | "allow" => "allow",
        "deny" => "deny",
        "pass" | "next-tier" => "pass",
        "log" => "log",
        _ => return Some("deny".into()),
    };
    let in_ports = |v: &[PortRange], port: u16| {
        p.has_ports()
            && v.iter()
                .any(|r| i32::from(port) >= r.first && i32::from(port) <= r.last)
    };
    let ok = proto.is_none_or(|x| x == p.proto)
        && (sn.is_empty() || sn.iter().any(|n| n.contains(&p.src)))
        && (dn.is_empty() || dn.iter().any(|n| n.contains(&p.dst)))
        && r.src_ip_set_ids
            .iter()
            .all(|s| in_set(sets, s, p.src, p, p.sport))
        && r.dst_ip_set_ids
            .iter()
            .all(|s| in_set(sets, s, p.dst, p, p.dport))
        && r.dst_ip_port_set_ids
            .iter()
            .all(|s| in_set(sets, s, p.dst, p, p.dport))
        && ((r.src_ports.is_empty() && r.src_named_port_ip_set_ids.is_empty())
            || in_ports(&r.src_ports, p.sport)
            || r.src_named_port_ip_set_ids
                .iter()
                .any(|s| in_set(sets, s, p.src, p, p.sport)))
        && ((r.dst_ports.is_empty() && r.dst_named_port_ip_set_ids.is_empty())
            || in_ports(&r.dst_ports, p.dport)
            || r.dst_named_port_ip_set_ids
                .iter()
                .any(|s| in_set(sets, s, p.dst, p, p.dport)))
        && match &r.icmp {
            None => true,
            Some(Icmp::IcmpType(t)) => p.is_icmp() && i32::from(p.icmp.0) == *t,
            Some(Icmp::IcmpTypeCode(tc)) => {
                p.is_icmp() && i32::from(p.icmp.0) == tc.r#type && i32::from(p.icmp.1) == tc.code
            }
        }
        && not_proto.is_none_or(|x| x != p.proto)
        && !nsn.iter().any(|n| n.contains(&p.src))
        && !ndn.iter().any(|n| n.contains(&p.dst))
        && !r
            .not_src_ip_set_ids
            .iter()
            .any(|s| in_set(sets, s, p.src, p, p.sport))
        && !r
            .not_dst_ip_set_ids
            .iter()
            .any(|s| in_set(sets, s, p.dst, p, p.dport))
        && !in_ports(&r.not_src_ports, p.sport)
        && !in_ports(&r.not_dst_ports, p.dport)
        && !r
            .not_src_named_port_ip_set_ids
            .iter()
            .any(|s| in_set(sets, s, p.src, p, p.sport))
        && !r
            .not_dst_named_port_ip_set_ids
            .iter()
            .any(|s| in_set(sets, s, p.dst, p, p.dport))
        && match &r.not_icmp {
            None => true,
            Some(NotIcmp::NotIcmpType(t)) => !(p.is_icmp() && i32::from(p.icmp.0) == *t),
            Some(NotIcmp::NotIcmpTypeCode(tc)) => {
                !(p.is_icmp() && i32::from(p.icmp.0) == tc.r#type && i32::from(p.icmp.1) == tc.code)
            }
        };
    ok.then(|| action.to_string())
}

/// A policy's verdict: "allow", "deny", "pass" or `None` (no rule decided).
pub fn rules_verdict(rules: &[Rule], p: &RefPkt, sets: &RefSets) -> Option<String> {
    rules
        .iter()
        .filter_map(|r| rule_verdict(r, p, sets))
        .find(|a| a != "log")
}

/// An endpoint's verdict in one direction: tiers, then profiles, then default deny.
pub fn endpoint_allows(
    tiers: &[TierInfo],
    profiles: &[String],
    policies: &BTreeMap<String, Vec<Rule>>,
    profile_rules: &BTreeMap<String, Vec<Rule>>,
    ingress: bool,
    p: &RefPkt,
    sets: &RefSets,
) -> bool {
    for t in tiers {
        let pols: Vec<&PolicyId> = if ingress {
            &t.ingress_policies
        } else {
            &t.egress_policies
        }
        .iter()
        .filter(|id| !id.kind.starts_with("Staged"))
        .collect();
        if pols.is_empty() {
            continue;
        }
        let mut passed = false;
        for id in pols {
            let rules = policies
                .get(&crate::dataplane::rules::policy_id_string(id))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            match rules_verdict(rules, p, sets).as_deref() {
                Some("allow") => return true,
                Some("deny") => return false,
                Some("pass") => {
                    passed = true;
                    break;
                }
                _ => {}
            }
        }
        if !passed && !t.default_action.eq_ignore_ascii_case("pass") {
            return false;
        }
    }
    for name in profiles {
        let rules = profile_rules.get(name).map(Vec::as_slice).unwrap_or(&[]);
        match rules_verdict(rules, p, sets).as_deref() {
            Some("allow") => return true,
            Some("deny") => return false,
            _ => {}
        }
    }
    false
}

/// A small deterministic generator (xorshift).
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

const V4_NETS: &[&str] = &[
    "10.0.0.0/8",
    "10.1.0.0/16",
    "10.1.2.3/32",
    "192.168.0.0/16",
    "0.0.0.0/0",
];
const V6_NETS: &[&str] = &[
    "fd00::/8",
    "fd00:1::/32",
    "fd00:1::3/128",
    "2001:db8::/32",
    "::/0",
];
const ADDRS4: &[&str] = &["10.1.2.3", "10.1.9.9", "10.2.0.1", "192.168.1.1", "8.8.8.8"];
const ADDRS6: &[&str] = &[
    "fd00:1::3",
    "fd00:1::9",
    "fd00:2::1",
    "2001:db8::1",
    "2001:4860::8888",
];
const MEMBERS: &[&str] = &[
    "10.1.0.0/16",
    "10.1.2.3",
    "192.168.1.1",
    "0.0.0.0/0",
    "fd00:1::/32",
    "fd00:1::3",
    "2001:db8::1",
];
pub const SET_IDS: &[&str] = &["s:a", "s:b", "s:c"];
pub const NAMED_IDS: &[&str] = &["n:web", "n:dns"];

/// The IP sets the generated rules refer to.
pub fn gen_sets(g: &mut Gen) -> RefSets {
    let mut sets = RefSets::new();
    for id in SET_IDS {
        let mut ms = Vec::new();
        for _ in 0..g.below(3) {
            ms.push((*g.pick(MEMBERS)).to_string());
        }
        sets.insert((*id).to_string(), ms);
    }
    let named = |g: &mut Gen, port: u16| -> Vec<String> {
        let mut ms = Vec::new();
        for _ in 0..1 + g.below(2) {
            let a = if g.chance(50) {
                *g.pick(ADDRS4)
            } else {
                *g.pick(ADDRS6)
            };
            let p = *g.pick(&["tcp", "udp"]);
            let a = if a.contains(':') {
                format!("[{a}]")
            } else {
                a.to_string()
            };
            ms.push(format!("{a},{p}:{port}"));
        }
        ms
    };
    sets.insert("n:web".into(), named(g, 80));
    sets.insert("n:dns".into(), named(g, 53));
    sets
}

fn gen_ports(g: &mut Gen) -> Vec<PortRange> {
    (0..1 + g.below(3))
        .map(|_| {
            let first = *g.pick(&[53i32, 80, 443, 1000, 40000]);
            let last = if g.chance(30) {
                first + g.below(2000) as i32
            } else {
                first
            };
            PortRange { first, last }
        })
        .collect()
}

fn gen_nets(g: &mut Gen) -> Vec<String> {
    (0..1 + g.below(2))
        .map(|_| {
            let src = if g.chance(60) { V4_NETS } else { V6_NETS };
            (*g.pick(src)).to_string()
        })
        .collect()
}

fn proto(g: &mut Gen) -> Option<Protocol> {
    let choices = [
        NumberOrName::Name("tcp".into()),
        NumberOrName::Name("udp".into()),
        NumberOrName::Number(1),
        NumberOrName::Name("icmpv6".into()),
    ];
    let p = g.pick(&choices).clone();
    Some(Protocol {
        number_or_name: Some(p),
    })
}

/// One random rule using every field with some probability.
pub fn gen_rule(g: &mut Gen) -> Rule {
    let mut r = Rule {
        action: (*g.pick(&["allow", "deny", "pass", "log", "allow", "allow"])).to_string(),
        ..Rule::default()
    };
    if g.chance(15) {
        r.ip_version = *g.pick(&[4, 6]);
    }
    if g.chance(50) {
        r.protocol = proto(g);
    }
    if g.chance(15) {
        r.not_protocol = proto(g);
    }
    let ids = |g: &mut Gen, from: &[&str]| -> Vec<String> {
        (0..1 + g.below(2))
            .map(|_| (*g.pick(from)).to_string())
            .collect()
    };
    if g.chance(20) {
        r.src_net = gen_nets(g);
    }
    if g.chance(20) {
        r.dst_net = gen_nets(g);
    }
    if g.chance(10) {
        r.not_src_net = gen_nets(g);
    }
    if g.chance(10) {
        r.not_dst_net = gen_nets(g);
    }
    if g.chance(25) {
        r.dst_ports = gen_ports(g);
    }
    if g.chance(10) {
        r.src_ports = gen_ports(g);
    }
    if g.chance(10) {
        r.not_dst_ports = gen_ports(g);
    }
    if g.chance(5) {
        r.not_src_ports = gen_ports(g);
    }
    if g.chance(15) {
        r.src_ip_set_ids = ids(g, SET_IDS);
    }
    if g.chance(15) {
        r.dst_ip_set_ids = ids(g, SET_IDS);
    }
    if g.chance(8) {
        r.not_src_ip_set_ids = ids(g, SET_IDS);
    }
    if g.chance(8) {
        r.not_dst_ip_set_ids = ids(g, SET_IDS);
    }
    if g.chance(10) {
        r.dst_named_port_ip_set_ids = ids(g, NAMED_IDS);
    }
    if g.chance(5) {
        r.src_named_port_ip_set_ids = ids(g, NAMED_IDS);
    }
    if g.chance(5) {
        r.not_dst_named_port_ip_set_ids = ids(g, NAMED_IDS);
    }
    if g.chance(8) {
        r.dst_ip_port_set_ids = ids(g, NAMED_IDS);
    }
    if g.chance(10) {
        r.icmp = Some(if g.chance(50) {
            Icmp::IcmpType(*g.pick(&[0, 8, 128, 129]))
        } else {
            Icmp::IcmpTypeCode(IcmpTypeAndCode {
                r#type: *g.pick(&[8, 128]),
                code: *g.pick(&[0, 1]),
            })
        });
    }
    if g.chance(6) {
        r.not_icmp = Some(if g.chance(50) {
            NotIcmp::NotIcmpType(*g.pick(&[0, 8, 128]))
        } else {
            NotIcmp::NotIcmpTypeCode(IcmpTypeAndCode {
                r#type: *g.pick(&[8, 128]),
                code: 0,
            })
        });
    }
    if g.chance(2) {
        r.action = "bogus".into();
    }
    r
}

/// One random packet.
pub fn gen_pkt(g: &mut Gen) -> RefPkt {
    let v6 = g.chance(40);
    let (addrs, icmp_proto) = if v6 { (ADDRS6, 58) } else { (ADDRS4, 1) };
    let src = g.pick(addrs).parse().unwrap_or(IpAddr::from([10, 1, 2, 3]));
    let dst = g.pick(addrs).parse().unwrap_or(IpAddr::from([10, 1, 2, 3]));
    let proto = *g.pick(&[6u8, 17, icmp_proto, 6, 17]);
    RefPkt {
        src,
        dst,
        proto,
        sport: *g.pick(&[40000u16, 53, 80, 1500]),
        dport: *g.pick(&[80u16, 443, 53, 1000, 2500, 40000]),
        icmp: (
            *g.pick(&[if v6 { 128 } else { 8 }, 0, 129]),
            *g.pick(&[0u8, 1]),
        ),
    }
}
