//! Id-indexed storage for the all-endpoint index, in fixed-size chunks.
//!
//! One `Vec` of every endpoint in the cluster doubled as it grew: each
//! doubling copied every entry and touched a fresh buffer twice the size
//! (on the 250,000-endpoint benchmark, about 30 MB copied and faulted in
//! twice).  Chunks never move once allocated.
//!
//! Invariants: ids are dense from zero (`len` slots exist); a slot is
//! `None` until filled and after it is taken; chunks are all
//! [`CHUNK`] slots long.

use std::ops::{Index, IndexMut};

/// Slots per chunk.
const CHUNK: usize = 4096;

/// See the module docs.
pub struct Slots<T> {
    chunks: Vec<Box<[Option<T>]>>,
    len: usize,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slots<T> {
    /// Number of slots (filled or not).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an empty slot, returning its id.
    pub fn push_empty(&mut self) -> u32 {
        if self.len == self.chunks.len() * CHUNK {
            self.chunks
                .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
        }
        self.len += 1;
        (self.len - 1) as u32
    }

    /// Slot `i`, adding empty slots up to it first if it does not exist.
    pub fn grow_to(&mut self, i: usize) -> &mut Option<T> {
        while self.len <= i {
            self.push_empty();
        }
        &mut self[i]
    }

    /// Slot `i`, or `None` if it does not exist.
    pub fn get(&self, i: usize) -> Option<&Option<T>> {
        if i >= self.len {
            return None;
        }
        self.chunks.get(i / CHUNK).map(|c| &c[i % CHUNK])
    }

    /// Slot `i` for writing, or `None` if it does not exist.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Option<T>> {
        if i >= self.len {
            return None;
        }
        self.chunks.get_mut(i / CHUNK).map(|c| &mut c[i % CHUNK])
    }

    /// Every slot, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Option<T>> {
        self.chunks.iter().flat_map(|c| c.iter()).take(self.len)
    }
}

impl<T> Index<usize> for Slots<T> {
    type Output = Option<T>;
    fn index(&self, i: usize) -> &Option<T> {
        assert!(i < self.len, "slot {i} out of {}", self.len);
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T> IndexMut<usize> for Slots<T> {
    fn index_mut(&mut self, i: usize) -> &mut Option<T> {
        assert!(i < self.len, "slot {i} out of {}", self.len);
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids are dense across chunk boundaries, slots start empty, and
    /// nothing past `len` is reachable.
    #[test]
    fn dense_ids_across_chunks() {
        let mut s: Slots<u32> = Slots::default();
        for i in 0..(CHUNK as u32 * 2 + 3) {
            assert_eq!(s.push_empty(), i);
            assert_eq!(s[i as usize], None);
            s[i as usize] = Some(i * 2);
        }
        assert_eq!(s.len(), CHUNK * 2 + 3);
        assert_eq!(s.get(CHUNK * 2 + 3), None);
        assert_eq!(s.get(CHUNK + 1), Some(&Some((CHUNK as u32 + 1) * 2)));
        let all: Vec<u32> = s.iter().flatten().copied().collect();
        assert_eq!(all.len(), CHUNK * 2 + 3);
        assert!(all.iter().enumerate().all(|(i, v)| *v == i as u32 * 2));
        if let Some(slot) = s.get_mut(7) {
            *slot = None;
        }
        assert_eq!(s.iter().flatten().count(), CHUNK * 2 + 2);
    }

    /// `grow_to` adds exactly the missing slots, empty, and leaves the
    /// filled ones alone.
    #[test]
    fn grow_to_adds_empty_slots() {
        let mut s: Slots<u32> = Slots::default();
        *s.grow_to(2) = Some(2);
        assert_eq!(s.len(), 3);
        assert_eq!(s.iter().cloned().collect::<Vec<_>>(), [None, None, Some(2)]);
        *s.grow_to(CHUNK + 1) = Some(9);
        assert_eq!(s.len(), CHUNK + 2);
        assert_eq!(s.grow_to(2), &mut Some(2));
        assert_eq!(s.len(), CHUNK + 2);
        assert_eq!(s.iter().flatten().count(), 2);
    }
}
