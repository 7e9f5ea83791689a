//! `driver/ipsets-v4/-v6`: the `ipset` driver (iptables mode). Creates and
//! updates sets in the IP-set phase; deletions of undesired sets (ours by
//! name prefix) run in the deferred-deletion step, after the tables stopped
//! referencing them, a bounded number per apply.

use felix_actors::{Driver, DriverError};

use crate::dataplane::ipsets::{IpSetMetadata, IpSets, IpSetsOptions, IpVersionConfig};
use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

use crate::dataplane::desired::{IpSetsDesired, Pushed};

/// See the module docs.
pub struct IpSetsDriver {
    ipsets: IpSets,
    pushed: Pushed<String>,
    max_size: u32,
}

impl IpSetsDriver {
    /// An adapter running its commands on `cmds`; sets are created with `maxelem` `max_size`.
    pub fn new(ipv: IpVersion, cmds: Commands, opts: IpSetsOptions, max_size: u32) -> Self {
        IpSetsDriver {
            ipsets: IpSets::new(IpVersionConfig::new(ipv), cmds, opts),
            pushed: Pushed::default(),
            max_size,
        }
    }
}

impl Driver for IpSetsDriver {
    type Desired = IpSetsDesired;

    fn apply(&mut self, desired: &IpSetsDesired) -> Result<(), DriverError> {
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
        self.ipsets.apply_updates()?;
        Ok(())
    }

    fn apply_deletions(&mut self, _desired: &IpSetsDesired) -> Result<(), DriverError> {
        self.ipsets.apply_deletions()?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.ipsets.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.ipsets.is_dirty() || self.ipsets.has_pending_deletions()
    }
}
