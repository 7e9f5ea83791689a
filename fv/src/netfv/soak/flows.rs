//! The sampled flows and, per flow, when the model last changed its verdict:
//! the ground truth the probes are judged against.
//!
//! Invariants: a flow's history starts at the soak's start with the initial
//! model's verdict and only records transitions (alternating verdicts, in
//! time order); a probe is judged only when the verdict held for its whole
//! duration and became due (see [`super::timeline::Timeline::due`]) before
//! it started; everything else is counted as not judged, never as a pass.

use std::collections::VecDeque;
use std::time::Instant;

use rand::seq::IndexedRandom;
use rand::Rng;

use super::model::Model;

/// A flow: a new TCP connection from workload `src` to workload `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Client workload index.
    pub src: usize,
    /// Server workload index.
    pub dst: usize,
    /// Over IPv6 (else IPv4).
    pub v6: bool,
}

/// How long transitions are remembered (probes are judged well within it).
const KEEP: std::time::Duration = std::time::Duration::from_secs(120);

/// Sampled flows and their verdict histories.
#[derive(Debug)]
pub struct FlowBook {
    flows: Vec<Flow>,
    history: Vec<VecDeque<(Instant, bool)>>,
}

/// The verdict a probe is judged against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the flow must pass.
    pub allowed: bool,
    /// Since when the model has said so.
    pub since: Instant,
}

impl FlowBook {
    /// `n` distinct random flows between different workloads, with the
    /// verdicts of `model` at `start`.
    pub fn sample(model: &Model, n: usize, rng: &mut impl Rng, start: Instant) -> FlowBook {
        let w = model.weps.len();
        let mut flows: Vec<Flow> = Vec::new();
        let max = 2 * w * w.saturating_sub(1);
        while flows.len() < n.min(max) {
            let f = Flow {
                src: rng.random_range(0..w),
                dst: rng.random_range(0..w),
                v6: rng.random_bool(0.3),
            };
            if f.src != f.dst && !flows.contains(&f) {
                flows.push(f);
            }
        }
        let history = flows
            .iter()
            .map(|f| VecDeque::from([(start, model.allowed(f.src, f.dst, f.v6))]))
            .collect();
        FlowBook { flows, history }
    }

    /// Records the verdicts of `model`, changed at `at`.
    pub fn record(&mut self, model: &Model, at: Instant) {
        for (f, h) in self.flows.iter().zip(&mut self.history) {
            let v = model.allowed(f.src, f.dst, f.v6);
            if h.back().map(|&(_, b)| b) != Some(v) {
                h.push_back((at, v));
            }
            while h.len() > 2 && h[1].0 + KEEP < at {
                h.pop_front();
            }
        }
    }

    /// The flows.
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    /// The current verdict of flow `i`.
    pub fn now(&self, i: usize) -> bool {
        self.history[i].back().is_some_and(|&(_, v)| v)
    }

    /// The verdict of flow `i` over `[from, to]` if it did not change in
    /// that span.
    pub fn verdict(&self, i: usize, from: Instant, to: Instant) -> Option<Verdict> {
        let h = &self.history[i];
        let pos = h.iter().rposition(|&(t, _)| t <= from)?;
        if h.get(pos + 1).is_some_and(|&(t, _)| t <= to) {
            return None;
        }
        let (since, allowed) = h[pos];
        Some(Verdict { allowed, since })
    }

    /// Flow `i`'s recorded transitions, for reports.
    pub fn history(&self, i: usize) -> Vec<(Instant, bool)> {
        self.history[i].iter().copied().collect()
    }

    /// Up to `n` random flows whose current verdict is `allowed`.
    pub fn pick(&self, allowed: bool, n: usize, rng: &mut impl Rng) -> Vec<usize> {
        let candidates: Vec<usize> = (0..self.flows.len())
            .filter(|&i| self.now(i) == allowed)
            .collect();
        candidates.choose_multiple(rng, n).copied().collect()
    }
}
