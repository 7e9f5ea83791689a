//! IP-set members and the named-port protocol filter.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::Protocol;

/// Protocol component of a named-port IP set.
///
/// `None` marks a selector-only set; `Any` a named port whose rule gives no
/// protocol.  The string forms are part of the IP-set unique ID and match
/// upstream's (`tcp`, `udp`, `sctp`, `any`, `none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NpProtocol {
    None,
    Tcp,
    Udp,
    Sctp,
    Any,
}

impl NpProtocol {
    /// The protocol a rule's top-level `protocol` implies for its named
    /// ports: UDP or SCTP when the rule says so, TCP otherwise; `Any` when
    /// the rule has no protocol.
    pub fn from_rule_protocol(p: Option<&Protocol>) -> NpProtocol {
        match p {
            None => NpProtocol::Any,
            Some(p) if NpProtocol::Udp.matches(p) => NpProtocol::Udp,
            Some(p) if NpProtocol::Sctp.matches(p) => NpProtocol::Sctp,
            Some(_) => NpProtocol::Tcp,
        }
    }

    /// Whether an endpoint port declared with protocol `p` satisfies this
    /// filter.  Protocol number 0 only satisfies `Any`.
    pub fn matches(self, p: &Protocol) -> bool {
        match p {
            Protocol::Number(0) => self == NpProtocol::Any,
            Protocol::Number(n) => self == NpProtocol::Any || self.number() == Some(*n),
            Protocol::Name(name) => match self {
                NpProtocol::Any => true,
                NpProtocol::Tcp => name.eq_ignore_ascii_case("tcp"),
                NpProtocol::Udp => name.eq_ignore_ascii_case("udp"),
                NpProtocol::Sctp => name.eq_ignore_ascii_case("sctp"),
                NpProtocol::None => false,
            },
        }
    }

    fn number(self) -> Option<u8> {
        match self {
            NpProtocol::Tcp => Some(6),
            NpProtocol::Udp => Some(17),
            NpProtocol::Sctp => Some(132),
            NpProtocol::Any => Some(255),
            NpProtocol::None => Some(0),
        }
    }

    /// Lower-case name used in IDs and members.
    pub fn as_str(self) -> &'static str {
        match self {
            NpProtocol::None => "none",
            NpProtocol::Tcp => "tcp",
            NpProtocol::Udp => "udp",
            NpProtocol::Sctp => "sctp",
            NpProtocol::Any => "any",
        }
    }
}

/// One IP-set member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Member {
    /// A CIDR, host bits cleared; a single address is a /32 or /128.
    Net(IpNet),
    /// An address plus protocol and port (`IP_AND_PORT` sets).  `proto` is
    /// never `None` or `Any`.
    IpPort {
        addr: IpAddr,
        proto: NpProtocol,
        port: u16,
    },
}

impl fmt::Display for Member {
    /// The proto wire form: `10.0.0.1/32`, `10.0.0.0/8`,
    /// `10.0.0.1,tcp:8080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Member::Net(n) => write!(f, "{n}"),
            Member::IpPort { addr, proto, port } => write!(f, "{addr},{}:{port}", proto.as_str()),
        }
    }
}

/// The host CIDR of an address.
pub fn host_net(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}
