use std::path::Path;

use super::super::{decode_documents, decode_file, Format, Kind};
use super::yaml;
use crate::model::{Key, Value};

/// One minimal valid resource of every kind, in YAML.
pub(super) const ALL_KINDS_YAML: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: gnp1}
spec: {selector: all()}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: np1, namespace: ns1}
spec: {selector: app == 'x'}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: tier1}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: prof1}
spec: {labelsToApply: {a: b}}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node1-k8s-pod1-eth0, namespace: ns1}
spec: {node: node1, orchestrator: k8s, pod: pod1, endpoint: eth0, interfaceName: cali1, ipNetworks: [10.65.0.1/32]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: hep1}
spec: {node: node1, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: gns1}
spec: {nets: [192.0.2.0/24]}
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: ns-set, namespace: ns1}
spec: {nets: [198.51.100.0/24]}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool1}
spec: {cidr: 10.65.0.0/16}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node1}
spec: {bgp: {ipv4Address: 10.0.0.1/24}}
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {logSeverityScreen: Info}
---
apiVersion: projectcalico.org/v3
kind: ClusterInformation
metadata: {name: default}
spec: {datastoreReady: true}
---
apiVersion: projectcalico.org/v3
kind: IPAMBlock
metadata: {name: 10-65-0-0-26}
spec: {cidr: 10.65.0.0/26, affinity: "host:node1"}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa1, namespace: ns1}
"#;

fn check_all_kinds(docs: &[super::super::Decoded]) {
    assert_eq!(docs.len(), Kind::ALL.len());
    for (doc, kind) in docs.iter().zip(Kind::ALL) {
        assert_eq!(doc.id.kind, kind);
        let entries = doc
            .result
            .as_ref()
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert!(!entries.is_empty(), "{kind} produced no entries");
    }
}

#[test]
fn every_kind_decodes_from_yaml() {
    check_all_kinds(&yaml(ALL_KINDS_YAML));
}

#[test]
fn every_kind_decodes_from_json() {
    // Convert each YAML document to JSON text and decode it as a JSON file.
    let docs: Vec<serde_json::Value> = ALL_KINDS_YAML
        .split("\n---\n")
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    let mut decoded = Vec::new();
    for d in &docs {
        let text = serde_json::to_string_pretty(d).unwrap();
        decoded.extend(decode_documents(&text, "x.json", Format::Json).unwrap());
    }
    check_all_kinds(&decoded);
    // And all at once as a JSON array.
    let text = serde_json::to_string(&docs).unwrap();
    check_all_kinds(&decode_documents(&text, "x.json", Format::Json).unwrap());
}

#[test]
fn every_kind_decodes_from_json_style_yaml() {
    // One pretty-printed, then one compact JSON document per YAML document.
    let docs: Vec<serde_json::Value> = ALL_KINDS_YAML
        .split("\n---\n")
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    let pretty: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string_pretty(d).unwrap())
        .collect();
    check_all_kinds(&yaml(&format!("---\n{}\n", pretty.join("\n---\n"))));
    let compact: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    check_all_kinds(&yaml(&compact.join("\n---\n")));
    // And all in one `List` document.
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    check_all_kinds(&yaml(&serde_json::to_string_pretty(&list).unwrap()));
}

#[test]
fn a_json_style_document_with_a_syntax_error_reports_its_line_in_the_file() {
    let text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: a}\n---\n{\n  \"apiVersion\": \"projectcalico.org/v3\",\n  \"kind\": \"Tier\"\n  \"metadata\": {\"name\": \"b\"}\n}\n";
    let e = decode_documents(text, "f.yaml", Format::Yaml).unwrap_err();
    assert_eq!(e.line, 8, "{e}");
    assert!(e.reason.contains("line 8"), "{e}");
}

#[test]
fn a_json_style_document_with_an_unknown_field_fails_only_that_resource() {
    let text = "{\"apiVersion\": \"projectcalico.org/v3\", \"kind\": \"Tier\", \"metadata\": {\"name\": \"a\"}}\n---\n{\n  \"apiVersion\": \"projectcalico.org/v3\",\n  \"kind\": \"GlobalNetworkPolicy\",\n  \"metadata\": {\"name\": \"b\"},\n  \"spec\": {\n    \"ingress\": [{\"action\": \"Allow\", \"source\": {\"selectr\": \"x\"}}]\n  }\n}\n";
    let docs = yaml(text);
    assert!(docs[0].result.is_ok());
    assert_eq!(docs[1].line, 3);
    let e = docs[1].result.as_ref().unwrap_err();
    assert_eq!(e.field, "spec.ingress[0].source");
    assert!(e.reason.contains("selectr"), "{e}");
    assert!(e.reason.contains("line 8"), "{e}");
}

