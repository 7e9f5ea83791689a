//! eBPF mode: the node-wide BPF manager and driver, the BPF leftovers sweeper of the other
//! modes, and BPF mode's per-family managers.
//!
//! | actor | registered | what |
//! |---|---|---|
//! | `manager/bpf-endpoints` | once | workloads, host endpoints, policies, profiles, IP sets, routes, failsafe ports -> [`BpfDesired`] |
//! | `driver/bpf` | once (`Routes` phase: a failure does not hold the `*tables` phase; the accept chains follow [`BpfReady`]) | [`BpfDesired`] -> `felix_bpf::BpfDataplane`; publishes [`BpfReady`] |
//! | `driver/bpf-cleanup` | once, iptables and nftables mode only (`Routes` phase) | removes an eBPF-mode run's programs, links, filters, qdiscs and pins |
//! | `manager/bpf-tables-vN` | per family | the dispatch chains BPF mode keeps, accepting the READY interfaces (see [`BpfTablesManager`]) |
//! | `manager/endpoints-vN` | per family | routes to local workloads and workload interface settings only (`EndpointOutputs::tables` is `None`: BPF mode has no endpoint or policy chains) |
//! | `manager/cluster-routes-vN`, `manager/masq-vN` | per family | as in iptables mode |
//!
//! BPF mode's `*tables` drivers are those of the flavour `NFTablesMode` selects: iptables
//! mode's (`driver/ipsets-vN`, `driver/iptables-<table>-vN`), or with `NFTablesMode=Enabled`
//! nftables mode's (`driver/nftables-vN`, `driver/ipset-cleanup-vN`), with
//! `manager/static-vN`. Everything else of an earlier run of the same flavour (policy, profile
//! and endpoint chains, the calc graph's IP sets) is swept by those drivers' mark-and-sweep;
//! the other flavour's rules by `driver/cleanup-vN`.

use std::path::PathBuf;

use felix_actors::{ActorSeam, DesiredInput, DriverSpec, ManagerSpec, Phase, SupervisorBuilder};
use felix_bpf::routes::{Failsafe, FSAFE_IN, FSAFE_OUT};
use felix_bpf::{BpfAttachType, Options};
use felix_config::Config;
use ipnet::IpNet;

use crate::dataplane::bpf::driver::DropReports;
use crate::dataplane::bpf::policy::SharedDropNames;
use crate::dataplane::bpf::{
    BpfCleanupDriver, BpfDesired, BpfDriver, BpfDriverOptions, BpfEndpointManager, BpfReady,
    BpfTablesManager,
};
use crate::dataplane::managers::{
    ClusterRouteSettings, ClusterRoutesManager, EndpointManager, EndpointOutputs, MasqManager,
    Payload, SetInputs, TableInputs,
};
use crate::dataplane::rules::{RenderConfig, Renderer};
use crate::dataplane::IpVersion;

use super::family::{Family, Shared};
use super::WiringError;

/// `BPFAttachType` of the configuration, as the loader's type.
pub(super) fn attach_type(cfg: &Config) -> BpfAttachType {
    match cfg.bpf_attach_type() {
        felix_config::BpfAttachType::Netkit => BpfAttachType::Netkit,
        felix_config::BpfAttachType::Tcx => BpfAttachType::Tcx,
        felix_config::BpfAttachType::Tc => BpfAttachType::Tc,
    }
}

/// The loader options of `cfg`: the standard pin root; `BPFLogLevel=Debug` selects the
/// debug path (and the match-all log filter).
pub(super) fn loader_options(cfg: &Config) -> Options {
    Options {
        debug: cfg.bpf_log_level().eq_ignore_ascii_case("debug"),
        ct_capacity: u32::try_from(cfg.bpf_map_size_conntrack().max(1)).unwrap_or(u32::MAX),
        ..Options::default()
    }
}

/// The drop-report switch and rate of `cfg` (`DropAttributionEnabled`,
/// `DropAttributionRateLimit`: reports per second per rule).
pub(super) fn drop_config(cfg: &Config) -> felix_bpf::drops::DropConfig {
    felix_bpf::drops::DropConfig {
        enabled: cfg.drop_attribution_enabled(),
        per_sec: u32::try_from(cfg.drop_attribution_rate_limit().max(1)).unwrap_or(100),
    }
}

/// The failsafe map's entries of `cfg` (`FailsafeInboundHostPorts`,
/// `FailsafeOutboundHostPorts`): a port without a net is open to peers of both versions. A
/// protocol other than TCP, UDP or SCTP has no ports, so it is left out (with a warning).
pub(super) fn failsafes(cfg: &Config) -> Vec<Failsafe> {
    let mut out = Vec::new();
    for (dir, ports) in [
        (FSAFE_IN, cfg.failsafe_inbound_host_ports()),
        (FSAFE_OUT, cfg.failsafe_outbound_host_ports()),
    ] {
        for p in ports {
            let proto = match p.protocol.to_ascii_lowercase().as_str() {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                other => {
                    tracing::warn!(
                        protocol = other,
                        port = p.port,
                        "failsafe port of a protocol without ports: no effect in BPF mode"
                    );
                    continue;
                }
            };
            let nets: Vec<IpNet> = match p.net {
                Some(n) => vec![n],
                None => vec![
                    IpNet::V4(ipnet::Ipv4Net::default()),
                    IpNet::V6(ipnet::Ipv6Net::default()),
                ],
            };
            out.extend(nets.into_iter().map(|net| Failsafe {
                dir,
                proto,
                port: p.port,
                net,
            }));
        }
    }
    out
}

