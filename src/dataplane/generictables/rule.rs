//! Typed rules and chains. Each match and action is data; the iptables and
//! nftables renderers translate them. New match kinds are added as new
//! [`Match`] variants; [`Match::Raw`] is the escape hatch for constructs
//! that have no typed form yet (it must carry both backends' syntax).

use ipnet::IpNet;

/// A transport protocol, by name or number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// A protocol name as the tools know it (`tcp`, `udp`, `icmp`, `sctp`, ...).
    Named(String),
    /// A protocol number.
    Number(u8),
}

/// An inclusive port range; `first == last` is a single port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (>= first).
    pub last: u16,
}

impl PortRange {
    /// A single port.
    pub fn single(port: u16) -> Self {
        PortRange {
            first: port,
            last: port,
        }
    }
    /// An inclusive range; the bounds are swapped if given backwards.
    pub fn range(a: u16, b: u16) -> Self {
        PortRange {
            first: a.min(b),
            last: a.max(b),
        }
    }
}

/// Conntrack states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CtState {
    /// NEW
    New,
    /// ESTABLISHED
    Established,
    /// RELATED
    Related,
    /// INVALID
    Invalid,
    /// UNTRACKED
    Untracked,
}

impl CtState {
    /// Upper-case iptables name.
    pub fn iptables_name(self) -> &'static str {
        match self {
            CtState::New => "NEW",
            CtState::Established => "ESTABLISHED",
            CtState::Related => "RELATED",
            CtState::Invalid => "INVALID",
            CtState::Untracked => "UNTRACKED",
        }
    }
    /// Lower-case nftables name.
    pub fn nft_name(self) -> &'static str {
        match self {
            CtState::New => "new",
            CtState::Established => "established",
            CtState::Related => "related",
            CtState::Invalid => "invalid",
            CtState::Untracked => "untracked",
        }
    }
}

/// Address types (`-m addrtype` / `fib ... type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrType {
    /// LOCAL
    Local,
    /// UNICAST
    Unicast,
    /// BROADCAST
    Broadcast,
    /// MULTICAST
    Multicast,
}

impl AddrType {
    /// Upper-case iptables name.
    pub fn iptables_name(self) -> &'static str {
        match self {
            AddrType::Local => "LOCAL",
            AddrType::Unicast => "UNICAST",
            AddrType::Broadcast => "BROADCAST",
            AddrType::Multicast => "MULTICAST",
        }
    }
    /// Lower-case nftables name.
    pub fn nft_name(self) -> &'static str {
        match self {
            AddrType::Local => "local",
            AddrType::Unicast => "unicast",
            AddrType::Broadcast => "broadcast",
            AddrType::Multicast => "multicast",
        }
    }
}

