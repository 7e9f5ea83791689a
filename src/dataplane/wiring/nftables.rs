//! nftables mode: our `calico` table (chains and IP sets in one driver) and the sweeper of
//! `ipset` sets an iptables-mode run left, per family.

use felix_actors::{DesiredInput, Phase, SupervisorBuilder};

use crate::dataplane::desired::{IpSetsDesired, NftDesired};
use crate::dataplane::ipsets::IpSetCleanupDriver;
use crate::dataplane::managers::{Payload, SetInputs, TableInputs};
use crate::dataplane::nftables::NftablesDriver;
use crate::dataplane::nftables::NftablesOptions;

use super::family::{Family, Shared};
use super::iptables::ipset_options;

/// Registers `driver/nftables-vN` and `driver/ipset-cleanup-vN`; returns the cells the
/// family's managers write (one cell for chains and sets).
pub(super) fn register(
    mut b: SupervisorBuilder<Payload>,
    shared: &Shared,
    fam: &Family,
) -> (SupervisorBuilder<Payload>, TableInputs, SetInputs) {
    let ipv = fam.ipv;
    let cell = DesiredInput::new(NftDesired::default());
    let opts = NftablesOptions {
        refresh_interval: shared.refresh,
        ..NftablesOptions::default()
    };
    b = shared.driver(
        b,
        (fam, "nftables"),
        Phase::Tables,
        cell.clone(),
        crate::dataplane::nftables::OPS,
        move |c| NftablesDriver::new(ipv, c, opts.clone()),
    );
    let opts = ipset_options();
    b = shared.driver(
        b,
        (fam, "ipset-cleanup"),
        Phase::IpSets,
        DesiredInput::new(IpSetsDesired::default()),
        crate::dataplane::ipsets::OPS,
        move |c| IpSetCleanupDriver::new(ipv, c, opts.clone()),
    );
    (
        b,
        TableInputs::Nftables(cell.clone()),
        SetInputs::Nftables(cell),
    )
}
