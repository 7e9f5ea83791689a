//! The runner: drives a fresh [`CalcGraph`] through every expansion of a
//! test under every flush strategy.
//!
//! Every message the graph emits is applied to a [`DataplaneView`], whose
//! `apply` checks the flush-order contract, so every run checks ordering.
//! On top of the per-state expectations the runner checks that:
//! * `InSync` is forwarded exactly once, only after the datastore said so,
//!   and as the last message of its flush (re-reporting in-sync from the
//!   datastore must not produce a second one);
//! * after a final teardown to an empty datastore (appended to every run
//!   except flush-at-end, whose only check is the last state) the view
//!   holds nothing at all: no leaked IP sets, members, policies,
//!   profiles, endpoints or pass-through state.

use felix::calc::view::{payload_name, DataplaneView};
use felix::calc::{CalcGraph, GraphOptions};
use felix::cli::calc::diff_states;
use felix::model::{SyncStatus, Update};
use felix_proto::to_dataplane::Payload;

use super::expand::{expansions, Step};
use super::expect::{check_empty, Digest};
use super::state::{State, Test};

/// The node the graph computes for; endpoints of other nodes are remote.
pub const LOCAL_HOST: &str = "node1";

/// When the runner flushes the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStrategy {
    /// After every single update.
    AfterEachUpdate,
    /// After every update, then feeds the same update again and flushes.
    AfterEachUpdateTwice,
    /// After each state's updates.
    AfterEachState,
    /// Once, at the end (only the last state is checked).
    AtEnd,
}

impl FlushStrategy {
    /// Every strategy; [`run_test`] uses only the first when expansion is
    /// disabled.
    pub const ALL: [FlushStrategy; 4] = [
        FlushStrategy::AfterEachUpdate,
        FlushStrategy::AfterEachUpdateTwice,
        FlushStrategy::AfterEachState,
        FlushStrategy::AtEnd,
    ];
}

/// Outcome of [`run_test`].
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Number of (expansion, strategy) runs.
    pub runs: usize,
    /// Messages emitted over all runs.
    pub messages: usize,
    /// One entry per failed run.
    pub failures: Vec<String>,
}

struct Driver {
    graph: CalcGraph,
    view: DataplaneView,
    status_sent: bool,
    in_sync_msgs: usize,
    messages: usize,
    /// The view of an empty datastore under these options.
    baseline: Digest,
}

/// What a graph built with `options` shows for an empty datastore.
fn baseline(options: GraphOptions) -> Digest {
    if options == GraphOptions::default() {
        return Digest::default();
    }
    let mut g = CalcGraph::with_options(LOCAL_HOST, options);
    g.on_status(SyncStatus::InSync);
    let mut v = DataplaneView::new();
    for p in g.flush() {
        // A contract violation here shows up again in the run itself.
        let _ = v.apply(&p);
    }
    Digest::of_view(&v)
}

impl Driver {
    fn new(options: GraphOptions) -> Driver {
        Driver {
            graph: CalcGraph::with_options(LOCAL_HOST, options),
            view: DataplaneView::new(),
            status_sent: false,
            in_sync_msgs: 0,
            messages: 0,
            baseline: baseline(options),
        }
    }

    fn in_sync(&mut self) {
        self.graph.on_status(SyncStatus::InSync);
        self.status_sent = true;
    }

    fn flush(&mut self) -> Result<(), String> {
        let out = self.graph.flush();
        self.apply_all(&out)
    }

    fn apply_all(&mut self, out: &[Payload]) -> Result<(), String> {
        self.messages += out.len();
        for (i, p) in out.iter().enumerate() {
            if let Payload::InSync(_) = p {
                self.in_sync_msgs += 1;
                if !self.status_sent {
                    return Err("InSync emitted before the datastore was in sync".into());
                }
                if self.in_sync_msgs > 1 {
                    return Err("InSync emitted more than once".into());
                }
                if i + 1 != out.len() {
                    return Err(format!(
                        "InSync is not the last message of its flush (followed by {})",
                        payload_name(&out[i + 1])
                    ));
                }
            }
            self.view
                .apply(p)
                .map_err(|e| format!("message {i} of the flush ({}): {e}", payload_name(p)))?;
        }
        Ok(())
    }

