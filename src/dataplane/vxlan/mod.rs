//! `driver/vxlan-vN` ([`VxlanDriver`], the `VxlanFdb` phase, before routes): the VXLAN device
//! felix owns for one IP version (`vxlan.calico` / `vxlan-v6.calico`), its tunnel address, and
//! a permanent ARP/NDP entry and a permanent FDB entry for every remote VTEP on it, over
//! rtnetlink (`crate::dataplane::netlink`).
//!
//! # Identification
//! The device is recognised by its name (felix owns it outright). Every neighbour and FDB
//! entry on it that is not desired is felix's to remove (mark-and-sweep), and so is every
//! address on it other than the tunnel address (IPv6 link-local addresses excepted).
//!
//! # Reconciliation
//! The first apply (and every apply after a resync or a failure) reads the device, its
//! addresses, neighbours and FDB entries back; later applies diff the desired state against
//! the record of the previous one, so adding or removing one node costs one neighbour and one
//! FDB write. Nothing already right is rewritten: a restart with no memory changes nothing
//! (no delete-then-add). A device whose VNI, port, local address, parent or learning setting
//! differ cannot be changed in place and is recreated; its MTU and MAC are changed in place.
//! The device is deleted when no pool needs it (`device: None`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use felix_actors::{Driver, DriverError};
use ipnet::IpNet;

use crate::dataplane::desired::{VxlanDesired, VxlanDevice};
use crate::dataplane::netlink::{
    is_gone, FdbEntry, Link, Neighbour, NetlinkError, Seamed, VxlanParams, VxlanSpec,
};
use crate::dataplane::IpVersion;

/// The IPv4 device name.
pub const VXLAN_DEVICE_V4: &str = "vxlan.calico";
/// The IPv6 device name.
pub const VXLAN_DEVICE_V6: &str = "vxlan-v6.calico";

/// The device name of an IP version.
pub fn device_name(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => VXLAN_DEVICE_V4,
        IpVersion::V6 => VXLAN_DEVICE_V6,
    }
}

/// VXLAN encapsulation overhead: outer IP + UDP + VXLAN + inner Ethernet headers.
pub fn overhead(ipv: IpVersion) -> u32 {
    match ipv {
        IpVersion::V4 => 50,
        IpVersion::V6 => 70,
    }
}

/// What felix last wrote or read back on the device.
#[derive(Debug, Default)]
struct Record {
    index: u32,
    neighbours: BTreeMap<IpAddr, [u8; 6]>,
    fdb: BTreeMap<[u8; 6], IpAddr>,
}

/// What one apply did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VxlanStats {
    /// Device created (or recreated).
    pub created: bool,
    /// Device settings changed in place.
    pub updated: bool,
    /// Device deleted.
    pub deleted: bool,
    /// Neighbour and FDB entries written.
    pub written: usize,
    /// Neighbour and FDB entries removed.
    pub removed: usize,
}

/// The driver. See the module docs.
#[derive(Debug)]
pub struct VxlanDriver {
    ipv: IpVersion,
    nl: Seamed,
    /// `None`: read back at the next apply.
    record: Option<Record>,
    /// The device settings last applied (to skip the device checks when unchanged).
    applied: Option<Option<VxlanDevice>>,
}

impl VxlanDriver {
    /// A driver for `ipv` programming through `nl`.
    pub fn new(ipv: IpVersion, nl: Seamed) -> Self {
        VxlanDriver {
            ipv,
            nl,
            record: None,
            applied: None,
        }
    }

