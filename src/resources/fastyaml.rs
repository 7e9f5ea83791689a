//! A fast reader for the block-style YAML subset that Calico resources are
//! written in, used in front of `serde_yaml_ng`.
//!
//! `serde_yaml_ng` (libyaml underneath) reads a few MB/s; a datastore of
//! 100,000 endpoints is 60 MB of YAML.  Nearly all of it uses a small subset:
//! block mappings and sequences indented with spaces, one-line plain or
//! quoted scalars, one-line flow collections and comments; or documents
//! that are each one flow collection over many lines, which is how JSON
//! (pretty-printed or compact) reads as YAML.  This module parses exactly
//! that subset into a flat, borrowed tree ([`Tree`]) and offers a serde
//! [`Deserializer`] over it.
//!
//! Invariants (the reason this is safe to put in front of the real parser):
//! * **Decline, never guess.**  [`parse`] returns `None` for anything outside
//!   the subset (anchors, aliases, tags, block scalars, multi-line scalars,
//!   tabs in indentation or in flow collections, comments inside flow
//!   collections, directives, complex keys, duplicate keys, merge keys,
//!   keys more than 1024 bytes from their colon, numbers in any form other
//!   than plain decimal ...; the flow rules are listed on [`FlowParser`]).
//!   The caller then decodes the text with `serde_yaml_ng`, so the subset
//!   only has to be *correct*, not complete.
//! * **Same values as `serde_yaml_ng`.**  For every text it accepts, a
//!   successful deserialization through [`NodeRef`] yields the value
//!   `serde_yaml_ng` would: plain scalars resolve as its YAML 1.2 core schema
//!   does (null, bool, decimal integer as `u64`/`i64`, decimal float), a
//!   requested string gets the raw scalar text, and a plain null or empty
//!   scalar is `None` for an `Option`.  Where resolution is doubtful the
//!   deserializer returns an error instead of a value.
//! * **Errors carry no meaning.**  Any deserialization error makes the caller
//!   fall back to `serde_yaml_ng`, whose messages (with line numbers) are the
//!   ones users see.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// One node of a parsed document, stored flat in preorder in a [`Tree`]: a
/// collection's children follow it, and `end` is the index just past its
/// last descendant.  A mapping's children alternate key, value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flat<'a> {
    /// A scalar borrowed from the text; `plain` is false for single- and
    /// double-quoted scalars (which are always strings).
    Scalar {
        text: &'a str,
        plain: bool,
    },
    /// A quoted scalar whose escapes had to be resolved: `Tree::owned[index]`.
    Escaped {
        index: usize,
    },
    Seq {
        end: usize,
        len: usize,
    },
    Map {
        end: usize,
        len: usize,
    },
}

/// A parsed document of the supported subset.
///
/// Invariants: `nodes[0]` is the root; every `Seq`/`Map` at `i` has
/// `i < end <= nodes.len()` and exactly `len` children (entries for a
/// mapping), each child subtree lying inside `i + 1..end`; every
/// `Escaped::index` is an index of `owned`.  The buffers are reused from
/// one document to the next by [`Reader`], so reading a document allocates
/// nothing once they have grown.
#[derive(Debug, Default)]
pub(crate) struct Tree<'a> {
    nodes: Vec<Flat<'a>>,
    owned: Vec<String>,
}

impl<'a> Tree<'a> {
    fn clear(&mut self) {
        self.nodes.clear();
        self.owned.clear();
    }

    /// Index just past the subtree rooted at `i`.
    fn end(&self, i: usize) -> usize {
        match self.nodes[i] {
            Flat::Seq { end, .. } | Flat::Map { end, .. } => end,
            _ => i + 1,
        }
    }

    fn push_scalar(&mut self, text: Cow<'a, str>, plain: bool) {
        let node = match text {
            Cow::Borrowed(text) => Flat::Scalar { text, plain },
            Cow::Owned(s) => {
                self.owned.push(s);
                Flat::Escaped {
                    index: self.owned.len() - 1,
                }
            }
        };
        self.nodes.push(node);
    }

    /// Starts a collection; children are pushed after it, then [`Tree::close`].
    fn open(&mut self, map: bool) -> usize {
        let (end, len) = (0, 0);
        self.nodes.push(if map {
            Flat::Map { end, len }
        } else {
            Flat::Seq { end, len }
        });
        self.nodes.len() - 1
    }

    fn close(&mut self, at: usize, children: usize) {
        let end = self.nodes.len();
        match &mut self.nodes[at] {
            Flat::Seq { end: e, len } | Flat::Map { end: e, len } => {
                *e = end;
                *len = children;
            }
            _ => {}
        }
    }

    /// The text of scalar `i`, if it is one.
    fn scalar_text(&self, i: usize) -> Option<&str> {
        match self.nodes[i] {
            Flat::Scalar { text, .. } => Some(text),
            Flat::Escaped { index } => Some(&self.owned[index]),
            _ => None,
        }
    }

