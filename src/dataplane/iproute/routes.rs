//! [`RouteTable`]: reconciles the kernel's routes of one IP version with the desired routes
//! of every producer ([`RoutesDesired`], keyed by `(RouteClass, interface or none)`), over
//! rtnetlink.
//!
//! # Identification (restart safety)
//! A route read back from the kernel is ours ([`RouteOwnership::route_is_ours`]) if
//! - it is in a table felix owns (`RouteTableRanges`, never the main table), or
//! - it carries felix's exclusive protocol ([`DEFAULT_ROUTE_PROTO`], 80, when workload routes
//!   are written with the default device protocol `boot`; the configured protocol otherwise),
//!   which is how VXLAN, no-encap and blackhole routes are recognised, or
//! - it points down an interface felix owns outright (`vxlan.calico`, `vxlan-v6.calico`), or
//! - it points down a workload interface (`cali*`) and either `RemoveExternalRoutes` is on or
//!   its protocol is one felix writes with.
//!
//! Everything else (the node's uplink routes, a foreign route in the main table) is never
//! touched. A foreign route in an owned table is removed.
//!
//! # Reconciliation
//! The first apply (and every apply after a resync, a failure, an interface change of one of
//! our interfaces, or `RouteRefreshInterval`) dumps the routes and links; later applies work
//! from the record of the previous one, so their cost is proportional to what changed. A
//! route that is missing or differs is replaced (never deleted first); a route of ours that
//! no producer wants is deleted, except that a route down a workload interface first seen less
//! than [`CNI_GRACE`] ago is left for the CNI plugin's benefit (it adds the route before the
//! endpoint reaches felix). A desired route whose interface is missing or down waits (the
//! table stays dirty) until the interface monitor reports the interface.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use felix_actors::clock::SharedClock;
use felix_config::IndexRange;
use ipnet::IpNet;

use crate::dataplane::desired::{RouteClass, RouteTarget, RoutesDesired};
use crate::dataplane::netlink::{
    is_gone, Link, NetlinkError, Route, RouteKind, Seamed, RTPROT_BOOT, TABLE_MAIN,
};
use crate::dataplane::IpVersion;

/// Felix's own route protocol number (upstream's default route protocol).
pub const DEFAULT_ROUTE_PROTO: u8 = 80;

/// How long a route down a newly seen workload interface is left alone although no endpoint
/// wants it (upstream's route cleanup grace period).
pub const CNI_GRACE: Duration = Duration::from_secs(10);

/// Which routes are ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteOwnership {
    /// Workload interface prefixes (`InterfacePrefix`, e.g. `cali`).
    pub workload_prefixes: Vec<String>,
    /// `RemoveExternalRoutes`: any route via a workload interface is ours.
    pub remove_external_routes: bool,
    /// `DeviceRouteProtocol`: the protocol workload routes are written with.
    pub device_route_protocol: u8,
    /// Interfaces felix owns outright (its VXLAN devices): every route down them is ours.
    pub owned_ifaces: Vec<String>,
    /// Tables felix owns outright (`RouteTableRanges`, the main table excluded).
    pub owned_tables: Vec<IndexRange>,
    /// `DeviceRouteSourceAddress` / `DeviceRouteSourceAddressIPv6`: the source address of
    /// routes to local workloads (`None`: the kernel chooses).
    pub device_route_src: Option<IpAddr>,
}

impl RouteOwnership {
    /// Protocols that mark a route as ours wherever it points.
    fn exclusive(&self) -> &[u8] {
        if self.device_route_protocol == RTPROT_BOOT {
            &[DEFAULT_ROUTE_PROTO]
        } else {
            std::slice::from_ref(&self.device_route_protocol)
        }
    }

    /// The protocol a target is written with.
    pub fn protocol_of(&self, t: &RouteTarget) -> u8 {
        t.protocol.unwrap_or(self.device_route_protocol)
    }

    fn programmed_with(&self, proto: u8) -> bool {
        proto == self.device_route_protocol || self.exclusive().contains(&proto)
    }

    /// True for a workload interface name.
    pub fn is_workload_iface(&self, name: &str) -> bool {
        self.workload_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }

    /// True for a table felix owns outright.
    pub fn owns_table(&self, table: u32) -> bool {
        table != TABLE_MAIN
            && self
                .owned_tables
                .iter()
                .any(|r| table >= r.min && table <= r.max)
    }

