//! Static chains: the top-level `cali-*` chains of each table, failsafe
//! chains, `cali-wl-to-host`, the connection-transition log chain, and our
//! jumps from the kernel's chains. Same order and marks as upstream.

use crate::dataplane::generictables::{
    Action, Chain, CtState, Match, MatchCriteria, PortRange, Rule,
};
use crate::dataplane::IpVersion;

use super::config::{EndpointToHostAction, FailsafePort, RenderConfig, TableName};
use super::names::*;

/// The connection-transition log chain (filter and mangle).
pub const CHAIN_LOG_CONN: &str = "cali-log-conn";
/// Raw-table chain of sources exempt from the workload RPF check.
pub const CHAIN_RPF_SKIP: &str = "cali-rpf-skip";
/// NAT chain for floating-IP DNAT.
pub const CHAIN_FIP_DNAT: &str = "cali-fip-dnat";
/// NAT chain for floating-IP SNAT.
pub const CHAIN_FIP_SNAT: &str = "cali-fip-snat";

const PROTO_ICMPV6: u8 = 58;

fn workload_wildcards(cfg: &RenderConfig) -> impl Iterator<Item = String> + '_ {
    cfg.workload_iface_prefixes.iter().map(|p| format!("{p}+"))
}

fn jump(t: &str) -> Action {
    Action::Jump(t.into())
}

fn all() -> MatchCriteria {
    MatchCriteria::new()
}

fn accept_bit(cfg: &RenderConfig) -> MatchCriteria {
    all().mark_matches(cfg.mark_accept, cfg.mark_accept)
}

fn family_ok(cfg: &RenderConfig, p: &FailsafePort) -> bool {
    match (p.net, cfg.ip_version) {
        (None, _) => true,
        (Some(n), IpVersion::V4) => matches!(n, ipnet::IpNet::V4(_)),
        (Some(n), IpVersion::V6) => matches!(n, ipnet::IpNet::V6(_)),
    }
}

#[derive(Clone, Copy)]
enum PortSide {
    Src,
    Dst,
}

/// One failsafe rule: protocol, port on `port_side`, peer net on `net_side`.
fn failsafe_rule(p: &FailsafePort, port_side: PortSide, net_side: PortSide) -> Rule {
    let ports = vec![PortRange::single(p.port)];
    let mut m = all().protocol(&p.protocol);
    m = match port_side {
        PortSide::Src => m.source_ports(ports),
        PortSide::Dst => m.dest_ports(ports),
    };
    if let Some(n) = p.net {
        m = match net_side {
            PortSide::Src => m.source_net(n),
            PortSide::Dst => m.dest_net(n),
        };
    }
    Rule::new(m, Action::Accept)
}

/// `cali-failsafe-in`: inbound failsafe ports (to the host); in raw, also
/// replies to outbound failsafe connections (raw runs before conntrack).
fn failsafe_in(cfg: &RenderConfig, table: TableName) -> Chain {
    let mut rules: Vec<Rule> = cfg
        .failsafe_inbound
        .iter()
        .filter(|p| family_ok(cfg, p))
        .map(|p| failsafe_rule(p, PortSide::Dst, PortSide::Src))
        .collect();
    if table == TableName::Raw {
        rules.extend(
            cfg.failsafe_outbound
                .iter()
                .filter(|p| family_ok(cfg, p))
                .map(|p| failsafe_rule(p, PortSide::Src, PortSide::Src)),
        );
    }
    Chain::new(CHAIN_FAILSAFE_IN, rules)
}

/// `cali-failsafe-out`: outbound failsafe ports; in raw, also replies of
/// inbound failsafe connections.
fn failsafe_out(cfg: &RenderConfig, table: TableName) -> Chain {
    let mut rules: Vec<Rule> = cfg
        .failsafe_outbound
        .iter()
        .filter(|p| family_ok(cfg, p))
        .map(|p| failsafe_rule(p, PortSide::Dst, PortSide::Dst))
        .collect();
    if table == TableName::Raw {
        rules.extend(
            cfg.failsafe_inbound
                .iter()
                .filter(|p| family_ok(cfg, p))
                .map(|p| failsafe_rule(p, PortSide::Src, PortSide::Dst)),
        );
    }
    Chain::new(CHAIN_FAILSAFE_OUT, rules)
}

