//! [`RtnlSocket`]: the real [`Netlink`], a blocking `NETLINK_ROUTE` socket.
//!
//! Dumps are one request and a multi-part answer (an interrupted dump, `NLM_F_DUMP_INTR`, is
//! retried a few times). Writes are pipelined: a batch is sent as a few large `send`s of many
//! requests each, every request asking for an acknowledgement, and then the acknowledgements
//! are matched to the requests by sequence number, so one refused item is reported against
//! that item and the others still land.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;

use ipnet::IpNet;
use rtnetlink::packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::VxlanSpec;
use super::{FdbEntry, Link, Neighbour, Netlink, NetlinkError, Route, RouteKind, VxlanParams};
use crate::dataplane::IpVersion;

/// Requests per `send` of a pipelined batch (their acknowledgements fit the receive buffer
/// many times over).
const CHUNK: usize = 256;
/// Receive buffer size asked of the kernel (dumps of large tables arrive in many parts).
const RCVBUF: usize = 4 << 20;
/// Attempts at a dump the kernel reports as interrupted by a concurrent change.
const DUMP_ATTEMPTS: usize = 5;

/// A blocking rtnetlink socket bound to one network namespace.
pub struct RtnlSocket {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl std::fmt::Debug for RtnlSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtnlSocket")
            .field("seq", &self.seq)
            .finish()
    }
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> NetlinkError {
    move |source| NetlinkError::Io { op, source }
}

impl RtnlSocket {
    /// Opens a socket in `netns` (a named namespace under `/run/netns`), or in the current
    /// namespace. A socket stays in the namespace it was created in, so only its creation
    /// runs on a helper thread that entered the namespace.
    pub fn open(netns: Option<&str>) -> Result<RtnlSocket, NetlinkError> {
        let sock = match netns {
            None => new_socket()?,
            Some(ns) => {
                let ns = ns.to_string();
                std::thread::Builder::new()
                    .name("netlink-open".into())
                    .spawn(move || {
                        felix_netns::enter_netns(&ns).map_err(io_err("open"))?;
                        new_socket()
                    })
                    .map_err(io_err("open"))?
                    .join()
                    .map_err(|_| NetlinkError::Io {
                        op: "open",
                        source: io::Error::other("the namespace thread panicked"),
                    })??
            }
        };
        Ok(RtnlSocket {
            sock,
            seq: 1,
            buf: vec![0; 1 << 16],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    fn encode(msg: RouteNetlinkMessage, flags: u16, seq: u32, out: &mut Vec<u8>) {
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        m.finalize();
        let start = out.len();
        out.resize(start + m.buffer_len(), 0);
        m.serialize(&mut out[start..]);
    }

    fn send_all(&self, op: &'static str, bytes: &[u8]) -> Result<(), NetlinkError> {
        let n = self.sock.send(bytes, 0).map_err(io_err(op))?;
        if n != bytes.len() {
            return Err(NetlinkError::Io {
                op,
                source: io::Error::other(format!("short send: {n} of {} bytes", bytes.len())),
            });
        }
        Ok(())
    }

    /// Receives one datagram and splits it into messages (sequence, flags, decoded or error).
    fn recv_batch(&mut self, op: &'static str) -> Result<Vec<Received>, NetlinkError> {
        let n = loop {
            let mut slice = &mut self.buf[..];
            match self.sock.recv(&mut slice, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(op)(e)),
            }
        };
        let mut out = Vec::new();
        let mut off = 0usize;
        while off + 16 <= n {
            let raw = &self.buf[off..n];
            let len = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
            if len < 16 || len > raw.len() {
                return Err(NetlinkError::Decode {
                    op,
                    detail: format!("message length {len} in a {}-byte datagram", raw.len()),
                });
            }
            let seq = u32::from_ne_bytes([raw[8], raw[9], raw[10], raw[11]]);
            let flags = u16::from_ne_bytes([raw[6], raw[7]]);
            let payload = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..len]) {
                Ok(m) => match m.payload {
                    NetlinkPayload::Done(_) => Payload::Done,
                    NetlinkPayload::Error(e) => match e.code {
                        None => Payload::Ack,
                        Some(c) => Payload::Errno(c.get().saturating_abs()),
                    },
                    NetlinkPayload::InnerMessage(m) => Payload::Message(Box::new(m)),
                    _ => Payload::Ignored,
                },
                // One message this crate cannot decode (a newer kernel's attribute layout) is
                // skipped, not fatal to the whole answer.
                Err(e) => {
                    tracing::debug!(op, error = %e, "undecodable netlink message skipped");
                    Payload::Ignored
                }
            };
            out.push(Received {
                seq,
                flags,
                payload,
            });
            off += (len + 3) & !3;
        }
        Ok(out)
    }

