//! Proto `Rule`s -> interpreter rules ([`RuleIr`]), one list per IP version, with exactly the
//! semantics of the *tables renderer (`dataplane::rules::policy`):
//!
//! * a rule of the other IP version is left out; a net list with no net of the version (or a
//!   negated catch-all) leaves the rule out;
//! * nets, ports and named-port sets of one side are alternatives (OR); ports and named-port
//!   sets of one side together form one OR group, as the renderer's match blocks do;
//!   IP sets (`src_ip_set_ids`, `dst_ip_set_ids`, `dst_ip_port_set_ids`) must all match;
//!   every negated list is "none may match";
//! * an ICMP match under the other version's ICMP protocol leaves the rule out; a protocol
//!   and the same negated protocol leave it out; a protocol and another negated protocol
//!   keep only the protocol;
//! * actions: `""`/`allow`, `deny`, `pass`/`next-tier`, `log` (counted per policy in
//!   `cali_pol_log2`, the walk continues);
//! * a rule that cannot be rendered (unknown action, bad port, protocol or CIDR) becomes a
//!   match-all deny, as the renderer's "Unrenderable rule": failing closed.

use felix_bpf::policy::{Group, RuleAction, RuleIr, Test};
use felix_proto::protocol::NumberOrName;
use felix_proto::rule::{Icmp, NotIcmp};
use felix_proto::Rule;
use ipnet::IpNet;

use crate::dataplane::IpVersion;

use super::members::net16;
use super::setid::SetIdAllocator;

/// Why a rule was turned into a deny.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule {index} of {owner}: {reason}")]
pub struct Unrenderable {
    /// The policy or profile (`np/ns/name`, `pro/name`) and direction.
    pub owner: String,
    /// The rule's position.
    pub index: usize,
    /// What was wrong.
    pub reason: String,
}

fn protocol_number(p: &felix_proto::Protocol) -> Result<Option<u8>, String> {
    match &p.number_or_name {
        None => Ok(None),
        Some(NumberOrName::Number(n)) => u8::try_from(*n)
            .map(Some)
            .map_err(|_| format!("bad protocol number {n}")),
        Some(NumberOrName::Name(n)) => match n.to_ascii_lowercase().as_str() {
            "icmp" => Ok(Some(1)),
            "tcp" => Ok(Some(6)),
            "udp" => Ok(Some(17)),
            "icmpv6" | "ipv6-icmp" => Ok(Some(58)),
            "sctp" => Ok(Some(132)),
            "udplite" => Ok(Some(136)),
            other => Err(format!("unknown protocol {other:?}")),
        },
    }
}

fn is_v6_text(s: &str) -> bool {
    s.contains(':')
}

/// The renderer's `filter_nets`: `Err(())` leaves the rule out.
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
    let catch_all = |n: &String| n.parse::<IpNet>().is_ok_and(|n| n.prefix_len() == 0);
    if (negated && kept.iter().any(catch_all)) || kept.is_empty() {
        return Err(());
    }
    Ok(kept)
}

fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("bad CIDR {s:?}"))
}

fn icmp_u8(v: i32) -> Result<u8, String> {
    u8::try_from(v).map_err(|_| format!("bad ICMP type/code {v}"))
}

fn port(v: i32) -> Result<u16, String> {
    u16::try_from(v).map_err(|_| format!("bad port {v}"))
}

