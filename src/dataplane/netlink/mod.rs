//! The routing kernel seam: routes, links, addresses, neighbours and FDB entries over
//! rtnetlink, one socket per driver, no process per change.
//!
//! * [`Netlink`]: the operations the routing drivers need, on this module's own value types
//!   ([`Route`], [`Link`], [`Neighbour`], [`FdbEntry`]), each call one named operation
//!   (`route-list`, `route-replace`, `neigh-replace`, `link-add`, ...);
//! * [`socket::RtnlSocket`]: the real implementation, a blocking `NETLINK_ROUTE` socket opened
//!   in the network namespace the driver's command runner is bound to; writes are pipelined
//!   (every request of a batch sent before the acknowledgements are read), so a start of day
//!   of thousands of routes costs a few system calls per hundred routes;
//! * [`Seamed`]: wraps any [`Netlink`] so every operation goes through the driver's
//!   [`ActorSeam`] (fault injection, per-operation metrics), like the commands of
//!   `crate::dataplane::kernel`;
//! * [`fake::FakeNetlink`]: an in-memory kernel recording every write, behind the scripted
//!   command runner of unit tests.
//!
//! Invariant: nothing outside this folder builds a netlink message; drivers reach the kernel's
//! routing state only through a [`Netlink`] handed to them by the wiring, so tests, fault
//! injection, metrics and the admin socket see every routing operation.

/// Every netlink operation a driver runs through its seam (its fault targets).
pub const OPS: &[&str] = &[
    "netlink-open",
    "addr-add",
    "addr-del",
    "addr-list",
    "fdb-del",
    "fdb-list",
    "fdb-replace",
    "link-add",
    "link-del",
    "link-get",
    "link-list",
    "link-set",
    "neigh-del",
    "neigh-list",
    "neigh-replace",
    "route-del",
    "route-list",
    "route-replace",
];

pub mod fake;
mod socket;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use felix_actors::{ActorSeam, DriverError, FailureKind, Injected};
use ipnet::IpNet;

use crate::dataplane::IpVersion;

pub use socket::RtnlSocket;

/// The main routing table.
pub const TABLE_MAIN: u32 = 254;

/// `RTPROT_BOOT`: what `ip route` writes when no protocol is given.
pub const RTPROT_BOOT: u8 = 3;

/// Kind of a route (`rtm_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// A gateway or direct route.
    Unicast,
    /// Silently discards (`blackhole`).
    Blackhole,
    /// Refuses with ICMP unreachable (`unreachable`).
    Unreachable,
    /// Continues the lookup in the next rule's table (`throw`).
    Throw,
    /// Any other kind (local, broadcast, ...): listed, never written.
    Other(u8),
}

impl RouteKind {
    /// The kernel's `RTN_*` number.
    pub fn number(self) -> u8 {
        match self {
            RouteKind::Unicast => 1,
            RouteKind::Blackhole => 6,
            RouteKind::Unreachable => 7,
            RouteKind::Throw => 9,
            RouteKind::Other(n) => n,
        }
    }

    /// From the kernel's `RTN_*` number.
    pub fn from_number(n: u8) -> RouteKind {
        match n {
            1 => RouteKind::Unicast,
            6 => RouteKind::Blackhole,
            7 => RouteKind::Unreachable,
            9 => RouteKind::Throw,
            n => RouteKind::Other(n),
        }
    }
}

/// One route of one table, as written or read back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// Routing table id.
    pub table: u32,
    /// Destination (network address, host bits clear).
    pub dst: IpNet,
    /// Route kind.
    pub kind: RouteKind,
    /// Output interface index (`None` for device-less kinds and multipath routes).
    pub ifindex: Option<u32>,
    /// Next hop.
    pub gateway: Option<IpAddr>,
    /// The next hop is on the link even if no address says so (`onlink`).
    pub onlink: bool,
    /// Preferred source address (`src`).
    pub src: Option<IpAddr>,
    /// Route protocol (`proto`).
    pub protocol: u8,
    /// `scope link` (else universe).
    pub scope_link: bool,
}

impl Route {
    /// The IP version of the destination.
    pub fn ipv(&self) -> IpVersion {
        match self.dst {
            IpNet::V4(_) => IpVersion::V4,
            IpNet::V6(_) => IpVersion::V6,
        }
    }
}

