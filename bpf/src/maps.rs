//! Pinned maps: their specs (upstream's names prefixed `cali_`, a version in the name), typed
//! handles, the per-endpoint slot allocator, the bpffs mount and the start-of-day removal of
//! old map versions.
//!
//! Map versioning: a map's layout (type, key, value, size) is fixed for its versioned name
//! (`cali_iface4`); a layout change means a new version, and start of day removes the pins of
//! older versions ([`remove_old_versions`]).

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::layout::{Hook, IfaceState, JUMP_SLOTS, PROG_GENERIC_SLOTS};
use crate::ops::{op, BpfError, BpfOps};

/// The shape and name of one pinned map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSpec {
    /// Unversioned name (`cali_iface`).
    pub name: &'static str,
    /// Layout version (1: no suffix).
    pub version: u32,
    /// Kernel map type.
    pub map_type: MapType,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// `BPF_F_*` creation flags.
    pub flags: u32,
}

impl MapSpec {
    /// The name the map is created and pinned under: upstream's scheme, name then version
    /// when the version is above 1 (`cali_iface4`).
    pub fn versioned_name(&self) -> String {
        if self.version <= 1 {
            self.name.to_string()
        } else {
            format!("{}{}", self.name, self.version)
        }
    }

    /// Whether `file` is a pin of an older version of this map.
    pub fn is_older_version(&self, file: &str) -> bool {
        let Some(rest) = file.strip_prefix(self.name) else {
            return false;
        };
        if rest.is_empty() {
            return self.version > 1;
        }
        rest.bytes().all(|c| c.is_ascii_digit())
            && rest.parse::<u32>().is_ok_and(|v| v < self.version)
    }
}

/// `cali_iface`: ifindex -> [`IfaceState`] (upstream's version 4 layout).
pub const IFACE_MAP: MapSpec = MapSpec {
    name: "cali_iface",
    version: 4,
    map_type: MapType::Hash,
    key_size: 4,
    value_size: IfaceState::SIZE as u32,
    max_entries: 1000,
    flags: libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
};

/// The generic programs map of one TC direction (`cali_progs_ing2` / `cali_progs_egr2`).
pub fn progs_map(hook: Hook) -> MapSpec {
    MapSpec {
        name: match hook {
            Hook::Ingress => "cali_progs_ing",
            Hook::Egress => "cali_progs_egr",
        },
        version: 2,
        map_type: MapType::ProgArray,
        key_size: 4,
        value_size: 4,
        max_entries: PROG_GENERIC_SLOTS,
        flags: 0,
    }
}

/// The per-endpoint programs map of one TC direction (`cali_jump_ing2` / `cali_jump_egr2`).
pub fn jump_map(hook: Hook) -> MapSpec {
    MapSpec {
        name: match hook {
            Hook::Ingress => "cali_jump_ing",
            Hook::Egress => "cali_jump_egr",
        },
        version: 2,
        map_type: MapType::ProgArray,
        key_size: 4,
        value_size: 4,
        max_entries: JUMP_SLOTS,
        flags: 0,
    }
}

/// Creates a map of `spec`, not pinned, named by its versioned name.
pub(crate) fn create_map(ops: &BpfOps, spec: &MapSpec) -> Result<MapHandle, BpfError> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: spec.flags,
        ..Default::default()
    };
    let name = spec.versioned_name();
    ops.lib(op::MAP_CREATE, &name, || {
        MapHandle::create(
            spec.map_type,
            Some(&name),
            spec.key_size,
            spec.value_size,
            spec.max_entries,
            &opts,
        )
    })
}

/// A map pinned in the bpffs, open.
#[derive(Debug)]
pub struct PinnedMap {
    spec: MapSpec,
    path: PathBuf,
    handle: MapHandle,
}

impl PinnedMap {
    /// Opens the pin of `spec` in `dir`, or creates and pins the map. A pin of another layout
    /// under the same name is replaced (it cannot be ours: the name fixes the layout).
    pub fn open_or_create(ops: &BpfOps, spec: MapSpec, dir: &Path) -> Result<Self, BpfError> {
        let path = dir.join(spec.versioned_name());
        if path.exists() {
            let handle = ops.lib(op::MAP_OPEN, path.display(), || {
                MapHandle::from_pinned_path(&path)
            })?;
            let info = ops.lib(op::MAP_LOOKUP, path.display(), || handle.info())?;
            let i = &info.info;
            if handle.map_type() == spec.map_type
                && i.key_size == spec.key_size
                && i.value_size == spec.value_size
                && i.max_entries == spec.max_entries
            {
                return Ok(Self { spec, path, handle });
            }
            tracing::warn!(path = %path.display(), "pinned map has another layout: replacing it");
            ops.run(op::UNPIN, path.display(), || std::fs::remove_file(&path))?;
        }
        let mut handle = create_map(ops, &spec)?;
        ops.lib(op::MAP_PIN, path.display(), || handle.pin(&path))?;
        Ok(Self { spec, path, handle })
    }

    /// The map's spec.
    pub fn spec(&self) -> &MapSpec {
        &self.spec
    }