    fn feed(&mut self, u: &Update, strategy: FlushStrategy) -> Result<(), String> {
        self.graph.on_update(u.clone());
        match strategy {
            FlushStrategy::AfterEachUpdate | FlushStrategy::AfterEachUpdateTwice => {
                if !self.status_sent {
                    self.in_sync();
                }
                self.flush()?;
                if strategy == FlushStrategy::AfterEachUpdateTwice {
                    self.graph.on_update(u.clone());
                    self.flush()?;
                }
            }
            FlushStrategy::AfterEachState | FlushStrategy::AtEnd => {}
        }
        Ok(())
    }

    /// End of a checked state: make sure in-sync has been reported (and
    /// report it again, which must be a no-op), flush, check.
    fn end_state(&mut self, state: &State) -> Result<(), String> {
        self.in_sync();
        self.flush()?;
        if self.in_sync_msgs != 1 {
            return Err(format!("{} InSync messages, expected 1", self.in_sync_msgs));
        }
        if state.kvs.is_empty() {
            check_empty(&self.view, &self.baseline)?;
            if self.baseline != Digest::default() {
                // An empty state's expectation is written for the default
                // graph; the baseline check above is the whole check.
                return Ok(());
            }
        }
        state.expect.check(&self.view)
    }
}

fn run_one(
    steps: &[Step],
    strategy: FlushStrategy,
    options: GraphOptions,
) -> Result<usize, String> {
    let mut d = Driver::new(options);
    let mut steps: Vec<Step> = steps.to_vec();
    if strategy != FlushStrategy::AtEnd {
        if let Some(last) = steps.last() {
            let teardown = State::empty().named("teardown");
            steps.push(Step {
                updates: teardown.deltas_from(&last.state),
                state: teardown,
            });
        }
    }
    for (i, step) in steps.iter().enumerate() {
        let ctx = |e: String| format!("step {i} (state {:?}): {e}", step.state.name);
        for u in &step.updates {
            d.feed(u, strategy)
                .map_err(|e| ctx(format!("after update {}: {e}", u.key)))?;
        }
        if strategy != FlushStrategy::AtEnd {
            d.end_state(&step.state).map_err(ctx)?;
        }
    }
    if strategy == FlushStrategy::AtEnd {
        let last = steps
            .last()
            .map(|s| s.state.clone())
            .unwrap_or_else(State::empty);
        d.end_state(&last)
            .map_err(|e| format!("at end (state {:?}): {e}", last.name))?;
    }
    Ok(d.messages)
}

/// Runs every expansion of `test` under every flush strategy.
pub fn run_test(test: &Test) -> RunReport {
    let mut report = RunReport::default();
    let strategies: &[FlushStrategy] = if super::expand::expansion_disabled() {
        &FlushStrategy::ALL[..1]
    } else {
        &FlushStrategy::ALL
    };
    for exp in expansions(&test.states) {
        for &strategy in strategies {
            report.runs += 1;
            match run_one(&exp.steps, strategy, test.options) {
                Ok(n) => report.messages += n,
                Err(e) => report
                    .failures
                    .push(format!("{} / {} / {strategy:?}: {e}", test.name, exp.name)),
            }
        }
    }
    report
}

/// Runs a test and panics with every failure.
pub fn assert_passes(test: &Test) -> RunReport {
    let report = run_test(test);
    if !report.failures.is_empty() {
        panic!(
            "{} of {} runs of {} failed:\n{}",
            report.failures.len(),
            report.runs,
            test.name,
            report.failures.join("\n\n")
        );
    }
    report
}

/// `felix calc --stream` semantics on a sequence of states, through the
/// library: the difference between consecutive complete states (as
/// [`diff_states`] computes it), in-sync after the first state, a flush
/// after each state, every message applied to a contract-checking view.
/// Returns the view's `felix calc` JSON after each state.
pub fn calc_stream(states: &[State]) -> Result<Vec<serde_json::Value>, String> {
    let mut d = Driver::new(GraphOptions::default());
    let mut prev = std::collections::BTreeMap::new();
    let mut lines = Vec::new();
    for (i, s) in states.iter().enumerate() {
        let next = s.as_map();
        d.graph.on_updates(diff_states(&prev, &next));
        if i == 0 {
            d.in_sync();
        }
        d.flush()
            .map_err(|e| format!("state {i} ({}): {e}", s.name))?;
        lines.push(d.view.to_json(i));
        prev = next;
    }
    Ok(lines)
}
