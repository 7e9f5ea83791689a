//! `driver/routes-v4/-v6` ([`RoutesDriver`], local workload routes in the
//! main table) and `driver/ifaces-v4/-v6` ([`IfacesDriver`], workload
//! interface settings), both in the Routes phase, over the route/link seam
//! in `crate::dataplane::iproute`.
//!
//! Both hold a subscription to the interface monitor's state
//! (`crate::dataplane::ifacemon`): pending interface changes make the
//! driver dirty, and its next apply hands the changed names to the table
//! (routes: read back; settings: rewrite) before reconciling. With a
//! subscription, work that only waits for a missing or down interface does
//! not keep the driver dirty (no polling; the monitor's report, or a
//! refresh, retries it). A rebuilt driver subscribes afresh; it resyncs
//! everything anyway.

use felix_actors::{Driver, DriverError};

use crate::dataplane::ifacemon::IfaceSubscription;
use crate::dataplane::iproute::{IfaceSettingsTable, IpTool, RouteOwnership, RouteTable};
use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

use crate::dataplane::desired::{IfacesDesired, RoutesDesired};

/// See the module docs.
pub struct RoutesDriver {
    table: RouteTable,
    ifaces: Option<IfaceSubscription>,
}

impl RoutesDriver {
    /// An adapter running its commands on `cmds`.
    pub fn new(ipv: IpVersion, cmds: Commands, own: RouteOwnership) -> Self {
        RoutesDriver {
            table: RouteTable::new(ipv, IpTool::new(cmds), own),
            ifaces: None,
        }
    }

    /// Also reacts to the interface monitor's changes.
    pub fn with_interface_events(mut self, sub: IfaceSubscription) -> Self {
        self.ifaces = Some(sub);
        self
    }
}

impl Driver for RoutesDriver {
    type Desired = RoutesDesired;

    fn apply(&mut self, desired: &RoutesDesired) -> Result<(), DriverError> {
        if let Some(sub) = &self.ifaces {
            self.table.interfaces_changed(&sub.take());
        }
        let stats = self.table.apply(desired)?;
        tracing::debug!(?stats, "routes applied");
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        match &self.ifaces {
            // Routes waiting for their interface are retried when the
            // monitor reports it, not by polling.
            Some(sub) => self.table.is_dirty_except_waiting() || sub.has_pending(),
            None => self.table.is_dirty(),
        }
    }
}

/// See the module docs.
pub struct IfacesDriver {
    table: IfaceSettingsTable,
    ifaces: Option<IfaceSubscription>,
}

impl IfacesDriver {
    /// An adapter running its commands on `cmds`; `ip_forwarding` also turns on the family's
    /// global forwarding switch.
    pub fn new(ipv: IpVersion, cmds: Commands, ip_forwarding: bool) -> Self {
        IfacesDriver {
            table: IfaceSettingsTable::new(ipv, IpTool::new(cmds), ip_forwarding),
            ifaces: None,
        }
    }

    /// Also reacts to the interface monitor's changes.
    pub fn with_interface_events(mut self, sub: IfaceSubscription) -> Self {
        self.ifaces = Some(sub);
        self
    }
}

impl Driver for IfacesDriver {
    type Desired = IfacesDesired;

    fn apply(&mut self, desired: &IfacesDesired) -> Result<(), DriverError> {
        if let Some(sub) = &self.ifaces {
            self.table.interfaces_changed(&sub.take());
        }
        self.table.apply(desired)?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        match &self.ifaces {
            Some(sub) => self.table.is_dirty_except_missing() || sub.has_pending(),
            None => self.table.is_dirty(),
        }
    }
}
