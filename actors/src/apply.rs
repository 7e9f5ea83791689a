//! One apply(): the phased request/response exchange the supervisor runs on each tick.
//!
//! Order (upstream's, with its IP-set → tables dependency kept per IP family; each step a set
//! of requests whose replies are all joined before the next step unless noted):
//! 1. needs-sync is cleared by the caller before this runs;
//! 2. **resolution** — every manager's `resolve_batch`, all replies joined, then the
//!    cross-manager messages delivered and joined;
//! 3. **programming** — `complete_deferred_work`, manager by manager, in registration order;
//! 4. refresh-timer and restart resyncs travel as the `resync` flag of each driver's first
//!    request in this apply;
//! 5. then two strands run side by side, joined before the apply returns:
//!    * per **lane** (IP family; [`crate::DriverSpec::in_lane`]): **IP sets** (creates,
//!      updates and member additions only), then **tables**, then **IP-set deletions** (the
//!      deferred step of the IP-set drivers: member removals, then undesired sets). Lanes run
//!      concurrently: the IPv6 tables need not wait for the IPv4 sets, which no IPv6 rule can
//!      reference. A step's observer span runs from the first lane starting it to the last
//!      finishing it. When an IP-set or *tables driver has no lane, they all run as one lane;
//!    * **VXLAN FDB**, then **routes and route rules** concurrently (upstream also programs
//!      the FDB while its IP-set goroutines run and starts the routes before waiting on them).
//!
//! Dependency rules (no press-on past a dependency):
//! * resolution failed (a reply missing) → nothing is programmed this apply: cross-manager
//!   state that must land first may be missing;
//! * a manager failing its programming pass does not stop the others or the drivers: what it
//!   wrote before failing is well-formed desired state (each write is atomic) and its remaining
//!   work is retried;
//! * any IP-set driver not clean/successful → the tables step of its lane is held (rules
//!   could reference a set that does not exist) and so are its lane's IP-set deletions;
//! * any tables driver not clean/successful → its lane's IP-set deletions are held (a rule
//!   may still reference a set about to be deleted);
//! * VXLAN FDB and routes do not depend on IP sets or tables and always run.
//!
//! Held steps still send a probe so drivers record queued resyncs and report dirtiness.
//!
//! Lane invariants (tests in `actors/tests/lanes.rs`): lanes do not wait on each other
//! (`each_lane_programs_its_tables_without_waiting_for_another_lanes_sets`); a failing IP-set
//! driver holds its own lane only (`a_failing_ip_set_driver_holds_only_the_tables_of_its_own_lane`);
//! a lane-less driver restores the single order
//! (`a_driver_without_a_lane_puts_every_set_before_every_table`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use futures_util::future::{join, join_all};
use parking_lot::Mutex;

use crate::driver::{DriverStep, Phase};
use crate::driver_actor::{DriverActor, DriverReply, DriverRequest};
use crate::manager::ApplyError;
use crate::manager_actor::{Complete, Cross, ManagerActor, ManagerFailure, Resolve};
use crate::seam::{FaultAction, FiredFault};

/// A step of the apply sequence, as reported to an [`ApplyObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyStep {
    /// Resolution pass (all replies joined at its end).
    Resolution,
    /// Programming pass.
    Programming,
    /// IP-set creates/updates.
    IpSets,
    /// VXLAN FDB.
    VxlanFdb,
    /// Route tables and rules (started at `StepStarted`, joined at `StepFinished`).
    Routes,
    /// *tables.
    Tables,
    /// Deferred IP-set deletions.
    IpSetDeletions,
}

/// What happened, reported synchronously to the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyEventKind {
    /// The apply began.
    Started,
    /// A step began.
    StepStarted(ApplyStep),
    /// A step's replies are all in.
    StepFinished(ApplyStep),
    /// The apply returned.
    Finished {
        /// Whether everything succeeded.
        ok: bool,
    },
}

