//! Line splitting for the document splitter and the fast YAML reader.
//!
//! A file is scanned once ([`LineIndex::new`]): the scan records the
//! position of every `\n` and, in the same pass, whether any byte might be
//! one the fast YAML reader has to decline (see
//! `fastyaml::has_special_chars`).  The document splitter and the reader
//! then walk lines by index instead of searching the text again.
//!
//! Invariants:
//! * [`LineIndex::line`] yields exactly the pieces of `text.split('\n')`,
//!   in order (so the last piece is empty when the text ends with `\n`);
//! * [`LineIndex::maybe_special`] is false only when every byte is
//!   printable ASCII, `\t`, `\n` or a `\r` followed by `\n`, i.e. when the
//!   text certainly holds no special character (a lone `\r` is one: libyaml
//!   breaks lines there); when it is true the caller runs the precise check.

use std::ops::Range;

/// The line structure of one text; see the module docs.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    /// Byte offsets of every `\n`, ascending.
    newlines: Vec<usize>,
    maybe_special: bool,
}

impl<'a> LineIndex<'a> {
    /// Scans `text` once.
    pub(crate) fn new(text: &'a str) -> Self {
        let bytes = text.as_bytes();
        let mut newlines = Vec::with_capacity(bytes.len() / 24 + 1);
        let maybe_special = scan(bytes, &mut newlines);
        LineIndex {
            text,
            newlines,
            maybe_special,
        }
    }

    /// Number of pieces `text.split('\n')` yields (at least 1).
    pub(crate) fn len(&self) -> usize {
        self.newlines.len() + 1
    }

    /// Byte offset where line `i` starts (`i < self.len()`).
    pub(crate) fn start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.newlines[i - 1] + 1,
        }
    }

    /// Byte offset where line `i` ends, excluding its `\n`.
    pub(crate) fn end(&self, i: usize) -> usize {
        self.newlines.get(i).copied().unwrap_or(self.text.len())
    }

    /// Line `i` without its `\n`.
    pub(crate) fn line(&self, i: usize) -> &'a str {
        // `\n` is ASCII, so both bounds are char boundaries.
        &self.text[self.start(i)..self.end(i)]
    }

    /// Lines `range` (each without its `\n`).
    pub(crate) fn lines(&self, range: Range<usize>) -> impl ExactSizeIterator<Item = &'a str> + '_ {
        range.map(|i| self.line(i))
    }

    /// The text from the start of line `range.start` to the start of line
    /// `range.end` (or to the end of the text when `range.end` is
    /// `self.len()`), `\n` separators included.
    pub(crate) fn span(&self, range: Range<usize>) -> &'a str {
        let end = if range.end >= self.len() {
            self.text.len()
        } else {
            self.start(range.end)
        };
        &self.text[self.start(range.start)..end]
    }

    /// False only if every byte is printable ASCII, `\t`, `\n` or a `\r`
    /// followed by `\n`.
    pub(crate) fn maybe_special(&self) -> bool {
        self.maybe_special
    }
}

/// Is `c` outside printable ASCII and not one of `\t`, `\n`, `\r`?
fn unusual(c: u8) -> bool {
    !((0x20..0x7f).contains(&c) || c == b'\n' || c == b'\t' || c == b'\r')
}

