//! Policy and profile rules: one calc-graph `Rule` becomes one or more
//! `*tables` rules, as upstream renders them.
//!
//! Shape of a rendered rule (upstream's): the match sets a verdict mark
//! (`accept`, `pass` or `drop`), then a second rule acting on that mark
//! returns or denies. Rules with several CIDRs or more port ranges than one
//! multiport match holds are split into "match blocks" that OR their
//! alternatives into the scratch marks; the final rule then also requires
//! the all-blocks-passed scratch bit. Rules for the other IP family are
//! skipped. A rule that cannot be rendered (a value the calc graph should
//! never send) becomes a deny: failing closed beats failing open.

use felix_proto::rule::{Icmp, NotIcmp};
use felix_proto::{
    protocol::NumberOrName, PolicyId, PortRange as ProtoPortRange, Rule as ProtoRule,
};
use ipnet::IpNet;

use crate::dataplane::generictables::{Action, Match, MatchCriteria, PortRange, Protocol, Rule};
use crate::dataplane::IpVersion;

use super::config::{truncate_str, DropLog, RenderConfig};
use super::drop_prefix;
use super::names::length_limited_id;

/// Most "slots" one multiport match holds (a range takes two).
const MULTIPORT_SLOTS: usize = 15;

/// Upstream's short name of a policy kind (used in chain names and the
/// `%k` log-prefix specifier). Unknown kinds are used verbatim.
pub fn kind_short_name(kind: &str) -> &str {
    match kind {
        "NetworkPolicy" => "np",
        "GlobalNetworkPolicy" => "gnp",
        "StagedNetworkPolicy" => "snp",
        "StagedGlobalNetworkPolicy" => "sgnp",
        "StagedKubernetesNetworkPolicy" => "sknp",
        "KubernetesNetworkPolicy" => "knp",
        "KubernetesClusterNetworkPolicy" => "kcnp",
        other => other,
    }
}

/// Staged policies are never programmed.
pub fn is_staged(kind: &str) -> bool {
    kind.starts_with("Staged")
}

/// Upstream's policy ID string: `<kind>/<ns>/<name>` or `<kind>/<name>`.
pub fn policy_id_string(id: &PolicyId) -> String {
    let k = kind_short_name(&id.kind);
    if id.namespace.is_empty() {
        format!("{k}/{}", id.name)
    } else {
        format!("{k}/{}/{}", id.namespace, id.name)
    }
}

/// Chain name of a policy for `prefix` (`cali-pi-` / `cali-po-`).
pub fn policy_chain_name(prefix: &str, id: &PolicyId, max_len: usize) -> String {
    length_limited_id(prefix, &policy_id_string(id), max_len)
}

/// Chain name of a profile for `prefix` (`cali-pri-` / `cali-pro-`).
pub fn profile_chain_name(prefix: &str, name: &str, max_len: usize) -> String {
    length_limited_id(prefix, name, max_len)
}

/// Who owns a rule (for the log prefix).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Owner<'a> {
    Policy { id: &'a PolicyId, tier: &'a str },
    Profile { name: &'a str },
}

/// Why a rule could not be rendered.
#[derive(Debug)]
struct Unrenderable(String);

fn parse_net(s: &str) -> Result<IpNet, Unrenderable> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| Unrenderable(format!("bad CIDR {s:?}")))
}

fn is_v6_text(s: &str) -> bool {
    s.contains(':')
}

/// Keeps the nets of `ipv`. `Err(())` means the rule must be skipped: all
/// nets were of the other family, or a negated catch-all would make the
/// rule match nothing.
fn filter_nets(nets: &[String], ipv: IpVersion, negated: bool) -> Result<Vec<String>, ()> {
    if nets.is_empty() {
        return Ok(Vec::new());
    }
    let want_v6 = ipv == IpVersion::V6;
    let kept: Vec<String> = nets
        .iter()
        .filter(|n| is_v6_text(n) == want_v6)
        .cloned()
        .collect();
    // Any address with a zero-length prefix is the catch-all, however
    // written (`10.1.2.3/0`); iptables-nft refuses `! --destination
    // 0.0.0.0/0` outright.
    let catch_all = |n: &String| n.parse::<IpNet>().is_ok_and(|n| n.prefix_len() == 0);
    if negated && kept.iter().any(catch_all) {
        return Err(());
    }
    if kept.is_empty() {
        return Err(());
    }
    Ok(kept)
}

