//! `felix datastore apply` / `get` against a real etcd, and the round trip
//! into the etcd syncer.

mod etcd_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;

use etcd_support::*;
use felix::datastore::etcd::testing::EtcdTestServer;
use felix::datastore::etcd::{EtcdConfig, EtcdSyncer, EtcdSyncerConfig};
use felix::datastore::load_state;
use felix::model::{Key, Value};

fn felix(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_felix"))
        .args(args)
        .env_remove("ETCD_ENDPOINTS")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `felix datastore --endpoints <url> apply -f <dir>`.
fn apply(url: &str, dir: &Path) -> (i32, String, String) {
    felix(&[
        "datastore",
        "--endpoints",
        url,
        "apply",
        "-f",
        dir.to_str().unwrap(),
    ])
}

/// A fresh etcd, a directory filled by `write_resources` and the etcd's URL.
fn etcd_with_resources() -> (EtcdTestServer, tempfile::TempDir, String) {
    let etcd = EtcdTestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_resources(dir.path());
    let url = etcd.url();
    (etcd, dir, url)
}

/// A directory with one resource of every kind of INTERFACES.md §2.
fn write_resources(dir: &Path) {
    std::fs::create_dir_all(dir.join("policy")).unwrap();
    std::fs::write(
        dir.join("policy/policies.yaml"),
        r#"apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: 100
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: security.deny-bad
spec:
  tier: security
  order: 10
  selector: all()
  types: [Ingress]
  ingress:
  - action: Deny
    source:
      nets: [192.0.2.0/24]
  - action: Pass
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: allow-web
  namespace: web
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
    destination:
      ports: [80, 443]
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("endpoints.yaml"),
        r#"apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node1-k8s-web--1-eth0
  namespace: web
  labels:
    app: web
spec:
  orchestrator: k8s
  node: node1
  pod: web-1
  endpoint: eth0
  interfaceName: cali12345678
  ipNetworks: [10.65.0.5/32]
  profiles: [kns.web]
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels:
    role: host
spec:
  node: node1
  interfaceName: eth0
  expectedIPs: [192.168.1.10]
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata:
  name: default-allow
spec:
  ingress:
  - action: Allow
  egress:
  - action: Allow
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("cluster.json"),
        r#"[
{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkSet","metadata":{"name":"bad-nets","labels":{"k":"v"}},"spec":{"nets":["198.51.100.0/24"]}},
{"apiVersion":"projectcalico.org/v3","kind":"NetworkSet","metadata":{"name":"partners","namespace":"web"},"spec":{"nets":["203.0.113.0/24"]}},
{"apiVersion":"projectcalico.org/v3","kind":"IPPool","metadata":{"name":"pool1"},"spec":{"cidr":"10.65.0.0/16","ipipMode":"Never","vxlanMode":"Always","natOutgoing":true}},
{"apiVersion":"projectcalico.org/v3","kind":"Node","metadata":{"name":"node1"},"spec":{"bgp":{"ipv4Address":"192.168.1.10/24"}}},
{"apiVersion":"projectcalico.org/v3","kind":"FelixConfiguration","metadata":{"name":"default"},"spec":{"logSeverityScreen":"Info"}},
{"apiVersion":"projectcalico.org/v3","kind":"ClusterInformation","metadata":{"name":"default"},"spec":{"datastoreReady":true}},
{"apiVersion":"projectcalico.org/v3","kind":"IPAMBlock","metadata":{"name":"10-65-0-0-26"},"spec":{"cidr":"10.65.0.0/26","affinity":"host:node1"}},
{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"web","labels":{"team":"frontend"}}},
{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"builder","namespace":"web","labels":{"ci":"yes"}}}
]
"#,
    )
    .unwrap();
}

/// The model state the etcd syncer produces for `url`.
fn synced_state(url: &str) -> BTreeMap<Key, Value> {
    let (tx, rx) = mpsc::sync_channel(16);
    let syncer = EtcdSyncer::start(
        EtcdSyncerConfig::new(EtcdConfig::with_endpoints(url).unwrap()),
        tx,
    )
    .unwrap();
    let mut consumer = Consumer::new(rx);
    consumer.wait_in_sync();
    syncer.stop();
    consumer.state
}

