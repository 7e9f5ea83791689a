//! Benchmark workloads written as Calico v3 resource files, in each document style users
//! write: block YAML, one JSON document per YAML document (as `calicoctl get -o json`
//! output or generated manifests look), and `.json` `List` files.
//!
//! Resources are built as JSON values and rendered by [`Style`]; every file is written
//! whole and renamed into place, so a syncer never reads half of one.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::model::{Action, Key, Port, Protocol, Rule, Update, Value as ModelValue};

/// How resources are laid out in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// Block YAML documents separated by `---`.
    Yaml,
    /// One pretty-printed JSON document per YAML document (`---` separated), in a `.yaml`.
    JsonDocs,
    /// One `.json` file holding a `List` of the resources.
    JsonList,
}

impl Style {
    /// The style's name, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Style::Yaml => "yaml",
            Style::JsonDocs => "json-docs",
            Style::JsonList => "json-list",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Style::Yaml | Style::JsonDocs => "yaml",
            Style::JsonList => "json",
        }
    }
}

/// Renders resources into one file of a [`Style`].
pub struct FileWriter {
    style: Style,
    out: Vec<u8>,
    items: usize,
}

impl FileWriter {
    /// An empty file of `style`.
    pub fn new(style: Style) -> Self {
        let mut out = Vec::with_capacity(1 << 20);
        if style == Style::JsonList {
            out.extend_from_slice(
                b"{\"apiVersion\": \"projectcalico.org/v3\", \"kind\": \"List\", \"items\": [\n",
            );
        }
        FileWriter {
            style,
            out,
            items: 0,
        }
    }

    /// Appends one resource.
    pub fn push(&mut self, resource: &Value) {
        match self.style {
            Style::Yaml => {
                self.out.extend_from_slice(b"---\n");
                let mut s = String::new();
                yaml_block(resource, 0, &mut s);
                self.out.extend_from_slice(s.as_bytes());
            }
            Style::JsonDocs => {
                self.out.extend_from_slice(b"---\n");
                // Serialising a `Value` to a Vec cannot fail.
                let _ = serde_json::to_writer_pretty(&mut self.out, resource);
                self.out.push(b'\n');
            }
            Style::JsonList => {
                if self.items > 0 {
                    self.out.extend_from_slice(b",\n");
                }
                let _ = serde_json::to_writer(&mut self.out, resource);
            }
        }
        self.items += 1;
    }

    /// The file's bytes.
    pub fn into_bytes(mut self) -> Vec<u8> {
        if self.style == Style::JsonList {
            self.out.extend_from_slice(b"\n]}\n");
        }
        self.out
    }

    /// Writes the file as `dir/<stem>.<ext>` (through a temporary name and a rename);
    /// returns its path and size.
    pub fn finish(mut self, dir: &Path, stem: &str) -> io::Result<(PathBuf, u64)> {
        if self.style == Style::JsonList {
            self.out.extend_from_slice(b"\n]}\n");
        }
        let path = dir.join(format!("{stem}.{}", self.style.extension()));
        write_atomically(&path, &self.out)?;
        Ok((path, self.out.len() as u64))
    }
}

/// Writes `data` to `path` through `.<name>.tmp` and a rename (the file datastore ignores
/// hidden files), so a reader sees the old file or the new one, never a part.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(data)?;
    drop(f);
    fs::rename(&tmp, path)
}

/// Whether `s` can be written as a plain YAML scalar and read back as the same string.
fn plain_ok(s: &str) -> bool {
    let first_ok = s
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_');
    first_ok
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        )
}

fn yaml_scalar(v: &Value, out: &mut String) {
    match v {
        Value::String(s) if plain_ok(s) => out.push_str(s),
        Value::String(s) => {
            out.push('\'');
            out.push_str(&s.replace('\'', "''"));
            out.push('\'');
        }
        Value::Null => out.push_str("null"),
        other => out.push_str(&other.to_string()),
    }
}

fn is_empty_collection(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Block YAML for `v` at `indent` (a mapping's entries or a sequence's items each on
/// their own line).
fn yaml_block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                out.push_str(&pad);
                yaml_scalar(&Value::String(k.clone()), out);
                out.push(':');
                yaml_value_after_key(val, indent, out);
            }
        }
        Value::Array(a) => {
            for item in a {
                out.push_str(&pad);
                out.push('-');
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        // The first entry on the dash's line, the rest aligned under it.
                        let mut first = true;
                        for (k, val) in m {
                            if first {
                                out.push(' ');
                                first = false;
                            } else {
                                out.push_str(&pad);
                                out.push_str("  ");
                            }
                            yaml_scalar(&Value::String(k.clone()), out);
                            out.push(':');
                            yaml_value_after_key(val, indent + 2, out);
                        }
                    }
                    other => {
                        out.push(' ');
                        if is_empty_collection(other) {
                            out.push_str(if other.is_object() { "{}" } else { "[]" });
                        } else {
                            yaml_scalar(other, out);
                        }
                        out.push('\n');
                    }
                }
            }
        }
        other => {
            out.push_str(&pad);
            yaml_scalar(other, out);
            out.push('\n');
        }
    }
}