fn filter_input(cfg: &RenderConfig) -> Chain {
    let mut rules = Vec::new();
    for w in workload_wildcards(cfg) {
        rules.push(Rule::new(
            all().in_interface(&w),
            Action::Goto(CHAIN_WORKLOAD_TO_HOST.into()),
        ));
    }
    rules.push(Rule::new(accept_bit(cfg), cfg.filter_allow_action.clone()));
    rules.push(Rule::new(
        all(),
        Action::ClearMark {
            mark: cfg.all_calico_mark_bits(),
        },
    ));
    rules.extend(neighbour_discovery(cfg));
    rules.push(Rule::new(all(), jump(CHAIN_DISPATCH_FROM_HOST_ENDPOINT)));
    rules.push(
        Rule::new(accept_bit(cfg), cfg.filter_allow_action.clone())
            .comment("Host endpoint policy accepted packet."),
    );
    Chain::new(CHAIN_FILTER_INPUT, rules)
}

/// IPv6 only: neighbour discovery and MLD (ICMPv6 130-133, 135, 136) accepted. A workload's
/// must reach the host; a host endpoint's policy never sees the host's own (eBPF mode skips
/// them likewise), or a default-deny host endpoint would cut the host off its IPv6 link.
fn neighbour_discovery(cfg: &RenderConfig) -> Vec<Rule> {
    if cfg.ip_version != IpVersion::V6 {
        return Vec::new();
    }
    [130u8, 131, 132, 133, 135, 136]
        .into_iter()
        .map(|t| {
            Rule::new(
                all().protocol_num(PROTO_ICMPV6).with(Match::Icmpv6Type {
                    icmp_type: t,
                    code: None,
                    negate: false,
                }),
                cfg.filter_allow_action.clone(),
            )
        })
        .collect()
}

fn workload_to_host(cfg: &RenderConfig) -> Chain {
    let mut rules = neighbour_discovery(cfg);
    rules.push(Rule::new(all(), jump(CHAIN_FROM_WORKLOAD_DISPATCH)));
    let tail = match cfg.endpoint_to_host_action {
        EndpointToHostAction::Drop => vec![cfg.filter_deny_action.clone()],
        EndpointToHostAction::Return => vec![Action::Return],
        // Accepting means: mark accepted, then the allow verdict (which may
        // itself be RETURN, hence the mark).
        EndpointToHostAction::Accept => {
            let mut v = Vec::new();
            if cfg.filter_allow_action != Action::Accept {
                v.push(Action::SetMark {
                    mark: cfg.mark_accept,
                });
            }
            v.push(cfg.filter_allow_action.clone());
            v
        }
    };
    for a in tail {
        rules.push(Rule::new(all(), a).comment("Configured DefaultEndpointToHostAction"));
    }
    Chain::new(CHAIN_WORKLOAD_TO_HOST, rules)
}

fn filter_forward(cfg: &RenderConfig) -> Chain {
    let mut rules = vec![
        Rule::new(
            all(),
            Action::ClearMark {
                mark: cfg.all_calico_mark_bits() & !cfg.mark_accept,
            },
        ),
        Rule::new(
            all().mark_clear(cfg.mark_accept),
            jump(CHAIN_DISPATCH_FROM_HOST_ENDPOINT_FORWARD),
        ),
    ];
    for w in workload_wildcards(cfg) {
        rules.push(Rule::new(
            all().in_interface(&w),
            jump(CHAIN_FROM_WORKLOAD_DISPATCH),
        ));
        rules.push(Rule::new(
            all().out_interface(&w),
            jump(CHAIN_TO_WORKLOAD_DISPATCH),
        ));
    }
    rules.push(Rule::new(
        all(),
        jump(CHAIN_DISPATCH_TO_HOST_ENDPOINT_FORWARD),
    ));
    Chain::new(CHAIN_FILTER_FORWARD, rules)
}

/// The rule that sends replies carrying the conn-log bit to the log chain.
pub(crate) fn conn_log_check(cfg: &RenderConfig) -> Option<Rule> {
    (cfg.mark_conn_log != 0).then(|| {
        Rule::new(
            all()
                .with(Match::Raw {
                    iptables: format!(
                        "-m connmark --mark {:#x}/{:#x}",
                        cfg.mark_conn_log, cfg.mark_conn_log
                    ),
                    nftables: format!(
                        "ct mark & {:#010x} == {:#010x}",
                        cfg.mark_conn_log, cfg.mark_conn_log
                    ),
                })
                .ct_state(&[CtState::Related, CtState::Established]),
            jump(CHAIN_LOG_CONN),
        )
    })
}