    fn name(&self) -> &'static str {
        device_name(self.ipv)
    }

    /// Creates, updates or deletes the device; returns its index (none when deleted/absent).
    fn ensure_device(
        &mut self,
        want: Option<&VxlanDevice>,
        stats: &mut VxlanStats,
    ) -> Result<Option<u32>, NetlinkError> {
        let existing = self.nl.link_by_name(self.name())?;
        let Some(want) = want else {
            if let Some(l) = existing {
                match self.nl.delete_link(l.index) {
                    Ok(()) => stats.deleted = true,
                    Err(e) if is_gone(&e) => {}
                    Err(e) => return Err(e),
                }
                tracing::info!(
                    device = self.name(),
                    "VXLAN device removed: no pool needs it"
                );
            }
            return Ok(None);
        };
        let Some(parent) = self.parent_of(want)? else {
            tracing::warn!(
                device = self.name(),
                local = %want.local,
                "no interface carries this node's address; VXLAN device not programmed yet"
            );
            return Ok(existing.map(|l| l.index));
        };
        let params = VxlanParams {
            vni: want.vni,
            port: want.port,
            local: Some(want.local),
            parent: Some(parent.index),
            learning: false,
        };
        let mtu = want
            .mtu
            .unwrap_or_else(|| parent.mtu.saturating_sub(overhead(self.ipv)));
        let mut link = existing;
        if let Some(l) = &link {
            if l.vxlan.as_ref() != Some(&params) {
                tracing::info!(device = self.name(), have = ?l.vxlan, want = ?params,
                    "VXLAN device parameters cannot change in place: recreating it");
                self.nl.delete_link(l.index)?;
                link = None;
            }
        }
        let l = match link {
            Some(l) => l,
            None => {
                self.nl.add_vxlan(&VxlanSpec {
                    name: self.name().into(),
                    params,
                    mtu,
                    mac: want.mac,
                })?;
                stats.created = true;
                self.nl
                    .link_by_name(self.name())?
                    .ok_or_else(|| NetlinkError::Refused {
                        op: "link-add",
                        what: format!("{} vanished after its creation", self.name()),
                        errno: 2,
                    })?
            }
        };
        let mtu_diff = (l.mtu != mtu).then_some(mtu);
        let mac_diff = (l.mac != Some(want.mac)).then_some(want.mac);
        let up_diff = (!l.admin_up).then_some(true);
        if mtu_diff.is_some() || mac_diff.is_some() || up_diff.is_some() {
            self.nl.set_link(l.index, mtu_diff, mac_diff, up_diff)?;
            stats.updated |= !stats.created;
        }
        self.ensure_address(l.index, want.tunnel_addr)?;
        Ok(Some(l.index))
    }

    /// The interface holding the node's address.
    fn parent_of(&mut self, want: &VxlanDevice) -> Result<Option<Link>, NetlinkError> {
        let addrs = self.nl.list_addrs(self.ipv)?;
        match addrs.iter().find(|(_, a)| a.addr() == want.local) {
            Some((index, _)) => self.nl.link_by_index(*index),
            None => Ok(None),
        }
    }

    fn ensure_address(&mut self, index: u32, tunnel: Option<IpAddr>) -> Result<(), NetlinkError> {
        let want = tunnel.map(IpNet::from);
        let have: Vec<IpNet> = self
            .nl
            .list_addrs(self.ipv)?
            .into_iter()
            .filter(|(i, a)| *i == index && !is_link_local(a))
            .map(|(_, a)| a)
            .collect();
        for a in &have {
            if Some(*a) != want {
                self.nl.del_addr(index, *a)?;
            }
        }
        if let Some(w) = want {
            if !have.contains(&w) {
                self.nl.add_addr(index, w)?;
            }
        }
        Ok(())
    }

    fn read_back(&mut self, index: u32) -> Result<Record, NetlinkError> {
        let neighbours = self
            .nl
            .list_neighbours(self.ipv, index)?
            .into_iter()
            .map(|n| (n.ip, if n.permanent { n.mac } else { [0; 6] }))
            .collect();
        let fdb = self
            .nl
            .list_fdb(index)?
            .into_iter()
            .filter(|e| e.permanent)
            .map(|e| (e.mac, e.dst))
            .collect();
        Ok(Record {
            index,
            neighbours,
            fdb,
        })
    }

    fn sync_entries(
        &mut self,
        rec: &mut Record,
        desired: &VxlanDesired,
        stats: &mut VxlanStats,
    ) -> Result<(), NetlinkError> {
        let family_ok = |ip: &IpAddr| match self.ipv {
            IpVersion::V4 => ip.is_ipv4(),
            IpVersion::V6 => ip.is_ipv6(),
        };
        let want_n: BTreeMap<IpAddr, [u8; 6]> = desired
            .vteps
            .values()
            .filter(|v| family_ok(&v.tunnel_ip))
            .map(|v| (v.tunnel_ip, v.mac))
            .collect();
        let want_f: BTreeMap<[u8; 6], IpAddr> = desired
            .vteps
            .values()
            .filter(|v| family_ok(&v.tunnel_ip))
            .map(|v| (v.mac, v.underlay))
            .collect();
        let index = rec.index;
        let mut first_err = None;
        // Neighbours first (as upstream), then FDB; writes before removals.
        let put: Vec<Neighbour> = want_n
            .iter()
            .filter(|(ip, mac)| rec.neighbours.get(ip) != Some(mac))
            .map(|(ip, mac)| Neighbour {
                ifindex: index,
                ip: *ip,
                mac: *mac,
                permanent: true,
            })
            .collect();
        for (n, r) in put.iter().zip(self.nl.replace_neighbours(&put)) {
            match r {
                Ok(()) => {
                    stats.written += 1;
                    rec.neighbours.insert(n.ip, n.mac);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let put: Vec<FdbEntry> = want_f
            .iter()
            .filter(|(mac, dst)| rec.fdb.get(*mac) != Some(dst))
            .map(|(mac, dst)| FdbEntry {
                ifindex: index,
                mac: *mac,
                dst: *dst,
                permanent: true,
            })
            .collect();
        for (e, r) in put.iter().zip(self.nl.replace_fdb(&put)) {
            match r {
                Ok(()) => {
                    stats.written += 1;
                    rec.fdb.insert(e.mac, e.dst);
                }
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        let del: Vec<Neighbour> = rec
            .neighbours
            .iter()
            .filter(|(ip, _)| !want_n.contains_key(ip))
            .map(|(ip, mac)| Neighbour {
                ifindex: index,
                ip: *ip,
                mac: *mac,
                permanent: true,
            })
            .collect();
        for (n, r) in del.iter().zip(self.nl.delete_neighbours(&del)) {
            match r {
                Ok(()) => {
                    stats.removed += 1;
                    rec.neighbours.remove(&n.ip);
                }
                Err(e) if is_gone(&e) => {
                    rec.neighbours.remove(&n.ip);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let del: Vec<FdbEntry> = rec
            .fdb
            .iter()
            .filter(|(mac, dst)| want_f.get(*mac) != Some(dst))
            .map(|(mac, dst)| FdbEntry {
                ifindex: index,
                mac: *mac,
                dst: *dst,
                permanent: true,
            })
            .collect();
        // An entry whose MAC is still wanted was replaced in place above.
        let del: Vec<FdbEntry> = del
            .into_iter()
            .filter(|e| !want_f.contains_key(&e.mac))
            .collect();
        for (e, r) in del.iter().zip(self.nl.delete_fdb(&del)) {
            match r {
                Ok(()) => {
                    stats.removed += 1;
                    rec.fdb.remove(&e.mac);
                }
                Err(err) if is_gone(&err) => {
                    rec.fdb.remove(&e.mac);
                }
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Reconciles the kernel with `desired`.
    pub fn apply_desired(&mut self, desired: &VxlanDesired) -> Result<VxlanStats, NetlinkError> {
        let mut stats = VxlanStats::default();
        let device_same = self.applied.as_ref() == Some(&desired.device) && self.record.is_some();
        let index = if device_same {
            self.record.as_ref().map(|r| r.index)
        } else {
            self.record = None;
            let r = self.ensure_device(desired.device.as_ref(), &mut stats);
            let index = match r {
                Ok(i) => i,
                Err(e) => {
                    self.applied = None;
                    return Err(e);
                }
            };
            self.applied = Some(desired.device.clone());
            index
        };
        let Some(index) = index else {
            return Ok(stats);
        };
        let mut rec = match self.record.take() {
            Some(r) if r.index == index && !stats.created => r,
            // A device just created has no entries yet.
            _ if stats.created => Record {
                index,
                ..Record::default()
            },
            _ => match self.read_back(index) {
                Ok(r) => r,
                Err(e) => {
                    self.applied = None;
                    return Err(e);
                }
            },
        };
        let r = self.sync_entries(&mut rec, desired, &mut stats);
        match r {
            Ok(()) => {
                self.record = Some(rec);
                Ok(stats)
            }
            Err(e) => {
                self.applied = None;
                Err(e)
            }
        }
    }
}

fn is_link_local(a: &IpNet) -> bool {
    match a {
        IpNet::V6(n) => n.addr().segments()[0] & 0xffc0 == 0xfe80,
        IpNet::V4(_) => false,
    }
}

impl Driver for VxlanDriver {
    type Desired = VxlanDesired;

    fn apply(&mut self, desired: &VxlanDesired) -> Result<(), DriverError> {
        self.nl
            .seam()
            .report_unsupported(desired.unsupported.clone());
        let stats = self.apply_desired(desired)?;
        if stats != VxlanStats::default() {
            tracing::debug!(?stats, device = self.name(), "VXLAN state applied");
        }
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.record = None;
        self.applied = None;
    }

    fn is_dirty(&self) -> bool {
        self.applied.is_none()
    }
}

/// The names of the devices felix owns outright (for route ownership).
pub fn owned_devices() -> BTreeSet<&'static str> {
    [VXLAN_DEVICE_V4, VXLAN_DEVICE_V6].into()
}

#[cfg(test)]
mod kernel_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::desired::Vtep;
    use crate::dataplane::netlink::fake::FakeNetlink;
    use std::sync::Arc;

    fn driver(fake: &Arc<FakeNetlink>) -> VxlanDriver {
        VxlanDriver::new(
            IpVersion::V4,
            Seamed::new(
                Arc::new(fake.clone()),
                felix_actors::Seam::default().for_actor("driver/vxlan-v4"),
            ),
        )
    }

    fn desired(nodes: &[(&str, u8)]) -> VxlanDesired {
        VxlanDesired {
            device: Some(VxlanDevice {
                name: VXLAN_DEVICE_V4.into(),
                vni: 4096,
                port: 4789,
                local: "10.0.1.1".parse().unwrap(),
                mtu: None,
                mac: [0x66, 0, 0, 0, 0, 1],
                tunnel_addr: Some("10.65.1.0".parse().unwrap()),
            }),
            vteps: nodes
                .iter()
                .map(|(n, i)| {
                    (
                        n.to_string(),
                        Vtep {
                            tunnel_ip: format!("10.65.{i}.0").parse().unwrap(),
                            mac: [0x66, 0, 0, 0, 0, *i],
                            underlay: format!("10.0.1.{i}").parse().unwrap(),
                        },
                    )
                })
                .collect(),
            unsupported: Vec::new(),
        }
    }

    fn fake_node() -> Arc<FakeNetlink> {
        let fake = Arc::new(FakeNetlink::default());
        let eth = fake.add_link("eth0");
        fake.put_addr(eth, "10.0.1.1/24".parse().unwrap());
        fake
    }

    #[test]
    fn creates_the_device_with_upstream_parameters_and_programs_every_vtep() {
        let fake = fake_node();
        let mut d = driver(&fake);
        let s = d
            .apply_desired(&desired(&[("node2", 2), ("node3", 3)]))
            .unwrap();
        assert!(s.created);
        assert_eq!(s.written, 4);
        let dev = fake
            .links()
            .into_iter()
            .find(|l| l.name == VXLAN_DEVICE_V4)
            .unwrap();
        assert_eq!(dev.mtu, 1450, "parent MTU minus 50");
        let p = dev.vxlan.unwrap();
        assert_eq!((p.vni, p.port, p.learning), (4096, 4789, false));
        assert_eq!(fake.neighbours().len(), 2);
        assert_eq!(fake.fdb().len(), 2);
    }

    #[test]
    fn a_restart_with_no_memory_rewrites_nothing_that_is_right() {
        let fake = fake_node();
        driver(&fake)
            .apply_desired(&desired(&[("node2", 2), ("node3", 3)]))
            .unwrap();
        fake.take_writes();
        let mut fresh = driver(&fake);
        let s = fresh
            .apply_desired(&desired(&[("node2", 2), ("node3", 3)]))
            .unwrap();
        assert_eq!(s, VxlanStats::default());
        assert!(fake.take_writes().is_empty());
    }

    #[test]
    fn a_removed_node_loses_its_entries_and_the_rest_stay() {
        let fake = fake_node();
        let mut d = driver(&fake);
        d.apply_desired(&desired(&[("node2", 2), ("node3", 3)]))
            .unwrap();
        fake.take_writes();
        let s = d.apply_desired(&desired(&[("node2", 2)])).unwrap();
        assert_eq!((s.written, s.removed), (0, 2));
        assert_eq!(
            fake.take_writes(),
            vec!["neigh-del 10.65.3.0", "fdb-del 66:00:00:00:00:03"]
        );
    }

    #[test]
    fn a_changed_vni_recreates_the_device_and_no_pool_removes_it() {
        let fake = fake_node();
        let mut d = driver(&fake);
        d.apply_desired(&desired(&[("node2", 2)])).unwrap();
        let mut want = desired(&[("node2", 2)]);
        if let Some(dev) = want.device.as_mut() {
            dev.vni = 5000;
        }
        let s = d.apply_desired(&want).unwrap();
        assert!(s.created);
        assert_eq!(fake.neighbours().len(), 1, "entries reprogrammed");
        let s = d.apply_desired(&VxlanDesired::default()).unwrap();
        assert!(s.deleted);
        assert!(fake.links().iter().all(|l| l.name != VXLAN_DEVICE_V4));
    }
}