fn yaml_value_after_key(val: &Value, indent: usize, out: &mut String) {
    match val {
        Value::Object(_) | Value::Array(_) if is_empty_collection(val) => {
            out.push_str(if val.is_object() { " {}\n" } else { " []\n" });
        }
        Value::Object(_) => {
            out.push('\n');
            yaml_block(val, indent + 2, out);
        }
        Value::Array(_) => {
            out.push('\n');
            yaml_block(val, indent, out);
        }
        scalar => {
            out.push(' ');
            yaml_scalar(scalar, out);
            out.push('\n');
        }
    }
}

/// A v3 resource with `metadata` and `spec`.
pub fn resource(kind: &str, metadata: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "projectcalico.org/v3",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    })
}

/// A v3 WorkloadEndpoint name: node, orchestrator, pod and endpoint with their dashes
/// doubled, joined by single dashes.
pub fn workload_endpoint_name(node: &str, orchestrator: &str, pod: &str, endpoint: &str) -> String {
    [node, orchestrator, pod, endpoint]
        .iter()
        .map(|p| p.replace('-', "--"))
        .collect::<Vec<_>>()
        .join("-")
}

/// Labels as a JSON object.
pub fn labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect::<Map<_, _>>(),
    )
}

/// The v3 resource a benchmark's model update stands for (`None` for a deletion or a kind
/// the benchmarks do not generate).  Covers what the generators use: workload endpoints,
/// global policies, profiles and global network sets, with rules of actions, protocols,
/// selectors, nets and ports.  `index` numbers endpoints that have no interface name.
pub fn from_model(update: &Update, index: usize) -> Option<Value> {
    let value = update.value.as_ref()?;
    match (&update.key, value) {
        (Key::WorkloadEndpoint(k), ModelValue::WorkloadEndpoint(ep)) => {
            let (ns, pod) = k
                .workload_id
                .split_once('/')
                .unwrap_or(("default", k.workload_id.as_str()));
            let mut meta = Map::new();
            meta.insert(
                "name".into(),
                Value::String(workload_endpoint_name(
                    &k.hostname,
                    &k.orchestrator_id,
                    pod,
                    &k.endpoint_id,
                )),
            );
            meta.insert("namespace".into(), Value::String(ns.to_string()));
            let own: Map<String, Value> = ep
                .labels
                .iter()
                .filter(|(k, _)| !k.starts_with("projectcalico.org/"))
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            if !own.is_empty() {
                meta.insert("labels".into(), Value::Object(own));
            }
            let iface = if ep.name.is_empty() {
                format!("cali{index:011x}")
            } else {
                ep.name.clone()
            };
            let nets: Vec<String> = ep
                .ipv4_nets
                .iter()
                .chain(&ep.ipv6_nets)
                .map(|n| n.to_string())
                .collect();
            Some(resource(
                "WorkloadEndpoint",
                Value::Object(meta),
                json!({
                    "orchestrator": k.orchestrator_id,
                    "node": k.hostname,
                    "pod": pod,
                    "endpoint": k.endpoint_id,
                    "interfaceName": iface,
                    "ipNetworks": nets,
                    "profiles": ep.profile_ids,
                }),
            ))
        }
        (Key::Policy(k), ModelValue::Policy(p)) => {
            let mut spec = Map::new();
            if let Some(order) = p.order {
                spec.insert("order".into(), json!(order));
            }
            spec.insert("selector".into(), Value::String(p.selector.clone()));
            let types: Vec<Value> = p
                .types
                .iter()
                .map(|t| match t.as_str() {
                    "ingress" => json!("Ingress"),
                    "egress" => json!("Egress"),
                    other => json!(other),
                })
                .collect();
            if !types.is_empty() {
                spec.insert("types".into(), Value::Array(types));
            }
            if !p.inbound_rules.is_empty() {
                spec.insert("ingress".into(), rules(&p.inbound_rules));
            }
            if !p.outbound_rules.is_empty() {
                spec.insert("egress".into(), rules(&p.outbound_rules));
            }
            Some(resource(
                "GlobalNetworkPolicy",
                json!({"name": k.name}),
                Value::Object(spec),
            ))
        }
        (Key::Profile(name), ModelValue::Profile(p)) => {
            let mut spec = Map::new();
            if !p.labels.is_empty() {
                spec.insert("labelsToApply".into(), json!(p.labels));
            }
            if !p.inbound_rules.is_empty() {
                spec.insert("ingress".into(), rules(&p.inbound_rules));
            }
            if !p.outbound_rules.is_empty() {
                spec.insert("egress".into(), rules(&p.outbound_rules));
            }
            Some(resource(
                "Profile",
                json!({"name": name}),
                Value::Object(spec),
            ))
        }
        (Key::NetworkSet(k), ModelValue::NetworkSet(ns)) => {
            let nets: Vec<String> = ns.nets.iter().map(|n| n.to_string()).collect();
            Some(resource(
                "GlobalNetworkSet",
                json!({"name": k.name, "labels": ns.labels}),
                json!({ "nets": nets }),
            ))
        }
        _ => None,
    }
}