/// Registers `manager/bpf-endpoints` and `driver/bpf` (once per node); the driver publishes
/// into `ready`.
pub(super) fn register_node(
    b: SupervisorBuilder<Payload>,
    shared: &Shared,
    cfg: &Config,
    ready: &BpfReady,
    drop_names: &SharedDropNames,
) -> SupervisorBuilder<Payload> {
    let cell = DesiredInput::new(BpfDesired::default());
    let attach = attach_type(cfg);
    let out = cell.clone();
    let failsafes = failsafes(cfg);
    let (st, prefixes) = (shared.ifaces.clone(), shared.prefixes.clone());
    let b = b.manager(ManagerSpec::new(
        "manager/bpf-endpoints",
        BpfEndpointManager::wants,
        move || {
            Box::new(
                BpfEndpointManager::new(out.clone(), attach)
                    .with_failsafes(failsafes.clone())
                    .with_interfaces(&st, &prefixes),
            )
        },
    ));
    let opts = BpfDriverOptions {
        loader: loader_options(cfg),
        clock: shared.clock.clone(),
        drops: DropReports {
            config: drop_config(cfg),
            names: drop_names.clone(),
        },
        ..BpfDriverOptions::default()
    };
    let (st, ready) = (shared.ifaces.clone(), ready.clone());
    b.driver(
        DriverSpec::new(
            "driver/bpf",
            Phase::Routes,
            cell,
            move |seam: &ActorSeam| {
                BpfDriver::new(seam, opts.clone(), ready.clone())
                    .with_interface_events(st.subscribe())
            },
        )
        .with_ops(felix_bpf::ops::op::ALL),
    )
}

/// Registers `driver/bpf-cleanup` (once per node, iptables and nftables mode).
pub(super) fn register_cleanup(
    b: SupervisorBuilder<Payload>,
    cfg: &Config,
) -> SupervisorBuilder<Payload> {
    let opts = loader_options(cfg);
    b.driver(
        DriverSpec::new(
            "driver/bpf-cleanup",
            Phase::Routes,
            DesiredInput::new(()),
            move |seam: &ActorSeam| {
                BpfCleanupDriver::new(seam, opts.clone(), PathBuf::from("/sys/class/net"))
            },
        )
        .with_ops(felix_bpf::ops::op::ALL),
    )
}

/// BPF mode's per-family managers (see the module docs); the accept chains follow `ready`.
pub(super) fn register_managers(
    mut b: SupervisorBuilder<Payload>,
    shared: &Shared,
    cfg: &Config,
    ready: &BpfReady,
    fam: Family,
    tables: TableInputs,
    sets: SetInputs,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    let ipv = fam.ipv;
    let render_cfg =
        RenderConfig::from_felix_config(cfg, ipv).map_err(|source| WiringError::Render {
            ipv: ipv.number(),
            source,
        })?;
    let renderer = Renderer::new(render_cfg);
    let (t, ready) = (tables.clone(), ready.clone());
    b = fam.manager(b, "bpf-tables", BpfTablesManager::wants, move |n| {
        Box::new(BpfTablesManager::new(
            n,
            renderer.clone(),
            t.clone(),
            ready.clone(),
        ))
    });
    // BPF mode has no endpoint or policy chains: the endpoint manager writes routes and
    // interface settings only.
    let out = EndpointOutputs {
        tables: None,
        routes: fam.routes.clone(),
        ifaces: fam.ifaces.clone(),
    };
    let (src, st, prefixes) = (
        fam.source.clone(),
        shared.ifaces.clone(),
        shared.prefixes.clone(),
    );
    b = fam.manager(b, "endpoints", EndpointManager::wants, move |n| {
        Box::new(
            EndpointManager::new(n, ipv, src.clone(), out.clone()).with_interfaces(&st, &prefixes),
        )
    });
    let cluster = ClusterRouteSettings {
        mtu: shared.vxlan_mtu[usize::from(ipv == IpVersion::V6)],
        ..shared.cluster.clone()
    };
    let (routes, vx) = (fam.routes.clone(), fam.vxlan.clone());
    b = fam.manager(b, "cluster-routes", ClusterRoutesManager::wants, move |n| {
        Box::new(ClusterRoutesManager::new(
            n,
            ipv,
            cluster.clone(),
            routes.clone(),
            vx.clone(),
        ))
    });
    let (src, exclude_hosts) = (fam.source.clone(), shared.nat_exclude_host_ips);
    Ok(fam.manager(b, "masq", MasqManager::wants, move |n| {
        Box::new(
            MasqManager::new(n, ipv, src.clone(), tables.clone(), sets.clone())
                .excluding_host_ips(exclude_hosts),
        )
    }))
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
    fn attach_type_and_log_level_reach_the_loader() {
        assert_eq!(attach_type(&cfg_with(&[])), BpfAttachType::Netkit);
        assert_eq!(
            attach_type(&cfg_with(&[("BPFAttachType", "TC")])),
            BpfAttachType::Tc
        );
        assert_eq!(
            attach_type(&cfg_with(&[("BPFAttachType", "TCX")])),
            BpfAttachType::Tcx
        );
        assert!(!loader_options(&cfg_with(&[])).debug);
        assert!(!loader_options(&cfg_with(&[("BPFLogLevel", "Info")])).debug);
        let debug = loader_options(&cfg_with(&[("BPFLogLevel", "Debug")]));
        assert!(debug.debug);
        assert_eq!(debug.root, Options::default().root);
    }
}
