//! `FelixConfiguration` -> `GlobalConfig` / `HostConfig` parameters.
//!
//! Each v3 spec field maps to one Felix parameter.  The parameter is named
//! after the Go field, which is the lowerCamelCase JSON name with its first
//! letter upper-cased except where upstream's Go name differs (acronyms
//! such as `bpfEnabled` -> `BPFEnabled`) or an explicit v1 name is set
//! (`ipipEnabled` -> `IpInIpEnabled`, `reportingInterval` ->
//! `ReportingIntervalSecs`, ...).  [`FIELDS`] lists every field with its
//! parameter name and value type, taken from upstream's API definition.
//!
//! Values become strings the way upstream's config update processor renders
//! them (durations as seconds or milliseconds, lists comma-joined, ...), so
//! that `felix-config` parses the same text it would get from upstream.
//! Annotations `config.projectcalico.org/<Param>` override / add parameters.

use std::fmt::Write as _;

use super::types::Dyn;
use super::validate::{err, VResult};

/// Value type of a spec field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Str,
    Int,
    Bool,
    /// Duration rendered in seconds.
    Secs,
    /// Duration rendered in milliseconds.
    Millis,
    StrList,
    StrMap,
    ProtoPorts,
    PortList,
    Port,
    Dscp,
    HealthTimeouts,
    ConntrackTimeouts,
    RouteTableRange,
    RouteTableRanges,
}

/// Annotation prefix for parameter overrides.
const ANNOTATION_PREFIX: &str = "config.projectcalico.org/";

