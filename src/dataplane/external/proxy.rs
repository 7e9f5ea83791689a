//! One admin socket for both processes: in external-driver mode felix answers on its admin
//! socket for itself and for its driver. felix-rs's own driver serves its admin API on the
//! socket felix names in [`DRIVER_SOCKET_ENV`]; felix forwards the requests it does not
//! answer itself there, and merges the answers that both sides contribute to (`/faults`,
//! `/metrics`). A driver that serves no socket (a third-party one) leaves felix's own
//! answers, and forwarded requests are answered 503 naming the missing socket.
//!
//! # Invariants
//! * `metric_families_of_the_driver_replace_felixs_own_and_the_rest_is_kept`: a family the
//!   driver renders is taken from the driver only (felix's dataplane families are empty in
//!   this mode), every other family of felix is kept, so no family appears twice.
//! * `faults_go_to_the_process_that_has_the_target`: a fault whose target is one of felix's
//!   own actors (`calc-graph`) is armed in felix, every other one in the driver; listing and
//!   clearing cover both.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use felix_actors::http::{request_blocking, Request, Response};
use felix_actors::{Fault, FaultRegistry};
use serde_json::Value;

/// The environment variable naming the admin socket felix-rs's driver serves.
pub const DRIVER_SOCKET_ENV: &str = "FELIXRS_DRIVER_ADMIN_SOCKET";

/// How long a forwarded request may take (a read-back of a large ruleset takes seconds).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// The driver's admin socket, as felix reaches it.
#[derive(Debug, Clone)]
pub struct DriverAdmin {
    socket: PathBuf,
}

impl DriverAdmin {
    /// The driver socket for felix's admin socket `felix_socket` (`<socket>.driver`).
    pub fn for_felix_socket(felix_socket: &Path) -> Self {
        let mut s = felix_socket.as_os_str().to_owned();
        s.push(".driver");
        DriverAdmin { socket: s.into() }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// One request to the driver: `(status, content type, body)`, or why it failed.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String, String), String> {
        request_blocking(&self.socket, method, path, body, FORWARD_TIMEOUT).map_err(|e| {
            format!(
                "the dataplane driver's admin socket {} does not answer ({e}); only felix-rs's \
                 own driver serves one",
                self.socket.display()
            )
        })
    }

    /// A JSON `GET` of the driver, if it answers 200 with JSON.
    pub fn get_json(&self, path: &str) -> Option<Value> {
        let (code, _, body) = self.call("GET", path, None).ok()?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// Forwards `req` as it is and relays the answer.
    pub fn forward(&self, req: &Request) -> Response {
        let body = (!req.body.is_empty()).then_some(req.body.as_str());
        match self.call(&req.method, &req.path, body) {
            Ok((code, ctype, body)) if ctype.starts_with("text/plain") => {
                Response::text(code, body)
            }
            Ok((code, _, body)) => Response::json(code, body),
            Err(e) => Response::error(503, &e),
        }
    }
}

/// The family a line of the text exposition format belongs to, given the families whose
/// `# TYPE` lines were seen (a sample of a summary has `_sum`/`_count` suffixes).
fn line_family<'a>(line: &'a str, known: &BTreeSet<&str>) -> Option<&'a str> {
    if let Some(rest) = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
    {
        return rest.split_whitespace().next();
    }
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let name = line.split(['{', ' ']).next()?;
    if known.contains(name) {
        return Some(name);
    }
    for suffix in ["_sum", "_count", "_bucket"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if known.contains(base) {
                return Some(base);
            }
        }
    }
    Some(name)
}

fn families(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|r| r.split_whitespace().next())
        .collect()
}

/// felix's families that the driver does not render, then the driver's.
pub fn merge_metrics(local: &str, driver: &str) -> String {
    let theirs = families(driver);
    let ours = families(local);
    let mut out = String::with_capacity(local.len() + driver.len());
    for line in local.lines() {
        if line_family(line, &ours).is_some_and(|f| theirs.contains(f)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(driver);
    if !driver.ends_with('\n') && !driver.is_empty() {
        out.push('\n');
    }
    out
}

/// The fault objects of a `POST /faults` body (one object or an array).
fn fault_values(body: &str) -> Result<Vec<Value>, String> {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Array(v)) => Ok(v),
        Ok(v @ Value::Object(_)) => Ok(vec![v]),
        Ok(_) => Err("bad fault: expected an object or an array of objects".into()),
        Err(e) => Err(format!("bad fault: {e}")),
    }
}

/// Handles `/faults` and `/faults/targets` for both processes.
#[derive(Debug, Clone)]
pub struct FaultsRouter {
    /// felix's own registry.
    pub local: FaultRegistry,
    /// The driver.
    pub driver: DriverAdmin,
}

