//! Registers the Linux dataplane's managers and drivers on a supervisor builder, for the
//! configured mode and both IP families.
//!
//! One module per dataplane mode over a shared per-family part, chosen by an exhaustive
//! `match` on the mode:
//!
//! | module | what it registers per family `vN` |
//! |---|---|
//! | [`iptables`] | `driver/ipsets-vN` (IpSets) and `driver/iptables-{filter,nat,mangle,raw}-vN` (Tables; the backend is detected once, through the first driver's seam, honouring `IptablesBackend`) |
//! | [`nftables`] | `driver/nftables-vN` (Tables; IP sets live in the table) and `driver/ipset-cleanup-vN` (IpSets; deletes the `ipset` sets an iptables-mode run left, as upstream does) |
//! | [`bpf`] | once per node: `manager/bpf-endpoints` and `driver/bpf` (Routes phase; publishes the READY interfaces the accept chains follow); per family the `*tables` drivers of the flavour `NFTablesMode` selects (iptables mode's, or nftables mode's when `NFTablesMode=Enabled`) with `manager/static-vN`, `manager/bpf-tables-vN` (the dispatch chains BPF mode keeps), `manager/endpoints-vN` (routes and interface settings only), `manager/cluster-routes-vN`, `manager/masq-vN`. In iptables and nftables mode: `driver/bpf-cleanup` (Routes phase), which removes an eBPF-mode run's BPF objects |
//! | [`family`] (every mode) | `driver/routes-vN`, `driver/ifaces-vN` (Routes; subscribed to the interface monitor), `driver/cleanup-vN` (Tables; sweeps the backend we are not programming), and the managers, in programming order: `manager/static-vN` (static chains first, so the fail-closed drops are in place before anything else), `manager/ipsets-vN`, `manager/policy-vN`, `manager/endpoints-vN`, `manager/masq-vN` |
//!
//! Every driver factory receives the driver's seam from the runtime and builds its
//! `Commands` from it ([`family::Family::commands`]), so each command is one seam operation.
//! Nothing here touches the kernel: detection and every sweep happen in driver applies, after
//! in-sync.

mod bpf;
mod family;
mod iptables;
mod nftables;

use std::sync::Arc;

use felix_actors::SupervisorBuilder;
use felix_config::{Config, DataplaneMode};

use crate::dataplane::bpf::policy::SharedDropNames;
use crate::dataplane::ifacemon::InterfaceState;
use crate::dataplane::kernel::CommandRunner;
use crate::dataplane::managers::Payload;
use crate::dataplane::rules::RenderError;
use crate::dataplane::IpVersion;

/// Why the dataplane could not be wired.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    /// The rendering settings could not be derived from the configuration.
    #[error("IPv{ipv} rule rendering settings: {source}")]
    Render {
        /// 4 or 6.
        ipv: u8,
        /// Cause.
        #[source]
        source: RenderError,
    },
}

/// Registers the managers and drivers for `cfg`'s mode; every kernel command runs on `runner`
/// (the real `SystemCommands`, one bound to a network namespace in tests). No interface
/// monitor feeds the route and interface drivers: late interfaces wait for the retry ticker.
pub fn register(
    builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    runner: Arc<dyn CommandRunner>,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    register_with_interfaces(
        builder,
        cfg,
        runner,
        &InterfaceState::default(),
        &SharedDropNames::default(),
    )
}

/// [`register`], with the route and interface-settings drivers subscribed to `ifaces`, the
/// state the interface monitor keeps (`crate::dataplane::ifacemon`), and, in eBPF mode,
/// `driver/bpf` naming its drop reports in `bpf_drop_names`.
pub fn register_with_interfaces(
    mut builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    runner: Arc<dyn CommandRunner>,
    ifaces: &InterfaceState,
    bpf_drop_names: &SharedDropNames,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    let mut families = vec![IpVersion::V4];
    if cfg.ipv6_support() {
        families.push(IpVersion::V6);
    }
    let shared = family::Shared::new(cfg, runner, ifaces);
    let mode = cfg.dataplane_mode();
    // The node-wide parts: BPF mode's manager and driver (one for both families: the
    // ifstate and jump maps are shared), or, in the other modes, the sweeper of BPF leftovers.
    let ready = crate::dataplane::bpf::BpfReady::default();
    builder = match mode {
        DataplaneMode::Bpf => bpf::register_node(builder, &shared, cfg, &ready, bpf_drop_names),
        DataplaneMode::Iptables | DataplaneMode::Nftables => bpf::register_cleanup(builder, cfg),
    };
    let mut wired = Vec::new();
    for ipv in families {
        let fam = family::Family::new(&shared, cfg, ipv)?;
        // BPF mode keeps the table drivers of the `*tables` flavour `NFTablesMode` selects
        // for the rules it keeps.
        let nft = cfg.nftables_rules();
        let (b, tables, sets) = if nft {
            nftables::register(builder, &shared, &fam)
        } else {
            iptables::register(builder, &shared, &fam, cfg.max_ipset_size())
        };
        builder = fam.register_shared_drivers(b, &shared, nft);
        builder = fam.register_static_manager(builder, &tables);
        wired.push((fam, tables, sets));
    }
    // Managers are registered family by family after all statics, so every family's static
    // chains are in the first part of the programming pass.
    for (fam, tables, sets) in wired {
        builder = match mode {
            DataplaneMode::Iptables | DataplaneMode::Nftables => {
                fam.register_managers(builder, &shared, tables, sets)
            }
            DataplaneMode::Bpf => {
                bpf::register_managers(builder, &shared, cfg, &ready, fam, tables, sets)?
            }
        };
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_config::Source;
    use std::collections::BTreeMap;

    fn cfg_with(pairs: &[(&str, &str)]) -> Config {
        let env: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        cfg
    }

    #[test]
    fn chain_insert_mode_reaches_the_iptables_options() {
        use crate::dataplane::iptables::ChainInsertMode;
        assert_eq!(
            family::configured_insert_mode(&cfg_with(&[])),
            ChainInsertMode::Insert
        );
        assert_eq!(
            family::configured_insert_mode(&cfg_with(&[("ChainInsertMode", "Append")])),
            ChainInsertMode::Append
        );
    }
}
