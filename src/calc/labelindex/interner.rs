//! A reference-counted string interner for label keys and values.
//!
//! The IP-set index holds every endpoint in the cluster; storing each
//! endpoint's labels as interned `(key, value)` id pairs instead of owned
//! strings is what keeps it within its memory budget (most label values are
//! shared by many endpoints).
//!
//! Strings live back to back in fixed-size chunks rather than in an
//! allocation each, and the lookup table holds bare ids hashed by the text
//! they name.  A unique value (a pod id, a hash) costs its bytes plus about
//! 30 bytes of bookkeeping, where an `Arc<str>` per string and a map keyed
//! by it cost about 80 more (on the 100,000-customer benchmark: 34 MB less
//! live heap).  Chunks are never grown in place: one growing buffer left
//! its doubled-away copies behind as memory the allocator did not reuse
//! (peak RSS went up, not down).
//!
//! Invariants:
//! * every `intern` is matched by exactly one `release` of the returned id;
//!   an id is freed (and may be reused) when its count reaches zero, so
//!   churn with ever-new values does not grow the table;
//! * the chunks hold every live string at its entry's span (a string never
//!   crosses chunks); bytes of freed strings stay until they are more than
//!   half the text held, when the live strings are copied into fresh chunks
//!   (ids do not change), so the chunks hold at most about twice the live
//!   text;
//! * the table holds exactly the ids whose count is not zero;
//! * a slot of the short-string front holds either nothing or a live id
//!   together with the packing of that id's text: a slot is filled only
//!   with an id just found or created for that text, and emptied when the
//!   id it holds is freed (so a reused id is never reached through a
//!   stale slot).  The packing of a string of at most 16 bytes determines
//!   it, so a hit needs no comparison with the text.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::model::Labels;

/// Interned labels: `(key id, value id)` pairs sorted by key id.
pub type IdLabels = Box<[(u32, u32)]>;

/// Freed bytes below this are never worth a compaction.
const MIN_COMPACT_GARBAGE: usize = 64 * 1024;

/// Size of one chunk of text (a longer string gets a chunk of its own).
const CHUNK: usize = 64 * 1024;

/// One id's string and reference count.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    chunk: u32,
    /// Byte offset of the string in its chunk.
    off: u32,
    len: u32,
    /// References; zero marks a free id.
    refs: u32,
}

/// See the module docs.
pub struct Interner {
    /// The text of every live string (plus freed text until compaction);
    /// only the last chunk is appended to, within its capacity.
    arena: Vec<String>,
    /// Bytes of text in all chunks.
    held: usize,
    /// Id -> span and count.
    entries: Vec<Entry>,
    /// Live ids, hashed by their text.
    table: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    free: Vec<u32>,
    /// Arena bytes that belong to freed ids.
    garbage: usize,
    /// Compaction waits for at least this much garbage.
    min_garbage: usize,
    /// Direct-mapped front of `table` for strings of at most 16 bytes
    /// (most label keys and values), see [`ShortKey`].
    short: Box<[ShortSlot]>,
}

/// Slots in [`Interner::short`] (a power of two).
const SHORT_SLOTS: usize = 1024;

/// A string of at most 16 bytes, packed so that equal packings mean equal
/// strings: its length plus its first and last 8 bytes (overlapping for
/// 8-16 bytes), or its first and last 4 (4-7 bytes), or its bytes (0-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ShortKey {
    len: u8,
    words: [u64; 2],
}

impl ShortKey {
    fn of(s: &[u8]) -> Option<ShortKey> {
        fn four(c: Option<&[u8; 4]>) -> u64 {
            c.map_or(0, |c| u64::from(u32::from_le_bytes(*c)))
        }
        fn eight(c: Option<&[u8; 8]>) -> u64 {
            c.map_or(0, |c| u64::from_le_bytes(*c))
        }
        let words = match s.len() {
            0..=3 => [s.iter().fold(0u64, |w, b| (w << 8) | u64::from(*b)), 0],
            4..=7 => [four(s.first_chunk()) | (four(s.last_chunk()) << 32), 0],
            8..=16 => [eight(s.first_chunk()), eight(s.last_chunk())],
            _ => return None,
        };
        Some(ShortKey {
            len: s.len() as u8,
            words,
        })
    }

    fn slot(&self) -> usize {
        let h = (self.words[0] ^ self.words[1].rotate_left(29) ^ u64::from(self.len))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - SHORT_SLOTS.trailing_zeros())) as usize
    }
}

/// One slot of the short-string front: `id` is [`NO_ID`] or a live id
/// whose text packs to `key`.
#[derive(Clone, Copy, Debug)]
struct ShortSlot {
    key: ShortKey,
    id: u32,
}