impl FaultsRouter {
    fn driver_array(&self, method: &str, path: &str, body: Option<&str>) -> Result<Value, String> {
        let (code, _, text) = self.driver.call(method, path, body)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("driver answer: {e}"))?;
        if code != 200 {
            return Err(v["error"].as_str().unwrap_or(&text).to_string());
        }
        Ok(v)
    }

    fn listed(&self) -> Response {
        let mut all = serde_json::to_value(self.local.list()).unwrap_or(Value::Null);
        if let (Value::Array(a), Ok(Value::Array(b))) =
            (&mut all, self.driver_array("GET", "/faults", None))
        {
            a.extend(b);
        }
        Response::json(200, all.to_string())
    }

    /// Answers one `/faults` request.
    pub fn handle(&self, req: &Request) -> Response {
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/faults") => self.listed(),
            ("DELETE", "/faults") => {
                self.local.clear();
                if let Err(e) = self.driver_array("DELETE", "/faults", None) {
                    tracing::debug!("clearing the driver's faults: {e}");
                }
                self.listed()
            }
            ("GET", "/faults/targets") => {
                let mut all = serde_json::to_value(self.local.targets()).unwrap_or(Value::Null);
                if let (Value::Object(a), Ok(Value::Object(b))) =
                    (&mut all, self.driver_array("GET", "/faults/targets", None))
                {
                    a.extend(b);
                }
                Response::json(200, all.to_string())
            }
            ("POST", "/faults") => {
                let values = match fault_values(&req.body) {
                    Ok(v) => v,
                    Err(e) => return Response::error(400, &e),
                };
                let ours = self.local.targets();
                let (mine, theirs): (Vec<Value>, Vec<Value>) = values
                    .into_iter()
                    .partition(|v| v["target"].as_str().is_some_and(|t| ours.contains_key(t)));
                if !theirs.is_empty() {
                    let body = Value::Array(theirs).to_string();
                    if let Err(e) = self.driver_array("POST", "/faults", Some(&body)) {
                        return Response::error(400, &e);
                    }
                }
                for v in mine {
                    let armed = serde_json::from_value::<Fault>(v)
                        .map_err(|e| format!("bad fault: {e}"))
                        .and_then(|f| self.local.arm(f).map_err(|e| e.to_string()));
                    if let Err(e) = armed {
                        return Response::error(400, &e);
                    }
                }
                self.listed()
            }
            _ => Response::error(405, "method not allowed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_families_of_the_driver_replace_felixs_own_and_the_rest_is_kept() {
        let local = "# HELP felix_calc_graph_updates_processed x\n\
                     # TYPE felix_calc_graph_updates_processed counter\n\
                     felix_calc_graph_updates_processed{type=\"a\"} 3\n\
                     # HELP felix_int_dataplane_apply_time_seconds y\n\
                     # TYPE felix_int_dataplane_apply_time_seconds summary\n\
                     felix_int_dataplane_apply_time_seconds_sum 0\n\
                     felix_int_dataplane_apply_time_seconds_count 0\n";
        let driver = "# HELP felix_int_dataplane_apply_time_seconds y\n\
                      # TYPE felix_int_dataplane_apply_time_seconds summary\n\
                      felix_int_dataplane_apply_time_seconds_sum 1.5\n\
                      felix_int_dataplane_apply_time_seconds_count 4\n";
        let merged = merge_metrics(local, driver);
        assert_eq!(
            merged
                .lines()
                .filter(|l| l.starts_with("# TYPE felix_int_dataplane_apply_time_seconds"))
                .count(),
            1,
            "{merged}"
        );
        assert!(merged.contains("felix_int_dataplane_apply_time_seconds_count 4"));
        assert!(!merged.contains("felix_int_dataplane_apply_time_seconds_count 0"));
        assert!(merged.contains("felix_calc_graph_updates_processed{type=\"a\"} 3"));
        assert_eq!(merge_metrics(local, ""), local);
    }

    #[test]
    fn faults_go_to_the_process_that_has_the_target() {
        let local = FaultRegistry::default();
        local.declare("calc-graph", &["flush"]);
        // No driver socket: faults for felix's own actors still work, others are refused
        // with the reason.
        let dir = tempfile::tempdir().expect("tempdir");
        let router = FaultsRouter {
            local: local.clone(),
            driver: DriverAdmin::for_felix_socket(&dir.path().join("admin.sock")),
        };
        let post = |body: &str| {
            router.handle(&Request {
                method: "POST".into(),
                path: "/faults".into(),
                body: body.into(),
            })
        };
        let ok = post(r#"{"target":"calc-graph","op":"flush","action":"error","count":1}"#);
        assert_eq!(ok.status, 200, "{}", ok.body);
        assert_eq!(local.list().len(), 1);
        let refused = post(r#"{"target":"driver/x","op":"apply","action":"error","count":1}"#);
        assert_eq!(refused.status, 400);
        assert!(
            refused.body.contains("admin.sock.driver"),
            "{}",
            refused.body
        );
        assert_eq!(post("7").status, 400);
    }
}