    /// True if a route read back from the kernel is ours to manage; `dev` is the name of its
    /// output interface.
    pub fn route_is_ours(&self, r: &Route, dev: Option<&str>) -> bool {
        // The kernel's own routes (an address's subnet, IPv6 link-local `fe80::/64` on every
        // interface) belong to the address configuration, never to felix.
        if r.protocol == RTPROT_KERNEL || is_link_local(&r.dst) {
            return false;
        }
        if self.owns_table(r.table) {
            return true;
        }
        if r.table != TABLE_MAIN {
            return false;
        }
        if self.exclusive().contains(&r.protocol) {
            return true;
        }
        match dev {
            Some(d) if self.owned_ifaces.iter().any(|o| o == d) => true,
            Some(d) if self.is_workload_iface(d) => {
                self.remove_external_routes || self.programmed_with(r.protocol)
            }
            _ => false,
        }
    }
}

/// `RTPROT_KERNEL`: routes the kernel derives from addresses.
const RTPROT_KERNEL: u8 = 2;

fn is_link_local(dst: &IpNet) -> bool {
    match dst {
        IpNet::V6(n) => n.network().segments()[0] & 0xffc0 == 0xfe80,
        IpNet::V4(n) => n.network().octets()[..2] == [169, 254] && n.prefix_len() >= 16,
    }
}

/// What one apply did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteTableStats {
    /// Route listings.
    pub listings: usize,
    /// Routes added or replaced.
    pub replaced: usize,
    /// Routes deleted.
    pub deleted: usize,
    /// Desired routes skipped because their interface is missing or down.
    pub waiting: usize,
    /// Undesired routes left alone in the CNI grace period.
    pub in_grace: usize,
    /// Desired routes via a next hop on no connected subnet (not programmed).
    pub unreachable: usize,
}

/// One wanted route: the winning producer's target and interface.
struct Wanted<'a> {
    iface: Option<&'a str>,
    target: &'a RouteTarget,
}

/// The routes of one IP version, every table. See the module docs.
///
/// # Thread safety
/// Not shared: owned by one driver actor (`&mut self`).
#[derive(Debug)]
pub struct RouteTable {
    ipv: IpVersion,
    nl: Seamed,
    own: RouteOwnership,
    clock: SharedClock,
    refresh: Option<Duration>,
    /// Our routes as last read back plus our writes, by (table, destination); `None` = re-read.
    actual: Option<BTreeMap<(u32, IpNet), Route>>,
    /// Links as last listed, by name.
    links: HashMap<String, Link>,
    /// Names of links by index, for classifying routes read back.
    names: HashMap<u32, String>,
    /// Connected subnets (addresses of up links), for next hops given without an interface.
    connected: Vec<(u32, IpNet)>,
    /// When each workload interface was first seen.
    first_seen: HashMap<String, Instant>,
    last_read: Option<Instant>,
    waiting: bool,
    grace_pending: bool,
}

impl RouteTable {
    /// A table; its first apply reads the kernel back. `refresh` is `RouteRefreshInterval`
    /// (`None`: never re-read on a timer).
    pub fn new(
        ipv: IpVersion,
        nl: Seamed,
        own: RouteOwnership,
        clock: SharedClock,
        refresh: Option<Duration>,
    ) -> Self {
        RouteTable {
            ipv,
            nl,
            own,
            clock,
            refresh,
            actual: None,
            links: HashMap::new(),
            names: HashMap::new(),
            connected: Vec::new(),
            first_seen: HashMap::new(),
            last_read: None,
            waiting: false,
            grace_pending: false,
        }
    }

    /// Forces a read-back at the next apply.
    pub fn queue_resync(&mut self) {
        self.actual = None;
    }

