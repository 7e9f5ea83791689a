//! The conntrack map `cali_ct` (layouts mirrored from `progs/conntrack.h`), its expiry scan and
//! its migration.
//!
//! # Invariants (the contract of `progs/conntrack.h`, each with a test named after it)
//! * `a_packet_needs_the_approval_of_its_hook_endpoints_leg`: at an endpoint's hook a packet
//!   bypasses policy only if that endpoint approved the flow (its own leg); replies of a flow
//!   the endpoint opened or accepted pass, a flow it never approved goes through its policy.
//! * `a_tcp_syn_always_goes_through_policy`: a SYN without ACK is judged by policy even on a
//!   tracked, approved flow.
//! * `expired_entries_are_removed_by_the_scan_with_upstreams_timeouts`: the scan deletes what
//!   upstream's timeouts expire (TCP SYN-sent 20 s, established 1 h, FINs seen 30 s, RST seen
//!   40 s, UDP 60 s, ICMP 5 s, other 600 s) and the entries a removed endpoint approved.
//! * `a_resized_or_upgraded_conntrack_map_keeps_its_entries`: a change of capacity (or of
//!   layout, through [`crate::migrate`]) copies the entries; it never starts empty.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use libbpf_rs::MapType;

use crate::maps::{MapSpec, PinnedMap};
use crate::migrate::{open_or_migrate, Migration, Upgrade};
use crate::ops::{op, BpfError, BpfOps};

/// Leg flag: the leg's end sent a SYN.
pub const CT_LEG_SYN: u32 = 0x01;
/// ... an ACK.
pub const CT_LEG_ACK: u32 = 0x02;
/// ... a FIN.
pub const CT_LEG_FIN: u32 = 0x04;
/// ... a RST.
pub const CT_LEG_RST: u32 = 0x08;
/// The end's endpoint policy allowed the flow.
pub const CT_LEG_APPROVED: u32 = 0x10;
/// The end sent the first packet seen.
pub const CT_LEG_OPENER: u32 = 0x20;
/// A host endpoint's policy allowed the flow for this end (the end's own workload keeps its
/// approval: a flow from a workload out through a host endpoint needs both).
pub const CT_LEG_HEP_APPROVED: u32 = 0x40;
/// The approving host endpoint's ifindex (low 16 bits) is `flags >> CT_LEG_HEP_SHIFT`.
pub const CT_LEG_HEP_SHIFT: u32 = 16;

/// `cali_ct` with `capacity` entries (`BPFMapSizeConntrack`): an LRU hash, both IP families.
pub fn ct_map(capacity: u32) -> MapSpec {
    MapSpec {
        name: "cali_ct",
        version: 1,
        map_type: MapType::LruHash,
        key_size: CtKey::SIZE as u32,
        value_size: CtValue::SIZE as u32,
        max_entries: capacity.max(1),
        flags: 0,
    }
}

/// Older layouts `cali_ct` can be migrated from, newest first (none yet: this is the first).
pub const CT_UPGRADES: &[Upgrade] = &[];

/// `struct ct_key`: the normalised 5-tuple (end A is the lower (address, port)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CtKey {
    /// IP protocol.
    pub proto: u8,
    /// End A's port (ICMP echo: the identifier).
    pub port_a: u16,
    /// End B's port.
    pub port_b: u16,
    /// End A's address (IPv4 mapped into IPv6).
    pub addr_a: [u8; 16],
    /// End B's address.
    pub addr_b: [u8; 16],
}

/// One end of a flow (`struct ct_leg`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtLeg {
    /// `CT_LEG_*`.
    pub flags: u32,
    /// Host-side ifindex of the hook that approved it (0: none).
    pub ifindex: u32,
}

/// `struct ct_value`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtValue {
    /// `bpf_ktime_get_ns()` at creation.
    pub created: u64,
    /// ... at the last packet.
    pub last_seen: u64,
    /// ... at the first RST (0: none).
    pub rst_seen: u64,
    /// End A's leg.
    pub a: CtLeg,
    /// End B's leg.
    pub b: CtLeg,
}

fn rd_u16(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}
fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

impl CtKey {
    /// Size of `struct ct_key`.
    pub const SIZE: usize = 40;

    /// The key of a flow between `(a, pa)` and `(b, pb)`, normalised as the programs do: end
    /// A is the lower of the two by (address as four native-endian 32-bit words, port).
    pub fn new(proto: u8, a: IpAddr, pa: u16, b: IpAddr, pb: u16) -> Self {
        let (a, b) = (mapped(a), mapped(b));
        let words = |x: &[u8; 16]| -> [u32; 4] {
            [0, 4, 8, 12].map(|i| u32::from_ne_bytes([x[i], x[i + 1], x[i + 2], x[i + 3]]))
        };
        let (addr_a, port_a, addr_b, port_b) = if (words(&a), pa) <= (words(&b), pb) {
            (a, pa, b, pb)
        } else {
            (b, pb, a, pa)
        };
        Self {
            proto,
            port_a,
            port_b,
            addr_a,
            addr_b,
        }
    }

