//! Decode throughput of the same resources written in different styles
//! (ignored: a measurement, not a check).  Run with
//! `cargo test --release -p felix --lib resources::tests::throughput -- --ignored --nocapture`
//! (or without `--release` for debug-profile relative figures).
//! `FELIX_DECODE_BENCH_N` sets the number of endpoints (20,000),
//! `FELIX_DECODE_BENCH_ONLY` a substring of the styles to run.

use serde_json::{json, Value};

use super::super::{decode_documents, Format};

/// `n` workload endpoints and one policy per 50 of them, as JSON values.
fn workload(n: usize) -> Vec<Value> {
    let mut docs = Vec::with_capacity(n + n / 50);
    for i in 0..n {
        let ns = format!("ns-{}", i % 50);
        docs.push(json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "WorkloadEndpoint",
            "metadata": {
                "name": format!("node1-k8s-pod--{i}-eth0"),
                "namespace": ns,
                "labels": {
                    "app": format!("app-{}", i % 100),
                    "projectcalico.org/namespace": ns,
                    "projectcalico.org/orchestrator": "k8s",
                    "projectcalico.org/serviceaccount": "default",
                },
            },
            "spec": {
                "node": "node1",
                "orchestrator": "k8s",
                "pod": format!("pod-{i}"),
                "endpoint": "eth0",
                "interfaceName": format!("cali{i:011x}"),
                "mac": format!("ee:ee:ee:{:02x}:{:02x}:{:02x}", i >> 16 & 255, i >> 8 & 255, i & 255),
                "ipNetworks": [format!("10.{}.{}.{}/32", i >> 16 & 255, i >> 8 & 255, i & 255)],
                "profiles": [format!("kns.{ns}"), format!("ksa.{ns}.default")],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            },
        }));
        if i % 50 == 0 {
            docs.push(json!({
                "apiVersion": "projectcalico.org/v3",
                "kind": "GlobalNetworkPolicy",
                "metadata": {"name": format!("gnp-{i}")},
                "spec": {
                    "order": 100,
                    "selector": format!("app == 'app-{}'", i % 100),
                    "types": ["Ingress", "Egress"],
                    "ingress": [{
                        "action": "Allow",
                        "protocol": "TCP",
                        "source": {"selector": "role == 'frontend'"},
                        "destination": {"ports": [80, 443]},
                    }],
                    "egress": [{"action": "Allow"}],
                },
            }));
        }
    }
    docs
}

/// The styles measured: (name, file format, text).
fn renderings(docs: &[Value]) -> Vec<(&'static str, Format, String)> {
    let mut block = String::new();
    let mut pretty = String::new();
    let mut compact = String::new();
    for d in docs {
        block.push_str("---\n");
        block.push_str(&serde_yaml_ng::to_string(d).unwrap());
        pretty.push_str("---\n");
        pretty.push_str(&serde_json::to_string_pretty(d).unwrap());
        pretty.push('\n');
        compact.push_str("---\n");
        compact.push_str(&serde_json::to_string(d).unwrap());
        compact.push('\n');
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let list_text = serde_json::to_string_pretty(&list).unwrap();
    // A comment holding U+2028 (a line break to libyaml, harmless there) in
    // every document makes the fast reader decline them all: the figures
    // every YAML document got before the fast reader read it.
    let slow = |s: &str| s.replace("---\n", "---\n# \u{2028}\n");
    vec![
        ("block YAML docs", Format::Yaml, block.clone()),
        ("  (forced slow path)", Format::Yaml, slow(&block)),
        ("pretty-JSON YAML docs", Format::Yaml, pretty.clone()),
        ("  (forced slow path)", Format::Yaml, slow(&pretty)),
        ("compact-JSON YAML docs", Format::Yaml, compact.clone()),
        ("  (forced slow path)", Format::Yaml, slow(&compact)),
        ("YAML file, one JSON List", Format::Yaml, list_text.clone()),
        (".json List", Format::Json, list_text),
        (
            ".json array",
            Format::Json,
            serde_json::to_string_pretty(docs).unwrap(),
        ),
    ]
}

#[test]
#[ignore]
fn throughput() {
    let n: usize = std::env::var("FELIX_DECODE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    // A substring of the styles' names, to time (or profile) only those.
    let only = std::env::var("FELIX_DECODE_BENCH_ONLY").unwrap_or_default();
    let docs = workload(n);
    for (name, format, text) in renderings(&docs) {
        if !name.contains(only.as_str()) {
            continue;
        }
        let origin = match format {
            Format::Yaml => "bench.yaml",
            Format::Json => "bench.json",
        };
        let mut best = f64::INFINITY;
        let mut count = 0;
        for _ in 0..3 {
            let start = felix_actors::clock::real_now();
            let decoded = decode_documents(&text, origin, format).unwrap();
            best = best.min(start.elapsed().as_secs_f64());
            count = decoded.len();
            assert!(decoded.iter().all(|d| d.result.is_ok()));
        }
        let mb = text.len() as f64 / 1e6;
        println!(
            "{name:<26} {mb:7.1} MB {count:7} resources {best:7.3} s {:8.1} MB/s",
            mb / best
        );
    }
}
