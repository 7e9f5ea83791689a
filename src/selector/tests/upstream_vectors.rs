//! Test vectors taken as data from upstream Calico's selector, tokenizer and
//! label-restriction tests (inputs and expected outputs only).

use std::collections::{BTreeMap, BTreeSet};

use super::super::{parse, LabelRestriction};
use super::{labels, Pairs};

/// (selector, label sets that match, label sets that do not).
type EvalCase = (&'static str, &'static [Pairs], &'static [Pairs]);

const EVAL_CASES: &[EvalCase] = &[
    (
        r#"a == "b""#,
        &[&[("a", "b")], &[("a", "b"), ("c", "d")]],
        &[&[], &[("a", "c")], &[("c", "d")]],
    ),
    (
        r#"a == "b" && c == "d""#,
        &[&[("a", "b"), ("c", "d")]],
        &[
            &[],
            &[("a", "b"), ("c", "e")],
            &[("a", "c"), ("c", "d")],
            &[("c", "d")],
            &[("a", "b")],
        ],
    ),
    (
        r#"a == "b" || c == "d""#,
        &[&[("a", "b"), ("c", "d")], &[("a", "b")], &[("c", "d")]],
        &[&[], &[("a", "e"), ("c", "e")], &[("c", "e")], &[("a", "e")]],
    ),
    (
        r#"a in {"'", '"', "c"}"#,
        &[&[("a", "c")], &[("a", "\"")], &[("a", "'")]],
        &[&[], &[("a", "e")]],
    ),
    (
        r#"a not in {"'", '"', "c"}"#,
        &[&[], &[("a", "e")]],
        &[&[("a", "c")], &[("a", "\"")], &[("a", "'")]],
    ),
    ("a == 'a'", &[&[("a", "a")]], &[]),
    (r#"a == "a""#, &[&[("a", "a")]], &[]),
    (r#"a != "b""#, &[&[("a", "a")]], &[]),
    (r#"a != "a""#, &[&[]], &[]),
    (
        r#"a contains "a""#,
        &[&[("a", "a")], &[("a", "bab")], &[("a", "aaa"), ("b", "c")]],
        &[&[], &[("a", "b")], &[("b", "aaa")]],
    ),
    (
        r#"a starts with "a""#,
        &[&[("a", "a")], &[("a", "abb")], &[("a", "aaa"), ("b", "c")]],
        &[&[], &[("a", "b")], &[("a", "baa")], &[("b", "aaa")]],
    ),
    (
        r#"a ends with "a""#,
        &[&[("a", "a")], &[("a", "bba")], &[("a", "aaa"), ("b", "c")]],
        &[&[], &[("a", "b")], &[("a", "aab")], &[("b", "aaa")]],
    ),
    (r#"a in {"a"}"#, &[&[("a", "a")]], &[]),
    (r#"!a in {"a"}"#, &[&[("a", "b")]], &[]),
    (r#"a in {"a", "b"}"#, &[&[("a", "a")], &[("a", "b")]], &[]),
    (r#"a not in {"d", "e"}"#, &[&[("a", "a")]], &[]),
    ("has(a)", &[&[("a", "b")]], &[]),
    ("!has(a)", &[&[("b", "b")]], &[]),
    ("", &[&[], &[("a", "b")]], &[]),
    (" ", &[&[]], &[]),
    ("all()", &[&[]], &[]),
    (" all()", &[&[], &[("a", "b")]], &[]),
    ("global()", &[&[]], &[]),
    (" global()", &[&[], &[("a", "b")]], &[]),
    ("a == 'a'", &[], &[&[("a", "b")], &[]]),
    (r#"a != "a""#, &[], &[&[("a", "a")]]),
    ("a != 'a'", &[], &[&[("a", "a")]]),
    (r#"a in {"a"}"#, &[], &[&[("a", "b")]]),
    (r#"a not in {"a"}"#, &[], &[&[("a", "a")]]),
    (r#"a in {"a", "b"}"#, &[], &[&[("a", "c")]]),
    ("has(b)", &[], &[&[("a", "b")]]),
    ("!!has(b)", &[], &[&[("a", "b")]]),
    ("! has(a)", &[], &[&[("a", "b")]]),
    ("!has(a)", &[], &[&[("a", "b")]]),
    ("!!! has(a)", &[], &[&[("a", "b")]]),
    ("!!!has(a)", &[], &[&[("a", "b")]]),
    ("!! ! has(a)", &[], &[&[("a", "b")]]),
    ("! !!has(a)", &[], &[&[("a", "b")]]),
    (
        "a == 'a1' && b == 'b1'",
        &[&[("a", "a1"), ("b", "b1")]],
        &[],
    ),
    (
        "a == 'a1' && b != 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    (
        "a != 'a1' && b == 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    (
        "a != 'a1' && b != 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    (
        "a != 'a1' && !b == 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    (
        "!a == 'a1' && b == 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    ("has(a) && !has(b)", &[&[("a", "a")]], &[]),
    ("!has(b) && has(a)", &[&[("a", "a")]], &[]),
    ("!(!has(a) || has(b))", &[&[("a", "a")]], &[]),
    ("!(has(b) || !has(a))", &[&[("a", "a")]], &[]),
    (
        "a == 'a1' || b == 'b1'",
        &[&[("a", "a1"), ("b", "b1")]],
        &[],
    ),
    (
        "a == 'a1' || b != 'b1'",
        &[&[("a", "a1"), ("b", "b1")]],
        &[],
    ),
    (
        "a != 'a1' || b == 'b1'",
        &[&[("a", "a1"), ("b", "b1")]],
        &[],
    ),
    (
        "a != 'a1' || b != 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
    (
        "! a == 'a1' || ! b == 'b1'",
        &[],
        &[&[("a", "a1"), ("b", "b1")]],
    ),
];

#[test]
fn upstream_evaluation_table_matches_before_and_after_canonicalising() {
    for (sel, matches, non_matches) in EVAL_CASES {
        let parsed = parse(sel).unwrap_or_else(|e| panic!("{sel:?} should parse: {e}"));
        let reparsed = parse(parsed.canonical()).unwrap();
        for l in *matches {
            let l = labels(l);
            assert!(parsed.evaluate(&l), "{sel:?} should match {l:?}");
            assert!(
                reparsed.evaluate(&l),
                "canonical of {sel:?} should match {l:?}"
            );
        }
        for l in *non_matches {
            let l = labels(l);
            assert!(!parsed.evaluate(&l), "{sel:?} should not match {l:?}");
            assert!(
                !reparsed.evaluate(&l),
                "canonical of {sel:?} should not match {l:?}"
            );
        }
        assert_eq!(parsed.unique_id(), reparsed.unique_id());
    }
}

const BAD_SELECTORS: &[&str] = &[
    "b == b",
    "b contains b",
    "b starts with b",
    "b ends with b",
    "'b1' == b",
    "b",
    "a b",
    "!",
    r#"foo == "bar" &"#,
    r#"foo == "bar" |"#,
    "foo != ||",
    r#"foo in {"", ||"#,
    r#"foo in """#,
    r#""FOO"#,
    r#""FOO'"#,
    "'FOO",
    "(",
    r#"(a == "foo""#,
    ")",
    "()",
    "%",
    r#"a == "b" && %"#,
    r#"a == "b" || %"#,
    "a ",
    "has(foo) &&",
];

#[test]
fn upstream_bad_selectors_are_rejected() {
    for sel in BAD_SELECTORS {
        assert!(parse(sel).is_err(), "{sel:?} should be rejected");
    }
}

/// (input, canonical, unique ID or "" where upstream gives none).
const CANONICAL_CASES: &[(&str, &str, &str)] = &[
    ("", "all()", "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug"),
    (
        " all() ",
        "all()",
        "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug",
    ),
    (
        " (all() )",
        "all()",
        "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug",
    ),
    (
        "! (has( b)||! has(a ))",
        "!(has(b) || !has(a))",
        "s:Iss0uCleLYv1GSv_pNm7hAO58kE9jAx1NKyG3Q",
    ),
    (
        r#"! (a == "b"&&! c != "d")"#,
        r#"!(a == "b" && !c != "d")"#,
        "s:lh3haoY1ikTRkd4UZu0nWSaIBknYLPJLX16d-w",
    ),
    (r#"a == "'""#, r#"a == "'""#, ""),
    (r#"a == '"'"#, r#"a == '"'"#, ""),
    (r#"a contains '"'"#, r#"a contains '"'"#, ""),
    (r#"a contains "'""#, r#"a contains "'""#, ""),
    (r#"a startswith '"'"#, r#"a starts with '"'"#, ""),
    (r#"a endswith "'""#, r#"a ends with "'""#, ""),
    (r#"a!='"'"#, r#"a != '"'"#, ""),
    (r#"a in {"d"}"#, r#"a in {"d"}"#, ""),
    (r#"a in {"a", "b"}"#, r#"a in {"a", "b"}"#, ""),
    (r#"a in {"d", "a", "b"}"#, r#"a in {"a", "b", "d"}"#, ""),
    (
        r#"a in {"z", "x", "y", "a"}"#,
        r#"a in {"a", "x", "y", "z"}"#,
        "",
    ),
    (
        r#"a in {"z", "z", "x", "y", "x", "a"}"#,
        r#"a in {"a", "x", "y", "z"}"#,
        "",
    ),
    // From upstream's visitor tests (canonical forms without the prefix).
    ("k == 'v' && x == 'y'", r#"(k == "v" && x == "y")"#, ""),
    ("k == 'v' || has(x)", r#"(k == "v" || has(x))"#, ""),
    ("!(k == 'v')", r#"!k == "v""#, ""),
    ("k not in {'v'}", r#"k not in {"v"}"#, ""),
    (
        "!(!(k == 'v' && has(t) || all()) && (a in {'b', 'c'}))",
        r#"!(!((k == "v" && has(t)) || all()) && a in {"b", "c"})"#,
        "",
    ),
];

#[test]
fn upstream_canonical_forms_and_unique_ids() {
    for (input, canonical, uid) in CANONICAL_CASES {
        let sel = parse(input).unwrap_or_else(|e| panic!("{input:?} should parse: {e}"));
        assert_eq!(sel.canonical(), *canonical, "canonical form of {input:?}");
        let again = parse(sel.canonical()).unwrap();
        assert_eq!(again.canonical(), *canonical, "round trip of {input:?}");
        assert_eq!(again.unique_id(), sel.unique_id());
        if !uid.is_empty() {
            assert_eq!(sel.unique_id(), *uid, "unique ID of {input:?}");
        }
    }
}

/// Inputs upstream's tokenizer accepts, as (input, canonical of the parsed
/// selector) where the tokens form a valid selector, or `None` where the
/// tokens are valid but the parser rejects them.
const TOKENIZER_ACCEPTS: &[(&str, Option<&str>)] = &[
    (r#"a=="b""#, Some(r#"a == "b""#)),
    (r#"a!="b""#, Some(r#"a != "b""#)),
    (r#"(a=="b")"#, Some(r#"a == "b""#)),
    (
        r#"label contains "value""#,
        Some(r#"label contains "value""#),
    ),
    (
        r#"contains contains "contains""#,
        Some(r#"contains contains "contains""#),
    ),
    (
        "contains contains 'contains'",
        Some(r#"contains contains "contains""#),
    ),
    (
        r#"label contains"value""#,
        Some(r#"label contains "value""#),
    ),
    (
        r#"label startswith "value""#,
        Some(r#"label starts with "value""#),
    ),
    (
        r#"label endswith "value""#,
        Some(r#"label ends with "value""#),
    ),
    (
        r#"startswith starts with "value""#,
        Some(r#"startswith starts with "value""#),
    ),
    (
        r#"endswith ends with "value""#,
        Some(r#"endswith ends with "value""#),
    ),
    (
        r#"label starts  with "value""#,
        Some(r#"label starts with "value""#),
    ),
    (
        r#"label ends  with "value""#,
        Some(r#"label ends with "value""#),
    ),
    ("has(calico/k8s_ns)", Some("has(calico/k8s_ns)")),
    (
        "has(calico/k8s_NS-.1/role)",
        Some("has(calico/k8s_NS-.1/role)"),
    ),
    (
        r#"calico/k8s_ns == "kube-system" && k8s-app == "kube-dns""#,
        Some(r#"(calico/k8s_ns == "kube-system" && k8s-app == "kube-dns")"#),
    ),
    (r#"a not in "bar" && !has(foo) || b in c"#, None),
    (
        r#"a  not  in  "bar"  &&  ! has( foo )  ||  b  in  c "#,
        None,
    ),
    (r#"a notin"bar"&&!has(foo)||b in"c""#, None),
    ("a not in {}", Some("a not in {}")),
    ("a notin{}", Some("a not in {}")),
    (r#"a not in {"a","B"}"#, Some(r#"a not in {"B", "a"}"#)),
    ("global( )", Some("global()")),
    ("all( )", Some("all()")),
];

#[test]
fn upstream_tokenizer_accepts() {
    for (input, canonical) in TOKENIZER_ACCEPTS {
        assert!(
            super::super::tokenizer::tokenize(input).is_ok(),
            "{input:?} should tokenize"
        );
        match (parse(input), canonical) {
            (Ok(sel), Some(c)) => assert_eq!(sel.canonical(), *c, "{input:?}"),
            (Err(_), None) => {}
            (other, _) => panic!("{input:?}: unexpected {other:?}"),
        }
    }
    let long = format!("{} == \"value\"", "a".repeat(512));
    assert!(parse(&long).is_ok(), "a 512-byte label is allowed");
}

const TOKENIZER_REJECTS: &[&str] = &[
    r#"label == "value"#,
    "label == 'value",
    r#"label = "value""#,
    "all(",
    "global(",
    "has()",
    "has(foo",
    "has( foo ",
    r#"a == "b" & has(foo)"#,
    r#"a == "b" | has(foo)"#,
    r#"label starts foo "value""#,
    r#"label inf "value""#,
    r#"label ends foo "value""#,
    r#"label ends withs "value""#,
    r#"label squiggles "value""#,
];

#[test]
fn upstream_tokenizer_rejects() {
    for input in TOKENIZER_REJECTS {
        assert!(
            super::super::tokenizer::tokenize(input).is_err(),
            "{input:?} should fail to tokenize"
        );
    }
    let long = format!("{} == \"value\"", "a".repeat(513));
    assert!(
        super::super::tokenizer::tokenize(&long).is_err(),
        "a 513-byte label is too long"
    );
}

fn present(values: Option<&[&str]>) -> LabelRestriction {
    LabelRestriction {
        must_be_present: true,
        must_be_absent: false,
        must_have_one_of_values: values
            .map(|v| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()),
    }
}

fn absent() -> LabelRestriction {
    LabelRestriction {
        must_be_absent: true,
        ..LabelRestriction::default()
    }
}

#[test]
fn upstream_label_restrictions() {
    let cases: Vec<(&str, Vec<(&str, LabelRestriction)>)> = vec![
        ("", vec![]),
        ("all()", vec![]),
        ("global()", vec![]),
        ("a == 'value'", vec![("a", present(Some(&["value"])))]),
        ("has(a)", vec![("a", present(None))]),
        (
            "a in {'v1','v2'}",
            vec![("a", present(Some(&["v1", "v2"])))],
        ),
        ("a not in {'v1','v2'}", vec![]),
        ("a contains 'foo'", vec![("a", present(None))]),
        ("a ends with 'foo'", vec![("a", present(None))]),
        ("a starts with 'foo'", vec![("a", present(None))]),
        ("a != 'value'", vec![]),
        (
            "a == 'v1' && a == 'v1'",
            vec![("a", present(Some(&["v1"])))],
        ),
        ("a == 'v1' && a == 'v2'", vec![("a", present(Some(&[])))]),
        ("a == 'v1' && has(a)", vec![("a", present(Some(&["v1"])))]),
        (
            "a in {'v1','v2'} && a in {'v2','v3'} ",
            vec![("a", present(Some(&["v2"])))],
        ),
        (
            "a in {'v1','v2', 'v3'} && a in {'v2','v3'} ",
            vec![("a", present(Some(&["v2", "v3"])))],
        ),
        ("has(a) && a == 'v1'", vec![("a", present(Some(&["v1"])))]),
        (
            "has(a) && !has(a)",
            vec![(
                "a",
                LabelRestriction {
                    must_be_present: true,
                    must_be_absent: true,
                    must_have_one_of_values: None,
                },
            )],
        ),
        (
            "a == 'v1' && b == 'v2'",
            vec![("a", present(Some(&["v1"]))), ("b", present(Some(&["v2"])))],
        ),
        ("a == 'v1' && all()", vec![("a", present(Some(&["v1"])))]),
        ("all() && a == 'v1'", vec![("a", present(Some(&["v1"])))]),
        (
            "a == 'v1' || a == 'v2'",
            vec![("a", present(Some(&["v1", "v2"])))],
        ),
        ("has(a) || a == 'v2'", vec![("a", present(None))]),
        ("a=='v2' || has(a)", vec![("a", present(None))]),
        ("a=='v2' || has(b)", vec![]),
        ("a=='v2' || (has(b) && has(a))", vec![("a", present(None))]),
        ("a == 'v1' || b == 'v2'", vec![]),
        ("a == 'v1' || all()", vec![]),
        ("all() || b == 'v2'", vec![]),
        ("!(a == 'value')", vec![]),
        ("!has(a)", vec![("a", absent())]),
        ("!!has(a)", vec![("a", present(None))]),
    ];
    for (sel, expected) in cases {
        let expected: BTreeMap<String, LabelRestriction> = expected
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let parsed = parse(sel).unwrap();
        assert_eq!(
            parsed.label_restrictions(),
            expected,
            "restrictions of {sel:?}"
        );
        if !sel.is_empty() {
            // Prefixing "all() &&" must not change anything.
            let wrapped = parse(&format!("all() && ({sel})")).unwrap();
            assert_eq!(
                wrapped.label_restrictions(),
                expected,
                "restrictions of all() && ({sel})"
            );
        }
    }
}
