//! Decoding throughput of typical WorkloadEndpoint resources.
//!
//! Run with `cargo run --release --example decode_bench`; prints
//! resources per second for YAML and JSON input on one core.

use felix::resources::{decode_documents, Format};

const WEP_YAML: &str = "apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node1-k8s-frontend--NUM-eth0
  namespace: shop
  labels: {app: frontend, version: v2}
spec:
  node: node1
  orchestrator: k8s
  pod: frontend-NUM
  endpoint: eth0
  serviceAccountName: frontend
  interfaceName: calif1a2b3c4d5e
  mac: ee:ee:ee:ee:ee:ee
  ipNetworks: [10.65.0.2/32]
  profiles: [kns.shop, ksa.shop.frontend]
  ports:
  - {name: http, protocol: TCP, port: 80}
";

fn run(label: &str, text: &str, format: Format, count: usize) {
    let start = felix_actors::clock::real_now();
    let docs = match decode_documents(text, "bench", format) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{label}: decode failed: {e}");
            return;
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let ok = docs.iter().filter(|d| d.result.is_ok()).count();
    println!(
        "{label}: {count} endpoints ({ok} valid) in {:.3}s = {:.0} resources/s ({:.1} MB/s)",
        secs,
        count as f64 / secs,
        text.len() as f64 / secs / 1e6
    );
}

fn main() {
    let count = 50_000;
    let mut yaml = String::new();
    let mut json = String::from("[");
    for i in 0..count {
        let doc = WEP_YAML.replace("NUM", &i.to_string());
        if i > 0 {
            json.push(',');
        }
        let value: serde_json::Value = match serde_yaml_ng::from_str(&doc) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("bad template: {e}");
                return;
            }
        };
        json.push_str(&value.to_string());
        yaml.push_str("---\n");
        yaml.push_str(&doc);
    }
    json.push(']');
    run("yaml", &yaml, Format::Yaml, count);
    run("json (array)", &json, Format::Json, count);
    // Single-object JSON files, the common file-datastore layout.
    let one: serde_json::Value = serde_yaml_ng::from_str(WEP_YAML).unwrap_or_default();
    let one = one.to_string();
    let start = felix_actors::clock::real_now();
    for _ in 0..count {
        let _ = decode_documents(&one, "bench", Format::Json);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "json (one object per file): {:.0} resources/s",
        count as f64 / secs
    );
}
