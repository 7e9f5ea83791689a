//! The fast YAML reader must agree with `serde_yaml_ng` on everything it
//! accepts, and decline what it does not understand.

use proptest::prelude::*;
use serde::Deserialize;

use super::{parse, Flat};
use crate::resources::types::Dyn;

/// Decodes `text` both ways.  Returns the fast result (if the fast path
/// accepted the text and decoded it) after checking it equals the full
/// parser's.
fn agree(text: &str) -> Option<Dyn> {
    let tree = parse(text)?;
    let fast = Dyn::deserialize(tree.root()).ok()?;
    let full: Dyn = serde_yaml_ng::from_str(text)
        .unwrap_or_else(|e| panic!("fast path accepted what serde_yaml_ng rejects ({e}):\n{text}"));
    assert_eq!(fast, full, "values differ for:\n{text}");
    let fast_json = serde_json::Value::deserialize(tree.root()).ok();
    if let Some(fast_json) = fast_json {
        let full_json: serde_json::Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(fast_json, full_json, "JSON values differ for:\n{text}");
    }
    Some(fast)
}

fn accepted(text: &str) -> Dyn {
    agree(text).unwrap_or_else(|| panic!("fast path declined:\n{text}"))
}

fn declined(text: &str) {
    let fast = parse(text).and_then(|t| Dyn::deserialize(t.root()).ok());
    assert!(
        fast.is_none(),
        "fast path should decline:\n{text}\ngot {fast:?}"
    );
}

#[test]
fn reads_a_typical_resource() {
    let text = "---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint   # a comment
metadata:
  name: node1-k8s-pod1-eth0
  namespace: ns1
  labels:
    app: frontend
    projectcalico.org/namespace: ns1
spec:
  mac: 'ee:ee:ee:00:00:01'
  ipNetworks:
  - 10.0.0.1/32
  profiles: [kns.ns1, \"ksa.ns1.default\"]
  ports:
  - name: http
    port: 8080
    protocol: TCP
  - {name: dns, port: 53, protocol: UDP}
  selector: app == 'x' && has(y) || z in {'a', 'b'}
  order: 100.5
  empty:
  nothing: ~
  yes: true
";
    let v = accepted(text);
    let Dyn::Map(top) = v else { panic!() };
    assert_eq!(
        top[0],
        ("apiVersion".into(), Dyn::Str("projectcalico.org/v3".into()))
    );
    let spec = &top[3].1;
    let Dyn::Map(spec) = spec else { panic!() };
    let get = |k: &str| spec.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("mac"), Some(Dyn::Str("ee:ee:ee:00:00:01".into())));
    assert_eq!(get("order"), Some(Dyn::Float(100.5)));
    assert_eq!(get("empty"), Some(Dyn::Null));
    assert_eq!(get("nothing"), Some(Dyn::Null));
    assert_eq!(get("yes"), Some(Dyn::Bool(true)));
    assert_eq!(
        get("selector"),
        Some(Dyn::Str("app == 'x' && has(y) || z in {'a', 'b'}".into()))
    );
}

#[test]
fn layouts_of_nested_collections() {
    for text in [
        "a:\n  - 1\n  - 2\nb: x\n",
        "a:\n- 1\n- 2\nb: x\n",
        "- a: 1\n  b:\n  - x\n  - y\n  c: 3\n- 4\n",
        "-\n  a: 1\n- - x\n  - y\n",
        "a:\n  b:\n    c:\n      - d: 1\n        e: [1, [2, 3], {f: g}]\n",
        "list: []\nmap: {}\nq: ''\ndq: \"\"\n",
        "k: 'it''s'\nj: \"tab\\there \\u00e9 \\x41 \\\"q\\\"\"\n",
        "a: b # comment\n# full line\n  # indented comment\nc: d\n",
        "url: http://example.com:8080/x\ntime: 12:30\nneg: -5\nzero: 0\nf: -0.25\n",
        "ports: [80, '443', 8000:9000]\n",
        "\"quoted key\": 1\n'single': 2\n",
        "a: x:y\nb: x#y\nc: -x\nd: a - b\n",
        "top:\r\n  crlf: yes\r\n",
    ] {
        accepted(text);
    }
}

#[test]
fn declines_what_it_does_not_understand() {
    for text in [
        "a: &anchor 1\nb: *anchor\n",
        "a: !!str 1\n",
        "a: |\n  block\n",
        "a: >\n  folded\n",
        "a: multi\n  line plain\n",
        "a: \"multi\n  line quoted\"\n",
        "a:\n\t- tab\n",
        "a: 1\na: 2\n",
        "<<: {a: 1}\n",
        "a: 0x1f\n",
        "a: 0o17\n",
        "a: 1e3\n",
        "a: .inf\n",
        "a: +1\n",
        "a: 007\n",
        "a: 99999999999999999999999\n",
        "? complex\n: key\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: 1\n...\n",
        "\u{feff}a: 1\n",
        "a: \u{1}\n",
        "a: b: c\n",
        "a: [1, 2\n",
        "key : value\n",
        "just a scalar\n",
        "a:\n  b: 1\n c: 2\n",
    ] {
        declined(text);
    }
}