const NO_ID: u32 = u32::MAX;

impl Default for ShortSlot {
    fn default() -> Self {
        ShortSlot {
            key: ShortKey::default(),
            id: NO_ID,
        }
    }
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            arena: Vec::new(),
            held: 0,
            entries: Vec::new(),
            table: HashTable::new(),
            hasher: Default::default(),
            free: Vec::new(),
            garbage: 0,
            min_garbage: MIN_COMPACT_GARBAGE,
            short: vec![ShortSlot::default(); SHORT_SLOTS].into_boxed_slice(),
        }
    }
}

impl std::fmt::Debug for Interner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interner")
            .field("strings", &self.table.len())
            .field("text_bytes", &self.held)
            .finish()
    }
}

/// The text of `e` in `arena`.
fn text<'a>(arena: &'a [String], e: &Entry) -> &'a str {
    let (off, len) = (e.off as usize, e.len as usize);
    arena
        .get(e.chunk as usize)
        .and_then(|c| c.get(off..off + len))
        .unwrap_or("")
}

/// Appends `s` to the chunks, returning its place (`len` is `s.len()`,
/// which the caller has checked fits in `u32`).
fn push_text(arena: &mut Vec<String>, s: &str) -> (u32, u32) {
    let fits = arena
        .last()
        .is_some_and(|c| c.capacity() - c.len() >= s.len());
    if !fits {
        arena.push(String::with_capacity(CHUNK.max(s.len())));
    }
    let chunk = arena.len() - 1;
    let c = &mut arena[chunk];
    let off = c.len();
    c.push_str(s);
    (chunk as u32, off as u32)
}

/// Whether `e` in `arena` holds exactly the bytes `s`.  Lengths are
/// compared before the text is touched; label keys and values are mostly
/// short, and comparing them as one or two fixed-size words inline costs
/// a fraction of a `memcmp` call (the interner's probes were half memcmp).
fn holds(arena: &[String], e: &Entry, s: &[u8]) -> bool {
    if e.len as usize != s.len() {
        return false;
    }
    let off = e.off as usize;
    arena
        .get(e.chunk as usize)
        .and_then(|c| c.as_bytes().get(off..off + s.len()))
        .is_some_and(|t| same_bytes(t, s))
}

/// Byte equality of two slices of equal length, without a library call
/// for lengths up to 16.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    fn words<const N: usize>(a: &[u8], b: &[u8]) -> Option<bool> {
        Some(
            a.first_chunk::<N>()? == b.first_chunk::<N>()?
                && a.last_chunk::<N>()? == b.last_chunk::<N>()?,
        )
    }
    match a.len() {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => words::<4>(a, b).unwrap_or(false),
        8..=16 => words::<8>(a, b).unwrap_or(false),
        _ => a == b,
    }
}

impl Interner {
    /// The table slot of `s`, if interned.
    fn find(&self, hash: u64, s: &str) -> Option<u32> {
        let (arena, entries) = (&self.arena, &self.entries);
        let s = s.as_bytes();
        self.table
            .find(hash, |id| {
                entries
                    .get(*id as usize)
                    .is_some_and(|e| holds(arena, e, s))
            })
            .copied()
    }

    /// The id of `s`, adding a reference (creating the entry if needed).
    pub fn intern(&mut self, s: &str) -> u32 {
        let short = ShortKey::of(s.as_bytes());
        if let Some(id) = short.and_then(|k| self.short_hit(&k)) {
            self.entries[id as usize].refs += 1;
            return id;
        }
        let id = self.intern_slow(s);
        if let Some(k) = short {
            self.short[k.slot()] = ShortSlot { key: k, id };
        }
        id
    }

    /// The id the short-string front holds for `k`, if any.
    fn short_hit(&self, k: &ShortKey) -> Option<u32> {
        let slot = self.short.get(k.slot())?;
        (slot.id != NO_ID && slot.key == *k).then_some(slot.id)
    }

