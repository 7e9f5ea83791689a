//! The Calico selector language: parsing, canonical form, unique IDs,
//! evaluation against labels, and label restrictions for indexing.
//!
//! Behaviour matches upstream Calico (`libcalico-go/lib/selector`) so that
//! selectors written for Calico mean the same thing here and produce the
//! same canonical strings and IDs:
//!
//! * [`parse`] accepts exactly the selectors upstream accepts, except that
//!   parentheses may nest at most [`MAX_NESTING_DEPTH`] deep (upstream has
//!   no limit; see [`SelectorErrorKind::TooDeep`]). The empty selector, or
//!   one of only spaces/tabs, is `all()`. Label names are limited to
//!   [`MAX_LABEL_LEN`] bytes, as upstream. The overall length is not
//!   limited (also as upstream): parsing cost grows near-linearly with it.
//! * [`Selector::canonical`] is upstream's `String()` form and
//!   [`Selector::unique_id`] upstream's `UniqueID()`: `"s:"` followed by the
//!   unpadded URL-safe base64 of SHA-224 over the bytes `"s:" + canonical`.
//! * The canonical form reparses to the same selector, with one upstream
//!   quirk kept for byte-identical IDs: a negation of a parenthesised
//!   negation (`!(!a == "x")`) prints as `!!a == "x"`, and reparsing that
//!   collapses the `!!`. The meaning is unchanged; the second canonical form
//!   is a fixed point.
//! * A comparison with a missing label is false for `==`, `in`, `contains`,
//!   `starts with` and `ends with`, and true for `!=` and `not in`.
//!
//! Parse once, evaluate many times: [`Selector::evaluate`] does not
//! allocate, and a `Selector` is an `Arc`, so cloning it is cheap.

mod ast;
mod labels;
mod parser;
mod restrictions;
mod tokenizer;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use sha2::{Digest, Sha224};

pub use labels::{LabelSource, WithParents};
pub use restrictions::LabelRestriction;
pub use tokenizer::is_valid_label;

/// Longest accepted label name, in bytes (upstream's limit).
pub const MAX_LABEL_LEN: usize = 512;

/// Deepest accepted nesting of parentheses. Upstream has no limit; this one
/// keeps every recursive walk of a parsed selector far from the stack limit
/// of even small (e.g. 2 MiB test or worker) thread stacks.
pub const MAX_NESTING_DEPTH: usize = 128;

/// Why a selector was rejected, and where.
///
/// Displays on one line, naming the byte offset and the offending token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector at byte {position}: {kind}")]
pub struct SelectorError {
    /// Byte offset in the input where the problem was found.
    pub position: usize,
    /// What was wrong.
    pub kind: SelectorErrorKind,
}

/// The kinds of [`SelectorError`]. Text taken from the input is shown
/// escaped and shortened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorErrorKind {
    /// A quote with no matching closing quote.
    #[error("unterminated string literal")]
    UnterminatedString,
    /// A single `=`.
    #[error("expected `==`, found a single `=`")]
    LoneEquals,
    /// A single `&`.
    #[error("expected `&&`, found a single `&`")]
    LoneAmpersand,
    /// A single `|`.
    #[error("expected `||`, found a single `|`")]
    LonePipe,
    /// A label followed by something that is not an operator.
    #[error("expected an operator after label {:?}", tokenizer::Shortened(.0))]
    ExpectedOperator(String),
    /// A label name was required here (`None`: at the end of input).
    #[error("expected a label name, found {}", describe_char(*.0))]
    ExpectedLabel(Option<char>),
    /// A label name longer than [`MAX_LABEL_LEN`].
    #[error("label name is {0} bytes long, the limit is {MAX_LABEL_LEN}")]
    LabelTooLong(usize),
    /// `has(`, `all(` or `global(` without its closing `)`.
    #[error("missing `)` after `{0}(`")]
    UnclosedCall(&'static str),
    /// A token that cannot start an operation.
    #[error("unexpected {0}")]
    Unexpected(String),
    /// Something specific was required.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar required.
        expected: &'static str,
        /// The token found instead.
        found: String,
    },
    /// A complete expression followed by more tokens.
    #[error("unexpected {0} after the end of the expression")]
    TrailingInput(String),
    /// Parentheses nested deeper than [`MAX_NESTING_DEPTH`].
    #[error("parentheses nested more than {MAX_NESTING_DEPTH} deep")]
    TooDeep,
}

fn describe_char(c: Option<char>) -> String {
    match c {
        Some(c) => format!("{c:?}"),
        None => "end of input".to_owned(),
    }
}

