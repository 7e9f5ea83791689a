//! End-to-end test of the `felix calc` binary on a tiny state directory.
//!
//! The binary belongs to the root package, so Cargo does not build it
//! for this crate's tests.  The test looks for it in `$FELIX_BIN`, then
//! next to this test executable (`target/<profile>/felix`); when it is not
//! there it says so on stderr and passes without checking anything (build
//! it first with `cargo build --bin felix`).

use std::path::PathBuf;
use std::process::Command;

use felix::calc::view::DataplaneView;
use felix_proto as pb;

fn felix_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FELIX_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join("felix");
    bin.is_file().then_some(bin)
}

const STATE0: &str = r#"
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node1-k8s-a-eth0
  namespace: default
  labels: {app: a}
spec:
  node: node1
  orchestrator: k8s
  pod: a
  endpoint: eth0
  interfaceName: calia
  ipNetworks: [10.0.0.1/32]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: p
spec:
  selector: app == 'a'
  ingress:
  - action: Allow
    source: {selector: app == 'a'}
"#;

fn state_dirs() -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("felix-fv-calc-cli-{}", std::process::id()));
    let s0 = root.join("s0");
    let s1 = root.join("s1");
    std::fs::create_dir_all(&s0).unwrap();
    std::fs::create_dir_all(&s1).unwrap();
    std::fs::write(s0.join("all.yaml"), STATE0).unwrap();
    (s0, s1)
}

#[test]
fn felix_calc_binary_view_and_stream() {
    let bin = felix_bin();
    felix_netns::require!(cond felix_netns::ensure(
        bin.is_some(),
        "the felix binary (cargo build --bin felix)"
    ));
    let bin = bin.expect("checked by the gate");
    let (s0, s1) = state_dirs();

    let out = Command::new(&bin)
        .args(["calc", "--node", "node1"])
        .arg(&s0)
        .arg(&s1)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["state"], 0);
    assert_eq!(lines[0]["inSync"], true);
    assert_eq!(lines[0]["policies"][0]["id"]["name"], "p");
    let sets = lines[0]["ipSets"].as_object().unwrap();
    assert_eq!(sets.len(), 1);
    let members = &sets.values().next().unwrap()["members"];
    assert_eq!(members, &serde_json::json!(["10.0.0.1/32"]));
    assert_eq!(lines[1]["policies"], serde_json::json!([]));
    assert_eq!(lines[1]["workloadEndpoints"], serde_json::json!([]));
    assert_eq!(lines[1]["ipSets"], serde_json::json!({}));

    // --stream: every message re-applied to a contract-checking view.
    let out = Command::new(&bin)
        .args(["calc", "--node", "node1", "--stream"])
        .arg(&s0)
        .arg(&s1)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut view = DataplaneView::new();
    let mut ends = Vec::new();
    let mut seq = 0;
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if let Some(n) = v.get("endOfState") {
            ends.push(n.as_u64().unwrap());
            continue;
        }
        let msg: pb::ToDataplane = serde_json::from_value(v).unwrap();
        seq += 1;
        assert_eq!(msg.sequence_number, seq);
        view.apply(msg.payload.as_ref().unwrap()).unwrap();
    }
    assert_eq!(ends, [0, 1]);
    assert!(view.in_sync);
    assert!(
        view.policies.is_empty() && view.ip_sets.is_empty() && view.workload_endpoints.is_empty()
    );
    let _ = std::fs::remove_dir_all(s0.parent().unwrap());
}

const EXPLAIN_STATE: &str = r#"
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: open}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node1-k8s-a-eth0, namespace: shop, labels: {app: a}}
spec: {node: node1, orchestrator: k8s, pod: a, endpoint: eth0, interfaceName: calia,
       ipNetworks: [10.0.0.1/32], profiles: [open]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node1-k8s-b-eth0, namespace: shop, labels: {app: b}}
spec: {node: node1, orchestrator: k8s, pod: b, endpoint: eth0, interfaceName: calib,
       ipNetworks: [10.0.0.2/32], profiles: [open]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: b-web, namespace: shop}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - action: Deny
    protocol: UDP
  - action: Allow
    protocol: TCP
    source: {selector: app == 'a'}
    destination: {ports: [80]}
"#;

