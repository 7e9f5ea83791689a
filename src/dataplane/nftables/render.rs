//! Renders typed rules in nft syntax for one family. IP set names are
//! legalised (`:` is not allowed in nft set names) the same way upstream
//! does, so `cali40s:abc` becomes `cali40s-abc`.

use crate::dataplane::generictables::{
    rule_hashes, Action, Match, MatchCriteria, PortRange, Protocol, Rule,
};
use crate::dataplane::IpVersion;

/// Longest comment nft accepts.
const MAX_COMMENT_LEN: usize = 128;

/// The nft name of an IP set.
pub fn legalize_set_name(name: &str) -> String {
    name.replace(':', "-")
}

fn ne(negate: bool) -> &'static str {
    if negate {
        "!= "
    } else {
        ""
    }
}

fn l3(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "ip",
        IpVersion::V6 => "ip6",
    }
}

fn ports(p: &[PortRange]) -> String {
    let items: Vec<String> = p
        .iter()
        .map(|r| {
            if r.first == r.last {
                r.first.to_string()
            } else {
                format!("{}-{}", r.first, r.last)
            }
        })
        .collect();
    if items.len() == 1 {
        items[0].clone()
    } else {
        format!("{{ {} }}", items.join(", "))
    }
}

fn iface(name: &str) -> String {
    match name.strip_suffix('+') {
        Some(p) => format!("\"{p}*\""),
        None => format!("\"{name}\""),
    }
}

fn proto(p: &Protocol) -> String {
    match p {
        Protocol::Named(n) if n.eq_ignore_ascii_case("icmpv6") => "ipv6-icmp".into(),
        Protocol::Named(n) => n.to_ascii_lowercase(),
        Protocol::Number(n) => n.to_string(),
    }
}

/// An ICMP (`l4` = `icmp`) or ICMPv6 (`icmpv6`) type match with an
/// optional code. nft refuses a concatenation compared with a singleton
/// (`icmp type . icmp code 8 . 0`), so a positive type+code match is two
/// matches, and a negated one compares the (type, code) pair against a
/// one-element set: `!=` must negate the pair, not each field (a packet of
/// type 8 code 1 passes `not {type: 8, code: 0}`).
fn icmp_match(l4: &str, icmp_type: u8, code: Option<u8>, negate: bool) -> String {
    match (code, negate) {
        (None, _) => format!("{l4} type {}{icmp_type}", ne(negate)),
        (Some(c), false) => format!("{l4} type {icmp_type} {l4} code {c}"),
        (Some(c), true) => format!("{l4} type . {l4} code != {{ {icmp_type} . {c} }}"),
    }
}

fn render_match(m: &Match, ipv: IpVersion) -> String {
    let ip = l3(ipv);
    match m {
        Match::Protocol { proto: p, negate } => format!("meta l4proto {}{}", ne(*negate), proto(p)),
        Match::SourceNet { net, negate } => format!("{ip} saddr {}{net}", ne(*negate)),
        Match::DestNet { net, negate } => format!("{ip} daddr {}{net}", ne(*negate)),
        Match::SourcePorts { ports: p, negate } => format!("th sport {}{}", ne(*negate), ports(p)),
        Match::DestPorts { ports: p, negate } => format!("th dport {}{}", ne(*negate), ports(p)),
        Match::SourceIpSet { set, negate } => {
            format!("{ip} saddr {}@{}", ne(*negate), legalize_set_name(set))
        }
        Match::DestIpSet { set, negate } => {
            format!("{ip} daddr {}@{}", ne(*negate), legalize_set_name(set))
        }
        Match::SourceIpPortSet { set, negate } => format!(
            "{ip} saddr . meta l4proto . th sport {}@{}",
            ne(*negate),
            legalize_set_name(set)
        ),
        Match::DestIpPortSet { set, negate } => format!(
            "{ip} daddr . meta l4proto . th dport {}@{}",
            ne(*negate),
            legalize_set_name(set)
        ),
        Match::ConntrackState { states, negate } => {
            let names: Vec<&str> = states.iter().map(|s| s.nft_name()).collect();
            format!("ct state {}{}", ne(*negate), names.join(","))
        }
        Match::Mark { mark, mask, negate } => {
            let op = if *negate { "!=" } else { "==" };
            format!("meta mark & {mask:#010x} {op} {mark:#010x}")
        }
        Match::InInterface { name, negate } => format!("iifname {}{}", ne(*negate), iface(name)),
        Match::OutInterface { name, negate } => format!("oifname {}{}", ne(*negate), iface(name)),
        Match::IcmpType {
            icmp_type,
            code,
            negate,
        } => icmp_match("icmp", *icmp_type, *code, *negate),
        Match::Icmpv6Type {
            icmp_type,
            code,
            negate,
        } => icmp_match("icmpv6", *icmp_type, *code, *negate),
        Match::SrcAddrType {
            addr_type,
            limit_iface_out,
            negate,
        } => {
            let key = if *limit_iface_out {
                "saddr . oif"
            } else {
                "saddr"
            };
            format!("fib {key} type {}{}", ne(*negate), addr_type.nft_name())
        }
        Match::DstAddrType { addr_type, negate } => {
            format!("fib daddr type {}{}", ne(*negate), addr_type.nft_name())
        }
        Match::RpfCheckFailed => "fib saddr . mark . iif oif missing".into(),
        Match::Raw { nftables, .. } => nftables.clone(),
    }
}