/// A link as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Administratively up.
    pub admin_up: bool,
    /// Operationally up (carrier).
    pub oper_up: bool,
    /// MTU.
    pub mtu: u32,
    /// Hardware address.
    pub mac: Option<[u8; 6]>,
    /// VXLAN parameters, for VXLAN devices.
    pub vxlan: Option<VxlanParams>,
}

/// The parameters of a VXLAN device that felix sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanParams {
    /// VNI.
    pub vni: u32,
    /// UDP destination port.
    pub port: u16,
    /// Local (source) address of the tunnel.
    pub local: Option<IpAddr>,
    /// Index of the parent (underlay) interface.
    pub parent: Option<u32>,
    /// Source-address learning (felix turns it off: entries are programmed, never learnt).
    pub learning: bool,
}

/// A VXLAN device to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// Device name.
    pub name: String,
    /// Tunnel parameters.
    pub params: VxlanParams,
    /// MTU.
    pub mtu: u32,
    /// Hardware address.
    pub mac: [u8; 6],
}

/// A permanent ARP / NDP entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Neighbour {
    /// Interface index.
    pub ifindex: u32,
    /// Protocol address.
    pub ip: IpAddr,
    /// Hardware address.
    pub mac: [u8; 6],
    /// `nud permanent` (entries read back may be dynamic).
    pub permanent: bool,
}

/// A forwarding-database entry of a VXLAN device: frames to `mac` go to `dst`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FdbEntry {
    /// Interface index of the VXLAN device.
    pub ifindex: u32,
    /// Remote VTEP's MAC.
    pub mac: [u8; 6],
    /// Remote VTEP's underlay address.
    pub dst: IpAddr,
    /// `permanent` (entries read back may be learnt).
    pub permanent: bool,
}

/// What went wrong in one netlink operation.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The socket could not be opened or used.
    #[error("netlink {op}: {source}")]
    Io {
        /// Operation name.
        op: &'static str,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused the request.
    #[error("netlink {op} {what}: {}", std::io::Error::from_raw_os_error(*errno))]
    Refused {
        /// Operation name.
        op: &'static str,
        /// The object the request was about.
        what: String,
        /// Positive errno.
        errno: i32,
    },
    /// The kernel's answer could not be decoded.
    #[error("netlink {op}: cannot decode the answer: {detail}")]
    Decode {
        /// Operation name.
        op: &'static str,
        /// Why.
        detail: String,
    },
    /// An armed fault failed the operation.
    #[error(transparent)]
    Injected(#[from] Injected),
    /// No netlink access in this context (a scripted command runner without a netlink fake).
    #[error("netlink {op}: no netlink access in this kernel seam")]
    Unavailable {
        /// Operation name.
        op: &'static str,
    },
}

impl NetlinkError {
    /// The operation that failed.
    pub fn op(&self) -> &str {
        match self {
            NetlinkError::Io { op, .. }
            | NetlinkError::Refused { op, .. }
            | NetlinkError::Decode { op, .. }
            | NetlinkError::Unavailable { op } => op,
            NetlinkError::Injected(i) => &i.op,
        }
    }

    /// The positive errno of a refusal.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Refused { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// How `/status` classifies it.
    pub fn kind(&self) -> FailureKind {
        match self {
            NetlinkError::Io { .. } | NetlinkError::Unavailable { .. } => FailureKind::Unavailable,
            NetlinkError::Refused { .. } => FailureKind::Refused,
            NetlinkError::Decode { .. } => FailureKind::Unreadable,
            NetlinkError::Injected(_) => FailureKind::Injected,
        }
    }
}

impl From<NetlinkError> for DriverError {
    fn from(e: NetlinkError) -> Self {
        let (op, kind) = (e.op().to_string(), e.kind());
        DriverError::op(op, kind, e)
    }
}

/// `ENOENT` / `ESRCH`: the object to delete is already gone.
pub fn is_gone(e: &NetlinkError) -> bool {
    matches!(e.errno(), Some(2) | Some(3))
}

/// The routing operations of one driver. Batch writes return one result per item, in order,
/// so one refused route does not hide the rest.
pub trait Netlink: Send + fmt::Debug {
    /// Every route of `ipv` in every table.
    fn list_routes(&mut self, ipv: IpVersion) -> Result<Vec<Route>, NetlinkError>;
    /// Creates or replaces each route (keyed by table, destination, type of service and
    /// priority, as the kernel keys them).
    fn replace_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>>;
    /// Deletes each route.
    fn delete_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>>;
    /// Every link.
    fn list_links(&mut self) -> Result<Vec<Link>, NetlinkError>;
    /// The link called `name`, if any.
    fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError>;
    /// The link with index `index`, if any.
    fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, NetlinkError>;
    /// Creates a VXLAN device (down).
    fn add_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), NetlinkError>;
    /// Sets a link's MTU, MAC and admin state.
    fn set_link(
        &mut self,
        index: u32,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
        up: Option<bool>,
    ) -> Result<(), NetlinkError>;
    /// Deletes a link.
    fn delete_link(&mut self, index: u32) -> Result<(), NetlinkError>;
    /// Every address of `ipv`, with the index of its link.
    fn list_addrs(&mut self, ipv: IpVersion) -> Result<Vec<(u32, IpNet)>, NetlinkError>;
    /// Adds an address to a link.
    fn add_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError>;
    /// Removes an address from a link.
    fn del_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError>;
    /// The ARP (v4) or NDP (v6) entries of a link.
    fn list_neighbours(
        &mut self,
        ipv: IpVersion,
        index: u32,
    ) -> Result<Vec<Neighbour>, NetlinkError>;
    /// Creates or replaces permanent neighbour entries.
    fn replace_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>>;
    /// Deletes neighbour entries.
    fn delete_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>>;
    /// The FDB entries of a (VXLAN) link that have a remote destination.
    fn list_fdb(&mut self, index: u32) -> Result<Vec<FdbEntry>, NetlinkError>;
    /// Creates or replaces permanent FDB entries.
    fn replace_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>>;
    /// Deletes FDB entries.
    fn delete_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>>;
}

