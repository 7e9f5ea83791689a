//! The node daemon behind `felix run` (INTERFACES.md §1, §4, §5).
//!
//! # Pipeline
//!
//! ```text
//! syncer thread ──(bounded channel, SYNC_CHANNEL_CAPACITY)──► calc-graph thread
//!   (FileSyncer)                                                 │ CalcGraph + DataplaneView
//!                                                                ▼ one batch in flight at most
//!                                   main thread: connector (config, restarts, signals)
//!                                                                │ UpdateBatch / InSync
//!                                                                ▼
//!                                   "dataplane" thread: actix System + Supervisor<Payload>
//! ```
//!
//! * Back-pressure: the syncer blocks on the bounded channel; the calc-graph
//!   thread keeps at most one flushed batch in flight towards the supervisor
//!   and, while one is in flight, keeps consuming updates without flushing,
//!   so changes coalesce in the graph's event sequencer (one pending update
//!   per object) instead of queueing. See [`calc_loop`].
//! * Start of day (as upstream: configuration first, then the dataplane):
//!   the graph is told "in sync" only once the syncer is in sync **and** the
//!   datastore is ready (`ClusterInformation` `default` `datastoreReady`).
//!   The first flush after that carries the datastore configuration
//!   (`ConfigUpdate`) and the encapsulation; the connector merges it with
//!   the local layers ([`config_load`]), then builds and starts the
//!   supervisor ([`dataplane`], managers from [`dataplane_wiring`]), the
//!   admin socket and the health port, and only then forwards the batch
//!   followed by `InSync`.
//! * Restarts (as upstream): a later configuration change to a parameter
//!   that needs a restart, an encapsulation change, or the datastore
//!   becoming unready stops everything cleanly and returns
//!   [`Stop::Restart`]; `felix run` then re-executes the same binary with
//!   the same arguments ([`restart`]).
//! * SIGTERM / SIGINT ([`signals`]) stop the syncer, the calc-graph thread
//!   and the supervisor, and leave the kernel state in place.

pub mod calc_loop;
pub mod config_load;
pub mod dataplane;
pub mod dataplane_wiring;
pub mod datastore_spec;
pub mod debug_sim;
mod diag_routes;
pub mod driver;
mod drops;
pub mod external;
mod lifecycle;
mod log_sinks;
pub mod logging;
pub mod messages;
pub mod metrics;
pub mod restart;
pub mod signals;

use std::path::PathBuf;

pub use lifecycle::run;

/// Default path of the admin socket.
pub const DEFAULT_ADMIN_SOCKET: &str = "/var/run/felix/admin.sock";

/// Capacity (in syncer events, each up to a batch of updates) of the
/// channel between the syncer thread and the calc-graph thread.
pub const SYNC_CHANNEL_CAPACITY: usize = 16;

/// Upstream's exit code for "restart me, my configuration changed"; used
/// only when re-executing the binary fails.
pub const RESTART_EXIT_CODE: u8 = 129;

/// What `felix run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `--node NAME`, if given. Without it the daemon uses `FelixHostname`
    /// (environment, then config file), then the host name
    /// ([`config_load::LocalConfig::node_name`]).
    pub node: Option<String>,
    /// `--datastore SPEC`, if given.
    pub datastore: Option<String>,
    /// `--config FILE`, if given (a missing explicit file is an error).
    pub config_file: Option<PathBuf>,
    /// Where to serve the admin socket.
    pub admin_socket: PathBuf,
}

/// How the daemon stopped (when it stopped without an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM or SIGINT: exit 0.
    Signal(&'static str),
    /// Restart needed (configuration or encapsulation change, datastore
    /// became unready): re-execute.
    Restart(String),
}

/// A daemon failure.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad usage or bad input (exit 2).
    #[error("{0}")]
    Input(String),
    /// Runtime failure (exit 1).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Why the daemon stopped with a runtime failure; the cause stays typed up to the CLI edge,
/// which prints the whole chain.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A start-up step failed with an OS error.
    #[error("{what}")]
    Io {
        /// The step, e.g. `installing signal handlers`.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The etcd syncer could not start.
    #[error("starting the etcd syncer")]
    Etcd(#[source] crate::datastore::etcd::syncer::EtcdSyncerError),
    /// The dataplane could not be started.
    #[error("starting the dataplane")]
    DataplaneStart(#[source] dataplane::StartError),
    /// The dataplane gave up (fail closed).
    #[error("the dataplane gave up")]
    DataplaneFatal(#[source] felix_actors::Fatal),
    /// The external dataplane driver could not be started.
    #[error("starting the dataplane driver (UseInternalDataplaneDriver=false)")]
    DriverStart(#[source] external::ExternalError),
    /// The external dataplane driver exited or broke the protocol.
    #[error("{0}; felix stops (its supervisor restarts it with a new driver)")]
    Driver(String),
    /// The admin socket could not be served.
    #[error("admin socket {path}")]
    AdminSocket {
        /// The socket path.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The datastore syncer thread stopped.
    #[error("the datastore syncer stopped")]
    SyncerGone,
    /// The daemon's control channel closed.
    #[error("the daemon's control channel closed")]
    ControlClosed,
    /// `DebugPanicAfter` elapsed: the configured simulated crash.
    #[error("DebugPanicAfter ({0:?}) elapsed: stopping with an error, as configured")]
    DebugPanicAfter(std::time::Duration),
}
