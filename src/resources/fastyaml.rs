//! A fast reader for the block-style YAML subset that Calico resources are
//! written in, used in front of `serde_yaml_ng`.
//!
//! `serde_yaml_ng` (libyaml underneath) reads a few MB/s; a datastore of
//! 100,000 endpoints is 60 MB of YAML.  Nearly all of it uses a small subset:
//! block mappings and sequences indented with spaces, one-line plain or
//! quoted scalars, one-line flow collections and comments.  This module
//! parses exactly that subset into a borrowed tree ([`Node`]) and offers a
//! serde [`Deserializer`] over it.
//!
//! Invariants (the reason this is safe to put in front of the real parser):
//! * **Decline, never guess.**  [`parse`] returns `None` for anything outside
//!   the subset (anchors, aliases, tags, block scalars, multi-line scalars,
//!   tabs in indentation, directives, complex keys, duplicate keys, merge
//!   keys, numbers in any form other than plain decimal ...).  The caller
//!   then decodes the text with `serde_yaml_ng`, so the subset only has to be
//!   *correct*, not complete.
//! * **Same values as `serde_yaml_ng`.**  For every text it accepts, a
//!   successful deserialization through [`Node`] yields the value
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

/// One YAML node of the supported subset.  Strings borrow from the text
/// unless an escape had to be resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    /// A scalar; `plain` is false for single- and double-quoted scalars
    /// (which are always strings).
    Scalar {
        text: Cow<'a, str>,
        plain: bool,
    },
    Seq(Vec<Node<'a>>),
    Map(Vec<(Node<'a>, Node<'a>)>),
}

/// Maximum nesting of block and flow collections accepted (deeper texts go
/// to the full parser, which has its own limit).
const MAX_DEPTH: usize = 64;

/// Parses one YAML document (optionally starting with a `---` line) of the
/// supported subset.  `None` means "not in the subset": decode with the full
/// parser instead.
pub(crate) fn parse(text: &str) -> Option<Node<'_>> {
    if has_special_chars(text) {
        return None;
    }
    parse_clean(text)
}

/// [`parse`] for a text the caller has already checked with
/// [`has_special_chars`] (for example as part of a larger text).
pub(crate) fn parse_clean(text: &str) -> Option<Node<'_>> {
    let mut lines = Vec::with_capacity(text.len() / 16);
    for (i, raw) in super::lines::exclusive(text).enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let content = raw.trim_start_matches(' ');
        let indent = raw.len() - content.len();
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
        lines.push(Line {
            indent,
            text: content,
        });
    }
    if lines.is_empty() {
        return None;
    }
    let mut p = BlockParser { lines, pos: 0 };
    let indent = p.lines[0].indent;
    let node = p.block(indent, 0)?;
    (p.pos == p.lines.len()).then_some(node)
}

fn is_marker(content: &str, marker: &str) -> bool {
    content
        .strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// True if `s` is only whitespace, optionally followed by a comment (which
/// YAML only recognises after whitespace).
fn rest_is_blank(s: &str) -> bool {
    let t = s.trim_start_matches([' ', '\t']);
    t.is_empty() || (t.starts_with('#') && t.len() < s.len())
}

/// Characters the full parser rejects or treats as line breaks (C0/C1
/// controls other than tab and newlines, DEL, U+2028/U+2029) and a byte
/// order mark: texts containing them go to the full parser.
pub(crate) fn has_special_chars(text: &str) -> bool {
    let b = text.as_bytes();
    // Fast path (vectorised): printable ASCII, tabs and line ends only.
    if b.iter()
        .all(|&c| (0x20..0x7f).contains(&c) || c == b'\n' || c == b'\t' || c == b'\r')
    {
        return false;
    }
    b.iter().enumerate().any(|(i, &c)| match c {
        b'\t' | b'\n' | b'\r' => false,
        0..=0x1f | 0x7f => true,
        0xc2 => matches!(b.get(i + 1), Some(0x80..=0x9f)),
        0xe2 => b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)),
        0xef => b.get(i + 1) == Some(&0xbb) && b.get(i + 2) == Some(&0xbf),
        _ => false,
    })
}

#[derive(Debug)]
struct Line<'a> {
    indent: usize,
    /// The line without its indentation (never empty, never a comment).
    text: &'a str,
}

