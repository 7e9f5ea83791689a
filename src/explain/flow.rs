//! A flow to explain: the facts of its first packet, from the command line
//! (`felix explain --src ... --dst ...`) or the admin socket's JSON body.
//!
//! Invariants (checked by [`Flow::new`], so every [`Flow`] holds them):
//! * source and destination are of one IP version;
//! * ports are given only for TCP, UDP and SCTP, and default to 0;
//! * ICMP type and code are given only for the ICMP of the flow's IP version
//!   (`icmp` for IPv4, `icmpv6` for IPv6); the type defaults to echo request
//!   (8, or 128 for IPv6) and the code to 0.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// A flow that cannot be explained as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Source and destination of different IP versions.
    #[error("--src {src} and --dst {dst} are of different IP versions")]
    MixedVersions {
        /// The source.
        src: IpAddr,
        /// The destination.
        dst: IpAddr,
    },
    /// A protocol name or number that is not one.
    #[error("unknown protocol {0:?} (expected tcp, udp, sctp, icmp, icmpv6 or a number 0-255)")]
    Protocol(String),
    /// A port on a protocol without ports.
    #[error("--{which} is only meaningful for tcp, udp and sctp (protocol is {proto})")]
    PortWithoutPorts {
        /// `src-port` or `dst-port`.
        which: &'static str,
        /// The flow's protocol number.
        proto: u8,
    },
    /// An ICMP type or code on a protocol that is not this version's ICMP.
    #[error(
        "--{which} needs --protocol {expected} for an IPv{version} flow (protocol is {proto})"
    )]
    IcmpWithoutIcmp {
        /// `icmp-type` or `icmp-code`.
        which: &'static str,
        /// The protocol it needs.
        expected: &'static str,
        /// 4 or 6.
        version: u8,
        /// The flow's protocol number.
        proto: u8,
    },
}

/// The flow as requested: what the CLI parses and the admin socket receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowSpec {
    /// Source address.
    #[arg(long)]
    pub src: IpAddr,
    /// Destination address.
    #[arg(long)]
    pub dst: IpAddr,
    /// tcp, udp, sctp, icmp, icmpv6 or a protocol number (default tcp).
    #[arg(long)]
    #[serde(default)]
    pub protocol: Option<String>,
    /// Source port (tcp, udp, sctp).
    #[arg(long)]
    #[serde(default)]
    pub src_port: Option<u16>,
    /// Destination port (tcp, udp, sctp).
    #[arg(long)]
    #[serde(default)]
    pub dst_port: Option<u16>,
    /// ICMP type (icmp, icmpv6; default echo request).
    #[arg(long)]
    #[serde(default)]
    pub icmp_type: Option<u8>,
    /// ICMP code (icmp, icmpv6; default 0).
    #[arg(long)]
    #[serde(default)]
    pub icmp_code: Option<u8>,
}

/// A checked flow (see the module invariants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (0 without ports).
    pub src_port: u16,
    /// Destination port (0 without ports).
    pub dst_port: u16,
    /// ICMP type and code, for this version's ICMP.
    pub icmp: Option<(u8, u8)>,
}

/// Protocol number of a name or number as the CLI and policies write it.
pub fn protocol_number(p: &str) -> Option<u8> {
    match p.to_ascii_lowercase().as_str() {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        "icmp" => Some(1),
        "icmpv6" => Some(58),
        n => n.parse().ok(),
    }
}

/// Whether packets of protocol `p` carry ports.
pub fn has_ports(p: u8) -> bool {
    matches!(p, 6 | 17 | 132)
}

impl Flow {
    /// Checks a requested flow.
    pub fn new(s: &FlowSpec) -> Result<Flow, FlowError> {
        if s.src.is_ipv6() != s.dst.is_ipv6() {
            return Err(FlowError::MixedVersions {
                src: s.src,
                dst: s.dst,
            });
        }
        let proto = match &s.protocol {
            None => 6,
            Some(p) => protocol_number(p).ok_or_else(|| FlowError::Protocol(p.clone()))?,
        };
        if !has_ports(proto) {
            for (which, v) in [("src-port", s.src_port), ("dst-port", s.dst_port)] {
                if v.is_some() {
                    return Err(FlowError::PortWithoutPorts { which, proto });
                }
            }
        }
        let v6 = s.src.is_ipv6();
        let (icmp_proto, expected, version, echo) = if v6 {
            (58, "icmpv6", 6, 128)
        } else {
            (1, "icmp", 4, 8)
        };
        let icmp = if proto == icmp_proto {
            Some((s.icmp_type.unwrap_or(echo), s.icmp_code.unwrap_or(0)))
        } else {
            for (which, v) in [("icmp-type", s.icmp_type), ("icmp-code", s.icmp_code)] {
                if v.is_some() {
                    return Err(FlowError::IcmpWithoutIcmp {
                        which,
                        expected,
                        version,
                        proto,
                    });
                }
            }
            None
        };
        Ok(Flow {
            src: s.src,
            dst: s.dst,
            proto,
            src_port: s.src_port.unwrap_or(0),
            dst_port: s.dst_port.unwrap_or(0),
            icmp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(src: &str, dst: &str) -> FlowSpec {
        FlowSpec {
            src: src.parse().expect("addr"),
            dst: dst.parse().expect("addr"),
            protocol: None,
            src_port: None,
            dst_port: None,
            icmp_type: None,
            icmp_code: None,
        }
    }

    #[test]
    fn a_flow_defaults_to_tcp_and_icmp_to_echo_request_of_its_version() {
        let f = Flow::new(&spec("10.0.0.1", "10.0.0.2")).expect("flow");
        assert_eq!((f.proto, f.src_port, f.dst_port, f.icmp), (6, 0, 0, None));
        let mut s = spec("fd00::1", "fd00::2");
        s.protocol = Some("ICMPv6".into());
        assert_eq!(Flow::new(&s).expect("flow").icmp, Some((128, 0)));
        let mut s = spec("10.0.0.1", "10.0.0.2");
        s.protocol = Some("1".into());
        s.icmp_type = Some(3);
        s.icmp_code = Some(4);
        assert_eq!(Flow::new(&s).expect("flow").icmp, Some((3, 4)));
    }

    #[test]
    fn a_flow_that_cannot_be_a_packet_is_refused_naming_the_problem() {
        let e = Flow::new(&spec("10.0.0.1", "fd00::2")).expect_err("mixed");
        assert!(e.to_string().contains("different IP versions"), "{e}");
        let mut s = spec("10.0.0.1", "10.0.0.2");
        s.protocol = Some("icmp".into());
        s.dst_port = Some(80);
        let e = Flow::new(&s).expect_err("port on icmp");
        assert!(e.to_string().contains("--dst-port"), "{e}");
        let mut s = spec("10.0.0.1", "10.0.0.2");
        s.protocol = Some("icmpv6".into());
        s.icmp_type = Some(8);
        let e = Flow::new(&s).expect_err("icmpv6 on v4");
        assert!(e.to_string().contains("--protocol icmp"), "{e}");
        let mut s = spec("10.0.0.1", "10.0.0.2");
        s.protocol = Some("bogus".into());
        assert!(matches!(Flow::new(&s), Err(FlowError::Protocol(_))));
    }
}
