//! The policy interpreter's pinned maps (typed handles) and its loader.
//!
//! | pin (under the root) | type | key -> value |
//! |---|---|---|
//! | `cali_pol_ops2` | array | index -> [`Op`] (policy streams and endpoint lists) |
//! | `cali_pol_idx2` | hash | policy/profile handle -> [`PolicyIndex`] |
//! | `<mech>/cali_pol_ep2` | hash | [`EndpointKey`] (slot, direction) -> [`EndpointList`] |
//! | `cali_ipsets2` | LPM trie | [`IpSetKey`] -> `u32` (1) |
//! | `cali_pol_log2` | per-CPU array | handle % `LOG_SLOTS` -> log hits (`u64`) |
//! | `<root>/cali_state2` | per-CPU array | 0 -> [`crate::policy::PacketState`], pinned by libbpf by name under the root (`pin_root_path`) |
//! | `cali_drops`, `cali_drop_cfg`, `cali_drop_rl`, `cali_drop_stats` | see [`crate::drops`] | drop reports |
//!
//! The endpoint map is per attach mechanism because policy slots are per
//! (mechanism, direction) jump map; the interpreter loaded for a mechanism is bound to that
//! mechanism's endpoint map. Every write goes through [`BpfOps`] (`map_update`,
//! `map_delete`); record streams are written with one batched `map_update`.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapType, ObjectBuilder, Program, ProgramAttachType};

use crate::attach::Mechanism;
use crate::drops::{DropMaps, DROP_SPECS};
use crate::layout::Hook;
use crate::maps::{jump_map, progs_map, JumpMap, MapSpec, PinnedMap};
use crate::ops::{op, BpfError, BpfOps};
use crate::policy::*;

/// The interpreter objects, built by `build.rs` from `progs/pol_rules.c`.
pub mod objects {
    /// The interpreter, fast build.
    pub const POL_RULES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pol_rules.o"));
    /// The interpreter, debug build (logs each decision with `bpf_printk`).
    pub const POL_RULES_DEBUG: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/pol_rules_debug.o"));
}

/// `cali_pol_ops2`: the record array.
pub const POL_OPS_MAP: MapSpec = MapSpec {
    name: "cali_pol_ops",
    version: 2,
    map_type: MapType::Array,
    key_size: 4,
    value_size: Op::SIZE as u32,
    max_entries: POL_OPS_SIZE,
    flags: 0,
};

/// `cali_pol_idx2`: policy handle -> streams (a hash: updates are atomic swaps).
pub const POL_IDX_MAP: MapSpec = MapSpec {
    name: "cali_pol_idx",
    version: 2,
    map_type: MapType::Hash,
    key_size: 4,
    value_size: PolicyIndex::SIZE as u32,
    max_entries: POL_IDX_SIZE,
    flags: 0,
};

/// `cali_pol_ep2`: (slot, direction) -> endpoint list, one per mechanism.
pub const POL_EP_MAP: MapSpec = MapSpec {
    name: "cali_pol_ep",
    version: 2,
    map_type: MapType::Hash,
    key_size: EndpointKey::SIZE as u32,
    value_size: EndpointList::SIZE as u32,
    max_entries: POL_EP_SIZE,
    flags: 0,
};

/// `cali_ipsets2`: IP-set members of both IP versions (LPM trie).
pub const IPSETS_MAP: MapSpec = MapSpec {
    name: "cali_ipsets",
    version: 2,
    map_type: MapType::LpmTrie,
    key_size: IpSetKey::SIZE as u32,
    value_size: 4,
    max_entries: IPSETS_SIZE,
    flags: libbpf_sys::BPF_F_NO_PREALLOC,
};

/// `cali_pol_log2`: per-CPU log-hit counters per policy handle.
pub const POL_LOG_MAP: MapSpec = MapSpec {
    name: "cali_pol_log",
    version: 2,
    map_type: MapType::PercpuArray,
    key_size: 4,
    value_size: 8,
    max_entries: LOG_SLOTS,
    flags: 0,
};