    /// Is the key just pushed at `key` (the last node) equal to an earlier
    /// key of the mapping opened at `map`?  Non-scalar keys count as
    /// duplicates (they are declined either way).  `seen` is the mapping's
    /// filter of key shapes (length and end bytes), empty when it opens:
    /// a key whose shape is new cannot be a duplicate, so the earlier keys
    /// are compared only on a filter hit.
    fn duplicate_key(&self, map: usize, key: usize, seen: &mut u64) -> bool {
        let Some(new) = self.scalar_text(key) else {
            return true;
        };
        let (b, n) = (new.as_bytes(), new.len());
        let shape = n
            .wrapping_mul(31)
            .wrapping_add(usize::from(b.first().copied().unwrap_or(0)))
            .wrapping_add(usize::from(b.last().copied().unwrap_or(0)).wrapping_mul(7));
        let bit = 1u64 << (shape % 64);
        if *seen & bit == 0 {
            *seen |= bit;
            return false;
        }
        let mut k = map + 1;
        while k < key {
            // Length and end bytes first: most keys differ there, and the
            // full comparison is a library call.
            match self.scalar_text(k) {
                Some(t) => {
                    let tb = t.as_bytes();
                    if tb.len() == n && tb.first() == b.first() && tb.last() == b.last() && tb == b
                    {
                        return true;
                    }
                }
                None => return true,
            }
            k = self.end(k + 1);
        }
        false
    }

    /// The root node, for deserializing.
    pub(crate) fn root(&self) -> NodeRef<'_, 'a> {
        NodeRef { tree: self, idx: 0 }
    }
}

/// Maximum nesting of block and flow collections accepted (deeper texts go
/// to the full parser, which has its own limit).
const MAX_DEPTH: usize = 64;

/// Parses one YAML document (optionally starting with a `---` line) of the
/// supported subset.  `None` means "not in the subset": decode with the full
/// parser instead.
pub(crate) fn parse(text: &str) -> Option<Tree<'_>> {
    if has_special_chars(text) {
        return None;
    }
    parse_clean(text)
}

/// [`parse`] for a text the caller has already checked with
/// [`has_special_chars`] (for example as part of a larger text).
pub(crate) fn parse_clean(text: &str) -> Option<Tree<'_>> {
    let mut reader = Reader::default();
    reader.parse_lines(super::lines::exclusive(text))?;
    Some(reader.tree)
}

/// Reads documents one after another, reusing its buffers (see [`Tree`]).
#[derive(Default)]
pub(crate) struct Reader<'a> {
    lines: Vec<Line<'a>>,
    tree: Tree<'a>,
}

impl<'a> Reader<'a> {
    /// [`parse_clean`] for a document given as its lines (without their
    /// `\n`; the pieces `text.split('\n')` would yield, or those pieces
    /// without trailing blank lines), e.g. from a
    /// [`super::lines::LineIndex`] of the whole file.  The tree returned is
    /// valid until the next call.
    ///
    /// A document whose first content line starts with `[` or `{` is read
    /// as one flow collection over as many lines as it takes (see
    /// [`FlowParser`]); any other is read as a block collection.
    pub(crate) fn parse_lines<I: Iterator<Item = &'a str>>(
        &mut self,
        raw_lines: I,
    ) -> Option<&Tree<'a>> {
        self.lines.clear();
        self.tree.clear();
        let mut raw_lines = raw_lines.enumerate();
        while let Some((i, raw)) = raw_lines.next() {
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            let indent = raw.bytes().take_while(|&b| b == b' ').count();
            let content = &raw[indent..];
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            if content.starts_with('\t') {
                // A tab in the indentation (or a tab-indented comment): decline.
                return None;
            }
            if indent == 0 {
                if content.starts_with('%') || is_marker(content, "...") {
                    return None;
                }
                if is_marker(content, "---") {
                    if i > 0 || !rest_is_blank(&content[3..]) {
                        return None;
                    }
                    continue;
                }
            }
            if self.lines.is_empty() && content.starts_with(['[', '{']) {
                flow_document(content, raw_lines.map(|(_, l)| l), &mut self.tree)?;
                return Some(&self.tree);
            }
            self.lines.push(Line {
                indent,
                text: content,
            });
        }
        let indent = self.lines.first()?.indent;
        let mut p = BlockParser {
            lines: &mut self.lines,
            pos: 0,
            tree: &mut self.tree,
        };
        p.block(indent, 0)?;
        (p.pos == p.lines.len()).then_some(&self.tree)
    }
}

