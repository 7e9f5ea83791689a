//! The driver contract: declarative desired state in, kernel reconciliation on apply.
//!
//! A driver owns one kind of kernel state (the IPv4 IP sets, the filter table, a routing
//! table...). Managers never call it: they write its [`DesiredInput`], a shared versioned
//! cell. The runtime builds every driver instance with its [`ActorSeam`] (the factory receives
//! it), through which every kernel operation must pass; during an apply it calls
//! [`Driver::apply`] with the current desired value.
//!
//! Contract:
//! * **Declarative.** `apply` gets the whole desired value; the driver diffs it against what
//!   it believes the kernel holds and programs the difference. Large inputs may carry their
//!   own change tracking (e.g. per-key versions) so the diff stays proportional to the change.
//! * **Resync.** [`Driver::queue_resync`] asks the next `apply` to read the kernel back and
//!   reconcile everything (mark-and-sweep of its own resources). A freshly built driver has an
//!   empty cache, and the runtime always queues a resync before its first apply.
//! * **Dirty.** [`Driver::is_dirty`] reports pending work the driver knows about (a queued
//!   resync, work that failed last time). The runtime adds input changes on top: a driver is
//!   dirty while its input version differs from the last version it applied successfully.
//! * **Failure.** On error the driver keeps the failed work pending so the next apply retries
//!   it; it should still attempt unrelated resources (minimise blast radius). Errors stay typed
//!   ([`DriverError::Op`] names the operation, the [`FailureKind`] and keeps the cause) so the
//!   supervisor can log the kernel's own message once per distinct failure and `/status` can
//!   show the last one per driver. A driver that
//!   can no longer trust its own memory returns [`DriverError::NeedsRestart`] (or panics): the
//!   runtime then rebuilds it from its factory, which re-reads the full desired input.
//! * **Threading.** `apply`, `apply_deletions` run on the blocking pool, never on an arbiter.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::readback::ReadBack;
use crate::seam::{ActorSeam, Injected};

/// Where a driver runs in the apply sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// IP set creates/updates (deletions deferred to [`Phase::IpSetDeletions`]).
    IpSets,
    /// VXLAN FDB and neighbour entries.
    VxlanFdb,
    /// Route tables (run in parallel with `RouteRules` and overlapping `Tables`).
    Routes,
    /// Policy routing rules (parallel with `Routes`).
    RouteRules,
    /// iptables / nftables tables.
    Tables,
    /// The deferred-deletion step of `IpSets` drivers; not a registration phase.
    IpSetDeletions,
}

/// What kind of failure a driver operation met (shown in `/status` and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// An armed fault made the operation fail without running it.
    Injected,
    /// The kernel or the tool refused the operation (non-zero exit, syscall error).
    Refused,
    /// The operation could not be started (missing tool, socket or syscall unavailable).
    Unavailable,
    /// The kernel's answer could not be understood.
    Unreadable,
}

/// Why a driver apply did not complete.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A kernel operation failed; the work stays pending.
    #[error("{op}: {source}")]
    Op {
        /// The seam operation that failed (e.g. `nft-apply`, `restore`).
        op: String,
        /// What kind of failure.
        kind: FailureKind,
        /// The operation's own error (command, exit status and the tool's message, or the OS
        /// error).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The driver's memory cannot be trusted: rebuild it from its factory.
    #[error("driver needs restart: {reason}")]
    NeedsRestart {
        /// Human-readable cause.
        reason: String,
    },
}

impl DriverError {
    /// A failed operation `op` of `kind` caused by `source`.
    pub fn op(
        op: impl Into<String>,
        kind: FailureKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        DriverError::Op {
            op: op.into(),
            kind,
            source: source.into(),
        }
    }

    /// The failed operation's name, if this is an operation failure.
    pub fn operation(&self) -> Option<&str> {
        match self {
            DriverError::Op { op, .. } => Some(op),
            DriverError::NeedsRestart { .. } => None,
        }
    }