/// One match. `negate` inverts the match where the variant has it.
/// Interface names may end in `+` (iptables wildcard); the nftables
/// renderer converts it to `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Match {
    /// Transport protocol.
    Protocol {
        /// The protocol.
        proto: Protocol,
        /// Inverts the match.
        negate: bool,
    },
    /// Source address in a CIDR.
    SourceNet {
        /// The CIDR.
        net: IpNet,
        /// Inverts the match.
        negate: bool,
    },
    /// Destination address in a CIDR.
    DestNet {
        /// The CIDR.
        net: IpNet,
        /// Inverts the match.
        negate: bool,
    },
    /// Source port in any of the ranges (needs a protocol match first).
    SourcePorts {
        /// The port ranges.
        ports: Vec<PortRange>,
        /// Inverts the match.
        negate: bool,
    },
    /// Destination port in any of the ranges (needs a protocol match first).
    DestPorts {
        /// The port ranges.
        ports: Vec<PortRange>,
        /// Inverts the match.
        negate: bool,
    },
    /// Source address in the named IP set.
    SourceIpSet {
        /// Name of the IP set.
        set: String,
        /// Inverts the match.
        negate: bool,
    },
    /// Destination address in the named IP set.
    DestIpSet {
        /// Name of the IP set.
        set: String,
        /// Inverts the match.
        negate: bool,
    },
    /// Source (address, protocol, port) in the named IP+port set.
    SourceIpPortSet {
        /// Name of the IP set.
        set: String,
        /// Inverts the match.
        negate: bool,
    },
    /// Destination (address, protocol, port) in the named IP+port set.
    DestIpPortSet {
        /// Name of the IP set.
        set: String,
        /// Inverts the match.
        negate: bool,
    },
    /// Conntrack state is any of these.
    ConntrackState {
        /// The conntrack states.
        states: Vec<CtState>,
        /// Inverts the match.
        negate: bool,
    },
    /// `(packet mark & mask) == mark`.
    Mark {
        /// Value the masked packet mark must equal.
        mark: u32,
        /// Bits of the packet mark compared.
        mask: u32,
        /// Inverts the match.
        negate: bool,
    },
    /// Incoming interface (trailing `+` = prefix wildcard).
    InInterface {
        /// Interface name; a trailing `+` matches any suffix.
        name: String,
        /// Inverts the match.
        negate: bool,
    },
    /// Outgoing interface (trailing `+` = prefix wildcard).
    OutInterface {
        /// Interface name; a trailing `+` matches any suffix.
        name: String,
        /// Inverts the match.
        negate: bool,
    },
    /// ICMP (v4) type and optional code.
    IcmpType {
        /// ICMP type.
        icmp_type: u8,
        /// ICMP code; `None` matches any code.
        code: Option<u8>,
        /// Inverts the match.
        negate: bool,
    },
    /// ICMPv6 type and optional code.
    Icmpv6Type {
        /// ICMPv6 type.
        icmp_type: u8,
        /// ICMPv6 code; `None` matches any code.
        code: Option<u8>,
        /// Inverts the match.
        negate: bool,
    },
    /// Source address type.
    SrcAddrType {
        /// Address type to match.
        addr_type: AddrType,
        /// Only consider addresses of the outgoing interface (`--limit-iface-out`).
        limit_iface_out: bool,
        /// Inverts the match.
        negate: bool,
    },
    /// Destination address type.
    DstAddrType {
        /// Address type to match.
        addr_type: AddrType,
        /// Inverts the match.
        negate: bool,
    },
    /// Reverse-path check failed (strict RPF).
    RpfCheckFailed,
    /// A construct with no typed form: iptables and nftables text.
    Raw {
        /// The match in iptables syntax.
        iptables: String,
        /// The match in nftables syntax.
        nftables: String,
    },
}

/// An ordered conjunction of matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MatchCriteria(pub Vec<Match>);

