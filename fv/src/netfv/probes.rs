//! Probes with a chosen conntrack tuple, for the `felix explain`
//! differential test: a TCP connection and a UDP datagram from an explicit
//! source port, and an ICMP / ICMPv6 echo with an explicit identifier, each
//! sent from a workload's namespace and successful only when the server's
//! answer came back; plus the UDP echo servers the UDP probes talk to (the
//! TCP ones are [`super::traffic::Server`]).
//!
//! Invariants: a probe reports [`Outcome::reached`] only when the answer
//! came from the addressed peer (a TCP/UDP answer also names the server, which
//! the caller checks); a probe that cannot even be set up (a namespace or
//! socket error) is an `Err`, never a "blocked". UDP servers stop when their
//! [`UdpServer`] is dropped.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use felix_netns::enter_netns;

use super::traffic::PortThreads;

/// What a probe saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The request reached the server and its answer came back.
    pub reached: bool,
    /// The server's identity for TCP and UDP (empty for ICMP), or what went
    /// wrong (timeout, reset, ...).
    pub detail: String,
}

impl Outcome {
    fn answered(detail: impl Into<String>) -> Outcome {
        Outcome {
            reached: true,
            detail: detail.into(),
        }
    }

    fn blocked(detail: impl Into<String>) -> Outcome {
        Outcome {
            reached: false,
            detail: detail.into(),
        }
    }
}

/// UDP echo servers on `[::]:port` (dual stack) in one namespace: every
/// datagram gets `<identity>\n` back.
pub struct UdpServer {
    _threads: PortThreads,
}

impl UdpServer {
    /// Starts one socket per port inside namespace `netns`.
    pub fn start(netns: &str, identity: &str, ports: &[u16]) -> Result<UdpServer> {
        let bind = |port: u16| -> std::io::Result<UdpSocket> {
            let s = UdpSocket::bind(("::", port))?;
            s.set_read_timeout(Some(Duration::from_millis(100)))?;
            Ok(s)
        };
        PortThreads::start(netns, identity, ports, "UDP server", bind, serve_udp)
            .map(|t| UdpServer { _threads: t })
    }
}

/// Answers every datagram with `<identity>\n` until `stop`.
fn serve_udp(s: UdpSocket, id: &str, stop: &AtomicBool) {
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((_, peer)) = s.recv_from(&mut buf) {
            let _ = s.send_to(format!("{id}\n").as_bytes(), peer);
        }
    }
}

fn unspecified(dst: IpAddr, port: u16) -> SocketAddr {
    match dst {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
    }
}

/// A socket of `ty` bound to source port `src_port` (address reuse on, so a
/// port in TIME_WAIT or used towards another peer can be bound again).
fn bound_socket(dst: IpAddr, ty: Type, proto: Protocol, src_port: u16) -> Result<Socket> {
    let sock = Socket::new(
        Domain::for_address(SocketAddr::new(dst, 0)),
        ty,
        Some(proto),
    )
    .context("socket")?;
    sock.set_reuse_address(true).context("SO_REUSEADDR")?;
    sock.bind(&SockAddr::from(unspecified(dst, src_port)))
        .with_context(|| format!("binding source port {src_port}"))?;
    Ok(sock)
}

/// From namespace `netns` (the calling thread enters it), a TCP connection
/// from source port `src_port` to `dst:port`, a line sent and the server's
/// identity line read back, all within `timeout` each.
pub fn tcp(
    netns: &str,
    src_port: u16,
    dst: IpAddr,
    port: u16,
    timeout: Duration,
) -> Result<Outcome> {
    enter_netns(netns)?;
    let sock = bound_socket(dst, Type::STREAM, Protocol::TCP, src_port)?;
    if let Err(e) = sock.connect_timeout(&SockAddr::from(SocketAddr::new(dst, port)), timeout) {
        return Ok(Outcome::blocked(format!("connect: {e}")));
    }
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    if let Err(e) = (&s).write_all(b"ping\n") {
        return Ok(Outcome::blocked(format!("send: {e}")));
    }
    let mut line = String::new();
    match BufReader::new(&s).read_line(&mut line) {
        Ok(n) if n > 0 => Ok(Outcome::answered(line.trim())),
        Ok(_) => Ok(Outcome::blocked("connection closed without an answer")),
        Err(e) => Ok(Outcome::blocked(format!("no answer: {e}"))),
    }
}