/// `(json name, parameter name, type)`, sorted by json name.
pub(crate) static FIELDS: &[(&str, &str, Ty)] = &[
    (
        "allowIPIPPacketsFromWorkloads",
        "AllowIPIPPacketsFromWorkloads",
        Ty::Bool,
    ),
    (
        "allowVXLANPacketsFromWorkloads",
        "AllowVXLANPacketsFromWorkloads",
        Ty::Bool,
    ),
    ("awsSrcDstCheck", "AWSSrcDstCheck", Ty::Str),
    ("bpfAttachType", "BPFAttachType", Ty::Str),
    ("bpfCTLBLogFilter", "BPFCTLBLogFilter", Ty::Str),
    (
        "bpfConnectTimeLoadBalancing",
        "BPFConnectTimeLoadBalancing",
        Ty::Str,
    ),
    (
        "bpfConnectTimeLoadBalancingEnabled",
        "BPFConnectTimeLoadBalancingEnabled",
        Ty::Bool,
    ),
    ("bpfConntrackLogLevel", "BPFConntrackLogLevel", Ty::Str),
    ("bpfConntrackMode", "BPFConntrackCleanupMode", Ty::Str),
    (
        "bpfConntrackTimeouts",
        "BPFConntrackTimeouts",
        Ty::ConntrackTimeouts,
    ),
    ("bpfDSROptoutCIDRs", "BPFDSROptoutCIDRs", Ty::StrList),
    ("bpfDataIfacePattern", "BPFDataIfacePattern", Ty::Str),
    ("bpfDisableGROForIfaces", "BPFDisableGROForIfaces", Ty::Str),
    ("bpfDisableUnprivileged", "BPFDisableUnprivileged", Ty::Bool),
    ("bpfEnabled", "BPFEnabled", Ty::Bool),
    ("bpfEnforceRPF", "BPFEnforceRPF", Ty::Str),
    (
        "bpfExcludeCIDRsFromNAT",
        "BPFExcludeCIDRsFromNAT",
        Ty::StrList,
    ),
    ("bpfExportBufferSizeMB", "BPFExportBufferSizeMB", Ty::Int),
    (
        "bpfExtToServiceConnmark",
        "BPFExtToServiceConnmark",
        Ty::Int,
    ),
    ("bpfExternalServiceMode", "BPFExternalServiceMode", Ty::Str),
    (
        "bpfForceTrackPacketsFromIfaces",
        "BPFForceTrackPacketsFromIfaces",
        Ty::StrList,
    ),
    ("bpfHostConntrackBypass", "BPFHostConntrackBypass", Ty::Bool),
    (
        "bpfHostNetworkedNATWithoutCTLB",
        "BPFHostNetworkedNATWithoutCTLB",
        Ty::Str,
    ),
    ("bpfIPFragTimeout", "BPFIPFragTimeout", Ty::Secs),
    (
        "bpfIPFragmentReassemblyEnabled",
        "BPFIPFragmentReassemblyEnabled",
        Ty::Bool,
    ),
    ("bpfJITHardening", "BPFJITHardening", Ty::Str),
    (
        "bpfKubeProxyHealthzPort",
        "BPFKubeProxyHealthzPort",
        Ty::Int,
    ),
    (
        "bpfKubeProxyIptablesCleanupEnabled",
        "BPFKubeProxyIptablesCleanupEnabled",
        Ty::Bool,
    ),
    (
        "bpfKubeProxyMinSyncPeriod",
        "BPFKubeProxyMinSyncPeriod",
        Ty::Secs,
    ),
    ("bpfL3IfacePattern", "BPFL3IfacePattern", Ty::Str),
    ("bpfLogFilters", "BPFLogFilters", Ty::StrMap),
    ("bpfLogLevel", "BPFLogLevel", Ty::Str),
    (
        "bpfMaglevMaxEndpointsPerService",
        "BPFMaglevMaxEndpointsPerService",
        Ty::Int,
    ),
    ("bpfMaglevMaxServices", "BPFMaglevMaxServices", Ty::Int),
    ("bpfMapSizeConntrack", "BPFMapSizeConntrack", Ty::Int),
    (
        "bpfMapSizeConntrackCleanupQueue",
        "BPFMapSizeConntrackCleanupQueue",
        Ty::Int,
    ),
    (
        "bpfMapSizeConntrackScaling",
        "BPFMapSizeConntrackScaling",
        Ty::Str,
    ),
    ("bpfMapSizeIPSets", "BPFMapSizeIPSets", Ty::Int),
    ("bpfMapSizeIfState", "BPFMapSizeIfState", Ty::Int),
    ("bpfMapSizeNATAffinity", "BPFMapSizeNATAffinity", Ty::Int),
    ("bpfMapSizeNATBackend", "BPFMapSizeNATBackend", Ty::Int),
    ("bpfMapSizeNATFrontend", "BPFMapSizeNATFrontend", Ty::Int),
    (
        "bpfMapSizePerCpuConntrack",
        "BPFMapSizePerCPUConntrack",
        Ty::Int,
    ),
    ("bpfMapSizeRoute", "BPFMapSizeRoute", Ty::Int),
    ("bpfOverlayHostSourceIP", "BPFOverlayHostSourceIP", Ty::Str),
    ("bpfPSNATPorts", "BPFPSNATPorts", Ty::Port),
    ("bpfPolicyDebugEnabled", "BPFPolicyDebugEnabled", Ty::Bool),
    ("bpfProfiling", "BPFProfiling", Ty::Str),
    ("bpfRedirectToPeer", "BPFRedirectToPeer", Ty::Str),
    ("cgroupV2Path", "CgroupV2Path", Ty::Str),
    ("chainInsertMode", "ChainInsertMode", Ty::Str),
    ("dataplaneDriver", "DataplaneDriver", Ty::Str),
    (
        "dataplaneWatchdogTimeout",
        "DataplaneWatchdogTimeout",
        Ty::Secs,
    ),
    (
        "debugDisableLogDropping",
        "DebugDisableLogDropping",
        Ty::Bool,
    ),
    ("debugHost", "DebugHost", Ty::Str),
    ("debugMemoryProfilePath", "DebugMemoryProfilePath", Ty::Str),
    ("debugPort", "DebugPort", Ty::Int),
    (
        "debugSimulateCalcGraphHangAfter",
        "DebugSimulateCalcGraphHangAfter",
        Ty::Secs,
    ),
    (
        "debugSimulateDataplaneApplyDelay",
        "DebugSimulateDataplaneApplyDelay",
        Ty::Secs,
    ),
    (
        "debugSimulateDataplaneHangAfter",
        "DebugSimulateDataplaneHangAfter",
        Ty::Secs,
    ),
    (
        "defaultEndpointToHostAction",
        "DefaultEndpointToHostAction",
        Ty::Str,
    ),
    ("deviceRouteProtocol", "DeviceRouteProtocol", Ty::Int),
    (
        "deviceRouteSourceAddress",
        "DeviceRouteSourceAddress",
        Ty::Str,
    ),
    (
        "deviceRouteSourceAddressIPv6",
        "DeviceRouteSourceAddressIPv6",
        Ty::Str,
    ),
    (
        "disableConntrackInvalidCheck",
        "DisableConntrackInvalidCheck",
        Ty::Bool,
    ),
    (
        "endpointReportingDelay",
        "EndpointReportingDelaySecs",
        Ty::Secs,
    ),
    (
        "endpointReportingEnabled",
        "EndpointReportingEnabled",
        Ty::Bool,
    ),
    (
        "endpointStatusPathPrefix",
        "EndpointStatusPathPrefix",
        Ty::Str,
    ),
    ("externalNodesList", "ExternalNodesCIDRList", Ty::StrList),
    (
        "failsafeInboundHostPorts",
        "FailsafeInboundHostPorts",
        Ty::ProtoPorts,
    ),
    (
        "failsafeOutboundHostPorts",
        "FailsafeOutboundHostPorts",
        Ty::ProtoPorts,
    ),
    ("featureDetectOverride", "FeatureDetectOverride", Ty::Str),
    ("featureGates", "FeatureGates", Ty::Str),
    ("floatingIPs", "FloatingIPs", Ty::Str),
    (
        "flowLogsCollectorDebugTrace",
        "FlowLogsCollectorDebugTrace",
        Ty::Bool,
    ),
    ("flowLogsFlushInterval", "FlowLogsFlushInterval", Ty::Secs),
    ("flowLogsGoldmaneServer", "FlowLogsGoldmaneServer", Ty::Str),
    ("flowLogsLocalReporter", "FlowLogsLocalReporter", Ty::Str),
    (
        "flowLogsPolicyEvaluationMode",
        "FlowLogsPolicyEvaluationMode",
        Ty::Str,
    ),
    ("genericXDPEnabled", "GenericXDPEnabled", Ty::Bool),
    ("goGCThreshold", "GoGCThreshold", Ty::Int),
    ("goMaxProcs", "GoMaxProcs", Ty::Int),
    ("goMemoryLimitMB", "GoMemoryLimitMB", Ty::Int),
    ("healthEnabled", "HealthEnabled", Ty::Bool),
    ("healthHost", "HealthHost", Ty::Str),
    ("healthPort", "HealthPort", Ty::Int),
    (
        "healthTimeoutOverrides",
        "HealthTimeoutOverrides",
        Ty::HealthTimeouts,
    ),
    ("interfaceExclude", "InterfaceExclude", Ty::Str),
    ("interfacePrefix", "InterfacePrefix", Ty::Str),
    (
        "interfaceRefreshInterval",
        "InterfaceRefreshInterval",
        Ty::Secs,
    ),
    ("ipForwarding", "IPForwarding", Ty::Str),
    ("ipipEnabled", "IpInIpEnabled", Ty::Bool),
    ("ipipMTU", "IpInIpMtu", Ty::Int),
    ("ipsetsRefreshInterval", "IpsetsRefreshInterval", Ty::Secs),
    ("iptablesBackend", "IptablesBackend", Ty::Str),
    (
        "iptablesFilterAllowAction",
        "IptablesFilterAllowAction",
        Ty::Str,
    ),
    (
        "iptablesFilterDenyAction",
        "IptablesFilterDenyAction",
        Ty::Str,
    ),
    (
        "iptablesLockProbeInterval",
        "IptablesLockProbeIntervalMillis",
        Ty::Millis,
    ),
    (
        "iptablesMangleAllowAction",
        "IptablesMangleAllowAction",
        Ty::Str,
    ),
    ("iptablesMarkMask", "IptablesMarkMask", Ty::Int),
    (
        "iptablesNATOutgoingInterfaceFilter",
        "IptablesNATOutgoingInterfaceFilter",
        Ty::Str,
    ),
    (
        "iptablesPostWriteCheckInterval",
        "IptablesPostWriteCheckIntervalSecs",
        Ty::Secs,
    ),
    (
        "iptablesRefreshInterval",
        "IptablesRefreshInterval",
        Ty::Secs,
    ),
    (
        "ipv4ElevatedRoutePriority",
        "IPv4ElevatedRoutePriority",
        Ty::Int,
    ),
    (
        "ipv4NormalRoutePriority",
        "IPv4NormalRoutePriority",
        Ty::Int,
    ),
    (
        "ipv6ElevatedRoutePriority",
        "IPv6ElevatedRoutePriority",
        Ty::Int,
    ),
    (
        "ipv6NormalRoutePriority",
        "IPv6NormalRoutePriority",
        Ty::Int,
    ),
    ("ipv6Support", "Ipv6Support", Ty::Bool),
    ("istioAmbientMode", "IstioAmbientMode", Ty::Str),
    ("istioDSCPMark", "IstioDSCPMark", Ty::Dscp),
    ("kubeNodePortRanges", "KubeNodePortRanges", Ty::PortList),
    (
        "liveMigrationRouteConvergenceTime",
        "LiveMigrationRouteConvergenceTime",
        Ty::Secs,
    ),
    (
        "localSubnetL2Reachability",
        "LocalSubnetL2Reachability",
        Ty::Str,
    ),
    (
        "localSubnetL2ReachabilityRefreshInterval",
        "LocalSubnetL2ReachabilityRefreshInterval",
        Ty::Secs,
    ),
    ("logActionRateLimit", "LogActionRateLimit", Ty::Str),
    (
        "logActionRateLimitBurst",
        "LogActionRateLimitBurst",
        Ty::Int,
    ),
    ("logDebugFilenameRegex", "LogDebugFilenameRegex", Ty::Str),
    ("logFilePath", "LogFilePath", Ty::Str),
    ("logPrefix", "LogPrefix", Ty::Str),
    ("logSeverityFile", "LogSeverityFile", Ty::Str),
    ("logSeverityScreen", "LogSeverityScreen", Ty::Str),
    ("logSeveritySys", "LogSeveritySys", Ty::Str),
    ("maxIpsetSize", "MaxIpsetSize", Ty::Int),
    ("metadataAddr", "MetadataAddr", Ty::Str),
    ("metadataPort", "MetadataPort", Ty::Int),
    ("mtuIfacePattern", "MTUIfacePattern", Ty::Str),
    ("natOutgoingAddress", "NATOutgoingAddress", Ty::Str),
    ("natOutgoingExclusions", "NATOutgoingExclusions", Ty::Str),
    ("natPortRange", "NATPortRange", Ty::Port),
    ("netlinkTimeout", "NetlinkTimeoutSecs", Ty::Secs),
    (
        "nftablesFilterAllowAction",
        "NftablesFilterAllowAction",
        Ty::Str,
    ),
    (
        "nftablesFilterDenyAction",
        "NftablesFilterDenyAction",
        Ty::Str,
    ),
    (
        "nftablesFlowTableDataIfacePattern",
        "NFTablesFlowTableDataIfacePattern",
        Ty::Str,
    ),
    (
        "nftablesFlowTableOffload",
        "NFTablesFlowTableOffload",
        Ty::Str,
    ),
    (
        "nftablesMangleAllowAction",
        "NftablesMangleAllowAction",
        Ty::Str,
    ),
    ("nftablesMarkMask", "NftablesMarkMask", Ty::Int),
    ("nftablesMode", "NFTablesMode", Ty::Str),
    (
        "nftablesRefreshInterval",
        "NftablesRefreshInterval",
        Ty::Secs,
    ),
    ("openstackRegion", "OpenstackRegion", Ty::Str),
    ("policySyncPathPrefix", "PolicySyncPathPrefix", Ty::Str),
    ("programClusterRoutes", "ProgramClusterRoutes", Ty::Str),
    (
        "prometheusGoMetricsEnabled",
        "PrometheusGoMetricsEnabled",
        Ty::Bool,
    ),
    (
        "prometheusMetricsCAFile",
        "PrometheusMetricsCAFile",
        Ty::Str,
    ),
    (
        "prometheusMetricsCertFile",
        "PrometheusMetricsCertFile",
        Ty::Str,
    ),
    (
        "prometheusMetricsClientAuth",
        "PrometheusMetricsClientAuth",
        Ty::Str,
    ),
    (
        "prometheusMetricsEnabled",
        "PrometheusMetricsEnabled",
        Ty::Bool,
    ),
    ("prometheusMetricsHost", "PrometheusMetricsHost", Ty::Str),
    (
        "prometheusMetricsKeyFile",
        "PrometheusMetricsKeyFile",
        Ty::Str,
    ),
    ("prometheusMetricsPort", "PrometheusMetricsPort", Ty::Int),
    (
        "prometheusProcessMetricsEnabled",
        "PrometheusProcessMetricsEnabled",
        Ty::Bool,
    ),
    (
        "prometheusWireGuardMetricsEnabled",
        "PrometheusWireGuardMetricsEnabled",
        Ty::Bool,
    ),
    ("removeExternalRoutes", "RemoveExternalRoutes", Ty::Bool),
    ("reportingInterval", "ReportingIntervalSecs", Ty::Secs),
    ("reportingTTL", "ReportingTTLSecs", Ty::Secs),
    ("requireMTUFile", "RequireMTUFile", Ty::Bool),
    ("routeRefreshInterval", "RouteRefreshInterval", Ty::Secs),
    ("routeSource", "RouteSource", Ty::Str),
    ("routeSyncDisabled", "RouteSyncDisabled", Ty::Bool),
    ("routeTableRange", "RouteTableRange", Ty::RouteTableRange),
    ("routeTableRanges", "RouteTableRanges", Ty::RouteTableRanges),
    ("serviceLoopPrevention", "ServiceLoopPrevention", Ty::Str),
    (
        "sidecarAccelerationEnabled",
        "SidecarAccelerationEnabled",
        Ty::Bool,
    ),
    ("usageReportingEnabled", "UsageReportingEnabled", Ty::Bool),
    (
        "usageReportingInitialDelay",
        "UsageReportingInitialDelaySecs",
        Ty::Secs,
    ),
    (
        "usageReportingInterval",
        "UsageReportingIntervalSecs",
        Ty::Secs,
    ),
    (
        "useInternalDataplaneDriver",
        "UseInternalDataplaneDriver",
        Ty::Bool,
    ),
    ("vxlanEnabled", "VXLANEnabled", Ty::Bool),
    ("vxlanMTU", "VXLANMTU", Ty::Int),
    ("vxlanMTUV6", "VXLANMTUV6", Ty::Int),
    ("vxlanPort", "VXLANPort", Ty::Int),
    ("vxlanVNI", "VXLANVNI", Ty::Int),
    (
        "windowsManageFirewallRules",
        "WindowsManageFirewallRules",
        Ty::Str,
    ),
    ("wireguardEnabled", "WireguardEnabled", Ty::Bool),
    ("wireguardEnabledV6", "WireguardEnabledV6", Ty::Bool),
    (
        "wireguardHostEncryptionEnabled",
        "WireguardHostEncryptionEnabled",
        Ty::Bool,
    ),
    ("wireguardInterfaceName", "WireguardInterfaceName", Ty::Str),
    (
        "wireguardInterfaceNameV6",
        "WireguardInterfaceNameV6",
        Ty::Str,
    ),
    (
        "wireguardKeepAlive",
        "WireguardPersistentKeepAlive",
        Ty::Secs,
    ),
    ("wireguardListeningPort", "WireguardListeningPort", Ty::Int),
    (
        "wireguardListeningPortV6",
        "WireguardListeningPortV6",
        Ty::Int,
    ),
    ("wireguardMTU", "WireguardMTU", Ty::Int),
    ("wireguardMTUV6", "WireguardMTUV6", Ty::Int),
    (
        "wireguardRoutingRulePriority",
        "WireguardRoutingRulePriority",
        Ty::Int,
    ),
    (
        "wireguardThreadingEnabled",
        "WireguardThreadingEnabled",
        Ty::Bool,
    ),
    ("workloadSourceSpoofing", "WorkloadSourceSpoofing", Ty::Str),
    ("xdpEnabled", "XDPEnabled", Ty::Bool),
    ("xdpRefreshInterval", "XDPRefreshInterval", Ty::Secs),
];

