//! IP-set ids: the calc graph's set ID string -> the `u64` id in `cali_ipsets2` keys, derived
//! as upstream Felix derives it (`felix/idalloc`): the first 8 bytes, little endian, of
//! SHA-256 over (`n` as 8 little-endian bytes ++ the ID string), for `n = 0, 1, ...` until
//! the candidate is neither 0 nor already taken by another ID. Ids are therefore stable
//! across restarts (the same set gets the same id unless a collision was resolved
//! differently), and unique among the sets this allocator holds.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Upstream's trial hash: candidate `n` for `id`.
pub fn trial_hash(id: &str, n: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(n.to_le_bytes());
    h.update(id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

/// Allocates set ids (see the module doc).
///
/// Invariant: a held ID maps to exactly one non-zero id and no two held IDs share one
/// (`ids_are_unique_nonzero_and_stable`).
#[derive(Debug, Default, Clone)]
pub struct SetIdAllocator {
    by_name: BTreeMap<String, u64>,
    by_id: BTreeMap<u64, String>,
}

impl SetIdAllocator {
    /// An empty allocator.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `name`, allocating it if needed.
    pub fn get_or_alloc(&mut self, name: &str) -> u64 {
        if let Some(id) = self.by_name.get(name) {
            return *id;
        }
        let mut n = 0u64;
        loop {
            let c = trial_hash(name, n);
            if c != 0 && !self.by_id.contains_key(&c) {
                self.by_name.insert(name.to_string(), c);
                self.by_id.insert(c, name.to_string());
                return c;
            }
            n = n.wrapping_add(1);
        }
    }

    /// The id of `name`, if allocated.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }

    /// Releases `name`; returns its id.
    pub fn release(&mut self, name: &str) -> Option<u64> {
        let id = self.by_name.remove(name)?;
        self.by_id.remove(&id);
        Some(id)
    }

    /// Ids held.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// No ids held.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_nonzero_and_stable() {
        let mut a = SetIdAllocator::new();
        let x = a.get_or_alloc("s:abc");
        assert_ne!(x, 0);
        assert_eq!(a.get_or_alloc("s:abc"), x, "stable while held");
        assert_eq!(x, trial_hash("s:abc", 0), "first candidate when free");
        let mut b = SetIdAllocator::new();
        assert_eq!(b.get_or_alloc("s:abc"), x, "same id after a restart");
        let ids: std::collections::BTreeSet<u64> = (0..1000)
            .map(|i| a.get_or_alloc(&format!("s:{i}")))
            .collect();
        assert_eq!(ids.len(), 1000);
        assert_eq!(a.release("s:abc"), Some(x));
        assert_eq!(a.get("s:abc"), None);
    }

    #[test]
    fn a_collision_takes_the_next_candidate() {
        let mut a = SetIdAllocator::new();
        // Occupy the first candidate of "s:b" with another name.
        let first = trial_hash("s:b", 0);
        a.by_id.insert(first, "other".into());
        a.by_name.insert("other".into(), first);
        assert_eq!(a.get_or_alloc("s:b"), trial_hash("s:b", 1));
    }
}
