//! The part of the wiring every mode shares: per-run settings ([`Shared`]) and, per IP family
//! ([`Family`]), the route, interface-settings and cleanup drivers and the managers.

use std::sync::Arc;
use std::time::Duration;

use felix_actors::clock::SharedClock;
use felix_actors::{
    ActorSeam, DesiredInput, Driver, DriverSpec, Manager, ManagerSpec, Phase, SupervisorBuilder,
};
use felix_config::Config;

use crate::dataplane::cleanup::{CleanupDriver, CleanupMode};
use crate::dataplane::desired::{IfacesDesired, RoutesDesired, VxlanDesired};
use crate::dataplane::ifacemon::InterfaceState;
use crate::dataplane::iproute::{IfacesDriver, RouteOwnership, RoutesDriver};
use crate::dataplane::iptables::{BackendChoice, ChainInsertMode, IptablesBackend};
use crate::dataplane::kernel::{CommandRunner, Commands};
use crate::dataplane::managers::{
    kernel_has_ipip, ChainSource, ClusterRouteSettings, ClusterRoutesManager, EndpointManager,
    EndpointOutputs, IpSetsManager, MasqManager, Payload, PolicyManager, RendererSource, SetInputs,
    StaticManager, TableInputs,
};
use crate::dataplane::netlink::{NetlinkProvider, Seamed};
use crate::dataplane::rules::{RenderConfig, Renderer};
use crate::dataplane::vxlan::{self, VxlanDriver};
use crate::dataplane::IpVersion;

use super::WiringError;

/// Settings and handles shared by every family and mode of one run.
pub(super) struct Shared {
    pub runner: Arc<dyn CommandRunner>,
    pub ifaces: InterfaceState,
    /// The iptables backend, detected once and shared by every table and cleanup driver.
    pub backend: BackendChoice,
    pub insert_mode: ChainInsertMode,
    pub lock_timeout: Duration,
    pub lock_probe_interval: Duration,
    pub refresh: Duration,
    pub ip_forwarding: bool,
    pub own: RouteOwnership,
    pub prefixes: Vec<String>,
    /// Routing state (routes, VXLAN) goes through this kernel's rtnetlink.
    pub netlink: Arc<dyn NetlinkProvider>,
    pub clock: SharedClock,
    /// `RouteRefreshInterval` (`None`: 0, no periodic re-read).
    pub route_refresh: Option<Duration>,
    /// `RouteSyncDisabled`: no route driver at all.
    pub route_sync_disabled: bool,
    /// The cluster-route settings both families share (MTU filled in per family).
    pub cluster: ClusterRouteSettings,
    pub vxlan_mtu: [Option<u32>; 2],
    /// `DeviceRouteSourceAddress` and `...IPv6`.
    pub device_route_src: [Option<std::net::IpAddr>; 2],
    /// `NATOutgoingExclusions=IPPoolsAndHostIPs`: NAT-outgoing leaves traffic to node IPs alone.
    pub nat_exclude_host_ips: bool,
}

