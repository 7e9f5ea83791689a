//! `driver/ipset-cleanup-v4/-v6` (nftables mode only): removes the `ipset`
//! sets an iptables-mode Felix left behind, as upstream does by running an
//! IP-set dataplane with nothing desired next to the nftables table.
//!
//! Invariants: the inner [`IpSetsDriver`] is never given a desired set, so
//! its resync after in-sync schedules every set with our name prefix for
//! the deferred (post-tables) deletion step, rate limited as in iptables
//! mode; only our prefixed sets are touched. Without an `ipset` binary the
//! driver does nothing. Failures are logged and retried (the inner driver
//! stays dirty) but never fail the apply: a cleanup must not hold back the
//! tables we program nor trigger the fail-closed exit.

use felix_actors::{Driver, DriverError};

use crate::dataplane::ipsets::IpSetsOptions;
use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

use super::IpSetsDriver;
use crate::dataplane::desired::IpSetsDesired;

/// See the module docs.
pub struct IpSetCleanupDriver {
    inner: IpSetsDriver,
    cmds: Commands,
    available: Option<bool>,
}

impl IpSetCleanupDriver {
    /// A sweeper for `ipv` running its commands on `cmds`.
    pub fn new(ipv: IpVersion, cmds: Commands, opts: IpSetsOptions) -> Self {
        IpSetCleanupDriver {
            inner: IpSetsDriver::new(ipv, cmds.clone(), opts, 1),
            cmds,
            available: None,
        }
    }

    fn available(&mut self) -> bool {
        *self
            .available
            .get_or_insert_with(|| self.cmds.program_exists("ipset"))
    }
}

impl Driver for IpSetCleanupDriver {
    type Desired = IpSetsDesired;

    fn apply(&mut self, desired: &IpSetsDesired) -> Result<(), DriverError> {
        if self.available() {
            if let Err(e) = self.inner.apply(desired) {
                tracing::warn!(error = %e, "ipset cleanup failed; retried later");
            }
        }
        Ok(())
    }

    fn apply_deletions(&mut self, desired: &IpSetsDesired) -> Result<(), DriverError> {
        if self.available() {
            if let Err(e) = self.inner.apply_deletions(desired) {
                tracing::warn!(error = %e, "ipset cleanup deletions failed; retried later");
            }
        }
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.inner.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.available != Some(false) && self.inner.is_dirty()
    }
}
