//! The dataplane FV harness: `felix run` in a node network namespace with
//! workloads wired as Calico's CNI plugin wires them, real TCP traffic
//! between them, and read-back of the kernel state the daemon programs.
//!
//! * namespaces (drop-guarded), commands inside them, `setns`: the
//!   workspace's one namespace crate, [`felix_netns`];
//! * [`sandbox`]: node + workloads, connectivity checks;
//! * [`cluster`]: three nodes on two subnets behind a router, each running
//!   `felix run` on one shared datastore;
//! * [`traffic`]: in-process echo servers and probes;
//! * [`probes`]: TCP, UDP and ICMP probes with a chosen conntrack tuple,
//!   UDP echo servers;
//! * [`explain_gen`]: the seeded worlds and flows of the `felix explain`
//!   differential test;
//! * [`datastore`]: the file datastore directory and resource YAML;
//! * [`daemon`]: `felix run` / `felix admin`, convergence waits, faults;
//! * [`kernel`]: chains, sets, routes, counters of both backends;
//! * [`wait`]: polling with deadlines;
//! * [`soak`]: the chaos soak (churn, kills, faults, a foreign writer,
//!   invariants checked on real traffic, the final kernel inventory).
//!
//! Tests need root, `ip` and [`TOOLS`] (each test checks them first with
//! `felix_netns::require!`, which skips locally and fails under CI) and a
//! built `felix` binary ([`daemon::felix_binary`]).

pub mod cluster;
pub mod daemon;
pub mod datastore;
pub mod explain_gen;
pub mod kernel;
pub mod probes;
pub mod sandbox;
pub mod soak;
pub mod topology;
pub mod traffic;
pub mod wait;

pub use daemon::{Backend, Daemon};
pub use datastore::{Datastore, Wep};
pub use sandbox::{Check, Sandbox};
pub use topology::Fv;

/// What every dataplane FV test needs besides root and `ip`.
pub const TOOLS: &[&str] = &["iptables-save", "ipset", "nft", "sysctl"];

/// The tools an eBPF-mode daemon and its sandbox use (the bpffs is mounted per test).
pub const BPF_TOOLS: &[&str] = &[
    "iptables-save",
    "ipset",
    "nft",
    "sysctl",
    "tc",
    "ping",
    "mount",
];