/// `s` without leading spaces and tabs (a byte loop: the standard
/// library's pattern-based trimming is several times slower on the short
/// pieces this reader handles).
fn trim_blank_start(s: &str) -> &str {
    let n = s.bytes().take_while(|&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

/// `s` without trailing spaces and tabs.
fn trim_blank_end(s: &str) -> &str {
    let n = s
        .bytes()
        .rev()
        .take_while(|&b| b == b' ' || b == b'\t')
        .count();
    &s[..s.len() - n]
}

fn is_marker(content: &str, marker: &str) -> bool {
    content
        .strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// True if `s` is only whitespace, optionally followed by a comment (which
/// YAML only recognises after whitespace).
fn rest_is_blank(s: &str) -> bool {
    let t = trim_blank_start(s);
    t.is_empty() || (t.starts_with('#') && t.len() < s.len())
}

/// Characters the full parser rejects or treats as line breaks (C0/C1
/// controls other than tab and newlines, DEL, U+FFFE/U+FFFF, U+2028/U+2029,
/// and a `\r` not followed by `\n`, which libyaml takes as a line break of
/// its own) and a byte order mark: texts containing them go to the full
/// parser.
pub(crate) fn has_special_chars(text: &str) -> bool {
    let b = text.as_bytes();
    // Fast path (vectorised): printable ASCII, tabs and line feeds only.
    if b.iter()
        .all(|&c| (0x20..0x7f).contains(&c) || c == b'\n' || c == b'\t')
    {
        return false;
    }
    b.iter().enumerate().any(|(i, &c)| match c {
        b'\t' | b'\n' => false,
        b'\r' => b.get(i + 1) != Some(&b'\n'),
        0..=0x1f | 0x7f => true,
        0xc2 => matches!(b.get(i + 1), Some(0x80..=0x9f)),
        0xe2 => b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)),
        // A byte order mark, and the noncharacters U+FFFE and U+FFFF (libyaml's reader
        // rejects them as control characters).
        0xef => matches!(
            (b.get(i + 1), b.get(i + 2)),
            (Some(0xbb), Some(0xbf)) | (Some(0xbf), Some(0xbe | 0xbf))
        ),
        _ => false,
    })
}

#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    indent: usize,
    /// The line without its indentation (never empty, never a comment).
    text: &'a str,
}

/// A scalar as read from the text, before it goes into the [`Tree`].
struct Scalar<'a> {
    text: Cow<'a, str>,
    plain: bool,
}

/// Reads the block structure of one document into a [`Tree`].  Each method
/// pushes exactly one node subtree, or returns `None` (decline).
struct BlockParser<'p, 'a> {
    lines: &'p mut Vec<Line<'a>>,
    pos: usize,
    tree: &'p mut Tree<'a>,
}

impl<'a> BlockParser<'_, 'a> {
    /// Parses the block collection whose first line is `self.pos`, indented
    /// by exactly `indent`.
    fn block(&mut self, indent: usize, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let line = self.lines.get(self.pos)?;
        if line.indent != indent {
            return None;
        }
        if is_seq_entry(line.text) {
            self.sequence(indent, depth)
        } else {
            self.mapping(indent, depth)
        }
    }

    fn sequence(&mut self, indent: usize, depth: usize) -> Option<()> {
        let at = self.tree.open(false);
        let mut count = 0;
        while let Some(&line) = self.lines.get(self.pos) {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            if !is_seq_entry(line.text) {
                // The end of an indentless sequence; the caller checks that
                // the line belongs to it.
                break;
            }
            count += 1;
            let after = &line.text[1..];
            let rest = after.trim_start_matches(' ');
            if rest.is_empty() || rest.starts_with('#') {
                if !rest_is_blank(after) {
                    return None;
                }
                self.pos += 1;
                self.nested_or_null(indent, depth)?;
                continue;
            }
            if rest.starts_with('\t') {
                return None;
            }
            let col = indent + 1 + (after.len() - rest.len());
            if is_seq_entry(rest) || split_key(rest).is_some() {
                // A compact nested collection: re-read the rest of this line
                // as the first line of a block indented at `col`.
                self.lines[self.pos] = Line {
                    indent: col,
                    text: rest,
                };
                self.block(col, depth + 1)?;
            } else {
                inline_value(rest, depth, self.tree)?;
                self.pos += 1;
                self.no_continuation(indent)?;
            }
        }
        self.tree.close(at, count);
        Some(())
    }

    fn mapping(&mut self, indent: usize, depth: usize) -> Option<()> {
        let at = self.tree.open(true);
        let mut seen = 0u64;
        let mut count = 0;
        while let Some(&line) = self.lines.get(self.pos) {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.text)?;
            if key.plain && key.text == "<<" {
                return None;
            }
            let key_at = self.tree.nodes.len();
            self.tree.push_scalar(key.text, key.plain);
            if self.tree.duplicate_key(at, key_at, &mut seen) {
                // Duplicate keys are handled differently by different
                // targets: decline.
                return None;
            }
            count += 1;
            let value_text = trim_blank_start(rest);
            // `split_key` guarantees whitespace (or nothing) after the colon,
            // so a `#` here starts a comment.
            if value_text.is_empty() || value_text.starts_with('#') {
                self.pos += 1;
                match self.lines.get(self.pos) {
                    // An indentless sequence as the value of this key.
                    Some(next) if next.indent == indent && is_seq_entry(next.text) => {
                        self.sequence(indent, depth + 1)?
                    }
                    _ => self.nested_or_null(indent, depth)?,
                }
            } else {
                inline_value(value_text, depth, self.tree)?;
                self.pos += 1;
                self.no_continuation(indent)?;
            }
        }
        self.tree.close(at, count);
        Some(())
    }

    /// The value after `key:` or `-` with nothing on the line: the block
    /// indented deeper on the next line, or an empty (null) plain scalar.
    fn nested_or_null(&mut self, indent: usize, depth: usize) -> Option<()> {
        match self.lines.get(self.pos) {
            Some(next) if next.indent > indent => self.block(next.indent, depth + 1),
            _ => {
                self.tree.push_scalar(Cow::Borrowed(""), true);
                Some(())
            }
        }
    }

    /// After a one-line value, a deeper-indented line would be a multi-line
    /// scalar (or an error): decline.
    fn no_continuation(&self, indent: usize) -> Option<()> {
        match self.lines.get(self.pos) {
            Some(next) if next.indent > indent => None,
            _ => Some(()),
        }
    }
}

