//! Health: liveness and readiness aggregation and the HTTP health port.
//!
//! Endpoints (HTTP on TCP, `HealthHost`:`HealthPort`, default `localhost:9099`, served only
//! when `HealthEnabled`): `GET /liveness` and `GET /readiness`, 200 when healthy and 503
//! otherwise, with a JSON body listing the reporters.
//!
//! * **Reporters** ([`Health::reporter`]) report `(live, ready)`; a reporter with a timeout
//!   whose last report is older than the timeout counts as neither live nor ready. A reporter
//!   that has not reported yet counts as live (still starting) but not ready.
//! * **Startup latches** ([`Health::startup_latch`]): readiness additionally requires that
//!   every latch ever created has been dropped. Once all have dropped the latch stays open —
//!   it never closes again (readiness can still drop if a reporter goes unready).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::clock::SharedClock;
use crate::http::{Handler, Request, Response};
use crate::server::{spawn_server, Listener, ServerHandle};

/// Health port settings (upstream `HealthEnabled`, `HealthHost`, `HealthPort`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// Serve the health port at all.
    pub enabled: bool,
    /// Host to bind.
    pub host: String,
    /// Port to bind.
    pub port: u16,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            host: "localhost".to_string(),
            port: 9099,
        }
    }
}

/// How a reporter takes part in health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReporterSpec {
    /// Counts towards liveness.
    pub live: bool,
    /// Counts towards readiness.
    pub ready: bool,
    /// Reports older than this count as unhealthy.
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone)]
struct ReporterState {
    spec: ReporterSpec,
    last: Option<(Instant, bool, bool)>,
}

#[derive(Debug, Default)]
struct Inner {
    reporters: BTreeMap<String, ReporterState>,
    /// Timeouts by reporter name (`HealthTimeoutOverrides`), already mapped to ours.
    overrides: BTreeMap<String, Duration>,
    latches_open: usize,
    latches_ever: usize,
}

/// Shared health aggregator. Cloning shares it.
///
/// Reports age on its [`Clock`] (the real clock unless [`Health::with_clock`]), so a test
/// can let a reporter's timeout pass without sleeping.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<Mutex<Inner>>,
    clock: SharedClock,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            inner: Arc::default(),
            clock: crate::clock::system(),
        }
    }
}

/// Per-reporter line of a health answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReporterView {
    /// Reporter name.
    pub name: String,
    /// Counts as live now.
    pub live: bool,
    /// Counts as ready now.
    pub ready: bool,
}

/// A health verdict with its reasons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthView {
    /// Overall verdict.
    pub healthy: bool,
    /// Startup latches still held.
    pub startup_latches_held: usize,
    /// Reporters.
    pub reporters: Vec<ReporterView>,
}

impl Health {
    /// An aggregator with no reporters and no latches (live and ready).
    pub fn new() -> Self {
        Self::default()
    }

    /// An aggregator reading time from `clock`.
    pub fn with_clock(clock: SharedClock) -> Self {
        Health {
            inner: Arc::default(),
            clock,
        }
    }

    /// Registers (or re-registers) reporter `name`; a timeout override for it
    /// (see [`Health::set_timeout_overrides`]) replaces `spec.timeout`.
    pub fn reporter(&self, name: &str, mut spec: ReporterSpec) -> HealthReporter {
        let mut inner = self.inner.lock();
        if let Some(t) = inner.overrides.get(name) {
            spec.timeout = Some(*t);
        }
        inner
            .reporters
            .insert(name.to_string(), ReporterState { spec, last: None });
        drop(inner);
        HealthReporter {
            health: self.clone(),
            name: name.to_string(),
        }
    }

    /// Sets the reporters' timeouts by name (`HealthTimeoutOverrides`), for the
    /// registered reporters and those registered later. Upstream's names are
    /// accepted for ours: `InternalDataplaneMainLoop` is `dataplane`,
    /// `CalculationGraph` is `calc-graph`. Returns the names that match no
    /// reporter felix-rs has, for the caller to warn about.
    pub fn set_timeout_overrides(&self, overrides: &BTreeMap<String, Duration>) -> Vec<String> {
        const KNOWN: &[&str] = &["dataplane", "calc-graph"];
        let mut unknown = Vec::new();
        let mut inner = self.inner.lock();
        inner.overrides.clear();
        for (name, t) in overrides {
            let ours = match name.as_str() {
                "InternalDataplaneMainLoop" => "dataplane",
                "CalculationGraph" => "calc-graph",
                other => other,
            };
            if !KNOWN.contains(&ours) {
                unknown.push(name.clone());
                continue;
            }
            inner.overrides.insert(ours.to_string(), *t);
            if let Some(r) = inner.reporters.get_mut(ours) {
                r.spec.timeout = Some(*t);
            }
        }
        unknown
    }

    /// Creates a startup latch; readiness waits until it (and all others) are dropped.
    pub fn startup_latch(&self, name: &str) -> StartupLatch {
        let mut g = self.inner.lock();
        g.latches_open += 1;
        g.latches_ever += 1;
        StartupLatch {
            health: self.clone(),
            name: name.to_string(),
        }
    }