fn filter_output(cfg: &RenderConfig) -> Chain {
    let mut rules = Vec::new();
    // Replies to workload-to-host connections leave here and return at
    // the workload-interface rule without passing an endpoint chain.
    rules.extend(conn_log_check(cfg));
    rules.push(Rule::new(accept_bit(cfg), cfg.filter_allow_action.clone()));
    for w in workload_wildcards(cfg) {
        rules.push(Rule::new(all().out_interface(&w), Action::Return));
    }
    rules.push(Rule::new(
        all(),
        Action::ClearMark {
            mark: cfg.all_calico_mark_bits(),
        },
    ));
    rules.extend(neighbour_discovery(cfg));
    rules.push(Rule::new(
        all().with(Match::Raw {
            iptables: "-m conntrack ! --ctstate DNAT".into(),
            nftables: "ct status != dnat".into(),
        }),
        jump(CHAIN_DISPATCH_TO_HOST_ENDPOINT),
    ));
    rules.push(
        Rule::new(accept_bit(cfg), cfg.filter_allow_action.clone())
            .comment("Host endpoint policy accepted packet."),
    );
    Chain::new(CHAIN_FILTER_OUTPUT, rules)
}

/// `cali-log-conn`: exactly one follow-up log per logged connection, for
/// its first response: TCP RST, ICMP error, or any other reply. Each branch
/// logs, clears the connmark bit and returns (LOG does not terminate).
fn log_conn_chain(cfg: &RenderConfig) -> Chain {
    let bit = cfg.mark_conn_log;
    let pfx = &cfg.log_connection_transitions_prefix;
    let clear = Action::SetConnMark { mark: 0, mask: bit };
    let icmp = match cfg.ip_version {
        IpVersion::V4 => all().protocol("icmp"),
        IpVersion::V6 => all().protocol_num(PROTO_ICMPV6),
    };
    let branches = [
        (
            all().protocol("tcp").with(Match::Raw {
                iptables: "--tcp-flags RST RST".into(),
                nftables: "tcp flags & rst == rst".into(),
            }),
            "rst",
        ),
        (icmp.ct_state(&[CtState::Related]), "icmp-err"),
        (all(), "est"),
    ];
    let mut rules = Vec::new();
    for (m, suffix) in branches {
        rules.push(Rule::new(
            m.clone(),
            Action::Log {
                prefix: format!("{pfx}-{suffix}"),
            },
        ));
        rules.push(Rule::new(m.clone(), clear.clone()));
        rules.push(Rule::new(m, Action::Return));
    }
    Chain::new(CHAIN_LOG_CONN, rules)
}

fn mangle_prerouting(cfg: &RenderConfig) -> Chain {
    Chain::new(
        CHAIN_MANGLE_PREROUTING,
        vec![
            Rule::new(
                all().ct_state(&[CtState::Related, CtState::Established]),
                cfg.mangle_allow_action.clone(),
            ),
            Rule::new(accept_bit(cfg), cfg.mangle_allow_action.clone()),
            Rule::new(all(), jump(CHAIN_DISPATCH_FROM_HOST_ENDPOINT)),
            Rule::new(accept_bit(cfg), cfg.mangle_allow_action.clone())
                .comment("Host endpoint policy accepted packet."),
        ],
    )
}

fn mangle_postrouting(cfg: &RenderConfig) -> Chain {
    Chain::new(
        CHAIN_MANGLE_POSTROUTING,
        vec![
            Rule::new(accept_bit(cfg), Action::Return),
            Rule::new(
                all(),
                Action::ClearMark {
                    mark: cfg.all_calico_mark_bits(),
                },
            ),
            Rule::new(
                all().with(Match::Raw {
                    iptables: "-m conntrack --ctstate DNAT".into(),
                    nftables: "ct status dnat".into(),
                }),
                jump(CHAIN_DISPATCH_TO_HOST_ENDPOINT),
            ),
            Rule::new(accept_bit(cfg), Action::Return)
                .comment("Host endpoint policy accepted packet."),
        ],
    )
}

fn raw_prerouting(cfg: &RenderConfig) -> Chain {
    let from_wl = cfg.mark_scratch0;
    let mut rules = vec![Rule::new(
        all(),
        Action::ClearMark {
            mark: cfg.all_calico_mark_bits(),
        },
    )];
    for w in workload_wildcards(cfg) {
        rules.push(Rule::new(
            all().in_interface(&w),
            Action::SetMark { mark: from_wl },
        ));
    }
    rules.push(Rule::new(
        all().mark_matches(from_wl, from_wl),
        jump(CHAIN_RPF_SKIP),
    ));
    // Anti-spoofing: a workload's packets must come from an address routed
    // back through its own interface.
    rules.push(Rule::new(
        all()
            .mark_matches(from_wl, from_wl)
            .with(Match::RpfCheckFailed),
        cfg.filter_deny_action.clone(),
    ));
    rules.push(Rule::new(
        all().mark_clear(from_wl),
        jump(CHAIN_DISPATCH_FROM_HOST_ENDPOINT),
    ));
    rules.push(Rule::new(accept_bit(cfg), Action::Accept));
    Chain::new(CHAIN_RAW_PREROUTING, rules)
}