/// Pushes the offset of every `\n` in `bytes[from..]` and reports whether
/// any byte there is [`unusual`] or a `\r` not followed by `\n`.
fn scan_scalar(bytes: &[u8], from: usize, newlines: &mut Vec<usize>) -> bool {
    let mut special = false;
    for (i, &c) in bytes.iter().enumerate().skip(from) {
        if c == b'\n' {
            newlines.push(i);
        }
        special |= unusual(c) || (c == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
    }
    special
}

/// One pass over `bytes`: newline offsets into `newlines`, and whether any
/// byte is [`unusual`] or a `\r` not followed by `\n`.  Sixteen bytes at a time with SSE2, which every
/// x86-64 processor has.
#[cfg(target_arch = "x86_64")]
fn scan(bytes: &[u8], newlines: &mut Vec<usize>) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let mut special = 0i32;
    let mut i = 0usize;
    // SAFETY: SSE2 is part of the x86-64 baseline, so these intrinsics are
    // always available; every load reads 16 bytes starting at `i` with
    // `i + 16 <= bytes.len()`, and `_mm_loadu_si128` has no alignment
    // requirement.
    unsafe {
        let nl = _mm_set1_epi8(b'\n' as i8);
        let tab = _mm_set1_epi8(b'\t' as i8);
        let cr = _mm_set1_epi8(b'\r' as i8);
        let space = _mm_set1_epi8(0x20);
        let del = _mm_set1_epi8(0x7f);
        while i + 16 <= bytes.len() {
            let v = _mm_loadu_si128(bytes.as_ptr().add(i).cast::<__m128i>());
            let is_nl = _mm_cmpeq_epi8(v, nl);
            // Signed comparison: true for 0x00-0x1f and for 0x80-0xff.
            let below_space = _mm_cmplt_epi8(v, space);
            let allowed = _mm_or_si128(
                is_nl,
                _mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, cr)),
            );
            let bad = _mm_or_si128(
                _mm_andnot_si128(allowed, below_space),
                _mm_cmpeq_epi8(v, del),
            );
            special |= _mm_movemask_epi8(bad);
            let nl_mask = _mm_movemask_epi8(is_nl) as u32;
            let cr_mask = _mm_movemask_epi8(_mm_cmpeq_epi8(v, cr)) as u32;
            if cr_mask != 0 {
                // Each `\r` must be followed by `\n`: the next bit, or for
                // the last byte the first byte of the next block.
                let next = u32::from(bytes.get(i + 16) == Some(&b'\n')) << 15;
                special |= (cr_mask & !((nl_mask >> 1) | next)) as i32;
            }
            let mut mask = nl_mask;
            while mask != 0 {
                newlines.push(i + mask.trailing_zeros() as usize);
                mask &= mask - 1;
            }
            i += 16;
        }
    }
    scan_scalar(bytes, i, newlines) | (special != 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn scan(bytes: &[u8], newlines: &mut Vec<usize>) -> bool {
    scan_scalar(bytes, 0, newlines)
}

/// Lines of `text` without their `\n`, including a final empty piece when
/// `text` ends with `\n`.  Same pieces as `text.split('\n')`.
pub(crate) fn exclusive(text: &str) -> impl Iterator<Item = &str> {
    let mut start = Some(0usize);
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes());
    std::iter::from_fn(move || {
        let s = start?;
        match ends.next() {
            Some(i) => {
                start = Some(i + 1);
                Some(&text[s..i])
            }
            None => {
                start = None;
                Some(&text[s..])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLES: &[&str] = &[
        "",
        "\n",
        "\n\n",
        "a",
        "a\n",
        "a\nb",
        "a\r\nb\r\n",
        "é\n€\n\n𝄞",
        "---\nkind: X\n---\n",
        "0123456789abcdef\n0123456789abcde\n0123456789abcdef0123456789abcdef",
        "exactly sixteen\n",
        "tab\there, bell\u{7} at 20",
        "0123456789abcdef0123456789abc\u{7f}",
        "0123456789abcde\r\n0123456789abcdef",
        "0123456789abcde\rx123456789abcdef",
        "a: b\rc\n",
        "a\r",
        "a\r\r\n",
    ];

    /// The reference for [`LineIndex::maybe_special`].
    fn special(s: &str) -> bool {
        let b = s.as_bytes();
        b.iter()
            .enumerate()
            .any(|(i, &c)| unusual(c) || (c == b'\r' && b.get(i + 1) != Some(&b'\n')))
    }

    fn check(s: &str) {
        let index = LineIndex::new(s);
        let pieces: Vec<&str> = (0..index.len()).map(|i| index.line(i)).collect();
        assert_eq!(pieces, s.split('\n').collect::<Vec<_>>(), "{s:?}");
        assert_eq!(
            index.lines(0..index.len()).collect::<Vec<_>>(),
            pieces,
            "{s:?}"
        );
        assert_eq!(index.span(0..index.len()), s, "{s:?}");
        assert_eq!(index.maybe_special(), special(s), "{s:?}: special flag");
        assert_eq!(exclusive(s).collect::<Vec<_>>(), pieces, "{s:?}");
    }

    #[test]
    fn matches_std_on_samples() {
        for s in SAMPLES {
            check(s);
        }
    }

    #[test]
    fn spans_join_back_to_the_text() {
        let s = "a\nbb\n\nccc\n";
        let index = LineIndex::new(s);
        assert_eq!(index.len(), 5);
        assert_eq!(index.span(0..2), "a\nbb\n");
        assert_eq!(index.span(2..5), "\nccc\n");
        assert_eq!(index.span(1..1), "");
    }

    #[test]
    fn a_special_byte_is_flagged_in_every_position() {
        // Both in the 16-byte blocks and in the scalar tail.
        for len in [15usize, 16, 17, 31, 32, 40] {
            for pos in 0..len {
                for bad in [0x01u8, 0x1f, 0x7f, 0x80, 0xff] {
                    let mut bytes = vec![b'x'; len];
                    bytes[pos] = bad;
                    let mut newlines = Vec::new();
                    assert!(scan(&bytes, &mut newlines), "{len} {pos} {bad:#x}");
                }
                let mut bytes = vec![b'x'; len];
                bytes[pos] = b'\n';
                let mut newlines = Vec::new();
                assert!(!scan(&bytes, &mut newlines), "{len} {pos}");
                assert_eq!(newlines, vec![pos]);
            }
        }
    }

    #[test]
    fn a_lone_carriage_return_is_flagged_in_every_position() {
        // libyaml breaks lines at a `\r` not followed by `\n`; the fast
        // reader does not, so such a text must be flagged.  Both in the
        // 16-byte blocks (including a `\r` ending a block, whose `\n` would
        // start the next one) and in the scalar tail.
        for len in [15usize, 16, 17, 31, 32, 40] {
            for pos in 0..len {
                let mut bytes = vec![b'x'; len];
                bytes[pos] = b'\r';
                let mut newlines = Vec::new();
                assert!(scan(&bytes, &mut newlines), "{len} {pos}");
                if pos + 1 < len {
                    bytes[pos + 1] = b'\n';
                    newlines.clear();
                    assert!(!scan(&bytes, &mut newlines), "{len} {pos} crlf");
                    assert_eq!(newlines, vec![pos + 1]);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn matches_std(s in "[a\n\r\t é\u{7}\u{85}-]{0,80}") {
            check(&s);
        }
    }
}
