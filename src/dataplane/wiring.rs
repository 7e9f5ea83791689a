//! Registers the Linux dataplane's managers and drivers on a supervisor
//! builder, for the configured mode and both IP families.
//!
//! Per IP family (IPv6 only when `Ipv6Support`):
//!
//! * managers, in programming order: `manager/static-vN` (static chains
//!   first, so the fail-closed drops are in place before anything else),
//!   `manager/ipsets-vN`, `manager/policy-vN`, `manager/endpoints-vN`,
//!   `manager/masq-vN`;
//! * iptables mode: `driver/ipsets-vN` (IpSets),
//!   `driver/iptables-{filter,nat,mangle,raw}-vN` (Tables; the backend is
//!   detected once, through the first driver's seam, honouring
//!   `IptablesBackend`);
//! * nftables mode: `driver/nftables-vN` (Tables; IP sets live in the table)
//!   and `driver/ipset-cleanup-vN` (IpSets; deletes the `ipset` sets an
//!   iptables-mode run left, as upstream does);
//! * both: `driver/routes-vN` and `driver/ifaces-vN` (Routes; subscribed
//!   to the interface monitor's state with [`register_with_interfaces`]) and
//!   `driver/cleanup-vN` (Tables; sweeps the backend we are not
//!   programming, paced by the tables refresh interval).
//!
//! Nothing here touches the kernel: detection and every sweep happen in
//! driver applies, after in-sync.

use std::sync::Arc;
use std::time::Duration;

use felix_actors::{DesiredInput, DriverSpec, ManagerSpec, Phase, StateKey, SupervisorBuilder};
use felix_config::{Config, DataplaneMode};

use crate::dataplane::generictables::IpVersion;
use crate::dataplane::ifacemon::InterfaceState;
use crate::dataplane::ipsets::IpSetsOptions;
use crate::dataplane::iptables::{ChainInsertMode, IptablesBackend, IptablesOptions};
use crate::dataplane::kernel::CommandSeam;
use crate::dataplane::managers::drivers::{
    BackendChoice, CleanupDriver, CleanupMode, IfacesDriver, IpSetCleanupDriver, IpSetsDriver,
    IptablesDriver, NftablesDriver, RoutesDriver,
};
use crate::dataplane::managers::{
    ChainSource, EndpointManager, EndpointOutputs, IfacesDesired, IpSetsDesired, IpSetsManager,
    MasqManager, NftDesired, Payload, PolicyManager, RendererSource, RoutesDesired, SetInputs,
    StaticManager, TableInputs,
};
use crate::dataplane::netlink::RouteOwnership;
use crate::dataplane::nftables::NftablesOptions;
use crate::dataplane::rules::{RenderConfig, RenderError, Renderer};

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
    /// The configuration selects a dataplane this wiring does not program.
    #[error("dataplane mode {0} is not programmed by the *tables wiring")]
    UnsupportedMode(&'static str),
}

/// The latest-state key of a message, for replay to a restarted manager.
///
/// IP-set deltas are classed transient: the runtime keeps one message per
/// key and cannot merge a delta into its set's full update, so a manager
/// restarted after deltas only recovers the members of the last full
/// update (a known gap; see the module report).
pub fn state_key(p: &Payload) -> StateKey {
    use felix_proto::to_dataplane::Payload as P;
    let wep = |id: &Option<felix_proto::WorkloadEndpointId>| {
        id.as_ref()
            .map(|i| {
                format!(
                    "wep/{}/{}/{}",
                    i.orchestrator_id, i.workload_id, i.endpoint_id
                )
            })
            .unwrap_or_else(|| "wep/".into())
    };
    let pol = |id: &Option<felix_proto::PolicyId>| {
        id.as_ref()
            .map(|i| format!("policy/{}/{}/{}", i.kind, i.namespace, i.name))
            .unwrap_or_else(|| "policy/".into())
    };
    match p {
        P::IpsetUpdate(u) => StateKey::Set(format!("ipset/{}", u.id)),
        P::IpsetRemove(r) => StateKey::Remove(format!("ipset/{}", r.id)),
        P::IpsetDeltaUpdate(_) => StateKey::Transient,
        P::ActivePolicyUpdate(u) => StateKey::Set(pol(&u.id)),
        P::ActivePolicyRemove(r) => StateKey::Remove(pol(&r.id)),
        P::ActiveProfileUpdate(u) => StateKey::Set(format!(
            "profile/{}",
            u.id.as_ref().map(|i| i.name.as_str()).unwrap_or("")
        )),
        P::ActiveProfileRemove(r) => StateKey::Remove(format!(
            "profile/{}",
            r.id.as_ref().map(|i| i.name.as_str()).unwrap_or("")
        )),
        P::WorkloadEndpointUpdate(u) => StateKey::Set(wep(&u.id)),
        P::WorkloadEndpointRemove(r) => StateKey::Remove(wep(&r.id)),
        P::HostEndpointUpdate(u) => StateKey::Set(format!(
            "hep/{}",
            u.id.as_ref().map(|i| i.endpoint_id.as_str()).unwrap_or("")
        )),
        P::HostEndpointRemove(r) => StateKey::Remove(format!(
            "hep/{}",
            r.id.as_ref().map(|i| i.endpoint_id.as_str()).unwrap_or("")
        )),
        P::IpamPoolUpdate(u) => StateKey::Set(format!("pool/{}", u.id)),
        P::IpamPoolRemove(r) => StateKey::Remove(format!("pool/{}", r.id)),
        _ => StateKey::Transient,
    }
}

