//! [`FakeNetlink`]: an in-memory routing kernel for unit tests. Shared (`Arc`) between the
//! test and every handle it opens; records each write.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use parking_lot::Mutex;

use super::{FdbEntry, Link, Neighbour, Netlink, NetlinkError, NetlinkProvider, Route, VxlanSpec};
use crate::dataplane::IpVersion;

#[derive(Debug, Default)]
struct State {
    routes: BTreeMap<(u32, IpNet), Route>,
    links: BTreeMap<u32, Link>,
    addrs: BTreeMap<u32, Vec<IpNet>>,
    neighs: BTreeMap<(u32, IpAddr), Neighbour>,
    fdb: BTreeMap<(u32, [u8; 6]), FdbEntry>,
    writes: Vec<String>,
    fail_next: usize,
    next_index: u32,
}

/// The fake kernel. See the module docs.
#[derive(Debug, Default)]
pub struct FakeNetlink {
    state: Mutex<State>,
}

impl FakeNetlink {
    /// Every route.
    pub fn routes(&self) -> Vec<Route> {
        self.state.lock().routes.values().cloned().collect()
    }

    /// Adds (or replaces) a route as something else would.
    pub fn put_route(&self, r: Route) {
        self.state.lock().routes.insert((r.table, r.dst), r);
    }

    /// Adds a link (e.g. a workload interface), up; returns its index.
    pub fn add_link(&self, name: &str) -> u32 {
        let mut s = self.state.lock();
        s.next_index = s.next_index.max(10) + 1;
        let index = s.next_index;
        s.links.insert(
            index,
            Link {
                index,
                name: name.into(),
                admin_up: true,
                oper_up: true,
                mtu: 1500,
                mac: None,
                vxlan: None,
            },
        );
        index
    }

    /// Puts an address on a link as something else would.
    pub fn put_addr(&self, index: u32, addr: IpNet) {
        self.state.lock().addrs.entry(index).or_default().push(addr);
    }

    /// Every link.
    pub fn links(&self) -> Vec<Link> {
        self.state.lock().links.values().cloned().collect()
    }

    /// The neighbour entries.
    pub fn neighbours(&self) -> Vec<Neighbour> {
        self.state.lock().neighs.values().cloned().collect()
    }

    /// The FDB entries.
    pub fn fdb(&self) -> Vec<FdbEntry> {
        self.state.lock().fdb.values().cloned().collect()
    }

    /// The writes so far (`route-replace 10.0.0.0/24`, ...), then forgets them.
    pub fn take_writes(&self) -> Vec<String> {
        std::mem::take(&mut self.state.lock().writes)
    }

    /// The next `n` operations fail with `EIO`.
    pub fn fail_next(&self, n: usize) {
        self.state.lock().fail_next = n;
    }

    fn check(s: &mut State, op: &'static str) -> Result<(), NetlinkError> {
        if s.fail_next > 0 {
            s.fail_next -= 1;
            return Err(NetlinkError::Refused {
                op,
                what: "injected by the fake".into(),
                errno: 5,
            });
        }
        Ok(())
    }
}

/// A handle on a shared [`FakeNetlink`].
#[derive(Debug)]
pub struct FakeHandle(std::sync::Arc<FakeNetlink>);

impl NetlinkProvider for std::sync::Arc<FakeNetlink> {
    fn open(&self) -> Result<Box<dyn Netlink>, NetlinkError> {
        Ok(Box::new(FakeHandle(self.clone())))
    }
}

fn ipv_of(n: &IpNet) -> IpVersion {
    match n {
        IpNet::V4(_) => IpVersion::V4,
        IpNet::V6(_) => IpVersion::V6,
    }
}

fn each<T>(
    s: &mut State,
    op: &'static str,
    items: &[T],
    mut f: impl FnMut(&mut State, &T) -> Result<String, NetlinkError>,
) -> Vec<Result<(), NetlinkError>> {
    items
        .iter()
        .map(|i| {
            FakeNetlink::check(s, op)?;
            let w = f(s, i)?;
            s.writes.push(format!("{op} {w}"));
            Ok(())
        })
        .collect()
}

fn gone(op: &'static str, what: String) -> NetlinkError {
    NetlinkError::Refused { op, what, errno: 3 }
}