/// Looks up a spec field by its JSON name.
pub(crate) fn field(json: &str) -> Option<(&'static str, Ty)> {
    FIELDS
        .binary_search_by(|(j, _, _)| (*j).cmp(json))
        .ok()
        .map(|i| (FIELDS[i].1, FIELDS[i].2))
}

/// Converts a `FelixConfiguration` spec (and its override annotations) to
/// `(parameter, value)` pairs, in spec order then annotation order.
/// Fields set to `null` or `""` are omitted (upstream treats them as unset).
pub(crate) fn convert_params(
    spec: &[(String, Dyn)],
    annotations: &std::collections::BTreeMap<String, String>,
) -> VResult<Vec<(String, String)>> {
    let mut overrides: Vec<(&str, &str)> = annotations
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(ANNOTATION_PREFIX).map(|p| (p, v.as_str())))
        .collect();
    let mut out = Vec::with_capacity(spec.len() + overrides.len());
    for (json, value) in spec {
        let path = format!("spec.{json}");
        let Some((param, ty)) = field(json) else {
            return err(path, format!("unknown field `{json}`"));
        };
        if let Some(i) = overrides.iter().position(|(p, _)| *p == param) {
            let (p, v) = overrides.remove(i);
            out.push((p.to_owned(), v.to_owned()));
            continue;
        }
        if let Some(s) = render(&path, ty, value)? {
            out.push((param.to_owned(), s));
        }
    }
    out.extend(
        overrides
            .into_iter()
            .map(|(p, v)| (p.to_owned(), v.to_owned())),
    );
    Ok(out)
}