    /// [`Interner::intern`] through the table.
    fn intern_slow(&mut self, s: &str) -> u32 {
        let hash = self.hasher.hash_one(s);
        if let Some(id) = self.find(hash, s) {
            self.entries[id as usize].refs += 1;
            return id;
        }
        // Labels are at most a few hundred bytes (the datastore validates
        // them); anything that does not fit a chunk index is stored as ""
        // rather than corrupting the spans.
        let s = if u32::try_from(s.len()).is_ok() {
            s
        } else {
            ""
        };
        let (chunk, off) = push_text(&mut self.arena, s);
        self.held += s.len();
        let e = Entry {
            chunk,
            off,
            len: s.len() as u32,
            refs: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = e;
                id
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        let (arena, entries, hasher) = (&self.arena, &self.entries, &self.hasher);
        self.table.insert_unique(hash, id, |id| {
            hasher.hash_one(text(arena, &entries[*id as usize]))
        });
        id
    }

    /// Drops one reference to `id`.
    pub fn release(&mut self, id: u32) {
        let Some(e) = self.entries.get_mut(id as usize) else {
            return;
        };
        if e.refs == 0 {
            return;
        }
        e.refs -= 1;
        if e.refs > 0 {
            return;
        }
        let e = *e;
        if let Some(k) = ShortKey::of(text(&self.arena, &e).as_bytes()) {
            if let Some(slot) = self.short.get_mut(k.slot()) {
                if slot.id == id {
                    *slot = ShortSlot::default();
                }
            }
        }
        let hash = self.hasher.hash_one(text(&self.arena, &e));
        if let Ok(slot) = self.table.find_entry(hash, |x| *x == id) {
            slot.remove();
        }
        self.free.push(id);
        self.garbage += e.len as usize;
        if self.garbage >= self.min_garbage && self.garbage * 2 > self.held {
            self.compact();
        }
    }

    /// Copies the live strings into a fresh arena; ids and the table are
    /// unchanged (the table hashes text, which does not move in meaning).
    fn compact(&mut self) {
        let mut arena = Vec::new();
        for e in self.entries.iter_mut() {
            if e.refs == 0 {
                *e = Entry::default();
                continue;
            }
            let (chunk, off) = push_text(&mut arena, text(&self.arena, e));
            e.chunk = chunk;
            e.off = off;
        }
        self.arena = arena;
        self.held -= self.garbage;
        self.garbage = 0;
    }

    /// The id of `s`, if interned (no reference added).
    pub fn get(&self, s: &str) -> Option<u32> {
        if let Some(id) = ShortKey::of(s.as_bytes()).and_then(|k| self.short_hit(&k)) {
            return Some(id);
        }
        self.find(self.hasher.hash_one(s), s)
    }

    /// The string of `id` (empty for an id not in use).
    pub fn resolve(&self, id: u32) -> &str {
        match self.entries.get(id as usize) {
            Some(e) if e.refs > 0 => text(&self.arena, e),
            _ => "",
        }
    }

    /// Interns a label map (one reference per key and value).
    pub fn intern_labels(&mut self, labels: &Labels) -> IdLabels {
        let mut v: Vec<(u32, u32)> = labels
            .iter()
            .map(|(k, val)| (self.intern(k), self.intern(val)))
            .collect();
        v.sort_unstable();
        v.into_boxed_slice()
    }

    /// Releases what [`Interner::intern_labels`] took.
    pub fn release_labels(&mut self, labels: &[(u32, u32)]) {
        for (k, v) in labels {
            self.release(*k);
            self.release(*v);
        }
    }

    /// Number of distinct strings held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes of text the chunks hold (live and freed), for tests.
    #[cfg(test)]
    fn arena_len(&self) -> usize {
        self.held
    }
}

/// Looks up a key id in sorted id labels.
pub fn lookup(labels: &[(u32, u32)], key: u32) -> Option<u32> {
    labels
        .binary_search_by_key(&key, |(k, _)| *k)
        .ok()
        .map(|i| labels[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refcounts_free_and_reuse_ids() {
        let mut i = Interner::default();
        let a = i.intern("a");
        assert_eq!(i.intern("a"), a);
        i.release(a);
        assert_eq!(i.get("a"), Some(a));
        i.release(a);
        assert_eq!(i.get("a"), None);
        assert!(i.is_empty());
        let b = i.intern("b");
        assert_eq!(b, a, "freed id is reused");
        assert_eq!(i.resolve(b), "b");
    }

    #[test]
    fn short_and_long_strings_compare_by_every_byte() {
        // Every length class of `same_bytes`, with strings that differ only
        // in their first, a middle or their last byte.
        let mut i = Interner::default();
        for len in 0..40usize {
            let base: String = (0..len)
                .map(|n| char::from(b'a' + (n % 26) as u8))
                .collect();
            let id = i.intern(&base);
            assert_eq!(i.get(&base), Some(id), "len {len}");
            let mut positions = vec![0, len / 2, len.saturating_sub(1)];
            positions.dedup();
            for pos in positions {
                if len == 0 {
                    continue;
                }
                let mut other = base.clone().into_bytes();
                other[pos] = b'Z';
                let other = String::from_utf8(other).expect("ascii");
                assert_eq!(i.get(&other), None, "len {len}, byte {pos}");
                let oid = i.intern(&other);
                assert_ne!(oid, id);
                assert_eq!(i.resolve(oid), other);
            }
            // A prefix is not equal to the longer string.
            if len > 0 {
                assert_ne!(i.get(&base[..len - 1]), Some(id));
            }
        }
    }

    #[test]
    fn short_front_survives_collisions_and_id_reuse() {
        // Far more short strings than front slots, so slots are shared and
        // overwritten; freed ids are reused by new strings, which must not
        // be reachable under the old text.
        let mut i = Interner::default();
        let name = |n: usize| format!("v{n}");
        let mut live: std::collections::HashMap<String, u32> = Default::default();
        for n in 0..5000 {
            live.insert(name(n), i.intern(&name(n)));
        }
        for n in (0..5000).step_by(2) {
            let id = live.remove(&name(n)).expect("interned");
            i.release(id);
        }
        for n in 5000..7500 {
            live.insert(name(n), i.intern(&name(n)));
        }
        for n in 0..7500 {
            let got = i.get(&name(n));
            assert_eq!(got, live.get(&name(n)).copied(), "{}", name(n));
        }
        for (text, id) in &live {
            assert_eq!(i.resolve(*id), text);
            // A second reference goes through the front and counts.
            assert_eq!(i.intern(text), *id);
            i.release(*id);
            assert_eq!(i.get(text), Some(*id));
        }
        // Packing: equal packings only for equal strings of every length.
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefghijklmnop",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    ShortKey::of(a.as_bytes()) == ShortKey::of(b.as_bytes()),
                    a == b,
                    "{a:?} vs {b:?}"
                );
            }
        }
        assert_eq!(ShortKey::of(b"abcdefghijklmnopq"), None);
    }