    /// A dump request: every answer message until `Done`.
    fn dump(
        &mut self,
        op: &'static str,
        req: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        for _ in 0..DUMP_ATTEMPTS {
            let seq = self.next_seq();
            let mut bytes = Vec::new();
            Self::encode(req.clone(), NLM_F_REQUEST | NLM_F_DUMP, seq, &mut bytes);
            self.send_all(op, &bytes)?;
            let mut out = Vec::new();
            let mut interrupted = false;
            'recv: loop {
                for r in self.recv_batch(op)? {
                    if r.seq != seq {
                        continue;
                    }
                    interrupted |= r.flags & NLM_F_DUMP_INTR != 0;
                    match r.payload {
                        Payload::Done => break 'recv,
                        Payload::Errno(errno) => {
                            return Err(NetlinkError::Refused {
                                op,
                                what: "dump".into(),
                                errno,
                            })
                        }
                        Payload::Message(m) => out.push(*m),
                        Payload::Ack | Payload::Ignored => {}
                    }
                }
            }
            if !interrupted {
                return Ok(out);
            }
        }
        Err(NetlinkError::Refused {
            op,
            what: "dump (interrupted by concurrent changes every time)".into(),
            errno: 4,
        })
    }

    /// Sends `reqs` pipelined and returns one result per request.
    fn pipeline(
        &mut self,
        op: &'static str,
        reqs: Vec<(RouteNetlinkMessage, u16, String)>,
    ) -> Vec<Result<(), NetlinkError>> {
        let mut results: Vec<Result<(), NetlinkError>> = Vec::with_capacity(reqs.len());
        let mut reqs = reqs.into_iter().peekable();
        while reqs.peek().is_some() {
            let chunk: Vec<(RouteNetlinkMessage, u16, String)> =
                reqs.by_ref().take(CHUNK).collect();
            let mut bytes = Vec::new();
            let mut pending: HashMap<u32, usize> = HashMap::with_capacity(chunk.len());
            let base = results.len();
            let mut whats = Vec::with_capacity(chunk.len());
            for (i, (msg, flags, what)) in chunk.into_iter().enumerate() {
                let seq = self.next_seq();
                Self::encode(msg, NLM_F_REQUEST | NLM_F_ACK | flags, seq, &mut bytes);
                pending.insert(seq, base + i);
                whats.push(what);
                results.push(Ok(()));
            }
            if let Err(e) = self.send_all(op, &bytes) {
                let msg = e.to_string();
                for r in &mut results[base..] {
                    *r = Err(NetlinkError::Io {
                        op,
                        source: io::Error::other(msg.clone()),
                    });
                }
                continue;
            }
            while !pending.is_empty() {
                let batch = match self.recv_batch(op) {
                    Ok(b) => b,
                    Err(e) => {
                        let msg = e.to_string();
                        for (_, i) in pending.drain() {
                            results[i] = Err(NetlinkError::Io {
                                op,
                                source: io::Error::other(msg.clone()),
                            });
                        }
                        break;
                    }
                };
                for r in batch {
                    let Some(i) = pending.remove(&r.seq) else {
                        continue;
                    };
                    if let Payload::Errno(errno) = r.payload {
                        results[i] = Err(NetlinkError::Refused {
                            op,
                            what: std::mem::take(&mut whats[i - base]),
                            errno,
                        });
                    }
                }
            }
        }
        results
    }

    /// A request with one answer (a get): the message, or `None` when the kernel answers
    /// that the object does not exist (`ENODEV`/`ENOENT`).
    fn get_one(
        &mut self,
        op: &'static str,
        req: RouteNetlinkMessage,
    ) -> Result<Option<RouteNetlinkMessage>, NetlinkError> {
        let seq = self.next_seq();
        let mut bytes = Vec::new();
        Self::encode(req, NLM_F_REQUEST, seq, &mut bytes);
        self.send_all(op, &bytes)?;
        loop {
            for r in self.recv_batch(op)? {
                if r.seq != seq {
                    continue;
                }
                match r.payload {
                    Payload::Message(m) => return Ok(Some(*m)),
                    Payload::Errno(19) | Payload::Errno(2) => return Ok(None),
                    Payload::Errno(errno) => {
                        return Err(NetlinkError::Refused {
                            op,
                            what: "get".into(),
                            errno,
                        })
                    }
                    Payload::Done | Payload::Ack => return Ok(None),
                    Payload::Ignored => {}
                }
            }
        }
    }

    fn one(
        &mut self,
        op: &'static str,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: String,
    ) -> Result<(), NetlinkError> {
        self.pipeline(op, vec![(msg, flags, what)])
            .pop()
            .unwrap_or(Ok(()))
    }
}