/// One observer event of apply number `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyEvent {
    /// Apply sequence number, 1-based.
    pub seq: u64,
    /// What happened.
    pub kind: ApplyEventKind,
}

/// Hook receiving [`ApplyEvent`]s (tracing, tests).
pub type ApplyObserver = Arc<dyn Fn(&ApplyEvent) + Send + Sync>;

pub(crate) struct PlanManager<M: Clone + Send + 'static> {
    pub idx: usize,
    pub name: Arc<str>,
    pub addr: Addr<ManagerActor<M>>,
    pub full_rewrite: bool,
}

pub(crate) struct PlanDriver {
    pub idx: usize,
    pub phase: Phase,
    /// The driver's lane (see [`crate::DriverSpec`]).
    pub lane: Option<u8>,
    pub addr: Addr<DriverActor>,
    pub resync: bool,
    /// Backing off after failures: probed only (it records resyncs and reports
    /// dirtiness), never asked to work.
    pub backing_off: bool,
}

pub(crate) struct ApplyPlan<M: Clone + Send + 'static> {
    pub seq: u64,
    pub managers: Vec<PlanManager<M>>,
    pub drivers: Vec<PlanDriver>,
    pub observer: Option<ApplyObserver>,
    pub injected: Option<FiredFault>,
}

/// Result of one manager in one apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ManagerResult {
    Ok,
    Failed(ApplyError),
    Died(String),
}

pub(crate) struct ApplyOutcome {
    pub managers: Vec<(usize, ManagerResult)>,
    /// Final reply per driver that received at least one request.
    pub drivers: BTreeMap<usize, DriverReply>,
    pub ok: bool,
    /// Some tables driver failed, died or was held while dirty.
    pub tables_failed: bool,
    /// Why the apply was cut short, if it was.
    pub blocked: Option<String>,
    pub duration: Duration,
}

fn emit(obs: &Option<ApplyObserver>, seq: u64, kind: ApplyEventKind) {
    if let Some(o) = obs {
        o(&ApplyEvent { seq, kind });
    }
}

async fn send_step(
    drivers: Vec<&PlanDriver>,
    step: DriverStep,
    probe_only: bool,
) -> Vec<(usize, DriverReply)> {
    let futs = drivers.into_iter().map(|d| {
        let req = DriverRequest {
            step,
            resync: d.resync && step == DriverStep::Main,
            probe_only: probe_only || d.backing_off,
        };
        let addr = d.addr.clone();
        let idx = d.idx;
        async move {
            let reply = match addr.send(req).await {
                Ok(r) => r,
                Err(e) => DriverReply::Died {
                    reason: format!("driver mailbox: {e}"),
                },
            };
            (idx, reply)
        }
    });
    join_all(futs).await
}

/// Combines the replies of one driver's two calls into its final status.
fn merge(a: DriverReply, b: DriverReply) -> DriverReply {
    use DriverReply::*;
    match (a, b) {
        (d @ Died { .. }, _) | (_, d @ Died { .. }) => d,
        (f @ Failed { .. }, _) | (_, f @ Failed { .. }) => f,
        (Clean, Clean) => Clean,
        (x, y) => {
            let dirty = x.dirty() || y.dirty();
            if matches!(x, Skipped { .. }) || matches!(y, Skipped { .. }) {
                Skipped { dirty }
            } else {
                Applied { dirty }
            }
        }
    }
}

fn all_ok(replies: &[(usize, DriverReply)]) -> bool {
    replies.iter().all(|(_, r)| r.succeeded())
}

/// Whether the IP-set and *tables drivers run as a single lane: one of them has no lane, so
/// it may depend on any of the others. Shared by the apply and the supervisor's retry pacing.
pub(crate) fn one_lane(drivers: impl IntoIterator<Item = (Phase, Option<u8>)>) -> bool {
    drivers
        .into_iter()
        .any(|(phase, lane)| matches!(phase, Phase::IpSets | Phase::Tables) && lane.is_none())
}