#[test]
fn typed_option_and_string_semantics_match() {
    #[derive(Debug, PartialEq, Deserialize)]
    struct T {
        #[serde(default)]
        a: Option<String>,
        #[serde(default)]
        b: Option<String>,
        c: String,
        d: String,
        e: Option<i64>,
        f: f64,
        g: bool,
    }
    let text = "a: null\nb: 'null'\nc: 123\nd: true\ne: 7\nf: 3\ng: True\n";
    let tree = parse(text).unwrap();
    let fast = T::deserialize(tree.root()).unwrap();
    let full: T = serde_yaml_ng::from_str(text).unwrap();
    assert_eq!(fast, full);
    assert_eq!(fast.c, "123");
    assert_eq!(fast.b.as_deref(), Some("null"));
    assert_eq!(fast.a, None);
}

#[test]
fn decodes_the_bundled_examples_identically() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut seen = 0;
    for entry in walk(&root) {
        let text = std::fs::read_to_string(&entry).unwrap();
        for doc in text.split("\n---") {
            if doc.trim().is_empty() {
                continue;
            }
            if agree(doc).is_some() {
                seen += 1;
            }
        }
    }
    assert!(seen > 5, "only {seen} example documents took the fast path");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
    out
}

#[test]
fn nodes_borrow_unescaped_text() {
    let tree = parse("a: plain\nb: 'single'\nc: \"esc\\n\"\n").unwrap();
    assert_eq!(
        tree.nodes,
        [
            Flat::Map { end: 7, len: 3 },
            Flat::Scalar {
                text: "a",
                plain: true
            },
            Flat::Scalar {
                text: "plain",
                plain: true
            },
            Flat::Scalar {
                text: "b",
                plain: true
            },
            Flat::Scalar {
                text: "single",
                plain: false
            },
            Flat::Scalar {
                text: "c",
                plain: true
            },
            Flat::Escaped { index: 0 },
        ]
    );
    assert_eq!(tree.owned, ["esc\n"]);
}

#[test]
fn nested_collections_record_their_extent() {
    let tree = parse("a:\n  - x\n  - {k: v}\nb: [1, [2]]\n").unwrap();
    // Every collection's children lie inside it, and `len` counts them.
    let n = &tree.nodes;
    assert_eq!(
        n[0],
        Flat::Map {
            end: n.len(),
            len: 2
        }
    );
    assert_eq!(n[2], Flat::Seq { end: 7, len: 2 });
    assert_eq!(n[4], Flat::Map { end: 7, len: 1 });
    assert_eq!(
        n[8],
        Flat::Seq {
            end: n.len(),
            len: 2
        }
    );
    assert_eq!(
        n[10],
        Flat::Seq {
            end: n.len(),
            len: 1
        }
    );
    assert_eq!(accepted("a:\n  - x\n  - {k: v}\nb: [1, [2]]\n"), {
        let v: Dyn = serde_yaml_ng::from_str("a: [x, {k: v}]\nb: [1, [2]]").unwrap();
        v
    });
}

#[test]
fn a_reader_reuses_its_buffers_without_mixing_documents() {
    let docs = [
        "kind: A\nspec:\n  x: [1, 2]\n",
        "kind: B\nlabels: {a: \"\\t\"}\n",
        "kind: C\n  bad: indentation\n",
        "kind: D\n",
    ];
    let mut reader = super::Reader::default();
    for text in docs {
        let fast = reader
            .parse_lines(text.split('\n'))
            .map(|t| Dyn::deserialize(t.root()).unwrap());
        let fresh = parse(text).map(|t| Dyn::deserialize(t.root()).unwrap());
        assert_eq!(fast, fresh, "{text}");
    }
    // The third document is declined, and does not disturb the fourth.
    assert!(reader.parse_lines(docs[2].split('\n')).is_none());
    let d = reader.parse_lines(docs[3].split('\n')).unwrap();
    assert_eq!(d.nodes.len(), 3);
    assert!(d.owned.is_empty());
}

// ---------------------------------------------------------------------------
// Differential property tests: texts built from tricky pieces must either be
// declined or read exactly as serde_yaml_ng reads them.

