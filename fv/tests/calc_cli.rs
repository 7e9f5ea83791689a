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
