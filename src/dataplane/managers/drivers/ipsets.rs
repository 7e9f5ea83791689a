//! `driver/ipsets-v4/-v6`: the `ipset` driver (iptables mode). Creates and
//! updates sets in the IP-set phase; deletions of undesired sets (ours by
//! name prefix) run in the deferred-deletion step, after the tables stopped
//! referencing them, a bounded number per apply.

use std::sync::Arc;

use felix_actors::{ActorSeam, Driver, DriverError};

use crate::dataplane::generictables::IpVersion;
use crate::dataplane::ipsets::{
    IpSetMetadata, IpSets, IpSetsError, IpSetsOptions, IpVersionConfig,
};
use crate::dataplane::kernel::CommandSeam;

use super::super::desired::{IpSetsDesired, Pushed};
use super::{driver_error, SeamBridge};

/// See the module docs.
pub struct IpSetsDriver {
    bridge: Arc<SeamBridge>,
    ipsets: IpSets,
    pushed: Pushed<String>,
    max_size: u32,
}

impl IpSetsDriver {
    /// An adapter named `actor`; sets are created with `maxelem` `max_size`.
    pub fn new(
        actor: &str,
        ipv: IpVersion,
        seam: Arc<dyn CommandSeam>,
        opts: IpSetsOptions,
        max_size: u32,
    ) -> Self {
        let bridge = SeamBridge::new(seam);
        let cmds = bridge.commands(actor);
        IpSetsDriver {
            ipsets: IpSets::new(IpVersionConfig::new(ipv), cmds, opts),
            bridge,
            pushed: Pushed::default(),
            max_size,
        }
    }
}

impl Driver for IpSetsDriver {
    type Desired = IpSetsDesired;

    fn apply(&mut self, desired: &IpSetsDesired, seam: &ActorSeam) -> Result<(), DriverError> {
        self.bridge.install(seam);
        let d = self.pushed.diff(desired);
        for id in d.removed {
            self.ipsets.remove_ip_set(&id);
        }
        for (id, spec) in d.changed {
            self.ipsets.add_or_replace_ip_set(
                IpSetMetadata {
                    set_id: id.clone(),
                    set_type: spec.set_type,
                    max_size: self.max_size,
                },
                spec.members.iter().cloned(),
            );
        }
        self.pushed.mark_pushed(desired);
        self.ipsets.apply_updates().map(|_| ()).map_err(|e| {
            let IpSetsError::GaveUp { source, .. } = &e;
            let kernel = Some(source);
            driver_error(&e, kernel)
        })
    }

    fn apply_deletions(
        &mut self,
        _desired: &IpSetsDesired,
        seam: &ActorSeam,
    ) -> Result<(), DriverError> {
        self.bridge.install(seam);
        self.ipsets.apply_deletions();
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.ipsets.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.ipsets.is_dirty() || self.ipsets.has_pending_deletions()
    }
}
