//! IP-set members and the named-port protocol filter.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use crate::model::Protocol;

/// Protocol component of a named-port IP set.
///
/// `None` marks a selector-only set; `Any` a named port whose rule gives no
/// protocol.  The string forms are part of the IP-set unique ID and match
/// upstream's (`tcp`, `udp`, `sctp`, `any`, `none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NpProtocol {
    /// No named port: a selector-only set.
    None,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
    /// The named port's rule gives no protocol.
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
        /// The address.
        addr: IpAddr,
        /// The named port's protocol.
        proto: NpProtocol,
        /// The port number.
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

impl Member {
    /// The wire form (the same text as `Display`), built without the
    /// formatting machinery for the common IPv4 CIDR: a start-of-day flush
    /// formats one member per endpoint in the cluster.
    pub fn to_wire(&self) -> String {
        match self {
            Member::Net(IpNet::V4(n)) => v4_cidr_text(n.addr(), n.prefix_len()),
            other => other.to_string(),
        }
    }
}

/// `a.b.c.d/p`, written straight into a string of the right capacity
/// (this runs once per member of every IP set sent in full).
pub fn v4_cidr_text(a: Ipv4Addr, prefix: u8) -> String {
    let mut out = String::with_capacity(18);
    for (i, o) in a.octets().iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(&mut out, *o);
    }
    out.push('/');
    push_decimal(&mut out, prefix);
    out
}

/// Appends `v` in decimal.
fn push_decimal(out: &mut String, v: u8) {
    if v >= 100 {
        out.push(char::from(b'0' + v / 100));
    }
    if v >= 10 {
        out.push(char::from(b'0' + v / 10 % 10));
    }
    out.push(char::from(b'0' + v % 10));
}

/// The host CIDR of an address.
pub fn host_net(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The fast wire form is exactly the `Display` form.
        #[test]
        fn wire_form_equals_display(a in any::<u32>(), p in 0u8..=32, v6 in any::<u128>(), p6 in 0u8..=128, port in any::<u16>()) {
            let v4 = Member::Net(IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(a), p).unwrap().trunc()));
            prop_assert_eq!(v4.to_wire(), v4.to_string());
            let v6 = Member::Net(IpNet::V6(ipnet::Ipv6Net::new(std::net::Ipv6Addr::from(v6), p6).unwrap().trunc()));
            prop_assert_eq!(v6.to_wire(), v6.to_string());
            let ipp = Member::IpPort { addr: IpAddr::V4(Ipv4Addr::from(a)), proto: NpProtocol::Tcp, port };
            prop_assert_eq!(ipp.to_wire(), ipp.to_string());
        }
    }

    #[test]
    fn wire_form_examples() {
        let m = Member::Net("10.0.0.1/32".parse().unwrap());
        assert_eq!(m.to_wire(), "10.0.0.1/32");
        let m = Member::Net("0.0.0.0/1".parse().unwrap());
        assert_eq!(m.to_wire(), "0.0.0.0/1");
        let m = Member::Net("192.168.100.0/24".parse().unwrap());
        assert_eq!(m.to_wire(), "192.168.100.0/24");
    }
}
