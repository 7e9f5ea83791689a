//! The nftables driver: our own table (`calico`) per family (`ip`, `ip6`),
//! programmed with one `nft -f -` transaction per apply, native sets for IP
//! sets, and the sweep of our leftovers in the nftables copies of the shared
//! iptables tables ([`IptablesNftCleanup`]).

/// The command operations of `driver/nftables-vN` (its fault targets).
pub const OPS: &[&str] = &[
    "nft-apply",
    "nft-check",
    "nft-delete-table",
    "nft-list-table",
];

mod actor;
mod cleanup;
mod json;
mod render;
mod sets;
mod table;
#[cfg(test)]
mod tests;

pub use actor::NftablesDriver;
pub use cleanup::{IptablesNftCleanup, SHARED_TABLES};
pub use render::{legalize_set_name, render_action, render_match_criteria, NftRenderer};
pub use sets::{canonical_member, canonical_member_owned, NftSetKind};
pub use table::{base_chain, BaseChain, NftFamily, NftablesMode, NftablesOptions, NftablesTable};