struct BlockParser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
}

impl<'a> BlockParser<'a> {
    /// Parses the block collection whose first line is `self.pos`, indented
    /// by exactly `indent`.
    fn block(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
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

    fn sequence(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
        let mut items = Vec::new();
        while let Some(line) = self.lines.get(self.pos) {
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
            let after = &line.text[1..];
            let rest = after.trim_start_matches(' ');
            if rest.is_empty() || rest.starts_with('#') {
                if !rest_is_blank(after) {
                    return None;
                }
                self.pos += 1;
                items.push(self.nested_or_null(indent, depth)?);
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
                items.push(self.block(col, depth + 1)?);
            } else {
                items.push(inline_value(rest, depth)?);
                self.pos += 1;
                self.no_continuation(indent)?;
            }
        }
        Some(Node::Seq(items))
    }

    fn mapping(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
        // Resource mappings rarely exceed 16 keys: one allocation instead of
        // growing 4 -> 8 -> 16 (the tree is dropped right after decoding).
        let mut entries: Vec<(Node<'a>, Node<'a>)> = Vec::with_capacity(16);
        while let Some(line) = self.lines.get(self.pos) {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.text)?;
            if let Node::Scalar { text, plain: true } = &key {
                if text == "<<" {
                    return None;
                }
            }
            let value_text = rest.trim_start_matches([' ', '\t']);
            // `split_key` guarantees whitespace (or nothing) after the colon,
            // so a `#` here starts a comment.
            let value = if value_text.is_empty() || value_text.starts_with('#') {
                self.pos += 1;
                match self.lines.get(self.pos) {
                    // An indentless sequence as the value of this key.
                    Some(next) if next.indent == indent && is_seq_entry(next.text) => {
                        self.sequence(indent, depth + 1)?
                    }
                    _ => self.nested_or_null(indent, depth)?,
                }
            } else {
                let v = inline_value(value_text, depth)?;
                self.pos += 1;
                self.no_continuation(indent)?;
                v
            };
            push_unique(&mut entries, key, value)?;
        }
        Some(Node::Map(entries))
    }