/// A parsed selector.
///
/// Cheap to clone (shared). Equality and hashing are by canonical form, so
/// two selectors written differently but with the same meaning-preserving
/// normalisation (whitespace, quotes, set order) are equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    inner: Arc<Inner>,
}

// Selectors are shared across threads and actors.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Selector>();
};

struct Inner {
    root: ast::Node,
    canonical: String,
    /// Computed on first use: most parsed selectors (policy selectors held
    /// by the calculation graph) never need it, and it costs a SHA-224.
    unique_id: OnceLock<String>,
}

impl PartialEq for Inner {
    fn eq(&self, other: &Self) -> bool {
        self.canonical == other.canonical
    }
}

impl Eq for Inner {}

impl std::hash::Hash for Inner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.canonical.hash(state);
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.canonical)
    }
}

/// Parses selector text.
///
/// Never panics; any input that upstream rejects (and any nesting deeper
/// than [`MAX_NESTING_DEPTH`]) gives an error naming the position.
pub fn parse(s: &str) -> Result<Selector, SelectorError> {
    let tokens = tokenizer::tokenize(s)?;
    let root = parser::parse_tokens(&tokens)?;
    Ok(Selector::from_root(root))
}

/// Checks that `s` parses, without building the selector (no canonical
/// form, no ID): the same acceptance as [`parse`], for validation.
pub fn validate(s: &str) -> Result<(), SelectorError> {
    let tokens = tokenizer::tokenize(s)?;
    parser::parse_tokens(&tokens).map(|_| ())
}

/// The canonical form of `s` (see [`Selector::canonical`]).
///
/// Like upstream's `Normalise`, surrounding whitespace (including newlines)
/// is trimmed before parsing; unlike it, a selector that does not parse is
/// an error rather than being returned unchanged.
pub fn normalize(s: &str) -> Result<String, SelectorError> {
    parse(s.trim()).map(|sel| sel.canonical().to_owned())
}

/// `"<prefix>:"` + unpadded URL-safe base64 of SHA-224 over
/// `"<prefix>:" + content` (upstream's unique-ID scheme).
fn make_unique_id(prefix: &str, content: &str) -> String {
    let mut hasher = Sha224::new();
    hasher.update(prefix.as_bytes());
    hasher.update(b":");
    hasher.update(content.as_bytes());
    let digest = hasher.finalize();
    let mut id = String::with_capacity(prefix.len() + 1 + 38);
    id.push_str(prefix);
    id.push(':');
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(digest, &mut id);
    id
}

impl Selector {
    fn from_root(root: ast::Node) -> Self {
        let mut canonical = String::new();
        root.write_canonical(&mut canonical);
        Selector {
            inner: Arc::new(Inner {
                root,
                canonical,
                unique_id: OnceLock::new(),
            }),
        }
    }

    /// The selector `all()`, which matches every label set (shared instance).
    pub fn all() -> Selector {
        static ALL: OnceLock<Selector> = OnceLock::new();
        ALL.get_or_init(|| Selector::from_root(ast::Node::All))
            .clone()
    }

    /// Upstream's canonical text: parsing it again yields an equal selector.
    pub fn canonical(&self) -> &str {
        &self.inner.canonical
    }

    /// Upstream's unique ID: `"s:"` + base64url(SHA-224(`"s:"` + canonical)).
    pub fn unique_id(&self) -> &str {
        self.inner
            .unique_id
            .get_or_init(|| make_unique_id("s", &self.inner.canonical))
    }

    /// True if `labels` match. Does not allocate.
    pub fn evaluate<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        self.inner.root.evaluate(labels)
    }

    /// The label key if this selector is exactly `has(key)`: then any
    /// labels carrying `key` match, so an index whose candidates for
    /// the key's presence restriction are exactly the objects carrying it
    /// need not evaluate the selector on them.
    pub fn presence_only(&self) -> Option<&str> {
        match &self.inner.root {
            ast::Node::Has(k) => Some(k),
            _ => None,
        }
    }

    /// Per-label necessary conditions for a match, for index pre-filtering.
    ///
    /// Invariant: any labels that this selector matches satisfy every
    /// returned restriction. Computed on each call (it allocates); callers
    /// that need it repeatedly should keep the result.
    pub fn label_restrictions(&self) -> BTreeMap<String, LabelRestriction> {
        restrictions::restrictions(&self.inner.root)
    }
}

impl Default for Selector {
    /// `all()`, as for an empty selector string.
    fn default() -> Self {
        Selector::all()
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.canonical())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}