/// `cali_state2`: the per-CPU packet state main hands to policy (pinned by libbpf under
/// `/sys/fs/bpf` by name, see `progs/state.h`).
pub const STATE_MAP: MapSpec = MapSpec {
    name: "cali_state",
    version: 2,
    map_type: MapType::PercpuArray,
    key_size: 4,
    value_size: PacketState::SIZE as u32,
    max_entries: 1,
    flags: 0,
};

/// Every policy map spec pinned under the root (for old-version removal at start of day).
pub const ROOT_SPECS: [MapSpec; 8] = [
    POL_OPS_MAP,
    POL_IDX_MAP,
    IPSETS_MAP,
    POL_LOG_MAP,
    DROP_SPECS[0],
    DROP_SPECS[1],
    DROP_SPECS[2],
    DROP_SPECS[3],
];

/// The policy maps, open.
#[derive(Debug)]
pub struct PolicyMaps {
    root: PathBuf,
    ops_map: PinnedMap,
    idx: PinnedMap,
    ipsets: PinnedMap,
    log: PinnedMap,
    eps: BTreeMap<Mechanism, PinnedMap>,
    drops: DropMaps,
}

impl PolicyMaps {
    /// Opens (or creates and pins) the policy maps under `root` (felix's pin root), with the
    /// endpoint maps of TC and TCX.
    pub fn open_or_create(ops: &BpfOps, root: &Path) -> Result<Self, BpfError> {
        ops.run(op::MOUNT, root.display(), || std::fs::create_dir_all(root))?;
        let mut eps = BTreeMap::new();
        for mech in [Mechanism::Tc, Mechanism::Tcx] {
            let dir = root.join(mech.dir_name());
            ops.run(op::MOUNT, dir.display(), || std::fs::create_dir_all(&dir))?;
            eps.insert(mech, PinnedMap::open_or_create(ops, POL_EP_MAP, &dir)?);
        }
        Ok(Self {
            root: root.to_path_buf(),
            ops_map: PinnedMap::open_or_create(ops, POL_OPS_MAP, root)?,
            idx: PinnedMap::open_or_create(ops, POL_IDX_MAP, root)?,
            ipsets: PinnedMap::open_or_create(ops, IPSETS_MAP, root)?,
            log: PinnedMap::open_or_create(ops, POL_LOG_MAP, root)?,
            eps,
            drops: DropMaps::open_or_create(ops, root)?,
        })
    }

    /// The drop-report maps.
    pub fn drops(&self) -> &DropMaps {
        &self.drops
    }

