//! `driver/routes-v4/-v6` ([`RoutesDriver`], local workload routes in the
//! main table) and `driver/ifaces-v4/-v6` ([`IfacesDriver`], workload
//! interface settings), both in the Routes phase, over the route/link seam
//! in `crate::dataplane::netlink`.

use std::sync::Arc;

use felix_actors::{ActorSeam, Driver, DriverError};

use crate::dataplane::generictables::IpVersion;
use crate::dataplane::kernel::CommandSeam;
use crate::dataplane::netlink::{
    IfaceSettingsTable, Netlink, NetlinkError, RouteOwnership, RouteTable,
};

use super::super::desired::{IfacesDesired, RoutesDesired};
use super::{driver_error, SeamBridge};

fn netlink_error(e: NetlinkError) -> DriverError {
    let kernel = match &e {
        NetlinkError::Kernel(k) => Some(k),
        NetlinkError::Parse { .. } => None,
    };
    driver_error(&e, kernel)
}

/// See the module docs.
pub struct RoutesDriver {
    bridge: Arc<SeamBridge>,
    table: RouteTable,
}

impl RoutesDriver {
    /// An adapter named `actor`.
    pub fn new(
        actor: &str,
        ipv: IpVersion,
        seam: Arc<dyn CommandSeam>,
        own: RouteOwnership,
    ) -> Self {
        let bridge = SeamBridge::new(seam);
        let nl = Netlink::new(bridge.commands(actor));
        RoutesDriver {
            table: RouteTable::new(ipv, nl, own),
            bridge,
        }
    }
}

impl Driver for RoutesDriver {
    type Desired = RoutesDesired;

    fn apply(&mut self, desired: &RoutesDesired, seam: &ActorSeam) -> Result<(), DriverError> {
        self.bridge.install(seam);
        let stats = self.table.apply(desired).map_err(netlink_error)?;
        tracing::debug!(?stats, "routes applied");
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.table.is_dirty()
    }
}

/// See the module docs.
pub struct IfacesDriver {
    bridge: Arc<SeamBridge>,
    table: IfaceSettingsTable,
}

impl IfacesDriver {
    /// An adapter named `actor`; `ip_forwarding` also turns on the
    /// family's global forwarding switch.
    pub fn new(
        actor: &str,
        ipv: IpVersion,
        seam: Arc<dyn CommandSeam>,
        ip_forwarding: bool,
    ) -> Self {
        let bridge = SeamBridge::new(seam);
        let nl = Netlink::new(bridge.commands(actor));
        IfacesDriver {
            table: IfaceSettingsTable::new(ipv, nl, ip_forwarding),
            bridge,
        }
    }
}

impl Driver for IfacesDriver {
    type Desired = IfacesDesired;

    fn apply(&mut self, desired: &IfacesDesired, seam: &ActorSeam) -> Result<(), DriverError> {
        self.bridge.install(seam);
        self.table.apply(desired).map(|_| ()).map_err(netlink_error)
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.table.is_dirty()
    }
}
