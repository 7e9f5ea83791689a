//! The Linux dataplane: managers (convert calc-graph messages into desired
//! kernel state), drivers (reconcile desired state with the kernel) and the
//! kernel seams every kernel operation goes through.

pub mod generictables;
pub mod ifacemon;
pub mod ipsets;
pub mod iptables;
pub mod kernel;
pub mod managers;
pub mod netlink;
pub mod nftables;
pub mod rules;
pub mod wiring;
