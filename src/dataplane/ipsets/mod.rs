//! The IP-set driver for iptables mode (`ipset`): kernel set names derived
//! exactly as upstream, batched `ipset restore` per apply, temp-set-and-swap
//! for metadata changes, deferred rate-limited deletions and an incremental
//! resync with must and background tiers.

/// The command operations of the IP-set drivers (their fault targets).
pub const OPS: &[&str] = &[
    "ipset-restore",
    "ipset-list",
    "ipset-list-names",
    "ipset-destroy",
];

mod actor;
mod cleanup_actor;
mod driver;
mod names;
mod parse;
#[cfg(test)]
mod tests;

pub use actor::IpSetsDriver;
pub use cleanup_actor::IpSetCleanupDriver;
pub use driver::{hash_size_for, IpSetMetadata, IpSets, IpSetsError, IpSetsOptions, IpSetsStats};
pub use names::{IpSetType, IpVersionConfig, MAX_IPSET_NAME_LENGTH};
pub use parse::{parse_list, parse_names, ListedSet};