fn is_seq_entry(text: &str) -> bool {
    text == "-" || text.starts_with("- ") || text.starts_with("-\t")
}

/// Characters that may not start a plain scalar (all ASCII).
fn is_indicator(c: char) -> bool {
    matches!(
        c,
        '-' | '?'
            | ':'
            | ','
            | '['
            | ']'
            | '{'
            | '}'
            | '#'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '\''
            | '"'
            | '%'
            | '@'
            | '`'
    )
}

/// Splits a block mapping line into its key and the text after the colon.
/// A colon more than [`MAX_KEY_SPAN`] bytes after the key's start is
/// declined (libyaml no longer takes the text before it as a key).
fn split_key(text: &str) -> Option<(Scalar<'_>, &str)> {
    let first = text.chars().next()?;
    if first == '"' || first == '\'' {
        let (key, rest) = quoted(text)?;
        let rest = rest.trim_start_matches(' ');
        if text.len() - rest.len() > MAX_KEY_SPAN {
            return None;
        }
        let after = rest.strip_prefix(':')?;
        if !(after.is_empty() || after.starts_with([' ', '\t'])) {
            return None;
        }
        return Some((key, after));
    }
    if is_indicator(first) {
        // `-x: 1` is a valid plain key, but keep the subset simple.
        return None;
    }
    match colon_or_comment(text.as_bytes()) {
        Some((i, _)) if i > MAX_KEY_SPAN => None,
        Some((i, b':')) => {
            let key = &text[..i];
            if key.ends_with([' ', '\t']) {
                // `key : value`: legal, but rare; decline.
                return None;
            }
            Some((
                Scalar {
                    text: Cow::Borrowed(key),
                    plain: true,
                },
                &text[i + 1..],
            ))
        }
        _ => None,
    }
}

/// The first mapping colon (a `:` followed by a space, a tab or the end of
/// the text) or comment start (a `#` after a space or tab), whichever comes
/// first, with the byte found.
fn colon_or_comment(bytes: &[u8]) -> Option<(usize, u8)> {
    let mut from = 0;
    while let Some(i) = next_colon_or_hash(bytes, from) {
        let c = bytes[i];
        let hit = match c {
            b':' => matches!(bytes.get(i + 1), None | Some(b' ' | b'\t')),
            _ => i > 0 && matches!(bytes[i - 1], b' ' | b'\t'),
        };
        if hit {
            return Some((i, c));
        }
        from = i + 1;
    }
    None
}

/// Position of the first `:` or `#` in `bytes[from..]`.  Eight bytes at a
/// time (these texts are too short for a vector search to pay off, and a
/// byte loop costs several instructions per byte).
fn next_colon_or_hash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Flags the bytes of `x` that are zero; the lowest flag is exact.
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let found =
            zero_bytes(w ^ (ONES * u64::from(b':'))) | zero_bytes(w ^ (ONES * u64::from(b'#')));
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes
        .get(i..)?
        .iter()
        .position(|&c| c == b':' || c == b'#')
        .map(|p| i + p)
}

/// A value written on the same line as its key or dash; pushes it.
fn inline_value<'a>(text: &'a str, depth: usize, tree: &mut Tree<'a>) -> Option<()> {
    let first = text.chars().next()?;
    match first {
        '"' | '\'' => {
            let (s, rest) = quoted(text)?;
            if !rest_is_blank(rest) {
                return None;
            }
            tree.push_scalar(s.text, s.plain);
        }
        '[' | '{' => {
            let mut fp = FlowParser::one_line(text, tree);
            fp.value(depth + 1)?;
            if !rest_is_blank(&text[fp.pos..]) {
                return None;
            }
        }
        c if is_indicator(c) && !(c == '-' && plain_dash_ok(text)) => return None,
        _ => {
            let s = plain_block(text)?;
            tree.push_scalar(s.text, s.plain);
        }
    }
    Some(())
}

/// `-` may start a plain scalar when it is not followed by a space (e.g. a
/// negative number, `-x`).
fn plain_dash_ok(text: &str) -> bool {
    text.len() > 1 && !text[1..].starts_with([' ', '\t'])
}

/// A plain scalar in block context: runs to the end of the line or to a
/// comment.  A `: ` inside would start a nested mapping (an error in YAML);
/// decline it.
fn plain_block(text: &str) -> Option<Scalar<'_>> {
    let end = match colon_or_comment(text.as_bytes()) {
        Some((_, b':')) => return None,
        Some((i, _)) => i,
        None => text.len(),
    };
    let value = trim_blank_end(&text[..end]);
    if value.is_empty() {
        return None;
    }
    Some(Scalar {
        text: Cow::Borrowed(value),
        plain: true,
    })
}

