//! Per-endpoint status files, where upstream's status file reporter writes them: under
//! `EndpointStatusPathPrefix`/`endpoint-status`, one file per workload endpoint whose driver
//! reported it `up`, named `<orchestrator> <workload> <endpoint>` (each part path-escaped),
//! holding `{"ifaceName", "mac", "ipv4Nets", "ipv6Nets", "bgpPeerName"}` from the report's
//! endpoint. A `down` report or a remove deletes the file. The CNI plugin waits on these.
//!
//! # Invariants
//! * `status_files_appear_for_up_endpoints_and_go_on_down_or_remove`: nothing is written
//!   before the driver's `DataplaneInSync`; then the directory holds exactly the endpoints
//!   last reported `up` (with an endpoint), and files of endpoints no longer up are removed.
//! * A file is written whole (temporary file, then rename), so a reader never sees half.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use felix_proto as pb;
use felix_proto::from_dataplane::Payload;
use serde_json::json;

/// `EndpointStatusPathPrefix` values that turn the files off.
fn disabled(prefix: &str) -> bool {
    prefix.is_empty() || prefix.eq_ignore_ascii_case("none")
}

/// Go's `url.PathEscape`: unreserved bytes and the path segment's allowed sub-delimiters
/// stay, everything else becomes `%XX`.
pub fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~$&+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The file name of a workload endpoint's status.
pub fn file_name(id: &pb::WorkloadEndpointId) -> String {
    format!(
        "{} {} {}",
        path_escape(&id.orchestrator_id),
        path_escape(&id.workload_id),
        path_escape(&id.endpoint_id)
    )
}

/// Writes and removes the status files as reports arrive.
#[derive(Debug)]
pub struct StatusFiles {
    dir: PathBuf,
    in_sync: bool,
    /// Latest `up` endpoints, by file name, with their file's content.
    up: BTreeMap<String, String>,
    written: BTreeSet<String>,
}

impl StatusFiles {
    /// The writer for `EndpointStatusPathPrefix` = `prefix`, or `None` when it is off.
    pub fn new(prefix: &str) -> Option<StatusFiles> {
        if disabled(prefix) {
            return None;
        }
        Some(StatusFiles {
            dir: Path::new(prefix).join("endpoint-status"),
            in_sync: false,
            up: BTreeMap::new(),
            written: BTreeSet::new(),
        })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes one report; writes what changed once the driver is in sync.
    pub fn on_report(&mut self, p: &Payload) {
        match p {
            Payload::DataplaneInSync(_) => {
                self.in_sync = true;
                self.start_of_day();
            }
            Payload::WorkloadEndpointStatusUpdate(u) => {
                let Some(id) = &u.id else { return };
                let name = file_name(id);
                let status = u.status.as_ref().map(|s| s.status.as_str());
                match (status, &u.endpoint) {
                    (Some("up"), Some(ep)) => {
                        let body = json!({
                            "ifaceName": ep.name,
                            "mac": ep.mac,
                            "ipv4Nets": ep.ipv4_nets,
                            "ipv6Nets": ep.ipv6_nets,
                            "bgpPeerName": "",
                        })
                        .to_string();
                        self.up.insert(name.clone(), body);
                    }
                    (Some("up"), None) => {
                        tracing::warn!(file = %name, "endpoint reported up without its endpoint; no status file");
                        return;
                    }
                    _ => {
                        self.up.remove(&name);
                    }
                }
                self.sync_one(&name);
            }
            Payload::WorkloadEndpointStatusRemove(r) => {
                let Some(id) = &r.id else { return };
                let name = file_name(id);
                self.up.remove(&name);
                self.sync_one(&name);
            }
            _ => {}
        }
    }

    /// At in-sync: the directory is made to hold exactly the endpoints up now (stale files
    /// of an earlier run go).
    fn start_of_day(&mut self) {
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::error!(dir = %self.dir.display(), "cannot create the endpoint status directory: {e}");
            return;
        }
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !self.up.contains_key(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let names: Vec<String> = self.up.keys().cloned().collect();
        for n in names {
            self.sync_one(&n);
        }
    }

    fn sync_one(&mut self, name: &str) {
        if !self.in_sync {
            return;
        }
        let path = self.dir.join(name);
        match self.up.get(name) {
            Some(body) => {
                let tmp = self.dir.join(format!(".{name}.tmp"));
                let res = std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, &path));
                match res {
                    Ok(()) => {
                        self.written.insert(name.to_string());
                    }
                    Err(e) => {
                        tracing::error!(file = %path.display(), "cannot write an endpoint status file: {e}")
                    }
                }
            }
            None => {
                if self.written.remove(name) || path.exists() {
                    if let Err(e) = std::fs::remove_file(&path) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::error!(file = %path.display(), "cannot remove an endpoint status file: {e}");
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(w: &str) -> pb::WorkloadEndpointId {
        pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: w.into(),
            endpoint_id: "eth0".into(),
        }
    }

    fn update(w: &str, status: &str) -> Payload {
        Payload::WorkloadEndpointStatusUpdate(pb::WorkloadEndpointStatusUpdate {
            id: Some(id(w)),
            status: Some(pb::EndpointStatus {
                status: status.into(),
            }),
            endpoint: Some(pb::WorkloadEndpoint {
                name: format!("cali{}", w.len()),
                mac: "ee:ee:ee:ee:ee:ee".into(),
                ipv4_nets: vec!["10.65.0.2/32".into()],
                ..Default::default()
            }),
        })
    }

    fn listed(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn status_files_appear_for_up_endpoints_and_go_on_down_or_remove() {
        assert!(StatusFiles::new("none").is_none());
        assert!(StatusFiles::new("").is_none());
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut f = StatusFiles::new(&tmp.path().to_string_lossy()).expect("on");
        // A stale file of an earlier run.
        std::fs::create_dir_all(f.dir()).expect("mkdir");
        std::fs::write(f.dir().join("k8s old eth0"), "{}").expect("stale");
        f.on_report(&update("ns/a", "up"));
        f.on_report(&update("ns/b", "up"));
        assert_eq!(
            listed(f.dir()),
            vec!["k8s old eth0"],
            "nothing before in-sync"
        );
        f.on_report(&Payload::DataplaneInSync(pb::DataplaneInSync {}));
        assert_eq!(listed(f.dir()), vec!["k8s ns%2Fa eth0", "k8s ns%2Fb eth0"]);
        let body: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(f.dir().join("k8s ns%2Fa eth0")).expect("read"),
        )
        .expect("json");
        assert_eq!(body["ipv4Nets"][0], "10.65.0.2/32");
        assert_eq!(body["mac"], "ee:ee:ee:ee:ee:ee");
        f.on_report(&update("ns/a", "down"));
        f.on_report(&Payload::WorkloadEndpointStatusRemove(
            pb::WorkloadEndpointStatusRemove {
                id: Some(id("ns/b")),
            },
        ));
        assert!(listed(f.dir()).is_empty(), "{:?}", listed(f.dir()));
        assert_eq!(path_escape("a b/c~d"), "a%20b%2Fc~d");
    }
}
