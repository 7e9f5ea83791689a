//! nfnetlink_log, the kernel side of NFLOG: the messages that bind a group
//! and ask for packet copies, and the parse of the packets the kernel sends.
//! Pure functions over bytes (unit-tested on crafted messages); the socket is
//! in [`super::reader`].
//!
//! Layout (`linux/netfilter/nfnetlink_log.h`): every message is a netlink
//! header, a 4-byte `nfgenmsg` (family, version, big-endian group) and
//! 4-byte-aligned attributes (`u16` length, `u16` type).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `NFNL_SUBSYS_ULOG`.
const SUBSYS_ULOG: u16 = 4;
/// `NFULNL_MSG_PACKET`.
const MSG_PACKET: u16 = 0;
/// `NFULNL_MSG_CONFIG`.
const MSG_CONFIG: u16 = 1;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `NFULA_CFG_CMD`, `NFULA_CFG_MODE`.
const CFG_CMD: u16 = 1;
const CFG_MODE: u16 = 2;
/// `NFULNL_CFG_CMD_BIND`.
const CMD_BIND: u8 = 1;
/// `NFULNL_COPY_PACKET`.
const COPY_PACKET: u8 = 2;
/// Packet attributes.
const ATTR_IFINDEX_INDEV: u16 = 4;
const ATTR_IFINDEX_OUTDEV: u16 = 5;
const ATTR_PAYLOAD: u16 = 9;
const ATTR_PREFIX: u16 = 10;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn push_attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(align4(out.len()), 0);
}

fn message(seq: u32, group: u16, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    let len = 16 + 4 + attrs.len();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&((SUBSYS_ULOG << 8) | MSG_CONFIG).to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, the group (big endian).
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&group.to_be_bytes());
    m.extend_from_slice(attrs);
    m
}

/// The request binding this socket to `group`.
pub fn bind_request(seq: u32, group: u16) -> Vec<u8> {
    let mut a = Vec::new();
    push_attr(&mut a, CFG_CMD, &[CMD_BIND]);
    message(seq, group, &a)
}

/// The request asking for the first `range` bytes of each packet.
pub fn copy_mode_request(seq: u32, group: u16, range: u32) -> Vec<u8> {
    let mut a = Vec::new();
    let mut mode = range.to_be_bytes().to_vec();
    mode.extend_from_slice(&[COPY_PACKET, 0]);
    push_attr(&mut a, CFG_MODE, &mode);
    message(seq, group, &a)
}

/// One packet the kernel reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedPacket {
    /// The rule's prefix.
    pub prefix: String,
    /// Incoming and outgoing interface indexes (0: none).
    pub in_ifindex: u32,
    /// Outgoing.
    pub out_ifindex: u32,
    /// The packet's facts, when its headers were copied and parse.
    pub packet: Option<PacketFacts>,
}

/// Addresses, protocol and ports of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketFacts {
    /// Source.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// IP protocol (after IPv6 extension headers are not followed: the
    /// first next-header).
    pub proto: u8,
    /// Source port (TCP, UDP, SCTP), else 0.
    pub src_port: u16,
    /// Destination port, or ICMP type << 8 | code for ICMP.
    pub dst_port: u16,
}

/// Parses the start of an IP packet.
pub fn parse_ip(p: &[u8]) -> Option<PacketFacts> {
    let version = p.first()? >> 4;
    let (src, dst, proto, l4) = match version {
        4 => {
            let ihl = usize::from(p.first()? & 0x0f) * 4;
            let s: [u8; 4] = p.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = p.get(16..20)?.try_into().ok()?;
            (
                IpAddr::V4(Ipv4Addr::from(s)),
                IpAddr::V4(Ipv4Addr::from(d)),
                *p.get(9)?,
                p.get(ihl..)?,
            )
        }
        6 => {
            let s: [u8; 16] = p.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = p.get(24..40)?.try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                *p.get(6)?,
                p.get(40..)?,
            )
        }
        _ => return None,
    };
    let port = |at: usize| -> u16 {
        l4.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .unwrap_or(0)
    };
    let (src_port, dst_port) = match proto {
        6 | 17 | 132 => (port(0), port(2)),
        1 | 58 => (0, port(0)),
        _ => (0, 0),
    };
    Some(PacketFacts {
        src,
        dst,
        proto,
        src_port,
        dst_port,
    })
}

