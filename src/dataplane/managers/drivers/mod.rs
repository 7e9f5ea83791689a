//! Driver adapters: each implements `felix_actors::Driver` over one of the
//! kernel-facing drivers, reading a desired-state cell written by the
//! managers.
//!
//! Common shape: the adapter is built with the driver's `Commands` (its actor seam plus the
//! command runner, so every command is a seam operation); `apply` diffs the cell
//! against the generations it pushed before ([`super::Pushed`]), pushes only
//! what changed into the inner driver and lets it reconcile minimally; the inner driver's
//! typed error converts into a `DriverError` naming the failed operation and its kind. A
//! rebuilt adapter (driver restart) has pushed nothing, so it pushes the
//! whole desired state; its inner driver reads the kernel back first, so
//! unchanged kernel state is left alone.
//!
//! | adapter | name | phase |
//! |---|---|---|
//! | [`IptablesDriver`] | `driver/iptables-<table>-v4/-v6` | Tables |
//! | [`NftablesDriver`] | `driver/nftables-v4/-v6` | Tables |
//! | [`IpSetsDriver`] | `driver/ipsets-v4/-v6` | IpSets (+ deletions) |
//! | [`RoutesDriver`] | `driver/routes-v4/-v6` | Routes |
//! | [`IfacesDriver`] | `driver/ifaces-v4/-v6` | Routes |
//! | [`CleanupDriver`] | `driver/cleanup-v4/-v6` | Tables |
//! | [`IpSetCleanupDriver`] | `driver/ipset-cleanup-v4/-v6` (nftables mode) | IpSets (+ deletions) |

mod cleanup;
mod ipset_cleanup;
mod ipsets;
mod routes;
mod tables;

pub use cleanup::{CleanupDriver, CleanupMode};
pub use ipset_cleanup::IpSetCleanupDriver;
pub use ipsets::IpSetsDriver;
pub use routes::{IfacesDriver, RoutesDriver};
pub use tables::{BackendChoice, IptablesDriver, NftablesDriver};
