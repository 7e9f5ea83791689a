//! Backend-neutral `*tables` model: rules, chains, the rule hasher and the
//! [`Table`] trait implemented by the iptables and nftables drivers.
//!
//! Rules are typed data; each backend renders them in its own syntax. A
//! rule's identity in the kernel is its hash comment (`cali:` + 16
//! characters), computed per chain as a chained hash so that a rule's hash
//! depends on its chain, its position and every rule before it.

pub mod attempts;
mod hash;
pub(crate) mod push;
pub mod quarantine;
mod rule;
mod table;

pub use hash::{rule_hashes, HASH_LENGTH, RULE_HASH_PREFIX};
pub use rule::{Action, AddrType, Chain, CtState, Match, MatchCriteria, PortRange, Protocol, Rule};
pub use table::{ApplyStats, Table, TableError};
