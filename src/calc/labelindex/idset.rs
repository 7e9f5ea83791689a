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
//!   one block.  Such appends skip the bitmap's search (a binary search of
//!   a block's sorted array, whose dependent loads were a tenth of the
//!   start-of-day profile): [`LargeSet`] knows its maximum and how many
//!   members share its block.
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
    /// Exactly one member.
    One(u32),
    /// 2 to [`SMALL_MAX`] members, unsorted.
    Small(Box<Vec<u32>>),
    /// More than [`SMALL_MAX`] members, as a compressed bitmap.
    Large(Box<LargeSet>),
}

/// Members in a block at most this many are kept as a sorted array by the
/// bitmap, beyond it as a bit array (the `roaring` crate's limit: only
/// performance depends on it matching).
const ARRAY_LIMIT: u32 = 4096;

/// A compressed bitmap with its maximum and the number of members in the
/// maximum's block of 65,536 ids.
///
/// Invariant: `max` is the largest member and `tail_len` counts the
/// members `m` with `m >> 16 == max >> 16` (the set is never empty).
#[derive(Clone, Debug, PartialEq)]
pub struct LargeSet {
    bits: RoaringBitmap,
    max: u32,
    tail_len: u32,
}

impl LargeSet {
    fn from_ids(ids: impl IntoIterator<Item = u32>) -> LargeSet {
        let bits: RoaringBitmap = ids.into_iter().collect();
        let mut s = LargeSet {
            bits,
            max: 0,
            tail_len: 0,
        };
        s.recount_tail();
        s
    }

    /// Recomputes `max` and `tail_len` from the bitmap.
    fn recount_tail(&mut self) {
        self.max = self.bits.max().unwrap_or(0);
        let block_start = self.max & !0xffff;
        self.tail_len = self.bits.range_cardinality(block_start..=self.max) as u32;
    }

    fn insert(&mut self, id: u32) {
        if id > self.max {
            // New maximum, so certainly absent.  Appending to a sorted
            // array block (`push`) is O(1); to a bit-array block `push`
            // would scan for the block's maximum, while `insert` sets one
            // bit.
            if id >> 16 == self.max >> 16 {
                if self.tail_len > ARRAY_LIMIT {
                    self.bits.insert(id);
                } else {
                    self.bits.push(id);
                }
                self.tail_len += 1;
            } else {
                self.bits.push(id);
                self.tail_len = 1;
            }
            self.max = id;
        } else if self.bits.insert(id) && id >> 16 == self.max >> 16 {
            self.tail_len += 1;
        }
    }

    /// Removes `id`; the caller converts the set to a smaller form before
    /// it can become empty.
    fn remove(&mut self, id: u32) {
        if !self.bits.remove(id) {
            return;
        }
        if id == self.max {
            self.recount_tail();
        } else if id >> 16 == self.max >> 16 {
            self.tail_len -= 1;
        }
    }

    fn len(&self) -> u64 {
        self.bits.len()
    }
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
                    let mut b = LargeSet::from_ids(v.iter().copied());
                    b.insert(id);
                    *self = IdSet::Large(Box::new(b));
                }
            }
            IdSet::Large(b) => b.insert(id),
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
                    *self = IdSet::Small(Box::new(b.bits.iter().collect()));
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
            IdSet::Large(b) => b.bits.iter().for_each(f),
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
                        if let IdSet::Large(l) = s {
                            let max = model.iter().next_back().copied().unwrap_or_default();
                            prop_assert_eq!(l.max, max);
                            let tail = model.range((max & !0xffff)..=max).count();
                            prop_assert_eq!(l.tail_len as usize, tail);
                        }
                    }
                    None => prop_assert!(model.is_empty()),
                }
            }
        }
    }

    /// The large form's bookkeeping (`max`, `tail_len`) stays exact
    /// through appends past the array/bit-array limit of one block, into
    /// the next block, removals of the maximum and of inner members, and
    /// re-inserts below the maximum.
    #[test]
    fn large_form_tracks_its_tail_across_block_forms() {
        fn check(s: &IdSet, model: &BTreeSet<u32>) {
            let IdSet::Large(l) = s else {
                panic!("expected the large form");
            };
            let max = *model.iter().next_back().expect("non-empty model");
            assert_eq!(l.max, max);
            let tail = model.range((max & !0xffff)..=max).count() as u32;
            assert_eq!(l.tail_len, tail, "tail_len at max {max}");
            assert_eq!(&members(s), model);
        }
        let mut model: BTreeSet<u32> = BTreeSet::new();
        let mut s = IdSet::One(0);
        model.insert(0);
        for id in (1..10_000).chain(65_536..65_600).chain(70_000..75_000) {
            s.insert(id);
            model.insert(id);
        }
        check(&s, &model);
        // Drop the top block back below the limit, then to nothing.
        for id in (65_536..75_000).rev() {
            if model.remove(&id) {
                assert!(!s.remove(id));
                if id % 97 == 0 || id < 65_540 {
                    check(&s, &model);
                }
            }
        }
        // Inner removals and re-inserts in the (bit-array) first block.
        for id in (100..9_000).step_by(7) {
            assert!(!s.remove(id));
            model.remove(&id);
        }
        check(&s, &model);
        for id in (100..9_000).step_by(14) {
            s.insert(id);
            model.insert(id);
        }
        s.insert(9_999);
        check(&s, &model);
        for id in 10_000..12_000 {
            s.insert(id);
            model.insert(id);
        }
        check(&s, &model);
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