    /// The C layout.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0] = self.proto;
        b[4..6].copy_from_slice(&self.port_a.to_ne_bytes());
        b[6..8].copy_from_slice(&self.port_b.to_ne_bytes());
        b[8..24].copy_from_slice(&self.addr_a);
        b[24..40].copy_from_slice(&self.addr_b);
        b
    }

    /// Parses the C layout; `None` if `b` is too short.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < Self::SIZE {
            return None;
        }
        let mut addr_a = [0u8; 16];
        let mut addr_b = [0u8; 16];
        addr_a.copy_from_slice(&b[8..24]);
        addr_b.copy_from_slice(&b[24..40]);
        Some(Self {
            proto: b[0],
            port_a: rd_u16(b, 4),
            port_b: rd_u16(b, 6),
            addr_a,
            addr_b,
        })
    }

    /// End A's address.
    pub fn addr_a(&self) -> IpAddr {
        unmapped(self.addr_a)
    }

    /// End B's address.
    pub fn addr_b(&self) -> IpAddr {
        unmapped(self.addr_b)
    }
}

fn mapped(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn unmapped(b: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(b);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

impl CtValue {
    /// Size of `struct ct_value`.
    pub const SIZE: usize = 40;

    /// The C layout.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..8].copy_from_slice(&self.created.to_ne_bytes());
        b[8..16].copy_from_slice(&self.last_seen.to_ne_bytes());
        b[16..24].copy_from_slice(&self.rst_seen.to_ne_bytes());
        b[24..28].copy_from_slice(&self.a.flags.to_ne_bytes());
        b[28..32].copy_from_slice(&self.a.ifindex.to_ne_bytes());
        b[32..36].copy_from_slice(&self.b.flags.to_ne_bytes());
        b[36..40].copy_from_slice(&self.b.ifindex.to_ne_bytes());
        b
    }

    /// Parses the C layout; `None` if `b` is too short.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < Self::SIZE {
            return None;
        }
        Some(Self {
            created: rd_u64(b, 0),
            last_seen: rd_u64(b, 8),
            rst_seen: rd_u64(b, 16),
            a: CtLeg {
                flags: rd_u32(b, 24),
                ifindex: rd_u32(b, 28),
            },
            b: CtLeg {
                flags: rd_u32(b, 32),
                ifindex: rd_u32(b, 36),
            },
        })
    }
}

/// Conntrack timeouts (upstream's `BPFConntrackTimeouts` defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A TCP flow whose opener's SYN was not answered.
    pub tcp_syn_sent: Duration,
    /// An established TCP flow, idle.
    pub tcp_established: Duration,
    /// A TCP flow after both ends sent FIN, idle.
    pub tcp_fins_seen: Duration,
    /// A TCP flow after a RST.
    pub tcp_reset_seen: Duration,
    /// UDP, idle.
    pub udp: Duration,
    /// Other protocols, idle.
    pub generic: Duration,
    /// ICMP, idle.
    pub icmp: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            tcp_syn_sent: Duration::from_secs(20),
            tcp_established: Duration::from_secs(3600),
            tcp_fins_seen: Duration::from_secs(30),
            tcp_reset_seen: Duration::from_secs(40),
            udp: Duration::from_secs(60),
            generic: Duration::from_secs(600),
            icmp: Duration::from_secs(5),
        }
    }
}

/// Why the scan removed an entry (the `reason` label of
/// `felix_bpf_conntrack_expired_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Expiry {
    /// TCP: SYN never answered.
    TcpSynSent,
    /// TCP: established, idle too long.
    TcpEstablished,
    /// TCP: both FINs seen.
    TcpFinsSeen,
    /// TCP: RST seen.
    TcpResetSeen,
    /// UDP idle.
    Udp,
    /// ICMP idle.
    Icmp,
    /// Another protocol idle.
    Generic,
    /// An endpoint that approved it is gone.
    EndpointRemoved,
}

impl Expiry {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Expiry::TcpSynSent => "tcp_syn_sent",
            Expiry::TcpEstablished => "tcp_established",
            Expiry::TcpFinsSeen => "tcp_fins_seen",
            Expiry::TcpResetSeen => "tcp_reset_seen",
            Expiry::Udp => "udp",
            Expiry::Icmp => "icmp",
            Expiry::Generic => "generic",
            Expiry::EndpointRemoved => "endpoint_removed",
        }
    }
}