fn rules(rules: &[Rule]) -> Value {
    Value::Array(rules.iter().map(rule).collect())
}

fn rule(r: &Rule) -> Value {
    let mut m = Map::new();
    let action = match r.action {
        Action::Allow => "Allow",
        Action::Deny => "Deny",
        Action::Log => "Log",
        Action::Pass => "Pass",
    };
    m.insert("action".into(), json!(action));
    match &r.protocol {
        Some(Protocol::Name(n)) => {
            m.insert("protocol".into(), json!(n.to_ascii_uppercase()));
        }
        Some(Protocol::Number(n)) => {
            m.insert("protocol".into(), json!(n));
        }
        None => {}
    }
    let side = |nets: &[ipnet::IpNet], selector: &str, ports: &[Port]| {
        let mut e = Map::new();
        if !selector.is_empty() {
            e.insert("selector".into(), json!(selector));
        }
        if !nets.is_empty() {
            let nets: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
            e.insert("nets".into(), json!(nets));
        }
        if !ports.is_empty() {
            let ports: Vec<Value> = ports
                .iter()
                .map(|p| match p {
                    Port::Number(n) => json!(n),
                    Port::Range { first, last } => json!(format!("{first}:{last}")),
                    Port::Named(name) => json!(name),
                })
                .collect();
            e.insert("ports".into(), Value::Array(ports));
        }
        e
    };
    let src = side(&r.src_nets, &r.src_selector, &r.src_ports);
    if !src.is_empty() {
        m.insert("source".into(), Value::Object(src));
    }
    let dst = side(&r.dst_nets, &r.dst_selector, &r.dst_ports);
    if !dst.is_empty() {
        m.insert("destination".into(), Value::Object(dst));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{decode_documents, Format};

    fn sample() -> Vec<Value> {
        vec![
            resource(
                "GlobalNetworkPolicy",
                json!({"name": "p-1"}),
                json!({
                    "order": 10.0,
                    "selector": "has(calico/FizzBuzz)",
                    "types": ["Ingress", "Egress"],
                    "ingress": [{"action": "Allow", "protocol": "TCP",
                                 "source": {"selector": "a == 'b'"},
                                 "destination": {"ports": [80, 443]}}],
                    "egress": [{"action": "Allow"}],
                }),
            ),
            resource(
                "GlobalNetworkSet",
                json!({"name": "s", "labels": {"bench-set": "set-0"}}),
                json!({"nets": ["10.0.0.1/32", "10.0.0.3/32"]}),
            ),
            resource(
                "WorkloadEndpoint",
                json!({"name": workload_endpoint_name("node-1", "k8s", "pod-2", "eth0"),
                       "namespace": "ns", "labels": {"yes": "true", "x": "on"}}),
                json!({"orchestrator": "k8s", "node": "node-1", "pod": "pod-2",
                       "endpoint": "eth0", "interfaceName": "cali0001",
                       "ipNetworks": ["10.1.0.1/32"], "profiles": ["kns.ns"]}),
            ),
        ]
    }

    /// Every style decodes to the same resources, none of them invalid.
    #[test]
    fn every_style_decodes_to_the_same_resources() {
        let dir = tempfile::tempdir().unwrap();
        let mut decoded = Vec::new();
        for style in [Style::Yaml, Style::JsonDocs, Style::JsonList] {
            let mut w = FileWriter::new(style);
            for r in sample() {
                w.push(&r);
            }
            let (path, _) = w.finish(dir.path(), style.as_str()).unwrap();
            let text = fs::read_to_string(&path).unwrap();
            let format = if style == Style::JsonList {
                Format::Json
            } else {
                Format::Yaml
            };
            let docs = decode_documents(&text, &path.display().to_string(), format)
                .unwrap_or_else(|e| panic!("{style:?}: {e}\n{text}"));
            let shown: Vec<String> = docs.iter().map(|d| format!("{:?}", d.result)).collect();
            assert_eq!(shown.len(), 3, "{style:?}");
            assert!(
                shown.iter().all(|s| s.starts_with("Ok")),
                "{style:?}: {shown:?}"
            );
            decoded.push(shown);
        }
        assert_eq!(decoded[0], decoded[1]);
        assert_eq!(decoded[0], decoded[2]);
    }

    #[test]
    fn workload_endpoint_names_double_dashes() {
        assert_eq!(
            workload_endpoint_name("n-1", "k8s", "p-2", "eth0"),
            "n--1-k8s-p--2-eth0"
        );
    }
}
