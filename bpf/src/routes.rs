//! The routes map (`cali_routes2`) and the failsafe map (`cali_fsafes2`), mirrored from
//! `progs/routes.h`: LPM tries pinned under felix's pin root by name, so the objects that
//! declare them (`LIBBPF_PIN_BY_NAME`) reuse these pins.
//!
//! * routes: address prefix -> [`RouteVal`] (`RT_*` flags and, for a local workload, its
//!   host-side ifindex). Main drops what a workload sends from a source the map does not give
//!   to that workload; a host endpoint's program asks whether an address is this host's.
//! * failsafes: (direction, protocol, port, peer prefix) -> 1.

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use libbpf_rs::libbpf_sys;
use libbpf_rs::MapType;

use crate::maps::{MapSpec, PinnedMap};
use crate::ops::{BpfError, BpfOps};

/// Route flag: one of this host's addresses.
pub const RT_LOCAL_HOST: u32 = 0x01;
/// Route flag: another node's address.
pub const RT_REMOTE_HOST: u32 = 0x02;
/// Route flag: a workload of this node (`ifindex` is its host-side device).
pub const RT_LOCAL_WORKLOAD: u32 = 0x04;
/// Route flag: workloads of another node (a block or a single address).
pub const RT_REMOTE_WORKLOAD: u32 = 0x08;
/// Route flag: inside an IP pool.
pub const RT_IN_POOL: u32 = 0x10;
/// Route flag: the pool masquerades traffic leaving it (`natOutgoing`).
pub const RT_NAT_OUT: u32 = 0x20;
/// Route flag: reached through a tunnel (VXLAN).
pub const RT_TUNNEL: u32 = 0x40;
/// Route flag: a prefix the workload of `ifindex` may use as its source without owning it.
pub const RT_SPOOF_OK: u32 = 0x80;

/// Failsafe direction: to the host (port is the destination, the net the source).
pub const FSAFE_IN: u8 = 1;
/// Failsafe direction: from the host (port and net are the destination's).
pub const FSAFE_OUT: u8 = 2;

/// `cali_routes2`.
pub const ROUTES_MAP: MapSpec = MapSpec {
    name: "cali_routes",
    version: 2,
    map_type: MapType::LpmTrie,
    key_size: 20,
    value_size: 8,
    max_entries: 262_144,
    flags: libbpf_sys::BPF_F_NO_PREALLOC,
};

/// `cali_fsafes2`.
pub const FSAFES_MAP: MapSpec = MapSpec {
    name: "cali_fsafes",
    version: 2,
    map_type: MapType::LpmTrie,
    key_size: 24,
    value_size: 4,
    max_entries: 1024,
    flags: libbpf_sys::BPF_F_NO_PREALLOC,
};

/// A prefix as the maps hold it: 16 bytes (IPv4 mapped into `::ffff:0:0/96`) and its length
/// over those bytes.
pub fn mapped(net: &IpNet) -> ([u8; 16], u8) {
    match net.trunc() {
        IpNet::V4(n) => (n.addr().to_ipv6_mapped().octets(), 96 + n.prefix_len()),
        IpNet::V6(n) => (n.addr().octets(), n.prefix_len()),
    }
}

/// What a route says about its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteVal {
    /// `RT_*`.
    pub flags: u32,
    /// Host-side ifindex (local workloads, spoof-allowed prefixes), else 0.
    pub ifindex: u32,
}

impl RouteVal {
    fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.flags.to_ne_bytes());
        b[4..].copy_from_slice(&self.ifindex.to_ne_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(Self {
            flags: u32::from_ne_bytes(b.get(..4)?.try_into().ok()?),
            ifindex: u32::from_ne_bytes(b.get(4..8)?.try_into().ok()?),
        })
    }
}

fn route_key(net: &IpNet) -> [u8; 20] {
    let (addr, len) = mapped(net);
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&u32::from(len).to_ne_bytes());
    k[4..].copy_from_slice(&addr);
    k
}

/// One failsafe entry: traffic `dir` on `proto`/`port` with the peer in `net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Failsafe {
    /// [`FSAFE_IN`] or [`FSAFE_OUT`].
    pub dir: u8,
    /// IP protocol number.
    pub proto: u8,
    /// Destination port.
    pub port: u16,
    /// The peer's prefix (`0.0.0.0/0` or `::/0` for any of that version).
    pub net: IpNet,
}

impl Failsafe {
    fn key(&self) -> [u8; 24] {
        let (addr, len) = mapped(&self.net);
        let mut k = [0u8; 24];
        k[..4].copy_from_slice(&(32 + u32::from(len)).to_ne_bytes());
        k[4] = self.dir;
        k[5] = self.proto;
        k[6..8].copy_from_slice(&self.port.to_be_bytes());
        k[8..].copy_from_slice(&addr);
        k
    }
}

