//! Behaviour beyond upstream's own vectors: the selector table of this
//! project, missing-label semantics, inheritance, limits and errors.

use std::collections::{BTreeMap, HashMap};

use super::super::{
    normalize, parse, LabelSource, Selector, SelectorErrorKind, WithParents, MAX_NESTING_DEPTH,
};
use super::{labels, Pairs};

/// (selector, labels, expected result).
const TABLE: &[(&str, Pairs, bool)] = &[
    // Missing labels: positive operators are false, negative ones true.
    ("a == 'x'", &[], false),
    ("a != 'x'", &[], true),
    ("a in {'x'}", &[], false),
    ("a not in {'x'}", &[], true),
    ("a contains ''", &[], false),
    ("a starts with ''", &[], false),
    ("a ends with ''", &[], false),
    ("!a == 'x'", &[], true),
    // Empty strings are ordinary values.
    ("a == ''", &[("a", "")], true),
    ("a contains ''", &[("a", "")], true),
    ("has(a)", &[("a", "")], true),
    // Empty sets.
    ("a in {}", &[("a", "")], false),
    ("a not in {}", &[("a", "x")], true),
    ("a not in {}", &[], true),
    // Trailing comma in a set is accepted.
    ("a in {'x',}", &[("a", "x")], true),
    // Precedence: && binds tighter than ||; ! tighter than both.
    ("a == '1' || b == '1' && c == '1'", &[("a", "1")], true),
    ("a == '1' || b == '1' && c == '1'", &[("b", "1")], false),
    ("(a == '1' || b == '1') && c == '1'", &[("a", "1")], false),
    ("!has(a) && has(b)", &[("b", "")], true),
    ("!(has(a) && has(b))", &[("b", "")], true),
    ("!!(has(a))", &[("a", "")], true),
    ("!(!has(a))", &[("a", "")], true),
    // Values with quotes and non-ASCII text.
    (r#"a == "it's""#, &[("a", "it's")], true),
    (r#"a == 'say "hi"'"#, &[("a", "say \"hi\"")], true),
    ("a == 'caf\u{e9}'", &[("a", "caf\u{e9}")], true),
    ("a contains '\u{e9}'", &[("a", "caf\u{e9}")], true),
    // Tabs are whitespace.
    ("a\t==\t'x'", &[("a", "x")], true),
    // Label-name charset.
    (
        "k8s.io/app-name_1 == 'x'",
        &[("k8s.io/app-name_1", "x")],
        true,
    ),
    ("global() && a == 'x'", &[("a", "x")], true),
];

#[test]
fn selector_table_evaluates_as_expected() {
    for (sel, l, expected) in TABLE {
        let parsed = parse(sel).unwrap_or_else(|e| panic!("{sel:?} should parse: {e}"));
        let l = labels(l);
        assert_eq!(parsed.evaluate(&l), *expected, "{sel:?} against {l:?}");
        let hm: HashMap<String, String> = l.clone().into_iter().collect();
        assert_eq!(
            parsed.evaluate(&hm),
            *expected,
            "{sel:?} against HashMap {l:?}"
        );
        let again = parse(parsed.canonical()).unwrap();
        assert_eq!(
            again.evaluate(&l),
            *expected,
            "canonical {:?}",
            parsed.canonical()
        );
    }
}

const INVALID: &[&str] = &[
    "a == 'x'\n",
    "\na == 'x'",
    "a == 'x' ||",
    "&& a == 'x'",
    "a === 'x'",
    "a == 'x' b == 'y'",
    "a in {'x' 'y'}",
    "a in {,}",
    "a in {'x',,}",
    "a in 'x'",
    "has (a)",
    "has(a b)",
    "all(x)",
    "caf\u{e9} == 'x'",
    "a == 'x')",
    "((a == 'x')",
    "!",
    "!!",
    "a == 'x' && !",
    "a starts 'x'",
    "a startswith",
    "a in",
    "a ==",
];

#[test]
fn invalid_selectors_are_rejected_with_a_one_line_message() {
    for sel in INVALID {
        let err = parse(sel).expect_err(sel);
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "{sel:?}: multi-line message {msg:?}");
        assert!(
            err.position <= sel.len(),
            "{sel:?}: position {} out of range",
            err.position
        );
        assert!(msg.contains(&format!("byte {}", err.position)), "{msg}");
    }
}

#[test]
fn error_names_position_and_token() {
    let err = parse("a == 'x' && b").unwrap_err();
    assert_eq!(err.position, 13);
    let err = parse("a == 'x' && )").unwrap_err();
    assert_eq!(err.position, 12);
    assert_eq!(err.kind, SelectorErrorKind::Unexpected("`)`".into()));
    let err = parse("foo bar").unwrap_err();
    assert_eq!(err.position, 4);
    assert_eq!(err.kind, SelectorErrorKind::ExpectedOperator("foo".into()));
    assert!(err.to_string().contains("\"foo\""), "{err}");
    let err = parse("a == 'x\nyz").unwrap_err();
    assert_eq!(err.kind, SelectorErrorKind::UnterminatedString);
    assert_eq!(err.position, 5);
}

#[test]
fn long_tokens_are_shortened_in_messages() {
    let value = "v".repeat(10_000);
    let err = parse(&format!("a == '{value}' '{value}'")).unwrap_err();
    assert!(err.to_string().len() < 200, "{err}");
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    let sel = format!(
        "{}a == 'x'{}",
        "(".repeat(MAX_NESTING_DEPTH),
        ")".repeat(MAX_NESTING_DEPTH)
    );
    let parsed = parse(&sel).unwrap();
    assert_eq!(parsed.canonical(), r#"a == "x""#);
}

#[test]
fn nesting_beyond_the_limit_is_an_error_not_a_stack_overflow() {
    let depth = MAX_NESTING_DEPTH + 1;
    let sel = format!("{}a == 'x'{}", "(".repeat(depth), ")".repeat(depth));
    assert_eq!(parse(&sel).unwrap_err().kind, SelectorErrorKind::TooDeep);
    // Far deeper input, with negations, also fails cleanly.
    let sel = "!(".repeat(100_000);
    assert_eq!(parse(&sel).unwrap_err().kind, SelectorErrorKind::TooDeep);
}

#[test]
fn deeply_nested_selector_within_limit_evaluates_and_prints() {
    let mut sel = "has(a)".to_owned();
    // Two levels of parentheses per round.
    for i in 0..MAX_NESTING_DEPTH / 2 {
        sel = format!("!(k{i} == 'v' || ({sel} && has(b)))");
    }
    let parsed = parse(&sel).unwrap();
    let again = parse(parsed.canonical()).unwrap();
    assert_eq!(again.canonical(), parsed.canonical());
    let l = labels(&[("a", ""), ("b", "")]);
    assert_eq!(again.evaluate(&l), parsed.evaluate(&l));
}

#[test]
fn long_negation_and_conjunction_chains_need_no_recursion() {
    let sel = format!("{}has(a)", "!".repeat(100_001));
    let parsed = parse(&sel).unwrap();
    assert_eq!(parsed.canonical(), "!has(a)");
    let terms: Vec<String> = (0..100_000).map(|i| format!("has(l{i})")).collect();
    let parsed = parse(&terms.join(" || ")).unwrap();
    assert!(parsed.evaluate(&labels(&[("l99999", "")])));
    assert!(!parsed.evaluate(&labels(&[("x", "")])));
}

#[test]
fn with_parents_prefers_own_labels_then_parents_in_order() {
    let own = labels(&[("role", "db")]);
    let p1 = labels(&[("role", "web"), ("env", "prod")]);
    let p2 = labels(&[("env", "dev"), ("team", "blue")]);
    let parents = [&p1, &p2];
    let view = WithParents {
        own: &own,
        parents: &parents,
    };
    assert_eq!(view.get_label("role"), Some("db"));
    assert_eq!(view.get_label("env"), Some("prod"));
    assert_eq!(view.get_label("team"), Some("blue"));
    assert_eq!(view.get_label("missing"), None);
    assert!(parse("role == 'db' && env == 'prod' && team == 'blue'")
        .unwrap()
        .evaluate(&view));
    assert!(!parse("role == 'web'").unwrap().evaluate(&view));
    assert!(parse("env != 'dev'").unwrap().evaluate(&view));
}

#[test]
fn equal_canonical_forms_give_equal_selectors() {
    use std::collections::HashSet;
    let a = parse("a in {'y','x'}   && has(b)").unwrap();
    let b = parse(r#"(a in {"x", "y"} && has( b ))"#).unwrap();
    let c = parse("a in {'x'} && has(b)").unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    // Hashing and equality use only the canonical text; the lazily filled
    // unique-ID cell is interior mutability the key's identity never sees.
    #[expect(
        clippy::mutable_key_type,
        reason = "the key type's interior mutability is not used for hashing here"
    )]
    let set: HashSet<Selector> = [a.clone(), b, c].into_iter().collect();
    assert_eq!(set.len(), 2);
    assert_eq!(a.to_string(), a.canonical());
}

#[test]
fn empty_selector_is_all() {
    assert_eq!(parse("").unwrap(), Selector::all());
    assert_eq!(parse(" \t ").unwrap(), Selector::all());
    assert_eq!(Selector::default().canonical(), "all()");
    assert!(Selector::all().evaluate(&BTreeMap::<String, String>::new()));
    assert_ne!(parse("global()").unwrap(), Selector::all());
}

#[test]
fn normalize_trims_like_upstream_and_reports_errors() {
    assert_eq!(normalize("\n a=='b'\n").unwrap(), r#"a == "b""#);
    assert_eq!(normalize("").unwrap(), "all()");
    assert!(normalize("a ==").is_err());
}

#[test]
fn unique_id_has_upstream_shape() {
    let sel = parse("has(x)").unwrap();
    let id = sel.unique_id();
    assert!(id.starts_with("s:"));
    assert_eq!(id.len(), 2 + 38);
    assert!(id[2..]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    assert_ne!(id, parse("has(y)").unwrap().unique_id());
}

#[test]
fn restrictions_report_unsatisfiable_selectors() {
    let r = parse("a == 'x' && a == 'y'").unwrap().label_restrictions();
    assert!(!r["a"].possible_to_satisfy());
    let r = parse("has(a) && !has(a)").unwrap().label_restrictions();
    assert!(!r["a"].possible_to_satisfy());
    let r = parse("a in {'x','y'}").unwrap().label_restrictions();
    assert!(r["a"].possible_to_satisfy());
    assert!(r["a"].is_satisfied_by("a", &labels(&[("a", "y")])));
    assert!(!r["a"].is_satisfied_by("a", &labels(&[("a", "z")])));
    assert!(!r["a"].is_satisfied_by("a", &labels(&[])));
}

#[test]
fn label_validity_matches_the_lexer() {
    use super::super::is_valid_label;
    assert!(is_valid_label("k8s.io/name-1_x"));
    assert!(!is_valid_label(""));
    assert!(!is_valid_label("a b"));
    assert!(!is_valid_label(&"a".repeat(513)));
    assert!(is_valid_label(&"a".repeat(512)));
}

#[test]
fn parenthesised_double_negation_prints_like_upstream() {
    // Upstream keeps both negations when they are separated by parentheses
    // and prints them as "!!"; reparsing that collapses them. Kept so that
    // canonical forms and unique IDs match upstream byte for byte.
    let sel = parse("!(!a == 'x')").unwrap();
    assert_eq!(sel.canonical(), r#"!!a == "x""#);
    let again = parse(sel.canonical()).unwrap();
    assert_eq!(again.canonical(), r#"a == "x""#);
    for l in [labels(&[]), labels(&[("a", "x")]), labels(&[("a", "y")])] {
        assert_eq!(sel.evaluate(&l), again.evaluate(&l));
    }
    assert_eq!(
        parse("!(!(has(a) && has(b)))").unwrap().canonical(),
        "!!(has(a) && has(b))"
    );
}
