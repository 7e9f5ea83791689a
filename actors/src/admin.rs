//! The admin socket (INTERFACES.md §4): HTTP/1.1 over a Unix socket, JSON bodies.
//!
//! | request | answer |
//! |---|---|
//! | `GET /status` | [`crate::status::StatusSnapshot`] |
//! | `GET /dataplane` | the desired dataplane view from the plugged-in callback (503 until set) |
//! | `GET /faults` | the armed faults, `[Fault...]` |
//! | `POST /faults` | arms one fault object (or an array of them); answers the armed list |
//! | `GET /faults/targets` | every actor and the operations a fault can target, `{"<actor>": ["*", op...]}` |
//! | `DELETE /faults` | disarms all; answers `[]` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /readback` | per driver, what it reads from the kernel and what a resync would change (see [`crate::readback`]) |
//! | `GET /drift` | per driver, only what a resync would change; `inSync` when nothing would |
//! | `GET /timings` | the latest applies' step durations and each driver's reconcile durations ([`crate::timings`]) |
//! | routes added with [`AdminContext::route`] | what their handler answers (`POST /explain`) |
//!
//! The server runs on its own thread (see [`crate::server`]), reading shared snapshots only,
//! so it answers while an apply is stalled. [`admin_request`] is the client `felix admin` uses.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::http::{request_over, ClientError, Handler, Request, Response};
use crate::metrics::Metrics;
use crate::seam::{Fault, FaultRegistry};
use crate::server::{spawn_server, Listener, ServerHandle};
use crate::status::StatusHandle;

/// Producer of the `GET /dataplane` body (plugged in by the calc-graph owner).
pub type DataplaneView = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Everything the admin endpoints read. Cloning shares it.
#[derive(Clone)]
pub struct AdminContext {
    /// Status snapshots.
    pub status: StatusHandle,
    /// Fault registry.
    pub faults: FaultRegistry,
    /// Metrics.
    pub metrics: Metrics,
    dataplane: Arc<RwLock<Option<DataplaneView>>>,
    routes: Arc<RwLock<Vec<(String, String, Handler)>>>,
    fallback: Arc<RwLock<Option<Handler>>>,
}

impl std::fmt::Debug for AdminContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminContext").finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum FaultBody {
    One(Fault),
    Many(Vec<Fault>),
}

impl AdminContext {
    /// A context over the given shared parts, without a dataplane view.
    pub fn new(status: StatusHandle, faults: FaultRegistry, metrics: Metrics) -> Self {
        Self {
            status,
            faults,
            metrics,
            dataplane: Arc::new(RwLock::new(None)),
            routes: Arc::new(RwLock::new(Vec::new())),
            fallback: Arc::new(RwLock::new(None)),
        }
    }

    /// Plugs in the `GET /dataplane` producer (replacing any earlier one).
    pub fn set_dataplane_view(&self, view: DataplaneView) {
        *self.dataplane.write() = Some(view);
    }

    /// Adds (or replaces) the handler of `method path`, for endpoints served by the
    /// daemon's other parts (`POST /explain`, ...). A request to a routed path with another
    /// method is answered 405. A route takes precedence over the built-in endpoint of the
    /// same method and path (the external-driver mode merges `/status` and `/faults` with
    /// its driver's).
    pub fn route(&self, method: &str, path: &str, handler: Handler) {
        let mut routes = self.routes.write();
        routes.retain(|(m, p, _)| !(m == method && p == path));
        routes.push((method.to_string(), path.to_string(), handler));
    }

    /// Answers requests that match no built-in endpoint and no route (instead of 404): the
    /// external-driver mode forwards them to its driver's admin socket.
    pub fn set_fallback(&self, handler: Handler) {
        *self.fallback.write() = Some(handler);
    }

    fn exact_route(&self, req: &Request) -> Option<Handler> {
        self.routes
            .read()
            .iter()
            .find(|(m, p, _)| *m == req.method && *p == req.path)
            .map(|(_, _, h)| h.clone())
    }

    fn routed(&self, req: &Request) -> Option<Response> {
        let routes = self.routes.read();
        routes
            .iter()
            .any(|(_, p, _)| *p == req.path)
            .then(|| Response::error(405, "method not allowed"))
    }

    fn faults_json(&self) -> Response {
        Response::json(
            200,
            serde_json::to_string(&self.faults.list()).unwrap_or_else(|_| "[]".into()),
        )
    }

    /// Answers one admin request.
    pub fn handle(&self, req: &Request) -> Response {
        if let Some(h) = self.exact_route(req) {
            return h(req);
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/status") => match serde_json::to_string(&self.status.snapshot()) {
                Ok(b) => Response::json(200, b),
                Err(e) => Response::error(500, &e.to_string()),
            },
            ("GET", "/dataplane") => {
                let view = self.dataplane.read().clone();
                match view {
                    Some(v) => Response::json(200, v().to_string()),
                    None => Response::error(503, "dataplane view not available"),
                }
            }
            ("GET", "/faults") => self.faults_json(),
            ("POST", "/faults") => {
                let faults = match serde_json::from_str::<FaultBody>(&req.body) {
                    Ok(FaultBody::One(f)) => vec![f],
                    Ok(FaultBody::Many(v)) => v,
                    Err(e) => return Response::error(400, &format!("bad fault: {e}")),
                };
                for f in faults {
                    if let Err(e) = self.faults.arm(f) {
                        return Response::error(400, &e.to_string());
                    }
                }
                self.faults_json()
            }
            ("GET", "/faults/targets") => Response::json(
                200,
                serde_json::to_string(&self.faults.targets()).unwrap_or_else(|_| "{}".into()),
            ),
            ("DELETE", "/faults") => {
                self.faults.clear();
                self.faults_json()
            }
            ("GET", "/metrics") => Response::text(200, self.metrics.render_prometheus()),
            (_, "/status" | "/dataplane" | "/faults" | "/faults/targets" | "/metrics") => {
                Response::error(405, "method not allowed")
            }
            _ => self.routed(req).unwrap_or_else(|| {
                let fallback = self.fallback.read().clone();
                match fallback {
                    Some(h) => h(req),
                    None => Response::error(404, "not found"),
                }
            }),
        }
    }

    /// The handler as a shareable closure.
    pub fn handler(&self) -> Handler {
        let me = self.clone();
        Arc::new(move |r: &Request| me.handle(r))
    }
}

/// Binds the admin socket at `socket` (replacing a stale socket file, creating the parent
/// directory, mode 0600) and serves it on a dedicated thread.
pub fn start_admin_server(socket: &Path, ctx: &AdminContext) -> io::Result<ServerHandle> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Some(dir) = socket.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(socket) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(socket)?;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", socket.display()),
            ));
        }
    }
    let l = std::os::unix::net::UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    spawn_server(
        "felix-admin",
        Listener::Unix(l),
        socket.display().to_string(),
        ctx.handler(),
    )
}

/// Client for `felix admin`: sends one request to the admin socket, returns `(status, body)`.
/// Gives up after 30 s.
pub async fn admin_request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), ClientError> {
    let target = socket.display().to_string();
    let fut = async {
        let s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|source| ClientError::Io {
                target: target.clone(),
                source,
            })?;
        request_over(s, &target, method, path, body).await
    };
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .map_err(|_| ClientError::Timeout)?
}