fn port_range(p: &ProtoPortRange) -> Result<PortRange, Unrenderable> {
    let conv = |v: i32| u16::try_from(v).map_err(|_| Unrenderable(format!("bad port {v}")));
    Ok(PortRange::range(conv(p.first)?, conv(p.last)?))
}

/// Splits port ranges into groups that fit one multiport match.
pub fn split_ports(ports: &[PortRange]) -> Vec<Vec<PortRange>> {
    let mut splits = Vec::new();
    let mut cur = Vec::new();
    let mut free = MULTIPORT_SLOTS;
    for p in ports {
        let need = if p.first == p.last { 1 } else { 2 };
        if free < need {
            splits.push(std::mem::take(&mut cur));
            free = MULTIPORT_SLOTS;
        }
        cur.push(*p);
        free -= need;
    }
    if !cur.is_empty() {
        splits.push(cur);
    }
    splits
}

fn protocol(p: &felix_proto::Protocol) -> Result<Option<Protocol>, Unrenderable> {
    Ok(match &p.number_or_name {
        None => None,
        Some(NumberOrName::Name(n)) => Some(Protocol::Named(n.to_ascii_lowercase())),
        Some(NumberOrName::Number(n)) => {
            Some(Protocol::Number(u8::try_from(*n).map_err(|_| {
                Unrenderable(format!("bad protocol number {n}"))
            })?))
        }
    })
}

/// The number of a protocol given by number or by a name the tools know.
fn protocol_number(p: &Protocol) -> Option<u8> {
    match p {
        Protocol::Number(n) => Some(*n),
        Protocol::Named(n) => Some(match n.to_ascii_lowercase().as_str() {
            "icmp" => 1,
            "tcp" => 6,
            "udp" => 17,
            "icmpv6" | "ipv6-icmp" => 58,
            "sctp" => 132,
            "udplite" => 136,
            _ => return None,
        }),
    }
}