/// Opens a driver's [`Netlink`]: the real socket in the runner's namespace, or a test fake.
pub trait NetlinkProvider: Send + Sync + fmt::Debug {
    /// A fresh handle (each driver and each driver restart gets its own).
    fn open(&self) -> Result<Box<dyn Netlink>, NetlinkError>;
}

/// The real kernel: sockets opened in `netns` (the current namespace when `None`).
#[derive(Debug, Clone, Default)]
pub struct SystemNetlink {
    netns: Option<String>,
}

impl SystemNetlink {
    /// Sockets in `netns` (the daemon's own namespace when `None`).
    pub fn new(netns: Option<String>) -> Self {
        SystemNetlink { netns }
    }
}

impl NetlinkProvider for SystemNetlink {
    fn open(&self) -> Result<Box<dyn Netlink>, NetlinkError> {
        Ok(Box::new(RtnlSocket::open(self.netns.as_deref())?))
    }
}

/// No netlink at all: every open fails (scripted command runners without a fake).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNetlink;

impl NetlinkProvider for NoNetlink {
    fn open(&self) -> Result<Box<dyn Netlink>, NetlinkError> {
        Err(NetlinkError::Unavailable { op: "open" })
    }
}

/// A driver's netlink handle: opened lazily (the first operation, after in-sync), reopened
/// after a socket error, every operation through the driver's seam.
#[derive(Debug)]
pub struct Seamed {
    provider: Arc<dyn NetlinkProvider>,
    seam: ActorSeam,
    nl: Option<Box<dyn Netlink>>,
}

impl Seamed {
    /// A handle for the driver owning `seam`.
    pub fn new(provider: Arc<dyn NetlinkProvider>, seam: ActorSeam) -> Self {
        Seamed {
            provider,
            seam,
            nl: None,
        }
    }

    /// The driver's seam (for reports such as `report_unsupported`).
    pub fn seam(&self) -> &ActorSeam {
        &self.seam
    }

    fn handle(&mut self) -> Result<&mut Box<dyn Netlink>, NetlinkError> {
        if self.nl.is_none() {
            let provider = self.provider.clone();
            self.nl = Some(self.seam.op("netlink-open", || provider.open())?);
        }
        self.nl
            .as_mut()
            .ok_or(NetlinkError::Unavailable { op: "open" })
    }