fn expect_str<'a>(path: &str, v: &'a Dyn) -> VResult<&'a str> {
    match v {
        Dyn::Str(s) => Ok(s),
        _ => err(path, "must be a string"),
    }
}

fn expect_int(path: &str, v: &Dyn) -> VResult<i64> {
    match v {
        Dyn::Int(i) => Ok(*i),
        _ => err(path, "must be an integer"),
    }
}

fn expect_list<'a>(path: &str, v: &'a Dyn) -> VResult<&'a [Dyn]> {
    match v {
        Dyn::List(l) => Ok(l),
        _ => err(path, "must be a list"),
    }
}

fn expect_map<'a>(path: &str, v: &'a Dyn) -> VResult<&'a [(String, Dyn)]> {
    match v {
        Dyn::Map(m) => Ok(m),
        _ => err(path, "must be a mapping"),
    }
}

/// Looks up `key` in a mapping value, rejecting keys outside `allowed`.
fn map_get<'a>(
    path: &str,
    m: &'a [(String, Dyn)],
    allowed: &[&str],
    key: &str,
) -> VResult<Option<&'a Dyn>> {
    for (k, _) in m {
        if !allowed.contains(&k.as_str()) {
            return err(format!("{path}.{k}"), format!("unknown field `{k}`"));
        }
    }
    Ok(m.iter().find(|(k, _)| k == key).map(|(_, v)| v))
}