impl Shared {
    pub fn new(cfg: &Config, runner: Arc<dyn CommandRunner>, ifaces: &InterfaceState) -> Self {
        let positive = |v: i64| u32::try_from(v).ok().filter(|v| *v > 0);
        let program_cluster_routes = cfg.program_cluster_routes();
        Shared {
            netlink: runner.netlink(),
            clock: felix_actors::clock::system(),
            route_refresh: Some(cfg.route_refresh_interval()).filter(|d| !d.is_zero()),
            route_sync_disabled: cfg.route_sync_disabled(),
            cluster: ClusterRouteSettings {
                hostname: cfg.felix_hostname().to_string(),
                vxlan_enabled: cfg.vxlan_enabled(),
                vni: u32::try_from(cfg.vxlan_vni()).unwrap_or(4096),
                port: u16::try_from(cfg.vxlan_port()).unwrap_or(4789),
                mtu: None,
                no_encap_routes: program_cluster_routes == "Enabled"
                    || program_cluster_routes == "EnabledNoEncapOnly",
                ipip_supported: kernel_has_ipip(),
            },
            vxlan_mtu: [positive(cfg.vxlan_mtu()), positive(cfg.vxlan_mtu_v6())],
            device_route_src: [
                cfg.device_route_source_address()
                    .map(std::net::IpAddr::from),
                cfg.device_route_source_address_ipv6()
                    .map(std::net::IpAddr::from),
            ],
            runner,
            ifaces: ifaces.clone(),
            backend: BackendChoice::new(configured_backend(cfg)),
            insert_mode: configured_insert_mode(cfg),
            lock_timeout: cfg.iptables_lock_timeout(),
            lock_probe_interval: cfg.iptables_lock_probe_interval(),
            refresh: cfg.table_refresh_interval().max(Duration::from_secs(1)),
            ip_forwarding: cfg.ip_forwarding() == "Enabled",
            own: RouteOwnership {
                workload_prefixes: cfg.interface_prefix().to_vec(),
                remove_external_routes: cfg.remove_external_routes(),
                device_route_protocol: u8::try_from(cfg.device_route_protocol()).unwrap_or(3),
                owned_ifaces: vxlan::owned_devices()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                // `RouteTableRanges` are the tables felix may allocate; nothing on this node
                // allocates one (WireGuard and egress gateways are absent), so no table is
                // owned outright and felix's routes live in the main table.
                owned_tables: Vec::new(),
                device_route_src: None,
            },
            prefixes: cfg.interface_prefix().to_vec(),
            nat_exclude_host_ips: cfg.nat_outgoing_exclusions() == "IPPoolsAndHostIPs",
        }
    }

    /// Registers `driver/<what>-vN` of `fam` (in its family's lane) over rtnetlink: `make`
    /// gets the driver's netlink handle, on the driver's seam.
    pub fn netlink_driver<D: Driver>(
        &self,
        builder: SupervisorBuilder<Payload>,
        (fam, what): (&Family, &str),
        phase: Phase,
        input: DesiredInput<D::Desired>,
        make: impl Fn(Seamed) -> D + Send + Sync + 'static,
    ) -> SupervisorBuilder<Payload> {
        let provider = self.netlink.clone();
        builder.driver(family_driver(
            (fam, what),
            phase,
            input,
            crate::dataplane::netlink::OPS,
            move |seam: &ActorSeam| make(Seamed::new(provider.clone(), seam.clone())),
        ))
    }