/// The lanes the IP-set and *tables drivers run in: each distinct lane in order, or a single
/// lane-less pipeline (see [`one_lane`]).
fn lanes(drivers: &[PlanDriver]) -> Vec<Option<u8>> {
    if one_lane(drivers.iter().map(|d| (d.phase, d.lane))) {
        return vec![None];
    }
    let mut lanes: Vec<Option<u8>> = drivers
        .iter()
        .filter(|d| matches!(d.phase, Phase::IpSets | Phase::Tables))
        .map(|d| d.lane)
        .collect();
    lanes.sort_unstable();
    lanes.dedup();
    if lanes.is_empty() {
        lanes.push(None);
    }
    lanes
}

/// Reports a step run by several lanes as one span: `StepStarted` when the first lane starts
/// it, `StepFinished` when the last lane finishes it.
struct Spans {
    obs: Option<ApplyObserver>,
    seq: u64,
    lanes: usize,
    /// Per step: lanes that started it, lanes that finished it.
    counts: Mutex<Vec<(ApplyStep, usize, usize)>>,
}

impl Spans {
    fn new(obs: Option<ApplyObserver>, seq: u64, lanes: usize) -> Self {
        Self {
            obs,
            seq,
            lanes,
            counts: Mutex::new(Vec::new()),
        }
    }

    fn update(&self, step: ApplyStep, start: bool) {
        let kind = {
            let mut counts = self.counts.lock();
            let i = match counts.iter().position(|c| c.0 == step) {
                Some(i) => i,
                None => {
                    counts.push((step, 0, 0));
                    counts.len() - 1
                }
            };
            let c = &mut counts[i];
            if start {
                c.1 += 1;
                (c.1 == 1).then_some(ApplyEventKind::StepStarted(step))
            } else {
                c.2 += 1;
                (c.2 == self.lanes).then_some(ApplyEventKind::StepFinished(step))
            }
        };
        if let Some(kind) = kind {
            emit(&self.obs, self.seq, kind);
        }
    }

    fn start(&self, step: ApplyStep) {
        self.update(step, true);
    }

    fn finish(&self, step: ApplyStep) {
        self.update(step, false);
    }
}

/// What one lane's IP-set and *tables drivers replied.
struct LaneOutcome {
    lane: Option<u8>,
    ipsets: Vec<(usize, DriverReply)>,
    ipsets_ok: bool,
    sets_backing_off: bool,
    tables: Vec<(usize, DriverReply)>,
    dels: Vec<(usize, DriverReply)>,
}

/// One lane: its IP sets, then its tables (held if a set failed), then its IP-set deletions
/// (held if a table failed).
async fn run_lane(lane: Option<u8>, drivers: Vec<&PlanDriver>, spans: &Spans) -> LaneOutcome {
    let of = |p: Phase| -> Vec<&PlanDriver> {
        drivers.iter().copied().filter(|d| d.phase == p).collect()
    };
    let sets = of(Phase::IpSets);
    let sets_backing_off = sets.iter().any(|d| d.backing_off);
    spans.start(ApplyStep::IpSets);
    let ipsets = send_step(sets.clone(), DriverStep::Main, false).await;
    let ipsets_ok = all_ok(&ipsets);
    spans.finish(ApplyStep::IpSets);
    spans.start(ApplyStep::Tables);
    let tables = send_step(of(Phase::Tables), DriverStep::Main, !ipsets_ok).await;
    let tables_ok = ipsets_ok && all_ok(&tables);
    spans.finish(ApplyStep::Tables);
    spans.start(ApplyStep::IpSetDeletions);
    let dels = send_step(sets, DriverStep::Deletions, !tables_ok).await;
    spans.finish(ApplyStep::IpSetDeletions);
    LaneOutcome {
        lane,
        sets_backing_off,
        ipsets,
        ipsets_ok,
        tables,
        dels,
    }
}