/// Renders one value; `None` means "unset".
fn render(path: &str, ty: Ty, v: &Dyn) -> VResult<Option<String>> {
    if matches!(v, Dyn::Null) {
        return Ok(None);
    }
    let s = match ty {
        Ty::Str => {
            let s = expect_str(path, v)?;
            if s.is_empty() {
                return Ok(None);
            }
            s.to_owned()
        }
        Ty::Int => expect_int(path, v)?.to_string(),
        Ty::Bool => match v {
            Dyn::Bool(b) => b.to_string(),
            _ => return err(path, "must be true or false"),
        },
        Ty::Secs | Ty::Millis => {
            let ns = parse_go_duration(expect_str(path, v)?).ok_or_else(|| {
                super::ValidationError::new(path, "must be a duration such as \"90s\" or \"1m30s\"")
            })?;
            if ty == Ty::Secs {
                go_float(ns, 1_000_000_000)
            } else {
                go_float(ns, 1_000_000)
            }
        }
        Ty::StrList => {
            let items = expect_list(path, v)?;
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                parts.push(expect_str(&format!("{path}[{i}]"), item)?);
            }
            parts.join(",")
        }
        Ty::StrMap => {
            let mut entries: Vec<(&str, &str)> = Vec::new();
            for (k, val) in expect_map(path, v)? {
                entries.push((k, expect_str(&format!("{path}.{k}"), val)?));
            }
            entries.sort();
            entries.iter().fold(String::new(), |mut acc, (k, v)| {
                let _ = write!(acc, "{k}={v},");
                acc
            })
        }
        Ty::ProtoPorts => {
            let items = expect_list(path, v)?;
            if items.is_empty() {
                return Ok(Some("none".to_owned()));
            }
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                let m = expect_map(&p, item)?;
                let allowed = ["protocol", "port", "net"];
                let protocol = match map_get(&p, m, &allowed, "protocol")? {
                    Some(x) => expect_str(&format!("{p}.protocol"), x)?,
                    None => "",
                };
                if !matches!(protocol, "TCP" | "UDP" | "SCTP") {
                    return err(
                        format!("{p}.protocol"),
                        "protocol must be 'TCP' or 'UDP' or 'SCTP'",
                    );
                }
                let port = match map_get(&p, m, &allowed, "port")? {
                    Some(x) => expect_int(&format!("{p}.port"), x)?,
                    None => 0,
                };
                if !(0..=65535).contains(&port) {
                    return err(format!("{p}.port"), "must be 0-65535");
                }
                let proto = protocol.to_ascii_lowercase();
                match map_get(&p, m, &allowed, "net")? {
                    Some(x) if !expect_str(&format!("{p}.net"), x)?.is_empty() => {
                        let net = expect_str(&format!("{p}.net"), x)?;
                        let Some((ip, _)) = super::validate::parse_cidr_or_ip(net) else {
                            return err(format!("{p}.net"), format!("{net:?} is not a valid CIDR"));
                        };
                        if ip.is_ipv6() {
                            parts.push(format!("{proto}:[{net}]:{port}"));
                        } else {
                            parts.push(format!("{proto}:{net}:{port}"));
                        }
                    }
                    _ => parts.push(format!("{proto}:{port}")),
                }
            }
            parts.join(",")
        }
        Ty::Port => render_port(path, v)?,
        Ty::PortList => {
            let items = expect_list(path, v)?;
            if items.len() > 7 && path.ends_with("kubeNodePortRanges") {
                return err(path, "node port ranges list is too long (max 7)");
            }
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let p = render_port(&format!("{path}[{i}]"), item)?;
                if !p.bytes().all(|c| c.is_ascii_digit() || c == b':') {
                    return err(
                        format!("{path}[{i}]"),
                        "node port ranges should not contain named ports",
                    );
                }
                parts.push(p);
            }
            format!("[{}]", parts.join(" "))
        }
        Ty::Dscp => match v {
            Dyn::Int(i) if (0..=63).contains(i) => i.to_string(),
            Dyn::Str(s) if !s.is_empty() => s.clone(),
            _ => return err(path, "must be a DSCP value (0-63) or name"),
        },
        Ty::HealthTimeouts => {
            let items = expect_list(path, v)?;
            if items.is_empty() {
                return Ok(None);
            }
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                let m = expect_map(&p, item)?;
                let allowed = ["name", "timeout"];
                let name = match map_get(&p, m, &allowed, "name")? {
                    Some(x) => expect_str(&format!("{p}.name"), x)?,
                    None => "",
                };
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b' ' | b'-'))
                {
                    return err(
                        format!("{p}.name"),
                        format!("{name:?} is not a valid health reporter name"),
                    );
                }
                let timeout = match map_get(&p, m, &allowed, "timeout")? {
                    Some(x) => expect_str(&format!("{p}.timeout"), x)?,
                    None => "0s",
                };
                let ns = parse_go_duration(timeout).ok_or_else(|| {
                    super::ValidationError::new(format!("{p}.timeout"), "must be a duration")
                })?;
                parts.push(format!("{name}={}", format_go_duration(ns)));
            }
            parts.join(",")
        }
        Ty::ConntrackTimeouts => {
            const KEYS: [(&str, &str); 8] = [
                ("creationGracePeriod", "CreationGracePeriod"),
                ("tcpSynSent", "TCPSynSent"),
                ("tcpEstablished", "TCPEstablished"),
                ("tcpFinsSeen", "TCPFinsSeen"),
                ("tcpResetSeen", "TCPResetSeen"),
                ("udpTimeout", "UDPTimeout"),
                ("genericTimeout", "GenericTimeout"),
                ("icmpTimeout", "ICMPTimeout"),
            ];
            let m = expect_map(path, v)?;
            let allowed: Vec<&str> = KEYS.iter().map(|(j, _)| *j).collect();
            let mut parts = Vec::new();
            for (json, name) in KEYS {
                if let Some(x) = map_get(path, m, &allowed, json)? {
                    let s = expect_str(&format!("{path}.{json}"), x)?;
                    if s != "Auto" && parse_go_duration(s).is_none() {
                        return err(format!("{path}.{json}"), "must be \"Auto\" or a duration");
                    }
                    parts.push(format!("{name}={s}"));
                }
            }
            parts.join(",")
        }
        Ty::RouteTableRange => {
            let (min, max) = route_range(path, v)?;
            if !(min >= 1 && max >= min && max <= 250) {
                return err(path, "must be a range of route table indices within 1..250");
            }
            format!("{min}-{max}")
        }
        Ty::RouteTableRanges => {
            let items = expect_list(path, v)?;
            let mut parts = Vec::with_capacity(items.len());
            let mut total: i64 = 0;
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                let (min, max) = route_range(&p, item)?;
                if min < 1 || max < min || max > i64::from(u32::MAX) {
                    return err(p, "must be a valid range of route table IDs");
                }
                if [253, 254, 255].iter().any(|r| (min..=max).contains(r)) {
                    return err(p, "must not include reserved route tables 253-255");
                }
                total += max - min + 1;
                parts.push(format!("{min}-{max}"));
            }
            if total > 0xffff {
                return err(path, "targets too many tables");
            }
            parts.join(",")
        }
    };
    Ok(Some(s))
}