    /// The pin path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open map (for this crate's typed handles).
    pub(crate) fn handle(&self) -> &MapHandle {
        &self.handle
    }

    /// The map's fd (for reuse by a loading object).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }

    /// The kernel's id of the map.
    pub fn id(&self, ops: &BpfOps) -> Result<u32, BpfError> {
        let info = ops.lib(op::MAP_LOOKUP, self.path.display(), || self.handle.info())?;
        Ok(info.info.id)
    }

    pub(crate) fn update(&self, ops: &BpfOps, key: &[u8], value: &[u8]) -> Result<(), BpfError> {
        ops.lib(op::MAP_UPDATE, self.path.display(), || {
            self.handle.update(key, value, MapFlags::ANY)
        })
    }

    pub(crate) fn lookup(&self, ops: &BpfOps, key: &[u8]) -> Result<Option<Vec<u8>>, BpfError> {
        ops.lib(op::MAP_LOOKUP, self.path.display(), || {
            self.handle.lookup(key, MapFlags::ANY)
        })
    }

    /// Deletes `key`; a missing key is not an error.
    pub(crate) fn delete(&self, ops: &BpfOps, key: &[u8]) -> Result<(), BpfError> {
        match ops.lib(op::MAP_DELETE, self.path.display(), || {
            self.handle.delete(key)
        }) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }
}

impl PinnedMap {
    /// Every key of the map (one seam operation for the whole walk).
    pub(crate) fn keys(&self, ops: &BpfOps) -> Result<Vec<Vec<u8>>, BpfError> {
        ops.run(op::MAP_LOOKUP, self.path.display(), || {
            Ok(self.handle.keys().collect())
        })
    }

    /// Wraps an open map handle pinned at `path` (the caller checked the layout).
    pub(crate) fn from_parts(spec: MapSpec, path: PathBuf, handle: MapHandle) -> Self {
        Self { spec, path, handle }
    }
}

/// The `cali_iface` map, typed.
#[derive(Debug)]
pub struct IfaceMap(PinnedMap);

impl IfaceMap {
    /// Opens or creates the pinned `cali_iface` map in `dir`.
    pub fn open_or_create(ops: &BpfOps, dir: &Path) -> Result<Self, BpfError> {
        PinnedMap::open_or_create(ops, IFACE_MAP, dir).map(Self)
    }

    /// The underlying pinned map.
    pub fn map(&self) -> &PinnedMap {
        &self.0
    }

    /// Sets the state of `ifindex`.
    pub fn set(&self, ops: &BpfOps, ifindex: u32, state: &IfaceState) -> Result<(), BpfError> {
        self.0
            .update(ops, &ifindex.to_ne_bytes(), &state.to_bytes())
    }

    /// The state of `ifindex`.
    pub fn get(&self, ops: &BpfOps, ifindex: u32) -> Result<Option<IfaceState>, BpfError> {
        Ok(self
            .0
            .lookup(ops, &ifindex.to_ne_bytes())?
            .and_then(|v| IfaceState::from_bytes(&v)))
    }

    /// Removes `ifindex`.
    pub fn delete(&self, ops: &BpfOps, ifindex: u32) -> Result<(), BpfError> {
        self.0.delete(ops, &ifindex.to_ne_bytes())
    }

    /// Every ifindex with an entry (for the sweep of interfaces felix no longer programs).
    pub fn ifindices(&self, ops: &BpfOps) -> Result<Vec<u32>, BpfError> {
        ops.run(op::MAP_LOOKUP, self.0.path.display(), || {
            Ok(self
                .0
                .handle
                .keys()
                .filter_map(|k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?)))
                .collect())
        })
    }
}

/// A `prog_array` (generic or per-endpoint programs map), typed.
#[derive(Debug)]
pub struct JumpMap(PinnedMap);

impl JumpMap {
    /// Opens or creates the pinned jump map of `spec` in `dir`.
    pub fn open_or_create(ops: &BpfOps, spec: MapSpec, dir: &Path) -> Result<Self, BpfError> {
        PinnedMap::open_or_create(ops, spec, dir).map(Self)
    }

    /// The underlying pinned map.
    pub fn map(&self) -> &PinnedMap {
        &self.0
    }

    /// Puts the program `prog` at `slot` (atomic for packets in flight).
    pub fn set(&self, ops: &BpfOps, slot: u32, prog: BorrowedFd<'_>) -> Result<(), BpfError> {
        let fd = prog.as_raw_fd();
        self.0.update(ops, &slot.to_ne_bytes(), &fd.to_ne_bytes())
    }

    /// The id of the program at `slot`, if any.
    pub fn prog_id(&self, ops: &BpfOps, slot: u32) -> Result<Option<u32>, BpfError> {
        Ok(self
            .0
            .lookup(ops, &slot.to_ne_bytes())?
            .and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))))
    }

    /// Empties `slot`.
    pub fn clear(&self, ops: &BpfOps, slot: u32) -> Result<(), BpfError> {
        self.0.delete(ops, &slot.to_ne_bytes())
    }
}