    /// The pin root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn ep(&self, mech: Mechanism) -> Result<&PinnedMap, BpfError> {
        self.eps.get(&mech).ok_or_else(|| BpfError::Unexpected {
            op: op::MAP_OPEN,
            what: format!("{} endpoint map", mech.dir_name()),
            reason: "no policy endpoint map for this attach mechanism".into(),
        })
    }

    /// Writes `records` at `base..base + len` of `cali_pol_ops2` (one batched update).
    pub fn write_records(&self, ops: &BpfOps, base: u32, records: &[Op]) -> Result<(), BpfError> {
        if records.is_empty() {
            return Ok(());
        }
        let end = u64::from(base) + records.len() as u64;
        if end > u64::from(POL_OPS_SIZE) {
            return Err(BpfError::Unexpected {
                op: op::MAP_UPDATE,
                what: self.ops_map.path().display().to_string(),
                reason: format!("records {base}..{end} beyond the map's {POL_OPS_SIZE}"),
            });
        }
        let mut keys = Vec::with_capacity(records.len() * 4);
        let mut values = Vec::with_capacity(records.len() * Op::SIZE);
        for (i, r) in records.iter().enumerate() {
            keys.extend_from_slice(&(base + i as u32).to_ne_bytes());
            values.extend_from_slice(&r.to_bytes());
        }
        let n = records.len() as u32;
        ops.lib(op::MAP_UPDATE, self.ops_map.path().display(), || {
            self.ops_map
                .handle()
                .update_batch(&keys, &values, n, MapFlags::ANY, MapFlags::ANY)
        })
    }

    /// The record at `index`.
    pub fn record(&self, ops: &BpfOps, index: u32) -> Result<Option<Op>, BpfError> {
        Ok(self
            .ops_map
            .lookup(ops, &index.to_ne_bytes())?
            .and_then(|b| Op::from_bytes(&b)))
    }

    /// Points `handle` at `idx` (an atomic swap for packets in flight).
    pub fn set_policy(&self, ops: &BpfOps, handle: u32, idx: &PolicyIndex) -> Result<(), BpfError> {
        self.idx.update(ops, &handle.to_ne_bytes(), &idx.to_bytes())
    }

    /// Where `handle` points.
    pub fn policy(&self, ops: &BpfOps, handle: u32) -> Result<Option<PolicyIndex>, BpfError> {
        Ok(self
            .idx
            .lookup(ops, &handle.to_ne_bytes())?
            .and_then(|b| PolicyIndex::from_bytes(&b)))
    }

    /// Removes `handle` (a missing one is not an error).
    pub fn delete_policy(&self, ops: &BpfOps, handle: u32) -> Result<(), BpfError> {
        self.idx.delete(ops, &handle.to_ne_bytes())
    }

    /// Every policy index entry (start of day: what a previous run left).
    pub fn policies(&self, ops: &BpfOps) -> Result<Vec<(u32, PolicyIndex)>, BpfError> {
        let keys: Vec<Vec<u8>> = ops.run(op::MAP_LOOKUP, self.idx.path().display(), || {
            Ok(self.idx.handle().keys().collect())
        })?;
        let mut out = Vec::new();
        for k in keys {
            let Some(handle) = k
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
            else {
                continue;
            };
            if let Some(idx) = self.policy(ops, handle)? {
                out.push((handle, idx));
            }
        }
        Ok(out)
    }

    /// Every endpoint list entry of `mech` (start of day).
    pub fn endpoints(
        &self,
        ops: &BpfOps,
        mech: Mechanism,
    ) -> Result<Vec<(EndpointKey, EndpointList)>, BpfError> {
        let map = self.ep(mech)?;
        let keys: Vec<Vec<u8>> = ops.run(op::MAP_LOOKUP, map.path().display(), || {
            Ok(map.handle().keys().collect())
        })?;
        let mut out = Vec::new();
        for k in keys {
            let field = |i: usize| {
                k.get(i..i + 4)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_ne_bytes)
            };
            let (Some(slot), Some(dir)) = (field(0), field(4)) else {
                continue;
            };
            let key = EndpointKey { slot, dir };
            if let Some(list) = self.endpoint(ops, mech, key)? {
                out.push((key, list));
            }
        }
        Ok(out)
    }

    /// Points the endpoint `key` of `mech` at `list` (an atomic swap).
    pub fn set_endpoint(
        &self,
        ops: &BpfOps,
        mech: Mechanism,
        key: EndpointKey,
        list: &EndpointList,
    ) -> Result<(), BpfError> {
        self.ep(mech)?
            .update(ops, &key.to_bytes(), &list.to_bytes())
    }

    /// Where the endpoint `key` of `mech` points.
    pub fn endpoint(
        &self,
        ops: &BpfOps,
        mech: Mechanism,
        key: EndpointKey,
    ) -> Result<Option<EndpointList>, BpfError> {
        Ok(self
            .ep(mech)?
            .lookup(ops, &key.to_bytes())?
            .and_then(|b| EndpointList::from_bytes(&b)))
    }

    /// Removes the endpoint `key` of `mech` (its packets then fail closed).
    pub fn delete_endpoint(
        &self,
        ops: &BpfOps,
        mech: Mechanism,
        key: EndpointKey,
    ) -> Result<(), BpfError> {
        self.ep(mech)?.delete(ops, &key.to_bytes())
    }

    /// Adds one IP-set member.
    pub fn add_member(&self, ops: &BpfOps, key: &IpSetKey) -> Result<(), BpfError> {
        self.ipsets
            .update(ops, &key.to_bytes(), &1u32.to_ne_bytes())
    }

    /// Removes one IP-set member (a missing one is not an error).
    pub fn delete_member(&self, ops: &BpfOps, key: &IpSetKey) -> Result<(), BpfError> {
        self.ipsets.delete(ops, &key.to_bytes())
    }

    /// Whether `key` is a member (exact key, not a longest-prefix lookup).
    pub fn has_member(&self, ops: &BpfOps, key: &IpSetKey) -> Result<bool, BpfError> {
        Ok(self.ipsets.lookup(ops, &key.to_bytes())?.is_some())
    }

    /// Every IP-set member (start of day: what a previous run left).
    pub fn members(&self, ops: &BpfOps) -> Result<Vec<IpSetKey>, BpfError> {
        ops.run(op::MAP_LOOKUP, self.ipsets.path().display(), || {
            Ok(self
                .ipsets
                .handle()
                .keys()
                .filter_map(|k| IpSetKey::from_bytes(&k))
                .collect())
        })
    }

    /// Log hits counted for `handle` (summed over CPUs).
    pub fn log_hits(&self, ops: &BpfOps, handle: u32) -> Result<u64, BpfError> {
        let key = (handle % LOG_SLOTS).to_ne_bytes();
        let per_cpu = ops.lib(op::MAP_LOOKUP, self.log.path().display(), || {
            self.log.handle().lookup_percpu(&key, MapFlags::ANY)
        })?;
        Ok(per_cpu
            .unwrap_or_default()
            .iter()
            .filter_map(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
            .sum())
    }
}