/// Why `v` of protocol `proto` has expired at `now_ns`, if it has.
pub fn expiry(proto: u8, v: &CtValue, now_ns: u64, t: &Timeouts) -> Option<Expiry> {
    let idle = Duration::from_nanos(now_ns.saturating_sub(v.last_seen));
    let age = Duration::from_nanos(now_ns.saturating_sub(v.created));
    match proto {
        6 => {
            let both = |f: u32| v.a.flags & f != 0 && v.b.flags & f != 0;
            if v.rst_seen != 0
                && Duration::from_nanos(now_ns.saturating_sub(v.rst_seen)) > t.tcp_reset_seen
            {
                Some(Expiry::TcpResetSeen)
            } else if both(CT_LEG_FIN) && idle > t.tcp_fins_seen {
                Some(Expiry::TcpFinsSeen)
            } else if !both(CT_LEG_SYN) && age > t.tcp_syn_sent && idle > t.tcp_syn_sent {
                Some(Expiry::TcpSynSent)
            } else if idle > t.tcp_established {
                Some(Expiry::TcpEstablished)
            } else {
                None
            }
        }
        17 => (idle > t.udp).then_some(Expiry::Udp),
        1 | 58 => (idle > t.icmp).then_some(Expiry::Icmp),
        _ => (idle > t.generic).then_some(Expiry::Generic),
    }
}

/// What one scan saw and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Entries visited (`felix_bpf_conntrack_used`).
    pub used: usize,
    /// Removed, by reason.
    pub removed: BTreeMap<Expiry, usize>,
}

impl ScanStats {
    /// Entries removed in all.
    pub fn cleaned(&self) -> usize {
        self.removed.values().sum()
    }
}

/// The pinned conntrack map.
#[derive(Debug)]
pub struct Conntrack {
    map: PinnedMap,
    migration: Migration,
}

impl Conntrack {
    /// Opens (or creates, or migrates into) `cali_ct` of `capacity` entries in `dir`.
    pub fn open(ops: &BpfOps, dir: &Path, capacity: u32) -> Result<Self, BpfError> {
        let (map, migration) = open_or_migrate(ops, dir, ct_map(capacity), CT_UPGRADES)?;
        if let Migration::Copied {
            copied, dropped, ..
        } = &migration
        {
            tracing::info!(copied, dropped, "conntrack map migrated");
        }
        Ok(Self { map, migration })
    }

    /// Opens the `cali_ct` pinned in `dir` as it is (no creation, no migration): for
    /// introspection and tests. `None` if there is none.
    pub fn open_existing(ops: &BpfOps, dir: &Path) -> Result<Option<Self>, BpfError> {
        let path = dir.join(ct_map(1).versioned_name());
        if !path.exists() {
            return Ok(None);
        }
        let handle = ops.lib(op::MAP_OPEN, path.display(), || {
            libbpf_rs::MapHandle::from_pinned_path(&path)
        })?;
        let info = ops.lib(op::MAP_LOOKUP, path.display(), || {
            libbpf_rs::MapCore::info(&handle)
        })?;
        let spec = ct_map(info.info.max_entries);
        Ok(Some(Self {
            map: PinnedMap::from_parts(spec, path, handle),
            migration: Migration::Opened,
        }))
    }

    /// The pinned map (its fd is bound into the main programs).
    pub fn map(&self) -> &PinnedMap {
        &self.map
    }

    /// What opening the map did.
    pub fn migration(&self) -> &Migration {
        &self.migration
    }

    /// Every entry (for tests and introspection).
    pub fn entries(&self, ops: &BpfOps) -> Result<Vec<(CtKey, CtValue)>, BpfError> {
        let mut out = Vec::new();
        for k in self.map.keys(ops)? {
            let (Some(key), Some(v)) = (
                CtKey::from_bytes(&k),
                self.map
                    .lookup(ops, &k)?
                    .and_then(|v| CtValue::from_bytes(&v)),
            ) else {
                continue;
            };
            out.push((key, v));
        }
        out.sort_by_key(|e| e.0);
        Ok(out)
    }

    /// Deletes every entry (tests that judge each packet as a new flow).
    pub fn clear(&self, ops: &BpfOps) -> Result<(), BpfError> {
        for k in self.map.keys(ops)? {
            self.map.delete(ops, &k)?;
        }
        Ok(())
    }

    /// Writes an entry (tests and migration tooling).
    pub fn put(&self, ops: &BpfOps, k: &CtKey, v: &CtValue) -> Result<(), BpfError> {
        self.map.update(ops, &k.to_bytes(), &v.to_bytes())
    }

