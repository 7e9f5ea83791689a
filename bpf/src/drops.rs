//! Drop reports of the policy interpreter (`DropAttributionEnabled` in eBPF mode): the
//! layouts of `progs/pol_rules.c`'s `cali_drop_*` maps and event, and the reader of the
//! `cali_drops` ring buffer.
//!
//! | pin (under the root) | type | key -> value |
//! |---|---|---|
//! | `cali_drops` | ring buffer | [`DropEvent`]s, one per reported denied packet |
//! | `cali_drop_cfg` | array | 0 -> [`DropConfig`] (off until the driver writes it) |
//! | `cali_drop_rl` | array | rule bucket -> rate-limit window (the program's own) |
//! | `cali_drop_stats` | per-CPU array | [`DropStats`] counters (reported, suppressed, lost) |
//!
//! # Invariants
//! * The event layout is the C struct's, byte for byte
//!   (`a_drop_event_parses_the_c_layout_and_refuses_short_input`); a short or unknown event is
//!   an error naming what is wrong, never a panic.
//! * The program reports nothing until [`DropConfig::enabled`] is written: a run with drop
//!   attribution off leaves the ring empty
//!   (`bpf_drop_reports_name_the_record_and_respect_the_switch_and_the_rate`, kernel test).

use std::path::Path;
use std::time::Duration;

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, RingBuffer, RingBufferBuilder};

use crate::maps::{MapSpec, PinnedMap};
use crate::ops::{op, os_error, BpfError, BpfOps};

/// Bytes of the ring buffer (a power of two, whole pages).
pub const RING_SIZE: u32 = 256 * 1024;
/// Rate-limit buckets (a rule hashes into one).
pub const RL_SLOTS: u32 = 1024;

/// `cali_drops`: the ring buffer of reports.
pub const DROPS_RING_MAP: MapSpec = MapSpec {
    name: "cali_drops",
    version: 1,
    map_type: MapType::RingBuf,
    key_size: 0,
    value_size: 0,
    max_entries: RING_SIZE,
    flags: 0,
};

/// `cali_drop_cfg`: the switch and the rate.
pub const DROP_CFG_MAP: MapSpec = MapSpec {
    name: "cali_drop_cfg",
    version: 1,
    map_type: MapType::Array,
    key_size: 4,
    value_size: DropConfig::SIZE as u32,
    max_entries: 1,
    flags: 0,
};

/// `cali_drop_rl`: per rule bucket, the current second's window and count.
pub const DROP_RL_MAP: MapSpec = MapSpec {
    name: "cali_drop_rl",
    version: 1,
    map_type: MapType::Array,
    key_size: 4,
    value_size: 16,
    max_entries: RL_SLOTS,
    flags: 0,
};

/// `cali_drop_stats`: per-CPU counters, indexed by [`DropStats`] field order.
pub const DROP_STATS_MAP: MapSpec = MapSpec {
    name: "cali_drop_stats",
    version: 1,
    map_type: MapType::PercpuArray,
    key_size: 4,
    value_size: 8,
    max_entries: 3,
    flags: 0,
};

/// Every drop-report map (pinned under the root beside the policy maps).
pub const DROP_SPECS: [MapSpec; 4] = [DROPS_RING_MAP, DROP_CFG_MAP, DROP_RL_MAP, DROP_STATS_MAP];

/// `struct cali_drop_cfg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropConfig {
    /// Reports are made.
    pub enabled: bool,
    /// At most this many reports per second per rule bucket.
    pub per_sec: u32,
}

impl DropConfig {
    /// Bytes of the C struct.
    pub const SIZE: usize = 8;

    /// The C layout.
    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&u32::from(self.enabled).to_ne_bytes());
        b[4..].copy_from_slice(&self.per_sec.to_ne_bytes());
        b
    }

    /// Parses the C layout.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let word = |i: usize| Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?));
        Some(Self {
            enabled: word(0)? != 0,
            per_sec: word(4)?,
        })
    }
}