fn scalar_piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a",
        "b c",
        "0",
        "1",
        "-1",
        "12",
        "007",
        "1.5",
        "-0.5",
        "1e3",
        "0x10",
        "true",
        "False",
        "null",
        "~",
        "",
        "yes",
        "x:y",
        "x: y",
        "#c",
        "a #c",
        "'q'",
        "\"d\"",
        "'it''s'",
        "\"a\\tb\"",
        "[1, 2]",
        "{k: v}",
        "[]",
        "{}",
        "-",
        "- x",
        "*a",
        "&a x",
        "!t x",
        "|",
        ">",
        "%x",
        "@x",
        ".5",
        ".inf",
        "+3",
        "10.0.0.0/8",
        "app == 'x'",
        "has(a)",
        "a,b",
        "a]",
        "k:",
        "\"unterminated",
        " lead",
        "trail ",
        "\t",
        "é",
        "::1/128",
    ])
    .prop_map(str::to_owned)
}

fn key_piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a", "b", "key", "x y", "'q'", "\"d\"", "1", "null", "k:", "-k", "a#b", "<<",
    ])
    .prop_map(str::to_owned)
}

#[derive(Debug, Clone)]
enum Shape {
    Scalar(String),
    Map(Vec<(String, Shape)>),
    Seq(Vec<Shape>),
}

fn shape() -> impl Strategy<Value = Shape> {
    let leaf = scalar_piece().prop_map(Shape::Scalar);
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec((key_piece(), inner.clone()), 1..4).prop_map(Shape::Map),
            prop::collection::vec(inner, 1..4).prop_map(Shape::Seq),
        ]
    })
}

/// Writes `s` in block style with a chosen indentation step and with
/// sequences either indented or indentless.
fn emit(s: &Shape, indent: usize, step: usize, indentless: bool, out: &mut String) {
    let pad = " ".repeat(indent);
    match s {
        Shape::Scalar(v) => {
            out.push_str(v);
            out.push('\n');
        }
        Shape::Map(entries) => {
            for (k, v) in entries {
                out.push_str(&pad);
                out.push_str(k);
                out.push(':');
                match v {
                    Shape::Scalar(x) => {
                        out.push(' ');
                        out.push_str(x);
                        out.push('\n');
                    }
                    Shape::Seq(_) if indentless => {
                        out.push('\n');
                        emit(v, indent, step, indentless, out);
                    }
                    _ => {
                        out.push('\n');
                        emit(v, indent + step, step, indentless, out);
                    }
                }
            }
        }
        Shape::Seq(items) => {
            for item in items {
                out.push_str(&pad);
                out.push('-');
                match item {
                    Shape::Scalar(x) => {
                        out.push(' ');
                        out.push_str(x);
                        out.push('\n');
                    }
                    _ => {
                        out.push('\n');
                        emit(item, indent + step, step, indentless, out);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_serde_yaml_ng(s in shape(), step in 1usize..4, indentless: bool) {
        let mut text = String::new();
        emit(&s, 0, step, indentless, &mut text);
        // Either declined or identical (checked inside).
        let _ = agree(&text);
    }

    #[test]
    fn agrees_on_serialized_values(s in shape()) {
        // serde_yaml_ng's own output for the value it reads from our emission.
        let mut text = String::new();
        emit(&s, 0, 2, false, &mut text);
        if let Ok(v) = serde_yaml_ng::from_str::<serde_json::Value>(&text) {
            let out = serde_yaml_ng::to_string(&v).unwrap();
            let _ = agree(&out);
        }
    }
}

/// The differential tests above only mean something if the fast path takes
/// a fair share of the generated texts: count them with a fixed seed.
#[test]
fn generated_texts_mostly_take_the_fast_path() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let (mut accepted_count, total) = (0, 400);
    for _ in 0..total {
        let s = shape().new_tree(&mut runner).unwrap().current();
        let mut text = String::new();
        emit(&s, 0, 2, false, &mut text);
        if agree(&text).is_some() {
            accepted_count += 1;
        }
    }
    assert!(
        accepted_count * 10 >= total,
        "only {accepted_count} of {total} generated texts took the fast path"
    );
}

proptest! {
    #[test]
    fn blank_trimming_matches_the_standard_library(s in "[ \ta-é:]{0,12}") {
        prop_assert_eq!(super::trim_blank_start(&s), s.trim_start_matches([' ', '\t']));
        prop_assert_eq!(super::trim_blank_end(&s), s.trim_end_matches([' ', '\t']));
    }
}

proptest! {
    #[test]
    fn colon_search_matches_a_byte_loop(s in "[a:# \t.-]{0,40}", from in 0usize..44) {
        let b = s.as_bytes();
        let expected = b
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, &c)| c == b':' || c == b'#')
            .map(|(i, _)| i);
        prop_assert_eq!(super::next_colon_or_hash(b, from), expected);
    }
}