/// Reads a single- or double-quoted scalar that closes on the same line;
/// returns it and the text after the closing quote.
fn quoted(text: &str) -> Option<(Scalar<'_>, &str)> {
    let quote = text.as_bytes()[0];
    let body = &text[1..];
    let bytes = body.as_bytes();
    if quote == b'\'' {
        let mut owned: Option<String> = None;
        let mut i = 0;
        let mut seg = 0;
        while i < bytes.len() {
            if bytes[i] == b'\'' {
                if bytes.get(i + 1) == Some(&b'\'') {
                    let s = owned.get_or_insert_with(String::new);
                    s.push_str(&body[seg..=i]);
                    i += 2;
                    seg = i;
                    continue;
                }
                let text = match owned {
                    Some(mut s) => {
                        s.push_str(&body[seg..i]);
                        Cow::Owned(s)
                    }
                    None => Cow::Borrowed(&body[..i]),
                };
                return Some((Scalar { text, plain: false }, &body[i + 1..]));
            }
            i += 1;
        }
        return None;
    }
    let mut owned: Option<String> = None;
    let mut seg = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let text = match owned {
                    Some(mut s) => {
                        s.push_str(&body[seg..i]);
                        Cow::Owned(s)
                    }
                    None => Cow::Borrowed(&body[..i]),
                };
                return Some((Scalar { text, plain: false }, &body[i + 1..]));
            }
            b'\\' => {
                let s = owned.get_or_insert_with(String::new);
                s.push_str(&body[seg..i]);
                let (c, used) = escape(&body[i + 1..])?;
                s.push(c);
                i += 1 + used;
                seg = i;
            }
            _ => i += 1,
        }
    }
    None
}

/// Resolves one double-quoted escape (the text after the backslash);
/// returns the character and the bytes consumed.
fn escape(s: &str) -> Option<(char, usize)> {
    let c = *s.as_bytes().first()?;
    let simple = match c {
        b'0' => Some('\0'),
        b'a' => Some('\u{7}'),
        b'b' => Some('\u{8}'),
        b't' | b'\t' => Some('\t'),
        b'n' => Some('\n'),
        b'v' => Some('\u{b}'),
        b'f' => Some('\u{c}'),
        b'r' => Some('\r'),
        b'e' => Some('\u{1b}'),
        b' ' => Some(' '),
        b'"' => Some('"'),
        b'/' => Some('/'),
        b'\\' => Some('\\'),
        b'N' => Some('\u{85}'),
        b'_' => Some('\u{a0}'),
        b'L' => Some('\u{2028}'),
        b'P' => Some('\u{2029}'),
        _ => None,
    };
    if let Some(ch) = simple {
        return Some((ch, 1));
    }
    let digits = match c {
        b'x' => 2,
        b'u' => 4,
        b'U' => 8,
        _ => return None,
    };
    let hex = s.get(1..1 + digits)?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let code = u32::from_str_radix(hex, 16).ok()?;
    Some((char::from_u32(code)?, 1 + digits))
}

/// A flow collection (`[a, 'b']`, `{k: v}`, `{"k":1}`), possibly nested:
/// either on one line (the value of a block key or entry), or a whole
/// document spanning any number of lines (pretty-printed or compact JSON
/// is one).
///
/// Every token (scalar, indicator) lies on one line: a scalar that would
/// continue on the next line (multi-line plain or quoted scalars) is
/// declined.  The rules below are those of libyaml 0.2.5 as
/// `serde_yaml_ng` runs it, narrowed wherever the subset can stay simple:
/// * whitespace between tokens is spaces and, in a multi-line collection,
///   line breaks; a tab anywhere outside a quoted scalar is declined (libyaml
///   accepts some tabs in flow context, but not all);
/// * a comment (`#` where a token would start) is declined; so is a line
///   that starts with a document marker (`---`, `...`) or a directive (`%`);
/// * a mapping key is a plain or quoted scalar followed on the *same line*
///   by `:`, at most [`MAX_KEY_SPAN`] bytes from the key's first character
///   (libyaml forgets a key once a line break or 1024 characters separate
///   it from its colon); after a plain key the colon must be followed by a
///   space or the line end (else it belongs to the scalar), after a quoted
///   key by anything (JSON's `"k":1`, which libyaml accepts in flow context);
/// * a plain scalar ends at `,` `[` `]` `{` `}`, at `: ` or `:` at the line
///   end, or at the line end; a `:` followed by `,` `?` `[` `]` `{` `}` is a
///   libyaml error, declined; so is a plain scalar directly followed by `[`
///   or `{`;
/// * entries are separated by `,`; one trailing `,` before the closing
///   bracket is allowed (as in libyaml); entries without a value (`{a}`,
///   `{a: }`, `[a: 1]`) and explicit keys (`?`) are declined.
struct FlowParser<'t, 'a, I> {
    /// The current line (without its line break); tokens are read from
    /// `line[pos..]`.
    line: &'a str,
    pos: usize,
    /// The document's further lines, for a multi-line collection; `None`
    /// when the collection must close on this line.
    more: Option<I>,
    tree: &'t mut Tree<'a>,
}