    #[test]
    fn labels_round_trip_sorted() {
        let mut i = Interner::default();
        let mut l = Labels::new();
        l.insert("z".into(), "1".into());
        l.insert("a".into(), "1".into());
        let ids = i.intern_labels(&l);
        assert!(ids.windows(2).all(|w| w[0].0 < w[1].0));
        let z = i.get("z").expect("interned");
        assert_eq!(lookup(&ids, z).map(|v| i.resolve(v)), Some("1"));
        i.release_labels(&ids);
        assert!(i.is_empty());
    }

    #[test]
    fn churn_compacts_the_arena_and_keeps_ids() {
        let mut i = Interner::default();
        let keep: Vec<u32> = (0..100).map(|n| i.intern(&format!("keep-{n}"))).collect();
        for round in 0..50 {
            let ids: Vec<u32> = (0..1000)
                .map(|n| i.intern(&format!("churn-{round}-{n:032}")))
                .collect();
            for id in ids {
                i.release(id);
            }
        }
        assert_eq!(i.len(), 100);
        // 50 rounds wrote about 2.5 MB of text; compaction keeps the arena
        // near its live size plus less than the compaction threshold.
        assert!(
            i.arena_len() < 2 * MIN_COMPACT_GARBAGE,
            "arena {}",
            i.arena_len()
        );
        for (n, id) in keep.iter().enumerate() {
            assert_eq!(i.resolve(*id), format!("keep-{n}"));
            assert_eq!(i.get(&format!("keep-{n}")), Some(*id));
        }
    }

    proptest::proptest! {
        /// Against a model of counts: an id stays the same while the string
        /// is referenced, resolves to its string, and the entry goes (and
        /// only goes) when the last reference is released.
        #[test]
        fn matches_a_count_model(ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0u8..6), 1..200)) {
            // Compacting whenever garbage passes half the arena, so the
            // model also checks ids across compactions.
            let mut i = Interner { min_garbage: 0, ..Interner::default() };
            let mut model: std::collections::HashMap<String, (u32, u32)> = Default::default();
            for (add, n) in ops {
                let s = format!("string-{n}");
                if add {
                    let id = i.intern(&s);
                    let e = model.entry(s.clone()).or_insert((id, 0));
                    proptest::prop_assert_eq!(e.0, id);
                    e.1 += 1;
                } else if let Some((id, count)) = model.get(&s).copied() {
                    i.release(id);
                    if count == 1 {
                        model.remove(&s);
                    } else {
                        model.insert(s.clone(), (id, count - 1));
                    }
                }
                proptest::prop_assert_eq!(i.len(), model.len());
                for (text, (id, _)) in &model {
                    proptest::prop_assert_eq!(i.get(text), Some(*id));
                    proptest::prop_assert_eq!(i.resolve(*id), text.as_str());
                }
            }
        }
    }
}