fn route_range(path: &str, v: &Dyn) -> VResult<(i64, i64)> {
    let m = expect_map(path, v)?;
    let allowed = ["min", "max"];
    let min = match map_get(path, m, &allowed, "min")? {
        Some(x) => expect_int(&format!("{path}.min"), x)?,
        None => 0,
    };
    let max = match map_get(path, m, &allowed, "max")? {
        Some(x) => expect_int(&format!("{path}.max"), x)?,
        None => 0,
    };
    Ok((min, max))
}

fn render_port(path: &str, v: &Dyn) -> VResult<String> {
    let raw = match v {
        Dyn::Int(i) => super::types::IntOrString::Int(*i),
        Dyn::Str(s) => super::types::IntOrString::Str(s.clone()),
        _ => return err(path, "must be a port, port range or port name"),
    };
    Ok(match super::validate::parse_port(path, &raw)? {
        crate::model::Port::Number(n) => n.to_string(),
        crate::model::Port::Range { first, last } => format!("{first}:{last}"),
        crate::model::Port::Named(n) => n,
    })
}

/// `ns / unit` rendered as Go's `%v` of the float64 upstream computes
/// (whole units plus the fraction, shortest form, no exponent).
fn go_float(ns: i64, unit: i64) -> String {
    let whole = ns / unit;
    let rem = ns % unit;
    if rem == 0 {
        return whole.to_string();
    }
    (whole as f64 + rem as f64 / unit as f64).to_string()
}