/// The interpreter for one (mechanism, direction), loaded or adopted, not yet in any slot.
#[derive(Debug)]
pub struct PolicyProgram {
    fd: OwnedFd,
    id: u32,
    jump: JumpMap,
    load_time: Duration,
    adopted: bool,
}

/// The program name of the interpreter.
pub const POL_RULES_PROG: &str = "cali_pol_rules";

/// The pin name of the interpreter of direction `hook` in its mechanism's directory.
pub fn interpreter_pin(hook: Hook) -> String {
    format!("cali_polr_{}", hook.suffix())
}

impl PolicyProgram {
    /// The interpreter of `(mech, hook)`: the one pinned as `<mech>/cali_polr_<dir>` when
    /// the directory holds this binary's layout identity (for `debug`) and the pinned program
    /// uses only the maps pinned now (see [`crate::identity`]), else a fresh
    /// [`PolicyProgram::load`], pinned there for the next run.
    ///
    /// Adopting skips the verifier, the bulk of a restart's cost (about 1.4 s per direction
    /// on a loaded 2-core machine).
    pub fn open_or_load(
        ops: &BpfOps,
        maps: &PolicyMaps,
        mech: Mechanism,
        hook: Hook,
        debug: bool,
    ) -> Result<Self, BpfError> {
        let dir = maps.root.join(mech.dir_name());
        let pin = dir.join(interpreter_pin(hook));
        if let Some(p) = Self::adopt(ops, maps, mech, hook, debug, &pin)? {
            return Ok(p);
        }
        let p = Self::load(ops, maps, mech, hook, debug)?;
        if pin.exists() {
            ops.run(op::UNPIN, pin.display(), || std::fs::remove_file(&pin))?;
        }
        let raw = p.fd.as_raw_fd();
        ops.run(op::PROG_PIN, pin.display(), || {
            let path = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes())
                .map_err(std::io::Error::other)?;
            // SAFETY: `raw` is the open program fd `p` owns for the call; `path` is a valid
            // NUL-terminated string living across it.
            let rc = unsafe { libbpf_sys::bpf_obj_pin(raw, path.as_ptr()) };
            if rc < 0 {
                return Err(std::io::Error::from_raw_os_error(-rc));
            }
            Ok(())
        })?;
        Ok(p)
    }

    fn adopt(
        ops: &BpfOps,
        maps: &PolicyMaps,
        mech: Mechanism,
        hook: Hook,
        debug: bool,
        pin: &Path,
    ) -> Result<Option<Self>, BpfError> {
        let dir = maps.root.join(mech.dir_name());
        if !pin.exists()
            || crate::identity::pinned_identity(ops, &dir)?
                != Some(crate::identity::layout_identity(debug))
        {
            return Ok(None);
        }
        let Ok(fd) = ops.lib(op::PROG_OPEN, pin.display(), || {
            Program::fd_from_pinned_path(pin)
        }) else {
            return Ok(None);
        };
        let pinned = crate::identity::PinnedMaps::scan(ops, &maps.root, mech)?;
        if !crate::identity::uses_current_maps(ops, fd.as_fd(), &pinned)? {
            return Ok(None);
        }
        let id = ops.lib(op::PROG_OPEN, pin.display(), || {
            Program::id_from_fd(fd.as_fd())
        })?;
        let jump = JumpMap::open_or_create(ops, jump_map(hook), &dir)?;
        Ok(Some(Self {
            fd,
            id,
            jump,
            load_time: Duration::ZERO,
            adopted: true,
        }))
    }

    /// Whether this interpreter is the one an earlier run pinned (nothing was loaded).
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// Loads the interpreter (`debug`: the logging build) for `(mech, hook)`, bound to the
    /// pinned jump maps of that set under the maps' root and to the policy maps. The jump
    /// maps are opened from their pins (created if absent, as `BpfDataplane` would).
    pub fn load(
        ops: &BpfOps,
        maps: &PolicyMaps,
        mech: Mechanism,
        hook: Hook,
        debug: bool,
    ) -> Result<Self, BpfError> {
        let dir = maps.root.join(mech.dir_name());
        ops.run(op::MOUNT, dir.display(), || std::fs::create_dir_all(&dir))?;
        let progs = JumpMap::open_or_create(ops, progs_map(hook), &dir)?;
        let jump = JumpMap::open_or_create(ops, jump_map(hook), &dir)?;
        let ep = maps.ep(mech)?;
        let bind: [(&str, BorrowedFd<'_>); 11] = [
            ("cali_progs", progs.map().fd()),
            ("cali_jump", jump.map().fd()),
            ("cali_pol_ops2", maps.ops_map.fd()),
            ("cali_pol_idx2", maps.idx.fd()),
            ("cali_pol_ep2", ep.fd()),
            ("cali_ipsets2", maps.ipsets.fd()),
            ("cali_pol_log2", maps.log.fd()),
            ("cali_drops", maps.drops.ring.fd()),
            ("cali_drop_cfg", maps.drops.cfg.fd()),
            ("cali_drop_rl", maps.drops.rl.fd()),
            ("cali_drop_stats", maps.drops.stats.fd()),
        ];
        let bytes = if debug {
            objects::POL_RULES_DEBUG
        } else {
            objects::POL_RULES
        };
        let attach = || match (mech, hook) {
            (Mechanism::Tc, _) => None,
            (Mechanism::Tcx, Hook::Ingress) => Some(ProgramAttachType::TcxIngress),
            (Mechanism::Tcx, Hook::Egress) => Some(ProgramAttachType::TcxEgress),
            (Mechanism::Netkit, Hook::Ingress) => Some(ProgramAttachType::NetkitPeer),
            (Mechanism::Netkit, Hook::Egress) => Some(ProgramAttachType::NetkitPrimary),
        };
        let start = felix_actors::clock::real_now();
        let obj = ops.lib(op::PROG_LOAD, "cali_polr", || {
            let mut builder = ObjectBuilder::default();
            builder.name("cali_polr")?;
            // `cali_state2` (pinned by name) is shared with main under felix's root.
            builder.pin_root_path(&maps.root)?;
            let mut open = builder.open_memory(bytes)?;
            for mut m in open.maps_mut() {
                let name = m.name().to_string_lossy().into_owned();
                if let Some((_, fd)) = bind.iter().find(|(n, _)| *n == name) {
                    m.reuse_fd(*fd)?;
                }
            }
            for mut p in open.progs_mut() {
                if let Some(t) = attach() {
                    p.set_attach_type(t);
                }
            }
            open.load()
        })?;
        let load_time = start.elapsed();
        drop(progs);
        let prog = obj
            .progs()
            .find(|p| p.name() == POL_RULES_PROG)
            .ok_or_else(|| BpfError::Unexpected {
                op: op::PROG_LOAD,
                what: POL_RULES_PROG.into(),
                reason: "program missing from its object".into(),
            })?;
        // The program outlives its object through this fd (the object's own maps stay
        // referenced by the program).
        let fd = ops.run(op::PROG_OPEN, POL_RULES_PROG, || {
            prog.as_fd().try_clone_to_owned()
        })?;
        let id = ops.lib(op::PROG_OPEN, POL_RULES_PROG, || {
            Program::id_from_fd(fd.as_fd())
        })?;
        Ok(Self {
            fd,
            id,
            jump,
            load_time,
            adopted: false,
        })
    }

    /// The program's fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Puts the interpreter into the endpoint's policy `slot` (atomic for packets in flight);
    /// a slot already holding it is not rewritten. One program may serve every slot of its
    /// (mechanism, direction).
    pub fn install(&self, ops: &BpfOps, slot: u32) -> Result<(), BpfError> {
        if self.jump.prog_id(ops, slot)? == Some(self.id) {
            return Ok(());
        }
        self.jump.set(ops, slot, self.fd.as_fd())
    }

    /// How long `BPF_PROG_LOAD` (open, relocate, verify) took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Instructions the verifier processed for the interpreter (`verified_insns`).
    pub fn verified_insns(&self, ops: &BpfOps) -> Result<u32, BpfError> {
        let fd = self.fd.as_raw_fd();
        ops.run(op::MAP_LOOKUP, POL_RULES_PROG, || {
            let mut info = libbpf_sys::bpf_prog_info::default();
            let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
            // SAFETY: `fd` is an open program fd for the call; `info` and `len` are a properly
            // sized, writable buffer and its length, living across the call.
            let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
            if rc < 0 {
                return Err(std::io::Error::from_raw_os_error(-rc));
            }
            Ok(info.verified_insns)
        })
    }
}