    /// The failure's kind, if this is an operation failure.
    pub fn kind(&self) -> Option<FailureKind> {
        match self {
            DriverError::Op { kind, .. } => Some(*kind),
            DriverError::NeedsRestart { .. } => None,
        }
    }
}

impl From<Injected> for DriverError {
    fn from(e: Injected) -> Self {
        DriverError::Op {
            op: e.op.clone(),
            kind: FailureKind::Injected,
            source: Box::new(e),
        }
    }
}

/// A driver; see the module docs.
pub trait Driver: Send + 'static {
    /// The declarative desired state a manager writes.
    type Desired: Send + 'static;

    /// Reconciles the kernel with `desired` (creates/updates; for `IpSets` drivers, deletions
    /// wait for [`Driver::apply_deletions`]).
    fn apply(&mut self, desired: &Self::Desired) -> Result<(), DriverError>;

    /// Deferred deletions, called after the tables phase. Only `IpSets` drivers get this call.
    fn apply_deletions(&mut self, desired: &Self::Desired) -> Result<(), DriverError> {
        let _ = desired;
        Ok(())
    }

    /// Requests a full read-back-and-reconcile on the next apply.
    fn queue_resync(&mut self);

    /// Pending work known to the driver itself.
    fn is_dirty(&self) -> bool;

    /// Answers a read-back itself: what it finds in the kernel and what a resync now would
    /// change, without changing anything. `None` (the default) lets the runtime probe a fresh
    /// instance on a recording seam (see [`crate::readback`]), which suits every driver whose
    /// writes return nothing the driver needs afterwards.
    fn read_back(&mut self, desired: &Self::Desired) -> Option<Result<ReadBack, DriverError>> {
        let _ = desired;
        None
    }
}

struct Slot<S> {
    value: S,
    version: u64,
}

/// Shared, versioned desired-state cell written by managers and read by one driver.
///
/// Invariant: every [`DesiredInput::write`] bumps the version, so a driver whose last
/// successfully applied version differs is dirty. The cell outlives driver restarts: a rebuilt
/// driver is re-pushed the full desired state simply by reading it.
pub struct DesiredInput<S> {
    slot: Arc<Mutex<Slot<S>>>,
}

impl<S> Clone for DesiredInput<S> {
    fn clone(&self) -> Self {
        Self {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<S> std::fmt::Debug for DesiredInput<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesiredInput")
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl<S> DesiredInput<S> {
    /// A cell holding `initial` at version 0.
    pub fn new(initial: S) -> Self {
        Self {
            slot: Arc::new(Mutex::new(Slot {
                value: initial,
                version: 0,
            })),
        }
    }

    /// Mutates the desired state and bumps the version.
    pub fn write<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut g = self.slot.lock();
        g.version += 1;
        f(&mut g.value)
    }

    /// Reads the desired state.
    pub fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.slot.lock().value)
    }

    /// Current version.
    pub fn version(&self) -> u64 {
        self.slot.lock().version
    }

    /// Runs `f` with the value and its version under the lock.
    pub(crate) fn with_versioned<R>(&self, f: impl FnOnce(&S, u64) -> R) -> R {
        let g = self.slot.lock();
        f(&g.value, g.version)
    }
}

/// Which call the runtime makes on a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DriverStep {
    Main,
    Deletions,
}

/// Object-safe view of a driver bound to its input.
pub(crate) trait ErasedDriver: Send {
    fn run(&mut self, step: DriverStep) -> Result<(), DriverError>;
    fn queue_resync(&mut self);
    fn is_dirty(&self, step: DriverStep) -> bool;
    /// The driver's own read-back, if it answers one.
    fn read_back(&mut self) -> Option<Result<ReadBack, DriverError>>;
    /// The steps one apply runs on this driver, in order.
    fn steps(&self) -> &'static [DriverStep];
}

struct Bound<D: Driver> {
    driver: D,
    input: DesiredInput<D::Desired>,
    applied: Option<u64>,
    deletions_applied: Option<u64>,
    two_step: bool,
}