/// Compiles one rule for `ipv`: `Ok(None)` when the rule does not apply to that version.
pub fn compile_one(
    rule: &Rule,
    ipv: IpVersion,
    sets: &mut SetIdAllocator,
) -> Result<Option<RuleIr>, String> {
    if rule.ip_version != 0 && rule.ip_version != i32::from(ipv.number()) {
        return Ok(None);
    }
    let (Ok(src_net), Ok(not_src_net), Ok(dst_net), Ok(not_dst_net)) = (
        filter_nets(&rule.src_net, ipv, false),
        filter_nets(&rule.not_src_net, ipv, true),
        filter_nets(&rule.dst_net, ipv, false),
        filter_nets(&rule.not_dst_net, ipv, true),
    ) else {
        return Ok(None);
    };
    let nets = |dst: bool, v: &[String]| -> Result<Vec<Test>, String> {
        v.iter()
            .map(|s| {
                let (addr, prefix) = net16(parse_net(s)?);
                Ok(Test::Net { dst, addr, prefix })
            })
            .collect()
    };
    let ports = |dst: bool, v: &[felix_proto::PortRange]| -> Result<Vec<Test>, String> {
        v.iter()
            .map(|p| {
                Ok(Test::Ports {
                    dst,
                    lo: port(p.first)?,
                    hi: port(p.last)?,
                })
            })
            .collect()
    };
    let src_net = nets(false, &src_net)?;
    let dst_net = nets(true, &dst_net)?;
    let not_src_net = nets(false, &not_src_net)?;
    let not_dst_net = nets(true, &not_dst_net)?;
    let src_ports = ports(false, &rule.src_ports)?;
    let dst_ports = ports(true, &rule.dst_ports)?;
    let not_src_ports = ports(false, &rule.not_src_ports)?;
    let not_dst_ports = ports(true, &rule.not_dst_ports)?;
    let proto = match &rule.protocol {
        Some(p) => protocol_number(p)?,
        None => None,
    };
    let not_proto = match &rule.not_protocol {
        Some(p) => protocol_number(p)?,
        None => None,
    };
    let other_icmp = match ipv {
        IpVersion::V4 => 58,
        IpVersion::V6 => 1,
    };
    if (rule.icmp.is_some() || rule.not_icmp.is_some()) && proto == Some(other_icmp) {
        return Ok(None);
    }
    let not_proto = match (proto, not_proto) {
        (Some(p), Some(np)) if p == np => return Ok(None),
        (Some(_), Some(_)) => None,
        (_, np) => np,
    };
    let mut set = |dst: bool, id: &String| Test::Set {
        dst,
        id: sets.get_or_alloc(id),
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut any = |tests: Vec<Test>| {
        if !tests.is_empty() {
            groups.push(Group {
                negate: false,
                any_of: tests,
            });
        }
    };
    if let Some(p) = proto {
        any(vec![Test::Proto(p)]);
    }
    any(src_net);
    for id in &rule.src_ip_set_ids {
        any(vec![set(false, id)]);
    }
    let mut src_pp = src_ports;
    src_pp.extend(
        rule.src_named_port_ip_set_ids
            .iter()
            .map(|id| set(false, id)),
    );
    any(src_pp);
    any(dst_net);
    for id in rule.dst_ip_set_ids.iter().chain(&rule.dst_ip_port_set_ids) {
        any(vec![set(true, id)]);
    }
    let mut dst_pp = dst_ports;
    dst_pp.extend(
        rule.dst_named_port_ip_set_ids
            .iter()
            .map(|id| set(true, id)),
    );
    any(dst_pp);
    match &rule.icmp {
        Some(Icmp::IcmpTypeCode(tc)) => any(vec![Test::Icmp {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
        }]),
        Some(Icmp::IcmpType(t)) => any(vec![Test::Icmp {
            icmp_type: icmp_u8(*t)?,
            code: None,
        }]),
        None => {}
    }
    let mut neg: Vec<Test> = Vec::new();
    if let Some(p) = not_proto {
        neg.push(Test::Proto(p));
    }
    neg.extend(not_src_net);
    neg.extend(rule.not_src_ip_set_ids.iter().map(|id| set(false, id)));
    neg.extend(not_src_ports);
    neg.extend(
        rule.not_src_named_port_ip_set_ids
            .iter()
            .map(|id| set(false, id)),
    );
    neg.extend(not_dst_net);
    neg.extend(rule.not_dst_ip_set_ids.iter().map(|id| set(true, id)));
    neg.extend(not_dst_ports);
    neg.extend(
        rule.not_dst_named_port_ip_set_ids
            .iter()
            .map(|id| set(true, id)),
    );
    match &rule.not_icmp {
        Some(NotIcmp::NotIcmpTypeCode(tc)) => neg.push(Test::Icmp {
            icmp_type: icmp_u8(tc.r#type)?,
            code: Some(icmp_u8(tc.code)?),
        }),
        Some(NotIcmp::NotIcmpType(t)) => neg.push(Test::Icmp {
            icmp_type: icmp_u8(*t)?,
            code: None,
        }),
        None => {}
    }
    if !neg.is_empty() {
        groups.push(Group {
            negate: true,
            any_of: neg,
        });
    }
    let action = match rule.action.as_str() {
        "" | "allow" => RuleAction::Allow,
        "next-tier" | "pass" => RuleAction::Pass,
        "deny" => RuleAction::Deny,
        "log" => RuleAction::Log,
        other => return Err(format!("unknown rule action {other:?}")),
    };
    Ok(Some(RuleIr { groups, action }))
}

/// One direction's rules compiled for the interpreter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compiled {
    /// Per IP version (`[v4, v6]`): the interpreter's rules, in order.
    pub rules: [Vec<RuleIr>; 2],
    /// Per IP version: for each of `rules`, the position of the proto rule it came from
    /// (what a drop report names).
    pub sources: [Vec<usize>; 2],
    /// The rules that could not be compiled (each became a deny).
    pub bad: Vec<Unrenderable>,
}

/// The interpreter rules of `rules` for IPv4 (`[0]`) and IPv6 (`[1]`), each with its source
/// position. Rules that cannot be rendered become a match-all deny in both lists and are
/// reported in [`Compiled::bad`].
pub fn compile_rules(owner: &str, rules: &[Rule], sets: &mut SetIdAllocator) -> Compiled {
    let mut out = Compiled::default();
    for (index, rule) in rules.iter().enumerate() {
        for (fam, ipv) in [IpVersion::V4, IpVersion::V6].into_iter().enumerate() {
            let ir = match compile_one(rule, ipv, sets) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(reason) => {
                    if fam == 0 {
                        tracing::warn!(owner, index, %reason, "cannot compile policy rule; denying instead");
                        out.bad.push(Unrenderable {
                            owner: owner.to_string(),
                            index,
                            reason,
                        });
                    }
                    RuleIr {
                        groups: Vec::new(),
                        action: RuleAction::Deny,
                    }
                }
            };
            out.rules[fam].push(ir);
            out.sources[fam].push(index);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_proto::{PortRange, Protocol};

    fn tcp() -> Option<Protocol> {
        Some(Protocol {
            number_or_name: Some(NumberOrName::Name("TCP".into())),
        })
    }

    #[test]
    fn unrenderable_rules_fail_closed_as_a_match_all_deny() {
        let mut sets = SetIdAllocator::new();
        let rules = vec![
            Rule {
                action: "frobnicate".into(),
                ..Rule::default()
            },
            Rule {
                action: "allow".into(),
                dst_ports: vec![PortRange {
                    first: 1,
                    last: 70000,
                }],
                protocol: tcp(),
                ..Rule::default()
            },
        ];
        let Compiled {
            rules: out, bad, ..
        } = compile_rules("gnp/p egress", &rules, &mut sets);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].index, 0);
        assert!(bad[1].to_string().contains("gnp/p egress"), "{}", bad[1]);
        for fam in &out {
            assert_eq!(fam.len(), 2);
            assert!(fam
                .iter()
                .all(|r| r.groups.is_empty() && r.action == RuleAction::Deny));
        }
    }

    #[test]
    fn rules_of_the_other_version_or_without_nets_of_it_are_left_out() {
        let mut sets = SetIdAllocator::new();
        let rules = vec![
            Rule {
                ip_version: 6,
                ..Rule::default()
            },
            Rule {
                src_net: vec!["10.0.0.0/8".into()],
                ..Rule::default()
            },
            Rule {
                not_dst_net: vec!["::/0".into()],
                ..Rule::default()
            },
        ];
        let Compiled {
            rules: out, bad, ..
        } = compile_rules("x", &rules, &mut sets);
        assert!(bad.is_empty());
        assert_eq!(
            out[0].len(),
            1,
            "v4: only the net rule (no v4 net in the negated list)"
        );
        assert_eq!(
            out[1].len(),
            1,
            "v6: only the version-6 rule (negated catch-all)"
        );
    }

    #[test]
    fn ports_and_named_ports_of_a_side_form_one_or_group_sets_are_anded() {
        let mut sets = SetIdAllocator::new();
        let rules = vec![Rule {
            protocol: tcp(),
            dst_ports: vec![PortRange {
                first: 80,
                last: 80,
            }],
            dst_named_port_ip_set_ids: vec!["n:a".into()],
            src_ip_set_ids: vec!["s:1".into(), "s:2".into()],
            not_src_ip_set_ids: vec!["s:3".into()],
            ..Rule::default()
        }];
        let out = compile_rules("x", &rules, &mut sets).rules;
        let g = &out[0][0].groups;
        // proto, set 1, set 2, dst ports-or-named, negated set 3.
        assert_eq!(g.len(), 5);
        assert_eq!(g[3].any_of.len(), 2);
        assert!(g[4].negate);
        assert_eq!(sets.len(), 4);
    }
}
