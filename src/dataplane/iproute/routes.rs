//! [`RouteTable`]: reconciles the main routing table's routes to local
//! workloads with the desired routes (one IP version).
//!
//! Identification (restart safety): a route is ours, following upstream's
//! main-table ownership policy, if
//! - it carries our exclusive protocol ([`DEFAULT_ROUTE_PROTO`], 80, when
//!   routes are programmed with the default device protocol `boot`; the
//!   configured protocol otherwise), or
//! - it points down a workload interface (`cali*`) and either
//!   `RemoveExternalRoutes` is on or its protocol is one we program with.
//!
//! Mark-and-sweep: the first apply (and every apply after a resync or a
//! failure) lists the table; our routes that are not desired are deleted,
//! desired routes that are missing or differ are replaced. Routes are never
//! touched before the first apply, which the runtime only runs after
//! in-sync. A desired route whose interface is missing or down is skipped
//! and retried on later applies (the table stays dirty); an interface
//! monitor event for a workload interface forces a read-back
//! ([`RouteTable::interfaces_changed`]).

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use crate::dataplane::desired::RoutesDesired;
use crate::dataplane::IpVersion;

use super::{IpTool, IpToolError, KernelRoute};

/// Felix's own route protocol number (upstream's default route protocol).
pub const DEFAULT_ROUTE_PROTO: u8 = 80;

/// `RTPROT_BOOT`.
const RTPROT_BOOT: u8 = 3;

/// Which routes in the main table are ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteOwnership {
    /// Workload interface prefixes (`InterfacePrefix`, e.g. `cali`).
    pub workload_prefixes: Vec<String>,
    /// `RemoveExternalRoutes`: any route via a workload interface is ours.
    pub remove_external_routes: bool,
    /// `DeviceRouteProtocol`: the protocol our routes are written with.
    pub device_route_protocol: u8,
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

    fn programmed_with(&self, proto: u8) -> bool {
        proto == self.device_route_protocol || self.exclusive().contains(&proto)
    }

    /// True for a workload interface name.
    pub fn is_workload_iface(&self, name: &str) -> bool {
        self.workload_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }

    /// True if a route read back from the kernel is ours to manage.
    pub fn route_is_ours(&self, r: &KernelRoute) -> bool {
        if self.exclusive().contains(&r.protocol) {
            return true;
        }
        match &r.dev {
            Some(dev) if self.is_workload_iface(dev) => {
                self.remove_external_routes || self.programmed_with(r.protocol)
            }
            _ => false,
        }
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
}

/// The main routing table's routes to local workloads, for one IP version.
///
/// # API model
/// Declarative: [`RouteTable::apply`] takes the whole desired route set (per workload
/// interface) and reconciles; [`RouteTable::queue_resync`] forces a read-back;
/// [`RouteTable::interfaces_changed`] tells it which interfaces the interface monitor saw
/// change.
///
/// # Design
/// Reads the table back with `ip route show`, then replaces missing or different routes and
/// deletes ours that are not desired; work per apply is proportional to what changed, except
/// after a resync.
///
/// # Identification of our state
/// Upstream's main-table ownership policy: a route is ours if it carries our protocol (80 by
/// default), or points down a workload interface (`cali*`) and either `RemoveExternalRoutes` is
/// on or its protocol is one we program with (see the module docs).
///
/// # Retry policy
/// No retries within an apply: a failure returns the error and leaves the table dirty, so the
/// next apply (throttled, or the retry ticker) reads back and tries again; a route waiting for
/// its interface is retried when the interface monitor reports the interface.
///
/// # Thread safety
/// Not shared: owned by one driver actor, called from one thread at a time (`&mut self`).
#[derive(Debug)]
pub struct RouteTable {
    ipv: IpVersion,
    nl: IpTool,
    own: RouteOwnership,
    /// Our routes as last read back plus our writes; `None` = re-read.
    actual: Option<BTreeMap<IpNet, KernelRoute>>,
    waiting: bool,
}

impl RouteTable {
    /// A table; its first apply reads the kernel back.
    pub fn new(ipv: IpVersion, nl: IpTool, own: RouteOwnership) -> Self {
        RouteTable {
            ipv,
            nl,
            own,
            actual: None,
            waiting: false,
        }
    }

    /// Forces a read-back at the next apply.
    pub fn queue_resync(&mut self) {
        self.actual = None;
    }

