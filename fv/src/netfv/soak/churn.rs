//! The churn driver: random datastore updates at a set rate, each one file
//! written (atomically) or removed, mirrored in the [`Model`] and the
//! [`FlowBook`] under one lock so the ground truth and the datastore never
//! disagree.
//!
//! Invariants: one update is one file write or removal; the model is
//! changed and the flow verdicts recorded *after* the file is in place (the
//! instant felix can first see it); stable workloads are never touched; the
//! rate is an upper bound (updates are spaced, never bursted to catch up).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::Rng;

use super::flows::FlowBook;
use super::lock;
use super::model::{name, policy_file, policy_yaml, Model, ACCESS, GROUPS};
use crate::netfv::Datastore;

/// Shared state of the datastore side of a soak.
pub struct Truth {
    /// The model (what the datastore holds).
    pub model: Mutex<Model>,
    /// The sampled flows' verdicts over time.
    pub flows: Mutex<FlowBook>,
}

/// The churn driver's controls.
#[derive(Debug, Default)]
pub struct ChurnControl {
    /// Updates per second times 1,000 (0: paused).
    pub milli_rate: AtomicU64,
    /// Set to end the driver.
    pub stop: AtomicBool,
    /// Updates made so far.
    pub updates: AtomicU64,
}

impl ChurnControl {
    /// Sets the rate (updates per second; 0 pauses).
    pub fn set_rate(&self, per_sec: f64) {
        self.milli_rate
            .store((per_sec * 1000.0) as u64, Ordering::Relaxed);
    }
}

/// Writes workload `i`'s endpoint file, or removes it when absent.
pub fn write_wep(ds: &Datastore, model: &Model, i: usize) -> Result<()> {
    let file = format!("wep-{}", name(i));
    if model.weps[i].present {
        ds.write(&file, &model.wep(i).yaml())
    } else {
        ds.remove(&file)
    }
}

/// Runs until `ctl.stop`: one random update per `1 / rate` seconds.
pub fn run(ds: &Datastore, truth: &Truth, ctl: &ChurnControl, mut rng: StdRng) -> Result<()> {
    let mut next = felix_actors::clock::real_now();
    while !ctl.stop.load(Ordering::Relaxed) {
        let rate = ctl.milli_rate.load(Ordering::Relaxed);
        if rate == 0 {
            std::thread::sleep(Duration::from_millis(20));
            next = felix_actors::clock::real_now();
            continue;
        }
        let now = felix_actors::clock::real_now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        next = now.max(next) + Duration::from_secs_f64(1000.0 / rate as f64);
        update(ds, truth, &mut rng)?;
        ctl.updates.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// One random update.
fn update(ds: &Datastore, truth: &Truth, rng: &mut StdRng) -> Result<()> {
    let mut model = lock(&truth.model);
    let churnable: Vec<usize> = (0..model.weps.len())
        .filter(|&i| !model.weps[i].stable)
        .collect();
    let present: Vec<usize> = churnable
        .iter()
        .copied()
        .filter(|&i| model.weps[i].present)
        .collect();
    let roll = rng.random_range(0..100);
    if roll < 25 || present.is_empty() {
        // Endpoint removed or added back; keep most of them present.
        let absent = churnable.len() - present.len();
        let add = absent > 0
            && (present.is_empty() || absent * 4 > churnable.len() || rng.random_bool(0.5));
        let pool: Vec<usize> = churnable
            .iter()
            .copied()
            .filter(|&i| model.weps[i].present != add)
            .collect();
        let i = pool[rng.random_range(0..pool.len())];
        model.weps[i].present = add;
        write_wep(ds, &model, i)?;
    } else if roll < 60 {
        // A label flipped on a present endpoint.
        let i = present[rng.random_range(0..present.len())];
        let w = &mut model.weps[i];
        match rng.random_range(0..3) {
            0 => w.group = rng.random_range(0..GROUPS),
            1 => w.access = rng.random_range(0..ACCESS),
            _ => w.quarantined = !w.quarantined,
        }
        write_wep(ds, &model, i)?;
    } else if roll < 85 {
        // An allow policy added or removed.
        let p = (rng.random_range(0..GROUPS), rng.random_range(0..ACCESS));
        let file = policy_file(p.0, p.1);
        if model.policies.remove(&p) {
            ds.remove(&file)?;
        } else {
            ds.write(&file, &policy_yaml(p.0, p.1))?;
            model.policies.insert(p);
        }
    } else {
        // The network set edited: one /32 in or out.
        let i = rng.random_range(0..model.weps.len());
        if !model.netset.remove(&i) {
            model.netset.insert(i);
        }
        ds.write("netset-trusted", &model.netset_yaml())?;
    }
    let at = felix_actors::clock::real_now();
    lock(&truth.flows).record(&model, at);
    Ok(())
}
