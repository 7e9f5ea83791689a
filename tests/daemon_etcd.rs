//! `felix run --datastore etcdv3:URL` end to end: the example datastore
//! written to a throwaway etcd gives the same view as `felix calc` on the
//! files, and SIGTERM exits 0.  The daemon runs in a throwaway network
//! namespace (it programs that one, never the host's), etcd in another
//! (see `etcd_support::netns`).  Skipped, with a note, when the `etcd`
//! binary is not installed or namespaces cannot be created (a failure
//! under CI: see `felix_netns::require!`).

mod etcd_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_support::netns::{admin, calc_view, without_state, Topology, FELIX};
use serde_json::Value;

#[test]
fn daemon_on_etcd_serves_the_same_view_as_felix_calc_on_the_files() {
    felix_netns::require!(netns["etcd"]);
    let mut topo = Topology::create(1);
    let dir = tempfile::tempdir().unwrap();
    topo.start_etcd(&dir.path().join("etcd-data"));
    let ds = topo.apply_examples(Duration::from_secs(60));

    let socket = dir.path().join("admin.sock");
    let log = dir.path().join("felix.log");
    let child = topo.node_ns[0]
        .command(FELIX)
        .args(["run", "--node", "node1", "--datastore"])
        .arg(format!("etcdv3:{}", topo.etcd_url_for(0)))
        .arg("--admin-socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // children[0] is etcd; the guard kills the daemon too on failure.
    topo.children.push(child);
    let admin = |what: &str| admin(&socket, what);
    let start = felix_actors::clock::real_now();
    while admin("status").is_none_or(|s| s["inSync"] != Value::Bool(true)) {
        if let Ok(Some(st)) = topo.children[1].try_wait() {
            panic!(
                "daemon exited ({st}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never in sync:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let expected = calc_view(&ds, "node1");
    assert_eq!(
        without_state(admin("dataplane").unwrap()),
        without_state(expected)
    );

    let pid = topo.children[1].id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = felix_actors::clock::real_now();
    let st = loop {
        if let Some(st) = topo.children[1].try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(st.code(), Some(0));
}
