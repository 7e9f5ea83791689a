//! Throwaway network-namespace topology for daemon tests on etcd: etcd in
//! its own namespace `E`, each daemon in a namespace `N<i>` that it may
//! program, linked to `E` by a veth pair on a private /30 (node `i`
//! reaches etcd at `10.254.<i+1>.1`).  Nothing touches the host's network
//! namespace.  The namespaces are `felix_netns` guards named
//! `etcd-s2-<pid>-<seq>-...`; the topology kills its processes and then
//! the guards delete the namespaces (and so the veths) on every exit path.
//! Tests pass `felix_netns::require!(netns ["etcd"])` first.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use felix_netns::Netns;
use serde_json::Value;

pub const FELIX: &str = env!("CARGO_BIN_EXE_felix");
pub const ETCD_PORT: u16 = 2379;
const PREFIX: &str = "etcd-s2-";

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Network namespaces and the processes running in them; cleaned up on
/// drop (processes first, then the namespace guards).
pub struct Topology {
    pub children: Vec<Child>,
    pub etcd_ns: Netns,
    pub node_ns: Vec<Netns>,
}

fn ip(args: &[&str]) {
    if let Err(e) = felix_netns::run("ip", args) {
        panic!("{e}");
    }
}

impl Topology {
    /// Builds `E` plus one namespace per node; node `i` (0-based) reaches
    /// etcd at `10.254.<i+1>.1`.  Panics if a namespace cannot be made.
    pub fn create(nodes: usize) -> Topology {
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let ns = |what: &str| {
            Netns::create_owned(PREFIX, &format!("{seq}-{what}")).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut topo = Topology {
            children: Vec::new(),
            etcd_ns: ns("e"),
            node_ns: Vec::new(),
        };
        let id = format!("{}{seq}", std::process::id());
        for i in 1..=nodes {
            let n = ns(&format!("n{i}"));
            let (e_ns, n_ns) = (topo.etcd_ns.name(), n.name());
            // Veth names: at most 15 characters.
            let (a, b) = (format!("es2{id}e{i}"), format!("es2{id}n{i}"));
            ip(&[
                "link", "add", &a, "netns", e_ns, "type", "veth", "peer", "name", &b, "netns", n_ns,
            ]);
            let (ea, na) = (format!("10.254.{i}.1/30"), format!("10.254.{i}.2/30"));
            ip(&["-n", e_ns, "addr", "add", &ea, "dev", &a]);
            ip(&["-n", e_ns, "link", "set", &a, "up"]);
            ip(&["-n", n_ns, "addr", "add", &na, "dev", &b]);
            ip(&["-n", n_ns, "link", "set", &b, "up"]);
            topo.node_ns.push(n);
        }
        topo
    }

    /// The etcd URL as seen from node `i` (0-based).
    pub fn etcd_url_for(&self, i: usize) -> String {
        format!("http://10.254.{}.1:{ETCD_PORT}", i + 1)
    }

    pub fn start_etcd(&mut self, data: &Path) {
        let mut listen = vec![format!("http://127.0.0.1:{ETCD_PORT}")];
        listen.extend((0..self.node_ns.len()).map(|i| self.etcd_url_for(i)));
        let listen = listen.join(",");
        let peer = "http://127.0.0.1:2380";
        let child = self
            .etcd_ns
            .command("etcd")
            .args(["--name", "felix-test", "--data-dir"])
            .arg(data)
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &listen])
            .args(["--listen-peer-urls", peer])
            .args(["--initial-advertise-peer-urls", peer])
            .args(["--initial-cluster", &format!("felix-test={peer}")])
            .args(["--log-level", "error", "--logger", "zap"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// Loads the bundled `examples/datastore` into etcd with `felix
    /// datastore apply`, retrying until etcd answers (panics after
    /// `deadline`); returns the directory's path.
    pub fn apply_examples(&self, deadline: Duration) -> PathBuf {
        let ds = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/datastore");
        let start = felix_actors::clock::real_now();
        loop {
            let out = self.datastore(&["apply", "-f", ds.to_str().unwrap()]);
            if out.status.success() {
                return ds;
            }
            assert!(
                start.elapsed() < deadline,
                "felix datastore apply never succeeded: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `felix datastore ARGS` inside the etcd namespace.
    pub fn datastore(&self, args: &[&str]) -> Output {
        self.etcd_ns
            .command(FELIX)
            .arg("datastore")
            .args(["--endpoints", &format!("http://127.0.0.1:{ETCD_PORT}")])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The fields drop next: the guards delete the namespaces.
    }
}

/// A `/dataplane` or `felix calc` view without its `state` field (which
/// differs between a daemon and a one-shot calculation).
pub fn without_state(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("state");
    }
    v
}

/// `felix admin --socket SOCKET WHAT` as JSON, if the daemon answered.
pub fn admin(socket: &Path, what: &str) -> Option<Value> {
    let out = Command::new(FELIX)
        .arg("admin")
        .arg("--socket")
        .arg(socket)
        .arg(what)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// `felix calc --node NODE DS`: the view a daemon for NODE must serve.
pub fn calc_view(ds: &Path, node: &str) -> Value {
    let out = Command::new(FELIX)
        .args(["calc", "--node", node])
        .arg(ds)
        .output()
        .unwrap();
    assert!(out.status.success(), "felix calc --node {node} failed");
    serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap()
}
