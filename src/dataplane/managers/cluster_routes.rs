//! `manager/cluster-routes-v4` / `-v6`: routing between nodes (upstream's `vxlanManager` and
//! `noEncapManager` in one manager per family).
//!
//! Consumes IP pools, routes (`RouteUpdate`/`RouteRemove`, the calc graph's route resolver)
//! and VTEPs (`VXLANTunnelEndpointUpdate`/`Remove`), and writes
//! - the VXLAN device and remote VTEPs (`driver/vxlan-vN`): the device exists while a pool of
//!   this family has VXLAN on (or `VXLANEnabled` forces it) and this node's own VTEP is known;
//! - routes, one [`RouteClass`] per producer:
//!   - [`RouteClass::VxlanTunnel`]: every remote block of a VXLAN pool via its node's VTEP,
//!     `onlink` over the VXLAN device;
//!   - [`RouteClass::VxlanSameSubnet`]: `CrossSubnet` blocks of nodes in this node's subnet
//!     (the calc graph's `same_subnet`) directly via the node's address;
//!   - [`RouteClass::NoEncap`]: blocks of unencapsulated pools via the node's address, when
//!     `ProgramClusterRoutes` is `Enabled` or `EnabledNoEncapOnly`;
//!   - [`RouteClass::LocalBlock`]: a blackhole for each of this node's own blocks, so an
//!     unallocated address is never sent back out.
//!
//! All routes except the local ones carry protocol 80 (upstream's), which is how they are
//! recognised after a restart. IPIP pools are reported as unsupported when the kernel has no
//! IPIP module (logged once per pool); their blocks get no routes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use felix_actors::{ApplyCtx, ApplyError, DesiredInput, Manager};
use felix_proto::{IpPoolType, RouteType, RouteUpdate, VxlanTunnelEndpointUpdate};
use ipnet::IpNet;

use crate::dataplane::desired::{
    RouteClass, RouteKey, RouteTarget, RoutesDesired, Vtep, VxlanDesired, VxlanDevice,
};
use crate::dataplane::netlink::{parse_mac, RouteKind};
use crate::dataplane::vxlan::device_name;
use crate::dataplane::IpVersion;

use super::Payload;

/// The protocol of every cluster route (upstream's for VXLAN, IPIP and no-encap routes).
pub const CLUSTER_ROUTE_PROTO: u8 = 80;

/// The settings of the manager (from the Felix configuration).
#[derive(Debug, Clone)]
pub struct ClusterRouteSettings {
    /// This node's name.
    pub hostname: String,
    /// `VXLANEnabled`: `Some` forces the device on or off; `None` follows the pools.
    pub vxlan_enabled: Option<bool>,
    /// `VXLANVNI`.
    pub vni: u32,
    /// `VXLANPort`.
    pub port: u16,
    /// `VXLANMTU` / `VXLANMTUV6` (`None`: the parent's MTU minus the overhead).
    pub mtu: Option<u32>,
    /// `ProgramClusterRoutes` covers unencapsulated pools.
    pub no_encap_routes: bool,
    /// The kernel has the IPIP module.
    pub ipip_supported: bool,
}

/// Which IPIP pools were already reported as unsupported (one error log each).
type Reported = BTreeSet<String>;

/// See the module docs.
pub struct ClusterRoutesManager {
    name: String,
    ipv: IpVersion,
    settings: ClusterRouteSettings,
    routes_out: DesiredInput<RoutesDesired>,
    vxlan_out: DesiredInput<VxlanDesired>,
    pools: BTreeMap<String, (IpNet, String, String)>,
    routes: BTreeMap<String, RouteUpdate>,
    vteps: BTreeMap<String, VxlanTunnelEndpointUpdate>,
    reported: Reported,
    dirty: bool,
}