fn family_name(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "v4",
        IpVersion::V6 => "v6",
    }
}

fn configured_backend(cfg: &Config) -> IptablesBackend {
    match cfg.iptables_backend() {
        felix_config::IptablesBackend::Legacy => IptablesBackend::Legacy,
        felix_config::IptablesBackend::Nft => IptablesBackend::Nft,
        felix_config::IptablesBackend::Auto => IptablesBackend::Auto,
    }
}

fn configured_insert_mode(cfg: &Config) -> ChainInsertMode {
    match cfg.chain_insert_mode() {
        felix_config::ChainInsertMode::Insert => ChainInsertMode::Insert,
        felix_config::ChainInsertMode::Append => ChainInsertMode::Append,
    }
}

/// Registers the managers and drivers for `cfg`'s `*tables` mode; every
/// kernel command runs on `commands` (the real `SystemCommands`, one bound
/// to a network namespace in tests). No interface monitor feeds the route
/// and interface drivers: late interfaces wait for the retry ticker.
pub fn register(
    builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    commands: Arc<dyn CommandSeam>,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    register_with_interfaces(builder, cfg, commands, &InterfaceState::default())
}

/// [`register`], with the route and interface-settings drivers subscribed
/// to `ifaces`, the state the interface monitor keeps
/// (`crate::dataplane::ifacemon`).
pub fn register_with_interfaces(
    mut builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    commands: Arc<dyn CommandSeam>,
    ifaces_state: &InterfaceState,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    let mode = cfg.dataplane_mode();
    if mode == DataplaneMode::Bpf {
        return Err(WiringError::UnsupportedMode(mode.as_str()));
    }
    let mut families = vec![IpVersion::V4];
    if cfg.ipv6_support() {
        families.push(IpVersion::V6);
    }
    let backend = BackendChoice::new(configured_backend(cfg));
    let ip_forwarding = cfg.ip_forwarding() == "Enabled";
    let refresh = cfg.table_refresh_interval().max(Duration::from_secs(1));
    let max_ipset = u32::try_from(cfg.max_ipset_size().max(1)).unwrap_or(u32::MAX);
    let own = RouteOwnership {
        workload_prefixes: cfg.interface_prefix().to_vec(),
        remove_external_routes: cfg.remove_external_routes(),
        device_route_protocol: u8::try_from(cfg.device_route_protocol()).unwrap_or(3),
    };
    let ipt_opts = IptablesOptions {
        lock_timeout: cfg.iptables_lock_timeout(),
        lock_probe_interval: cfg.iptables_lock_probe_interval(),
        refresh_interval: refresh,
        insert_mode: configured_insert_mode(cfg),
        ..IptablesOptions::default()
    };
    let nft_opts = NftablesOptions {
        refresh_interval: refresh,
        ..NftablesOptions::default()
    };
    // Deletions are rate limited per apply; upstream reschedules every
    // 100 ms, our applies come no faster than the retry ticker when idle,
    // so allow a few per apply.
    let ipset_opts = IpSetsOptions {
        max_deletions_per_iteration: 10,
        ..IpSetsOptions::default()
    };

    // Managers are registered family by family after all statics, so every
    // family's static chains are in the first part of the pass.
    let mut per_family = Vec::new();
    for &ipv in &families {
        let fam = family_name(ipv);
        let render_cfg =
            RenderConfig::from_felix_config(cfg, ipv).map_err(|source| WiringError::Render {
                ipv: ipv.number(),
                source,
            })?;
        let source: Arc<dyn ChainSource> = Arc::new(RendererSource::new(Renderer::new(render_cfg)));
        let routes = DesiredInput::new(RoutesDesired::default());
        let ifaces = DesiredInput::new(IfacesDesired::default());
        let (tables, sets) = match mode {
            DataplaneMode::Nftables => {
                let cell = DesiredInput::new(NftDesired::default());
                let t = TableInputs::Nftables(cell.clone());
                let s = SetInputs::Nftables(cell.clone());
                let name = format!("driver/nftables-{fam}");
                let (seam, opts, n) = (commands.clone(), nft_opts.clone(), name.clone());
                builder = builder.driver(DriverSpec::new(
                    &name,
                    Phase::Tables,
                    cell.clone(),
                    move || NftablesDriver::new(&n, ipv, seam.clone(), opts.clone()),
                ));
                let name = format!("driver/ipset-cleanup-{fam}");
                let (seam, opts, n) = (commands.clone(), ipset_opts.clone(), name.clone());
                builder = builder.driver(DriverSpec::new(
                    &name,
                    Phase::IpSets,
                    DesiredInput::new(IpSetsDesired::default()),
                    move || IpSetCleanupDriver::new(&n, ipv, seam.clone(), opts.clone()),
                ));
                (t, s)
            }
            _ => {
                let t = TableInputs::new_iptables();
                let set_cell = DesiredInput::new(IpSetsDesired::default());
                let name = format!("driver/ipsets-{fam}");
                let (seam, opts, n) = (commands.clone(), ipset_opts.clone(), name.clone());
                builder = builder.driver(DriverSpec::new(
                    &name,
                    Phase::IpSets,
                    set_cell.clone(),
                    move || IpSetsDriver::new(&n, ipv, seam.clone(), opts.clone(), max_ipset),
                ));
                if let TableInputs::Iptables(cells) = &t {
                    for (table, cell) in cells {
                        let table = *table;
                        let name = format!("driver/iptables-{}-{fam}", table.as_str());
                        let (seam, opts, n, b) = (
                            commands.clone(),
                            ipt_opts.clone(),
                            name.clone(),
                            backend.clone(),
                        );
                        builder = builder.driver(DriverSpec::new(
                            &name,
                            Phase::Tables,
                            cell.clone(),
                            move || {
                                IptablesDriver::new(
                                    &n,
                                    table,
                                    ipv,
                                    seam.clone(),
                                    b.clone(),
                                    opts.clone(),
                                )
                            },
                        ));
                    }
                }
                (t, SetInputs::Ipset(set_cell))
            }
        };
        let name = format!("driver/routes-{fam}");
        let (seam, o, n, st) = (
            commands.clone(),
            own.clone(),
            name.clone(),
            ifaces_state.clone(),
        );
        builder = builder.driver(DriverSpec::new(
            &name,
            Phase::Routes,
            routes.clone(),
            move || {
                RoutesDriver::new(&n, ipv, seam.clone(), o.clone())
                    .with_interface_events(st.subscribe())
            },
        ));
        let name = format!("driver/ifaces-{fam}");
        let (seam, n, st) = (commands.clone(), name.clone(), ifaces_state.clone());
        builder = builder.driver(DriverSpec::new(
            &name,
            Phase::Routes,
            ifaces.clone(),
            move || {
                IfacesDriver::new(&n, ipv, seam.clone(), ip_forwarding)
                    .with_interface_events(st.subscribe())
            },
        ));
        let name = format!("driver/cleanup-{fam}");
        let cleanup_mode = match mode {
            DataplaneMode::Nftables => CleanupMode::Nftables,
            _ => CleanupMode::Iptables(backend.clone()),
        };
        let (seam, n) = (commands.clone(), name.clone());
        builder = builder.driver(DriverSpec::new(
            &name,
            Phase::Tables,
            DesiredInput::new(()),
            move || CleanupDriver::new(&n, ipv, seam.clone(), cleanup_mode.clone(), refresh),
        ));

        let static_name = format!("manager/static-{fam}");
        let (src, t) = (source.clone(), tables.clone());
        let n = static_name.clone();
        builder = builder.manager(ManagerSpec::new(
            &static_name,
            |_| false,
            move || Box::new(StaticManager::new(&n, src.clone(), t.clone())),
        ));
        per_family.push((ipv, fam, source, tables, sets, routes, ifaces));
    }
    for (ipv, fam, source, tables, sets, routes, ifaces) in per_family {
        let name = format!("manager/ipsets-{fam}");
        let (s, n) = (sets.clone(), name.clone());
        builder = builder.manager(ManagerSpec::new(&name, IpSetsManager::wants, move || {
            Box::new(IpSetsManager::new(&n, s.clone()))
        }));
        let name = format!("manager/policy-{fam}");
        let (src, t, n) = (source.clone(), tables.clone(), name.clone());
        builder = builder.manager(ManagerSpec::new(&name, PolicyManager::wants, move || {
            Box::new(PolicyManager::new(&n, src.clone(), t.clone()))
        }));
        let name = format!("manager/endpoints-{fam}");
        let out = EndpointOutputs {
            tables: tables.clone(),
            routes,
            ifaces,
        };
        let (src, n, st) = (source.clone(), name.clone(), ifaces_state.clone());
        let prefixes = cfg.interface_prefix().to_vec();
        builder = builder.manager(ManagerSpec::new(&name, EndpointManager::wants, move || {
            Box::new(
                EndpointManager::new(&n, ipv, src.clone(), out.clone())
                    .with_interfaces(&st, &prefixes),
            )
        }));
        let name = format!("manager/masq-{fam}");
        let (src, t, s, n) = (source.clone(), tables.clone(), sets.clone(), name.clone());
        builder = builder.manager(ManagerSpec::new(&name, MasqManager::wants, move || {
            Box::new(MasqManager::new(&n, ipv, src.clone(), t.clone(), s.clone()))
        }));
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
        assert_eq!(
            configured_insert_mode(&cfg_with(&[])),
            ChainInsertMode::Insert
        );
        assert_eq!(
            configured_insert_mode(&cfg_with(&[("ChainInsertMode", "Append")])),
            ChainInsertMode::Append
        );
    }
}
