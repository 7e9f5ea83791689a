//! The parsed form of a selector: a tree of [`Node`]s that can be evaluated
//! against labels and printed in canonical form.
//!
//! Invariants (established by the parser, relied on here):
//! * `And` and `Or` have at least two operands; a single operand is stored
//!   as itself.
//! * The value list of `In`/`NotIn` is sorted (byte order) and free of
//!   duplicates, so membership is a binary search.
//! * A string value never contains both quote characters (the lexer has no
//!   escapes), so the canonical form can always quote it.
//! * The tree depth is bounded by the parser's nesting limit, so the
//!   recursive walks below cannot exhaust the stack.

use super::LabelSource;

/// One node of a parsed selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// `all()`: matches everything.
    All,
    /// `global()`: matches everything (used to mark non-namespaced scope).
    Global,
    /// `has(label)`: the label is present, whatever its value.
    Has(Box<str>),
    /// `label == "v"`: present with exactly this value.
    Eq(Box<str>, Box<str>),
    /// `label != "v"`: absent, or present with another value.
    Ne(Box<str>, Box<str>),
    /// `label contains "v"`: present and its value contains the substring.
    Contains(Box<str>, Box<str>),
    /// `label starts with "v"`: present with this prefix.
    StartsWith(Box<str>, Box<str>),
    /// `label ends with "v"`: present with this suffix.
    EndsWith(Box<str>, Box<str>),
    /// `label in {..}`: present with one of the (sorted, unique) values.
    In(Box<str>, Box<[Box<str>]>),
    /// `label not in {..}`: absent, or present with none of the values.
    NotIn(Box<str>, Box<[Box<str>]>),
    /// `!expr`.
    Not(Box<Node>),
    /// `a && b && ...` (two or more operands).
    And(Box<[Node]>),
    /// `a || b || ...` (two or more operands).
    Or(Box<[Node]>),
}

impl Node {
    /// Evaluates the node. Does not allocate.
    ///
    /// A comparison against a missing label is false for the positive
    /// operators (`==`, `in`, `contains`, `starts with`, `ends with`) and
    /// true for the negative ones (`!=`, `not in`), as upstream.
    pub(crate) fn evaluate<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Node::All | Node::Global => true,
            Node::Has(k) => labels.get_label(k).is_some(),
            Node::Eq(k, v) => labels.get_label(k) == Some(&**v),
            Node::Ne(k, v) => labels.get_label(k) != Some(&**v),
            Node::Contains(k, v) => labels.get_label(k).is_some_and(|x| x.contains(&**v)),
            Node::StartsWith(k, v) => labels.get_label(k).is_some_and(|x| x.starts_with(&**v)),
            Node::EndsWith(k, v) => labels.get_label(k).is_some_and(|x| x.ends_with(&**v)),
            Node::In(k, set) => labels.get_label(k).is_some_and(|x| set_contains(set, x)),
            Node::NotIn(k, set) => !labels.get_label(k).is_some_and(|x| set_contains(set, x)),
            Node::Not(inner) => !inner.evaluate(labels),
            Node::And(ops) => ops.iter().all(|op| op.evaluate(labels)),
            Node::Or(ops) => ops.iter().any(|op| op.evaluate(labels)),
        }
    }

    /// Appends the canonical text of this node to `out`.
    ///
    /// The format matches upstream's `String()` byte for byte: single
    /// spaces around operators, every `&&`/`||` group wrapped in
    /// parentheses, `!` written directly before its operand, values quoted
    /// with `"` unless they contain `"` (then `'`), set members sorted and
    /// separated by `", "`.
    pub(crate) fn write_canonical(&self, out: &mut String) {
        match self {
            Node::All => out.push_str("all()"),
            Node::Global => out.push_str("global()"),
            Node::Has(k) => {
                out.push_str("has(");
                out.push_str(k);
                out.push(')');
            }
            Node::Eq(k, v) => write_comparison(out, k, " == ", v),
            Node::Ne(k, v) => write_comparison(out, k, " != ", v),
            Node::Contains(k, v) => write_comparison(out, k, " contains ", v),
            Node::StartsWith(k, v) => write_comparison(out, k, " starts with ", v),
            Node::EndsWith(k, v) => write_comparison(out, k, " ends with ", v),
            Node::In(k, set) => write_set(out, k, " in {", set),
            Node::NotIn(k, set) => write_set(out, k, " not in {", set),
            Node::Not(inner) => {
                out.push('!');
                inner.write_canonical(out);
            }
            Node::And(ops) => write_group(out, " && ", ops),
            Node::Or(ops) => write_group(out, " || ", ops),
        }
    }
}

/// Membership test on a sorted, de-duplicated value list.
fn set_contains(set: &[Box<str>], value: &str) -> bool {
    set.binary_search_by(|probe| (**probe).cmp(value)).is_ok()
}

fn push_quoted(out: &mut String, value: &str) {
    let quote = if value.contains('"') { '\'' } else { '"' };
    out.push(quote);
    out.push_str(value);
    out.push(quote);
}

fn write_comparison(out: &mut String, key: &str, op: &str, value: &str) {
    out.push_str(key);
    out.push_str(op);
    push_quoted(out, value);
}

fn write_set(out: &mut String, key: &str, op_and_brace: &str, set: &[Box<str>]) {
    out.push_str(key);
    out.push_str(op_and_brace);
    for (i, value) in set.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_quoted(out, value);
    }
    out.push('}');
}

fn write_group(out: &mut String, sep: &str, ops: &[Node]) {
    out.push('(');
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        op.write_canonical(out);
    }
    out.push(')');
}