impl ClusterRoutesManager {
    /// A manager writing as `name` into the family's route and VXLAN cells.
    pub fn new(
        name: &str,
        ipv: IpVersion,
        settings: ClusterRouteSettings,
        routes_out: DesiredInput<RoutesDesired>,
        vxlan_out: DesiredInput<VxlanDesired>,
    ) -> Self {
        ClusterRoutesManager {
            name: name.to_string(),
            ipv,
            settings,
            routes_out,
            vxlan_out,
            pools: BTreeMap::new(),
            routes: BTreeMap::new(),
            vteps: BTreeMap::new(),
            reported: Reported::new(),
            dirty: true,
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::IpamPoolUpdate(_)
                | Payload::IpamPoolRemove(_)
                | Payload::RouteUpdate(_)
                | Payload::RouteRemove(_)
                | Payload::VtepUpdate(_)
                | Payload::VtepRemove(_)
        )
    }

    fn family_ok(&self, net: &IpNet) -> bool {
        matches!(
            (net, self.ipv),
            (IpNet::V4(_), IpVersion::V4) | (IpNet::V6(_), IpVersion::V6)
        )
    }

    fn vxlan_needed(&self) -> bool {
        self.settings
            .vxlan_enabled
            .unwrap_or_else(|| self.pools.values().any(|(_, _, vxlan)| is_on(vxlan)))
    }

    /// This node's or another node's VTEP fields for this family: (tunnel address, MAC,
    /// underlay address).
    fn vtep_of(&self, v: &VxlanTunnelEndpointUpdate) -> Option<(IpAddr, [u8; 6], IpAddr)> {
        let (tunnel, mac, underlay) = match self.ipv {
            IpVersion::V4 => (&v.ipv4_addr, &v.mac, &v.parent_device_ip),
            IpVersion::V6 => (&v.ipv6_addr, &v.mac_v6, &v.parent_device_ipv6),
        };
        let tunnel: IpAddr = tunnel.parse().ok()?;
        let underlay: IpAddr = underlay.split('/').next()?.parse().ok()?;
        let mac = parse_mac(mac)?;
        Some((tunnel, mac, underlay))
    }

