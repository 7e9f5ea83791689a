//! `felix admin diags`: one directory holding everything needed to diagnose a node, read
//! from the daemon's admin socket.
//!
//! | file | from | what |
//! |---|---|---|
//! | `status.json` | `GET /status` | in-sync, dataplane mode, applies, every actor's state and last error |
//! | `config.json` | `GET /config` | every parameter's value and its source |
//! | `dataplane.json` | `GET /dataplane` | the desired dataplane view |
//! | `readback.json` | `GET /readback` | per driver, what it reads from the kernel and what a resync would change |
//! | `drift.json` | `GET /drift` | the difference alone |
//! | `timings.json` | `GET /timings` | the latest applies per step, and per driver |
//! | `metrics.txt` | `GET /metrics` | Prometheus text |
//! | `faults.json` | `GET /faults` | armed faults |
//! | `drops.json` | `GET /drops` | recent drops (when `DropAttributionEnabled`) |
//! | `logs.txt` | `GET /logs` | the latest log lines |
//! | `manifest.json` | — | when the bundle was taken, and each section's size or error |
//!
//! Invariant: one failing section never loses the others; each failure is named in the
//! manifest, and the command fails (exit 1) only when the daemon cannot be reached at all.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::admin::call;
use super::CliError;

/// The sections: (file, path).
pub const SECTIONS: &[(&str, &str)] = &[
    ("status.json", "/status"),
    ("config.json", "/config"),
    ("dataplane.json", "/dataplane"),
    ("readback.json", "/readback"),
    ("drift.json", "/drift"),
    ("timings.json", "/timings"),
    ("metrics.txt", "/metrics"),
    ("faults.json", "/faults"),
    ("drops.json", "/drops"),
    ("logs.txt", "/logs"),
];

/// Writes the bundle into `out` (or a new `felix-diags-<time>` directory) and returns it.
pub fn write_bundle(socket: &Path, out: Option<&Path>) -> Result<PathBuf, CliError> {
    let taken = felix_actors::status::rfc3339(std::time::SystemTime::now());
    // First contact: an unreachable daemon is an error, not an empty bundle.
    let status = call(socket, "GET", "/status", None)?;
    let dir = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("felix-diags-{}", taken.replace(':', ""))));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Runtime(anyhow::anyhow!("cannot create {}: {e}", dir.display())))?;
    let mut sections = Map::new();
    for (file, path) in SECTIONS {
        let body = if *path == "/status" {
            Ok(status.clone())
        } else {
            call(socket, "GET", path, None)
        };
        let entry = match body {
            Ok(mut text) => {
                text.push('\n');
                match std::fs::write(dir.join(file), &text) {
                    Ok(()) => json!({"path": path, "bytes": text.len()}),
                    Err(e) => json!({"path": path, "error": format!("writing {file}: {e}")}),
                }
            }
            Err(e) => json!({"path": path, "error": e.to_string()}),
        };
        sections.insert((*file).to_string(), entry);
    }
    let manifest = json!({
        "taken": taken,
        "socket": socket.display().to_string(),
        "sections": Value::Object(sections),
    });
    std::fs::write(
        dir.join("manifest.json"),
        format!(
            "{}\n",
            serde_json::to_string_pretty(&manifest).unwrap_or_default()
        ),
    )
    .map_err(|e| CliError::Runtime(anyhow::anyhow!("writing the manifest: {e}")))?;
    Ok(dir)
}