/// What one netlink message from the log socket is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A logged packet.
    Packet(LoggedPacket),
    /// An acknowledgement (`errno` 0) or error of a request.
    Ack {
        /// The sequence number acknowledged.
        seq: u32,
        /// 0, or the (positive) errno.
        errno: i32,
    },
    /// Anything else.
    Other,
}

fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?));
        let ty = u16::from_ne_bytes(b.get(2..4)?.try_into().ok()?) & 0x3fff;
        if len < 4 {
            return None;
        }
        let data = b.get(4..len)?;
        b = b.get(align4(len)..).unwrap_or(&[]);
        Some((ty, data))
    })
}

/// Splits a datagram into its messages and parses each. Malformed tails are
/// ignored (the kernel never sends them; a truncated datagram loses only
/// what is cut).
pub fn parse_datagram(mut d: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    while d.len() >= 16 {
        let len = u32::from_ne_bytes([d[0], d[1], d[2], d[3]]) as usize;
        let ty = u16::from_ne_bytes([d[4], d[5]]);
        if len < 16 || len > d.len() {
            break;
        }
        let body = &d[16..len];
        if ty == NLMSG_ERROR {
            let errno = body
                .get(0..4)
                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            let seq = body
                .get(12..16)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            out.push(Message::Ack { seq, errno: -errno });
        } else if ty == (SUBSYS_ULOG << 8) | MSG_PACKET && body.len() >= 4 {
            let mut p = LoggedPacket {
                prefix: String::new(),
                in_ifindex: 0,
                out_ifindex: 0,
                packet: None,
            };
            let be32 = |v: &[u8]| {
                v.get(0..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0)
            };
            for (t, v) in attrs(&body[4..]) {
                match t {
                    ATTR_PREFIX => {
                        let s = v.split(|c| *c == 0).next().unwrap_or_default();
                        p.prefix = String::from_utf8_lossy(s).into_owned();
                    }
                    ATTR_IFINDEX_INDEV => p.in_ifindex = be32(v),
                    ATTR_IFINDEX_OUTDEV => p.out_ifindex = be32(v),
                    ATTR_PAYLOAD => p.packet = parse_ip(v),
                    _ => {}
                }
            }
            out.push(Message::Packet(p));
        } else {
            out.push(Message::Other);
        }
        d = d.get(align4(len)..).unwrap_or(&[]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_message(prefix: &str, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        push_attr(&mut a, ATTR_IFINDEX_INDEV, &7u32.to_be_bytes());
        let mut p = prefix.as_bytes().to_vec();
        p.push(0);
        push_attr(&mut a, ATTR_PREFIX, &p);
        push_attr(&mut a, ATTR_PAYLOAD, payload);
        let mut m = message(1, 30, &a);
        m[4..6].copy_from_slice(&((SUBSYS_ULOG << 8) | MSG_PACKET).to_ne_bytes());
        m
    }

    fn tcp_v4() -> Vec<u8> {
        let mut p = vec![0u8; 24];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 65, 0, 1]);
        p[16..20].copy_from_slice(&[10, 65, 0, 2]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&8080u16.to_be_bytes());
        p
    }

    #[test]
    fn a_logged_packet_parses_to_prefix_interfaces_and_five_tuple() {
        let mut d = packet_message("D,i,1,gnp/x", &tcp_v4());
        d.extend(packet_message("N,cali-tw-calib", &[0x60]));
        let msgs = parse_datagram(&d);
        assert_eq!(msgs.len(), 2);
        let Message::Packet(p) = &msgs[0] else {
            panic!("{msgs:?}")
        };
        assert_eq!((p.prefix.as_str(), p.in_ifindex), ("D,i,1,gnp/x", 7));
        let f = p.packet.expect("facts");
        assert_eq!(f.src, "10.65.0.1".parse::<IpAddr>().expect("ip"));
        assert_eq!((f.proto, f.src_port, f.dst_port), (6, 40000, 8080));
        let Message::Packet(p) = &msgs[1] else {
            panic!("{msgs:?}")
        };
        assert_eq!(p.packet, None, "a cut header is no facts, not a panic");
    }

    #[test]
    fn truncated_or_garbage_datagrams_parse_to_what_is_whole() {
        let d = packet_message("D,i,1,gnp/x", &tcp_v4());
        for cut in 0..d.len() {
            let _ = parse_datagram(&d[..cut]);
        }
        assert!(parse_datagram(&[0xff; 40]).len() <= 1);
        let req = bind_request(9, 30);
        assert_eq!(req.len(), 28);
        assert_eq!(&req[18..20], &30u16.to_be_bytes());
    }
}
