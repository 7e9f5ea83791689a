//! Renders typed rules in iptables-restore syntax, fragment for fragment as
//! upstream Felix does (so hashes of equal rules agree with upstream's).

use std::fmt::Write;

use crate::dataplane::generictables::{
    rule_hashes, Action, Match, MatchCriteria, PortRange, Protocol, Rule,
};

/// Longest comment iptables accepts.
const MAX_COMMENT_LEN: usize = 256;

fn not(negate: bool) -> &'static str {
    if negate {
        "! "
    } else {
        ""
    }
}

fn ports(p: &[PortRange]) -> String {
    p.iter()
        .map(|r| {
            if r.first == r.last {
                r.first.to_string()
            } else {
                format!("{}:{}", r.first, r.last)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn hex(v: u32) -> String {
    format!("{v:#x}")
}

fn mark_value(v: u32) -> String {
    // Upstream writes a cleared-bits match/action as a literal "0".
    if v == 0 {
        "0".into()
    } else {
        hex(v)
    }
}

fn render_match(m: &Match, out: &mut Vec<String>) {
    let s = match m {
        Match::Protocol { proto, negate } => match proto {
            Protocol::Named(n) => format!("{}-p {n}", not(*negate)),
            Protocol::Number(n) => format!("{}-p {n}", not(*negate)),
        },
        Match::SourceNet { net, negate } => format!("{}--source {net}", not(*negate)),
        Match::DestNet { net, negate } => format!("{}--destination {net}", not(*negate)),
        Match::SourcePorts { ports: p, negate } => {
            format!("-m multiport {}--source-ports {}", not(*negate), ports(p))
        }
        Match::DestPorts { ports: p, negate } => {
            format!(
                "-m multiport {}--destination-ports {}",
                not(*negate),
                ports(p)
            )
        }
        Match::SourceIpSet { set, negate } => {
            format!("-m set {}--match-set {set} src", not(*negate))
        }
        Match::DestIpSet { set, negate } => format!("-m set {}--match-set {set} dst", not(*negate)),
        Match::SourceIpPortSet { set, negate } => {
            format!("-m set {}--match-set {set} src,src", not(*negate))
        }
        Match::DestIpPortSet { set, negate } => {
            format!("-m set {}--match-set {set} dst,dst", not(*negate))
        }
        Match::ConntrackState { states, negate } => {
            let names: Vec<&str> = states.iter().map(|s| s.iptables_name()).collect();
            format!("-m conntrack {}--ctstate {}", not(*negate), names.join(","))
        }
        Match::Mark { mark, mask, negate } => {
            format!(
                "-m mark {}--mark {}/{}",
                not(*negate),
                mark_value(*mark),
                hex(*mask)
            )
        }
        Match::InInterface { name, negate } => format!("{}--in-interface {name}", not(*negate)),
        Match::OutInterface { name, negate } => format!("{}--out-interface {name}", not(*negate)),
        Match::IcmpType {
            icmp_type,
            code,
            negate,
        } => match code {
            Some(c) => format!("-m icmp {}--icmp-type {icmp_type}/{c}", not(*negate)),
            None => format!("-m icmp {}--icmp-type {icmp_type}", not(*negate)),
        },
        Match::Icmpv6Type {
            icmp_type,
            code,
            negate,
        } => match code {
            Some(c) => format!("-m icmp6 {}--icmpv6-type {icmp_type}/{c}", not(*negate)),
            None => format!("-m icmp6 {}--icmpv6-type {icmp_type}", not(*negate)),
        },
        Match::SrcAddrType {
            addr_type,
            limit_iface_out,
            negate,
        } => {
            let mut s = format!(
                "-m addrtype {}--src-type {}",
                not(*negate),
                addr_type.iptables_name()
            );
            if *limit_iface_out {
                s.push_str(" --limit-iface-out");
            }
            s
        }
        Match::DstAddrType { addr_type, negate } => {
            format!(
                "-m addrtype {}--dst-type {}",
                not(*negate),
                addr_type.iptables_name()
            )
        }
        Match::RpfCheckFailed => "-m rpfilter --invert --validmark".into(),
        Match::Raw { iptables, .. } => iptables.clone(),
    };
    if !s.is_empty() {
        out.push(s);
    }
}

/// Renders the match part of a rule (empty string for match-all).
pub fn render_match_criteria(m: &MatchCriteria) -> String {
    let mut out = Vec::new();
    for x in &m.0 {
        render_match(x, &mut out);
    }
    out.join(" ")
}

/// Renders the action part of a rule.
pub fn render_action(a: &Action) -> String {
    match a {
        Action::Accept => "--jump ACCEPT".into(),
        Action::Drop => "--jump DROP".into(),
        Action::Return => "--jump RETURN".into(),
        Action::Jump(t) => format!("--jump {t}"),
        Action::Goto(t) => format!("--goto {t}"),
        Action::SetMark { mark } => format!("--jump MARK --set-mark {}/{}", hex(*mark), hex(*mark)),
        Action::SetMaskedMark { mark, mask } => {
            format!("--jump MARK --set-mark {}/{}", hex(*mark), hex(*mask))
        }
        Action::ClearMark { mark } => format!("--jump MARK --set-mark 0/{}", hex(*mark)),
        Action::SetConnMark { mark, mask } => {
            format!("--jump CONNMARK --set-mark {}/{}", hex(*mark), hex(*mask))
        }
        Action::SaveConnMark { mask } => {
            format!("--jump CONNMARK --save-mark --mask {}", hex(*mask))
        }
        Action::RestoreConnMark { mask } => {
            format!("--jump CONNMARK --restore-mark --mask {}", hex(*mask))
        }
        // Escaped as comments are: LogPrefix is any string in the config
        // file or environment, and a quote would end the argument.
        Action::Log { prefix } => format!(
            "--jump LOG --log-prefix \"{}: \" --log-level 5",
            escape_comment(prefix)
        ),
        Action::Nflog {
            group,
            prefix,
            size,
        } => match size {
            Some(s) => format!(
                "--jump NFLOG --nflog-group {group} --nflog-prefix {prefix} --nflog-size {s}"
            ),
            None => format!("--jump NFLOG --nflog-group {group} --nflog-prefix {prefix}"),
        },
        Action::Masquerade {
            to_ports,
            fully_random,
        } => {
            let mut s = "--jump MASQUERADE".to_string();
            if let Some(p) = to_ports {
                let _ = write!(s, " --to-ports {}-{}", p.first, p.last);
            }
            if *fully_random {
                s.push_str(" --random-fully");
            }
            s
        }
        Action::Dnat { addr, port } => match (addr, port) {
            (_, None) => format!("--jump DNAT --to-destination {addr}"),
            (std::net::IpAddr::V6(a), Some(p)) => format!("--jump DNAT --to-destination [{a}]:{p}"),
            (std::net::IpAddr::V4(a), Some(p)) => format!("--jump DNAT --to-destination {a}:{p}"),
        },
        Action::Snat { addr, fully_random } => {
            let r = if *fully_random { " --random-fully" } else { "" };
            format!("--jump SNAT --to-source {addr}{r}")
        }
        Action::NoTrack => "--jump NOTRACK".into(),
        Action::Reject { with } => match with {
            Some(w) => format!("--jump REJECT --reject-with {w}"),
            None => "--jump REJECT".into(),
        },
    }
}

/// Replaces characters that are unsafe in a quoted comment (or log
/// prefix) with `_`.
fn escape_comment(c: &str) -> String {
    let mut s: String = c
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || "_ @%+=:,./-".contains(ch) {
                ch
            } else {
                '_'
            }
        })
        .collect();
    s.truncate(MAX_COMMENT_LEN);
    s
}

/// Renders a full rule line. `prefix` is the operation and position, e.g.
/// `-A cali-foo` or `-R cali-foo 3`; `hash` is the hash comment value
/// (`None` for no hash comment; the literal `HASH` placeholder is used when
/// hashing, as upstream).
pub fn render_rule(prefix: &str, hash_fragment: Option<&str>, rule: &Rule) -> String {
    let mut frags: Vec<String> = vec![prefix.to_string()];
    if let Some(h) = hash_fragment {
        frags.push(h.to_string());
    }
    for c in &rule.comments {
        frags.push(format!("-m comment --comment \"{}\"", escape_comment(c)));
    }
    let m = render_match_criteria(&rule.match_criteria);
    if !m.is_empty() {
        frags.push(m);
    }
    frags.push(render_action(&rule.action));
    frags.join(" ")
}

/// Renders rules with our hash comments and computes their hashes.
#[derive(Debug, Clone)]
pub struct IptablesRenderer {
    hash_prefix: String,
}

impl Default for IptablesRenderer {
    fn default() -> Self {
        IptablesRenderer {
            hash_prefix: crate::dataplane::generictables::RULE_HASH_PREFIX.into(),
        }
    }
}

impl IptablesRenderer {
    /// A renderer using `hash_prefix` (normally `cali:`).
    pub fn new(hash_prefix: &str) -> Self {
        IptablesRenderer {
            hash_prefix: hash_prefix.into(),
        }
    }

    /// The hash comment prefix.
    pub fn hash_prefix(&self) -> &str {
        &self.hash_prefix
    }

    /// Hashes of a chain's rules (upstream-compatible).
    pub fn hashes(&self, chain: &str, rules: &[Rule]) -> Vec<String> {
        rule_hashes(chain, rules, |r, c| {
            render_rule(&format!("-A {c}"), Some("HASH"), r)
        })
    }

    /// A rule line with its hash comment; `op` is e.g. `-A chain`.
    pub fn line(&self, op: &str, hash: &str, rule: &Rule) -> String {
        let frag = format!("-m comment --comment \"{}{}\"", self.hash_prefix, hash);
        render_rule(op, Some(&frag), rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::generictables::CtState;

    #[test]
    fn renders_like_upstream() {
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
        assert_eq!(
            render_rule("-A cali-x", None, &r),
            "-A cali-x -p tcp --source 10.0.0.0/8 -m multiport --destination-ports 80,1000:2000 \
             -m conntrack --ctstate RELATED,ESTABLISHED -m mark --mark 0/0x10 \
             -m set --match-set cali40s:abc src --in-interface cali+ --jump MARK --set-mark 0x10/0x10"
        );
    }

    #[test]
    fn comments_are_escaped_and_truncated() {
        let r = Rule::new(MatchCriteria::new(), Action::Drop).comment("a\"b;c$d");
        assert_eq!(
            render_rule("-A c", None, &r),
            "-A c -m comment --comment \"a_b_c_d\" --jump DROP"
        );
        let long = "x".repeat(400);
        let r = Rule::new(MatchCriteria::new(), Action::Drop).comment(&long);
        assert!(render_rule("-A c", None, &r).contains(&"x".repeat(256)));
        assert!(!render_rule("-A c", None, &r).contains(&"x".repeat(257)));
    }

    #[test]
    fn hashes_follow_upstream_construction() {
        // Reference values computed independently (SHA-224 chain seeded with
        // the chain name, URL-safe base64, 16 chars) for upstream's own
        // hashing test rules.
        let raw = |t: &str| {
            Rule::new(
                MatchCriteria::new().with(Match::Raw {
                    iptables: "-m foobar --foobar baz".into(),
                    nftables: String::new(),
                }),
                Action::Jump(t.into()),
            )
        };
        let h = IptablesRenderer::default().hashes("chain", &[raw("biff"), raw("boff")]);
        assert_eq!(
            h,
            vec![
                "Wgi5uNiZIwrCVUw1".to_string(),
                "lIBvhOYGhsAtz_oX".to_string()
            ]
        );
    }

    #[test]
    fn log_prefix_with_quotes_and_non_ascii_stays_one_quoted_argument() {
        let a = Action::Log {
            prefix: "a\"b\\c 日-%k/x_y:z".into(),
        };
        assert_eq!(
            render_action(&a),
            "--jump LOG --log-prefix \"a_b_c _-%k/x_y:z: \" --log-level 5"
        );
    }
}