fn new_socket() -> Result<Socket, NetlinkError> {
    let mut sock = Socket::new(NETLINK_ROUTE).map_err(io_err("open"))?;
    sock.bind_auto().map_err(io_err("open"))?;
    sock.connect(&SocketAddr::new(0, 0))
        .map_err(io_err("open"))?;
    // Best effort: a smaller buffer only means more datagrams per dump.
    let _ = sock.set_rx_buf_sz(RCVBUF);
    let _ = sock.set_ext_ack(true);
    Ok(sock)
}

struct Received {
    seq: u32,
    flags: u16,
    payload: Payload,
}

enum Payload {
    Done,
    Ack,
    Errno(i32),
    Message(Box<RouteNetlinkMessage>),
    Ignored,
}

fn family(ipv: IpVersion) -> AddressFamily {
    match ipv {
        IpVersion::V4 => AddressFamily::Inet,
        IpVersion::V6 => AddressFamily::Inet6,
    }
}

fn ip_family(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn route_addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

/// Decodes a route; `None` for what felix never manages (cached, multicast, other families).
fn decode_route(m: &RouteMessage) -> Option<Route> {
    let h = &m.header;
    let v6 = match h.address_family {
        AddressFamily::Inet => false,
        AddressFamily::Inet6 => true,
        _ => return None,
    };
    let mut table = u32::from(h.table);
    let (mut dst, mut gateway, mut src, mut ifindex) = (None, None, None, None);
    let mut multipath = false;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => dst = route_addr(d),
            RouteAttribute::Gateway(g) => gateway = route_addr(g),
            RouteAttribute::PrefSource(s) => src = route_addr(s),
            RouteAttribute::Oif(i) => ifindex = Some(*i),
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::MultiPath(_) => multipath = true,
            _ => {}
        }
    }
    let dst = match dst {
        Some(a) => a,
        None if v6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        None => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    };
    let dst = IpNet::new(dst, h.destination_prefix_length).ok()?.trunc();
    Some(Route {
        table,
        dst,
        kind: RouteKind::from_number(u8::from(h.kind)),
        ifindex: if multipath { None } else { ifindex },
        gateway,
        onlink: h.flags.contains(RouteFlags::Onlink),
        src,
        protocol: u8::from(h.protocol),
        scope_link: u8::from(h.scope) == u8::from(RouteScope::Link),
    })
}

