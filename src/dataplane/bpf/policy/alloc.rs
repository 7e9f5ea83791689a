//! Space in `cali_pol_ops2` for record streams.

use std::collections::BTreeMap;

/// A run of records: `base..base + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Range {
    /// First record.
    pub base: u32,
    /// Records.
    pub len: u32,
}

/// Next-fit allocator of record ranges.
///
/// Invariants: a live range never overlaps another live range
/// (`live_ranges_never_overlap`); a freed range is handed out again only after the cursor
/// has gone round the whole space (`freed_space_is_reused_last`), so a packet still walking
/// records of a just-swapped policy keeps reading what was there.
#[derive(Debug, Clone)]
pub struct RecordAllocator {
    size: u32,
    /// Free runs, by start.
    free: BTreeMap<u32, u32>,
    cursor: u32,
}

impl RecordAllocator {
    /// All of `0..size` free.
    pub fn new(size: u32) -> Self {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Self {
            size,
            free,
            cursor: 0,
        }
    }

    /// A free range of `len` records (`len` 0: an empty range at 0), or `None` when no free
    /// run is long enough.
    pub fn alloc(&mut self, len: u32) -> Option<Range> {
        if len == 0 {
            return Some(Range { base: 0, len: 0 });
        }
        let pick = |from: u32, to: u32, free: &BTreeMap<u32, u32>| {
            free.range(..to).find_map(|(s, l)| {
                let start = (*s).max(from);
                (start < s + l && s + l - start >= len).then_some((*s, *l, start))
            })
        };
        let (s, l, start) =
            pick(self.cursor, self.size, &self.free).or_else(|| pick(0, self.size, &self.free))?;
        self.free.remove(&s);
        if start > s {
            self.free.insert(s, start - s);
        }
        let end = start + len;
        if end < s + l {
            self.free.insert(end, s + l - end);
        }
        self.cursor = end % self.size.max(1);
        Some(Range { base: start, len })
    }

    /// Returns `r` to the free space (merging with its neighbours).
    pub fn free(&mut self, r: Range) {
        if r.len == 0 {
            return;
        }
        let mut start = r.base;
        let mut len = r.len;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nl;
        }
        self.free.insert(start, len);
    }

    /// Marks `r` as used (rebuilding after a restart from what the maps point at).
    pub fn reserve(&mut self, r: Range) -> bool {
        if r.len == 0 {
            return true;
        }
        let Some((&s, &l)) = self.free.range(..=r.base).next_back() else {
            return false;
        };
        if r.base + r.len > s + l {
            return false;
        }
        self.free.remove(&s);
        if r.base > s {
            self.free.insert(s, r.base - s);
        }
        if r.base + r.len < s + l {
            self.free.insert(r.base + r.len, s + l - r.base - r.len);
        }
        true
    }

    /// Free records in total.
    pub fn free_records(&self) -> u64 {
        self.free.values().map(|l| u64::from(*l)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_ranges_never_overlap() {
        let mut a = RecordAllocator::new(100);
        let mut live: Vec<Range> = Vec::new();
        for i in 0..200u32 {
            if i % 3 == 2 && !live.is_empty() {
                let r = live.remove((i as usize * 7) % live.len());
                a.free(r);
            }
            if let Some(r) = a.alloc(1 + i % 9) {
                for o in &live {
                    assert!(
                        r.base + r.len <= o.base || o.base + o.len <= r.base,
                        "{r:?} overlaps {o:?}"
                    );
                }
                assert!(r.base + r.len <= 100);
                live.push(r);
            }
        }
        let used: u64 = live.iter().map(|r| u64::from(r.len)).sum();
        assert_eq!(a.free_records() + used, 100);
    }

    #[test]
    fn freed_space_is_reused_last() {
        let mut a = RecordAllocator::new(10);
        let x = a.alloc(3).expect("x");
        a.free(x);
        let y = a.alloc(3).expect("y");
        assert_eq!(y.base, 3, "not the range just freed");
        let z = a.alloc(4).expect("z");
        assert_eq!(z.base, 6);
        assert_eq!(a.alloc(3).map(|r| r.base), Some(0), "wraps round");
        assert_eq!(a.alloc(1), None);
        assert!(a.reserve(Range { base: 0, len: 0 }));
    }
}
