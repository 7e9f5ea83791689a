//! Runtime metrics and their Prometheus text rendering.
//!
//! Families (upstream names where upstream has them):
//! * `felix_int_dataplane_apply_time_seconds` — summary of apply() durations (upstream's
//!   type);
//! * `felix_int_dataplane_msg_batch_size` — summary of messages coalesced per apply;
//! * `felix_int_dataplane_failures` — counter of failed applies;
//! * `felix_int_dataplane_initial_resync_time_seconds` — gauge, duration of the first
//!   successful apply after in-sync (the full read-back-and-reconcile);
//! * `felix_actor_restarts_total{actor}` — supervised restarts;
//! * `felix_seam_ops_total{actor,op}`, `felix_seam_op_errors_total{actor,op}`,
//!   `felix_seam_op_seconds_sum{actor,op}` — per kernel-seam operation;
//! * `felix_dataplane_rejected_chains{actor}` — gauge, chains a driver programs as
//!   drop-everything because the kernel refused them (0 once cleared).
//!
//! Other components feed labelled families by name ([`Metrics::set_gauge`],
//! [`Metrics::add_counter`], [`Metrics::observe_summary`]; see [`crate::families`]) or append
//! their own text with [`Metrics::add_collector`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::families::{Families, Summary};
use crate::status::RejectedChain;

/// A text collector appended verbatim to the Prometheus output.
pub type Collector = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Debug, Clone, Default)]
struct SeamStat {
    count: u64,
    errors: u64,
    seconds: f64,
}

/// Apply counts and durations since the previous summary (for the periodic log line).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ApplySummary {
    /// Applies finished in the period.
    pub applies: u64,
    /// Of which failed.
    pub failed: u64,
    /// Sum of their durations.
    pub total: Duration,
    /// Longest one.
    pub max: Duration,
}

struct Inner {
    apply_time: Summary,
    batch_size: Summary,
    families: Families,
    failures: u64,
    initial_resync: Option<f64>,
    restarts: BTreeMap<String, u64>,
    seam: BTreeMap<(String, String), SeamStat>,
    period: ApplySummary,
    collectors: Vec<Collector>,
    post_render: Option<PostRender>,
    published: BTreeMap<String, String>,
    rejected: BTreeMap<String, Vec<RejectedChain>>,
    unsupported: BTreeMap<String, Vec<String>>,
}

/// The last step of rendering (see [`Metrics::set_post_render`]).
pub type PostRender = Arc<dyn Fn(String) -> String + Send + Sync>;