    /// Runs one operation through the seam; a socket-level error drops the socket so the
    /// next operation reopens it.
    fn run<T: fmt::Debug>(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Netlink) -> Result<T, NetlinkError>,
    ) -> Result<T, NetlinkError> {
        let seam = self.seam.clone();
        let nl = self.handle()?;
        let r = seam.op(op, || f(nl.as_mut()));
        if matches!(r, Err(NetlinkError::Io { .. })) {
            self.nl = None;
        }
        if let (Some(rec), Ok(v)) = (seam.recorder(), &r) {
            rec.read(op, format!("{v:#?}"));
        }
        r
    }

    /// One write through the seam; on a read-back probe's seam it is recorded (with `what`)
    /// instead (see `crate::dataplane::kernel::READ_ONLY_OPS`).
    fn write(
        &mut self,
        op: &'static str,
        what: &dyn fmt::Debug,
        f: impl FnOnce(&mut dyn Netlink) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        if let Some(rec) = self.seam.recorder() {
            rec.write(op, format!("{what:?}"));
            return Ok(());
        }
        self.run(op, f)
    }

    /// A batch write through the seam: an injected fault fails every item.
    fn batch<T: fmt::Debug>(
        &mut self,
        op: &'static str,
        items: &[T],
        f: impl FnOnce(&mut dyn Netlink, &[T]) -> Vec<Result<(), NetlinkError>>,
    ) -> Vec<Result<(), NetlinkError>> {
        if items.is_empty() {
            return Vec::new();
        }
        if let Some(rec) = self.seam.recorder() {
            for item in items {
                rec.write(op, format!("{item:?}"));
            }
            return items.iter().map(|_| Ok(())).collect();
        }
        let out = self.run(op, |nl| Ok(f(nl, items)));
        match out {
            Ok(v) => v,
            Err(e) => {
                let msg = e.to_string();
                let kind_is_injected = matches!(e, NetlinkError::Injected(_));
                let mut v = vec![Err(e)];
                v.extend((1..items.len()).map(|_| {
                    Err(if kind_is_injected {
                        NetlinkError::Unavailable { op }
                    } else {
                        NetlinkError::Decode {
                            op,
                            detail: msg.clone(),
                        }
                    })
                }));
                v
            }
        }
    }

    /// See [`Netlink::list_routes`].
    pub fn list_routes(&mut self, ipv: IpVersion) -> Result<Vec<Route>, NetlinkError> {
        self.run("route-list", |nl| nl.list_routes(ipv))
    }
    /// See [`Netlink::replace_routes`].
    pub fn replace_routes(&mut self, rs: &[Route]) -> Vec<Result<(), NetlinkError>> {
        self.batch("route-replace", rs, |nl, rs| nl.replace_routes(rs))
    }
    /// See [`Netlink::delete_routes`].
    pub fn delete_routes(&mut self, rs: &[Route]) -> Vec<Result<(), NetlinkError>> {
        self.batch("route-del", rs, |nl, rs| nl.delete_routes(rs))
    }
    /// See [`Netlink::list_links`].
    pub fn list_links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        self.run("link-list", |nl| nl.list_links())
    }
    /// See [`Netlink::link_by_name`].
    pub fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        self.run("link-get", |nl| nl.link_by_name(name))
    }
    /// See [`Netlink::link_by_index`].
    pub fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, NetlinkError> {
        self.run("link-get", |nl| nl.link_by_index(index))
    }
    /// See [`Netlink::add_vxlan`].
    pub fn add_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), NetlinkError> {
        self.write("link-add", spec, |nl| nl.add_vxlan(spec))
    }
    /// See [`Netlink::set_link`].
    pub fn set_link(
        &mut self,
        index: u32,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
        up: Option<bool>,
    ) -> Result<(), NetlinkError> {
        let what = (index, mtu, mac.map(|m| format_mac(&m)), up);
        self.write("link-set", &what, |nl| nl.set_link(index, mtu, mac, up))
    }
    /// See [`Netlink::delete_link`].
    pub fn delete_link(&mut self, index: u32) -> Result<(), NetlinkError> {
        self.write("link-del", &index, |nl| nl.delete_link(index))
    }
    /// See [`Netlink::list_addrs`].
    pub fn list_addrs(&mut self, ipv: IpVersion) -> Result<Vec<(u32, IpNet)>, NetlinkError> {
        self.run("addr-list", |nl| nl.list_addrs(ipv))
    }
    /// See [`Netlink::add_addr`].
    pub fn add_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        self.write("addr-add", &(index, addr), |nl| nl.add_addr(index, addr))
    }
    /// See [`Netlink::del_addr`].
    pub fn del_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        self.write("addr-del", &(index, addr), |nl| nl.del_addr(index, addr))
    }
    /// See [`Netlink::list_neighbours`].
    pub fn list_neighbours(
        &mut self,
        ipv: IpVersion,
        index: u32,
    ) -> Result<Vec<Neighbour>, NetlinkError> {
        self.run("neigh-list", |nl| nl.list_neighbours(ipv, index))
    }
    /// See [`Netlink::replace_neighbours`].
    pub fn replace_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        self.batch("neigh-replace", ns, |nl, ns| nl.replace_neighbours(ns))
    }
    /// See [`Netlink::delete_neighbours`].
    pub fn delete_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        self.batch("neigh-del", ns, |nl, ns| nl.delete_neighbours(ns))
    }
    /// See [`Netlink::list_fdb`].
    pub fn list_fdb(&mut self, index: u32) -> Result<Vec<FdbEntry>, NetlinkError> {
        self.run("fdb-list", |nl| nl.list_fdb(index))
    }
    /// See [`Netlink::replace_fdb`].
    pub fn replace_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        self.batch("fdb-replace", es, |nl, es| nl.replace_fdb(es))
    }
    /// See [`Netlink::delete_fdb`].
    pub fn delete_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        self.batch("fdb-del", es, |nl, es| nl.delete_fdb(es))
    }
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blackhole route to `dst` in the main table, protocol 80.
    fn blackhole(dst: &str) -> Route {
        Route {
            table: TABLE_MAIN,
            dst: dst.parse().expect("net"),
            kind: RouteKind::Blackhole,
            ifindex: None,
            gateway: None,
            onlink: false,
            src: None,
            protocol: 80,
            scope_link: false,
        }
    }

    #[test]
    fn macs_round_trip_and_bad_ones_are_refused() {
        let m = parse_mac("66:0a:1B:2c:3d:4e").unwrap();
        assert_eq!(format_mac(&m), "66:0a:1b:2c:3d:4e");
        assert_eq!(parse_mac("66:0a:1b:2c:3d"), None);
        assert_eq!(parse_mac("66:0a:1b:2c:3d:4e:5f"), None);
        assert_eq!(parse_mac("zz:0a:1b:2c:3d:4e"), None);
    }

    #[test]
    fn probe_writes_nothing_through_netlink() {
        let (probe, rec) = felix_actors::ActorSeam::default().recording();
        let fake = Arc::new(fake::FakeNetlink::default());
        fake.put_route(blackhole("10.1.0.0/24"));
        let mut nl = Seamed::new(Arc::new(fake.clone()), probe);
        let listed = nl.list_routes(IpVersion::V4).expect("list");
        assert_eq!(listed.len(), 1);
        let mut r = listed[0].clone();
        r.dst = "10.2.0.0/24".parse().expect("net");
        assert!(nl.replace_routes(&[r]).iter().all(Result::is_ok));
        nl.delete_link(9).expect("recorded");
        assert_eq!(fake.routes().len(), 1, "nothing written");
        assert!(fake.take_writes().is_empty());
        let got = rec.take();
        assert_eq!(got.actual.len(), 1, "the listing is the read-back");
        assert!(got.actual[0].detail.contains("10.1.0.0/24"));
        let ops: Vec<&str> = got.changes.iter().map(|c| c.op.as_str()).collect();
        assert_eq!(ops, ["route-replace", "link-del"]);
        assert!(got.changes[0].detail.contains("10.2.0.0/24"));
    }

    #[test]
    fn route_kinds_round_trip_through_their_numbers() {
        for k in [
            RouteKind::Unicast,
            RouteKind::Blackhole,
            RouteKind::Unreachable,
            RouteKind::Throw,
            RouteKind::Other(2),
        ] {
            assert_eq!(RouteKind::from_number(k.number()), k);
        }
    }

    #[test]
    fn an_injected_fault_fails_every_item_of_a_batch_and_names_the_operation() {
        let seam = felix_actors::Seam::default().for_actor("driver/routes-v4");
        seam.shared()
            .faults()
            .arm(felix_actors::Fault {
                target: "driver/routes-v4".into(),
                op: "route-replace".into(),
                action: felix_actors::FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .unwrap();
        let fake = Arc::new(fake::FakeNetlink::default());
        let mut nl = Seamed::new(Arc::new(fake.clone()), seam);
        let r = blackhole("10.0.0.0/24");
        let out = nl.replace_routes(&[r.clone(), r.clone()]);
        assert_eq!(out.len(), 2);
        assert!(matches!(out[0], Err(NetlinkError::Injected(_))));
        assert_eq!(out[0].as_ref().unwrap_err().op(), "route-replace");
        assert!(fake.routes().is_empty());
        assert!(nl.replace_routes(&[r]).iter().all(Result::is_ok));
        assert_eq!(fake.routes().len(), 1);
    }
}
