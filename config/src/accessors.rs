//! Typed accessors on [`Config`], one per parameter, plus a few derived
//! helpers that combine parameters the way upstream's dataplane does.
//!
//! Invariant: each accessor's declared [`Shape`] equals the shape of its
//! parameter's kind (checked by a unit test over [`ACCESSOR_SHAPES`]), so
//! the fallbacks in the `Value` getters below are unreachable.

use crate::config::Config;
use crate::params::Param;
use crate::types::{IfacePattern, IndexRange, Pattern, PortRange, ProtoPort};
use crate::value::{Shape, Value};
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

static EMPTY_KV: BTreeMap<String, String> = BTreeMap::new();
static EMPTY_KD: BTreeMap<String, Duration> = BTreeMap::new();

impl Value {
    /// The value of a `Bool` parameter; `false` for any other variant.
    pub fn as_bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }
    /// The value of an `OptBool` parameter; `None` when unset.
    pub fn as_opt_bool(&self) -> Option<bool> {
        match self {
            Value::OptBool(b) => *b,
            _ => None,
        }
    }
    /// The value of an `Int` parameter; `0` for any other variant.
    pub fn as_int(&self) -> i64 {
        match self {
            Value::Int(i) => *i,
            _ => 0,
        }
    }
    /// An `Int` known (by its kind's range) to fit a port number.
    pub fn as_port(&self) -> u16 {
        u16::try_from(self.as_int()).unwrap_or(0)
    }
    /// The value of a `Seconds`/`Millis` parameter; zero for any other variant.
    pub fn as_duration(&self) -> Duration {
        match self {
            Value::Duration(d) => *d,
            _ => Duration::ZERO,
        }
    }
    /// The text of a string parameter; empty for any other variant.
    pub fn as_str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            _ => "",
        }
    }
    /// The entries of a string-list parameter; empty for any other variant.
    pub fn as_str_list(&self) -> &[String] {
        match self {
            Value::StrList(l) => l,
            _ => &[],
        }
    }
    /// The entries of an `InterfaceExclude`-style pattern list.
    pub fn as_iface_patterns(&self) -> &[IfacePattern] {
        match self {
            Value::IfacePatterns(l) => l,
            _ => &[],
        }
    }
    /// The compiled regex of a `Regex` parameter; `None` when unset.
    pub fn as_regex(&self) -> Option<&Pattern> {
        match self {
            Value::Regex(r) => r.as_ref(),
            _ => None,
        }
    }
    /// The address of an IPv4 parameter; `None` when unset.
    pub fn as_ipv4(&self) -> Option<Ipv4Addr> {
        match self {
            Value::Ipv4(a) => *a,
            _ => None,
        }
    }
    /// The address of an IPv6 parameter; `None` when unset.
    pub fn as_ipv6(&self) -> Option<Ipv6Addr> {
        match self {
            Value::Ipv6(a) => *a,
            _ => None,
        }
    }
    /// The entries of a failsafe-port list parameter.
    pub fn as_ports(&self) -> &[ProtoPort] {
        match self {
            Value::Ports(p) => p,
            _ => &[],
        }
    }
    /// The range of a single port-range parameter; `None` when unset.
    pub fn as_port_range(&self) -> Option<PortRange> {
        match self {
            Value::PortRange(r) => *r,
            _ => None,
        }
    }
    /// The ranges of a port-range-list parameter.
    pub fn as_port_ranges(&self) -> &[PortRange] {
        match self {
            Value::PortRanges(r) => r,
            _ => &[],
        }
    }
    /// The mask of a mark-bitmask parameter; `0` for any other variant.
    pub fn as_mark(&self) -> u32 {
        match self {
            Value::Mark(m) => *m,
            _ => 0,
        }
    }
    /// The networks of a CIDR-list parameter.
    pub fn as_cidrs(&self) -> &[IpNet] {
        match self {
            Value::Cidrs(c) => c,
            _ => &[],
        }
    }
    /// The range of the deprecated single routing-table-range parameter; `None` when unset.
    pub fn as_route_table_range(&self) -> Option<IndexRange> {
        match self {
            Value::RouteTableRange(r) => *r,
            _ => None,
        }
    }
    /// The ranges of a routing-table-ranges parameter.
    pub fn as_route_table_ranges(&self) -> &[IndexRange] {
        match self {
            Value::RouteTableRanges(r) => r,
            _ => &[],
        }
    }
    /// The pairs of a `key=value` list parameter.
    pub fn as_key_values(&self) -> &BTreeMap<String, String> {
        match self {
            Value::KeyValues(kv) => kv,
            _ => &EMPTY_KV,
        }
    }
    /// The pairs of a `key=<duration>` list parameter.
    pub fn as_key_durations(&self) -> &BTreeMap<String, Duration> {
        match self {
            Value::KeyDurations(kv) => kv,
            _ => &EMPTY_KD,
        }
    }
}