/// libyaml's limit on the distance between a simple key's start and its
/// `:` (it counts characters; bytes are at least as many, so counting bytes
/// declines a little more, never less).
const MAX_KEY_SPAN: usize = 1024;

impl<'t, 'a> FlowParser<'t, 'a, std::iter::Empty<&'a str>> {
    /// A parser for a collection that closes on the line `text` starts.
    fn one_line(text: &'a str, tree: &'t mut Tree<'a>) -> Self {
        FlowParser {
            line: text,
            pos: 0,
            more: None,
            tree,
        }
    }
}

impl<'a, I: Iterator<Item = &'a str>> FlowParser<'_, 'a, I> {
    /// Skips spaces and, in a multi-line collection, line breaks and blank
    /// lines, up to the next token.  Returns whether a line break was
    /// crossed; `None` (decline) on a tab, a comment, a document marker or
    /// directive line, or when the text ends (the collection is unclosed).
    fn skip_blank(&mut self) -> Option<bool> {
        let mut crossed = false;
        loop {
            let bytes = self.line.as_bytes();
            while bytes.get(self.pos) == Some(&b' ') {
                self.pos += 1;
            }
            match bytes.get(self.pos) {
                Some(b'\t' | b'#') => return None,
                Some(_) => return Some(crossed),
                None => {}
            }
            let raw = self.more.as_mut()?.next()?;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.starts_with('%') || is_marker(line, "---") || is_marker(line, "...") {
                return None;
            }
            self.line = line;
            self.pos = 0;
            crossed = true;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.pos).copied()
    }

    /// Reads one value (on this line or a later one) and pushes it.
    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_blank()?;
        match self.peek()? {
            b'[' => self.seq(depth),
            b'{' => self.map(depth),
            b'"' | b'\'' => {
                let s = self.quoted()?;
                self.tree.push_scalar(s.text, s.plain);
                Some(())
            }
            _ => {
                let s = self.plain()?;
                self.tree.push_scalar(s.text, s.plain);
                Some(())
            }
        }
    }

    /// A quoted scalar closing on this line.
    fn quoted(&mut self) -> Option<Scalar<'a>> {
        let (s, rest) = quoted(&self.line[self.pos..])?;
        self.pos = self.line.len() - rest.len();
        Some(s)
    }

    /// After an entry: skips to `,` (consumed) or the closing bracket
    /// `close` (left for the caller's loop); anything else declines.
    fn entry_end(&mut self, close: u8) -> Option<()> {
        self.skip_blank()?;
        match self.peek()? {
            b',' => {
                self.pos += 1;
                Some(())
            }
            c if c == close => Some(()),
            _ => None,
        }
    }

    fn seq(&mut self, depth: usize) -> Option<()> {
        self.pos += 1;
        let at = self.tree.open(false);
        let mut count = 0;
        loop {
            self.skip_blank()?;
            if self.peek()? == b']' {
                self.pos += 1;
                self.tree.close(at, count);
                return Some(());
            }
            self.value(depth + 1)?;
            count += 1;
            self.entry_end(b']')?;
        }
    }

    fn map(&mut self, depth: usize) -> Option<()> {
        self.pos += 1;
        let at = self.tree.open(true);
        let mut seen = 0u64;
        let mut count = 0;
        loop {
            self.skip_blank()?;
            let key_start = self.pos;
            let key = match self.peek()? {
                b'}' => {
                    self.pos += 1;
                    self.tree.close(at, count);
                    return Some(());
                }
                b'"' | b'\'' => self.quoted()?,
                b'[' | b'{' => return None,
                _ => self.plain()?,
            };
            let key_at = self.tree.nodes.len();
            self.tree.push_scalar(key.text, key.plain);
            if self.tree.duplicate_key(at, key_at, &mut seen) {
                return None;
            }
            // The colon: on the key's line, close enough to the key.
            if self.skip_blank()? || self.peek()? != b':' || self.pos - key_start > MAX_KEY_SPAN {
                return None;
            }
            self.pos += 1;
            if key.plain && !matches!(self.peek(), None | Some(b' ')) {
                return None;
            }
            self.value(depth + 1)?;
            count += 1;
            self.entry_end(b'}')?;
        }
    }

    /// A plain scalar in flow context, ending on this line (see the type's
    /// docs for where it ends).
    fn plain(&mut self) -> Option<Scalar<'a>> {
        let rest = &self.line[self.pos..];
        let first = rest.chars().next()?;
        if is_indicator(first) && !(first == '-' && plain_dash_ok(rest)) {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut end = bytes.len();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b',' | b']' | b'}' => {
                    end = i;
                    break;
                }
                // `a[` or `a{`: a collection right after a scalar.
                b'[' | b'{' | b'\t' => return None,
                b':' => match bytes.get(i + 1) {
                    None | Some(b' ') => {
                        end = i;
                        break;
                    }
                    Some(b',' | b'?' | b'[' | b']' | b'{' | b'}' | b'\t') => return None,
                    Some(_) => {}
                },
                b'#' if i > 0 && bytes[i - 1] == b' ' => return None,
                _ => {}
            }
            i += 1;
        }
        let value = rest[..end].trim_end_matches(' ');
        if value.is_empty() {
            return None;
        }
        self.pos += end;
        Some(Scalar {
            text: Cow::Borrowed(value),
            plain: true,
        })
    }
}