fn encode_route(r: &Route, for_delete: bool) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = match r.dst {
        IpNet::V4(_) => AddressFamily::Inet,
        IpNet::V6(_) => AddressFamily::Inet6,
    };
    m.header.destination_prefix_length = r.dst.prefix_len();
    m.header.table = u8::try_from(r.table).unwrap_or(0);
    m.header.protocol = RouteProtocol::from(r.protocol);
    m.header.kind = RouteType::from(r.kind.number());
    m.header.scope = if r.scope_link {
        RouteScope::Link
    } else {
        RouteScope::Universe
    };
    if r.onlink {
        m.header.flags = RouteFlags::Onlink;
    }
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(
            r.dst.network(),
        )));
    m.attributes.push(RouteAttribute::Table(r.table));
    if for_delete {
        return m;
    }
    if let Some(i) = r.ifindex {
        m.attributes.push(RouteAttribute::Oif(i));
    }
    if let Some(g) = r.gateway {
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(g)));
    }
    if let Some(s) = r.src {
        m.attributes
            .push(RouteAttribute::PrefSource(RouteAddress::from(s)));
    }
    m
}

fn decode_link(m: &LinkMessage) -> Option<Link> {
    let mut name = None;
    let (mut mtu, mut mac, mut vxlan, mut is_vxlan) = (0, None, None, false);
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::Mtu(v) => mtu = *v,
            LinkAttribute::Address(a) if a.len() == 6 => {
                let mut b = [0u8; 6];
                b.copy_from_slice(a);
                mac = Some(b);
            }
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        LinkInfo::Kind(InfoKind::Vxlan) => is_vxlan = true,
                        LinkInfo::Data(InfoData::Vxlan(v)) => vxlan = Some(decode_vxlan(v)),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Link {
        index: m.header.index,
        name: name?,
        admin_up: m.header.flags.contains(LinkFlags::Up),
        oper_up: m.header.flags.contains(LinkFlags::Running),
        mtu,
        mac,
        vxlan: if is_vxlan { vxlan } else { None },
    })
}

fn decode_vxlan(v: &[InfoVxlan]) -> VxlanParams {
    let mut p = VxlanParams {
        vni: 0,
        port: 0,
        local: None,
        parent: None,
        learning: true,
    };
    for a in v {
        match a {
            InfoVxlan::Id(id) => p.vni = *id,
            InfoVxlan::Port(port) => p.port = *port,
            InfoVxlan::Local(a) => p.local = Some(IpAddr::V4(*a)),
            InfoVxlan::Local6(a) => p.local = Some(IpAddr::V6(*a)),
            InfoVxlan::Link(i) => p.parent = Some(*i),
            InfoVxlan::Learning(l) => p.learning = *l,
            _ => {}
        }
    }
    p
}

fn neigh_addr(a: &NeighbourAddress) -> Option<IpAddr> {
    match a {
        NeighbourAddress::Inet(v) => Some(IpAddr::V4(*v)),
        NeighbourAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        // FDB entries (family AF_BRIDGE) carry their remote address undecoded.
        NeighbourAddress::Other(b) if b.len() == 4 => Some(IpAddr::from([b[0], b[1], b[2], b[3]])),
        NeighbourAddress::Other(b) if b.len() == 16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            Some(IpAddr::from(a))
        }
        _ => None,
    }
}

fn neigh_from(ip: IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    }
}

fn lladdr(attrs: &[NeighbourAttribute]) -> Option<[u8; 6]> {
    attrs.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLocalAddress(b) if b.len() == 6 => {
            let mut m = [0u8; 6];
            m.copy_from_slice(b);
            Some(m)
        }
        _ => None,
    })
}

fn neigh_dst(attrs: &[NeighbourAttribute]) -> Option<IpAddr> {
    attrs.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(d) => neigh_addr(d),
        _ => None,
    })
}

fn encode_neighbour(n: &Neighbour) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = ip_family(&n.ip);
    m.header.ifindex = n.ifindex;
    m.header.state = NeighbourState::Permanent;
    m.attributes
        .push(NeighbourAttribute::Destination(neigh_from(n.ip)));
    m.attributes
        .push(NeighbourAttribute::LinkLocalAddress(n.mac.to_vec()));
    m
}