    fn views(&self, now: Instant) -> (Vec<ReporterView>, usize) {
        let g = self.inner.lock();
        let views = g
            .reporters
            .iter()
            .map(|(name, r)| {
                let (live, ready) = match r.last {
                    None => (true, false),
                    Some((at, live, ready)) => {
                        let fresh = r.spec.timeout.is_none_or(|t| now.duration_since(at) <= t);
                        (live && fresh, ready && fresh)
                    }
                };
                ReporterView {
                    name: name.clone(),
                    live: live || !r.spec.live,
                    ready: ready || !r.spec.ready,
                }
            })
            .collect();
        (views, g.latches_open)
    }

    /// Current liveness.
    pub fn liveness(&self) -> HealthView {
        let (reporters, held) = self.views(self.clock.now());
        HealthView {
            healthy: reporters.iter().all(|r| r.live),
            startup_latches_held: held,
            reporters,
        }
    }

    /// Current readiness.
    pub fn readiness(&self) -> HealthView {
        let (reporters, held) = self.views(self.clock.now());
        HealthView {
            healthy: held == 0 && reporters.iter().all(|r| r.ready),
            startup_latches_held: held,
            reporters,
        }
    }

    /// The HTTP handler for `/liveness` and `/readiness`.
    pub fn handler(&self) -> Handler {
        let h = self.clone();
        Arc::new(move |req: &Request| {
            if req.method != "GET" && req.method != "HEAD" {
                return Response::error(405, "method not allowed");
            }
            let view = match req.path.as_str() {
                "/liveness" => h.liveness(),
                "/readiness" => h.readiness(),
                _ => return Response::error(404, "not found"),
            };
            let body = serde_json::to_string(&view).unwrap_or_else(|_| "{}".to_string());
            Response::json(if view.healthy { 200 } else { 503 }, body)
        })
    }
}

/// Reports one component's health.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    health: Health,
    name: String,
}

impl HealthReporter {
    /// Records a report now.
    pub fn report(&self, live: bool, ready: bool) {
        if let Some(r) = self.health.inner.lock().reporters.get_mut(&self.name) {
            r.last = Some((self.health.clock.now(), live, ready));
        }
    }
}

/// Held while a startup step is incomplete; dropping it releases readiness.
#[derive(Debug)]
pub struct StartupLatch {
    health: Health,
    name: String,
}

impl Drop for StartupLatch {
    fn drop(&mut self) {
        let mut g = self.health.inner.lock();
        g.latches_open = g.latches_open.saturating_sub(1);
        tracing::info!(latch = %self.name, remaining = g.latches_open, "startup latch released");
    }
}

/// Starts the health port if `cfg.enabled`.
pub fn start_health_server(
    cfg: &HealthConfig,
    health: &Health,
) -> io::Result<Option<ServerHandle>> {
    if !cfg.enabled {
        return Ok(None);
    }
    let l = std::net::TcpListener::bind((cfg.host.as_str(), cfg.port))?;
    let local = l.local_addr()?.to_string();
    spawn_server("felix-health", Listener::Tcp(l), local, health.handler()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_latches_and_reporters() {
        let h = Health::new();
        assert!(h.readiness().healthy);
        let latch = h.startup_latch("first-apply");
        let r = h.reporter(
            "dataplane",
            ReporterSpec {
                live: true,
                ready: true,
                timeout: Some(Duration::from_secs(60)),
            },
        );
        assert!(h.liveness().healthy, "unreported reporter counts as live");
        assert!(!h.readiness().healthy);
        r.report(true, true);
        assert!(!h.readiness().healthy, "latch still held");
        drop(latch);
        assert!(h.readiness().healthy);
        r.report(false, true);
        assert!(!h.liveness().healthy);
    }

    #[test]
    fn timeout_overrides_apply_by_upstream_or_own_name_before_and_after_registration() {
        let h = Health::new();
        let spec = ReporterSpec {
            live: true,
            ready: false,
            timeout: Some(Duration::from_secs(3600)),
        };
        let calc = h.reporter("calc-graph", spec);
        let overrides = BTreeMap::from([
            ("CalculationGraph".to_string(), Duration::from_millis(1)),
            (
                "InternalDataplaneMainLoop".to_string(),
                Duration::from_millis(1),
            ),
            ("NoSuchLoop".to_string(), Duration::from_secs(1)),
        ]);
        assert_eq!(
            h.set_timeout_overrides(&overrides),
            vec!["NoSuchLoop".to_string()]
        );
        let dp = h.reporter("dataplane", spec);
        calc.report(true, true);
        dp.report(true, true);
        std::thread::sleep(Duration::from_millis(10));
        let view = h.liveness();
        assert!(
            !view.healthy,
            "both reporters' reports are stale after 1 ms"
        );
        assert!(view.reporters.iter().all(|r| !r.live), "{view:?}");
    }

    #[test]
    fn stale_report_is_not_live() {
        let h = Health::new();
        let r = h.reporter(
            "x",
            ReporterSpec {
                live: true,
                ready: false,
                timeout: Some(Duration::from_millis(1)),
            },
        );
        r.report(true, true);
        std::thread::sleep(Duration::from_millis(10));
        assert!(!h.liveness().healthy);
        assert!(h.readiness().healthy, "not a readiness reporter");
    }
}
