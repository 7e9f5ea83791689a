//! Per-endpoint chains (workload `cali-tw-`/`cali-fw-`, host `cali-th-`,
//! `cali-fh-`, `cali-thfw-`, `cali-fhfw-`) and the host-endpoint dispatch
//! chains. Chain layout, per upstream:
//!
//! 1. admin-down endpoints: deny everything;
//! 2. tracked chains: (conn-log check,) mark+allow RELATED/ESTABLISHED,
//!    deny INVALID;
//! 3. host endpoints: jump to the failsafe chain;
//! 4. clear accept and pass bits; workload egress: deny VXLAN/IPIP;
//! 5. per tier: clear pass, jump to each policy while no verdict, return on
//!    accept; end-of-tier deny unless the tier's default action is Pass;
//! 6. profiles (jump, return on accept), then the final deny.

use felix_proto::{PolicyId, TierInfo};

use crate::dataplane::generictables::{
    Action, Chain, CtState, Match, MatchCriteria, PortRange, Rule,
};

use super::config::{RenderConfig, TableName};
use super::dispatch::{interface_dispatch_chains, DispatchConfig};
use super::drop_prefix;
use super::names::*;
use super::policy::{drop_report, is_staged, policy_chain_name, profile_chain_name};
use super::statics::conn_log_check;

const PROTO_UDP: u8 = 17;
const PROTO_IPIP: u8 = 4;

/// Which kind of endpoint chain is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChainKind {
    /// Filter table (and the mangle egress chain of host endpoints).
    Normal,
    /// Raw table: untracked policy, no conntrack rules, NOTRACK on accept.
    Untracked,
    /// Mangle table ingress: pre-DNAT policy.
    PreDnat,
    /// Filter table, forwarded traffic of host endpoints.
    Forward,
}

/// Direction of policy an endpoint chain applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Inbound to the endpoint (policy ingress rules).
    Ingress,
    /// Outbound from the endpoint (policy egress rules).
    Egress,
}

/// Everything one endpoint chain depends on.
pub(crate) struct EndpointChainSpec<'a> {
    pub name: &'a str,
    pub endpoint_pfx: &'static str,
    pub tiers: &'a [TierInfo],
    pub profiles: &'a [String],
    pub dir: Dir,
    pub kind: ChainKind,
    pub failsafe: Option<&'static str>,
    pub admin_up: bool,
    pub allow_action: Action,
    pub deny_encap: bool,
}

fn deny_word(a: &Action) -> &'static str {
    match a {
        Action::Reject { .. } => "REJECT",
        _ => "DROP",
    }
}

fn tier_policies(t: &TierInfo, dir: Dir) -> Vec<&PolicyId> {
    let pols = match dir {
        Dir::Ingress => &t.ingress_policies,
        Dir::Egress => &t.egress_policies,
    };
    pols.iter().filter(|p| !is_staged(&p.kind)).collect()
}

/// The conntrack rules at the top of tracked endpoint chains.
fn conntrack_rules(cfg: &RenderConfig, allow: &Action, with_conn_log: bool) -> Vec<Rule> {
    let mut rules = Vec::new();
    if with_conn_log {
        rules.extend(conn_log_check(cfg));
    }
    let est = MatchCriteria::new().ct_state(&[CtState::Related, CtState::Established]);
    if *allow != Action::Accept {
        rules.push(Rule::new(
            est.clone(),
            Action::SetMark {
                mark: cfg.mark_accept,
            },
        ));
    }
    rules.push(Rule::new(est, allow.clone()));
    if !cfg.disable_conntrack_invalid {
        rules.push(Rule::new(
            MatchCriteria::new().ct_state(&[CtState::Invalid]),
            cfg.filter_deny_action.clone(),
        ));
    }
    rules
}