fn encode_fdb(e: &FdbEntry) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Bridge;
    m.header.ifindex = e.ifindex;
    m.header.state = NeighbourState::Permanent;
    m.header.flags = NeighbourFlags::Own;
    m.attributes
        .push(NeighbourAttribute::LinkLocalAddress(e.mac.to_vec()));
    m.attributes
        .push(NeighbourAttribute::Destination(neigh_from(e.dst)));
    m
}

fn link_req(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m
}

impl Netlink for RtnlSocket {
    fn list_routes(&mut self, ipv: IpVersion) -> Result<Vec<Route>, NetlinkError> {
        let mut req = RouteMessage::default();
        req.header.address_family = family(ipv);
        let msgs = self.dump("route-list", RouteNetlinkMessage::GetRoute(req))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => decode_route(r),
                _ => None,
            })
            .collect())
    }

    fn replace_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>> {
        let reqs = routes
            .iter()
            .map(|r| {
                (
                    RouteNetlinkMessage::NewRoute(encode_route(r, false)),
                    NLM_F_CREATE | NLM_F_REPLACE,
                    format!("{} table {}", r.dst, r.table),
                )
            })
            .collect();
        self.pipeline("route-replace", reqs)
    }

    fn delete_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>> {
        let reqs = routes
            .iter()
            .map(|r| {
                (
                    RouteNetlinkMessage::DelRoute(encode_route(r, true)),
                    0,
                    format!("{} table {}", r.dst, r.table),
                )
            })
            .collect();
        self.pipeline("route-del", reqs)
    }

    fn list_links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        let msgs = self.dump(
            "link-list",
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
        )?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => decode_link(l),
                _ => None,
            })
            .collect())
    }

    fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        let mut req = LinkMessage::default();
        req.attributes.push(LinkAttribute::IfName(name.to_string()));
        match self.get_one("link-get", RouteNetlinkMessage::GetLink(req))? {
            Some(RouteNetlinkMessage::NewLink(l)) => Ok(decode_link(&l)),
            _ => Ok(None),
        }
    }

    fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, NetlinkError> {
        match self.get_one("link-get", RouteNetlinkMessage::GetLink(link_req(index)))? {
            Some(RouteNetlinkMessage::NewLink(l)) => Ok(decode_link(&l)),
            _ => Ok(None),
        }
    }

    fn add_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), NetlinkError> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(spec.name.clone()));
        m.attributes.push(LinkAttribute::Mtu(spec.mtu));
        m.attributes.push(LinkAttribute::Address(spec.mac.to_vec()));
        let p = &spec.params;
        let mut data = vec![InfoVxlan::Id(p.vni)];
        match p.local {
            Some(IpAddr::V4(a)) => data.push(InfoVxlan::Local(a)),
            Some(IpAddr::V6(a)) => data.push(InfoVxlan::Local6(a)),
            None => {}
        }
        if let Some(parent) = p.parent {
            data.push(InfoVxlan::Link(parent));
        }
        data.push(InfoVxlan::Port(p.port));
        data.push(InfoVxlan::Learning(p.learning));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vxlan),
            LinkInfo::Data(InfoData::Vxlan(data)),
        ]));
        self.one(
            "link-add",
            RouteNetlinkMessage::NewLink(m),
            NLM_F_CREATE | NLM_F_EXCL,
            spec.name.clone(),
        )
    }

    fn set_link(
        &mut self,
        index: u32,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
        up: Option<bool>,
    ) -> Result<(), NetlinkError> {
        let mut m = link_req(index);
        if let Some(mtu) = mtu {
            m.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = mac {
            m.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(up) = up {
            m.header.change_mask = LinkFlags::Up;
            if up {
                m.header.flags = LinkFlags::Up;
            }
        }
        self.one(
            "link-set",
            RouteNetlinkMessage::NewLink(m),
            0,
            format!("ifindex {index}"),
        )
    }

    fn delete_link(&mut self, index: u32) -> Result<(), NetlinkError> {
        self.one(
            "link-del",
            RouteNetlinkMessage::DelLink(link_req(index)),
            0,
            format!("ifindex {index}"),
        )
    }

    fn list_addrs(&mut self, ipv: IpVersion) -> Result<Vec<(u32, IpNet)>, NetlinkError> {
        let mut req = AddressMessage::default();
        req.header.family = family(ipv);
        let msgs = self.dump("addr-list", RouteNetlinkMessage::GetAddress(req))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => {
                    let ip = a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Local(ip) => Some(*ip),
                        _ => None,
                    });
                    let ip = ip.or_else(|| {
                        a.attributes.iter().find_map(|x| match x {
                            AddressAttribute::Address(ip) => Some(*ip),
                            _ => None,
                        })
                    })?;
                    Some((a.header.index, IpNet::new(ip, a.header.prefix_len).ok()?))
                }
                _ => None,
            })
            .collect())
    }

    fn add_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        let m = addr_msg(index, addr);
        self.one(
            "addr-add",
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_REPLACE,
            addr.to_string(),
        )
    }

    fn del_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        self.one(
            "addr-del",
            RouteNetlinkMessage::DelAddress(addr_msg(index, addr)),
            0,
            addr.to_string(),
        )
    }

    fn list_neighbours(
        &mut self,
        ipv: IpVersion,
        index: u32,
    ) -> Result<Vec<Neighbour>, NetlinkError> {
        let mut req = NeighbourMessage::default();
        req.header.family = family(ipv);
        let msgs = self.dump("neigh-list", RouteNetlinkMessage::GetNeighbour(req))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewNeighbour(n) if n.header.ifindex == index => {
                    Some(Neighbour {
                        ifindex: index,
                        ip: neigh_dst(&n.attributes)?,
                        mac: lladdr(&n.attributes)?,
                        permanent: n.header.state == NeighbourState::Permanent,
                    })
                }
                _ => None,
            })
            .collect())
    }

    fn replace_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        let reqs = ns
            .iter()
            .map(|n| {
                (
                    RouteNetlinkMessage::NewNeighbour(encode_neighbour(n)),
                    NLM_F_CREATE | NLM_F_REPLACE,
                    n.ip.to_string(),
                )
            })
            .collect();
        self.pipeline("neigh-replace", reqs)
    }

    fn delete_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        let reqs = ns
            .iter()
            .map(|n| {
                (
                    RouteNetlinkMessage::DelNeighbour(encode_neighbour(n)),
                    0,
                    n.ip.to_string(),
                )
            })
            .collect();
        self.pipeline("neigh-del", reqs)
    }

    fn list_fdb(&mut self, index: u32) -> Result<Vec<FdbEntry>, NetlinkError> {
        let mut req = NeighbourMessage::default();
        req.header.family = AddressFamily::Bridge;
        let msgs = self.dump("fdb-list", RouteNetlinkMessage::GetNeighbour(req))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewNeighbour(n) if n.header.ifindex == index => {
                    Some(FdbEntry {
                        ifindex: index,
                        mac: lladdr(&n.attributes)?,
                        dst: neigh_dst(&n.attributes)?,
                        permanent: n.header.state == NeighbourState::Permanent,
                    })
                }
                _ => None,
            })
            .collect())
    }

    fn replace_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        let reqs = es
            .iter()
            .map(|e| {
                (
                    RouteNetlinkMessage::NewNeighbour(encode_fdb(e)),
                    NLM_F_CREATE | NLM_F_REPLACE,
                    super::format_mac(&e.mac),
                )
            })
            .collect();
        self.pipeline("fdb-replace", reqs)
    }

    fn delete_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        let reqs = es
            .iter()
            .map(|e| {
                (
                    RouteNetlinkMessage::DelNeighbour(encode_fdb(e)),
                    0,
                    super::format_mac(&e.mac),
                )
            })
            .collect();
        self.pipeline("fdb-del", reqs)
    }
}

fn addr_msg(index: u32, addr: IpNet) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = ip_family(&addr.addr());
    m.header.prefix_len = addr.prefix_len();
    m.header.index = index;
    m.header.scope = AddressScope::Universe;
    m.attributes.push(AddressAttribute::Local(addr.addr()));
    m.attributes.push(AddressAttribute::Address(addr.addr()));
    m
}