impl Netlink for FakeHandle {
    fn list_routes(&mut self, ipv: IpVersion) -> Result<Vec<Route>, NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "route-list")?;
        Ok(s.routes
            .values()
            .filter(|r| ipv_of(&r.dst) == ipv)
            .cloned()
            .collect())
    }
    fn replace_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "route-replace", routes, |s, r| {
            s.routes.insert((r.table, r.dst), r.clone());
            Ok(r.dst.to_string())
        })
    }
    fn delete_routes(&mut self, routes: &[Route]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "route-del", routes, |s, r| {
            s.routes
                .remove(&(r.table, r.dst))
                .map(|_| r.dst.to_string())
                .ok_or_else(|| gone("route-del", r.dst.to_string()))
        })
    }
    fn list_links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "link-list")?;
        Ok(s.links.values().cloned().collect())
    }
    fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        Ok(self.list_links()?.into_iter().find(|l| l.name == name))
    }
    fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, NetlinkError> {
        Ok(self.list_links()?.into_iter().find(|l| l.index == index))
    }
    fn add_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "link-add")?;
        s.next_index = s.next_index.max(10) + 1;
        let index = s.next_index;
        s.links.insert(
            index,
            Link {
                index,
                name: spec.name.clone(),
                admin_up: false,
                oper_up: false,
                mtu: spec.mtu,
                mac: Some(spec.mac),
                vxlan: Some(spec.params.clone()),
            },
        );
        s.writes.push(format!("link-add {}", spec.name));
        Ok(())
    }
    fn set_link(
        &mut self,
        index: u32,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
        up: Option<bool>,
    ) -> Result<(), NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "link-set")?;
        let l = s
            .links
            .get_mut(&index)
            .ok_or_else(|| gone("link-set", index.to_string()))?;
        if let Some(m) = mtu {
            l.mtu = m;
        }
        if mac.is_some() {
            l.mac = mac;
        }
        if let Some(u) = up {
            l.admin_up = u;
            l.oper_up = u;
        }
        let name = l.name.clone();
        s.writes.push(format!("link-set {name}"));
        Ok(())
    }
    fn delete_link(&mut self, index: u32) -> Result<(), NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "link-del")?;
        let l = s
            .links
            .remove(&index)
            .ok_or_else(|| gone("link-del", index.to_string()))?;
        s.routes.retain(|_, r| r.ifindex != Some(index));
        s.neighs.retain(|(i, _), _| *i != index);
        s.fdb.retain(|(i, _), _| *i != index);
        s.addrs.remove(&index);
        s.writes.push(format!("link-del {}", l.name));
        Ok(())
    }
    fn list_addrs(&mut self, ipv: IpVersion) -> Result<Vec<(u32, IpNet)>, NetlinkError> {
        let s = self.0.state.lock();
        Ok(s.addrs
            .iter()
            .flat_map(|(i, v)| v.iter().filter(|a| ipv_of(a) == ipv).map(|a| (*i, *a)))
            .collect())
    }
    fn add_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "addr-add")?;
        let v = s.addrs.entry(index).or_default();
        if !v.contains(&addr) {
            v.push(addr);
        }
        s.writes.push(format!("addr-add {addr}"));
        Ok(())
    }
    fn del_addr(&mut self, index: u32, addr: IpNet) -> Result<(), NetlinkError> {
        let mut s = self.0.state.lock();
        FakeNetlink::check(&mut s, "addr-del")?;
        if let Some(v) = s.addrs.get_mut(&index) {
            v.retain(|a| *a != addr);
        }
        s.writes.push(format!("addr-del {addr}"));
        Ok(())
    }
    fn list_neighbours(
        &mut self,
        ipv: IpVersion,
        index: u32,
    ) -> Result<Vec<Neighbour>, NetlinkError> {
        let s = self.0.state.lock();
        Ok(s.neighs
            .values()
            .filter(|n| n.ifindex == index && ipv_of(&IpNet::from(n.ip)) == ipv)
            .cloned()
            .collect())
    }
    fn replace_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "neigh-replace", ns, |s, n| {
            s.neighs.insert((n.ifindex, n.ip), n.clone());
            Ok(n.ip.to_string())
        })
    }
    fn delete_neighbours(&mut self, ns: &[Neighbour]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "neigh-del", ns, |s, n| {
            s.neighs
                .remove(&(n.ifindex, n.ip))
                .map(|_| n.ip.to_string())
                .ok_or_else(|| gone("neigh-del", n.ip.to_string()))
        })
    }
    fn list_fdb(&mut self, index: u32) -> Result<Vec<FdbEntry>, NetlinkError> {
        let s = self.0.state.lock();
        Ok(s.fdb
            .values()
            .filter(|e| e.ifindex == index)
            .cloned()
            .collect())
    }
    fn replace_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "fdb-replace", es, |s, e| {
            s.fdb.insert((e.ifindex, e.mac), e.clone());
            Ok(super::format_mac(&e.mac))
        })
    }
    fn delete_fdb(&mut self, es: &[FdbEntry]) -> Vec<Result<(), NetlinkError>> {
        let mut s = self.0.state.lock();
        each(&mut s, "fdb-del", es, |s, e| {
            s.fdb
                .remove(&(e.ifindex, e.mac))
                .map(|_| super::format_mac(&e.mac))
                .ok_or_else(|| gone("fdb-del", super::format_mac(&e.mac)))
        })
    }
}
