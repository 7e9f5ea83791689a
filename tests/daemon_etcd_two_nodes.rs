//! Two `felix run` daemons for two different nodes sharing one etcd, each
//! computing its own node's view (checked through each admin socket's
//! `/dataplane` against `felix calc --node N` on the same files).
//!
//! Nothing touches the host's network namespace: etcd runs in a throwaway
//! namespace `E`, each daemon in its own namespace (`N1`, `N2`) that it
//! programs, linked to `E` by a veth pair on a private /30.  Namespace and
//! interface names carry the branch tag and the test's pid; a guard kills
//! the processes and deletes the namespaces (and so the veths) on every
//! exit path.  Skipped, with a note, when `ip` or `etcd` is missing or
//! namespaces cannot be created (not root).

mod etcd_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_support::netns::{admin, calc_view, without_state, Topology, FELIX};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);

/// The workload ids of the local endpoints in a `/dataplane` view.
fn local_workloads(view: &Value) -> Vec<String> {
    let mut ids: Vec<String> = view["workloadEndpoints"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w["id"]["workloadId"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

#[test]
fn two_daemons_on_one_etcd_each_compute_their_own_node() {
    felix_netns::require!(netns["etcd"]);
    let mut topo = Topology::create(2);
    let dir = tempfile::tempdir().unwrap();
    topo.start_etcd(&dir.path().join("etcd-data"));

    let ds = topo.apply_examples(DEADLINE);

    let mut daemons: Vec<(String, PathBuf, PathBuf)> = Vec::new();
    for (i, node) in ["node1", "node2"].into_iter().enumerate() {
        let socket = dir.path().join(format!("{node}.sock"));
        let log = dir.path().join(format!("{node}.log"));
        let child = topo.node_ns[i]
            .command(FELIX)
            .args(["run", "--node", node, "--datastore"])
            .arg(format!("etcdv3:{}", topo.etcd_url_for(i)))
            .arg("--admin-socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        topo.children.push(child);
        daemons.push((node.to_owned(), socket, log));
    }

    let mut views = Vec::new();
    for (i, (node, socket, log)) in daemons.iter().enumerate() {
        let start = felix_actors::clock::real_now();
        while admin(socket, "status").is_none_or(|s| s["inSync"] != Value::Bool(true)) {
            // children[0] is etcd; daemon i is children[i + 1].
            if let Ok(Some(st)) = topo.children[i + 1].try_wait() {
                panic!(
                    "{node} daemon exited ({st}):\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{node} never in sync:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = without_state(admin(socket, "dataplane").expect("dataplane view"));
        let want = without_state(calc_view(&ds, node));
        assert_eq!(got, want, "{node}: daemon view differs from felix calc");
        views.push(got);
    }
    // Each daemon programs only its own node's endpoints.
    assert_eq!(
        local_workloads(&views[0]),
        [
            "monitoring/prometheus-0",
            "shop/backend-1",
            "shop/db-0",
            "shop/frontend-1"
        ]
    );
    assert_eq!(
        local_workloads(&views[1]),
        ["shop/backend-2", "shop/frontend-2"]
    );

    // Both daemons stop cleanly on SIGTERM.
    for i in 1..=2 {
        let pid = topo.children[i].id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
    }
    for i in 1..=2 {
        let start = felix_actors::clock::real_now();
        let st = loop {
            if let Some(st) = topo.children[i].try_wait().unwrap() {
                break st;
            }
            assert!(start.elapsed() < DEADLINE, "daemon {i} did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(st.code(), Some(0), "daemon {i} exit status");
    }
}
