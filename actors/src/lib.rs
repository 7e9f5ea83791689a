//! felix-actors: the actor runtime of the felix-rs dataplane.
//!
//! * [`manager`] / [`driver`] — the contracts: managers turn calc-graph messages into
//!   declarative desired state (no kernel access, by construction); drivers reconcile the
//!   kernel with that state, every kernel call going through a [`seam`].
//! * [`supervisor`] — the supervisor actor: fan-out, throttled phased applies ([`apply`]),
//!   supervision with real restarts and replay, fail-closed [`supervisor::Fatal`] outcome.
//! * [`admin`], [`health`], [`metrics`], [`status`] — the admin socket (INTERFACES.md §4),
//!   health port, Prometheus metrics and the status record.
//! * [`http`], [`server`] — the small HTTP/1.1 server/client they use.
//! * [`clock`] — the injected clock timing logic reads (tests drive a manual one).
//!
//! The runtime is generic over the update message type `M: Clone + Send + 'static`; the
//! daemon instantiates it with the calc graph's dataplane messages.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod apply;
pub mod clock;
pub mod driver;
mod driver_actor;
pub mod families;
pub mod health;
pub mod http;
pub mod manager;
mod manager_actor;
pub mod metrics;
pub mod prometheus;
pub mod readback;
pub mod seam;
pub mod server;
pub mod status;
pub mod supervisor;
pub mod timings;

pub use admin::{admin_request, start_admin_server, AdminContext, DataplaneView};
pub use apply::{ApplyEvent, ApplyEventKind, ApplyObserver, ApplyStep};
pub use driver::{DesiredInput, Driver, DriverError, DriverSpec, FailureKind, Phase};
pub use health::{
    start_health_server, Health, HealthConfig, HealthReporter, ReporterSpec, StartupLatch,
};
pub use manager::{ApplyCtx, ApplyError, CrossManagerMsg, Manager};
pub use metrics::{Collector, Metrics};
pub use readback::{ReadBack, RecordedOp, Recording};
pub use seam::{ActorSeam, Fault, FaultAction, FaultRegistry, Injected, Seam};
pub use status::{
    ActorState, ActorStatus, LastError, RejectedChain, Role, StatusHandle, StatusSnapshot,
};
pub use supervisor::{
    BuildError, Fatal, FatalKind, GetStatus, InSync, KernelChanged, ManagerSpec, StateKey,
    Supervisor, SupervisorBuilder, SupervisorConfig, SupervisorHandle, Update, UpdateBatch,
};
