//! The layout identity of the programs and jump maps, and the checks that decide whether a
//! restarted loader may adopt what an earlier run left attached instead of re-loading it.
//!
//! # Invariants
//! * `<mech>/cali_layout` holds the [`layout_identity`] of the binary that created the jump
//!   maps pinned beside it: `BpfDataplane::start` sets an earlier run's jump maps aside
//!   (with the pin and the interpreters pinned there) whenever the identity differs or is
//!   missing, and only then pins its own. Every program loaded against the maps of that
//!   directory was therefore built from the same objects, with the same slot layout, globals
//!   layout and debug setting.
//! * A program is adopted only if every map it uses that has a pin of its name (in the root
//!   or the mechanism's directory) is the map pinned now ([`uses_current_maps`]): a map
//!   replaced since (conntrack migrated to a new capacity, a pin removed behind felix's back)
//!   makes the program be loaded again. Maps without a pin of their name are the program's
//!   own (`.rodata`, per-CPU scratch).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::OnceLock;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::attach::Mechanism;
use crate::layout::*;
use crate::maps::{jump_map, progs_map, MapSpec, PinnedMap};
use crate::ops::{op, BpfError, BpfOps};

/// `<mech>/cali_layout`: one entry, the [`layout_identity`] of the jump maps beside it.
pub const LAYOUT_MAP: MapSpec = MapSpec {
    name: "cali_layout",
    version: 1,
    map_type: MapType::Array,
    key_size: 4,
    value_size: 8,
    max_entries: 1,
    flags: 0,
};

/// Bumped by hand for a change of meaning the hashed inputs below do not show.
const LAYOUT_EPOCH: u64 = 1;

/// FNV-1a, 64 bits: stable across builds and Rust versions (unlike `std`'s hasher).
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn spec_bytes(s: &MapSpec) -> Vec<u8> {
    let mut b = s.versioned_name().into_bytes();
    for v in [
        u32::from(s.map_type),
        s.key_size,
        s.value_size,
        s.max_entries,
        s.flags,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// The identity of everything a preamble, the generic programs and the policy interpreter
/// agree on with the jump maps: the compiled objects, the jump maps' specs, the generic
/// slots, the globals' size and the debug setting (`debug` loads other programs and fills
/// other slots). Equal identities mean a program loaded by either binary fits the other's
/// maps.
pub fn layout_identity(debug: bool) -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let mut h = fnv(0xcbf2_9ce4_8422_2325, &LAYOUT_EPOCH.to_le_bytes());
        for obj in [
            crate::dataplane::objects::TC_PREAMBLE,
            crate::dataplane::objects::TC_MAIN,
            crate::dataplane::objects::TC_MAIN_DEBUG,
            crate::dataplane::objects::POLICY,
            crate::dataplane::objects::POLICY_DEBUG,
            crate::polmaps::objects::POL_RULES,
            crate::polmaps::objects::POL_RULES_DEBUG,
        ] {
            h = fnv(h, &(obj.len() as u64).to_le_bytes());
            h = fnv(h, obj);
        }
        for hook in Hook::ALL {
            h = fnv(h, &spec_bytes(&progs_map(hook)));
            h = fnv(h, &spec_bytes(&jump_map(hook)));
        }
        for v in [
            PROG_INDEX_MAIN,
            PROG_INDEX_ALLOWED,
            PROG_INDEX_DROP,
            PROG_DEBUG_OFFSET,
            TcGlobals::SIZE as u32,
        ] {
            h = fnv(h, &v.to_le_bytes());
        }
        h
    });
    fnv(base, &[u8::from(debug)])
}

/// The identity pinned in `dir` (a mechanism's directory), if any. Nothing is created.
pub fn pinned_identity(ops: &BpfOps, dir: &Path) -> Result<Option<u64>, BpfError> {
    let path = dir.join(LAYOUT_MAP.versioned_name());
    if !path.exists() {
        return Ok(None);
    }
    let map = ops.lib(op::MAP_OPEN, path.display(), || {
        MapHandle::from_pinned_path(&path)
    })?;
    let value = ops.lib(op::MAP_LOOKUP, path.display(), || {
        map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
    })?;
    Ok(value
        .as_deref()
        .and_then(|v| v.get(..8))
        .and_then(|v| v.try_into().ok())
        .map(u64::from_ne_bytes))
}

/// Pins `identity` in `dir` (creating the map if needed).
pub fn pin_identity(ops: &BpfOps, dir: &Path, identity: u64) -> Result<(), BpfError> {
    let map = PinnedMap::open_or_create(ops, LAYOUT_MAP, dir)?;
    map.update(ops, &0u32.to_ne_bytes(), &identity.to_ne_bytes())
}