/// Parses a Go duration string (`"1h2m3.5s"`, `"100ms"`, `"-1s"`, `"0"`)
/// into nanoseconds.
pub(crate) fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let num: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += num * unit;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let ns = total.round() as i64;
    Some(if neg { -ns } else { ns })
}

/// Go's `time.Duration.String()`.
pub(crate) fn format_go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".to_owned();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let sign = if neg { "-" } else { "" };
    let frac = |v: u64, digits: u32| -> String {
        let scale = 10u64.pow(digits);
        let whole = v / scale;
        let rem = v % scale;
        if rem == 0 {
            whole.to_string()
        } else {
            let r = format!("{rem:0width$}", width = digits as usize);
            format!("{whole}.{}", r.trim_end_matches('0'))
        }
    };
    if u < 1_000 {
        return format!("{sign}{u}ns");
    }
    if u < 1_000_000 {
        return format!("{sign}{}µs", frac(u, 3));
    }
    if u < 1_000_000_000 {
        return format!("{sign}{}ms", frac(u, 6));
    }
    let secs_ns = u % 60_000_000_000;
    let mins_total = u / 60_000_000_000;
    let s = format!("{}s", frac(secs_ns, 9));
    if mins_total == 0 {
        return format!("{sign}{s}");
    }
    let mins = mins_total % 60;
    let hours = mins_total / 60;
    if hours == 0 {
        format!("{sign}{mins}m{s}")
    } else {
        format!("{sign}{hours}h{mins}m{s}")
    }
}