impl<D: Driver> ErasedDriver for Bound<D> {
    fn run(&mut self, step: DriverStep) -> Result<(), DriverError> {
        let driver = &mut self.driver;
        let (res, version) = self.input.with_versioned(|desired, version| {
            let r = match step {
                DriverStep::Main => driver.apply(desired),
                DriverStep::Deletions => driver.apply_deletions(desired),
            };
            (r, version)
        });
        if res.is_ok() {
            match step {
                DriverStep::Main => {
                    self.applied = Some(version);
                    if !self.two_step {
                        self.deletions_applied = Some(version);
                    }
                }
                DriverStep::Deletions => self.deletions_applied = Some(version),
            }
        }
        res
    }

    fn queue_resync(&mut self) {
        self.driver.queue_resync();
    }

    fn read_back(&mut self) -> Option<Result<ReadBack, DriverError>> {
        let driver = &mut self.driver;
        self.input.read(|desired| driver.read_back(desired))
    }

    fn steps(&self) -> &'static [DriverStep] {
        if self.two_step {
            &[DriverStep::Main, DriverStep::Deletions]
        } else {
            &[DriverStep::Main]
        }
    }

    fn is_dirty(&self, step: DriverStep) -> bool {
        let v = Some(self.input.version());
        let input_dirty = match step {
            DriverStep::Main => self.applied != v,
            DriverStep::Deletions => self.deletions_applied != v,
        };
        input_dirty || self.driver.is_dirty()
    }
}

/// Factory producing fresh, memory-less driver instances bound to one input, each given the
/// driver's seam.
pub(crate) type ErasedFactory = Arc<dyn Fn(&ActorSeam) -> Box<dyn ErasedDriver> + Send + Sync>;

/// Registration of one driver: stable name, phase, lane, input and factory.
///
/// A **lane** groups the IP-set and *tables drivers whose state can refer to each other (one
/// per IP family: an IPv6 rule can only match an IPv6 set). The apply orders IP sets before
/// tables before IP-set deletions within a lane and runs the lanes side by side; a driver
/// without a lane belongs to every lane, which then run as one (see [`crate::apply`]).
#[derive(Clone)]
pub struct DriverSpec {
    pub(crate) name: String,
    pub(crate) phase: Phase,
    pub(crate) lane: Option<u8>,
    pub(crate) factory: ErasedFactory,
    pub(crate) ops: Vec<&'static str>,
}

impl std::fmt::Debug for DriverSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverSpec")
            .field("name", &self.name)
            .field("phase", &self.phase)
            .field("lane", &self.lane)
            .finish_non_exhaustive()
    }
}

impl DriverSpec {
    /// Registers driver `name` (e.g. `driver/ipsets-v4`) in `phase`, reading `input`; the
    /// runtime calls `factory` with the driver's seam at start and on every restart.
    pub fn new<D, F>(name: &str, phase: Phase, input: DesiredInput<D::Desired>, factory: F) -> Self
    where
        D: Driver,
        F: Fn(&ActorSeam) -> D + Send + Sync + 'static,
    {
        let two_step = phase == Phase::IpSets;
        let factory: ErasedFactory = Arc::new(move |seam: &ActorSeam| {
            Box::new(Bound {
                driver: factory(seam),
                input: input.clone(),
                applied: None,
                deletions_applied: None,
                two_step,
            }) as Box<dyn ErasedDriver>
        });
        Self {
            name: name.to_string(),
            phase,
            lane: None,
            factory,
            ops: Vec::new(),
        }
    }

    /// Puts the driver in `lane` (e.g. its IP version): its IP-set and *tables ordering
    /// then only waits on drivers of the same lane.
    pub fn in_lane(mut self, lane: u8) -> Self {
        self.lane = Some(lane);
        self
    }

    /// Declares the kernel operations the driver runs through its seam (what a fault can
    /// target besides `apply` and `*`; see `FaultRegistry`).
    pub fn with_ops(mut self, ops: &[&'static str]) -> Self {
        self.ops.extend_from_slice(ops);
        self
    }

    /// The driver's stable name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The driver's lane, if it has one.
    pub fn lane(&self) -> Option<u8> {
        self.lane
    }
}
