//! Driver adapters: each implements `felix_actors::Driver` over one of the
//! kernel-facing drivers, reading a desired-state cell written by the
//! managers.
//!
//! Common shape: `apply` installs the call's actor seam in the adapter's
//! [`SeamBridge`] (so every command is a seam operation), diffs the cell
//! against the generations it pushed before ([`super::Pushed`]), pushes only
//! what changed into the inner driver and lets it reconcile minimally. A
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

mod bridge;
mod cleanup;
mod ipset_cleanup;
mod ipsets;
mod routes;
mod tables;

pub use bridge::SeamBridge;
pub use cleanup::{CleanupDriver, CleanupMode};
pub use ipset_cleanup::IpSetCleanupDriver;
pub use ipsets::IpSetsDriver;
pub use routes::{IfacesDriver, RoutesDriver};
pub use tables::{BackendChoice, IptablesDriver, NftablesDriver};

use felix_actors::{DriverError, SeamError};

use crate::dataplane::kernel::KernelError;

/// Maps a kernel error to a driver error: a refusal by the seam (injected
/// fault) stays a seam error, anything else is a transient failure.
pub(crate) fn driver_error(e: &dyn std::error::Error, kernel: Option<&KernelError>) -> DriverError {
    match kernel {
        Some(KernelError::Refused { actor, op, .. }) => DriverError::Seam(SeamError::Injected {
            actor: actor.clone(),
            op: op.clone(),
        }),
        _ => DriverError::Failed {
            reason: e.to_string(),
        },
    }
}