macro_rules! accessors {
    ($( $fn:ident : $param:ident => $shape:ident . $get:ident -> $ret:ty ; )*) => {
        impl Config {
            $(
                #[doc = concat!("Effective `", stringify!($param), "`.")]
                pub fn $fn(&self) -> $ret {
                    self.value(Param::$param).$get()
                }
            )*
        }

        /// (parameter, shape its accessor expects), for the shape test.
        pub const ACCESSOR_SHAPES: &[(Param, Shape)] = &[$((Param::$param, Shape::$shape),)*];
    };
}

accessors! {
    datastore_type: DatastoreType => Str.as_str -> &str;
    felix_hostname: FelixHostname => Str.as_str -> &str;
    etcd_addr: EtcdAddr => Str.as_str -> &str;
    etcd_scheme: EtcdScheme => Str.as_str -> &str;
    etcd_endpoints: EtcdEndpoints => StrList.as_str_list -> &[String];
    etcd_ca_file: EtcdCaFile => Str.as_str -> &str;
    etcd_cert_file: EtcdCertFile => Str.as_str -> &str;
    etcd_key_file: EtcdKeyFile => Str.as_str -> &str;

    log_severity_screen_str: LogSeverityScreen => Str.as_str -> &str;
    log_severity_file_str: LogSeverityFile => Str.as_str -> &str;
    log_severity_sys_str: LogSeveritySys => Str.as_str -> &str;
    log_file_path: LogFilePath => Str.as_str -> &str;
    log_debug_filename_regex: LogDebugFilenameRegex => Regex.as_regex -> Option<&Pattern>;
    log_prefix: LogPrefix => Str.as_str -> &str;
    log_action_rate_limit: LogActionRateLimit => Str.as_str -> &str;
    log_action_rate_limit_burst: LogActionRateLimitBurst => Int.as_int -> i64;
    log_connection_transitions: LogConnectionTransitions => Str.as_str -> &str;
    log_connection_transitions_prefix: LogConnectionTransitionsPrefix => Str.as_str -> &str;
    drop_attribution_enabled: DropAttributionEnabled => Bool.as_bool -> bool;
    drop_attribution_nflog_group: DropAttributionNFLOGGroup => Int.as_int -> i64;
    drop_attribution_rate_limit: DropAttributionRateLimit => Int.as_int -> i64;
    debug_disable_log_dropping: DebugDisableLogDropping => Bool.as_bool -> bool;

    health_enabled: HealthEnabled => Bool.as_bool -> bool;
    health_host: HealthHost => Str.as_str -> &str;
    health_port: HealthPort => Int.as_port -> u16;
    health_timeout_overrides: HealthTimeoutOverrides => KeyDurations.as_key_durations -> &BTreeMap<String, Duration>;
    prometheus_metrics_enabled: PrometheusMetricsEnabled => Bool.as_bool -> bool;
    prometheus_metrics_host: PrometheusMetricsHost => Str.as_str -> &str;
    prometheus_metrics_port: PrometheusMetricsPort => Int.as_port -> u16;
    prometheus_process_metrics_enabled: PrometheusProcessMetricsEnabled => Bool.as_bool -> bool;
    dataplane_watchdog_timeout: DataplaneWatchdogTimeout => Duration.as_duration -> Duration;

    interface_prefix: InterfacePrefix => StrList.as_str_list -> &[String];
    interface_exclude: InterfaceExclude => IfacePatterns.as_iface_patterns -> &[IfacePattern];
    interface_refresh_interval: InterfaceRefreshInterval => Duration.as_duration -> Duration;
    default_endpoint_to_host_action_str: DefaultEndpointToHostAction => Str.as_str -> &str;
    failsafe_inbound_host_ports: FailsafeInboundHostPorts => Ports.as_ports -> &[ProtoPort];
    failsafe_outbound_host_ports: FailsafeOutboundHostPorts => Ports.as_ports -> &[ProtoPort];
    kube_node_port_ranges: KubeNodePortRanges => PortRanges.as_port_ranges -> &[PortRange];
    workload_source_spoofing: WorkloadSourceSpoofing => Str.as_str -> &str;
    allow_vxlan_packets_from_workloads: AllowVXLANPacketsFromWorkloads => Bool.as_bool -> bool;
    allow_ipip_packets_from_workloads: AllowIPIPPacketsFromWorkloads => Bool.as_bool -> bool;
    external_nodes_cidr_list: ExternalNodesCIDRList => Cidrs.as_cidrs -> &[IpNet];
    endpoint_reporting_enabled: EndpointReportingEnabled => Bool.as_bool -> bool;
    endpoint_reporting_delay: EndpointReportingDelaySecs => Duration.as_duration -> Duration;
    endpoint_status_path_prefix: EndpointStatusPathPrefix => Str.as_str -> &str;
    policy_sync_path_prefix: PolicySyncPathPrefix => Str.as_str -> &str;

    use_internal_dataplane_driver: UseInternalDataplaneDriver => Bool.as_bool -> bool;
    dataplane_driver: DataplaneDriver => Str.as_str -> &str;
    bpf_enabled: BPFEnabled => Bool.as_bool -> bool;
    nftables_mode_str: NFTablesMode => Str.as_str -> &str;
    iptables_backend_str: IptablesBackend => Str.as_str -> &str;
    ipv6_support: Ipv6Support => Bool.as_bool -> bool;
    ip_forwarding: IPForwarding => Str.as_str -> &str;
    chain_insert_mode_str: ChainInsertMode => Str.as_str -> &str;
    service_loop_prevention: ServiceLoopPrevention => Str.as_str -> &str;
    disable_conntrack_invalid_check: DisableConntrackInvalidCheck => Bool.as_bool -> bool;
    feature_detect_override: FeatureDetectOverride => KeyValues.as_key_values -> &BTreeMap<String, String>;
    feature_gates: FeatureGates => KeyValues.as_key_values -> &BTreeMap<String, String>;
    mtu_iface_pattern: MTUIfacePattern => Regex.as_regex -> Option<&Pattern>;

    iptables_refresh_interval: IptablesRefreshInterval => Duration.as_duration -> Duration;
    iptables_post_write_check_interval: IptablesPostWriteCheckIntervalSecs => Duration.as_duration -> Duration;
    iptables_lock_probe_interval: IptablesLockProbeIntervalMillis => Duration.as_duration -> Duration;
    iptables_lock_file_path: IptablesLockFilePath => Str.as_str -> &str;
    iptables_lock_timeout: IptablesLockTimeoutSecs => Duration.as_duration -> Duration;
    iptables_mark_mask: IptablesMarkMask => Mark.as_mark -> u32;
    iptables_filter_allow_action: IptablesFilterAllowAction => Str.as_str -> &str;
    iptables_mangle_allow_action: IptablesMangleAllowAction => Str.as_str -> &str;
    iptables_filter_deny_action: IptablesFilterDenyAction => Str.as_str -> &str;
    iptables_nat_outgoing_interface_filter: IptablesNATOutgoingInterfaceFilter => Str.as_str -> &str;

    nftables_refresh_interval: NftablesRefreshInterval => Duration.as_duration -> Duration;
    nftables_mark_mask: NftablesMarkMask => Mark.as_mark -> u32;
    nftables_filter_allow_action: NftablesFilterAllowAction => Str.as_str -> &str;
    nftables_mangle_allow_action: NftablesMangleAllowAction => Str.as_str -> &str;
    nftables_filter_deny_action: NftablesFilterDenyAction => Str.as_str -> &str;
    nftables_flow_table_offload: NFTablesFlowTableOffload => Str.as_str -> &str;
    nftables_flow_table_data_iface_pattern: NFTablesFlowTableDataIfacePattern => Regex.as_regex -> Option<&Pattern>;

    ipsets_refresh_interval: IpsetsRefreshInterval => Duration.as_duration -> Duration;
    max_ipset_size: MaxIpsetSize => Int.as_int -> i64;

    route_refresh_interval: RouteRefreshInterval => Duration.as_duration -> Duration;
    route_source: RouteSource => Str.as_str -> &str;
    route_table_range: RouteTableRange => RouteTableRange.as_route_table_range -> Option<IndexRange>;
    route_table_ranges: RouteTableRanges => RouteTableRanges.as_route_table_ranges -> &[IndexRange];
    route_sync_disabled: RouteSyncDisabled => Bool.as_bool -> bool;
    remove_external_routes: RemoveExternalRoutes => Bool.as_bool -> bool;
    device_route_source_address: DeviceRouteSourceAddress => Ipv4.as_ipv4 -> Option<Ipv4Addr>;
    device_route_source_address_ipv6: DeviceRouteSourceAddressIPv6 => Ipv6.as_ipv6 -> Option<Ipv6Addr>;
    device_route_protocol: DeviceRouteProtocol => Int.as_int -> i64;
    program_cluster_routes: ProgramClusterRoutes => Str.as_str -> &str;
    netlink_timeout: NetlinkTimeoutSecs => Duration.as_duration -> Duration;

    vxlan_enabled: VXLANEnabled => OptBool.as_opt_bool -> Option<bool>;
    vxlan_port: VXLANPort => Int.as_int -> i64;
    vxlan_vni: VXLANVNI => Int.as_int -> i64;
    vxlan_mtu: VXLANMTU => Int.as_int -> i64;
    vxlan_mtu_v6: VXLANMTUV6 => Int.as_int -> i64;
    ipv4_vxlan_tunnel_addr: IPv4VXLANTunnelAddr => Ipv4.as_ipv4 -> Option<Ipv4Addr>;
    ipv6_vxlan_tunnel_addr: IPv6VXLANTunnelAddr => Ipv6.as_ipv6 -> Option<Ipv6Addr>;
    vxlan_tunnel_mac_addr: VXLANTunnelMACAddr => Str.as_str -> &str;
    vxlan_tunnel_mac_addr_v6: VXLANTunnelMACAddrV6 => Str.as_str -> &str;
    ipip_enabled: IpInIpEnabled => OptBool.as_opt_bool -> Option<bool>;
    ipip_mtu: IpInIpMtu => Int.as_int -> i64;
    ipip_tunnel_addr: IpInIpTunnelAddr => Ipv4.as_ipv4 -> Option<Ipv4Addr>;

    nat_outgoing_address: NATOutgoingAddress => Ipv4.as_ipv4 -> Option<Ipv4Addr>;
    nat_port_range: NATPortRange => PortRange.as_port_range -> Option<PortRange>;
    nat_outgoing_exclusions: NATOutgoingExclusions => Str.as_str -> &str;

    bpf_log_level: BPFLogLevel => Str.as_str -> &str;
    bpf_conntrack_log_level: BPFConntrackLogLevel => Str.as_str -> &str;
    bpf_attach_type_str: BPFAttachType => Str.as_str -> &str;
    bpf_data_iface_pattern: BPFDataIfacePattern => Regex.as_regex -> Option<&Pattern>;
    bpf_l3_iface_pattern: BPFL3IfacePattern => Regex.as_regex -> Option<&Pattern>;
    bpf_disable_unprivileged: BPFDisableUnprivileged => Bool.as_bool -> bool;
    bpf_policy_debug_enabled: BPFPolicyDebugEnabled => Bool.as_bool -> bool;
    bpf_enforce_rpf: BPFEnforceRPF => Str.as_str -> &str;
    bpf_redirect_to_peer: BPFRedirectToPeer => Str.as_str -> &str;
    bpf_force_track_packets_from_ifaces: BPFForceTrackPacketsFromIfaces => StrList.as_str_list -> &[String];
    bpf_disable_gro_for_ifaces: BPFDisableGROForIfaces => Regex.as_regex -> Option<&Pattern>;
    bpf_exclude_cidrs_from_nat: BPFExcludeCIDRsFromNAT => Cidrs.as_cidrs -> &[IpNet];
    bpf_ext_to_service_connmark: BPFExtToServiceConnmark => Int.as_int -> i64;
    bpf_host_conntrack_bypass: BPFHostConntrackBypass => Bool.as_bool -> bool;
    bpf_log_filters: BPFLogFilters => KeyValues.as_key_values -> &BTreeMap<String, String>;
    bpf_map_size_ip_sets: BPFMapSizeIPSets => Int.as_int -> i64;
    bpf_map_size_if_state: BPFMapSizeIfState => Int.as_int -> i64;
    bpf_map_size_route: BPFMapSizeRoute => Int.as_int -> i64;
    bpf_map_size_conntrack: BPFMapSizeConntrack => Int.as_int -> i64;

    xdp_enabled: XDPEnabled => Bool.as_bool -> bool;
    generic_xdp_enabled: GenericXDPEnabled => Bool.as_bool -> bool;
    xdp_refresh_interval: XDPRefreshInterval => Duration.as_duration -> Duration;

    reporting_interval: ReportingIntervalSecs => Duration.as_duration -> Duration;
    reporting_ttl: ReportingTTLSecs => Duration.as_duration -> Duration;
    usage_reporting_enabled: UsageReportingEnabled => Bool.as_bool -> bool;
    usage_reporting_initial_delay: UsageReportingInitialDelaySecs => Duration.as_duration -> Duration;
    usage_reporting_interval: UsageReportingIntervalSecs => Duration.as_duration -> Duration;

    cluster_guid: ClusterGUID => Str.as_str -> &str;
    cluster_type: ClusterType => Str.as_str -> &str;
    calico_version: CalicoVersion => Str.as_str -> &str;

    debug_memory_profile_path: DebugMemoryProfilePath => Str.as_str -> &str;
    debug_simulate_calc_graph_hang_after: DebugSimulateCalcGraphHangAfter => Duration.as_duration -> Duration;
    debug_simulate_dataplane_hang_after: DebugSimulateDataplaneHangAfter => Duration.as_duration -> Duration;
    debug_simulate_dataplane_apply_delay: DebugSimulateDataplaneApplyDelay => Duration.as_duration -> Duration;
    debug_panic_after: DebugPanicAfter => Duration.as_duration -> Duration;
    istio_ambient_mode: IstioAmbientMode => Str.as_str -> &str;
    debug_host: DebugHost => Str.as_str -> &str;
    debug_port: DebugPort => Int.as_port -> u16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accessor_shape_matches_its_parameter_kind() {
        for (p, shape) in ACCESSOR_SHAPES {
            assert_eq!(p.spec().kind.shape(), *shape, "accessor for {}", p.name());
        }
    }

    #[test]
    fn every_parameter_has_exactly_one_accessor() {
        let mut seen: Vec<Param> = ACCESSOR_SHAPES.iter().map(|(p, _)| *p).collect();
        seen.sort();
        let before = seen.len();
        seen.dedup();
        assert_eq!(before, seen.len(), "duplicate accessor");
        assert_eq!(seen, Param::ALL.to_vec());
    }
}
