//! Recursive-descent parser from tokens to a [`Node`] tree.
//!
//! Grammar (lowest precedence first), as upstream:
//!
//! ```text
//! selector  := <empty> | or
//! or        := and ( "||" and )*
//! and       := operation ( "&&" operation )*
//! operation := "!"* ( "has(" label ")" | "all()" | "global()"
//!                   | label ("==" | "!=" | "contains" | "starts with"
//!                            | "ends with") string
//!                   | label ("in" | "not in") "{" [ string ( "," string )* [","] ] "}"
//!                   | "(" or ")" )
//! ```
//!
//! A run of `!` collapses to one negation (or none, for an even count), so
//! `!` binds tighter than any operator: `!a == "b"` is `!(a == "b")`.
//! Parentheses produce no node of their own. An empty (or all-whitespace)
//! selector is `all()`.
//!
//! Nesting limit: upstream has none (Go stacks grow on demand). Rust stacks
//! do not, so parentheses may nest at most [`MAX_NESTING_DEPTH`] deep; deeper
//! input is rejected with [`SelectorErrorKind::TooDeep`] instead of
//! overflowing the stack. Runs of `!` and long `&&`/`||` chains are handled
//! iteratively and need no limit. Every recursive walk over the tree
//! (evaluation, printing, dropping) is bounded by the same depth.

use super::ast::Node;
use super::tokenizer::{Token, TokenKind};
use super::{SelectorError, SelectorErrorKind, MAX_NESTING_DEPTH};

/// Parses a token list (ending with `Eof`) into a node tree.
pub(crate) fn parse_tokens(tokens: &[Token<'_>]) -> Result<Node, SelectorError> {
    let mut parser = Parser { tokens, pos: 0 };
    if parser.peek(0).kind == TokenKind::Eof {
        return Ok(Node::All);
    }
    let node = parser.or(0)?;
    let next = parser.peek(0);
    if next.kind != TokenKind::Eof {
        return Err(SelectorError {
            position: next.pos,
            kind: SelectorErrorKind::TrailingInput(next.kind.to_string()),
        });
    }
    Ok(node)
}

struct Parser<'t, 'a> {
    tokens: &'t [Token<'a>],
    pos: usize,
}

impl<'a> Parser<'_, 'a> {
    /// The token `offset` places ahead; past the end this is the final
    /// `Eof` token, so lookahead never goes out of bounds.
    fn peek(&self, offset: usize) -> Token<'a> {
        let eof = Token {
            kind: TokenKind::Eof,
            pos: self.tokens.last().map_or(0, |t| t.pos),
        };
        self.tokens.get(self.pos + offset).copied().unwrap_or(eof)
    }

    fn expected(&self, offset: usize, expected: &'static str) -> SelectorError {
        let found = self.peek(offset);
        SelectorError {
            position: found.pos,
            kind: SelectorErrorKind::Expected {
                expected,
                found: found.kind.to_string(),
            },
        }
    }

    /// `and ( "||" and )*`
    fn or(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let first = self.and(depth)?;
        if self.peek(0).kind != TokenKind::Or {
            return Ok(first);
        }
        let mut ops = vec![first];
        while self.peek(0).kind == TokenKind::Or {
            self.pos += 1;
            ops.push(self.and(depth)?);
        }
        Ok(Node::Or(ops.into_boxed_slice()))
    }

    /// `operation ( "&&" operation )*`
    fn and(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let first = self.operation(depth)?;
        if self.peek(0).kind != TokenKind::And {
            return Ok(first);
        }
        let mut ops = vec![first];
        while self.peek(0).kind == TokenKind::And {
            self.pos += 1;
            ops.push(self.operation(depth)?);
        }
        Ok(Node::And(ops.into_boxed_slice()))
    }

    /// A possibly negated single operation or parenthesised expression.
    fn operation(&mut self, depth: usize) -> Result<Node, SelectorError> {
        let mut negated = false;
        while self.peek(0).kind == TokenKind::Not {
            negated = !negated;
            self.pos += 1;
        }
        let tok = self.peek(0);
        let node = match tok.kind {
            TokenKind::Has(label) => {
                self.pos += 1;
                Node::Has(label.into())
            }
            TokenKind::All => {
                self.pos += 1;
                Node::All
            }
            TokenKind::Global => {
                self.pos += 1;
                Node::Global
            }
            TokenKind::Label(label) => self.comparison(label)?,
            TokenKind::LParen => {
                if depth >= MAX_NESTING_DEPTH {
                    return Err(SelectorError {
                        position: tok.pos,
                        kind: SelectorErrorKind::TooDeep,
                    });
                }
                self.pos += 1;
                let inner = self.or(depth + 1)?;
                if self.peek(0).kind != TokenKind::RParen {
                    return Err(self.expected(0, "`)`"));
                }
                self.pos += 1;
                inner
            }
            other => {
                return Err(SelectorError {
                    position: tok.pos,
                    kind: SelectorErrorKind::Unexpected(other.to_string()),
                })
            }
        };
        Ok(if negated {
            Node::Not(Box::new(node))
        } else {
            node
        })
    }

    /// `label <op> value`, with the label token at the current position.
    fn comparison(&mut self, label: &str) -> Result<Node, SelectorError> {
        let key: Box<str> = label.into();
        let op = self.peek(1).kind;
        let make: fn(Box<str>, Box<str>) -> Node = match op {
            TokenKind::Eq => Node::Eq,
            TokenKind::Ne => Node::Ne,
            TokenKind::Contains => Node::Contains,
            TokenKind::StartsWith => Node::StartsWith,
            TokenKind::EndsWith => Node::EndsWith,
            TokenKind::In | TokenKind::NotIn => return self.set_comparison(key, op),
            _ => return Err(self.expected(1, "an operator")),
        };
        let TokenKind::Str(value) = self.peek(2).kind else {
            return Err(self.expected(2, "a quoted string"));
        };
        self.pos += 3;
        Ok(make(key, value.into()))
    }

    /// `label in {..}` / `label not in {..}`. A trailing comma and an empty
    /// set are accepted, as upstream.
    fn set_comparison(&mut self, key: Box<str>, op: TokenKind<'_>) -> Result<Node, SelectorError> {
        if self.peek(2).kind != TokenKind::LBrace {
            return Err(self.expected(2, "a set literal `{...}`"));
        }
        self.pos += 3;
        let mut values: Vec<Box<str>> = Vec::new();
        while let TokenKind::Str(value) = self.peek(0).kind {
            values.push(value.into());
            self.pos += 1;
            if self.peek(0).kind != TokenKind::Comma {
                break;
            }
            self.pos += 1;
        }
        if self.peek(0).kind != TokenKind::RBrace {
            return Err(self.expected(0, "`}`"));
        }
        self.pos += 1;
        values.sort_unstable();
        values.dedup();
        let set = values.into_boxed_slice();
        Ok(if op == TokenKind::In {
            Node::In(key, set)
        } else {
            Node::NotIn(key, set)
        })
    }
}