    /// The interface monitor saw these interfaces change. If one is ours (workload or owned),
    /// the next apply re-reads: the kernel drops an interface's routes when it goes down or is
    /// deleted, and a waiting route may now be programmable.
    pub fn interfaces_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a String>) {
        let now = self.clock.now();
        for n in names {
            if self.own.is_workload_iface(n) {
                self.first_seen.entry(n.clone()).or_insert(now);
                self.actual = None;
            } else if self.own.owned_ifaces.iter().any(|o| o == n) {
                self.actual = None;
            }
        }
    }

    fn refresh_due(&self) -> bool {
        match (self.refresh, self.last_read) {
            (Some(r), Some(t)) if !r.is_zero() => self.clock.now().duration_since(t) >= r,
            _ => false,
        }
    }

    /// True if the next apply has known work.
    pub fn is_dirty(&self) -> bool {
        self.is_dirty_except_waiting() || self.waiting
    }

    /// True if there is work other than routes waiting for a missing or down interface.
    pub fn is_dirty_except_waiting(&self) -> bool {
        self.actual.is_none() || self.grace_pending || self.refresh_due()
    }

    fn read_back(&mut self) -> Result<BTreeMap<(u32, IpNet), Route>, NetlinkError> {
        self.refresh_links()?;
        let routes = self.nl.list_routes(self.ipv)?;
        self.last_read = Some(self.clock.now());
        Ok(routes
            .into_iter()
            .filter(|r| {
                let dev = r
                    .ifindex
                    .and_then(|i| self.names.get(&i))
                    .map(String::as_str);
                self.own.route_is_ours(r, dev)
            })
            .map(|r| ((r.table, r.dst), r))
            .collect())
    }

    fn refresh_links(&mut self) -> Result<(), NetlinkError> {
        let links = self.nl.list_links()?;
        let now = self.clock.now();
        self.names = links.iter().map(|l| (l.index, l.name.clone())).collect();
        for l in &links {
            if self.own.is_workload_iface(&l.name) {
                self.first_seen.entry(l.name.clone()).or_insert(now);
            }
        }
        self.first_seen
            .retain(|n, _| links.iter().any(|l| &l.name == n));
        let up: std::collections::HashSet<u32> = links
            .iter()
            .filter(|l| l.admin_up && l.oper_up)
            .map(|l| l.index)
            .collect();
        self.links = links.into_iter().map(|l| (l.name.clone(), l)).collect();
        self.connected = self
            .nl
            .list_addrs(self.ipv)?
            .into_iter()
            .filter(|(i, _)| up.contains(i))
            .collect();
        Ok(())
    }

    /// The winning target per (table, destination).
    fn wanted(desired: &RoutesDesired) -> BTreeMap<(u32, IpNet), (RouteClass, Wanted<'_>)> {
        let mut wanted: BTreeMap<(u32, IpNet), (RouteClass, Wanted<'_>)> = BTreeMap::new();
        for (key, e) in desired.iter() {
            for t in &e.value {
                let k = (t.table.unwrap_or(TABLE_MAIN), t.dst.trunc());
                let w = Wanted {
                    iface: key.iface.as_deref(),
                    target: t,
                };
                match wanted.get(&k) {
                    Some((class, _)) if *class <= key.class => {}
                    _ => {
                        wanted.insert(k, (key.class, w));
                    }
                }
            }
        }
        wanted
    }

    /// True if the link cache can place `w` (its interface is known and usable, or its next
    /// hop is on a connected subnet); device-less kinds always can.
    fn resolvable(&self, w: &Wanted<'_>) -> bool {
        if w.target.kind != RouteKind::Unicast {
            return true;
        }
        match (w.iface, w.target.gateway) {
            (Some(name), _) => self
                .links
                .get(name)
                .is_some_and(|l| l.admin_up && (l.oper_up || !self.own.is_workload_iface(name))),
            (None, Some(gw)) if !w.target.onlink => {
                self.connected.iter().any(|(_, net)| net.contains(&gw))
            }
            _ => true,
        }
    }

    /// The kernel route for a target down `ifindex`.
    fn route_for(&self, class: RouteClass, w: &Wanted<'_>, ifindex: Option<u32>) -> Route {
        let t = w.target;
        let src = match (t.src, class) {
            (None, RouteClass::LocalWorkload) => self.own.device_route_src,
            (src, _) => src,
        };
        Route {
            table: t.table.unwrap_or(TABLE_MAIN),
            dst: t.dst.trunc(),
            kind: t.kind,
            ifindex: if t.kind == RouteKind::Unicast {
                ifindex
            } else {
                None
            },
            gateway: t.gateway,
            onlink: t.onlink,
            src,
            protocol: self.own.protocol_of(t),
            // IPv6 routes have no scope in the kernel (it reads back as universe): asking for
            // `link` would make every read-back differ and every resync rewrite them.
            scope_link: t.kind == RouteKind::Unicast
                && t.gateway.is_none()
                && t.dst.addr().is_ipv4(),
        }
    }

    /// Reconciles the kernel with `desired`. Unrelated routes are still attempted after a
    /// failure; the first error is returned and the next apply re-reads.
    pub fn apply(&mut self, desired: &RoutesDesired) -> Result<RouteTableStats, NetlinkError> {
        let mut stats = RouteTableStats::default();
        let mut actual = match self.actual.take() {
            Some(a) if !self.refresh_due() => a,
            _ => {
                stats.listings += 1;
                self.read_back()?
            }
        };
        let wanted = Self::wanted(desired);
        // The link cache is refreshed only when a route to be written names an interface
        // (or a next hop) it cannot resolve: a new workload interface, say. Interface changes
        // of our interfaces force a full read-back anyway (`interfaces_changed`).
        let needs_links = wanted.iter().any(|(k, (_, w))| {
            let via_gateway = w.iface.is_none() && w.target.gateway.is_some();
            let to_write = actual.get(k).is_none_or(|r| {
                !via_gateway
                    && r.ifindex
                        .and_then(|i| self.names.get(&i))
                        .map(String::as_str)
                        != w.iface
            });
            to_write && !self.resolvable(w)
        });
        if needs_links && stats.listings == 0 {
            if let Err(e) = self.refresh_links() {
                self.actual = None;
                return Err(e);
            }
        }
        let mut writes = Vec::new();
        let mut waiting = 0;
        for (k, (class, w)) in &wanted {
            let ifindex = match w.iface {
                Some(name) => match self.links.get(name) {
                    Some(l) if l.admin_up && (l.oper_up || !self.own.is_workload_iface(name)) => {
                        Some(l.index)
                    }
                    _ => {
                        if w.target.kind == RouteKind::Unicast {
                            waiting += 1;
                            continue;
                        }
                        None
                    }
                },
                // A next hop without an interface goes out of the link whose subnet holds it
                // (same-subnet routes); none: the node is not directly reachable, skip.
                None => match w.target.gateway {
                    Some(gw) if w.target.kind == RouteKind::Unicast && !w.target.onlink => {
                        match self.connected.iter().find(|(_, net)| net.contains(&gw)) {
                            Some((i, _)) => Some(*i),
                            None => {
                                stats.unreachable += 1;
                                continue;
                            }
                        }
                    }
                    _ => None,
                },
            };
            let route = self.route_for(*class, w, ifindex);
            if actual.get(k) != Some(&route) {
                writes.push(route);
            }
        }
        stats.waiting = waiting;
        self.waiting = waiting > 0;
        let mut first_err = None;
        for (r, res) in writes.iter().zip(self.nl.replace_routes(&writes)) {
            match res {
                Ok(()) => {
                    stats.replaced += 1;
                    actual.insert((r.table, r.dst), r.clone());
                }
                Err(e) => {
                    tracing::warn!(dst = %r.dst, error = %e, "route replace failed");
                    first_err.get_or_insert(e);
                }
            }
        }
        let now = self.clock.now();
        self.grace_pending = false;
        let mut stale = Vec::new();
        for (k, r) in &actual {
            if wanted.contains_key(k) {
                continue;
            }
            let dev = r.ifindex.and_then(|i| self.names.get(&i));
            let in_grace = dev.is_some_and(|d| {
                self.own.is_workload_iface(d)
                    && self
                        .first_seen
                        .get(d)
                        .is_some_and(|t| now.duration_since(*t) < CNI_GRACE)
            });
            if in_grace {
                stats.in_grace += 1;
                self.grace_pending = true;
            } else {
                stale.push(r.clone());
            }
        }
        for (r, res) in stale.iter().zip(self.nl.delete_routes(&stale)) {
            match res {
                Ok(()) => {
                    stats.deleted += 1;
                    actual.remove(&(r.table, r.dst));
                }
                Err(e) if is_gone(&e) => {
                    actual.remove(&(r.table, r.dst));
                }
                Err(e) => {
                    tracing::warn!(dst = %r.dst, error = %e, "route delete failed");
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            None => {
                self.actual = Some(actual);
                Ok(stats)
            }
            Some(e) => Err(e),
        }
    }

    /// The address a destination is routed from, for tests and the admin socket: the gateway
    /// of the route we programmed for `dst`, if any.
    pub fn gateway_of(&self, dst: &IpNet) -> Option<IpAddr> {
        self.actual
            .as_ref()?
            .get(&(TABLE_MAIN, dst.trunc()))
            .and_then(|r| r.gateway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::desired::RouteKey;
    use crate::dataplane::netlink::fake::FakeNetlink;
    use felix_actors::clock::ManualClock;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    fn own() -> RouteOwnership {
        RouteOwnership {
            workload_prefixes: vec!["cali".into()],
            remove_external_routes: true,
            device_route_protocol: 3,
            owned_ifaces: vec!["vxlan.calico".into()],
            owned_tables: vec![IndexRange { min: 1, max: 250 }],
            device_route_src: None,
        }
    }

    fn route(dst: &str, ifindex: Option<u32>, protocol: u8, table: u32) -> Route {
        Route {
            table,
            dst: dst.parse().unwrap(),
            kind: RouteKind::Unicast,
            ifindex,
            gateway: None,
            onlink: false,
            src: None,
            protocol,
            scope_link: true,
        }
    }

    fn table(fake: &Arc<FakeNetlink>, clock: &Arc<ManualClock>) -> RouteTable {
        let nl = Seamed::new(
            Arc::new(fake.clone()),
            felix_actors::Seam::default().for_actor("driver/routes-v4"),
        );
        RouteTable::new(IpVersion::V4, nl, own(), clock.clone(), None)
    }

    fn set(d: &mut RoutesDesired, key: RouteKey, targets: &[RouteTarget]) {
        d.set("m", key, targets.iter().cloned().collect::<BTreeSet<_>>());
    }

    #[test]
    fn ownership_follows_table_protocol_owned_and_workload_interfaces() {
        let o = own();
        let r = |proto, table| route("10.0.0.0/24", Some(1), proto, table);
        assert!(o.route_is_ours(&r(80, TABLE_MAIN), Some("eth0")));
        assert!(o.route_is_ours(&r(3, TABLE_MAIN), Some("vxlan.calico")));
        assert!(o.route_is_ours(&r(4, TABLE_MAIN), Some("cali1")));
        assert!(!o.route_is_ours(&r(3, TABLE_MAIN), Some("eth0")));
        assert!(o.route_is_ours(&r(3, 7), Some("eth0")), "owned table");
        assert!(!o.route_is_ours(&r(80, 251), Some("eth0")), "foreign table");
        let kernel_ll = Route {
            dst: "fe80::/64".parse().unwrap(),
            protocol: 2,
            ..r(2, TABLE_MAIN)
        };
        assert!(
            !o.route_is_ours(&kernel_ll, Some("cali1")),
            "the kernel's link-local route"
        );
        let boot_ll = Route {
            protocol: 3,
            ..kernel_ll.clone()
        };
        assert!(
            !o.route_is_ours(&boot_ll, Some("cali1")),
            "link-local, whatever its protocol"
        );
        assert!(
            !o.route_is_ours(&r(2, TABLE_MAIN), Some("cali1")),
            "proto kernel"
        );
        let timid = RouteOwnership {
            remove_external_routes: false,
            ..own()
        };
        assert!(timid.route_is_ours(&r(3, TABLE_MAIN), Some("cali1")));
        assert!(!timid.route_is_ours(&r(4, TABLE_MAIN), Some("cali1")));
    }

    #[test]
    fn two_producers_of_one_destination_never_delete_each_other() {
        let fake = Arc::new(FakeNetlink::default());
        let clock = Arc::new(ManualClock::new());
        fake.add_link("cali1");
        fake.add_link("vxlan.calico");
        let mut t = table(&fake, &clock);
        let dst: IpNet = "10.65.1.0/26".parse().unwrap();
        let mut d = RoutesDesired::default();
        set(
            &mut d,
            RouteKey {
                class: RouteClass::VxlanTunnel,
                iface: Some("vxlan.calico".into()),
            },
            &[RouteTarget {
                gateway: Some("10.65.1.0".parse().unwrap()),
                onlink: true,
                protocol: Some(80),
                ..RouteTarget::device(dst)
            }],
        );
        d.set(
            "other",
            RouteKey::workload("cali1"),
            [RouteTarget::device(dst)].into(),
        );
        t.apply(&d).unwrap();
        let rs = fake.routes();
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].gateway, None, "the local workload class wins");
        // The winner withdraws: the other producer's route takes over, without a delete.
        d.remove(&RouteKey::workload("cali1"));
        fake.take_writes();
        t.apply(&d).unwrap();
        assert_eq!(fake.take_writes(), vec!["route-replace 10.65.1.0/26"]);
        assert_eq!(fake.routes()[0].gateway, Some("10.65.1.0".parse().unwrap()));
    }

    #[test]
    fn resync_sweeps_only_ours_and_keeps_what_is_right() {
        let fake = Arc::new(FakeNetlink::default());
        let clock = Arc::new(ManualClock::new());
        let c1 = fake.add_link("cali1");
        let eth = fake.add_link("eth0");
        fake.put_route(route("10.65.0.2/32", Some(c1), 3, TABLE_MAIN));
        fake.put_route(route("10.65.0.9/32", Some(c1), 3, TABLE_MAIN));
        fake.put_route(route("192.168.0.0/24", Some(eth), 2, TABLE_MAIN));
        fake.put_route(route("10.99.0.0/24", Some(eth), 4, 7));
        let mut t = table(&fake, &clock);
        let mut d = RoutesDesired::default();
        set(
            &mut d,
            RouteKey::workload("cali1"),
            &[RouteTarget::device("10.65.0.2/32".parse().unwrap())],
        );
        // The foreign route in an owned table goes at once; the stale workload route waits
        // out the CNI grace period of its (just seen) interface.
        let s = t.apply(&d).unwrap();
        assert_eq!((s.replaced, s.deleted, s.in_grace), (0, 1, 1));
        clock.advance(CNI_GRACE);
        let s = t.apply(&d).unwrap();
        assert_eq!((s.replaced, s.deleted), (0, 1));
        let dsts: Vec<String> = fake.routes().iter().map(|r| r.dst.to_string()).collect();
        assert_eq!(dsts, vec!["10.65.0.2/32", "192.168.0.0/24"]);
    }

    #[test]
    fn cni_routes_on_a_new_workload_interface_survive_the_grace_period() {
        let fake = Arc::new(FakeNetlink::default());
        let clock = Arc::new(ManualClock::new());
        let c1 = fake.add_link("cali1");
        fake.put_route(route("10.65.0.5/32", Some(c1), 3, TABLE_MAIN));
        let mut t = table(&fake, &clock);
        let s = t.apply(&RoutesDesired::default()).unwrap();
        assert_eq!((s.deleted, s.in_grace), (0, 1));
        assert!(t.is_dirty());
        clock.advance(CNI_GRACE);
        let s = t.apply(&RoutesDesired::default()).unwrap();
        assert_eq!(s.deleted, 1);
        assert!(!t.is_dirty());
    }

    #[test]
    fn a_route_waits_for_its_interface_and_blackholes_need_none() {
        let fake = Arc::new(FakeNetlink::default());
        let clock = Arc::new(ManualClock::new());
        let mut t = table(&fake, &clock);
        let mut d = RoutesDesired::default();
        set(
            &mut d,
            RouteKey::workload("cali9"),
            &[RouteTarget::device("10.65.0.7/32".parse().unwrap())],
        );
        set(
            &mut d,
            RouteKey {
                class: RouteClass::LocalBlock,
                iface: None,
            },
            &[RouteTarget {
                kind: RouteKind::Blackhole,
                protocol: Some(80),
                ..RouteTarget::device("10.65.0.0/26".parse().unwrap())
            }],
        );
        let s = t.apply(&d).unwrap();
        assert_eq!((s.replaced, s.waiting), (1, 1));
        assert!(t.is_dirty());
        fake.add_link("cali9");
        t.interfaces_changed(&["cali9".to_string()]);
        let s = t.apply(&d).unwrap();
        assert_eq!((s.replaced, s.waiting), (1, 0));
        // Steady state: nothing to write, no listing.
        let s = t.apply(&d).unwrap();
        assert_eq!(s, RouteTableStats::default());
    }

    #[test]
    fn a_failed_write_forces_a_read_back() {
        let fake = Arc::new(FakeNetlink::default());
        let clock = Arc::new(ManualClock::new());
        fake.add_link("cali1");
        let mut t = table(&fake, &clock);
        t.apply(&RoutesDesired::default()).unwrap();
        let mut d = RoutesDesired::default();
        set(
            &mut d,
            RouteKey::workload("cali1"),
            &[RouteTarget::device("10.65.0.2/32".parse().unwrap())],
        );
        fake.fail_next(1);
        assert!(t.apply(&d).is_err());
        assert!(t.is_dirty());
        let s = t.apply(&d).unwrap();
        assert_eq!((s.listings, s.replaced), (1, 1));
    }
}
