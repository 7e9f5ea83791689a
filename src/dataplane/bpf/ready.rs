//! [`BpfReady`]: the interfaces whose BPF programs run on both hooks (READY in `cali_iface`),
//! published by `driver/bpf` and read by `manager/bpf-tables-vN`.
//!
//! This is how the `*tables` rules follow the attachments without holding the tables phase:
//! the accept chain of an interface is written only once the driver has programmed it (one
//! programming pass later), and is removed as soon as the endpoint goes. A failed attach of
//! one interface therefore leaves that interface dropped by the dispatch chains and everything
//! else programmed.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Debug, Default)]
struct State {
    names: BTreeSet<String>,
    version: u64,
}

/// See the module docs. Cheap to clone (a shared handle).
///
/// Invariant: `version` changes exactly when the set changes.
#[derive(Debug, Clone, Default)]
pub struct BpfReady(Arc<Mutex<State>>);

impl BpfReady {
    /// Replaces the set; returns whether it changed.
    pub fn set(&self, names: BTreeSet<String>) -> bool {
        let mut s = self.0.lock();
        if s.names == names {
            return false;
        }
        s.names = names;
        s.version += 1;
        true
    }

    /// The set and its version.
    pub fn snapshot(&self) -> (u64, BTreeSet<String>) {
        let s = self.0.lock();
        (s.version, s.names.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_moves_only_when_the_set_changes() {
        let r = BpfReady::default();
        let (v0, s0) = r.snapshot();
        assert!(s0.is_empty());
        assert!(r.set(["cali1".to_string()].into()));
        let (v1, s1) = r.snapshot();
        assert_ne!(v0, v1);
        assert!(s1.contains("cali1"));
        assert!(!r.set(["cali1".to_string()].into()));
        assert_eq!(r.snapshot().0, v1);
    }
}