/// True if `a` and `b` name the same protocol (by name or number).
fn same_protocol(a: &Protocol, b: &Protocol) -> bool {
    match (protocol_number(a), protocol_number(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn icmp_u8(v: i32) -> Result<u8, Unrenderable> {
    u8::try_from(v).map_err(|_| Unrenderable(format!("bad ICMP type/code {v}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Src,
    Dst,
}

fn net_match(side: Side, net: IpNet, negate: bool) -> Match {
    match side {
        Side::Src => Match::SourceNet { net, negate },
        Side::Dst => Match::DestNet { net, negate },
    }
}

fn ports_match(side: Side, ports: Vec<PortRange>, negate: bool) -> Match {
    match side {
        Side::Src => Match::SourcePorts { ports, negate },
        Side::Dst => Match::DestPorts { ports, negate },
    }
}

fn ip_port_set_match(side: Side, set: String, negate: bool) -> Match {
    match side {
        Side::Src => Match::SourceIpPortSet { set, negate },
        Side::Dst => Match::DestIpPortSet { set, negate },
    }
}

/// Builds the scratch-mark "match blocks" that express ORs.
struct MatchBlocks {
    all_pass: u32,
    this_pass: u32,
    using: bool,
    done_first_positive: bool,
    rules: Vec<Rule>,
}

impl MatchBlocks {
    fn new(cfg: &RenderConfig) -> Self {
        MatchBlocks {
            all_pass: cfg.mark_scratch0,
            this_pass: cfg.mark_scratch1,
            using: false,
            done_first_positive: false,
            rules: Vec::new(),
        }
    }

    fn initial(&mut self, bits: u32) {
        if self.using {
            return;
        }
        self.rules.push(Rule::new(
            MatchCriteria::new(),
            Action::SetMaskedMark {
                mark: bits,
                mask: self.all_pass | self.this_pass,
            },
        ));
        self.using = true;
    }

    fn positive_mark(&self) -> u32 {
        if self.done_first_positive {
            self.this_pass
        } else {
            self.all_pass
        }
    }

    fn finish_positive(&mut self) {
        if !self.done_first_positive {
            self.done_first_positive = true;
            return;
        }
        self.rules.push(Rule::new(
            MatchCriteria::new().mark_clear(self.this_pass),
            Action::ClearMark {
                mark: self.all_pass,
            },
        ));
    }

    /// One positive block: any of `alternatives` sets the block's bit.
    fn positive(&mut self, alternatives: Vec<MatchCriteria>) {
        self.initial(0);
        let mark = self.positive_mark();
        for m in alternatives {
            self.rules.push(Rule::new(m, Action::SetMark { mark }));
        }
        self.finish_positive();
    }

    /// A negated block: any of `nets` clears the all-pass bit.
    fn negative(&mut self, side: Side, nets: &[IpNet]) {
        self.initial(self.all_pass);
        for n in nets {
            self.rules.push(Rule::new(
                MatchCriteria::new().with(net_match(side, *n, false)),
                Action::ClearMark {
                    mark: self.all_pass,
                },
            ));
        }
    }
}

/// The log prefix with `%k`, `%n`, `%p`, `%t` expanded (upstream's
/// specifiers), truncated so that `": "` still fits the backend limit.
pub(crate) fn log_prefix(cfg: &RenderConfig, owner: Owner<'_>) -> String {
    let base = if cfg.log_prefix.is_empty() {
        "calico-packet"
    } else {
        cfg.log_prefix.as_str()
    };
    let (kind, name, ns, tier) = match owner {
        Owner::Policy { id, tier } => (
            kind_short_name(&id.kind).to_string(),
            id.name.as_str(),
            id.namespace.as_str(),
            tier,
        ),
        Owner::Profile { name } => ("pro".to_string(), name, "", ""),
    };
    let mut out = String::new();
    let mut chars = base.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some('k') => out.push_str(&kind),
            Some('n') => out.push_str(name),
            Some('t') => out.push_str(tier),
            Some('p') if ns.is_empty() => out.push_str(name),
            Some('p') => {
                out.push_str(ns);
                out.push('/');
                out.push_str(name);
            }
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    truncate_str(&out, cfg.backend.max_log_prefix_len().saturating_sub(2))
}

/// A `-m limit` match for `LogActionRateLimit` (e.g. `5/min`), or `None`.
fn rate_limit_match(cfg: &RenderConfig) -> Option<Match> {
    let (rate, burst) = cfg.log_rate_limit.as_ref()?;
    let (n, unit) = rate.split_once('/')?;
    let unit = match unit.chars().next()? {
        's' => "second",
        'm' => "minute",
        'h' => "hour",
        'd' => "day",
        _ => return None,
    };
    let ipt = if *burst == 0 {
        format!("-m limit --limit {n}/{unit}")
    } else {
        format!("-m limit --limit {n}/{unit} --limit-burst {burst}")
    };
    let nft = if *burst == 0 {
        format!("limit rate {n}/{unit}")
    } else {
        format!("limit rate {n}/{unit} burst {burst} packets")
    };
    Some(Match::Raw {
        iptables: ipt,
        nftables: nft,
    })
}

/// The rate-limited NFLOG that reports a deny of `m` (drop attribution).
pub(crate) fn drop_report(m: &MatchCriteria, dl: DropLog, prefix: &str) -> Rule {
    let n = dl.rate;
    let limit = Match::Raw {
        iptables: format!("-m limit --limit {n}/second --limit-burst {n}"),
        nftables: format!("limit rate {n}/second burst {n} packets"),
    };
    Rule::new(
        combine(m, &MatchCriteria::new().with(limit)),
        Action::Nflog {
            group: dl.group,
            prefix: prefix.to_string(),
            size: Some(128),
        },
    )
}

fn combine(a: &MatchCriteria, b: &MatchCriteria) -> MatchCriteria {
    let mut m = a.clone();
    m.0.extend(b.0.iter().cloned());
    m
}

/// Renders one calc-graph rule.
pub(crate) fn render_rule(
    cfg: &RenderConfig,
    rule: &ProtoRule,
    owner: Owner<'_>,
    untracked: bool,
    ipset: &dyn Fn(&str) -> String,
) -> Vec<Rule> {
    match render_rule_inner(cfg, rule, owner, untracked, ipset) {
        Ok(rules) => rules,
        Err(Unrenderable(why)) => {
            tracing::warn!(reason = %why, "cannot render policy rule; rendering a deny instead");
            vec![
                Rule::new(MatchCriteria::new(), cfg.filter_deny_action.clone())
                    .comment("Unrenderable rule"),
            ]
        }
    }
}

fn render_rule_inner(
    cfg: &RenderConfig,
    rule: &ProtoRule,
    owner: Owner<'_>,
    untracked: bool,
    ipset: &dyn Fn(&str) -> String,
) -> Result<Vec<Rule>, Unrenderable> {
    let ipv = cfg.ip_version;
    // IP version filter.
    if rule.ip_version != 0 && rule.ip_version != i32::from(ipv.number()) {
        return Ok(Vec::new());
    }
    let (Ok(src_net), Ok(not_src_net), Ok(dst_net), Ok(not_dst_net)) = (
        filter_nets(&rule.src_net, ipv, false),
        filter_nets(&rule.not_src_net, ipv, true),
        filter_nets(&rule.dst_net, ipv, false),
        filter_nets(&rule.not_dst_net, ipv, true),
    ) else {
        return Ok(Vec::new());
    };
    let parse_all = |v: &[String]| {
        v.iter()
            .map(|s| parse_net(s))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut src_net = parse_all(&src_net)?;
    let mut dst_net = parse_all(&dst_net)?;
    let mut not_src_net = parse_all(&not_src_net)?;
    let mut not_dst_net = parse_all(&not_dst_net)?;
    let ports = |v: &[ProtoPortRange]| v.iter().map(port_range).collect::<Result<Vec<_>, _>>();
    let mut src_ports = ports(&rule.src_ports)?;
    let mut dst_ports = ports(&rule.dst_ports)?;
    let not_src_ports = ports(&rule.not_src_ports)?;
    let not_dst_ports = ports(&rule.not_dst_ports)?;
    let proto = match &rule.protocol {
        Some(p) => protocol(p)?,
        None => None,
    };
    let not_proto = match &rule.not_protocol {
        Some(p) => protocol(p)?,
        None => None,
    };
    // ICMP fields are those of the protocol's ICMP version: under the
    // other family's ICMP protocol the rule matches nothing here (and the
    // tools refuse an ICMP match under the other ICMP protocol).
    let other_icmp = match ipv {
        IpVersion::V4 => 58,
        IpVersion::V6 => 1,
    };
    if (rule.icmp.is_some() || rule.not_icmp.is_some())
        && proto.as_ref().and_then(protocol_number) == Some(other_icmp)
    {
        return Ok(Vec::new());
    }
    // A protocol and a negated protocol: the same one matches nothing;
    // another is implied by the protocol (and the tools allow one protocol
    // match per rule), so only the protocol is matched.
    let not_proto = match (&proto, not_proto) {
        (Some(p), Some(np)) if same_protocol(p, &np) => return Ok(Vec::new()),
        (Some(_), Some(_)) => None,
        (_, np) => np,
    };
    let mut src_named: Vec<String> = rule.src_named_port_ip_set_ids.clone();
    let mut dst_named: Vec<String> = rule.dst_named_port_ip_set_ids.clone();

    let proto_match = |m: MatchCriteria| match &proto {
        Some(p) => m.with(Match::Protocol {
            proto: p.clone(),
            negate: false,
        }),
        None => m,
    };

    let mut blocks = MatchBlocks::new(cfg);
    for (side, ports, named) in [
        (Side::Src, &mut src_ports, &mut src_named),
        (Side::Dst, &mut dst_ports, &mut dst_named),
    ] {
        let splits = split_ports(ports);
        if splits.len() + named.len() > 1 {
            let mut alts: Vec<MatchCriteria> = splits
                .into_iter()
                .map(|s| proto_match(MatchCriteria::new()).with(ports_match(side, s, false)))
                .collect();
            alts.extend(
                named
                    .iter()
                    .map(|id| MatchCriteria::new().with(ip_port_set_match(side, ipset(id), false))),
            );
            blocks.positive(alts);
            ports.clear();
            named.clear();
        }
    }
    for (side, nets) in [(Side::Src, &mut src_net), (Side::Dst, &mut dst_net)] {
        if nets.len() > 1 {
            let alts = nets
                .iter()
                .map(|n| MatchCriteria::new().with(net_match(side, *n, false)))
                .collect();
            blocks.positive(alts);
            nets.clear();
        }
    }
    for (side, nets, neg) in [
        (Side::Src, &src_net, &mut not_src_net),
        (Side::Dst, &dst_net, &mut not_dst_net),
    ] {
        if nets.len() + neg.len() > 1 {
            blocks.negative(side, neg);
            neg.clear();
        }
    }

    // The main match, in upstream's order.
    let mut m = proto_match(MatchCriteria::new());
    if let Some(n) = src_net.first() {
        m = m.with(net_match(Side::Src, *n, false));
    }
    for id in &rule.src_ip_set_ids {
        m = m.source_ip_set(&ipset(id));
    }
    if !src_ports.is_empty() {
        m = m.with(ports_match(Side::Src, src_ports, false));
    }
    for id in &src_named {
        m = m.with(ip_port_set_match(Side::Src, ipset(id), false));
    }
    if let Some(n) = dst_net.first() {
        m = m.with(net_match(Side::Dst, *n, false));
    }
    for id in &rule.dst_ip_set_ids {
        m = m.dest_ip_set(&ipset(id));
    }
    for id in &rule.dst_ip_port_set_ids {
        m = m.with(ip_port_set_match(Side::Dst, ipset(id), false));
    }
    if !dst_ports.is_empty() {
        m = m.with(ports_match(Side::Dst, dst_ports, false));
    }
    for id in &dst_named {
        m = m.with(ip_port_set_match(Side::Dst, ipset(id), false));
    }
    m = match (&rule.icmp, ipv) {
        (Some(Icmp::IcmpTypeCode(tc)), IpVersion::V4) => m.with(Match::IcmpType {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
            negate: false,
        }),
        (Some(Icmp::IcmpType(t)), IpVersion::V4) => m.with(Match::IcmpType {
            icmp_type: icmp_u8(*t)?,
            code: None,
            negate: false,
        }),
        (Some(Icmp::IcmpTypeCode(tc)), IpVersion::V6) => m.with(Match::Icmpv6Type {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
            negate: false,
        }),
        (Some(Icmp::IcmpType(t)), IpVersion::V6) => m.with(Match::Icmpv6Type {
            icmp_type: icmp_u8(*t)?,
            code: None,
            negate: false,
        }),
        (None, _) => m,
    };
    if let Some(p) = not_proto {
        m = m.with(Match::Protocol {
            proto: p,
            negate: true,
        });
    }
    if let Some(n) = not_src_net.first() {
        m = m.with(net_match(Side::Src, *n, true));
    }
    for id in &rule.not_src_ip_set_ids {
        m = m.with(Match::SourceIpSet {
            set: ipset(id),
            negate: true,
        });
    }
    for s in split_ports(&not_src_ports) {
        m = m.with(ports_match(Side::Src, s, true));
    }
    for id in &rule.not_src_named_port_ip_set_ids {
        m = m.with(ip_port_set_match(Side::Src, ipset(id), true));
    }
    if let Some(n) = not_dst_net.first() {
        m = m.with(net_match(Side::Dst, *n, true));
    }
    for id in &rule.not_dst_ip_set_ids {
        m = m.with(Match::DestIpSet {
            set: ipset(id),
            negate: true,
        });
    }
    for s in split_ports(&not_dst_ports) {
        m = m.with(ports_match(Side::Dst, s, true));
    }
    for id in &rule.not_dst_named_port_ip_set_ids {
        m = m.with(ip_port_set_match(Side::Dst, ipset(id), true));
    }
    m = match (&rule.not_icmp, ipv) {
        (Some(NotIcmp::NotIcmpTypeCode(tc)), IpVersion::V4) => m.with(Match::IcmpType {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
            negate: true,
        }),
        (Some(NotIcmp::NotIcmpType(t)), IpVersion::V4) => m.with(Match::IcmpType {
            icmp_type: icmp_u8(*t)?,
            code: None,
            negate: true,
        }),
        (Some(NotIcmp::NotIcmpTypeCode(tc)), IpVersion::V6) => m.with(Match::Icmpv6Type {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
            negate: true,
        }),
        (Some(NotIcmp::NotIcmpType(t)), IpVersion::V6) => m.with(Match::Icmpv6Type {
            icmp_type: icmp_u8(*t)?,
            code: None,
            negate: true,
        }),
        (None, _) => m,
    };
    if blocks.using {
        m = m.mark_matches(cfg.mark_scratch0, cfg.mark_scratch0);
    }

    let mut out = blocks.rules;
    out.extend(action_rules(cfg, &rule.action, m, owner, untracked)?);
    if let Some(md) = &rule.metadata {
        for r in &mut out {
            for (k, v) in &md.annotations {
                r.comments.push(format!("{k}={v}"));
            }
        }
    }
    Ok(out)
}

/// The verdict rules for `action` given the rule's full match.
fn action_rules(
    cfg: &RenderConfig,
    action: &str,
    m: MatchCriteria,
    owner: Owner<'_>,
    untracked: bool,
) -> Result<Vec<Rule>, Unrenderable> {
    let (mark, verdict) = match action {
        "" | "allow" => (cfg.mark_accept, Action::Return),
        "next-tier" | "pass" => (cfg.mark_pass, Action::Return),
        "deny" => (cfg.mark_drop, cfg.filter_deny_action.clone()),
        "log" => return Ok(log_rules(cfg, m, owner, untracked)),
        other => return Err(Unrenderable(format!("unknown rule action {other:?}"))),
    };
    Ok(vec![
        Rule::new(m, Action::SetMark { mark }),
        Rule::new(MatchCriteria::new().mark_matches(mark, mark), verdict),
    ])
}

/// A `log` rule: LOG (optionally rate limited) and, with connection
/// transition logging on (tracked chains only), the connmark bit that asks
/// for a follow-up log of the first response.
fn log_rules(cfg: &RenderConfig, m: MatchCriteria, owner: Owner<'_>, untracked: bool) -> Vec<Rule> {
    let prefix = log_prefix(cfg, owner);
    let limit = rate_limit_match(cfg);
    let conn_bit = cfg.mark_conn_log;
    if conn_bit == 0 || untracked {
        let mut lm = MatchCriteria::new();
        if let Some(l) = limit {
            lm = lm.with(l);
        }
        return vec![Rule::new(combine(&lm, &m), Action::Log { prefix })];
    }
    let set_conn = Action::SetConnMark {
        mark: conn_bit,
        mask: conn_bit,
    };
    match limit {
        None => vec![
            Rule::new(m.clone(), Action::Log { prefix }),
            Rule::new(m, set_conn),
        ],
        Some(l) => vec![
            // The clear is load-bearing: an earlier Log rule may have left
            // the bit set in the packet mark.
            Rule::new(MatchCriteria::new(), Action::ClearMark { mark: conn_bit }),
            Rule::new(
                combine(&m, &MatchCriteria::new().with(l)),
                Action::SetMark { mark: conn_bit },
            ),
            Rule::new(
                MatchCriteria::new().mark_matches(conn_bit, conn_bit),
                Action::Log { prefix },
            ),
            Rule::new(
                MatchCriteria::new().mark_matches(conn_bit, conn_bit),
                set_conn,
            ),
        ],
    }
}

/// Renders a list of rules into a chain body: trailing returns dropped (the
/// caller checks the marks), `comment` on the first rule.
///
/// With drop attribution on, each deny verdict is preceded by a rate-limited
/// NFLOG of the same match whose prefix names the rule
/// ([`drop_prefix::rule_prefix`]); `ingress` says which list `rules` is.
pub(crate) fn render_rules(
    cfg: &RenderConfig,
    rules: &[ProtoRule],
    owner: Owner<'_>,
    untracked: bool,
    ingress: bool,
    comment: &str,
    ipset: &dyn Fn(&str) -> String,
) -> Vec<Rule> {
    let key = cfg.drop_log.map(|_| match owner {
        Owner::Policy { id, .. } => drop_prefix::owner_key(Some(id), ""),
        Owner::Profile { name } => drop_prefix::owner_key(None, name),
    });
    let mut out: Vec<Rule> = Vec::new();
    for (index, r) in rules.iter().enumerate() {
        let rendered = render_rule(cfg, r, owner, untracked, ipset);
        match (&key, cfg.drop_log) {
            (Some(key), Some(dl)) => {
                let prefix = drop_prefix::rule_prefix(ingress, index, key);
                for rule in rendered {
                    if rule.action == cfg.filter_deny_action {
                        out.push(drop_report(&rule.match_criteria, dl, &prefix));
                    }
                    out.push(rule);
                }
            }
            _ => out.extend(rendered),
        }
    }
    while out.last().is_some_and(|r| r.action == Action::Return) {
        out.pop();
    }
    if let Some(first) = out.first_mut() {
        first.comments.push(comment.to_string());
    }
    out
}