fn raw_output(cfg: &RenderConfig) -> Chain {
    Chain::new(
        CHAIN_RAW_OUTPUT,
        vec![
            Rule::new(
                all(),
                Action::ClearMark {
                    mark: cfg.all_calico_mark_bits(),
                },
            ),
            Rule::new(all(), jump(CHAIN_DISPATCH_TO_HOST_ENDPOINT)),
            Rule::new(accept_bit(cfg), Action::Accept),
        ],
    )
}

fn nat_chains() -> Vec<Chain> {
    vec![
        Chain::new(
            CHAIN_NAT_PREROUTING,
            vec![Rule::new(all(), jump(CHAIN_FIP_DNAT))],
        ),
        Chain::new(
            CHAIN_NAT_POSTROUTING,
            vec![
                Rule::new(all(), jump(CHAIN_FIP_SNAT)),
                Rule::new(all(), jump(CHAIN_NAT_OUTGOING)),
            ],
        ),
        Chain::new(
            CHAIN_NAT_OUTPUT,
            vec![Rule::new(all(), jump(CHAIN_FIP_DNAT))],
        ),
    ]
}

/// The static chains of `table`, un-namespaced. Includes empty
/// placeholders for chains other components own (`cali-rpf-skip`,
/// `cali-fip-dnat`, `cali-fip-snat`, `cali-nat-outgoing`) so the static
/// ruleset loads on its own; owners replace them.
pub(crate) fn static_chains(cfg: &RenderConfig, table: TableName) -> Vec<Chain> {
    let log_conn = cfg.mark_conn_log != 0;
    match table {
        TableName::Filter => {
            let mut v = vec![
                filter_forward(cfg),
                filter_input(cfg),
                workload_to_host(cfg),
                failsafe_in(cfg, table),
                filter_output(cfg),
                failsafe_out(cfg, table),
            ];
            if log_conn {
                v.push(log_conn_chain(cfg));
            }
            v
        }
        TableName::Mangle => {
            let mut v = vec![
                failsafe_in(cfg, table),
                failsafe_out(cfg, table),
                mangle_prerouting(cfg),
                mangle_postrouting(cfg),
            ];
            if log_conn {
                v.push(log_conn_chain(cfg));
            }
            v
        }
        TableName::Raw => vec![
            failsafe_in(cfg, table),
            failsafe_out(cfg, table),
            raw_prerouting(cfg),
            raw_output(cfg),
            Chain::new(CHAIN_RPF_SKIP, Vec::new()),
        ],
        TableName::Nat => {
            let mut v = nat_chains();
            v.push(Chain::new(CHAIN_FIP_DNAT, Vec::new()));
            v.push(Chain::new(CHAIN_FIP_SNAT, Vec::new()));
            v.push(Chain::new(CHAIN_NAT_OUTGOING, Vec::new()));
            v
        }
    }
}

/// Our jumps from the kernel chains of `table` (iptables names).
pub(crate) fn static_insert_rules(table: TableName) -> Vec<(&'static str, Vec<Rule>)> {
    let j = |t: &str| vec![Rule::new(all(), jump(t))];
    match table {
        TableName::Filter => vec![
            ("INPUT", j(CHAIN_FILTER_INPUT)),
            ("FORWARD", j(CHAIN_FILTER_FORWARD)),
            ("OUTPUT", j(CHAIN_FILTER_OUTPUT)),
        ],
        TableName::Nat => vec![
            ("PREROUTING", j(CHAIN_NAT_PREROUTING)),
            ("POSTROUTING", j(CHAIN_NAT_POSTROUTING)),
            ("OUTPUT", j(CHAIN_NAT_OUTPUT)),
        ],
        TableName::Mangle => vec![
            ("PREROUTING", j(CHAIN_MANGLE_PREROUTING)),
            ("POSTROUTING", j(CHAIN_MANGLE_POSTROUTING)),
        ],
        TableName::Raw => vec![
            ("PREROUTING", j(CHAIN_RAW_PREROUTING)),
            ("OUTPUT", j(CHAIN_RAW_OUTPUT)),
        ],
    }
}

/// Rules appended (not inserted) to filter FORWARD, after any other
/// forwarding rules: accept what policy accepted, and mark the rest
/// accepted so later (non-Calico) chains can tell.
pub(crate) fn filter_forward_append_rules(cfg: &RenderConfig) -> Vec<Rule> {
    vec![
        Rule::new(accept_bit(cfg), cfg.filter_allow_action.clone())
            .comment("Policy explicitly accepted packet."),
        Rule::new(
            all(),
            Action::SetMark {
                mark: cfg.mark_accept,
            },
        ),
    ]
}