    fn desired_vxlan(&self) -> VxlanDesired {
        let own = self
            .vteps
            .get(&self.settings.hostname)
            .and_then(|v| self.vtep_of(v));
        let device = match own {
            Some((tunnel, mac, local)) if self.vxlan_needed() => Some(VxlanDevice {
                name: device_name(self.ipv).into(),
                vni: self.settings.vni,
                port: self.settings.port,
                local,
                mtu: self.settings.mtu,
                mac,
                tunnel_addr: Some(tunnel),
            }),
            _ => None,
        };
        let vteps = if device.is_some() {
            self.vteps
                .iter()
                .filter(|(n, _)| **n != self.settings.hostname)
                .filter_map(|(n, v)| {
                    let (tunnel_ip, mac, underlay) = self.vtep_of(v)?;
                    Some((
                        n.clone(),
                        Vtep {
                            tunnel_ip,
                            mac,
                            underlay,
                        },
                    ))
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let unsupported = if self.settings.ipip_supported {
            Vec::new()
        } else {
            self.pools
                .iter()
                .filter(|(_, (_, ipip, _))| is_on(ipip))
                .map(|(id, (net, _, _))| {
                    format!("IP pool {id} ({net}): IPIP encapsulation, but this node's kernel has no IPIP module")
                })
                .collect()
        };
        VxlanDesired {
            device,
            vteps,
            unsupported,
        }
    }

    fn cluster_route(dst: IpNet, gateway: IpAddr, onlink: bool) -> RouteTarget {
        RouteTarget {
            gateway: Some(gateway),
            onlink,
            protocol: Some(CLUSTER_ROUTE_PROTO),
            ..RouteTarget::device(dst)
        }
    }

    fn report_ipip(&mut self, dst: &str) {
        if self.settings.ipip_supported {
            return;
        }
        let pool = self
            .pools
            .iter()
            .find(|(_, (net, ipip, _))| {
                is_on(ipip) && dst.parse::<IpNet>().is_ok_and(|d| net.contains(&d))
            })
            .map(|(id, _)| id.clone());
        if let Some(id) = pool {
            if self.reported.insert(id.clone()) {
                tracing::error!(pool = %id, "IPIP pool unsupported on this node: the kernel has no IPIP module; its blocks get no routes here");
            }
        }
    }

    fn desired_routes(&mut self, vxlan_up: bool) -> BTreeMap<RouteKey, BTreeSet<RouteTarget>> {
        let mut out: BTreeMap<RouteKey, BTreeSet<RouteTarget>> = BTreeMap::new();
        let mut ipip_dsts = Vec::new();
        for r in self.routes.values() {
            let Ok(dst) = r.dst.parse::<IpNet>() else {
                continue;
            };
            if !self.family_ok(&dst) {
                continue;
            }
            let types = r.types;
            let remote_block = types & (RouteType::RemoteWorkload as i32) != 0
                && r.dst_node_name != self.settings.hostname;
            let local_block = types & (RouteType::LocalWorkload as i32) != 0
                && !r.local_workload
                && dst.prefix_len() < dst.max_prefix_len();
            let pool = IpPoolType::try_from(r.ip_pool_type).unwrap_or(IpPoolType::None);
            if local_block {
                out.entry(RouteKey {
                    class: RouteClass::LocalBlock,
                    iface: None,
                })
                .or_default()
                .insert(RouteTarget {
                    kind: RouteKind::Blackhole,
                    protocol: Some(CLUSTER_ROUTE_PROTO),
                    ..RouteTarget::device(dst)
                });
                continue;
            }
            if !remote_block {
                continue;
            }
            let node_ip: Option<IpAddr> =
                r.dst_node_ip.split('/').next().and_then(|s| s.parse().ok());
            match pool {
                IpPoolType::Vxlan if r.same_subnet => {
                    if let Some(gw) = node_ip {
                        out.entry(RouteKey {
                            class: RouteClass::VxlanSameSubnet,
                            iface: None,
                        })
                        .or_default()
                        .insert(Self::cluster_route(dst, gw, false));
                    }
                }
                IpPoolType::Vxlan => {
                    let vtep = self
                        .vteps
                        .get(&r.dst_node_name)
                        .and_then(|v| self.vtep_of(v));
                    if let (true, Some((tunnel, _, _))) = (vxlan_up, vtep) {
                        out.entry(RouteKey {
                            class: RouteClass::VxlanTunnel,
                            iface: Some(device_name(self.ipv).into()),
                        })
                        .or_default()
                        .insert(Self::cluster_route(dst, tunnel, true));
                    }
                }
                IpPoolType::NoEncap if self.settings.no_encap_routes => {
                    if let Some(gw) = node_ip {
                        out.entry(RouteKey {
                            class: RouteClass::NoEncap,
                            iface: None,
                        })
                        .or_default()
                        .insert(Self::cluster_route(dst, gw, false));
                    }
                }
                IpPoolType::Ipip => ipip_dsts.push(r.dst.clone()),
                _ => {}
            }
        }
        for d in ipip_dsts {
            self.report_ipip(&d);
        }
        out
    }
}

fn is_on(mode: &str) -> bool {
    !mode.is_empty() && !mode.eq_ignore_ascii_case("never")
}

impl Manager<Payload> for ClusterRoutesManager {
    fn on_update(&mut self, msg: &Payload) {
        self.dirty = true;
        match msg {
            Payload::IpamPoolUpdate(u) => {
                let pool = u.pool.clone().unwrap_or_default();
                match pool.cidr.parse::<IpNet>() {
                    Ok(net) if self.family_ok(&net) => {
                        self.pools
                            .insert(u.id.clone(), (net.trunc(), pool.ipip_mode, pool.vxlan_mode));
                    }
                    _ => {
                        self.pools.remove(&u.id);
                    }
                }
            }
            Payload::IpamPoolRemove(r) => {
                self.pools.remove(&r.id);
            }
            Payload::RouteUpdate(u) => {
                self.routes.insert(u.dst.clone(), u.clone());
            }
            Payload::RouteRemove(r) => {
                self.routes.remove(&r.dst);
            }
            Payload::VtepUpdate(v) => {
                self.vteps.insert(v.node.clone(), v.clone());
            }
            Payload::VtepRemove(v) => {
                self.vteps.remove(&v.node);
            }
            _ => self.dirty = false,
        }
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if !self.dirty && !ctx.full_rewrite() {
            return Ok(());
        }
        self.dirty = false;
        let vxlan = self.desired_vxlan();
        let routes = self.desired_routes(vxlan.device.is_some());
        ctx.write(&self.vxlan_out, |d| {
            if *d != vxlan {
                *d = vxlan;
            }
        });
        let owner = self.name.as_str();
        ctx.write(&self.routes_out, |d| d.replace_owned(owner, routes));
        Ok(())
    }
}

/// True if the kernel can do IPIP (the module is loaded or can be loaded).
pub fn kernel_has_ipip() -> bool {
    if std::path::Path::new("/sys/module/ipip").exists() {
        return true;
    }
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let dir = format!("/lib/modules/{}/kernel/net/ipv4", release.trim());
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("ipip.ko"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_proto::{IpamPool, IpamPoolUpdate, RouteUpdate};

    fn settings() -> ClusterRouteSettings {
        ClusterRouteSettings {
            hostname: "node1".into(),
            vxlan_enabled: None,
            vni: 4096,
            port: 4789,
            mtu: None,
            no_encap_routes: false,
            ipip_supported: false,
        }
    }

    fn manager(s: ClusterRouteSettings) -> ClusterRoutesManager {
        ClusterRoutesManager::new(
            "manager/cluster-routes-v4",
            IpVersion::V4,
            s,
            DesiredInput::new(RoutesDesired::default()),
            DesiredInput::new(VxlanDesired::default()),
        )
    }

    fn pool(m: &mut ClusterRoutesManager, cidr: &str, vxlan: &str, ipip: &str) {
        m.on_update(&Payload::IpamPoolUpdate(IpamPoolUpdate {
            id: cidr.into(),
            pool: Some(IpamPool {
                cidr: cidr.into(),
                vxlan_mode: vxlan.into(),
                ipip_mode: ipip.into(),
                ..Default::default()
            }),
        }));
    }

    fn vtep(m: &mut ClusterRoutesManager, node: &str, i: u8) {
        m.on_update(&Payload::VtepUpdate(VxlanTunnelEndpointUpdate {
            node: node.into(),
            mac: format!("66:00:00:00:00:0{i}"),
            ipv4_addr: format!("10.65.{i}.0"),
            parent_device_ip: format!("10.0.1.{i}"),
            ..Default::default()
        }));
    }

    fn route(
        m: &mut ClusterRoutesManager,
        dst: &str,
        node: &str,
        types: RouteType,
        pool: IpPoolType,
        same_subnet: bool,
    ) {
        m.on_update(&Payload::RouteUpdate(RouteUpdate {
            types: types as i32,
            ip_pool_type: pool as i32,
            dst: dst.into(),
            dst_node_name: node.into(),
            dst_node_ip: format!("10.0.1.{}", &node[4..]),
            same_subnet,
            ..Default::default()
        }));
    }

    fn classes(m: &mut ClusterRoutesManager) -> BTreeMap<RouteClass, Vec<String>> {
        let vx = m.desired_vxlan().device.is_some();
        m.desired_routes(vx)
            .into_iter()
            .map(|(k, v)| {
                (
                    k.class,
                    v.iter()
                        .map(|t| format!("{} via {:?}", t.dst, t.gateway))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn vxlan_pools_route_remote_blocks_via_vteps_and_blackhole_local_blocks() {
        let mut m = manager(settings());
        pool(&mut m, "10.65.0.0/16", "Always", "Never");
        vtep(&mut m, "node1", 1);
        vtep(&mut m, "node2", 2);
        route(
            &mut m,
            "10.65.2.0/26",
            "node2",
            RouteType::RemoteWorkload,
            IpPoolType::Vxlan,
            false,
        );
        route(
            &mut m,
            "10.65.1.0/26",
            "node1",
            RouteType::LocalWorkload,
            IpPoolType::Vxlan,
            false,
        );
        let c = classes(&mut m);
        assert_eq!(
            c[&RouteClass::VxlanTunnel],
            vec!["10.65.2.0/26 via Some(10.65.2.0)"]
        );
        assert_eq!(c[&RouteClass::LocalBlock], vec!["10.65.1.0/26 via None"]);
        let v = m.desired_vxlan();
        let dev = v.device.unwrap();
        assert_eq!((dev.vni, dev.port), (4096, 4789));
        assert_eq!(dev.local, "10.0.1.1".parse::<IpAddr>().unwrap());
        assert_eq!(v.vteps.keys().collect::<Vec<_>>(), vec!["node2"]);
    }

    #[test]
    fn cross_subnet_same_subnet_blocks_go_direct_and_the_device_waits_for_its_own_vtep() {
        let mut m = manager(settings());
        pool(&mut m, "10.65.0.0/16", "CrossSubnet", "Never");
        vtep(&mut m, "node2", 2);
        route(
            &mut m,
            "10.65.2.0/26",
            "node2",
            RouteType::RemoteWorkload,
            IpPoolType::Vxlan,
            true,
        );
        route(
            &mut m,
            "10.65.3.0/26",
            "node3",
            RouteType::RemoteWorkload,
            IpPoolType::Vxlan,
            false,
        );
        let c = classes(&mut m);
        assert_eq!(
            c[&RouteClass::VxlanSameSubnet],
            vec!["10.65.2.0/26 via Some(10.0.1.2)"]
        );
        assert!(
            !c.contains_key(&RouteClass::VxlanTunnel),
            "no own VTEP: no device, no tunnel routes"
        );
        assert!(m.desired_vxlan().device.is_none());
    }

    #[test]
    fn no_encap_routes_follow_program_cluster_routes_and_ipip_is_reported_not_routed() {
        let mut m = manager(settings());
        pool(&mut m, "10.66.0.0/16", "Never", "Never");
        pool(&mut m, "10.67.0.0/16", "Never", "Always");
        route(
            &mut m,
            "10.66.2.0/26",
            "node2",
            RouteType::RemoteWorkload,
            IpPoolType::NoEncap,
            false,
        );
        route(
            &mut m,
            "10.67.2.0/26",
            "node2",
            RouteType::RemoteWorkload,
            IpPoolType::Ipip,
            false,
        );
        assert!(classes(&mut m).is_empty());
        assert!(m.reported.contains("10.67.0.0/16"));
        let unsupported = m.desired_vxlan().unsupported;
        assert_eq!(unsupported.len(), 1, "{unsupported:?}");
        assert!(unsupported[0].contains("10.67.0.0/16"), "{unsupported:?}");
        let mut m2 = manager(ClusterRouteSettings {
            no_encap_routes: true,
            ..settings()
        });
        pool(&mut m2, "10.66.0.0/16", "Never", "Never");
        route(
            &mut m2,
            "10.66.2.0/26",
            "node2",
            RouteType::RemoteWorkload,
            IpPoolType::NoEncap,
            false,
        );
        assert_eq!(
            classes(&mut m2)[&RouteClass::NoEncap],
            vec!["10.66.2.0/26 via Some(10.0.1.2)"]
        );
        assert!(
            m2.desired_vxlan().device.is_none(),
            "no VXLAN pool: no device"
        );
    }
}