/// Renders the match part of a rule for `ipv`.
pub fn render_match_criteria(m: &MatchCriteria, ipv: IpVersion) -> String {
    m.0.iter()
        .map(|x| render_match(x, ipv))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders the action (verdict or statement) of a rule.
pub fn render_action(a: &Action) -> String {
    match a {
        Action::Accept => "accept".into(),
        Action::Drop => "drop".into(),
        Action::Return => "return".into(),
        Action::Jump(t) => format!("jump {t}"),
        Action::Goto(t) => format!("goto {t}"),
        Action::SetMark { mark } => format!("meta mark set mark or {mark:#010x}"),
        Action::SetMaskedMark { mark, mask } => {
            format!(
                "meta mark set mark and {:#010x} or {:#010x}",
                !mask,
                mark & mask
            )
        }
        Action::ClearMark { mark } => format!("meta mark set mark and {:#010x}", !mark),
        Action::SetConnMark { mark, mask } => {
            format!(
                "ct mark set ct mark and {:#010x} or {:#010x}",
                !mask,
                mark & mask
            )
        }
        Action::SaveConnMark { mask } => format!("ct mark set mark and {mask:#010x}"),
        Action::RestoreConnMark { mask } => format!("meta mark set ct mark and {mask:#010x}"),
        Action::Log { prefix } => format!("log prefix \"{}: \" level notice", sanitize(prefix)),
        Action::Nflog {
            group,
            prefix,
            size,
        } => match size {
            Some(s) => format!(
                "log prefix \"{}\" group {group} snaplen {s}",
                sanitize(prefix)
            ),
            None => format!("log prefix \"{}\" group {group}", sanitize(prefix)),
        },
        Action::Masquerade {
            to_ports,
            fully_random,
        } => {
            let mut s = "masquerade".to_string();
            if let Some(p) = to_ports {
                s.push_str(&format!(" to :{}-{}", p.first, p.last));
            }
            if *fully_random {
                s.push_str(" fully-random");
            }
            s
        }
        Action::Dnat { addr, port } => match (addr, port) {
            (_, None) => format!("dnat to {addr}"),
            (std::net::IpAddr::V6(a), Some(p)) => format!("dnat to [{a}]:{p}"),
            (std::net::IpAddr::V4(a), Some(p)) => format!("dnat to {a}:{p}"),
        },
        Action::Snat { addr, fully_random } => {
            let r = if *fully_random { " fully-random" } else { "" };
            format!("snat to {addr}{r}")
        }
        Action::NoTrack => "notrack".into(),
        Action::Reject { .. } => "reject".into(),
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || " _@%+=:,./-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Renders rules for one family and computes their hashes.
#[derive(Debug, Clone)]
pub struct NftRenderer {
    ipv: IpVersion,
    hash_prefix: String,
}

impl NftRenderer {
    /// A renderer for `ipv` with hash comment prefix `hash_prefix`.
    pub fn new(ipv: IpVersion, hash_prefix: &str) -> Self {
        NftRenderer {
            ipv,
            hash_prefix: hash_prefix.into(),
        }
    }

    /// The rule body without comment: matches, counter and action.
    pub fn body(&self, rule: &Rule) -> String {
        let m = render_match_criteria(&rule.match_criteria, self.ipv);
        let a = render_action(&rule.action);
        if m.is_empty() {
            format!("counter {a}")
        } else {
            format!("{m} counter {a}")
        }
    }

    /// Hashes of a chain's rules.
    pub fn hashes(&self, chain: &str, rules: &[Rule]) -> Vec<String> {
        rule_hashes(chain, rules, |r, c| {
            let comments = r.comments.join(";");
            format!("{c} {} {comments}", self.body(r))
        })
    }

    /// The comment: hash first (so read-back finds it), then user comments.
    pub fn comment(&self, hash: &str, rule: &Rule) -> String {
        let mut c = format!("{}{hash}", self.hash_prefix);
        for uc in &rule.comments {
            c.push_str("; ");
            c.push_str(&sanitize(uc));
        }
        c.truncate(MAX_COMMENT_LEN);
        c
    }

    /// `add rule` line for the rule.
    pub fn add_rule(
        &self,
        family: &str,
        table: &str,
        chain: &str,
        hash: &str,
        rule: &Rule,
    ) -> String {
        format!(
            "add rule {family} {table} {chain} {} comment \"{}\"",
            self.body(rule),
            self.comment(hash, rule)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::generictables::CtState;

    #[test]
    fn renders_nft_syntax() {
        let r = Rule::new(
            MatchCriteria::new()
                .protocol("tcp")
                .source_net("10.0.0.0/8".parse().unwrap())
                .dest_ports(vec![PortRange::single(80), PortRange::range(1000, 2000)])
                .ct_state(&[CtState::Related, CtState::Established])
                .mark_clear(0x10)
                .source_ip_set("cali40s:abc")
                .in_interface("cali+"),
            Action::SetMark { mark: 0x10 },
        );
        let n = NftRenderer::new(IpVersion::V4, "cali:");
        assert_eq!(
            n.body(&r),
            "meta l4proto tcp ip saddr 10.0.0.0/8 th dport { 80, 1000-2000 } ct state related,established \
             meta mark & 0x00000010 == 0x00000000 ip saddr @cali40s-abc iifname \"cali*\" counter meta mark set mark or 0x00000010"
        );
        let v6 = NftRenderer::new(IpVersion::V6, "cali:");
        let r6 = Rule::new(MatchCriteria::new().dest_ip_set("cali60s:x"), Action::Drop);
        assert_eq!(v6.body(&r6), "ip6 daddr @cali60s-x counter drop");
        let c = n.comment("HHHH", &r.clone().comment("x\"y"));
        assert_eq!(c, "cali:HHHH; x_y");
    }

    #[test]
    fn icmp_type_and_code_render_in_forms_nft_accepts() {
        let icmp = |icmp_type, code, negate| {
            render_match(
                &Match::IcmpType {
                    icmp_type,
                    code,
                    negate,
                },
                IpVersion::V4,
            )
        };
        let icmp6 = |icmp_type, code, negate| {
            render_match(
                &Match::Icmpv6Type {
                    icmp_type,
                    code,
                    negate,
                },
                IpVersion::V6,
            )
        };
        assert_eq!(icmp(8, Some(0), false), "icmp type 8 icmp code 0");
        assert_eq!(
            icmp(8, Some(1), true),
            "icmp type . icmp code != { 8 . 1 }",
            "a negated type+code negates the pair"
        );
        assert_eq!(icmp(8, None, false), "icmp type 8");
        assert_eq!(icmp(8, None, true), "icmp type != 8");
        assert_eq!(icmp6(128, Some(0), false), "icmpv6 type 128 icmpv6 code 0");
        assert_eq!(
            icmp6(128, Some(1), true),
            "icmpv6 type . icmpv6 code != { 128 . 1 }"
        );
        assert_eq!(icmp6(1, None, true), "icmpv6 type != 1");
    }
}