#[test]
fn felix_explain_offline_names_the_deciding_rule_and_refuses_foreign_flows() {
    let bin = felix_bin();
    felix_netns::require!(cond felix_netns::ensure(
        bin.is_some(),
        "the felix binary (cargo build --bin felix)"
    ));
    let bin = bin.expect("checked by the gate");
    let dir = std::env::temp_dir().join(format!("felix-fv-explain-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.yaml");
    std::fs::write(&state, EXPLAIN_STATE).unwrap();
    let explain = |flow: &[&str]| {
        let out = Command::new(&bin)
            .args(["explain", "--node", "node1"])
            .arg(&state)
            .args(flow)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        (out.status.code(), stdout, stderr)
    };
    let json = |s: &str| -> serde_json::Value { serde_json::from_str(s).unwrap() };

    let (code, out, err) = explain(&["--src", "10.0.0.1", "--dst", "10.0.0.2", "--dst-port", "80"]);
    assert_eq!(code, Some(0), "{err}");
    let v = json(&out);
    assert_eq!(v["verdict"], "allow");
    assert_eq!(
        v["ingress"]["decidedBy"],
        serde_json::json!({"kind": "rule", "tier": "default", "policy": "shop/b-web", "rule": 1, "action": "Allow"})
    );
    assert_eq!(v["ingress"]["endpoint"]["workloadId"], "shop/b");
    assert_eq!(v["egress"]["decidedBy"]["profile"], "open");
    assert_eq!(
        v["ingress"]["trace"],
        serde_json::json!([
            {"tier": "default", "policy": "shop/b-web", "rule": 0, "matched": false},
            {"tier": "default", "policy": "shop/b-web", "rule": 1, "matched": true},
        ])
    );

    let (code, out, err) = explain(&[
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2",
        "--protocol",
        "udp",
        "--dst-port",
        "53",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v = json(&out);
    assert_eq!(v["verdict"], "deny");
    assert_eq!(v["ingress"]["decidedBy"]["rule"], 0);
    assert_eq!(v["ingress"]["decidedBy"]["action"], "Deny");

    let (code, out, err) = explain(&["--src", "10.0.0.1", "--dst", "10.0.0.2", "--dst-port", "81"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        json(&out)["ingress"]["decidedBy"],
        serde_json::json!({"kind": "tierDefault", "tier": "default", "action": "Deny"})
    );

    let (code, _, err) = explain(&["--src", "192.0.2.1", "--dst", "192.0.2.2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("neither 192.0.2.1 nor 192.0.2.2"), "{err}");
    let (code, _, err) = explain(&["--src", "10.0.0.1", "--dst", "fd00::2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("different IP versions"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn felix_calc_reports_each_invalid_resource_and_strict_exits_2() {
    let bin = felix_bin();
    felix_netns::require!(cond felix_netns::ensure(
        bin.is_some(),
        "the felix binary (cargo build --bin felix)"
    ));
    let bin = bin.expect("checked by the gate");
    let dir = std::env::temp_dir().join(format!("felix-fv-calc-strict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\n\
               metadata: {name: bad}\nspec: {selector: all(), order: x}\n";
    std::fs::write(dir.join("a.yaml"), format!("{STATE0}---\n{bad}")).unwrap();
    let run = |strict: bool| {
        let mut c = Command::new(&bin);
        c.args(["calc", "--node", "node1"]);
        if strict {
            c.arg("--strict");
        }
        c.arg(&dir).output().unwrap()
    };
    let out = run(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("a.yaml:")
            && err.contains("GlobalNetworkPolicy(bad)")
            && err.contains("spec.order"),
        "file, line, resource and field named: {err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["policies"][0]["id"]["name"], "p",
        "the valid policy is kept"
    );
    let out = run(true);
    assert_eq!(out.status.code(), Some(2));
    assert!(!out.stdout.is_empty(), "--strict still prints the view");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn istio_ambient_mode_builds_the_istio_calculator_in_felix_calc() {
    let bin = felix_bin();
    felix_netns::require!(cond felix_netns::ensure(
        bin.is_some(),
        "the felix binary (cargo build --bin felix)"
    ));
    let bin = bin.expect("checked by the gate");
    let dir = std::env::temp_dir().join(format!("felix-fv-calc-istio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wep = "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\n\
               metadata: {name: node1-k8s-a-eth0, namespace: mesh, \
               labels: {istio.io/dataplane-mode: ambient}}\n\
               spec: {node: node1, orchestrator: k8s, pod: a, endpoint: eth0, \
               interfaceName: calia, ipNetworks: [10.0.0.1/32]}\n";
    let fc = "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\n\
              metadata: {name: default}\nspec: {istioAmbientMode: Enabled}\n";
    let calc = |files: &[(&str, &str)], env: &[(&str, &str)]| -> serde_json::Value {
        let d = dir.join(format!("s{}", files.len() * 10 + env.len()));
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in files {
            std::fs::write(d.join(name), text).unwrap();
        }
        let out = Command::new(&bin)
            .args(["calc", "--node", "node1"])
            .arg(&d)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let ambient = |v: &serde_json::Value| {
        (
            v["ipSets"].get("all-istio-weps").is_some(),
            v["workloadEndpoints"][0]["endpoint"]["isIstioAmbient"] == true,
        )
    };
    assert_eq!(
        ambient(&calc(&[("wep.yaml", wep)], &[])),
        (false, false),
        "off by default"
    );
    assert_eq!(
        ambient(&calc(&[("wep.yaml", wep), ("fc.yaml", fc)], &[])),
        (true, true),
        "from the datastore's FelixConfiguration"
    );
    assert_eq!(
        ambient(&calc(
            &[("wep.yaml", wep)],
            &[("FELIX_ISTIOAMBIENTMODE", "Enabled")]
        )),
        (true, true),
        "from the environment"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