/// Reads a document whose content is one flow collection: `first` is its
/// first content line (without indentation, starting with `[` or `{`),
/// `more` the document's remaining lines.  After the closing bracket only
/// blanks, comments and blank or comment lines may follow.
fn flow_document<'a, I: Iterator<Item = &'a str>>(
    first: &'a str,
    more: I,
    tree: &mut Tree<'a>,
) -> Option<()> {
    let mut fp = FlowParser {
        line: first,
        pos: 0,
        more: Some(more),
        tree,
    };
    fp.value(0)?;
    if !rest_is_blank(&fp.line[fp.pos..]) {
        return None;
    }
    for raw in fp.more? {
        let content = raw.trim_start_matches(' ');
        let content = content.strip_suffix('\r').unwrap_or(content);
        if !(content.is_empty() || content.starts_with('#')) {
            return None;
        }
    }
    Some(())
}

// ---------------------------------------------------------------------------
// Scalar resolution

/// What a plain scalar resolves to under `serde_yaml_ng`'s rules, as far as
/// this module is sure of it.
#[derive(Debug, PartialEq)]
enum Resolved {
    Null,
    Bool(bool),
    UInt(u64),
    Int(i64),
    Float(f64),
    Str,
    /// Something the full parser might read differently (hex, octal,
    /// exponents, infinities, leading zeros, out-of-range integers...).
    Unsure,
}

/// Does a plain scalar resolve to null?
fn is_null_text(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

fn resolve_plain(s: &str) -> Resolved {
    if is_null_text(s) {
        return Resolved::Null;
    }
    match s {
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        _ => {}
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        // No number starts otherwise; words such as `inf` or `nan` would be
        // non-finite floats, which the full parser also leaves as strings.
        return Resolved::Str;
    }
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let simple_int = |d: &str| {
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && (d == "0" || !d.starts_with('0'))
    };
    if simple_int(digits) {
        return if neg {
            digits
                .parse::<i64>()
                .ok()
                .and_then(|v| v.checked_neg())
                .map_or(Resolved::Unsure, Resolved::Int)
        } else {
            digits
                .parse::<u64>()
                .map_or(Resolved::Unsure, Resolved::UInt)
        };
    }
    if let Some((int, frac)) = digits.split_once('.') {
        if simple_int(int) && !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<f64>() {
                Ok(f) if f.is_finite() => Resolved::Float(f),
                _ => Resolved::Unsure,
            };
        }
    }
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if s.parse::<f64>().is_ok()
        || unsigned.starts_with("0x")
        || unsigned.starts_with("0o")
        || unsigned.starts_with("0b")
        || unsigned.starts_with(".inf")
        || unsigned.starts_with(".nan")
        || s.starts_with('+')
        || unsigned.bytes().all(|b| b.is_ascii_digit())
    {
        Resolved::Unsure
    } else {
        Resolved::Str
    }
}

// ---------------------------------------------------------------------------
// serde

/// A deserialization failure on the fast path; its text is only for
/// debugging, callers fall back to the full parser.
#[derive(Debug)]
pub(crate) struct FastError(String);

impl fmt::Display for FastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FastError {}

impl de::Error for FastError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FastError(msg.to_string())
    }
}

fn unsure() -> FastError {
    FastError("scalar resolution left to the full parser".to_owned())
}

/// One node of a [`Tree`], as a serde [`Deserializer`].
#[derive(Clone, Copy)]
pub(crate) struct NodeRef<'t, 'a> {
    tree: &'t Tree<'a>,
    idx: usize,
}

impl<'t, 'a> NodeRef<'t, 'a> {
    fn node(&self) -> Flat<'a> {
        self.tree.nodes[self.idx]
    }

    fn unexpected(&self) -> de::Unexpected<'t> {
        match self.node() {
            Flat::Scalar { text, .. } => de::Unexpected::Str(text),
            Flat::Escaped { index } => de::Unexpected::Str(&self.tree.owned[index]),
            Flat::Seq { .. } => de::Unexpected::Seq,
            Flat::Map { .. } => de::Unexpected::Map,
        }
    }

    fn plain_text(&self) -> Option<&'a str> {
        match self.node() {
            Flat::Scalar { text, plain: true } => Some(text),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        self.plain_text().is_some_and(is_null_text)
    }

    /// Visits a scalar's text (borrowed from the document where possible);
    /// `None` for a collection.
    fn visit_text<V: Visitor<'a>>(&self, visitor: V) -> Option<Result<V::Value, FastError>> {
        match self.node() {
            Flat::Scalar { text, .. } => Some(visitor.visit_borrowed_str(text)),
            Flat::Escaped { index } => Some(visitor.visit_str(&self.tree.owned[index])),
            _ => None,
        }
    }

    fn seq(&self) -> Option<SeqIter<'t, 'a>> {
        match self.node() {
            Flat::Seq { end, len } => Some(SeqIter {
                tree: self.tree,
                pos: self.idx + 1,
                end,
                left: len,
            }),
            _ => None,
        }
    }

    fn map(&self) -> Option<MapIter<'t, 'a>> {
        match self.node() {
            Flat::Map { end, len } => Some(MapIter {
                tree: self.tree,
                pos: self.idx + 1,
                end,
                left: len,
                value: None,
            }),
            _ => None,
        }
    }
}