/// From namespace `netns`, a UDP datagram from source port `src_port` to
/// `dst:port` and the server's identity back within `timeout`.
pub fn udp(
    netns: &str,
    src_port: u16,
    dst: IpAddr,
    port: u16,
    timeout: Duration,
) -> Result<Outcome> {
    enter_netns(netns)?;
    let sock = bound_socket(dst, Type::DGRAM, Protocol::UDP, src_port)?;
    // Connected: the answer is delivered to this socket even when another
    // probe has the same source port bound towards another peer.
    sock.connect(&SockAddr::from(SocketAddr::new(dst, port)))
        .context("connecting the UDP socket")?;
    let s: UdpSocket = sock.into();
    s.set_read_timeout(Some(timeout))?;
    s.send(b"ping\n").context("sending the datagram")?;
    let mut buf = [0u8; 512];
    match s.recv(&mut buf) {
        Ok(n) => Ok(Outcome::answered(
            String::from_utf8_lossy(&buf[..n]).trim().to_string(),
        )),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Ok(Outcome::blocked(format!("no answer within {timeout:?}")))
        }
        Err(e) => Ok(Outcome::blocked(format!("recv: {e}"))),
    }
}

/// The Internet checksum of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], chunk.get(1).copied().unwrap_or(0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// From namespace `netns`, an ICMP echo request (ICMPv6 for an IPv6 `dst`)
/// with identifier `id`, and its echo reply from `dst` within `timeout`.
pub fn icmp_echo(netns: &str, dst: IpAddr, id: u16, timeout: Duration) -> Result<Outcome> {
    enter_netns(netns)?;
    let v6 = dst.is_ipv6();
    let (domain, proto, request, reply) = if v6 {
        (Domain::IPV6, Protocol::ICMPV6, 128u8, 129u8)
    } else {
        (Domain::IPV4, Protocol::ICMPV4, 8u8, 0u8)
    };
    let sock = Socket::new(domain, Type::RAW, Some(proto)).context("raw ICMP socket")?;
    // A connected raw socket only receives from that peer.
    sock.connect(&SockAddr::from(SocketAddr::new(dst, 0)))
        .context("connecting the raw socket")?;
    let mut pkt = vec![request, 0, 0, 0];
    pkt.extend_from_slice(&id.to_be_bytes());
    pkt.extend_from_slice(&1u16.to_be_bytes());
    pkt.extend_from_slice(b"felix-explain-fv");
    if !v6 {
        // The kernel computes ICMPv6 checksums itself, not ICMP ones.
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
    }
    sock.send(&pkt).context("sending the echo request")?;
    let start = felix_actors::clock::real_now();
    let mut buf = [0u8; 1500];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(Outcome::blocked(format!(
                "no echo reply within {timeout:?}"
            )));
        }
        sock.set_read_timeout(Some(left))?;
        let n = match (&sock).read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(Outcome::blocked(format!(
                    "no echo reply within {timeout:?}"
                )));
            }
            Err(e) => return Ok(Outcome::blocked(format!("recv: {e}"))),
        };
        // IPv4 raw sockets deliver the IP header too.
        let icmp = if v6 {
            &buf[..n]
        } else {
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            &buf[ihl.min(n)..n]
        };
        if icmp.len() >= 8 && icmp[0] == reply && icmp[4..6] == id.to_be_bytes() {
            return Ok(Outcome::answered(""));
        }
    }
}