/// Runs one apply; see the module docs for order and dependency rules.
pub(crate) async fn run_apply<M: Clone + Send + 'static>(plan: ApplyPlan<M>) -> ApplyOutcome {
    let start = crate::clock::real_now();
    let seq = plan.seq;
    let obs = plan.observer.clone();
    emit(&obs, seq, ApplyEventKind::Started);
    let mut out = ApplyOutcome {
        managers: Vec::new(),
        drivers: BTreeMap::new(),
        ok: true,
        tables_failed: false,
        blocked: None,
        duration: Duration::ZERO,
    };
    if let Some(f) = plan.injected {
        match f.action {
            FaultAction::Delay => actix_rt::time::sleep(f.delay).await,
            FaultAction::Error | FaultAction::Panic => {
                out.ok = false;
                out.blocked = Some("injected apply failure".to_string());
                out.duration = start.elapsed();
                emit(&obs, seq, ApplyEventKind::Finished { ok: false });
                return out;
            }
        }
    }

    // Resolution pass: every reply joined before anything is programmed.
    emit(
        &obs,
        seq,
        ApplyEventKind::StepStarted(ApplyStep::Resolution),
    );
    let replies = join_all(
        plan.managers
            .iter()
            .map(|m| m.addr.send(Resolve::<M>::new())),
    )
    .await;
    let mut cross = Vec::new();
    let mut failed: BTreeMap<usize, ManagerResult> = BTreeMap::new();
    for (m, r) in plan.managers.iter().zip(replies) {
        match r {
            Ok(Ok(msgs)) => cross.extend(msgs.into_iter().map(|c| (Arc::clone(&m.name), c))),
            Ok(Err(ManagerFailure::Error(e))) => {
                failed.insert(m.idx, ManagerResult::Failed(e));
            }
            Ok(Err(ManagerFailure::Panicked(t))) => {
                failed.insert(m.idx, ManagerResult::Died(t));
            }
            Err(e) => {
                failed.insert(
                    m.idx,
                    ManagerResult::Died(format!("{}: mailbox: {e}", m.name)),
                );
            }
        }
    }
    let mut deliveries = Vec::new();
    for (from, c) in cross {
        match plan.managers.iter().find(|m| *m.name == c.to) {
            Some(target) => deliveries.push((
                target.idx,
                target.name.clone(),
                target.addr.send(Cross {
                    from: from.to_string(),
                    msg: c.payload,
                }),
            )),
            None => {
                tracing::warn!(from = %from, to = %c.to, "cross-manager message to unknown manager dropped")
            }
        }
    }
    let delivered = join_all(
        deliveries
            .into_iter()
            .map(|(idx, name, fut)| async move { (idx, name, fut.await) }),
    )
    .await;
    for (idx, name, r) in delivered {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(ManagerFailure::Error(e))) => {
                failed.insert(idx, ManagerResult::Failed(e));
            }
            Ok(Err(ManagerFailure::Panicked(t))) => {
                failed.insert(idx, ManagerResult::Died(t));
            }
            Err(e) => {
                failed.insert(idx, ManagerResult::Died(format!("{name}: mailbox: {e}")));
            }
        }
    }
    emit(
        &obs,
        seq,
        ApplyEventKind::StepFinished(ApplyStep::Resolution),
    );
    if !failed.is_empty() {
        out.ok = false;
        out.blocked = Some("resolution pass incomplete; programming held off".to_string());
        out.managers = failed.into_iter().collect();
        out.duration = start.elapsed();
        emit(&obs, seq, ApplyEventKind::Finished { ok: false });
        return out;
    }

    // Programming pass, manager by manager.
    emit(
        &obs,
        seq,
        ApplyEventKind::StepStarted(ApplyStep::Programming),
    );
    for m in &plan.managers {
        let r = m
            .addr
            .send(Complete {
                full_rewrite: m.full_rewrite,
                apply_seq: seq,
            })
            .await;
        let res = match r {
            Ok(Ok(())) => ManagerResult::Ok,
            Ok(Err(ManagerFailure::Error(e))) => ManagerResult::Failed(e),
            Ok(Err(ManagerFailure::Panicked(t))) => ManagerResult::Died(t),
            Err(e) => ManagerResult::Died(format!("{}: mailbox: {e}", m.name)),
        };
        if res != ManagerResult::Ok {
            out.ok = false;
        }
        out.managers.push((m.idx, res));
    }
    emit(
        &obs,
        seq,
        ApplyEventKind::StepFinished(ApplyStep::Programming),
    );

    let of =
        |p: Phase| -> Vec<&PlanDriver> { plan.drivers.iter().filter(|d| d.phase == p).collect() };
    let lanes = lanes(&plan.drivers);
    let spans = Spans::new(obs.clone(), seq, lanes.len());
    let pipelines = join_all(lanes.iter().map(|&lane| {
        let members = plan
            .drivers
            .iter()
            .filter(|d| lane.is_none() || d.lane == lane)
            .collect();
        run_lane(lane, members, &spans)
    }));
    // Upstream's order around the IP sets: the FDB is programmed while the sets load, then
    // the routes start and overlap everything else.
    let fdb_then_routes = async {
        emit(&obs, seq, ApplyEventKind::StepStarted(ApplyStep::VxlanFdb));
        let fdb = send_step(of(Phase::VxlanFdb), DriverStep::Main, false).await;
        emit(&obs, seq, ApplyEventKind::StepFinished(ApplyStep::VxlanFdb));
        emit(&obs, seq, ApplyEventKind::StepStarted(ApplyStep::Routes));
        let mut route_drivers = of(Phase::Routes);
        route_drivers.extend(of(Phase::RouteRules));
        let routes = send_step(route_drivers, DriverStep::Main, false).await;
        emit(&obs, seq, ApplyEventKind::StepFinished(ApplyStep::Routes));
        (fdb, routes)
    };
    let (lane_outcomes, (fdb, routes)) = join(pipelines, fdb_then_routes).await;

    let mut replies: Vec<(usize, DriverReply)> = Vec::new();
    replies.extend(fdb);
    replies.extend(routes);
    for lane in lane_outcomes {
        // A tables driver held only because an IP-set driver of its lane is backing off
        // after a failure was not tried: that apply does not count towards the fail-closed
        // exit (the IP-set driver's own tries do, one per backoff).
        out.tables_failed |= lane.tables.iter().any(|(_, r)| {
            !r.succeeded()
                && r.dirty()
                && !(lane.sets_backing_off && matches!(r, DriverReply::Skipped { .. }))
        });
        let blocked = if !lane.ipsets_ok {
            Some("IP-set phase failed; tables and IP-set deletions held")
        } else if !all_ok(&lane.tables) {
            Some("tables phase failed; IP-set deletions held")
        } else {
            None
        };
        if let (Some(why), None) = (blocked, &out.blocked) {
            out.blocked = Some(match lane.lane {
                Some(l) => format!("{why} (lane {l})"),
                None => why.to_string(),
            });
        }
        replies.extend(lane.tables);
        let mut ipset_main: BTreeMap<usize, DriverReply> = lane.ipsets.into_iter().collect();
        for (idx, del) in lane.dels {
            let merged = match ipset_main.remove(&idx) {
                Some(main) => merge(main, del),
                None => del,
            };
            replies.push((idx, merged));
        }
        replies.extend(ipset_main);
    }
    for (idx, r) in replies {
        if !r.succeeded() {
            out.ok = false;
        }
        out.drivers.insert(idx, r);
    }
    out.duration = start.elapsed();
    emit(&obs, seq, ApplyEventKind::Finished { ok: out.ok });
    out
}