/// Both maps, open.
#[derive(Debug)]
pub struct RouteMaps {
    routes: PinnedMap,
    fsafes: PinnedMap,
}

impl RouteMaps {
    /// Opens (or creates and pins) both maps under `root`.
    pub fn open_or_create(ops: &BpfOps, root: &Path) -> Result<Self, BpfError> {
        Ok(Self {
            routes: PinnedMap::open_or_create(ops, ROUTES_MAP, root)?,
            fsafes: PinnedMap::open_or_create(ops, FSAFES_MAP, root)?,
        })
    }

    /// Sets the route of `net`.
    pub fn set_route(&self, ops: &BpfOps, net: &IpNet, v: RouteVal) -> Result<(), BpfError> {
        self.routes.update(ops, &route_key(net), &v.to_bytes())
    }

    /// Removes the route of `net` (a missing one is not an error).
    pub fn delete_route(&self, ops: &BpfOps, net: &IpNet) -> Result<(), BpfError> {
        self.routes.delete(ops, &route_key(net))
    }

    /// The route that covers `addr` (longest prefix).
    pub fn lookup(&self, ops: &BpfOps, addr: IpAddr) -> Result<Option<RouteVal>, BpfError> {
        let net = IpNet::from(addr);
        Ok(self
            .routes
            .lookup(ops, &route_key(&net))?
            .and_then(|b| RouteVal::from_bytes(&b)))
    }

    /// Every route in the map (start of day: what a previous run left).
    pub fn routes(&self, ops: &BpfOps) -> Result<Vec<(IpNet, RouteVal)>, BpfError> {
        let mut out = Vec::new();
        for k in self.routes.keys(ops)? {
            let Some(net) = net_of(&k) else { continue };
            if let Some(v) = self
                .routes
                .lookup(ops, &k)?
                .and_then(|b| RouteVal::from_bytes(&b))
            {
                out.push((net, v));
            }
        }
        Ok(out)
    }

    /// Adds failsafe `f`.
    pub fn add_failsafe(&self, ops: &BpfOps, f: &Failsafe) -> Result<(), BpfError> {
        self.fsafes.update(ops, &f.key(), &1u32.to_ne_bytes())
    }

    /// Removes every failsafe entry whose key is not one of `keep` (start of day and config
    /// changes: the map then holds exactly `keep`).
    pub fn retain_failsafes(&self, ops: &BpfOps, keep: &[Failsafe]) -> Result<(), BpfError> {
        let want: Vec<[u8; 24]> = keep.iter().map(Failsafe::key).collect();
        for k in self.fsafes.keys(ops)? {
            if !want.iter().any(|w| w[..] == k[..]) {
                self.fsafes.delete(ops, &k)?;
            }
        }
        Ok(())
    }
}

/// The prefix of a routes-map key.
fn net_of(k: &[u8]) -> Option<IpNet> {
    let len = u32::from_ne_bytes(k.get(..4)?.try_into().ok()?);
    let addr: [u8; 16] = k.get(4..20)?.try_into().ok()?;
    let v6 = std::net::Ipv6Addr::from(addr);
    let len = u8::try_from(len).ok()?;
    match v6.to_ipv4_mapped() {
        Some(v4) if len >= 96 => ipnet::Ipv4Net::new(v4, len - 96).ok().map(IpNet::V4),
        _ => ipnet::Ipv6Net::new(v6, len).ok().map(IpNet::V6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_keys_map_ipv4_into_the_ipv6_space_and_round_trip() {
        for s in ["10.65.0.0/26", "10.65.0.7/32", "fd00::/64", "0.0.0.0/0"] {
            let n: IpNet = s.parse().expect("net");
            assert_eq!(net_of(&route_key(&n)), Some(n), "{s}");
        }
        let (a, len) = mapped(&"10.1.2.3/24".parse().expect("net"));
        assert_eq!(len, 120);
        assert_eq!(&a[10..], &[0xff, 0xff, 10, 1, 2, 0], "host bits cleared");
    }

    #[test]
    fn failsafe_keys_cover_direction_protocol_port_then_the_net() {
        let f = Failsafe {
            dir: FSAFE_IN,
            proto: 6,
            port: 22,
            net: "10.0.0.0/8".parse().expect("net"),
        };
        let k = f.key();
        assert_eq!(
            u32::from_ne_bytes(k[..4].try_into().expect("4")),
            32 + 96 + 8
        );
        assert_eq!(&k[4..8], &[FSAFE_IN, 6, 0, 22]);
        assert_eq!(&k[18..21], &[0xff, 0xff, 10]);
    }
}