impl<'de> Deserializer<'de> for NodeRef<'_, 'de> {
    type Error = FastError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        if let Some(text) = self.plain_text() {
            return match resolve_plain(text) {
                Resolved::Null => visitor.visit_unit(),
                Resolved::Bool(b) => visitor.visit_bool(b),
                Resolved::UInt(v) => visitor.visit_u64(v),
                Resolved::Int(v) => visitor.visit_i64(v),
                Resolved::Float(v) => visitor.visit_f64(v),
                Resolved::Str => visitor.visit_borrowed_str(text),
                Resolved::Unsure => Err(unsure()),
            };
        }
        if let Some(seq) = self.seq() {
            return visitor.visit_seq(seq);
        }
        if let Some(map) = self.map() {
            return visitor.visit_map(map);
        }
        match self.visit_text(visitor) {
            Some(result) => result,
            None => Err(unsure()),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.plain_text().map(resolve_plain) {
            Some(Resolved::Bool(b)) => visitor.visit_bool(b),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.plain_text().map(resolve_plain) {
            Some(Resolved::UInt(v)) => match i64::try_from(v) {
                Ok(v) => visitor.visit_i64(v),
                Err(_) => Err(unsure()),
            },
            Some(Resolved::Int(v)) => visitor.visit_i64(v),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.plain_text().map(resolve_plain) {
            Some(Resolved::UInt(v)) => visitor.visit_u64(v),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.plain_text().map(resolve_plain) {
            Some(Resolved::UInt(v)) => visitor.visit_f64(v as f64),
            Some(Resolved::Int(v)) => visitor.visit_f64(v as f64),
            Some(Resolved::Float(v)) => visitor.visit_f64(v),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        let unexpected = self.unexpected();
        match self.visit_text(visitor) {
            Some(result) => result,
            None => Err(FastError(format!(
                "invalid type: {unexpected}, expected a string"
            ))),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        if self.is_null() {
            visitor.visit_unit()
        } else {
            Err(de::Error::invalid_type(self.unexpected(), &visitor))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FastError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FastError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.seq() {
            Some(seq) => visitor.visit_seq(seq),
            None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FastError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FastError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self.map() {
            Some(map) => visitor.visit_map(map),
            None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FastError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FastError> {
        match self.node() {
            Flat::Scalar { text, .. } => visitor.visit_enum(UnitVariant(text)),
            Flat::Escaped { index } => visitor.visit_enum(UnitVariant(&self.tree.owned[index])),
            _ => Err(unsure()),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! { bytes byte_buf }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_u64(visitor)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        self.deserialize_f64(visitor)
    }
}

/// The items of a sequence node.
struct SeqIter<'t, 'a> {
    tree: &'t Tree<'a>,
    /// The next item's index.
    pos: usize,
    end: usize,
    left: usize,
}

impl<'de> SeqAccess<'de> for SeqIter<'_, 'de> {
    type Error = FastError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, FastError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let item = NodeRef {
            tree: self.tree,
            idx: self.pos,
        };
        self.pos = self.tree.end(self.pos);
        self.left = self.left.saturating_sub(1);
        seed.deserialize(item).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// The entries of a mapping node.
struct MapIter<'t, 'a> {
    tree: &'t Tree<'a>,
    /// The next key's index.
    pos: usize,
    end: usize,
    left: usize,
    /// The value of the key just read.
    value: Option<usize>,
}

impl<'de> MapAccess<'de> for MapIter<'_, 'de> {
    type Error = FastError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FastError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let key = self.pos;
        let value = self.tree.end(key);
        if value >= self.end {
            return Err(de::Error::custom("mapping key without a value"));
        }
        self.value = Some(value);
        self.pos = self.tree.end(value);
        self.left = self.left.saturating_sub(1);
        seed.deserialize(NodeRef {
            tree: self.tree,
            idx: key,
        })
        .map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, FastError> {
        match self.value.take() {
            Some(idx) => seed.deserialize(NodeRef {
                tree: self.tree,
                idx,
            }),
            None => Err(de::Error::custom("value requested before key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// A scalar read as a unit enum variant.
struct UnitVariant<'n>(&'n str);

impl<'de> EnumAccess<'de> for UnitVariant<'_> {
    type Error = FastError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), FastError> {
        let de: de::value::StrDeserializer<'_, FastError> = self.0.into_deserializer();
        Ok((seed.deserialize(de)?, self))
    }
}

impl<'de> VariantAccess<'de> for UnitVariant<'_> {
    type Error = FastError;

    fn unit_variant(self) -> Result<(), FastError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        _seed: T,
    ) -> Result<T::Value, FastError> {
        Err(unsure())
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, FastError> {
        Err(unsure())
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, FastError> {
        Err(unsure())
    }
}

#[cfg(test)]
#[path = "tests/fastyaml.rs"]
mod tests;