/// Renders one endpoint chain.
pub(crate) fn endpoint_chain(cfg: &RenderConfig, s: &EndpointChainSpec<'_>) -> Chain {
    let max = cfg.max_chain_name_len();
    let name = endpoint_chain_name(s.endpoint_pfx, s.name, max);
    let deny = cfg.filter_deny_action.clone();
    let accept_bit = || MatchCriteria::new().mark_matches(cfg.mark_accept, cfg.mark_accept);
    let pass_clear = || MatchCriteria::new().mark_clear(cfg.mark_pass);
    if !s.admin_up {
        return Chain::new(
            &name,
            vec![Rule::new(MatchCriteria::new(), deny).comment("Endpoint admin disabled")],
        );
    }
    let mut rules = Vec::new();
    if s.kind != ChainKind::Untracked {
        rules.extend(conntrack_rules(
            cfg,
            &s.allow_action,
            s.kind != ChainKind::PreDnat,
        ));
    }
    if let Some(fs) = s.failsafe {
        rules.push(Rule::new(MatchCriteria::new(), Action::Jump(fs.into())));
    }
    rules.push(Rule::new(
        MatchCriteria::new(),
        Action::ClearMark {
            mark: cfg.mark_accept | cfg.mark_pass,
        },
    ));
    if s.deny_encap && !cfg.allow_vxlan_from_workloads {
        rules.push(
            Rule::new(
                MatchCriteria::new()
                    .protocol_num(PROTO_UDP)
                    .dest_ports(vec![PortRange::single(cfg.vxlan_port)]),
                deny.clone(),
            )
            .comment(&format!(
                "{} VXLAN encapped packets originating in workloads",
                deny_word(&deny)
            )),
        );
    }
    if s.deny_encap && !cfg.allow_ipip_from_workloads {
        rules.push(
            Rule::new(MatchCriteria::new().protocol_num(PROTO_IPIP), deny.clone()).comment(
                &format!(
                    "{} IPinIP encapped packets originating in workloads",
                    deny_word(&deny)
                ),
            ),
        );
    }
    let policy_pfx = match s.dir {
        Dir::Ingress => POLICY_INBOUND_PFX,
        Dir::Egress => POLICY_OUTBOUND_PFX,
    };
    for (tier_index, tier) in s.tiers.iter().enumerate() {
        let pols = tier_policies(tier, s.dir);
        if pols.is_empty() {
            continue;
        }
        rules.push(
            Rule::new(
                MatchCriteria::new(),
                Action::ClearMark {
                    mark: cfg.mark_pass,
                },
            )
            .comment(&format!("Start of tier {}", tier.name)),
        );
        for p in pols {
            rules.push(Rule::new(
                pass_clear(),
                Action::Jump(policy_chain_name(policy_pfx, p, max)),
            ));
            if s.kind == ChainKind::Untracked {
                rules.push(Rule::new(accept_bit(), Action::NoTrack));
            }
            rules
                .push(Rule::new(accept_bit(), Action::Return).comment("Return if policy accepted"));
        }
        let tier_passes = tier.default_action.eq_ignore_ascii_case("pass");
        if matches!(s.kind, ChainKind::Normal | ChainKind::Forward) && !tier_passes {
            if let Some(dl) = cfg.drop_log {
                let prefix = drop_prefix::tier_end_prefix(tier_index, &name);
                rules.push(drop_report(&pass_clear(), dl, &prefix));
            }
            rules.push(Rule::new(pass_clear(), deny.clone()).comment(&format!(
                "End of tier {}. {} if no policies passed packet",
                tier.name,
                deny_word(&deny)
            )));
        }
    }
    if s.tiers.is_empty() && s.kind == ChainKind::Forward {
        rules.push(
            Rule::new(
                MatchCriteria::new(),
                Action::SetMark {
                    mark: cfg.mark_accept,
                },
            )
            .comment("Allow forwarded traffic by default"),
        );
        rules.push(
            Rule::new(MatchCriteria::new(), Action::Return)
                .comment("Return for accepted forward traffic"),
        );
    }
    if s.kind == ChainKind::Normal {
        let profile_pfx = match s.dir {
            Dir::Ingress => PROFILE_INBOUND_PFX,
            Dir::Egress => PROFILE_OUTBOUND_PFX,
        };
        for p in s.profiles {
            rules.push(Rule::new(
                MatchCriteria::new(),
                Action::Jump(profile_chain_name(profile_pfx, p, max)),
            ));
            rules.push(
                Rule::new(accept_bit(), Action::Return).comment("Return if profile accepted"),
            );
        }
        if let Some(dl) = cfg.drop_log {
            let prefix = drop_prefix::no_match_prefix(&name);
            rules.push(drop_report(&MatchCriteria::new(), dl, &prefix));
        }
        rules.push(
            Rule::new(MatchCriteria::new(), deny.clone())
                .comment(&format!("{} if no profiles matched", deny_word(&deny))),
        );
    }
    Chain::new(&name, rules)
}

/// `cali-rpf-skip`: sources a workload may use although they do not route
/// back through its interface (`allowSpoofedSourcePrefixes`).
pub(crate) fn rpf_skip_chain(cfg: &RenderConfig, allowed: &[(String, Vec<ipnet::IpNet>)]) -> Chain {
    let mut rules = Vec::new();
    for (iface, nets) in allowed {
        for n in nets {
            let family_ok = matches!(
                (n, cfg.ip_version),
                (ipnet::IpNet::V4(_), crate::dataplane::IpVersion::V4)
                    | (ipnet::IpNet::V6(_), crate::dataplane::IpVersion::V6)
            );
            if family_ok {
                rules.push(Rule::new(
                    MatchCriteria::new().in_interface(iface).source_net(*n),
                    Action::Accept,
                ));
            }
        }
    }
    Chain::new(super::statics::CHAIN_RPF_SKIP, rules)
}

