//! `felix run --datastore etcdv3:URL` end to end: the example datastore
//! written to a throwaway etcd (skipped, with a note, when the `etcd`
//! binary is not installed) gives the same view as `felix calc` on the
//! files, and SIGTERM exits 0.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use felix::datastore::etcd::apply;
use felix::datastore::etcd::testing::{EtcdTestServer, TestServerError};
use serde_json::Value;

const FELIX: &str = env!("CARGO_BIN_EXE_felix");

fn without_state(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("state");
    }
    v
}

#[test]
fn daemon_on_etcd_serves_the_same_view_as_felix_calc_on_the_files() {
    let server = match EtcdTestServer::start() {
        Ok(s) => s,
        Err(TestServerError::NotInstalled(e)) => {
            eprintln!("skipping: etcd not installed ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let ds = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/datastore");
    let resources = apply::load(&ds).unwrap();
    apply::apply(&server.client(), &resources).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    let log = dir.path().join("felix.log");
    let mut child = Command::new(FELIX)
        .args(["run", "--node", "node1", "--datastore"])
        .arg(format!("etcdv3:{}", server.url()))
        .arg("--admin-socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let admin = |what: &str| -> Option<Value> {
        let out = Command::new(FELIX)
            .arg("admin")
            .arg("--socket")
            .arg(&socket)
            .arg(what)
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    };
    let start = Instant::now();
    while admin("status").is_none_or(|s| s["inSync"] != Value::Bool(true)) {
        if let Ok(Some(st)) = child.try_wait() {
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
    let calc = Command::new(FELIX)
        .args(["calc", "--node", "node1"])
        .arg(&ds)
        .output()
        .unwrap();
    assert!(calc.status.success());
    let expected: Value =
        serde_json::from_str(String::from_utf8(calc.stdout).unwrap().trim()).unwrap();
    assert_eq!(
        without_state(admin("dataplane").unwrap()),
        without_state(expected)
    );

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(st.code(), Some(0));
}