    /// Deletes what has expired at `now_ns` (the programs' clock, [`monotonic_ns`]), every
    /// entry approved by an endpoint whose host-side ifindex `gone` names, and every entry
    /// with an end at an address `gone_addr` names (a deleted endpoint's).
    pub fn scan(
        &self,
        ops: &BpfOps,
        now_ns: u64,
        t: &Timeouts,
        gone: impl Fn(u32) -> bool,
        gone_addr: impl Fn(IpAddr) -> bool,
    ) -> Result<ScanStats, BpfError> {
        let mut stats = ScanStats::default();
        for k in self.map.keys(ops)? {
            let Some(key) = CtKey::from_bytes(&k) else {
                continue;
            };
            let Some(v) = self
                .map
                .lookup(ops, &k)?
                .and_then(|v| CtValue::from_bytes(&v))
            else {
                continue;
            };
            stats.used += 1;
            let removed_ep = [v.a, v.b]
                .iter()
                .any(|l| l.flags & CT_LEG_APPROVED != 0 && l.ifindex != 0 && gone(l.ifindex))
                || gone_addr(key.addr_a())
                || gone_addr(key.addr_b());
            let why = if removed_ep {
                Some(Expiry::EndpointRemoved)
            } else {
                expiry(key.proto, &v, now_ns, t)
            };
            if let Some(why) = why {
                self.map.delete(ops, &k)?;
                *stats.removed.entry(why).or_default() += 1;
            }
        }
        Ok(stats)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns()`.
pub fn monotonic_ns(ops: &BpfOps) -> Result<u64, BpfError> {
    ops.run(op::PROBE, "clock_gettime", || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_normalise_both_directions_to_one_flow_and_round_trip() {
        let a: IpAddr = "10.65.0.1".parse().unwrap();
        let b: IpAddr = "10.65.0.2".parse().unwrap();
        let k1 = CtKey::new(6, a, 40000, b, 8080);
        let k2 = CtKey::new(6, b, 8080, a, 40000);
        assert_eq!(k1, k2);
        assert_eq!(k1.addr_a(), a);
        assert_eq!(CtKey::from_bytes(&k1.to_bytes()), Some(k1));
        let v = CtValue {
            created: 1,
            last_seen: 2,
            rst_seen: 3,
            a: CtLeg {
                flags: CT_LEG_APPROVED,
                ifindex: 7,
            },
            b: CtLeg::default(),
        };
        assert_eq!(CtValue::from_bytes(&v.to_bytes()), Some(v));
        assert_eq!(CtValue::from_bytes(&[0u8; 3]), None);
    }

    #[test]
    fn expired_entries_are_removed_by_the_scan_with_upstreams_timeouts() {
        let t = Timeouts::default();
        let s = |n: u64| n * 1_000_000_000;
        let both = |f| CtValue {
            created: 0,
            last_seen: 0,
            rst_seen: 0,
            a: CtLeg {
                flags: f,
                ifindex: 1,
            },
            b: CtLeg {
                flags: f,
                ifindex: 2,
            },
        };
        let established = both(CT_LEG_SYN | CT_LEG_ACK);
        assert_eq!(expiry(6, &established, s(3599), &t), None);
        assert_eq!(
            expiry(6, &established, s(3601), &t),
            Some(Expiry::TcpEstablished)
        );
        let syn_only = CtValue {
            a: CtLeg {
                flags: CT_LEG_SYN,
                ifindex: 1,
            },
            b: CtLeg::default(),
            ..established
        };
        assert_eq!(expiry(6, &syn_only, s(19), &t), None);
        assert_eq!(expiry(6, &syn_only, s(21), &t), Some(Expiry::TcpSynSent));
        let fins = both(CT_LEG_SYN | CT_LEG_ACK | CT_LEG_FIN);
        assert_eq!(expiry(6, &fins, s(31), &t), Some(Expiry::TcpFinsSeen));
        let rst = CtValue {
            rst_seen: s(100),
            last_seen: s(100),
            ..established
        };
        assert_eq!(expiry(6, &rst, s(139), &t), None);
        assert_eq!(expiry(6, &rst, s(141), &t), Some(Expiry::TcpResetSeen));
        assert_eq!(expiry(17, &established, s(59), &t), None);
        assert_eq!(expiry(17, &established, s(61), &t), Some(Expiry::Udp));
        assert_eq!(expiry(1, &established, s(6), &t), Some(Expiry::Icmp));
        assert_eq!(expiry(58, &established, s(4), &t), None);
        assert_eq!(expiry(47, &established, s(599), &t), None);
        assert_eq!(expiry(47, &established, s(601), &t), Some(Expiry::Generic));
    }
}