/// The ids of the maps program `prog` uses (`bpf_prog_info.map_ids`).
pub fn program_map_ids(ops: &BpfOps, prog: BorrowedFd<'_>) -> Result<Vec<u32>, BpfError> {
    let fd = prog.as_raw_fd();
    ops.run(op::PROG_OPEN, "program info", || {
        let mut ids: Vec<u32> = Vec::new();
        // Twice: the first call says how many maps, the second fills the ids (a map count
        // that grew in between is impossible: a loaded program's maps are fixed).
        for _ in 0..2 {
            let mut info = libbpf_sys::bpf_prog_info {
                nr_map_ids: ids.len() as u32,
                map_ids: ids.as_mut_ptr() as u64,
                ..Default::default()
            };
            let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
            // SAFETY: `fd` is an open program fd for the call; `info` and `len` are a
            // properly sized, writable buffer and its length, and `info.map_ids` points at
            // `ids`, which has room for the `nr_map_ids` ids the kernel writes at most.
            let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
            if rc < 0 {
                return Err(std::io::Error::from_raw_os_error(-rc));
            }
            let n = info.nr_map_ids as usize;
            if n <= ids.len() {
                ids.truncate(n);
                return Ok(ids);
            }
            ids = vec![0; n];
        }
        Err(std::io::Error::other(
            "map count changed between two queries",
        ))
    })
}

/// The kernel's name of program `prog` (at most 15 bytes of its function name).
pub fn program_name(ops: &BpfOps, prog: BorrowedFd<'_>) -> Result<String, BpfError> {
    let fd = prog.as_raw_fd();
    ops.run(op::PROG_OPEN, "program info", || {
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: `fd` is an open program fd for the call; `info` and `len` are a properly
        // sized, writable buffer and its length, living across the call (no array pointers
        // are set, so the kernel writes nothing else).
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
        if rc < 0 {
            return Err(std::io::Error::from_raw_os_error(-rc));
        }
        let bytes: Vec<u8> = info
            .name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    })
}

/// The ids of the maps pinned in felix's root and in one mechanism's directory, by pin name
/// (a map of the mechanism's directory wins over a root map of the same name). Pins that are
/// not maps (programs, links) and subdirectories are skipped.
#[derive(Debug, Clone, Default)]
pub struct PinnedMaps(BTreeMap<String, u32>);

impl PinnedMaps {
    /// Reads the pins of `root` and `root/<mech>`.
    pub fn scan(ops: &BpfOps, root: &Path, mech: Mechanism) -> Result<Self, BpfError> {
        let mut out = BTreeMap::new();
        for dir in [root.to_path_buf(), root.join(mech.dir_name())] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(true) {
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = entry.path();
                let Ok(map) = ops.lib(op::MAP_OPEN, path.display(), || {
                    MapHandle::from_pinned_path(&path)
                }) else {
                    continue;
                };
                let info = ops.lib(op::MAP_LOOKUP, path.display(), || map.info())?;
                out.insert(name, info.info.id);
            }
        }
        Ok(Self(out))
    }

    /// The id of the map pinned as `name`.
    pub fn id(&self, name: &str) -> Option<u32> {
        self.0.get(name).copied()
    }
}

/// Whether every map `prog` uses that has a pin of its name in `pinned` is that pinned map
/// (see the module doc). A map that cannot be opened by id any more counts as replaced.
pub fn uses_current_maps(
    ops: &BpfOps,
    prog: BorrowedFd<'_>,
    pinned: &PinnedMaps,
) -> Result<bool, BpfError> {
    for id in program_map_ids(ops, prog)? {
        let Ok(map) = ops.lib(op::MAP_OPEN, format!("map id {id}"), || {
            MapHandle::from_map_id(id)
        }) else {
            return Ok(false);
        };
        let info = ops.lib(op::MAP_LOOKUP, format!("map id {id}"), || map.info())?;
        let name = info.name().map(str::to_owned).unwrap_or_default();
        if pinned.id(&name).is_some_and(|current| current != id) {
            tracing::debug!(map = %name, id, "an adoptable program uses a replaced map");
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_stable_and_tells_the_debug_setting_apart() {
        assert_eq!(layout_identity(false), layout_identity(false));
        assert_ne!(layout_identity(false), layout_identity(true));
        assert_eq!(fnv(0xcbf2_9ce4_8422_2325, b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
