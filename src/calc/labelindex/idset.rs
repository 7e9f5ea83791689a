//! A set of small integer ids (endpoint or parent ids of the IP-set index),
//! sized to how many members it has.
//!
//! The index keeps one such set per `(label key, label value)` pair of
//! every endpoint in the cluster.  Most pairs belong to one endpoint (pod
//! ids, hashes), a few to a large share of the cluster (`env=prod`).  Hash
//! sets served both badly: 40 bytes even for one member, and at scale a
//! random memory access per insert.  Here:
//!
//! * one member is stored inline;
//! * up to [`SMALL_MAX`] members in a short unsorted vector;
//! * beyond that, a compressed bitmap (sorted arrays or bitmaps per block
//!   of 65,536 ids), where ids allocated in sequence insert at the end of
//!   one block.
//!
//! Invariant: a set is never empty and never holds an id twice; the
//! representation is chosen by size only (a set that shrinks returns to a
//! smaller form), so equal sets have equal forms.

use roaring::RoaringBitmap;

/// Largest member count kept in the small form.
pub const SMALL_MAX: usize = 16;

/// See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub enum IdSet {
    One(u32),
    Small(Box<Vec<u32>>),
    Large(Box<RoaringBitmap>),
}

impl IdSet {
    /// Adds `id` (no-op if present).
    pub fn insert(&mut self, id: u32) {
        match self {
            IdSet::One(existing) => {
                if *existing != id {
                    *self = IdSet::Small(Box::new(vec![*existing, id]));
                }
            }
            IdSet::Small(v) => {
                if v.contains(&id) {
                    return;
                }
                if v.len() < SMALL_MAX {
                    v.push(id);
                } else {
                    let mut b: RoaringBitmap = v.iter().copied().collect();
                    b.insert(id);
                    *self = IdSet::Large(Box::new(b));
                }
            }
            IdSet::Large(b) => {
                // Not `push`: it finds a bitmap block's maximum by scanning
                // the block, which costs more than the insert it saves.
                b.insert(id);
            }
        }
    }

    /// Removes `id`; returns true when the set is now empty (the caller
    /// drops it: an `IdSet` is never empty).
    pub fn remove(&mut self, id: u32) -> bool {
        match self {
            IdSet::One(existing) => *existing == id,
            IdSet::Small(v) => {
                if let Some(pos) = v.iter().position(|e| *e == id) {
                    v.swap_remove(pos);
                }
                if v.len() == 1 {
                    *self = IdSet::One(v[0]);
                }
                false
            }
            IdSet::Large(b) => {
                b.remove(id);
                if b.len() <= SMALL_MAX as u64 {
                    *self = IdSet::Small(Box::new(b.iter().collect()));
                }
                false
            }
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        match self {
            IdSet::One(_) => 1,
            IdSet::Small(v) => v.len(),
            IdSet::Large(b) => b.len() as usize,
        }
    }

    /// Never true (see the invariant); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each member.
    pub fn for_each(&self, f: &mut impl FnMut(u32)) {
        match self {
            IdSet::One(id) => f(*id),
            IdSet::Small(v) => v.iter().for_each(|id| f(*id)),
            IdSet::Large(b) => b.iter().for_each(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn members(s: &IdSet) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        s.for_each(&mut |id| {
            assert!(out.insert(id), "id {id} reported twice");
        });
        out
    }

    fn expected_form(n: usize) -> &'static str {
        match n {
            1 => "one",
            2..=SMALL_MAX => "small",
            _ => "large",
        }
    }

    fn form(s: &IdSet) -> &'static str {
        match s {
            IdSet::One(_) => "one",
            IdSet::Small(_) => "small",
            IdSet::Large(_) => "large",
        }
    }

    proptest! {
        /// Any sequence of inserts and removes leaves exactly the members a
        /// model set has, in the form its size calls for, and `remove`
        /// reports empty exactly when the model is empty.
        #[test]
        fn behaves_as_a_set(ops in proptest::collection::vec((any::<bool>(), 0u32..200_000), 1..400)) {
            let mut model: BTreeSet<u32> = BTreeSet::new();
            let mut set: Option<IdSet> = None;
            for (add, raw) in ops {
                // Bias ids towards a small range so removes hit members.
                let id = if raw % 3 == 0 { raw } else { raw % 64 };
                if add {
                    model.insert(id);
                    match &mut set {
                        Some(s) => s.insert(id),
                        None => set = Some(IdSet::One(id)),
                    }
                } else if let Some(s) = &mut set {
                    let was = model.remove(&id);
                    let empty = s.remove(id);
                    prop_assert_eq!(empty, model.is_empty(), "remove of {} (member: {})", id, was);
                    if empty {
                        set = None;
                    }
                }
                match &set {
                    Some(s) => {
                        prop_assert_eq!(&members(s), &model);
                        prop_assert_eq!(s.len(), model.len());
                        prop_assert_eq!(form(s), expected_form(model.len()));
                    }
                    None => prop_assert!(model.is_empty()),
                }
            }
        }
    }

    #[test]
    fn grows_and_shrinks_through_every_form() {
        let mut s = IdSet::One(0);
        for id in 1..100 {
            s.insert(id);
        }
        assert_eq!(form(&s), "large");
        s.insert(50);
        assert_eq!(s.len(), 100);
        for id in 0..99 {
            assert!(!s.remove(id));
        }
        assert_eq!(s, IdSet::One(99));
        assert!(s.remove(99));
    }
}