    /// The value after `key:` or `-` with nothing on the line: the block
    /// indented deeper on the next line, or an empty (null) plain scalar.
    fn nested_or_null(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
        match self.lines.get(self.pos) {
            Some(next) if next.indent > indent => self.block(next.indent, depth + 1),
            _ => Some(Node::Scalar {
                text: Cow::Borrowed(""),
                plain: true,
            }),
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

/// Appends a mapping entry, declining duplicate scalar keys (whose handling
/// differs between targets) and non-scalar keys.
fn push_unique<'a>(
    entries: &mut Vec<(Node<'a>, Node<'a>)>,
    key: Node<'a>,
    value: Node<'a>,
) -> Option<()> {
    let Node::Scalar { text, .. } = &key else {
        return None;
    };
    // Length and end bytes first: most keys differ there, and the full
    // comparison is a library call.
    let (b, n) = (text.as_bytes(), text.len());
    let duplicate = entries.iter().any(|(k, _)| match k {
        Node::Scalar { text: t, .. } => {
            let tb = t.as_bytes();
            tb.len() == n && tb.first() == b.first() && tb.last() == b.last() && tb == b
        }
        _ => false,
    });
    if duplicate {
        return None;
    }
    entries.push((key, value));
    Some(())
}

/// Characters that may not start a plain scalar.
const INDICATORS: &[char] = &[
    '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`',
];

/// Splits a block mapping line into its key and the text after the colon.
fn split_key(text: &str) -> Option<(Node<'_>, &str)> {
    let first = text.chars().next()?;
    if first == '"' || first == '\'' {
        let (key, rest) = quoted(text)?;
        let rest = rest.trim_start_matches(' ');
        let after = rest.strip_prefix(':')?;
        if !(after.is_empty() || after.starts_with([' ', '\t'])) {
            return None;
        }
        return Some((key, after));
    }
    if INDICATORS.contains(&first) {
        // `-x: 1` is a valid plain key, but keep the subset simple.
        return None;
    }
    match colon_or_comment(text.as_bytes()) {
        Some((i, b':')) => {
            let key = text[..i].trim_end_matches([' ', '\t']);
            if key.len() != text[..i].len() {
                // `key : value`: legal, but rare; decline.
                return None;
            }
            Some((
                Node::Scalar {
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
    // A plain loop: these lines are short, and a vectorised search costs
    // more in set-up than it saves.
    for (i, &c) in bytes.iter().enumerate() {
        let hit = match c {
            b':' => matches!(bytes.get(i + 1), None | Some(b' ' | b'\t')),
            b'#' => i > 0 && matches!(bytes[i - 1], b' ' | b'\t'),
            _ => false,
        };
        if hit {
            return Some((i, c));
        }
    }
    None
}

/// A value written on the same line as its key or dash.
fn inline_value(text: &str, depth: usize) -> Option<Node<'_>> {
    let first = text.chars().next()?;
    match first {
        '"' | '\'' => {
            let (node, rest) = quoted(text)?;
            rest_is_blank(rest).then_some(node)
        }
        '[' | '{' => {
            let mut fp = FlowParser { text, pos: 0 };
            let node = fp.value(depth + 1)?;
            rest_is_blank(&text[fp.pos..]).then_some(node)
        }
        c if INDICATORS.contains(&c) && !(c == '-' && plain_dash_ok(text)) => None,
        _ => plain_block(text),
    }
}

/// `-` may start a plain scalar when it is not followed by a space (e.g. a
/// negative number, `-x`).
fn plain_dash_ok(text: &str) -> bool {
    text.len() > 1 && !text[1..].starts_with([' ', '\t'])
}

/// A plain scalar in block context: runs to the end of the line or to a
/// comment.  A `: ` inside would start a nested mapping (an error in YAML);
/// decline it.
fn plain_block(text: &str) -> Option<Node<'_>> {
    let end = match colon_or_comment(text.as_bytes()) {
        Some((_, b':')) => return None,
        Some((i, _)) => i,
        None => text.len(),
    };
    let value = text[..end].trim_end_matches([' ', '\t']);
    if value.is_empty() {
        return None;
    }
    Some(Node::Scalar {
        text: Cow::Borrowed(value),
        plain: true,
    })
}

/// Reads a single- or double-quoted scalar that closes on the same line;
/// returns it and the text after the closing quote.
fn quoted(text: &str) -> Option<(Node<'_>, &str)> {
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
                return Some((Node::Scalar { text, plain: false }, &body[i + 1..]));
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
                return Some((Node::Scalar { text, plain: false }, &body[i + 1..]));
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

/// A one-line flow collection (`[a, 'b']`, `{k: v}`), possibly nested.
struct FlowParser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> FlowParser<'a> {
    fn skip_spaces(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t']).len();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_spaces();
        match self.peek()? {
            b'[' => self.seq(depth),
            b'{' => self.map(depth),
            b'"' | b'\'' => {
                let (node, rest) = quoted(&self.text[self.pos..])?;
                self.pos = self.text.len() - rest.len();
                Some(node)
            }
            _ => self.plain(),
        }
    }

    fn seq(&mut self, depth: usize) -> Option<Node<'a>> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_spaces();
            if self.peek()? == b']' {
                self.pos += 1;
                return Some(Node::Seq(items));
            }
            items.push(self.value(depth + 1)?);
            self.skip_spaces();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {}
                _ => return None,
            }
        }
    }

    fn map(&mut self, depth: usize) -> Option<Node<'a>> {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            self.skip_spaces();
            if self.peek()? == b'}' {
                self.pos += 1;
                return Some(Node::Map(entries));
            }
            let key = match self.peek()? {
                b'"' | b'\'' => {
                    let (node, rest) = quoted(&self.text[self.pos..])?;
                    self.pos = self.text.len() - rest.len();
                    node
                }
                b'[' | b'{' => return None,
                _ => self.plain()?,
            };
            self.skip_spaces();
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            if !matches!(self.peek()?, b' ' | b'\t') {
                return None;
            }
            let value = self.value(depth + 1)?;
            push_unique(&mut entries, key, value)?;
            self.skip_spaces();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {}
                _ => return None,
            }
        }
    }

    /// A plain scalar in flow context: ends at `,`, `]`, `}` or `: `.
    fn plain(&mut self) -> Option<Node<'a>> {
        let rest = &self.text[self.pos..];
        let first = rest.chars().next()?;
        if INDICATORS.contains(&first) && !(first == '-' && plain_dash_ok(rest)) {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut end = bytes.len();
        for i in 0..bytes.len() {
            match bytes[i] {
                b',' | b']' | b'}' | b'[' | b'{' => {
                    end = i;
                    break;
                }
                b':' if matches!(bytes.get(i + 1), None | Some(b' ' | b'\t' | b',')) => {
                    end = i;
                    break;
                }
                b'#' if i > 0 && (bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') => return None,
                _ => {}
            }
        }
        if matches!(bytes.get(end), Some(b'[' | b'{')) {
            return None;
        }
        let value = rest[..end].trim_end_matches([' ', '\t']);
        if value.is_empty() {
            return None;
        }
        self.pos += end;
        Some(Node::Scalar {
            text: Cow::Borrowed(value),
            plain: true,
        })
    }
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

fn resolve_plain(s: &str) -> Resolved {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
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

impl<'a> Node<'a> {
    fn unexpected(&self) -> de::Unexpected<'_> {
        match self {
            Node::Scalar { text, .. } => de::Unexpected::Str(text),
            Node::Seq(_) => de::Unexpected::Seq,
            Node::Map(_) => de::Unexpected::Map,
        }
    }

    fn plain_text(&self) -> Option<&str> {
        match self {
            Node::Scalar { text, plain: true } => Some(text),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        self.plain_text()
            .is_some_and(|t| resolve_plain(t) == Resolved::Null)
    }
}

fn visit_text<'de, 'n, V: Visitor<'de>>(
    text: &'n Cow<'de, str>,
    visitor: V,
) -> Result<V::Value, FastError> {
    match text {
        Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
        Cow::Owned(s) => visitor.visit_str(s),
    }
}

impl<'de> Deserializer<'de> for &Node<'de> {
    type Error = FastError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FastError> {
        match self {
            Node::Scalar { text, plain: false } => visit_text(text, visitor),
            Node::Scalar { text, plain: true } => match resolve_plain(text) {
                Resolved::Null => visitor.visit_unit(),
                Resolved::Bool(b) => visitor.visit_bool(b),
                Resolved::UInt(v) => visitor.visit_u64(v),
                Resolved::Int(v) => visitor.visit_i64(v),
                Resolved::Float(v) => visitor.visit_f64(v),
                Resolved::Str => visit_text(text, visitor),
                Resolved::Unsure => Err(unsure()),
            },
            Node::Seq(items) => visitor.visit_seq(SeqIter(items.iter())),
            Node::Map(entries) => visitor.visit_map(MapIter {
                entries: entries.iter(),
                value: None,
            }),
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
        match self {
            Node::Scalar { text, .. } => visit_text(text, visitor),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
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
        match self {
            Node::Seq(items) => visitor.visit_seq(SeqIter(items.iter())),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
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
        match self {
            Node::Map(entries) => visitor.visit_map(MapIter {
                entries: entries.iter(),
                value: None,
            }),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
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
        match self {
            Node::Scalar { text, .. } => visitor.visit_enum(UnitVariant(text)),
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

struct SeqIter<'n, 'de>(std::slice::Iter<'n, Node<'de>>);

impl<'de> SeqAccess<'de> for SeqIter<'_, 'de> {
    type Error = FastError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, FastError> {
        self.0.next().map(|n| seed.deserialize(n)).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct MapIter<'n, 'de> {
    entries: std::slice::Iter<'n, (Node<'de>, Node<'de>)>,
    value: Option<&'n Node<'de>>,
}

impl<'de> MapAccess<'de> for MapIter<'_, 'de> {
    type Error = FastError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FastError> {
        match self.entries.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(k).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, FastError> {
        match self.value.take() {
            Some(v) => seed.deserialize(v),
            None => Err(de::Error::custom("value requested before key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A scalar read as a unit enum variant.
struct UnitVariant<'n, 'de>(&'n Cow<'de, str>);

impl<'de> EnumAccess<'de> for UnitVariant<'_, 'de> {
    type Error = FastError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), FastError> {
        let de: de::value::StrDeserializer<'_, FastError> = self.0.as_ref().into_deserializer();
        Ok((seed.deserialize(de)?, self))
    }
}

impl<'de> VariantAccess<'de> for UnitVariant<'_, 'de> {
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