    /// The interface monitor saw these interfaces change. If one is a
    /// workload interface, the next apply re-reads the table: the kernel
    /// drops an interface's routes when it goes down or is deleted, so our
    /// record of them may be stale, and a waiting route may now be
    /// programmable.
    pub fn interfaces_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a String>) {
        if names.into_iter().any(|n| self.own.is_workload_iface(n)) {
            self.actual = None;
        }
    }

    /// True if the next apply has known work (a read-back, or routes waiting
    /// for their interface).
    pub fn is_dirty(&self) -> bool {
        self.actual.is_none() || self.waiting
    }

    /// True if there is work other than routes waiting for a missing or
    /// down interface (what matters when the interface monitor reports
    /// interfaces).
    pub fn is_dirty_except_waiting(&self) -> bool {
        self.actual.is_none()
    }

    fn wanted(desired: &RoutesDesired) -> BTreeMap<IpNet, String> {
        let mut wanted = BTreeMap::new();
        for (iface, e) in desired.iter() {
            for dst in &e.value {
                // Two interfaces claiming one destination: the first name
                // wins, deterministically.
                wanted.entry(dst.trunc()).or_insert_with(|| iface.clone());
            }
        }
        wanted
    }

    /// Reconciles the main table with `desired`. Unrelated routes are still
    /// attempted after a failure; the first error is returned and the next
    /// apply re-reads the table.
    pub fn apply(&mut self, desired: &RoutesDesired) -> Result<RouteTableStats, IpToolError> {
        let mut stats = RouteTableStats::default();
        let mut actual = match self.actual.take() {
            Some(a) => a,
            None => {
                stats.listings += 1;
                self.nl
                    .list_routes(self.ipv)?
                    .into_iter()
                    .filter(|r| self.own.route_is_ours(r))
                    .map(|r| (r.dst, r))
                    .collect()
            }
        };
        let wanted = Self::wanted(desired);
        let proto = self.own.device_route_protocol;
        let todo: Vec<(&IpNet, &String)> = wanted
            .iter()
            .filter(|(dst, iface)| {
                actual
                    .get(*dst)
                    .is_none_or(|r| r.dev.as_deref() != Some(iface.as_str()) || r.protocol != proto)
            })
            .collect();
        let mut first_err = None;
        let mut up_links = BTreeSet::new();
        if !todo.is_empty() {
            let names: BTreeSet<&str> = todo.iter().map(|(_, i)| i.as_str()).collect();
            let names: Vec<&str> = names.into_iter().collect();
            match self.nl.links_up(&names) {
                Ok(up) => up_links = up,
                Err(e) => first_err = Some(e),
            }
        }
        self.waiting = false;
        if first_err.is_none() {
            let (ready, waiting): (Vec<_>, Vec<_>) = todo
                .into_iter()
                .partition(|(_, iface)| up_links.contains(*iface));
            if !waiting.is_empty() {
                stats.waiting += waiting.len();
                self.waiting = true;
            }
            // Many routes (start of day) go in one `ip -batch` process; if
            // the batch fails, each route is retried alone below so the
            // failing one is found and the rest still land.
            let mut single = ready;
            if single.len() > 1 {
                let batch: Vec<(&IpNet, &str)> =
                    single.iter().map(|(d, i)| (*d, i.as_str())).collect();
                if self.nl.replace_routes(self.ipv, &batch, proto).is_ok() {
                    for (dst, iface) in single.drain(..) {
                        stats.replaced += 1;
                        actual.insert(
                            *dst,
                            KernelRoute {
                                dst: *dst,
                                dev: Some(iface.clone()),
                                protocol: proto,
                            },
                        );
                    }
                }
            }
            for (dst, iface) in single {
                match self.nl.replace_route(self.ipv, dst, iface, proto) {
                    Ok(()) => {
                        stats.replaced += 1;
                        actual.insert(
                            *dst,
                            KernelRoute {
                                dst: *dst,
                                dev: Some(iface.clone()),
                                protocol: proto,
                            },
                        );
                    }
                    Err(e) => {
                        tracing::warn!(dst = %dst, iface = %iface, error = %e, "route replace failed");
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        let stale: Vec<KernelRoute> = actual
            .values()
            .filter(|r| !wanted.contains_key(&r.dst))
            .cloned()
            .collect();
        for r in stale {
            match self.nl.delete_route(self.ipv, &r) {
                Ok(()) => {
                    stats.deleted += 1;
                    actual.remove(&r.dst);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::{Commands, FakeResponse, ScriptedCommands};
    use std::sync::Arc;

    fn own() -> RouteOwnership {
        RouteOwnership {
            workload_prefixes: vec!["cali".into()],
            remove_external_routes: true,
            device_route_protocol: 3,
        }
    }

    #[test]
    fn ownership_follows_protocol_and_workload_interface() {
        let o = own();
        let r = |dev: Option<&str>, protocol| KernelRoute {
            dst: "10.0.0.1/32".parse().unwrap(),
            dev: dev.map(str::to_string),
            protocol,
        };
        assert!(o.route_is_ours(&r(Some("eth0"), 80)));
        assert!(o.route_is_ours(&r(None, 80)));
        assert!(o.route_is_ours(&r(Some("cali1"), 4)));
        assert!(!o.route_is_ours(&r(Some("eth0"), 3)));
        let timid = RouteOwnership {
            remove_external_routes: false,
            ..own()
        };
        assert!(timid.route_is_ours(&r(Some("cali1"), 3)));
        assert!(!timid.route_is_ours(&r(Some("cali1"), 4)));
    }

    #[test]
    fn resync_sweeps_stale_routes_and_adds_only_missing_ones() {
        let fake = ScriptedCommands::new(|req| {
            let a = req.args.join(" ");
            if a.contains("route show") {
                FakeResponse::Ok(
                    r#"[{"dst":"10.65.0.2","dev":"cali1","scope":"253"},
                        {"dst":"10.65.0.9","dev":"caliold","scope":"253"},
                        {"dst":"192.168.0.0/24","dev":"eth0","protocol":"2"}]"#
                        .into(),
                )
            } else if a.contains("link show") {
                FakeResponse::Ok(
                    r#"[{"ifname":"cali1","flags":["UP"],"operstate":"UP"},
                        {"ifname":"cali2","flags":["UP"],"operstate":"UP"}]"#
                        .into(),
                )
            } else {
                FakeResponse::Ok(String::new())
            }
        });
        let cmds = Commands::standalone(fake.clone(), "driver/routes-v4");
        let mut t = RouteTable::new(IpVersion::V4, IpTool::new(cmds), own());
        let mut d = RoutesDesired::default();
        d.set(
            "m",
            "cali1".into(),
            ["10.65.0.2/32".parse().unwrap()].into(),
        );
        d.set(
            "m",
            "cali2".into(),
            ["10.65.0.3/32".parse().unwrap()].into(),
        );
        d.set(
            "m",
            "cali3".into(),
            ["10.65.0.4/32".parse().unwrap()].into(),
        );
        let s = t.apply(&d).unwrap();
        assert_eq!(
            s,
            RouteTableStats {
                listings: 1,
                replaced: 1,
                deleted: 1,
                waiting: 1
            }
        );
        let writes: Vec<String> = fake
            .calls()
            .iter()
            .map(|c| c.args.join(" "))
            .filter(|a| a.contains("replace") || a.contains(" del "))
            .collect();
        assert_eq!(
            writes,
            vec![
                "-4 route replace 10.65.0.3/32 dev cali2 scope link proto 3",
                "-4 route del 10.65.0.9/32 dev caliold proto 3 table main"
            ]
        );
        // cali3 is missing: the table stays dirty and retries later.
        assert!(t.is_dirty());
        fake.clear_calls();
        d.set("m", "cali3".into(), BTreeSet::new());
        let s = t.apply(&d).unwrap();
        assert_eq!(s, RouteTableStats::default());
        assert!(!t.is_dirty());
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn a_failed_write_forces_a_read_back() {
        let fake = ScriptedCommands::new(|req| {
            let a = req.args.join(" ");
            if a.contains("link show") {
                FakeResponse::Ok(r#"[{"ifname":"cali1","flags":["UP"],"operstate":"UP"}]"#.into())
            } else {
                FakeResponse::Ok("[]".into())
            }
        });
        let cmds = Commands::standalone(Arc::clone(&fake) as _, "driver/routes-v4");
        let mut t = RouteTable::new(IpVersion::V4, IpTool::new(cmds), own());
        let mut d = RoutesDesired::default();
        d.set(
            "m",
            "cali1".into(),
            ["10.65.0.2/32".parse().unwrap()].into(),
        );
        t.apply(&RoutesDesired::default()).unwrap();
        fake.fail_next(1, Some("ip"));
        // The link listing fails: nothing is written, the error surfaces.
        assert!(t.apply(&d).is_err());
        assert!(t.is_dirty());
        let s = t.apply(&d).unwrap();
        assert_eq!((s.listings, s.replaced), (1, 1));
    }
}