/// What denied a reported packet (`WHY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropWhy {
    /// A deny rule of the policy or profile with [`DropEvent::handle`]; [`DropEvent::index`]
    /// is the record of its stream (of the packet's IP version) that decided.
    Rule,
    /// A tier's end: [`DropEvent::index`] is the endpoint list's tier-end record.
    TierEnd,
    /// The list's end (no policy or profile decided): its end record.
    ListEnd,
    /// A policy (handle) or, with handle 0, the endpoint's list was not written: fail closed.
    Missing,
    /// A record missing or the step budget spent: fail closed.
    Broken,
}

impl DropWhy {
    fn from_code(c: u32) -> Option<Self> {
        Some(match c {
            1 => Self::Rule,
            2 => Self::TierEnd,
            3 => Self::ListEnd,
            4 => Self::Missing,
            5 => Self::Broken,
            _ => return None,
        })
    }

    /// Its code in the C program.
    pub fn code(self) -> u32 {
        match self {
            Self::Rule => 1,
            Self::TierEnd => 2,
            Self::ListEnd => 3,
            Self::Missing => 4,
            Self::Broken => 5,
        }
    }
}

/// `struct cali_drop_event`: one reported denied packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropEvent {
    /// `bpf_ktime_get_ns` when it was denied.
    pub ts_ns: u64,
    /// The hook's interface.
    pub ifindex: u32,
    /// The hook's globals flags (`GLOBALS_F_*`: ingress, host endpoint).
    pub hook_flags: u32,
    /// The hook's policy slot.
    pub slot: u32,
    /// The list that denied (`POL_DIR_*`).
    pub list: u32,
    /// What denied it.
    pub why: DropWhy,
    /// The policy handle ([`DropWhy::Rule`], [`DropWhy::Missing`]).
    pub handle: u32,
    /// The record index (see [`DropWhy`]).
    pub index: u32,
    /// Source address (IPv4-mapped for IPv4).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (host order; valid with ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// 4 or 6.
    pub ip_ver: u8,
    /// IP protocol.
    pub proto: u8,
    /// ICMP type (valid with ICMP).
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// `CALI_ST_*` flags of the packet facts.
    pub st_flags: u32,
}

/// An event the reader could not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DropEventError {
    /// Fewer bytes than the layout.
    #[error("drop event of {0} bytes, expected {size}", size = DropEvent::SIZE)]
    Short(usize),
    /// A `why` code this build does not know.
    #[error("drop event with unknown reason code {0}")]
    UnknownWhy(u32),
}

impl DropEvent {
    /// Bytes of the C struct.
    pub const SIZE: usize = 80;
    /// `CALI_ST_PORTS`.
    pub const PORTS: u32 = 1;

    /// Parses the C layout.
    pub fn from_bytes(b: &[u8]) -> Result<Self, DropEventError> {
        if b.len() < Self::SIZE {
            return Err(DropEventError::Short(b.len()));
        }
        let w = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&b[36..52]);
        dst.copy_from_slice(&b[52..68]);
        let code = w(24);
        Ok(Self {
            ts_ns: u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            ifindex: w(8),
            hook_flags: w(12),
            slot: w(16),
            list: w(20),
            why: DropWhy::from_code(code).ok_or(DropEventError::UnknownWhy(code))?,
            handle: w(28),
            index: w(32),
            src,
            dst,
            sport: h(68),
            dport: h(70),
            ip_ver: b[72],
            proto: b[73],
            icmp_type: b[74],
            icmp_code: b[75],
            st_flags: w(76),
        })
    }

    /// The C layout (tests and tools).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..8].copy_from_slice(&self.ts_ns.to_ne_bytes());
        for (i, v) in [
            self.ifindex,
            self.hook_flags,
            self.slot,
            self.list,
            self.why.code(),
            self.handle,
            self.index,
        ]
        .into_iter()
        .enumerate()
        {
            b[8 + i * 4..12 + i * 4].copy_from_slice(&v.to_ne_bytes());
        }
        b[36..52].copy_from_slice(&self.src);
        b[52..68].copy_from_slice(&self.dst);
        b[68..70].copy_from_slice(&self.sport.to_ne_bytes());
        b[70..72].copy_from_slice(&self.dport.to_ne_bytes());
        b[72] = self.ip_ver;
        b[73] = self.proto;
        b[74] = self.icmp_type;
        b[75] = self.icmp_code;
        b[76..80].copy_from_slice(&self.st_flags.to_ne_bytes());
        b
    }

    /// The source address.
    pub fn src_addr(&self) -> std::net::IpAddr {
        addr(&self.src, self.ip_ver)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> std::net::IpAddr {
        addr(&self.dst, self.ip_ver)
    }
}