/// Shared metric registry. Cloning shares it.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                apply_time: Summary::default(),
                batch_size: Summary::default(),
                families: Families::default(),
                failures: 0,
                initial_resync: None,
                restarts: BTreeMap::new(),
                seam: BTreeMap::new(),
                period: ApplySummary::default(),
                collectors: Vec::new(),
                post_render: None,
                published: BTreeMap::new(),
                rejected: BTreeMap::new(),
                unsupported: BTreeMap::new(),
            })),
        }
    }

    /// Records one finished apply.
    pub fn observe_apply(&self, duration: Duration, ok: bool) {
        let mut g = self.inner.lock();
        g.apply_time.observe(duration.as_secs_f64());
        if !ok {
            g.failures += 1;
            g.period.failed += 1;
        }
        g.period.applies += 1;
        g.period.total += duration;
        g.period.max = g.period.max.max(duration);
    }

    /// Records how many messages one apply coalesced.
    pub fn observe_batch(&self, messages: u64) {
        self.inner.lock().batch_size.observe(messages as f64);
    }

    /// Sets the initial-resync gauge.
    pub fn set_initial_resync(&self, duration: Duration) {
        self.inner.lock().initial_resync = Some(duration.as_secs_f64());
    }

    /// Counts one supervised restart of `actor`.
    pub fn inc_restart(&self, actor: &str) {
        *self
            .inner
            .lock()
            .restarts
            .entry(actor.to_string())
            .or_default() += 1;
    }

    /// Records one kernel-seam operation.
    pub fn record_seam_op(&self, actor: &str, op: &str, duration: Duration, ok: bool) {
        let mut g = self.inner.lock();
        let s = g
            .seam
            .entry((actor.to_string(), op.to_string()))
            .or_default();
        s.count += 1;
        if !ok {
            s.errors += 1;
        }
        s.seconds += duration.as_secs_f64();
    }

    /// `(count, errors)` recorded for one seam operation.
    pub fn seam_op_counts(&self, actor: &str, op: &str) -> (u64, u64) {
        let g = self.inner.lock();
        g.seam
            .get(&(actor.to_string(), op.to_string()))
            .map_or((0, 0), |s| (s.count, s.errors))
    }

    /// Totals over the seam operations `ops` of every actor whose name starts with
    /// `actor_prefix`: `(count, errors, seconds)`.
    pub fn seam_totals(&self, actor_prefix: &str, ops: &[&str]) -> (u64, u64, f64) {
        let g = self.inner.lock();
        g.seam
            .iter()
            .filter(|((a, o), _)| a.starts_with(actor_prefix) && ops.contains(&o.as_str()))
            .fold((0, 0, 0.0), |(c, e, t), (_, s)| {
                (c + s.count, e + s.errors, t + s.seconds)
            })
    }

    /// Returns the period summary and starts a new period.
    pub fn take_summary(&self) -> ApplySummary {
        std::mem::take(&mut self.inner.lock().period)
    }

    /// Records what `actor` cannot program on this node (replaces its previous report).
    pub fn set_unsupported(&self, actor: &str, items: Vec<String>) {
        let mut g = self.inner.lock();
        if items.is_empty() && !g.unsupported.contains_key(actor) {
            return;
        }
        g.unsupported.insert(actor.to_string(), items);
    }

    /// What `actor` last reported it cannot program.
    pub fn unsupported(&self, actor: &str) -> Vec<String> {
        self.inner
            .lock()
            .unsupported
            .get(actor)
            .cloned()
            .unwrap_or_default()
    }

    /// Records the chains `actor` programs as drop-everything because the kernel
    /// refused them (replaces its previous report).
    pub fn set_rejected_chains(&self, actor: &str, chains: Vec<RejectedChain>) {
        let mut g = self.inner.lock();
        if chains.is_empty() && !g.rejected.contains_key(actor) {
            return;
        }
        g.rejected.insert(actor.to_string(), chains);
    }

    /// The chains `actor` last reported as refused by the kernel.
    pub fn rejected_chains(&self, actor: &str) -> Vec<RejectedChain> {
        self.inner
            .lock()
            .rejected
            .get(actor)
            .cloned()
            .unwrap_or_default()
    }

    /// Sets one series (`labels` in exposition form, e.g. `ip_version="4",table="filter"`,
    /// or empty) of gauge family `name`.
    pub fn set_gauge(&self, name: &'static str, help: &'static str, labels: &str, v: f64) {
        self.inner.lock().families.set_gauge(name, help, labels, v);
    }

    /// Adds `delta` to one series of counter family `name`.
    pub fn add_counter(&self, name: &'static str, help: &'static str, labels: &str, delta: f64) {
        self.inner
            .lock()
            .families
            .add_counter(name, help, labels, delta);
    }

    /// Records one observation in one series of summary family `name`.
    pub fn observe_summary(&self, name: &'static str, help: &'static str, labels: &str, v: f64) {
        self.inner
            .lock()
            .families
            .observe_summary(name, help, labels, v);
    }

    /// Makes unlabelled summary family `name` exist before its first observation (as
    /// upstream registers its families at start).
    pub fn declare_summary(&self, name: &'static str, help: &'static str) {
        self.inner.lock().families.declare_summary(name, help);
    }

    /// Appends a collector whose text is added to [`Metrics::render_prometheus`].
    pub fn add_collector(&self, collector: Collector) {
        self.inner.lock().collectors.push(collector);
    }

    /// Publishes (replacing what `key` published before) families in exposition format that
    /// an actor computes itself, e.g. a driver's scan results; rendered after every other
    /// family. Keyed, so an actor restarted by its supervisor replaces its own block.
    pub fn publish(&self, key: &str, families: String) {
        self.inner
            .lock()
            .published
            .insert(key.to_string(), families);
    }

    /// Renders every family in Prometheus text exposition format.
    pub fn render_prometheus(&self) -> String {
        let (mut out, collectors) = {
            let g = self.inner.lock();
            let mut out = String::new();
            g.apply_time.render(
                &mut out,
                "felix_int_dataplane_apply_time_seconds",
                "Time in seconds that it took to apply a dataplane update.",
            );
            g.batch_size.render(
                &mut out,
                "felix_int_dataplane_msg_batch_size",
                "Number of messages processed in each batch. Higher values indicate more \
                 batching to keep up.",
            );
            let _ = writeln!(
                out,
                "# HELP felix_int_dataplane_failures Number of failed dataplane applies.\n\
                 # TYPE felix_int_dataplane_failures counter\nfelix_int_dataplane_failures {}",
                g.failures
            );
            let _ = writeln!(
                out,
                "# HELP felix_int_dataplane_initial_resync_time_seconds Duration of the first \
                 apply after in-sync.\n# TYPE felix_int_dataplane_initial_resync_time_seconds gauge\n\
                 felix_int_dataplane_initial_resync_time_seconds {}",
                g.initial_resync.unwrap_or(0.0)
            );
            let _ = writeln!(
                out,
                "# HELP felix_actor_restarts_total Supervised actor restarts.\n\
                 # TYPE felix_actor_restarts_total counter"
            );
            for (actor, n) in &g.restarts {
                let _ = writeln!(
                    out,
                    "felix_actor_restarts_total{{actor=\"{}\"}} {n}",
                    esc(actor)
                );
            }
            let _ = writeln!(
                out,
                "# HELP felix_seam_ops_total Kernel seam operations.\n# TYPE felix_seam_ops_total counter\n\
                 # HELP felix_seam_op_errors_total Failed kernel seam operations.\n\
                 # TYPE felix_seam_op_errors_total counter\n\
                 # HELP felix_seam_op_seconds_sum Total time in kernel seam operations.\n\
                 # TYPE felix_seam_op_seconds_sum counter"
            );
            for ((actor, op), s) in &g.seam {
                let l = format!("actor=\"{}\",op=\"{}\"", esc(actor), esc(op));
                let _ = writeln!(out, "felix_seam_ops_total{{{l}}} {}", s.count);
                let _ = writeln!(out, "felix_seam_op_errors_total{{{l}}} {}", s.errors);
                let _ = writeln!(out, "felix_seam_op_seconds_sum{{{l}}} {}", s.seconds);
            }
            if !g.rejected.is_empty() {
                let _ = writeln!(
                    out,
                    "# HELP felix_dataplane_rejected_chains Chains programmed as drop-everything \
                     because the kernel refused them.\n# TYPE felix_dataplane_rejected_chains gauge"
                );
                for (actor, c) in &g.rejected {
                    let _ = writeln!(
                        out,
                        "felix_dataplane_rejected_chains{{actor=\"{}\"}} {}",
                        esc(actor),
                        c.len()
                    );
                }
            }
            g.families.render(&mut out);
            for text in g.published.values() {
                out.push_str(text);
            }
            (out, (g.collectors.clone(), g.post_render.clone()))
        };
        let (collectors, post) = collectors;
        for c in collectors {
            out.push_str(&c());
        }
        match post {
            Some(p) => p(out),
            None => out,
        }
    }

    /// Sets the last step of [`Metrics::render_prometheus`]: it receives the rendered text
    /// and returns what is served (the external-driver mode merges its driver's families).
    pub fn set_post_render(&self, post: PostRender) {
        self.inner.lock().post_render = Some(post);
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_block_is_rendered_and_replaced_by_its_next_publication() {
        let m = Metrics::new();
        m.publish("driver/x", "x_total 1\n".into());
        m.publish("driver/y", "y_total 2\n".into());
        m.publish("driver/x", "x_total 3\n".into());
        let text = m.render_prometheus();
        assert!(text.contains("x_total 3\n") && !text.contains("x_total 1"));
        assert!(text.contains("y_total 2\n"));
    }

    #[test]
    fn renders_upstream_families_and_seam_labels() {
        let m = Metrics::new();
        m.observe_apply(Duration::from_millis(20), false);
        m.observe_batch(300);
        m.record_seam_op(
            "driver/ipsets-v4",
            "restore",
            Duration::from_millis(1),
            false,
        );
        let text = m.render_prometheus();
        assert!(text.contains("felix_int_dataplane_apply_time_seconds_count 1"));
        assert!(text.contains("# TYPE felix_int_dataplane_apply_time_seconds summary"));
        assert!(text.contains("felix_int_dataplane_msg_batch_size{quantile=\"0.5\"} 300"));
        assert!(text.contains("felix_int_dataplane_failures 1"));
        assert!(text
            .contains("felix_seam_op_errors_total{actor=\"driver/ipsets-v4\",op=\"restore\"} 1"));
        let s = m.take_summary();
        assert_eq!((s.applies, s.failed), (1, 1));
        assert_eq!(m.take_summary().applies, 0);
    }
}