#[test]
fn kind_list_documents_expand_to_their_items() {
    let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: projectcalico.org/v3
  kind: Tier
  metadata: {name: a}
- apiVersion: projectcalico.org/v3
  kind: Tier
  metadata: {name: b}
"#;
    let docs = yaml(text);
    let names: Vec<_> = docs.iter().map(|d| d.id.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn a_yaml_list_with_an_invalid_member_still_decodes_the_others() {
    let block = "apiVersion: v1\nkind: TierList\nitems:\n- {apiVersion: projectcalico.org/v3, kind: Tier, metadata: {name: a}}\n- {apiVersion: projectcalico.org/v3, kind: Tier, metadata: {name: b}, spec: {ordr: 1}}\n- {apiVersion: projectcalico.org/v3, kind: Tier, metadata: {name: c}}\n";
    let value: serde_json::Value = serde_yaml_ng::from_str(block).unwrap();
    for text in [
        block.to_owned(),
        serde_json::to_string_pretty(&value).unwrap(),
    ] {
        let docs = yaml(&text);
        let names: Vec<_> = docs.iter().map(|d| d.id.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"], "{text}");
        assert!(docs[0].result.is_ok() && docs[2].result.is_ok());
        let e = docs[1].result.as_ref().unwrap_err();
        assert!(e.reason.contains("ordr"), "{e}");
    }
}

#[test]
fn list_members_decode_as_documents_of_their_own() {
    // Fields are read in text order, as in a document of its own (a
    // ServiceAccount's own fields are accepted once its kind is known).
    let member = "apiVersion: v1\n  kind: ServiceAccount\n  metadata: {name: sa1, namespace: ns1}\n  automountServiceAccountToken: true\n";
    let alone = yaml(&member.replace("\n  ", "\n"));
    assert!(alone[0].result.is_ok());
    let docs = yaml(&format!("kind: List\nitems:\n- {member}"));
    assert_eq!(docs[0].id, alone[0].id);
    assert!(docs[0].result.is_ok(), "{:?}", docs[0].result);
}

#[test]
fn document_lines_are_where_each_document_starts() {
    let text = "# comment\n---\napiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: a}\n---\n\n\napiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: b}\n";
    let docs = yaml(text);
    assert_eq!(docs.iter().map(|d| d.line).collect::<Vec<_>>(), [3, 9]);
}

#[test]
fn a_syntax_error_in_one_document_fails_the_whole_file_with_its_line() {
    let text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: a}\n---\napiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: [b\n";
    let e = decode_documents(text, "dir/f.yaml", Format::Yaml).unwrap_err();
    assert_eq!(e.origin, "dir/f.yaml");
    assert!(
        e.line >= 7,
        "line {} should be in the second document",
        e.line
    );
    assert!(e
        .to_string()
        .starts_with(&format!("dir/f.yaml:{}: ", e.line)));
}

#[test]
fn bad_indentation_reports_the_offending_line() {
    let text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: a\n bad: x\n";
    let e = decode_documents(text, "f.yaml", Format::Yaml).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
}

#[test]
fn a_json_list_with_an_invalid_member_still_decodes_the_others() {
    let tier = |name: &str, spec: &str| {
        format!(
            r#"{{"apiVersion": "projectcalico.org/v3", "kind": "Tier", "metadata": {{"name": "{name}"}}, "spec": {spec}}}"#
        )
    };
    let members = [
        tier("a", "{}"),
        tier("b", r#"{"ordr": 1}"#),
        tier("c", r#"{"order": 3}"#),
    ]
    .join(",\n");
    for text in [
        format!("[\n{members}\n]\n"),
        format!("{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n{members}\n]}}\n"),
    ] {
        let docs = decode_documents(&text, "f.json", Format::Json).unwrap();
        let names: Vec<_> = docs.iter().map(|d| d.id.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"], "{text}");
        assert!(docs[0].result.is_ok() && docs[2].result.is_ok());
        let e = docs[1].result.as_ref().unwrap_err();
        assert!(e.reason.contains("ordr"), "{e}");
    }
}

#[test]
fn a_json_list_inside_a_list_is_an_error_naming_the_member() {
    let text = r#"[
  {"apiVersion": "projectcalico.org/v3", "kind": "Tier", "metadata": {"name": "a"}},
  {"apiVersion": "v1", "kind": "List", "items": []}
]"#;
    let e = decode_documents(text, "f.json", Format::Json).unwrap_err();
    assert_eq!(e.reason, "items[1]: nested lists are not supported");
    assert_eq!(e.line, 1);
}

#[test]
fn a_json_list_object_decodes_every_kind() {
    let docs: Vec<serde_json::Value> = ALL_KINDS_YAML
        .split("\n---\n")
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let text = format!("\n\n{}", serde_json::to_string_pretty(&list).unwrap());
    let decoded = decode_documents(&text, "x.json", Format::Json).unwrap();
    check_all_kinds(&decoded);
    assert!(decoded.iter().all(|d| d.line == 3));
}

#[test]
fn json_syntax_error_reports_its_line() {
    let text = "{\n  \"apiVersion\": \"projectcalico.org/v3\",\n  \"kind\": \"Tier\"\n  \"metadata\": {}\n}\n";
    let e = decode_documents(text, "f.json", Format::Json).unwrap_err();
    assert_eq!(e.line, 4, "{e}");
}

#[test]
fn unknown_kind_is_a_decode_error_naming_the_kind() {
    let text = "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: a}\nspec: {}\n";
    let e = decode_documents(text, "f.yaml", Format::Yaml).unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.reason.contains("BGPPeer"), "{e}");
}

#[test]
fn missing_identity_fields_are_decode_errors() {
    for (text, what) in [
        ("kind: Tier\nmetadata: {name: a}\n", "apiVersion"),
        (
            "apiVersion: projectcalico.org/v3\nmetadata: {name: a}\n",
            "kind",
        ),
        (
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {}\n",
            "metadata.name",
        ),
        (
            "apiVersion: v1\nkind: Tier\nmetadata: {name: a}\n",
            "apiVersion",
        ),
    ] {
        let e = decode_documents(text, "f.yaml", Format::Yaml).unwrap_err();
        assert!(e.reason.contains(what), "{what}: {e}");
    }
}

#[test]
fn unknown_field_fails_only_that_resource_and_names_the_field() {
    let text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: a}\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: b}\nspec:\n  ingress:\n  - action: Allow\n    source: {selectr: x}\n";
    let docs = yaml(text);
    assert!(docs[0].result.is_ok());
    let e = docs[1].result.as_ref().unwrap_err();
    assert_eq!(e.field, "spec.ingress[0].source");
    assert!(e.reason.contains("selectr"), "{e}");
    assert!(e.reason.contains("line 11"), "{e}");
}

#[test]
fn spec_before_kind_still_decodes() {
    let text =
        "spec: {order: 5}\nmetadata: {name: t}\nkind: Tier\napiVersion: projectcalico.org/v3\n";
    let docs = yaml(text);
    match &docs[0].result.as_ref().unwrap()[0] {
        (Key::Tier(n), Value::Tier(t)) => {
            assert_eq!(n, "t");
            assert_eq!(t.order, Some(5.0));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn namespaced_kind_without_namespace_goes_to_default() {
    let docs = yaml("apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: p}\n");
    assert_eq!(docs[0].id.namespace.as_deref(), Some("default"));
    let docs =
        yaml("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t, namespace: x}\n");
    assert_eq!(docs[0].id.namespace, None);
}

#[test]
fn empty_documents_and_comments_are_skipped() {
    assert!(yaml("").is_empty());
    assert!(yaml("---\n# nothing\n---\n").is_empty());
}

#[test]
fn kind_round_trips_through_its_string() {
    for k in Kind::ALL {
        assert_eq!(k.to_string().parse::<Kind>().unwrap(), k);
    }
    assert!("Bogus".parse::<Kind>().is_err());
}

#[test]
fn bundled_examples_decode_without_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files = Vec::new();
    let mut dirs = vec![root.join("datastore"), root.join("policy")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 5, "examples missing: {files:?}");
    let mut kinds = std::collections::BTreeSet::new();
    for f in files {
        for d in decode_file(&f).unwrap_or_else(|e| panic!("{e}")) {
            if let Err(e) = &d.result {
                panic!("{}:{}: {} invalid: {e}", f.display(), d.line, d.id);
            }
            kinds.insert(d.id.kind);
        }
    }
    for k in [
        Kind::Node,
        Kind::Tier,
        Kind::Namespace,
        Kind::WorkloadEndpoint,
        Kind::GlobalNetworkPolicy,
        Kind::NetworkPolicy,
        Kind::GlobalNetworkSet,
        Kind::IPPool,
        Kind::IPAMBlock,
        Kind::FelixConfiguration,
    ] {
        assert!(kinds.contains(&k), "examples lack a {k}");
    }
}

#[test]
fn unreadable_file_is_a_decode_error() {
    let e = decode_file(Path::new("/nonexistent/x.yaml")).unwrap_err();
    assert_eq!(e.line, 0);
}