fn addr(a: &[u8; 16], ip_ver: u8) -> std::net::IpAddr {
    let v6 = std::net::Ipv6Addr::from(*a);
    match (ip_ver, v6.to_ipv4_mapped()) {
        (4, Some(v4)) => v4.into(),
        _ => v6.into(),
    }
}

/// The program's counters, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropStats {
    /// Events written to the ring.
    pub reported: u64,
    /// Denied packets not reported: their rule was over its rate.
    pub suppressed: u64,
    /// Events lost: the ring was full.
    pub lost: u64,
}

/// The drop-report maps, open (part of [`crate::PolicyMaps`]).
#[derive(Debug)]
pub struct DropMaps {
    pub(crate) ring: PinnedMap,
    pub(crate) cfg: PinnedMap,
    pub(crate) rl: PinnedMap,
    pub(crate) stats: PinnedMap,
}

impl DropMaps {
    /// Opens (or creates and pins) the maps under `root`.
    pub fn open_or_create(ops: &BpfOps, root: &Path) -> Result<Self, BpfError> {
        Ok(Self {
            ring: PinnedMap::open_or_create(ops, DROPS_RING_MAP, root)?,
            cfg: PinnedMap::open_or_create(ops, DROP_CFG_MAP, root)?,
            rl: PinnedMap::open_or_create(ops, DROP_RL_MAP, root)?,
            stats: PinnedMap::open_or_create(ops, DROP_STATS_MAP, root)?,
        })
    }

    /// Turns reports on or off and sets their rate.
    pub fn configure(&self, ops: &BpfOps, cfg: DropConfig) -> Result<(), BpfError> {
        self.cfg.update(ops, &0u32.to_ne_bytes(), &cfg.to_bytes())
    }

    /// What the program reads.
    pub fn config(&self, ops: &BpfOps) -> Result<DropConfig, BpfError> {
        Ok(self
            .cfg
            .lookup(ops, &0u32.to_ne_bytes())?
            .and_then(|b| DropConfig::from_bytes(&b))
            .unwrap_or_default())
    }

    /// The program's counters.
    pub fn stats(&self, ops: &BpfOps) -> Result<DropStats, BpfError> {
        stats_of(ops, &self.stats)
    }
}

fn stats_of(ops: &BpfOps, map: &PinnedMap) -> Result<DropStats, BpfError> {
    let mut v = [0u64; 3];
    for (i, slot) in v.iter_mut().enumerate() {
        let key = (i as u32).to_ne_bytes();
        let per_cpu = ops.lib(op::MAP_LOOKUP, map.path().display(), || {
            map.handle().lookup_percpu(&key, MapFlags::ANY)
        })?;
        *slot = per_cpu
            .unwrap_or_default()
            .iter()
            .filter_map(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
            .sum();
    }
    Ok(DropStats {
        reported: v[0],
        suppressed: v[1],
        lost: v[2],
    })
}

/// The kernel id of the ring pinned under `root`, if there is one (a reader notices that the
/// driver re-created it).
pub fn pinned_ring_id(ops: &BpfOps, root: &Path) -> Result<Option<u32>, BpfError> {
    let path = root.join(DROPS_RING_MAP.versioned_name());
    if !path.exists() {
        return Ok(None);
    }
    let handle = ops.lib(op::MAP_OPEN, path.display(), || {
        MapHandle::from_pinned_path(&path)
    })?;
    let info = ops.lib(op::MAP_LOOKUP, path.display(), || handle.info())?;
    Ok(Some(info.info.id))
}

/// The program's counters as pinned under `root` (zero when there is no pin).
pub fn pinned_stats(ops: &BpfOps, root: &Path) -> Result<DropStats, BpfError> {
    let path = root.join(DROP_STATS_MAP.versioned_name());
    if !path.exists() {
        return Ok(DropStats::default());
    }
    let handle = ops.lib(op::MAP_OPEN, path.display(), || {
        MapHandle::from_pinned_path(&path)
    })?;
    stats_of(ops, &PinnedMap::from_parts(DROP_STATS_MAP, path, handle))
}

/// A consumer of the pinned `cali_drops` ring: each [`DropRingReader::poll`] hands the
/// waiting events (parsed, or the parse error) to the callback it was opened with.
pub struct DropRingReader {
    // Field order: the ring (which borrows the map's mapping) goes first.
    rb: RingBuffer<'static>,
    _map: MapHandle,
    id: u32,
}

impl std::fmt::Debug for DropRingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropRingReader")
            .field("id", &self.id)
            .finish()
    }
}

