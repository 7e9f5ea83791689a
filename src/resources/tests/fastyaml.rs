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

/// Fuzz finding (session 24, `file_decode`): the fast reader read a name holding U+FFFF,
/// which libyaml rejects ("control characters are not allowed"), so the same file decoded to
/// a validation error with the fast reader and to a syntax error without it.
#[test]
fn a_noncharacter_goes_to_the_full_parser() {
    use crate::resources::fuzzing::decode_documents_without_fast_reader;
    use crate::resources::{decode_documents, Format};
    for c in ['\u{fffe}', '\u{ffff}'] {
        let text = format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  \
             name: default.a{c}allow-web\nspec:\n  order: 100\n"
        );
        declined(&text);
        assert!(serde_yaml_ng::from_str::<Dyn>(&text).is_err());
        let shown = |r: Result<Vec<crate::resources::Decoded>, crate::resources::DecodeError>| {
            r.map(|d| d.iter().map(|d| format!("{d:?}")).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        };
        let fast = shown(decode_documents(&text, "f.yaml", Format::Yaml));
        let full = shown(decode_documents_without_fast_reader(
            &text,
            "f.yaml",
            Format::Yaml,
        ));
        assert!(fast.is_err(), "{fast:?}");
        assert_eq!(fast, full);
    }
    // The neighbours U+FFFD and U+E000 are printable: read fast, as libyaml reads them.
    accepted("a: x\u{fffd}\u{e000}y\n");
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

/// A proptest runner with a fixed seed, for counting tests that must give the same
/// figure on every run.
fn seeded_runner(seed: u8) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

/// The differential tests above only mean something if the fast path takes
/// a fair share of the generated texts: count them with a fixed seed.
#[test]
fn generated_texts_mostly_take_the_fast_path() {
    use proptest::strategy::ValueTree;
    let mut runner = seeded_runner(7);
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

// ---------------------------------------------------------------------------
// Flow documents: a document whose content is one flow collection, over any
// number of lines (pretty-printed or compact JSON is one).

/// A resource as `calicoctl get -o json` and generators write it.
const PRETTY_JSON: &str = r#"{
  "apiVersion": "projectcalico.org/v3",
  "kind": "GlobalNetworkPolicy",
  "metadata": {
    "name": "p1",
    "labels": {"a": "b", "projectcalico.org/tier": "default"}
  },
  "spec": {
    "order": 100.5,
    "selector": "a == 'b' && has(c)",
    "types": ["Ingress"],
    "ingress": [
      {
        "action": "Allow",
        "protocol": "TCP",
        "source": {"nets": ["10.0.0.0/8", "::1/128"], "notPorts": [22, "100:200"]},
        "destination": {"ports": [80, 443], "selector": ""}
      }
    ],
    "egress": [],
    "nothing": null,
    "flag": false,
    "negative": -7,
    "escapes": "tab\there \"q\" \\ \/ \u00e9 \n",
    "unicode": "héllo €"
  }
}
"#;

#[test]
fn pretty_json_documents_are_read_on_the_fast_path() {
    let v = accepted(PRETTY_JSON);
    let full: Dyn = serde_yaml_ng::from_str(PRETTY_JSON).unwrap();
    assert_eq!(v, full);
    // With a document marker, comments around it, CRLF line ends and
    // indentation of the whole collection.
    accepted(&format!("---\n# a comment\n\n{PRETTY_JSON}# trailing\n\n"));
    accepted(&PRETTY_JSON.replace('\n', "\r\n"));
    accepted(&PRETTY_JSON.replace('\n', "\n    "));
    accepted("{\n\"a\": 1\n}\n");
    accepted("[\n  {\"a\": 1},\n  [2, 3]\n]\n");
    accepted("{\"a\": 1} # a comment after the closing bracket\n");
}

#[test]
fn compact_json_documents_are_read_on_the_fast_path() {
    let value: serde_json::Value = serde_yaml_ng::from_str(PRETTY_JSON).unwrap();
    let compact = serde_json::to_string(&value).unwrap();
    assert!(compact.contains("\":\""), "{compact}");
    accepted(&compact);
    // JSON's `"key":value` after a quoted key, which libyaml accepts in flow
    // context, with every kind of value.
    let v =
        accepted(r#"{"a":1,"b":[2,{"c":"d"}],"e":{"f":null},"g":-1.5,"h":true,"i":'j',"k":x:y}"#);
    let full: Dyn = serde_yaml_ng::from_str(r#"{"a": 1, "b": [2, {"c": "d"}], "e": {"f": null}, "g": -1.5, "h": true, "i": 'j', "k": "x:y"}"#).unwrap();
    assert_eq!(v, full);
    accepted("{'a':1, \"b\" :2}\n");
    accepted("[[],{},[[]],{\"a\":{}}]\n");
}

#[test]
fn multi_line_flow_yaml_is_read_on_the_fast_path() {
    for text in [
        "{a: 1,\n b: [x, y,\n  z],\n c: {d: e}\n}\n",
        "[a\n, b\n]\n",
        "{a: b\n}\n",
        "{\"a\":\n  1, b:\n  2}\n",
        "[1, 2,]\n",
        "{a: 1,\n}\n",
        "[\n\n  x,\n\n]\n",
        "{url: http://x:80/y, t: 12:30, neg: -5, sel: a == 'b'}\n",
        "[a#b, 'c # d', \"e # f\"]\n",
    ] {
        accepted(text);
    }
}

#[test]
fn a_flow_document_in_a_reader_does_not_disturb_block_documents() {
    let docs = [
        "kind: A\nspec:\n  x: [1, 2]\n",
        "{\n  \"kind\": \"B\",\n  \"x\": [1,\n 2]\n}\n",
        "{\n  \"kind\": \"C\",\n  \"x\": [1, 2\n",
        "kind: D\n",
        "[{\"kind\": \"E\"}]\n# end\n",
    ];
    let mut reader = super::Reader::default();
    for text in docs {
        let fast = reader
            .parse_lines(text.split('\n'))
            .map(|t| Dyn::deserialize(t.root()).unwrap());
        let fresh = parse(text).map(|t| Dyn::deserialize(t.root()).unwrap());
        assert_eq!(fast, fresh, "{text}");
        if let Some(fast) = fast {
            assert_eq!(fast, serde_yaml_ng::from_str::<Dyn>(text).unwrap());
        }
    }
    assert!(reader.parse_lines(docs[2].split('\n')).is_none());
    let d = reader.parse_lines(docs[3].split('\n')).unwrap();
    assert_eq!(d.nodes.len(), 3);
}

#[test]
fn a_multiline_plain_scalar_in_flow_is_declined() {
    // libyaml folds the lines into one scalar ("a b").
    for text in [
        "[a\nb]\n",
        "{\"a\": b\n c}\n",
        "{\"a\": b\n  \"c\": 1}\n",
        "[a,\n b\n c]\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_multiline_quoted_scalar_in_flow_is_declined() {
    for text in [
        "[\"a\n b\"]\n",
        "{\"a\": \"b\n c\"}\n",
        "['a\n b']\n",
        "{\"a\": \"b\\\n c\"}\n",
        "{\"a\n b\": 1}\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_tab_outside_quoted_scalars_in_flow_is_declined() {
    for text in [
        "{\n\t\"a\": 1\n}\n",
        "{\"a\":\t1}\n",
        "{\"a\": 1\t}\n",
        "[a\tb]\n",
        "[1,\t2]\n",
        "k: [1,\t2]\n",
        "k: {a: b\t}\n",
        "{\"a\": 1}\n\t\n",
    ] {
        declined(text);
    }
    // Inside a quoted scalar a tab is text.
    accepted("{\"a\": \"x\ty\", 'b': 'u\tv'}\n");
}

#[test]
fn a_comment_inside_flow_is_declined() {
    for text in [
        "{\"a\": 1 # c\n}\n",
        "{\n# c\n\"a\": 1}\n",
        "[\"a\"# c\n]\n",
        "[a # c\n]\n",
        "[\n  1, # c\n  2]\n",
        "k: [a, #c]\n",
    ] {
        declined(text);
    }
}

#[test]
fn content_after_the_closing_bracket_is_declined() {
    // Blank and comment lines may follow (see the acceptance tests); nothing
    // else.  `}#c` is a comment to libyaml but not to YAML: declined.
    for text in [
        "{\"a\": 1}\nb: 2\n",
        "{\"a\": 1} x\n",
        "{\"a\": 1}\n...\n",
        "{\"a\": 1}\n- x\n",
        "{\"a\": 1}\n  x\n",
        "[1]: x\n",
        "{a: 1}: x\n",
        "{\"a\": 1}#c\n",
        "{\"a\": 1}\n{\"b\": 2}\n",
    ] {
        declined(text);
    }
}

#[test]
fn anchors_aliases_and_tags_in_flow_are_declined() {
    for text in [
        "{\"a\": &x 1,\n \"b\": *x}\n",
        "{\"a\": !!str 1}\n",
        "[&a x]\n",
        "[!t x]\n",
        "!!map {\"a\": 1}\n",
        "&a {\"a\": 1}\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_key_and_its_colon_on_different_lines_are_declined() {
    // libyaml: "did not find expected ',' or '}'".
    for text in ["{\"a\"\n: 1}\n", "{a\n: 1}\n", "{\"a\"\n\n  :1}\n"] {
        declined(text);
    }
}

#[test]
fn a_key_farther_than_1024_characters_from_its_colon_is_declined() {
    // libyaml forgets a simple key 1024 characters after its start.
    let k = |n: usize| "k".repeat(n);
    accepted(&format!("{{\"{}\": 1}}\n", k(1022)));
    for text in [
        format!("{{\"{}\": 1}}\n", k(1023)),
        format!("{{\"{}\" : 1}}\n", k(1022)),
        format!("{{\n  {}: 1}}\n", k(1100)),
        format!("k: {{\"{}\": 1}}\n", k(1100)),
        format!("\"{}\": 1\n", k(1100)),
        format!("{}: 1\n", k(1100)),
        format!("- \"{}\": 1\n", k(1100)),
    ] {
        declined(&text);
    }
}

#[test]
fn a_duplicate_key_in_flow_is_declined() {
    for text in [
        "{\"a\": 1,\n \"a\": 2}\n",
        "{\"a\": 1, \"\\u0061\": 2}\n",
        "{a: 1, 'a': 2}\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_surrogate_escape_is_declined() {
    // JSON writes characters outside the BMP as surrogate pairs; libyaml
    // rejects them ("found invalid Unicode character escape code").
    for text in [
        "{\"a\": \"\\ud83d\\ude00\"}\n",
        "[\"\\uD800\"]\n",
        "{\"a\": \"\\U0000dfff\"}\n",
    ] {
        declined(text);
        assert!(serde_yaml_ng::from_str::<Dyn>(text).is_err(), "{text}");
    }
    // `\/` is a YAML escape too, and an 8-digit escape reaches the rest.
    assert_eq!(
        accepted("[\"\\/\", \"\\U0001F600\"]\n"),
        Dyn::List(vec![Dyn::Str("/".into()), Dyn::Str("😀".into())])
    );
}

#[test]
fn a_colon_before_a_flow_indicator_in_a_plain_scalar_is_declined() {
    // libyaml: "found unexpected ':'" (the fast path used to read `a:`).
    for text in [
        "k: [a:]\n",
        "k: {x: a:}\n",
        "[a:?]\n",
        "[a:,b]\n",
        "[\n  a:]\n",
        "{x: a:{}}\n",
    ] {
        declined(text);
        assert!(serde_yaml_ng::from_str::<Dyn>(text).is_err(), "{text}");
    }
}

#[test]
fn a_lone_carriage_return_is_declined() {
    // libyaml breaks lines at a `\r` not followed by `\n`.
    for text in [
        "a: b\rc\n",
        "a: \"b\rc\"\n",
        "a: 'b\rc'\n",
        "{\"a\":\r1}\n",
        "[a,\rb]\n",
        "a: b\r\r\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_document_marker_or_directive_inside_flow_is_declined() {
    for text in [
        "{\n--- : 1}\n",
        "[\n...\n]\n",
        "[\n%x\n]\n",
        "--- {\"a\": 1}\n",
    ] {
        declined(text);
    }
}

#[test]
fn an_unclosed_flow_document_is_declined() {
    for text in [
        "{\"a\": 1\n",
        "[1, 2\n\n",
        "{\"a\": [1}\n",
        "[\n",
        "{\"a\": \"b\n",
    ] {
        declined(text);
    }
}

#[test]
fn an_entry_without_a_value_or_with_an_explicit_key_is_declined() {
    for text in [
        "{a}\n",
        "{\"a\"}\n",
        "{a: }\n",
        "{\"a\":}\n",
        "{\"a\":,}\n",
        "[a: 1]\n",
        "[\"a\": 1]\n",
        "{? a: 1}\n",
        "[? a]\n",
        "[,]\n",
        "{,}\n",
        "[1,,2]\n",
        "{a: 1 b: 2}\n",
    ] {
        declined(text);
    }
}

#[test]
fn a_plain_key_with_an_adjacent_colon_is_declined() {
    // `a:1` is one plain scalar (a key with a null value to libyaml).
    for text in ["{a:1}\n", "{a:b, c: d}\n", "{a :1}\n"] {
        declined(text);
    }
}

#[test]
fn a_plain_scalar_followed_by_a_collection_is_declined() {
    for text in [
        "[a[b]]\n",
        "{\"a\": b{c: d}}\n",
        "[-]\n",
        "[- a]\n",
        "[\n-\n]\n",
    ] {
        declined(text);
    }
}

#[test]
fn flow_deeper_than_the_nesting_limit_is_declined() {
    let deep = |n: usize| format!("{}\n{}\n", "[".repeat(n), "]".repeat(n));
    accepted(&deep(40));
    declined(&deep(70));
    let deep_maps = format!("{}1{}\n", "{\"a\":\n".repeat(70), "}".repeat(70));
    declined(&deep_maps);
}

// ---------------------------------------------------------------------------
// Differential property tests of flow renderings.

/// How a [`Shape`] is written as a flow collection.
#[derive(Debug, Clone, Copy)]
enum FlowStyle {
    /// `{k: v, k2: [a, b]}` on one line.
    OneLine,
    /// JSON-style: one entry per line, indented by two spaces per level.
    Pretty,
    /// No whitespace at all: `{k:v,k2:[a,b]}`.
    Compact,
    /// Whitespace at each token boundary chosen from `gaps`.
    Random,
}

/// Where whitespace may go in a flow collection.
#[derive(Clone, Copy, PartialEq)]
enum Gap {
    Open,
    Comma,
    Close,
    BeforeColon,
    AfterColon,
}

struct FlowWriter<'g> {
    out: String,
    style: FlowStyle,
    gaps: &'g [u8],
    next: usize,
    trailing_comma: bool,
}

impl FlowWriter<'_> {
    fn gap(&mut self, at: Gap, depth: usize) {
        const RANDOM: [&str; 6] = ["", " ", "\n", "\n  ", "\n\n ", "  "];
        let pad = |n: usize| format!("\n{}", "  ".repeat(n));
        let s = match (self.style, at) {
            (FlowStyle::OneLine, Gap::Comma | Gap::AfterColon) => " ".to_owned(),
            (FlowStyle::OneLine | FlowStyle::Compact, _) => String::new(),
            (FlowStyle::Pretty, Gap::Open | Gap::Comma) => pad(depth + 1),
            (FlowStyle::Pretty, Gap::Close) => pad(depth),
            (FlowStyle::Pretty, Gap::BeforeColon) => String::new(),
            (FlowStyle::Pretty, Gap::AfterColon) => " ".to_owned(),
            (FlowStyle::Random, _) => {
                let g = self.gaps[self.next % self.gaps.len()];
                self.next += 1;
                RANDOM[usize::from(g) % RANDOM.len()].to_owned()
            }
        };
        self.out.push_str(&s);
    }

    fn write(&mut self, s: &Shape, depth: usize) {
        match s {
            Shape::Scalar(v) => self.out.push_str(v),
            Shape::Map(entries) => {
                self.out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                        self.gap(Gap::Comma, depth);
                    } else {
                        self.gap(Gap::Open, depth);
                    }
                    self.out.push_str(k);
                    self.gap(Gap::BeforeColon, depth);
                    self.out.push(':');
                    self.gap(Gap::AfterColon, depth);
                    self.write(v, depth + 1);
                }
                if self.trailing_comma {
                    self.out.push(',');
                }
                self.gap(Gap::Close, depth);
                self.out.push('}');
            }
            Shape::Seq(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                        self.gap(Gap::Comma, depth);
                    } else {
                        self.gap(Gap::Open, depth);
                    }
                    self.write(item, depth + 1);
                }
                if self.trailing_comma {
                    self.out.push(',');
                }
                self.gap(Gap::Close, depth);
                self.out.push(']');
            }
        }
    }
}

fn flow_text(s: &Shape, style: FlowStyle, gaps: &[u8], trailing_comma: bool) -> String {
    let mut w = FlowWriter {
        out: String::new(),
        style,
        gaps,
        next: 0,
        trailing_comma,
    };
    w.write(s, 0);
    w.out.push('\n');
    w.out
}

fn flow_style() -> impl Strategy<Value = FlowStyle> {
    prop::sample::select(vec![
        FlowStyle::OneLine,
        FlowStyle::Pretty,
        FlowStyle::Compact,
        FlowStyle::Random,
    ])
}

/// The real JSON (pretty and compact) of what serde_yaml_ng reads from the
/// block rendering of `s`, when that is a JSON collection.
fn json_texts(s: &Shape) -> Vec<String> {
    let mut block = String::new();
    emit(s, 0, 2, false, &mut block);
    match serde_yaml_ng::from_str::<serde_json::Value>(&block) {
        Ok(v) if v.is_object() || v.is_array() => vec![
            serde_json::to_string_pretty(&v).unwrap(),
            serde_json::to_string(&v).unwrap(),
        ],
        _ => Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn flow_renderings_agree_with_serde_yaml_ng(
        s in shape(),
        style in flow_style(),
        gaps in prop::collection::vec(0u8..6, 1..12),
        trailing_comma in prop::bool::weighted(0.1),
        marker: bool,
    ) {
        let mut text = flow_text(&s, style, &gaps, trailing_comma);
        if marker {
            text.insert_str(0, "---\n# generated\n");
        }
        // Either declined or identical (checked inside).
        let _ = agree(&text);
    }

    #[test]
    fn arbitrary_flow_texts_agree_with_serde_yaml_ng(
        open in prop::sample::select(vec!["{", "[", "---\n{", "k: {", "- ["]),
        body in "[\\[\\]{}:,\"' ab1#?&*!|>%@`.\t\n\r\\\\-]{0,40}",
    ) {
        let _ = agree(&format!("{open}{body}"));
    }

    #[test]
    fn json_renderings_agree_with_serde_yaml_ng(s in shape()) {
        for text in json_texts(&s) {
            let _ = agree(&text);
        }
    }
}

/// As [`generated_texts_mostly_take_the_fast_path`], for the flow and JSON
/// renderings: real JSON must nearly always be read on the fast path.
#[test]
fn generated_flow_texts_mostly_take_the_fast_path() {
    use proptest::strategy::ValueTree;
    let mut runner = seeded_runner(9);
    let (mut flow, mut json, mut json_total, total) = (0, 0, 0, 400);
    for i in 0..total {
        let s = shape().new_tree(&mut runner).unwrap().current();
        let style = [FlowStyle::OneLine, FlowStyle::Pretty, FlowStyle::Compact][i % 3];
        if agree(&flow_text(&s, style, &[0], false)).is_some() {
            flow += 1;
        }
        for text in json_texts(&s) {
            json_total += 1;
            if agree(&text).is_some() {
                json += 1;
            }
        }
    }
    eprintln!("flow {flow}/{total}, JSON {json}/{json_total} on the fast path");
    assert!(
        flow * 10 >= total,
        "only {flow} of {total} flow texts took the fast path"
    );
    assert!(
        json * 10 >= json_total * 9,
        "only {json} of {json_total} JSON texts took the fast path"
    );
}
