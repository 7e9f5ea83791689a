//! iptables mode: the `ipset` driver and one driver per iptables table, per family.

use felix_actors::{DesiredInput, Phase, SupervisorBuilder};

use crate::dataplane::desired::IpSetsDesired;
use crate::dataplane::ipsets::IpSetsDriver;
use crate::dataplane::ipsets::IpSetsOptions;
use crate::dataplane::iptables::IptablesDriver;
use crate::dataplane::iptables::IptablesOptions;
use crate::dataplane::managers::{Payload, SetInputs, TableInputs};

use super::family::{Family, Shared};

/// Registers `driver/ipsets-vN` and `driver/iptables-<table>-vN`; returns the cells the
/// family's managers write.
pub(super) fn register(
    mut b: SupervisorBuilder<Payload>,
    shared: &Shared,
    fam: &Family,
    max_ipset_size: i64,
) -> (SupervisorBuilder<Payload>, TableInputs, SetInputs) {
    let ipv = fam.ipv;
    let max_size = u32::try_from(max_ipset_size.max(1)).unwrap_or(u32::MAX);
    let set_cell = DesiredInput::new(IpSetsDesired::default());
    let opts = ipset_options();
    b = shared.driver(
        b,
        (fam, "ipsets"),
        Phase::IpSets,
        set_cell.clone(),
        crate::dataplane::ipsets::OPS,
        move |c| IpSetsDriver::new(ipv, c, opts.clone(), max_size),
    );
    let tables = TableInputs::new_iptables();
    if let TableInputs::Iptables(cells) = &tables {
        let opts = IptablesOptions {
            refresh_interval: shared.refresh,
            insert_mode: shared.insert_mode,
            lock_timeout: shared.lock_timeout,
            lock_probe_interval: shared.lock_probe_interval,
            ..IptablesOptions::default()
        };
        for (&table, cell) in cells {
            let (opts, backend) = (opts.clone(), shared.backend.clone());
            let what = format!("iptables-{}", table.as_str());
            let ops = crate::dataplane::iptables::OPS;
            b = shared.driver(
                b,
                (fam, &what),
                Phase::Tables,
                cell.clone(),
                ops,
                move |c| IptablesDriver::new(table, ipv, c, backend.clone(), opts.clone()),
            );
        }
    }
    (b, tables, SetInputs::Ipset(set_cell))
}

/// IP-set driver options of both `*tables` modes.
///
/// Deletions are rate limited per apply; upstream reschedules every 100 ms, our applies come
/// no faster than the retry ticker when idle, so allow a few per apply.
pub(super) fn ipset_options() -> IpSetsOptions {
    IpSetsOptions {
        max_deletions_per_iteration: 10,
        ..IpSetsOptions::default()
    }
}
