//! Lexer for the selector language: turns selector text into a flat token
//! list that always ends with [`TokenKind::Eof`].
//!
//! The lexical rules follow upstream Calico exactly, because any difference
//! would change which selectors are accepted:
//!
//! * Only ASCII space and tab separate tokens. Any other byte that does not
//!   start a token (including newlines) is an error.
//! * Label names are runs of `[A-Za-z0-9_./-]`, at most
//!   [`MAX_LABEL_LEN`] bytes long.
//! * String literals are quoted with `"` or `'` and run to the next quote of
//!   the same kind; there are no escapes, so a literal can hold the other
//!   quote character but never its own.
//! * `has(`, `all(` and `global(` are recognised as prefixes (no space
//!   before the parenthesis); whitespace is allowed inside the parentheses.
//! * Word operators (`contains`, `starts with`, `ends with`, `not in`, `in`)
//!   are only recognised directly after a label, and must end at a word
//!   boundary. The two-word operators accept any amount of whitespace between
//!   the words, including none (`startswith`, `notin`).
//!
//! Tokens borrow their text from the input; the lexer allocates only the
//! token vector.

use super::{SelectorError, SelectorErrorKind, MAX_LABEL_LEN};

/// The kind of a token, carrying the borrowed text where there is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind<'a> {
    /// A label name outside `has(...)`.
    Label(&'a str),
    /// The contents of a quoted string, without the quotes.
    Str(&'a str),
    LBrace,
    RBrace,
    Comma,
    Eq,
    Ne,
    In,
    NotIn,
    Not,
    Contains,
    StartsWith,
    EndsWith,
    All,
    Global,
    /// `has(<label>)`, with the label name.
    Has(&'a str),
    LParen,
    RParen,
    And,
    Or,
    Eof,
}

/// One token and the byte offset in the input where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub kind: TokenKind<'a>,
    pub pos: usize,
}

impl std::fmt::Display for TokenKind<'_> {
    /// Describes the token for error messages, on one line: text from the
    /// input is shown escaped and shortened.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenKind::Label(l) => write!(f, "label {:?}", Shortened(l)),
            TokenKind::Str(s) => write!(f, "string {:?}", Shortened(s)),
            TokenKind::Has(l) => write!(f, "`has({l})`"),
            TokenKind::LBrace => f.write_str("`{`"),
            TokenKind::RBrace => f.write_str("`}`"),
            TokenKind::Comma => f.write_str("`,`"),
            TokenKind::Eq => f.write_str("`==`"),
            TokenKind::Ne => f.write_str("`!=`"),
            TokenKind::In => f.write_str("`in`"),
            TokenKind::NotIn => f.write_str("`not in`"),
            TokenKind::Not => f.write_str("`!`"),
            TokenKind::Contains => f.write_str("`contains`"),
            TokenKind::StartsWith => f.write_str("`starts with`"),
            TokenKind::EndsWith => f.write_str("`ends with`"),
            TokenKind::All => f.write_str("`all()`"),
            TokenKind::Global => f.write_str("`global()`"),
            TokenKind::LParen => f.write_str("`(`"),
            TokenKind::RParen => f.write_str("`)`"),
            TokenKind::And => f.write_str("`&&`"),
            TokenKind::Or => f.write_str("`||`"),
            TokenKind::Eof => f.write_str("end of input"),
        }
    }
}

/// Input text shown in error messages, cut to a readable length on a char
/// boundary. Its `Debug` form escapes control characters, so the message
/// stays on one line.
pub(crate) struct Shortened<'a>(pub &'a str);

impl std::fmt::Debug for Shortened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const LIMIT: usize = 40;
        if self.0.len() <= LIMIT {
            return write!(f, "{:?}", self.0);
        }
        let mut end = LIMIT;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}...", &self.0[..end])
    }
}

/// True for the bytes allowed in a label name.
pub(crate) fn is_label_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-')
}

/// True if `label` would be accepted as a label name by the selector
/// language (non-empty, label bytes only, not too long).
pub fn is_valid_label(label: &str) -> bool {
    !label.is_empty() && label.len() <= MAX_LABEL_LEN && label.bytes().all(is_label_byte)
}

/// Splits `input` into tokens.
///
/// On success the last token is always [`TokenKind::Eof`], positioned at
/// `input.len()`; the parser relies on that sentinel to look ahead safely.
pub(crate) fn tokenize(input: &str) -> Result<Vec<Token<'_>>, SelectorError> {
    Lexer {
        input,
        pos: 0,
        tokens: Vec::with_capacity(input.len() / 3 + 2),
    }
    .run()
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    tokens: Vec<Token<'a>>,
}

impl<'a> Lexer<'a> {
    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn skip_whitespace(&mut self) {
        let skipped = self
            .rest()
            .bytes()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        self.pos += skipped;
    }

    fn err(&self, pos: usize, kind: SelectorErrorKind) -> SelectorError {
        SelectorError {
            position: pos,
            kind,
        }
    }

    fn push(&mut self, kind: TokenKind<'a>, start: usize, len: usize) {
        self.tokens.push(Token { kind, pos: start });
        self.pos = start + len;
    }

