//! The dataplane FV harness: `felix run` in a node network namespace with
//! workloads wired as Calico's CNI plugin wires them, real TCP traffic
//! between them, and read-back of the kernel state the daemon programs.
//!
//! * [`ns`]: namespaces (drop-guarded), commands inside them, `setns`;
//! * [`sandbox`]: node + workloads, connectivity checks;
//! * [`traffic`]: in-process echo servers and probes;
//! * [`datastore`]: the file datastore directory and resource YAML;
//! * [`daemon`]: `felix run` / `felix admin`, convergence waits, faults;
//! * [`kernel`]: chains, sets, routes, counters of both backends;
//! * [`wait`]: polling with deadlines.
//!
//! Tests need root, `ip`, `iptables-save`, `ipset` and `nft`
//! ([`ns::preflight`] says what is missing) and a built `felix` binary
//! ([`daemon::felix_binary`]).

pub mod daemon;
pub mod datastore;
pub mod kernel;
pub mod ns;
pub mod sandbox;
pub mod topology;
pub mod traffic;
pub mod wait;

pub use daemon::{Backend, Daemon};
pub use datastore::{Datastore, Wep};
pub use sandbox::{Check, Sandbox};
pub use topology::Fv;