/// The result of [`test_run_repeat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatRun {
    /// The program's return value (`TC_ACT_*`).
    pub verdict: i32,
    /// The kernel's average duration of one run.
    pub avg: Duration,
}

/// Runs the `sched_cls` program `prog` (normally a preamble: the whole chain) `repeat` times
/// on `packet` with `BPF_PROG_TEST_RUN` and returns its verdict and the kernel's average
/// duration per run.
pub fn test_run_repeat(
    ops: &BpfOps,
    prog: BorrowedFd<'_>,
    packet: &[u8],
    repeat: u32,
) -> Result<RepeatRun, BpfError> {
    let fd = prog.as_raw_fd();
    let mut out = vec![0u8; packet.len() + 256];
    ops.run(op::TEST_RUN, "repeat", || {
        let mut opts = libbpf_sys::bpf_test_run_opts {
            sz: size_of::<libbpf_sys::bpf_test_run_opts>() as _,
            data_in: packet.as_ptr().cast(),
            data_size_in: packet.len() as u32,
            data_out: out.as_mut_ptr().cast(),
            data_size_out: out.len() as u32,
            repeat: i32::try_from(repeat).unwrap_or(i32::MAX),
            ..Default::default()
        };
        // SAFETY: `fd` is an open program fd; `opts` points at buffers (`packet`, `out`) whose
        // sizes it states and which outlive the call.
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd, &mut opts) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RepeatRun {
            verdict: opts.retval as i32,
            avg: Duration::from_nanos(u64::from(opts.duration)),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_map_of_the_interpreter_is_named_cali_and_versioned_as_its_spec() {
        for bytes in [objects::POL_RULES, objects::POL_RULES_DEBUG] {
            let mut builder = ObjectBuilder::default();
            builder.name("cali_polr").expect("name");
            let open = builder.open_memory(bytes).expect("object parses");
            let names: Vec<String> = open
                .maps()
                .map(|m| m.name().to_string_lossy().into_owned())
                .collect();
            assert!(names.iter().all(|n| n.starts_with("cali_")), "{names:?}");
            for spec in ROOT_SPECS.iter().chain([&POL_EP_MAP, &STATE_MAP]) {
                assert!(
                    names.contains(&spec.versioned_name()),
                    "{} in {names:?}",
                    spec.versioned_name()
                );
                assert!(spec.versioned_name().len() <= 15);
            }
        }
    }
}