/// Allocator of per-endpoint slots of one per-endpoint map. Its state is rebuilt after a
/// restart from the slots the surviving attachments use ([`SlotAllocator::mark_used`]).
#[derive(Debug, Clone)]
pub struct SlotAllocator {
    size: u32,
    used: BTreeSet<u32>,
    next: u32,
}

impl SlotAllocator {
    /// An allocator of slots `0..size`.
    pub fn new(size: u32) -> Self {
        Self {
            size,
            used: BTreeSet::new(),
            next: 0,
        }
    }

    /// A free slot, now used; `None` when full. Freed slots are reused last (round robin),
    /// so a slot a packet in flight may still jump to is not immediately re-filled.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.used.len() as u64 >= u64::from(self.size) {
            return None;
        }
        let mut s = self.next;
        while self.used.contains(&s) {
            s = (s + 1) % self.size;
        }
        self.used.insert(s);
        self.next = (s + 1) % self.size;
        Some(s)
    }

    /// Records `slot` as used (rebuilding after a restart); out-of-range slots are ignored.
    pub fn mark_used(&mut self, slot: u32) {
        if slot < self.size {
            self.used.insert(slot);
        }
    }

    /// Returns `slot` to the pool.
    pub fn free(&mut self, slot: u32) {
        self.used.remove(&slot);
    }

    /// Slots in use.
    pub fn used(&self) -> impl Iterator<Item = u32> + '_ {
        self.used.iter().copied()
    }
}

/// `BPF_FS_MAGIC` (statfs `f_type` of a bpffs).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `path` is on a bpffs.
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string and `st` a properly sized, writable
    // statfs buffer that lives across the call.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}

/// Mounts a bpffs at `mountpoint` (normally `/sys/fs/bpf`) unless one is mounted there.
///
/// Serialised within the process: two racing mounts would stack, and pins made under the
/// first would vanish under the second.
pub fn ensure_bpffs(ops: &BpfOps, mountpoint: &Path) -> Result<(), BpfError> {
    static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = MOUNTING.lock().unwrap_or_else(|e| e.into_inner());
    if is_bpffs(mountpoint) {
        return Ok(());
    }
    ops.run(op::MOUNT, mountpoint.display(), || {
        std::fs::create_dir_all(mountpoint)?;
        let target = CString::new(mountpoint.as_os_str().as_encoded_bytes()).map_err(io_invalid)?;
        // SAFETY: every pointer is a valid NUL-terminated string that outlives the call;
        // `data` may be null for bpffs.
        let rc = unsafe {
            libc::mount(
                c"bpffs".as_ptr(),
                target.as_ptr(),
                c"bpf".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    })
}

fn io_invalid(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
}

/// Removes the pins in `dir` of older versions of any of `specs` (start of day). Returns the
/// removed file names.
pub fn remove_old_versions(
    ops: &BpfOps,
    dir: &Path,
    specs: &[MapSpec],
) -> Result<Vec<String>, BpfError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if specs.iter().any(|s| s.is_older_version(&name)) {
            let path = entry.path();
            ops.run(op::UNPIN, path.display(), || std::fs::remove_file(&path))?;
            tracing::info!(pin = %path.display(), "removed old map version");
            removed.push(name);
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_follow_upstream_and_fit_the_kernel_name_limit() {
        assert_eq!(IFACE_MAP.versioned_name(), "cali_iface4");
        for hook in Hook::ALL {
            for spec in [progs_map(hook), jump_map(hook)] {
                let n = spec.versioned_name();
                assert!(n.starts_with("cali_") && n.len() <= 15, "{n}");
            }
        }
        assert_eq!(progs_map(Hook::Ingress).versioned_name(), "cali_progs_ing2");
    }

    #[test]
    fn only_older_versions_of_the_same_map_are_old() {
        assert!(IFACE_MAP.is_older_version("cali_iface"));
        assert!(IFACE_MAP.is_older_version("cali_iface3"));
        assert!(!IFACE_MAP.is_older_version("cali_iface4"));
        assert!(!IFACE_MAP.is_older_version("cali_iface5"));
        assert!(!IFACE_MAP.is_older_version("cali_ifacex"));
        assert!(!IFACE_MAP.is_older_version("cali_progs_ing2"));
        assert!(progs_map(Hook::Ingress).is_older_version("cali_progs_ing"));
        assert!(!progs_map(Hook::Ingress).is_older_version("cali_progs_egr"));
    }

    #[test]
    fn slot_allocator_reuses_freed_slots_last_and_rebuilds_from_used_slots() {
        let mut a = SlotAllocator::new(3);
        assert_eq!(a.alloc(), Some(0));
        assert_eq!(a.alloc(), Some(1));
        a.free(0);
        assert_eq!(a.alloc(), Some(2));
        assert_eq!(a.alloc(), Some(0));
        assert_eq!(a.alloc(), None);
        let mut b = SlotAllocator::new(4);
        b.mark_used(1);
        b.mark_used(9);
        assert_eq!(b.alloc(), Some(0));
        assert_eq!(b.alloc(), Some(2));
        assert_eq!(b.used().collect::<Vec<_>>(), vec![0, 1, 2]);
    }
}