impl MatchCriteria {
    /// Matches every packet.
    pub fn new() -> Self {
        MatchCriteria(Vec::new())
    }
    /// Appends a match.
    pub fn with(mut self, m: Match) -> Self {
        self.0.push(m);
        self
    }
    /// Protocol by name.
    pub fn protocol(self, name: &str) -> Self {
        self.with(Match::Protocol {
            proto: Protocol::Named(name.into()),
            negate: false,
        })
    }
    /// Protocol by number.
    pub fn protocol_num(self, n: u8) -> Self {
        self.with(Match::Protocol {
            proto: Protocol::Number(n),
            negate: false,
        })
    }
    /// Source CIDR.
    pub fn source_net(self, net: IpNet) -> Self {
        self.with(Match::SourceNet { net, negate: false })
    }
    /// Destination CIDR.
    pub fn dest_net(self, net: IpNet) -> Self {
        self.with(Match::DestNet { net, negate: false })
    }
    /// Destination ports.
    pub fn dest_ports(self, ports: Vec<PortRange>) -> Self {
        self.with(Match::DestPorts {
            ports,
            negate: false,
        })
    }
    /// Source ports.
    pub fn source_ports(self, ports: Vec<PortRange>) -> Self {
        self.with(Match::SourcePorts {
            ports,
            negate: false,
        })
    }
    /// Source in IP set.
    pub fn source_ip_set(self, set: &str) -> Self {
        self.with(Match::SourceIpSet {
            set: set.into(),
            negate: false,
        })
    }
    /// Destination in IP set.
    pub fn dest_ip_set(self, set: &str) -> Self {
        self.with(Match::DestIpSet {
            set: set.into(),
            negate: false,
        })
    }
    /// Conntrack state in `states`.
    pub fn ct_state(self, states: &[CtState]) -> Self {
        self.with(Match::ConntrackState {
            states: states.to_vec(),
            negate: false,
        })
    }
    /// `(mark & mask) == mark`.
    pub fn mark_matches(self, mark: u32, mask: u32) -> Self {
        self.with(Match::Mark {
            mark,
            mask,
            negate: false,
        })
    }
    /// All bits of `mask` clear.
    pub fn mark_clear(self, mask: u32) -> Self {
        self.with(Match::Mark {
            mark: 0,
            mask,
            negate: false,
        })
    }
    /// Incoming interface.
    pub fn in_interface(self, name: &str) -> Self {
        self.with(Match::InInterface {
            name: name.into(),
            negate: false,
        })
    }
    /// Outgoing interface.
    pub fn out_interface(self, name: &str) -> Self {
        self.with(Match::OutInterface {
            name: name.into(),
            negate: false,
        })
    }
    /// Names of every IP set referenced, in order.
    pub fn ip_set_names(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|m| match m {
                Match::SourceIpSet { set, .. }
                | Match::DestIpSet { set, .. }
                | Match::SourceIpPortSet { set, .. }
                | Match::DestIpPortSet { set, .. } => Some(set.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// What a matching packet does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// ACCEPT
    Accept,
    /// DROP
    Drop,
    /// RETURN
    Return,
    /// Jump to a chain (returns afterwards).
    Jump(String),
    /// Goto a chain (does not return here).
    Goto(String),
    /// Set the bits of `mark` (mark/mark).
    SetMark {
        /// Bits to set.
        mark: u32,
    },
    /// Set `mark` under `mask` (other bits untouched).
    SetMaskedMark {
        /// Value to set under `mask`.
        mark: u32,
        /// Bits of the packet mark that change.
        mask: u32,
    },
    /// Clear the bits of `mark`.
    ClearMark {
        /// Bits to clear.
        mark: u32,
    },
    /// Set the conntrack mark to `mark` under `mask`.
    SetConnMark {
        /// Value to set under `mask`.
        mark: u32,
        /// Bits of the connection mark that change.
        mask: u32,
    },
    /// Copy packet mark bits in `mask` to the connection mark.
    SaveConnMark {
        /// Bits copied.
        mask: u32,
    },
    /// Copy connection mark bits in `mask` to the packet mark.
    RestoreConnMark {
        /// Bits copied.
        mask: u32,
    },
    /// Log with a prefix.
    Log {
        /// Prefix of the kernel log line.
        prefix: String,
    },
    /// NFLOG to a group.
    Nflog {
        /// NFLOG group the packet is sent to.
        group: u16,
        /// Prefix attached to the logged packet.
        prefix: String,
        /// Bytes of the packet to copy; `None` leaves the default.
        size: Option<u32>,
    },
    /// MASQUERADE.
    Masquerade {
        /// Source ports to map to; `None` keeps the kernel's choice.
        to_ports: Option<PortRange>,
        /// Fully randomize the source port mapping.
        fully_random: bool,
    },
    /// DNAT to an address and optional port.
    Dnat {
        /// New destination address.
        addr: std::net::IpAddr,
        /// New destination port; `None` keeps it.
        port: Option<u16>,
    },
    /// SNAT to an address.
    Snat {
        /// New source address.
        addr: std::net::IpAddr,
        /// Fully randomize the source port mapping.
        fully_random: bool,
    },
    /// Skip conntrack (raw table).
    NoTrack,
    /// REJECT, optionally with an iptables `--reject-with` value.
    Reject {
        /// The `--reject-with` value; `None` for the default.
        with: Option<String>,
    },
}

/// A rule: matches, action and free-text comments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What the rule matches.
    pub match_criteria: MatchCriteria,
    /// What it does.
    pub action: Action,
    /// Extra comments (the hash comment is added by the driver).
    pub comments: Vec<String>,
}

impl Rule {
    /// A rule without comments.
    pub fn new(match_criteria: MatchCriteria, action: Action) -> Self {
        Rule {
            match_criteria,
            action,
            comments: Vec::new(),
        }
    }
    /// Adds a comment.
    pub fn comment(mut self, c: &str) -> Self {
        self.comments.push(c.into());
        self
    }
    /// The chain this rule jumps or goes to, if any.
    pub fn jump_target(&self) -> Option<&str> {
        match &self.action {
            Action::Jump(t) | Action::Goto(t) => Some(t),
            _ => None,
        }
    }
}

/// A chain we own outright (name starts `cali-` in iptables).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    /// Chain name.
    pub name: String,
    /// Rules in order.
    pub rules: Vec<Rule>,
}

impl Chain {
    /// A chain.
    pub fn new(name: &str, rules: Vec<Rule>) -> Self {
        Chain {
            name: name.into(),
            rules,
        }
    }
    /// Chains this chain jumps or goes to.
    pub fn referenced_chains(&self) -> Vec<&str> {
        self.rules.iter().filter_map(Rule::jump_target).collect()
    }
    /// IP sets referenced by any rule.
    pub fn ip_set_names(&self) -> Vec<&str> {
        self.rules
            .iter()
            .flat_map(|r| r.match_criteria.ip_set_names())
            .collect()
    }
}