/// Host-endpoint dispatch chains per table. Host interfaces that match no
/// endpoint fall through (return): host endpoints are opt-in.
pub(crate) fn host_dispatch_chains(
    cfg: &RenderConfig,
    host_ifaces: &[String],
) -> Vec<(TableName, Chain)> {
    let dc = DispatchConfig {
        wildcard: "+".into(),
        deny_action: cfg.filter_deny_action.clone(),
        max_name_len: cfg.max_chain_name_len(),
    };
    let mut out = Vec::new();
    let both = |from: (&'static str, &'static str), to: (&'static str, &'static str)| {
        interface_dispatch_chains(host_ifaces, Some(from), Some(to), &[], &[], &dc).all()
    };
    for c in both(
        (CHAIN_DISPATCH_FROM_HOST_ENDPOINT, HOST_FROM_ENDPOINT_PFX),
        (CHAIN_DISPATCH_TO_HOST_ENDPOINT, HOST_TO_ENDPOINT_PFX),
    ) {
        out.push((TableName::Filter, c.clone()));
        out.push((TableName::Mangle, c.clone()));
        out.push((TableName::Raw, c));
    }
    for c in both(
        (
            CHAIN_DISPATCH_FROM_HOST_ENDPOINT_FORWARD,
            HOST_FROM_ENDPOINT_FORWARD_PFX,
        ),
        (
            CHAIN_DISPATCH_TO_HOST_ENDPOINT_FORWARD,
            HOST_TO_ENDPOINT_FORWARD_PFX,
        ),
    ) {
        out.push((TableName::Filter, c));
    }
    out
}

/// Floating-IP NAT chains from `(external, internal)` address pairs of the
/// local workloads (already filtered to this IP version).
pub(crate) fn floating_ip_chains(pairs: &[(std::net::IpAddr, std::net::IpAddr)]) -> Vec<Chain> {
    let mut sorted = pairs.to_vec();
    sorted.sort();
    sorted.dedup();
    let dnat = sorted
        .iter()
        .map(|(ext, int)| {
            Rule::new(
                MatchCriteria::new().dest_net(ipnet::IpNet::from(*ext)),
                Action::Dnat {
                    addr: *int,
                    port: None,
                },
            )
        })
        .collect();
    let snat = sorted
        .iter()
        .map(|(ext, int)| {
            Rule::new(
                MatchCriteria::new()
                    .source_net(ipnet::IpNet::from(*int))
                    .dest_net(ipnet::IpNet::from(*int)),
                Action::Snat {
                    addr: *ext,
                    fully_random: false,
                },
            )
        })
        .collect();
    vec![
        Chain::new(super::statics::CHAIN_FIP_DNAT, dnat),
        Chain::new(super::statics::CHAIN_FIP_SNAT, snat),
    ]
}

/// `cali-nat-outgoing`: masquerade traffic from natOutgoing pools to
/// destinations outside every pool (and, given `all_hosts_set`, outside
/// every node's address).
pub(crate) fn nat_outgoing_chain(
    cfg: &RenderConfig,
    masq_set: &str,
    all_pools_set: &str,
    all_hosts_set: Option<&str>,
) -> Chain {
    let base = |proto: Option<&str>| {
        let mut m = MatchCriteria::new()
            .source_ip_set(masq_set)
            .with(Match::DestIpSet {
                set: all_pools_set.into(),
                negate: true,
            });
        if let Some(hosts) = all_hosts_set {
            m = m.with(Match::DestIpSet {
                set: hosts.into(),
                negate: true,
            });
        }
        if let Some(p) = proto {
            m = m.protocol(p);
        }
        if !cfg.nat_outgoing_iface_filter.is_empty() {
            m = m.out_interface(&cfg.nat_outgoing_iface_filter);
        }
        m
    };
    let default_action = match cfg.nat_outgoing_address {
        Some(addr) => Action::Snat {
            addr,
            fully_random: false,
        },
        None => Action::Masquerade {
            to_ports: None,
            fully_random: false,
        },
    };
    let rules = match (cfg.nat_port_range, cfg.nat_outgoing_address) {
        (Some(pr), None) if pr.last > 0 => {
            let ranged = Action::Masquerade {
                to_ports: Some(pr),
                fully_random: false,
            };
            vec![
                Rule::new(base(Some("tcp")), ranged.clone()),
                Rule::new(base(Some("tcp")), Action::Return),
                Rule::new(base(Some("udp")), ranged),
                Rule::new(base(Some("udp")), Action::Return),
                Rule::new(base(None), default_action),
            ]
        }
        _ => vec![Rule::new(base(None), default_action)],
    };
    Chain::new(CHAIN_NAT_OUTGOING, rules)
}