    /// Registers `driver/<what>-vN` of `fam` (in its family's lane, see
    /// `DriverSpec::in_lane`), built by `make` from its `Commands` (the runtime's seam for that
    /// driver plus the shared runner) at start and at every restart.
    /// `ops`: the command operations the driver runs (fault targets).
    pub fn driver<D: Driver>(
        &self,
        builder: SupervisorBuilder<Payload>,
        (fam, what): (&Family, &str),
        phase: Phase,
        input: DesiredInput<D::Desired>,
        ops: &[&'static str],
        make: impl Fn(Commands) -> D + Send + Sync + 'static,
    ) -> SupervisorBuilder<Payload> {
        let runner = self.runner.clone();
        builder.driver(family_driver(
            (fam, what),
            phase,
            input,
            ops,
            move |seam: &ActorSeam| make(Commands::new(runner.clone(), seam.clone())),
        ))
    }
}

/// The spec of `driver/<what>-vN` of `fam`: named and put in its family's lane (see
/// `DriverSpec::in_lane`), with `ops` as its fault targets; `make` builds it from its seam.
fn family_driver<D: Driver>(
    (fam, what): (&Family, &str),
    phase: Phase,
    input: DesiredInput<D::Desired>,
    ops: &[&'static str],
    make: impl Fn(&ActorSeam) -> D + Send + Sync + 'static,
) -> DriverSpec {
    DriverSpec::new(&fam.name("driver", what), phase, input, make)
        .in_lane(fam.ipv.number())
        .with_ops(ops)
}

/// One IP family's names, renderer and desired-state cells shared by its managers and drivers.
pub(super) struct Family {
    pub ipv: IpVersion,
    /// `v4` or `v6`, the suffix of every actor name of this family.
    pub suffix: &'static str,
    pub source: Arc<dyn ChainSource>,
    pub routes: DesiredInput<RoutesDesired>,
    pub ifaces: DesiredInput<IfacesDesired>,
    pub vxlan: DesiredInput<VxlanDesired>,
}

impl Family {
    pub fn new(_shared: &Shared, cfg: &Config, ipv: IpVersion) -> Result<Self, WiringError> {
        let render_cfg =
            RenderConfig::from_felix_config(cfg, ipv).map_err(|source| WiringError::Render {
                ipv: ipv.number(),
                source,
            })?;
        Ok(Family {
            ipv,
            suffix: match ipv {
                IpVersion::V4 => "v4",
                IpVersion::V6 => "v6",
            },
            source: Arc::new(RendererSource::new(Renderer::new(render_cfg))),
            routes: DesiredInput::new(RoutesDesired::default()),
            ifaces: DesiredInput::new(IfacesDesired::default()),
            vxlan: DesiredInput::new(VxlanDesired::default()),
        })
    }

    /// The actor name `<kind>/<what>-vN`.
    pub fn name(&self, kind: &str, what: &str) -> String {
        format!("{kind}/{what}-{}", self.suffix)
    }

    /// `driver/vxlan-vN` (VxlanFdb), `driver/routes-vN` (Routes; none with
    /// `RouteSyncDisabled`), `driver/ifaces-vN` and `driver/cleanup-vN`.
    pub fn register_shared_drivers(
        &self,
        mut b: SupervisorBuilder<Payload>,
        shared: &Shared,
        nftables_rules: bool,
    ) -> SupervisorBuilder<Payload> {
        let ipv = self.ipv;
        b = shared.netlink_driver(
            b,
            (self, "vxlan"),
            Phase::VxlanFdb,
            self.vxlan.clone(),
            move |nl| VxlanDriver::new(ipv, nl),
        );
        if shared.route_sync_disabled {
            tracing::info!(
                ipv = ipv.number(),
                "RouteSyncDisabled: felix programs no routes"
            );
        } else {
            let own = RouteOwnership {
                device_route_src: shared.device_route_src[usize::from(ipv == IpVersion::V6)],
                ..shared.own.clone()
            };
            let (own, st, clock, refresh) = (
                own,
                shared.ifaces.clone(),
                shared.clock.clone(),
                shared.route_refresh,
            );
            b = shared.netlink_driver(
                b,
                (self, "routes"),
                Phase::Routes,
                self.routes.clone(),
                move |nl| {
                    RoutesDriver::new(ipv, nl, own.clone(), clock.clone(), refresh)
                        .with_interface_events(st.subscribe())
                },
            );
        }
        let (fwd, st) = (shared.ip_forwarding, shared.ifaces.clone());
        b = shared.driver(
            b,
            (self, "ifaces"),
            Phase::Routes,
            self.ifaces.clone(),
            crate::dataplane::iproute::OPS,
            move |c| IfacesDriver::new(ipv, c, fwd).with_interface_events(st.subscribe()),
        );
        // `driver/cleanup-vN` sweeps the `*tables` flavour we are not programming.
        let cleanup = if nftables_rules {
            CleanupMode::Nftables
        } else {
            CleanupMode::Iptables(shared.backend.clone())
        };
        let refresh = shared.refresh;
        shared.driver(
            b,
            (self, "cleanup"),
            Phase::Tables,
            DesiredInput::new(()),
            crate::dataplane::cleanup::OPS,
            move |c| CleanupDriver::new(ipv, c, cleanup.clone(), refresh),
        )
    }

    /// Registers `manager/<what>-vN`, built by `make` (given its name) at start and at every
    /// restart.
    pub(super) fn manager(
        &self,
        b: SupervisorBuilder<Payload>,
        what: &str,
        wants: fn(&Payload) -> bool,
        make: impl Fn(&str) -> Box<dyn Manager<Payload>> + Send + Sync + 'static,
    ) -> SupervisorBuilder<Payload> {
        let name = self.name("manager", what);
        let n = name.clone();
        b.manager(ManagerSpec::new(&name, wants, move || make(&n)))
    }

    /// `manager/static-vN`.
    pub fn register_static_manager(
        &self,
        b: SupervisorBuilder<Payload>,
        tables: &TableInputs,
    ) -> SupervisorBuilder<Payload> {
        let (src, t) = (self.source.clone(), tables.clone());
        self.manager(
            b,
            "static",
            |_| false,
            move |n| Box::new(StaticManager::new(n, src.clone(), t.clone())),
        )
    }

    /// `manager/ipsets-vN`, `manager/policy-vN`, `manager/endpoints-vN`, `manager/masq-vN`.
    pub fn register_managers(
        self,
        mut b: SupervisorBuilder<Payload>,
        shared: &Shared,
        tables: TableInputs,
        sets: SetInputs,
    ) -> SupervisorBuilder<Payload> {
        let ipv = self.ipv;
        let s = sets.clone();
        b = self.manager(b, "ipsets", IpSetsManager::wants, move |n| {
            Box::new(IpSetsManager::new(n, ipv, s.clone()))
        });
        let (src, t) = (self.source.clone(), tables.clone());
        b = self.manager(b, "policy", PolicyManager::wants, move |n| {
            Box::new(PolicyManager::new(n, src.clone(), t.clone()))
        });
        let out = EndpointOutputs {
            tables: Some(tables.clone()),
            routes: self.routes.clone(),
            ifaces: self.ifaces.clone(),
        };
        let (src, st, prefixes) = (
            self.source.clone(),
            shared.ifaces.clone(),
            shared.prefixes.clone(),
        );
        b = self.manager(b, "endpoints", EndpointManager::wants, move |n| {
            Box::new(
                EndpointManager::new(n, ipv, src.clone(), out.clone())
                    .with_interfaces(&st, &prefixes),
            )
        });
        let cluster = ClusterRouteSettings {
            mtu: shared.vxlan_mtu[usize::from(ipv == IpVersion::V6)],
            ..shared.cluster.clone()
        };
        let (routes, vx) = (self.routes.clone(), self.vxlan.clone());
        b = self.manager(b, "cluster-routes", ClusterRoutesManager::wants, move |n| {
            Box::new(ClusterRoutesManager::new(
                n,
                ipv,
                cluster.clone(),
                routes.clone(),
                vx.clone(),
            ))
        });
        let (src, exclude_hosts) = (self.source.clone(), shared.nat_exclude_host_ips);
        self.manager(b, "masq", MasqManager::wants, move |n| {
            Box::new(
                MasqManager::new(n, ipv, src.clone(), tables.clone(), sets.clone())
                    .excluding_host_ips(exclude_hosts),
            )
        })
    }
}

fn configured_backend(cfg: &Config) -> IptablesBackend {
    match cfg.iptables_backend() {
        felix_config::IptablesBackend::Legacy => IptablesBackend::Legacy,
        felix_config::IptablesBackend::Nft => IptablesBackend::Nft,
        felix_config::IptablesBackend::Auto => IptablesBackend::Auto,
    }
}

pub(super) fn configured_insert_mode(cfg: &Config) -> ChainInsertMode {
    match cfg.chain_insert_mode() {
        felix_config::ChainInsertMode::Insert => ChainInsertMode::Insert,
        felix_config::ChainInsertMode::Append => ChainInsertMode::Append,
    }
}