#[test]
fn apply_then_sync_gives_the_same_state_as_the_file_datastore() {
    let (etcd, dir, url) = etcd_with_resources();
    let (code, out, err) = apply(&url, dir.path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("15 created"), "{out}");

    let expected = load_state(dir.path()).unwrap();
    assert!(expected.errors.is_empty(), "{:?}", expected.errors);
    assert_eq!(synced_state(&url), expected.values);

    // Re-applying changes nothing.
    let (code, out, _) = apply(&url, dir.path());
    assert_eq!(code, 0);
    assert!(out.contains("15 unchanged"), "{out}");

    // The stored keys and values are calicoctl's.
    let c = etcd.client();
    let gnp = c
        .get(b"/calico/resources/v3/projectcalico.org/globalnetworkpolicies/security.deny-bad")
        .unwrap()
        .expect("policy key");
    let v: serde_json::Value = serde_json::from_slice(&gnp.value).unwrap();
    assert_eq!(v["kind"], "GlobalNetworkPolicy");
    assert_eq!(v["apiVersion"], "projectcalico.org/v3");
    assert_eq!(v["metadata"]["name"], "security.deny-bad");
    assert_eq!(v["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert!(v["metadata"]["creationTimestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    assert_eq!(
        v["metadata"]["annotations"]["projectcalico.org/metadata"],
        r#"{"name":"security.deny-bad"}"#
    );
    assert_eq!(v["spec"]["tier"], "security");
    for key in [
        "/calico/resources/v3/projectcalico.org/networkpolicies/web/allow-web",
        "/calico/resources/v3/projectcalico.org/workloadendpoints/web/node1-k8s-web--1-eth0",
        "/calico/resources/v3/projectcalico.org/hostendpoints/node1-eth0",
        "/calico/resources/v3/projectcalico.org/tiers/security",
        "/calico/resources/v3/projectcalico.org/profiles/default-allow",
        "/calico/resources/v3/projectcalico.org/globalnetworksets/bad-nets",
        "/calico/resources/v3/projectcalico.org/networksets/web/partners",
        "/calico/resources/v3/projectcalico.org/ippools/pool1",
        "/calico/resources/v3/projectcalico.org/nodes/node1",
        "/calico/resources/v3/projectcalico.org/felixconfigurations/default",
        "/calico/resources/v3/projectcalico.org/clusterinformations/default",
        "/calico/ipam/v2/assignment/ipv4/block/10.65.0.0-26",
        "/calico/resources/v3/kubernetes/namespaces/web",
        "/calico/resources/v3/kubernetes/serviceaccounts/web/builder",
    ] {
        assert!(c.get(key.as_bytes()).unwrap().is_some(), "{key} missing");
    }
}

#[test]
fn get_output_round_trips_through_the_decoder() {
    let (_etcd, dir, url) = etcd_with_resources();
    let (code, _, err) = apply(&url, dir.path());
    assert_eq!(code, 0, "{err}");

    let out_dir = tempfile::tempdir().unwrap();
    let kinds = [
        "tiers",
        "gnp",
        "networkpolicies",
        "wep",
        "hostendpoints",
        "profiles",
        "globalnetworksets",
        "networksets",
        "ippools",
        "nodes",
        "felixconfigurations",
        "clusterinformations",
        "ipamblocks",
        "namespaces",
        "serviceaccounts",
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let (fmt, ext) = if i % 2 == 0 {
            ("yaml", "yaml")
        } else {
            ("json", "json")
        };
        // Both ways of naming the datastore: `--datastore etcdv3:URLS` as
        // `felix run` takes it, and its alias `--endpoints`.
        let spec = format!("etcdv3:{url}");
        let (flag, value) = if i % 3 == 0 {
            ("--datastore", spec.as_str())
        } else {
            ("--endpoints", url.as_str())
        };
        let (code, out, err) = felix(&["datastore", flag, value, "get", kind, "-o", fmt]);
        assert_eq!(code, 0, "{kind}: {err}");
        assert!(out.contains("List"), "{kind}: {out}");
        std::fs::write(out_dir.path().join(format!("{kind}.{ext}")), out).unwrap();
    }
    let original = load_state(dir.path()).unwrap();
    let listed = load_state(out_dir.path()).unwrap();
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    assert_eq!(listed.values, original.values);

    // Namespace filter.
    let (_, out, _) = felix(&[
        "datastore",
        "--endpoints",
        &url,
        "get",
        "networksets",
        "-n",
        "other",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"].as_array().map(Vec::len), Some(0));
}

#[test]
fn exit_codes() {
    let etcd = EtcdTestServer::start().unwrap();
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: fine\nspec: {}\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: broken\nspec:\n  nets: [10.0.0.0/33]\n",
    )
    .unwrap();
    // Invalid input: exit 2, file/line/field named, nothing written.
    let (code, _, err) = apply(&url, dir.path());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.yaml:7") && err.contains("nets"), "{err}");
    assert!(etcd
        .client()
        .get_prefix(b"/calico/", 100)
        .unwrap()
        .1
        .is_empty());

    // Unparseable file: exit 2.
    std::fs::write(dir.path().join("bad.yaml"), "kind: [\n").unwrap();
    let (code, _, _) = apply(&url, dir.path());
    assert_eq!(code, 2);

    // Bad usage: unknown kind, bad URL, missing -f.
    assert_eq!(
        felix(&["datastore", "--endpoints", &url, "get", "frobs"]).0,
        2
    );
    assert_eq!(
        felix(&["datastore", "--endpoints", "ftp://x", "get", "tiers"]).0,
        2
    );
    assert_eq!(felix(&["datastore", "apply"]).0, 2);
    let (code, _, err) = felix(&["datastore", "--datastore", "file:/tmp/x", "get", "tiers"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("writes to etcd"), "{err}");
    let (code, _, err) = felix(&["datastore", "--datastore", "zookeeper:x", "get", "tiers"]);
    assert_eq!(code, 2, "{err}");

    // etcd unreachable: exit 1.
    let mut stopped = EtcdTestServer::start().unwrap();
    let dead = stopped.url();
    stopped.stop();
    let (code, _, err) = felix(&["datastore", "--endpoints", &dead, "get", "tiers"]);
    assert_eq!(code, 1, "{err}");

    // Help is complete.
    let (code, out, _) = felix(&["datastore", "--help"]);
    assert_eq!(code, 0);
    for word in ["apply", "get", "--endpoints", "--datastore"] {
        assert!(out.contains(word), "{out}");
    }
    let (_, out, _) = felix(&["datastore", "get", "--help"]);
    assert!(
        out.contains("--output") && out.contains("--namespace"),
        "{out}"
    );
}
