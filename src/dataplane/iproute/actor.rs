//! `driver/routes-v4/-v6` ([`RoutesDriver`], the routes of every producer, over
//! rtnetlink) and `driver/ifaces-v4/-v6` ([`IfacesDriver`], workload
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

use crate::dataplane::desired::{IfacesDesired, RoutesDesired};
use crate::dataplane::ifacemon::IfaceSubscription;
use crate::dataplane::iproute::{
    IfaceSettingsTable, IpTool, IpToolError, RouteOwnership, RouteTable,
};
use crate::dataplane::kernel::Commands;
use crate::dataplane::netlink::Seamed;
use crate::dataplane::IpVersion;
use felix_actors::clock::SharedClock;

/// What a per-interface table offers its driver actor: the two tables of this folder.
pub trait InterfaceTable: Send + 'static {
    /// The desired state it reconciles.
    type Desired: Send + 'static;
    /// Reconciles the kernel with `desired`.
    fn apply_desired(&mut self, desired: &Self::Desired) -> Result<(), DriverError>;
    /// The next apply reads back (or rewrites) everything.
    fn queue_resync(&mut self);
    /// The interface monitor saw these interfaces change.
    fn interfaces_changed(&mut self, names: &std::collections::BTreeSet<String>);
    /// Pending work of any kind.
    fn is_dirty(&self) -> bool;
    /// Pending work other than waiting for a missing or down interface (which the monitor's
    /// report retries, not polling).
    fn is_dirty_except_waiting(&self) -> bool;
}

impl InterfaceTable for RouteTable {
    type Desired = RoutesDesired;
    fn apply_desired(&mut self, desired: &RoutesDesired) -> Result<(), DriverError> {
        let stats = self.apply(desired)?;
        tracing::debug!(?stats, "routes applied");
        Ok(())
    }
    fn queue_resync(&mut self) {
        RouteTable::queue_resync(self);
    }
    fn interfaces_changed(&mut self, names: &std::collections::BTreeSet<String>) {
        RouteTable::interfaces_changed(self, names);
    }
    fn is_dirty(&self) -> bool {
        RouteTable::is_dirty(self)
    }
    fn is_dirty_except_waiting(&self) -> bool {
        RouteTable::is_dirty_except_waiting(self)
    }
}

impl InterfaceTable for IfaceSettingsTable {
    type Desired = IfacesDesired;
    fn apply_desired(&mut self, desired: &IfacesDesired) -> Result<(), DriverError> {
        self.apply(desired).map(|_| ()).map_err(IpToolError::into)
    }
    fn queue_resync(&mut self) {
        IfaceSettingsTable::queue_resync(self);
    }
    fn interfaces_changed(&mut self, names: &std::collections::BTreeSet<String>) {
        IfaceSettingsTable::interfaces_changed(self, names);
    }
    fn is_dirty(&self) -> bool {
        IfaceSettingsTable::is_dirty(self)
    }
    fn is_dirty_except_waiting(&self) -> bool {
        self.is_dirty_except_missing()
    }
}

/// The driver actor over one per-interface table: `driver/routes-vN` ([`RoutesDriver`]) and
/// `driver/ifaces-vN` ([`IfacesDriver`]). See the module docs.
pub struct InterfaceTableDriver<T> {
    table: T,
    ifaces: Option<IfaceSubscription>,
}

/// `driver/routes-vN`: routes to local workloads.
pub type RoutesDriver = InterfaceTableDriver<RouteTable>;
/// `driver/ifaces-vN`: workload interface settings.
pub type IfacesDriver = InterfaceTableDriver<IfaceSettingsTable>;

impl RoutesDriver {
    /// A routes driver programming through `nl` (its netlink handle, on the driver's seam);
    /// `refresh` is `RouteRefreshInterval`.
    pub fn new(
        ipv: IpVersion,
        nl: Seamed,
        own: RouteOwnership,
        clock: SharedClock,
        refresh: Option<std::time::Duration>,
    ) -> Self {
        InterfaceTableDriver::over(RouteTable::new(ipv, nl, own, clock, refresh))
    }
}

impl IfacesDriver {
    /// An interface-settings driver running its commands on `cmds`; `ip_forwarding` also turns
    /// on the family's global forwarding switch.
    pub fn new(ipv: IpVersion, cmds: Commands, ip_forwarding: bool) -> Self {
        InterfaceTableDriver::over(IfaceSettingsTable::new(
            ipv,
            IpTool::new(cmds),
            ip_forwarding,
        ))
    }
}

impl<T: InterfaceTable> InterfaceTableDriver<T> {
    fn over(table: T) -> Self {
        InterfaceTableDriver {
            table,
            ifaces: None,
        }
    }

    /// Also reacts to the interface monitor's changes.
    pub fn with_interface_events(mut self, sub: IfaceSubscription) -> Self {
        self.ifaces = Some(sub);
        self
    }
}

impl<T: InterfaceTable> Driver for InterfaceTableDriver<T> {
    type Desired = T::Desired;

    fn apply(&mut self, desired: &T::Desired) -> Result<(), DriverError> {
        if let Some(sub) = &self.ifaces {
            self.table.interfaces_changed(&sub.take());
        }
        self.table.apply_desired(desired)?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        match &self.ifaces {
            // Work waiting for its interface is retried when the monitor reports it, not by
            // polling.
            Some(sub) => self.table.is_dirty_except_waiting() || sub.has_pending(),
            None => self.table.is_dirty(),
        }
    }
}