impl DropRingReader {
    /// Opens the ring pinned under `root` (`Ok(None)`: not pinned yet).
    pub fn open(
        ops: &BpfOps,
        root: &Path,
        mut on_event: impl FnMut(Result<DropEvent, DropEventError>) + 'static,
    ) -> Result<Option<Self>, BpfError> {
        let path = root.join(DROPS_RING_MAP.versioned_name());
        if !path.exists() {
            return Ok(None);
        }
        let map = ops.lib(op::MAP_OPEN, path.display(), || {
            MapHandle::from_pinned_path(&path)
        })?;
        if map.map_type() != MapType::RingBuf {
            return Err(BpfError::Unexpected {
                op: op::MAP_OPEN,
                what: path.display().to_string(),
                reason: format!("a {:?} map, not a ring buffer", map.map_type()),
            });
        }
        let id = ops
            .lib(op::MAP_LOOKUP, path.display(), || map.info())?
            .info
            .id;
        let rb = ops.lib(op::RING_POLL, path.display(), || {
            let mut b = RingBufferBuilder::new();
            b.add(&map, move |bytes: &[u8]| {
                on_event(DropEvent::from_bytes(bytes));
                0
            })?;
            b.build()
        })?;
        Ok(Some(Self { rb, _map: map, id }))
    }

    /// The kernel id of the ring this reader consumes.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Waits up to `timeout` for events and hands each to the callback. A wait a signal
    /// interrupted (`EINTR` from `epoll_wait`; a child's `SIGCHLD` can do it without any
    /// handler) is a short wait, not an error: the events stay in the ring for the next call.
    pub fn poll(&self, ops: &BpfOps, timeout: Duration) -> Result<(), BpfError> {
        ops.run(op::RING_POLL, DROPS_RING_MAP.name, || {
            match self.rb.poll(timeout) {
                Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => Ok(()),
                r => r.map_err(os_error),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_event_parses_the_c_layout_and_refuses_short_input() {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        src[12..].copy_from_slice(&[10, 65, 0, 2]);
        let e = DropEvent {
            ts_ns: 7,
            ifindex: 12,
            hook_flags: 3,
            slot: 4,
            list: 1,
            why: DropWhy::Rule,
            handle: 9,
            index: 5,
            src,
            dst: [0xfd; 16],
            sport: 40000,
            dport: 8080,
            ip_ver: 4,
            proto: 6,
            icmp_type: 0,
            icmp_code: 0,
            st_flags: DropEvent::PORTS,
        };
        let b = e.to_bytes();
        assert_eq!(DropEvent::from_bytes(&b), Ok(e));
        assert_eq!(e.src_addr().to_string(), "10.65.0.2");
        assert_eq!(
            DropEvent::from_bytes(&b[..79]),
            Err(DropEventError::Short(79))
        );
        let mut bad = b;
        bad[24..28].copy_from_slice(&77u32.to_ne_bytes());
        assert_eq!(
            DropEvent::from_bytes(&bad),
            Err(DropEventError::UnknownWhy(77))
        );
        assert_eq!(
            DropConfig::from_bytes(
                &DropConfig {
                    enabled: true,
                    per_sec: 10
                }
                .to_bytes()
            ),
            Some(DropConfig {
                enabled: true,
                per_sec: 10
            })
        );
    }
}