    fn run(mut self) -> Result<Vec<Token<'a>>, SelectorError> {
        loop {
            self.skip_whitespace();
            let start = self.pos;
            let rest = self.rest();
            let Some(&first) = rest.as_bytes().first() else {
                self.tokens.push(Token {
                    kind: TokenKind::Eof,
                    pos: start,
                });
                return Ok(self.tokens);
            };
            let after_label = matches!(
                self.tokens.last(),
                Some(Token {
                    kind: TokenKind::Label(_),
                    ..
                })
            );
            match first {
                b'(' => self.push(TokenKind::LParen, start, 1),
                b')' => self.push(TokenKind::RParen, start, 1),
                b'{' => self.push(TokenKind::LBrace, start, 1),
                b'}' => self.push(TokenKind::RBrace, start, 1),
                b',' => self.push(TokenKind::Comma, start, 1),
                b'"' | b'\'' => {
                    let body = &rest[1..];
                    let Some(close) = body.find(first as char) else {
                        return Err(self.err(start, SelectorErrorKind::UnterminatedString));
                    };
                    self.push(TokenKind::Str(&body[..close]), start, close + 2);
                }
                b'=' if rest.starts_with("==") => self.push(TokenKind::Eq, start, 2),
                b'=' => return Err(self.err(start, SelectorErrorKind::LoneEquals)),
                b'!' if rest.starts_with("!=") => self.push(TokenKind::Ne, start, 2),
                b'!' => self.push(TokenKind::Not, start, 1),
                b'&' if rest.starts_with("&&") => self.push(TokenKind::And, start, 2),
                b'&' => return Err(self.err(start, SelectorErrorKind::LoneAmpersand)),
                b'|' if rest.starts_with("||") => self.push(TokenKind::Or, start, 2),
                b'|' => return Err(self.err(start, SelectorErrorKind::LonePipe)),
                _ if after_label => self.word_operator(start)?,
                _ => self.word(start)?,
            }
        }
    }

    /// Lexes the operator that must follow a label.
    fn word_operator(&mut self, start: usize) -> Result<(), SelectorError> {
        const OPERATORS: [(&[&str], TokenKind<'static>); 5] = [
            (&["contains"], TokenKind::Contains),
            (&["starts", "with"], TokenKind::StartsWith),
            (&["ends", "with"], TokenKind::EndsWith),
            (&["not", "in"], TokenKind::NotIn),
            (&["in"], TokenKind::In),
        ];
        for (words, kind) in OPERATORS {
            if let Some(len) = match_words(self.rest(), words) {
                self.push(kind, start, len);
                return Ok(());
            }
        }
        let label = match self.tokens.last() {
            Some(Token {
                kind: TokenKind::Label(l),
                ..
            }) => (*l).to_owned(),
            _ => String::new(),
        };
        Err(self.err(start, SelectorErrorKind::ExpectedOperator(label)))
    }

    /// Lexes `has(label)`, `all()`, `global()` or a bare label.
    fn word(&mut self, start: usize) -> Result<(), SelectorError> {
        let rest = self.rest();
        if rest.starts_with("has(") {
            self.pos = start + 4;
            self.skip_whitespace();
            let label = self.label()?;
            self.skip_whitespace();
            if !self.rest().starts_with(')') {
                return Err(self.err(self.pos, SelectorErrorKind::UnclosedCall("has")));
            }
            self.tokens.push(Token {
                kind: TokenKind::Has(label),
                pos: start,
            });
            self.pos += 1;
        } else if let Some((name, kind)) =
            [("all(", TokenKind::All), ("global(", TokenKind::Global)]
                .into_iter()
                .find(|(prefix, _)| rest.starts_with(prefix))
        {
            self.pos = start + name.len();
            self.skip_whitespace();
            if !self.rest().starts_with(')') {
                let call = &name[..name.len() - 1];
                return Err(self.err(self.pos, SelectorErrorKind::UnclosedCall(call)));
            }
            self.tokens.push(Token { kind, pos: start });
            self.pos += 1;
        } else {
            let label = self.label()?;
            self.tokens.push(Token {
                kind: TokenKind::Label(label),
                pos: start,
            });
        }
        Ok(())
    }

    /// Consumes a label name at the current position.
    fn label(&mut self) -> Result<&'a str, SelectorError> {
        let start = self.pos;
        let rest = self.rest();
        let len = rest.bytes().take_while(|&b| is_label_byte(b)).count();
        if len == 0 {
            let found = rest.chars().next();
            return Err(self.err(start, SelectorErrorKind::ExpectedLabel(found)));
        }
        if len > MAX_LABEL_LEN {
            return Err(self.err(start, SelectorErrorKind::LabelTooLong(len)));
        }
        self.pos += len;
        Ok(&rest[..len])
    }
}

/// If `input` starts with the given operator words followed by a word
/// boundary, returns the number of bytes consumed.
///
/// A word boundary is the end of input or a byte that cannot continue a
/// label. For a one-word operator it is checked directly after the word.
/// For a two-word operator, whitespace is skipped after each word (so it is
/// optional between them: `notin` is accepted) and the boundary is checked
/// after that whitespace, as upstream does.
fn match_words(input: &str, words: &[&str]) -> Option<usize> {
    let mut rest = input;
    for word in words {
        rest = rest.strip_prefix(word)?;
        if words.len() > 1 {
            rest = rest.trim_start_matches([' ', '\t']);
        }
    }
    if rest.bytes().next().is_some_and(is_label_byte) {
        return None;
    }
    Some(input.len() - rest.len())
}
