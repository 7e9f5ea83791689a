//! Copy-on-upgrade of a pinned map whose contents must survive a layout change or a resize
//! (the conntrack map): the seed's rule is that such a map is migrated, not rebuilt.
//!
//! # Invariants
//! * Crash safety: at every moment the map's final pin name holds a complete map, the old one
//!   or the new one. The new map is filled unpinned, pinned under a temporary name
//!   (`<name>_migrating`; a bpffs refuses names with a dot) and renamed over the final name in one `rename(2)`; only then is the
//!   old version's pin removed. A temporary pin found at start is a copy that was interrupted
//!   and is removed (the source is still in place).
//! * Nothing is lost that the new layout can hold: every entry is converted; an entry the
//!   conversion refuses or the new map cannot take is counted in [`Migration::Copied`].

use std::path::Path;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::maps::{create_map, MapSpec, PinnedMap};
use crate::ops::{op, BpfError, BpfOps};

/// Converts one (key, value) of an older layout into the current one; `None` drops it.
pub type Convert = fn(&[u8], &[u8]) -> Option<(Vec<u8>, Vec<u8>)>;

/// An older version a map can be migrated from.
#[derive(Debug, Clone, Copy)]
pub struct Upgrade {
    /// The older version's spec (its pin name is looked for).
    pub from: MapSpec,
    /// Its entries' conversion.
    pub convert: Convert,
}

/// What [`open_or_migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migration {
    /// The current version was pinned already, with the wanted layout.
    Opened,
    /// Nothing to migrate from: a new, empty map.
    Created,
    /// Copied from an older version (or the same version at another size).
    Copied {
        /// The source pin's file name.
        from: String,
        /// Entries copied.
        copied: usize,
        /// Entries the conversion refused or the new map could not take.
        dropped: usize,
    },
}

/// Keeps an entry as it is (a resize).
fn identity(k: &[u8], v: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    Some((k.to_vec(), v.to_vec()))
}

/// Opens the pin of `spec` in `dir`, or creates it, migrating the contents of the newest
/// older version in `upgrades` (newest first) or of a pin of `spec`'s name with another
/// capacity. See the module doc for the invariants.
pub fn open_or_migrate(
    ops: &BpfOps,
    dir: &Path,
    spec: MapSpec,
    upgrades: &[Upgrade],
) -> Result<(PinnedMap, Migration), BpfError> {
    let name = spec.versioned_name();
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}_migrating"));
    if tmp.exists() {
        tracing::warn!(pin = %tmp.display(), "removing an interrupted map migration");
        ops.run(op::UNPIN, tmp.display(), || std::fs::remove_file(&tmp))?;
    }
    let mut source: Option<(std::path::PathBuf, Convert)> = None;
    if path.exists() {
        let handle = ops.lib(op::MAP_OPEN, path.display(), || {
            MapHandle::from_pinned_path(&path)
        })?;
        let info = ops.lib(op::MAP_LOOKUP, path.display(), || handle.info())?;
        let i = &info.info;
        let same_shape = handle.map_type() == spec.map_type
            && i.key_size == spec.key_size
            && i.value_size == spec.value_size;
        if same_shape && i.max_entries == spec.max_entries {
            remove_sources(ops, dir, upgrades)?;
            return Ok((PinnedMap::from_parts(spec, path, handle), Migration::Opened));
        }
        if same_shape {
            source = Some((path.clone(), identity));
        } else {
            // The name fixes the layout: this pin cannot be a map of ours.
            tracing::warn!(pin = %path.display(), "pinned map has another layout: replacing it");
            ops.run(op::UNPIN, path.display(), || std::fs::remove_file(&path))?;
        }
    }
    if source.is_none() {
        source = upgrades
            .iter()
            .map(|u| (dir.join(u.from.versioned_name()), u.convert))
            .find(|(p, _)| p.exists());
    }
    let mut handle = create_map(ops, &spec)?;
    let Some((src_path, convert)) = source else {
        ops.lib(op::MAP_PIN, path.display(), || handle.pin(&path))?;
        return Ok((
            PinnedMap::from_parts(spec, path, handle),
            Migration::Created,
        ));
    };
    let src = ops.lib(op::MAP_OPEN, src_path.display(), || {
        MapHandle::from_pinned_path(&src_path)
    })?;
    let keys: Vec<Vec<u8>> = ops.run(op::MAP_LOOKUP, src_path.display(), || {
        Ok(src.keys().collect())
    })?;
    let (mut copied, mut dropped) = (0usize, 0usize);
    for k in keys {
        let Some(v) = ops.lib(op::MAP_LOOKUP, src_path.display(), || {
            src.lookup(&k, MapFlags::ANY)
        })?
        else {
            // Expired or evicted meanwhile.
            continue;
        };
        match convert(&k, &v) {
            Some((nk, nv)) => {
                match ops.lib(op::MAP_UPDATE, &name, || {
                    handle.update(&nk, &nv, MapFlags::ANY)
                }) {
                    Ok(()) => copied += 1,
                    // Full (a shrink) or refused: counted, the rest still copied.
                    Err(e) => {
                        tracing::debug!(error = %e, "entry not migrated");
                        dropped += 1;
                    }
                }
            }
            None => dropped += 1,
        }
    }
    ops.lib(op::MAP_PIN, tmp.display(), || handle.pin(&tmp))?;
    ops.run(op::SET_ASIDE, path.display(), || {
        std::fs::rename(&tmp, &path)
    })?;
    // The handle's recorded pin path is the temporary one; the map is pinned at `path` now.
    let from = src_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if src_path != path {
        ops.run(op::UNPIN, src_path.display(), || {
            std::fs::remove_file(&src_path)
        })?;
    }
    tracing::info!(map = %name, %from, copied, dropped, "migrated pinned map");
    drop(handle);
    let handle = ops.lib(op::MAP_OPEN, path.display(), || {
        MapHandle::from_pinned_path(&path)
    })?;
    Ok((
        PinnedMap::from_parts(spec, path, handle),
        Migration::Copied {
            from,
            copied,
            dropped,
        },
    ))
}

/// Removes the pins of older versions left by a migration that stopped after its rename.
fn remove_sources(ops: &BpfOps, dir: &Path, upgrades: &[Upgrade]) -> Result<(), BpfError> {
    for u in upgrades {
        let p = dir.join(u.from.versioned_name());
        if p.exists() {
            ops.run(op::UNPIN, p.display(), || std::fs::remove_file(&p))?;
        }
    }
    Ok(())
}
