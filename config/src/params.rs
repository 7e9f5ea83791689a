//! The parameter table: every configuration parameter felix-rs knows, with
//! its upstream name, v3 field, type, default and documentation.
//!
//! Names, types, defaults and validation follow upstream Felix's
//! `config_params.go` (and the v3 `FelixConfigurationSpec` for field names).
//! Deviations are marked in the parameter's doc text. `Param` is generated
//! from the same list, in the same order, so `Param as usize` indexes
//! [`PARAMS`].

use crate::spec::{Group as G, ParamSpec};
use crate::value::{Kind as K, StrCheck as S};

const LOG_LEVELS: K = K::OneOf(&["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"]);
const PORT: K = K::Int { min: 0, max: 65535 };
const INT: K = K::Int {
    min: i64::MIN,
    max: i64::MAX,
};
const SECS: K = K::Seconds;
const ACCEPT_RETURN: K = K::OneOf(&["ACCEPT", "RETURN"]);
const DROP_REJECT: K = K::OneOf(&["DROP", "REJECT"]);
const ENABLED_DISABLED: K = K::OneOf(&["Enabled", "Disabled"]);

/// The `doc` entry of one `param_table!` row (the fields before it are
/// skipped).
macro_rules! param_doc {
    (doc: $doc:expr $(, $($rest:tt)*)?) => { $doc };
    ($field:ident : $val:expr $(, $($rest:tt)*)?) => { param_doc!($($($rest)*)?) };
}

macro_rules! param_table {
    ($( $name:ident { $($field:ident : $val:expr),* $(,)? } )*) => {
        /// Every parameter, by its canonical upstream name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Param { $(#[doc = param_doc!($($field: $val),*)] $name,)* }

        impl Param {
            /// All parameters in table order.
            pub const ALL: &'static [Param] = &[$(Param::$name,)*];

            /// This parameter's table entry.
            pub fn spec(self) -> &'static ParamSpec {
                &PARAMS[self as usize]
            }

            /// Canonical name.
            pub fn name(self) -> &'static str {
                self.spec().name
            }
        }

        /// The parameter table, indexed by `Param as usize`.
        pub static PARAMS: &[ParamSpec] = &[
            $( ParamSpec { name: stringify!($name), $($field: $val,)* ..ParamSpec::BASE }, )*
        ];
    };
}

param_table! {
    // ---- Datastore connection and node identity (host-local) ----
    DatastoreType { kind: K::OneOf(&["kubernetes", "etcdv3"]), default: "etcdv3", group: G::Datastore, local: true, non_zero: true,
        doc: "Datastore driver. felix-rs reads `etcdv3`; the datastore actually used is chosen by `felix run --datastore` (file or etcd), which takes precedence." }
    FelixHostname { kind: K::Str(S::Hostname), group: G::Datastore, local: true, non_zero: true,
        doc: "This node's name, used to pick out the node's own endpoints and per-node config. `felix run --node` wins over it; without `--node` it comes from the environment, then the config file; unset, `felix run` uses the kernel host name." }
    EtcdAddr { kind: K::Str(S::Authority), default: "127.0.0.1:2379", group: G::Datastore, local: true,
        doc: "etcd `host:port` to connect to when `EtcdEndpoints` is empty." }
    EtcdScheme { kind: K::OneOf(&["http", "https"]), default: "http", group: G::Datastore, local: true,
        doc: "URL scheme used with `EtcdAddr`." }
    EtcdEndpoints { kind: K::EndpointList, group: G::Datastore, local: true,
        doc: "etcd endpoint URLs; when set, replaces `EtcdAddr` and `EtcdScheme`." }
    EtcdCaFile { kind: K::File { must_exist: true }, group: G::Datastore, local: true,
        doc: "CA certificate used to verify etcd's TLS certificate." }
    EtcdCertFile { kind: K::File { must_exist: true }, group: G::Datastore, local: true,
        doc: "Client certificate presented to etcd." }
    EtcdKeyFile { kind: K::File { must_exist: true }, group: G::Datastore, local: true,
        doc: "Private key of the etcd client certificate." }

    // ---- Logging ----
    LogSeverityScreen { v3_field: Some("logSeverityScreen"), kind: LOG_LEVELS, default: "INFO", group: G::Logging,
        doc: "Minimum level of log lines written to stderr." }
    LogSeverityFile { v3_field: Some("logSeverityFile"), kind: LOG_LEVELS, default: "INFO", group: G::Logging,
        doc: "Minimum level of log lines written to `LogFilePath`." }
    LogSeveritySys { v3_field: Some("logSeveritySys"), kind: LOG_LEVELS, default: "INFO", group: G::Logging,
        doc: "Minimum level of log lines sent to syslog." }
    LogFilePath { v3_field: Some("logFilePath"), kind: K::File { must_exist: false }, default: "/var/log/calico/felix.log", group: G::Logging,
        doc: "Log file; `none` disables file logging." }
    LogDebugFilenameRegex { v3_field: Some("logDebugFilenameRegex"), kind: K::Regex, group: G::Logging,
        doc: "When set, debug-level lines are kept only from source files whose name matches." }
    LogPrefix { v3_field: Some("logPrefix"), kind: K::Str(S::Any), default: "calico-packet", group: G::Logging,
        doc: "Prefix of the kernel log lines produced by policy `Log` rules; `%t`, `%k`, `%n`, `%p` expand to tier, kind, name and namespaced name." }
    LogActionRateLimit { v3_field: Some("logActionRateLimit"), kind: K::Str(S::LogRate), group: G::Logging,
        doc: "Rate limit for policy `Log` rules, e.g. `10/second`; empty means unlimited." }
    LogActionRateLimitBurst { v3_field: Some("logActionRateLimitBurst"), kind: K::Int { min: 0, max: 9999 }, default: "5", group: G::Logging,
        doc: "Burst allowed by `LogActionRateLimit`. (Upstream's v1 check is looser; the 0-9999 range is the v3 API's.)" }
    LogConnectionTransitions { v3_field: Some("logConnectionTransitions"), kind: K::OneOf(&["Disabled", "FirstResponseAfterLog"]), default: "Disabled", group: G::Logging,
        doc: "iptables/nftables only: after a policy `Log` rule fires, also log the connection's first response (established, reset or ICMP error)." }
    LogConnectionTransitionsPrefix { v3_field: Some("logConnectionTransitionsPrefix"), kind: K::Str(S::Any), default: "calico-response", group: G::Logging,
        doc: "Prefix of the follow-up lines written by `LogConnectionTransitions`; used literally (no `%` expansion)." }
    DropAttributionEnabled { kind: K::Bool, group: G::Logging,
        doc: "felix-rs: the dataplane reports denied packets with the rule that denied them (tier, policy or profile, rule index; end of tier; no match) through NFLOG in iptables and nftables mode and through a ring buffer the policy program writes in eBPF mode; `felix admin drops` and `GET /drops` show the latest. Off: no reporting rule is rendered (eBPF: the program reports nothing)." }
    DropAttributionNFLOGGroup { kind: K::Int { min: 1, max: 65535 }, default: "30", group: G::Logging,
        doc: "felix-rs: the NFLOG group `DropAttributionEnabled` reports on in iptables and nftables mode (must not be shared with another NFLOG reader); unused in eBPF mode." }
    DropAttributionRateLimit { kind: K::Int { min: 1, max: 100000 }, default: "100", group: G::Logging,
        doc: "felix-rs: denied packets reported per second by each reporting rule (burst the same; in eBPF mode per rule bucket, counted in the program); the others are dropped unreported, so a flood costs bounded CPU." }
    DebugDisableLogDropping { v3_field: Some("debugDisableLogDropping"), kind: K::Bool, group: G::Logging,
        doc: "Block instead of dropping log lines when the log writer falls behind." }

    // ---- Health and metrics ----
    HealthEnabled { v3_field: Some("healthEnabled"), kind: K::Bool, group: G::HealthMetrics,
        doc: "Serve the liveness/readiness HTTP endpoints." }
    HealthHost { v3_field: Some("healthHost"), kind: K::Str(S::HostAddress), default: "localhost", group: G::HealthMetrics,
        doc: "Address the health endpoints listen on." }
    HealthPort { v3_field: Some("healthPort"), kind: PORT, default: "9099", group: G::HealthMetrics,
        doc: "Port the health endpoints listen on." }
    HealthTimeoutOverrides { v3_field: Some("healthTimeoutOverrides"), kind: K::KeyDurationList, group: G::HealthMetrics, restart: false,
        doc: "Per-component overrides of the health report timeouts, `name=duration`. felix-rs has two timed reporters: `InternalDataplaneMainLoop` (or `dataplane`) and `CalculationGraph` (or `calc-graph`); other names are warned about and ignored. Applied without a restart." }
    PrometheusMetricsEnabled { v3_field: Some("prometheusMetricsEnabled"), kind: K::Bool, group: G::HealthMetrics,
        doc: "Serve Prometheus metrics over TCP (the admin socket's `/metrics` is always on)." }
    PrometheusMetricsHost { v3_field: Some("prometheusMetricsHost"), kind: K::Str(S::HostAddress), group: G::HealthMetrics,
        doc: "Address the metrics endpoint listens on; empty means all addresses." }
    PrometheusMetricsPort { v3_field: Some("prometheusMetricsPort"), kind: PORT, default: "9091", group: G::HealthMetrics,
        doc: "Port the metrics endpoint listens on." }
    PrometheusProcessMetricsEnabled { v3_field: Some("prometheusProcessMetricsEnabled"), kind: K::Bool, default: "true", group: G::HealthMetrics,
        doc: "Include process metrics (CPU, memory, file descriptors)." }
    DataplaneWatchdogTimeout { v3_field: Some("dataplaneWatchdogTimeout"), kind: SECS, default: "90", group: G::HealthMetrics,
        doc: "How long the dataplane may go without completing an apply loop before it is reported unhealthy (not live): the timeout of the `dataplane` health reporter." }

    // ---- Endpoints and host protection ----
    InterfacePrefix { v3_field: Some("interfacePrefix"), kind: K::IfaceList, default: "cali", group: G::Endpoints, non_zero: true,
        doc: "Name prefixes of workload interfaces; interfaces with these prefixes are treated as workload endpoints." }
    InterfaceExclude { v3_field: Some("interfaceExclude"), kind: K::IfaceRegexList, default: "kube-ipvs0", group: G::Endpoints,
        doc: "Host interfaces to ignore entirely (exact names or `/regex/`)." }
    InterfaceRefreshInterval { v3_field: Some("interfaceRefreshInterval"), kind: SECS, default: "90", group: G::Endpoints,
        doc: "Period of the full interface rescan that backs up netlink notifications; 0 disables it." }
    DefaultEndpointToHostAction { v3_field: Some("defaultEndpointToHostAction"), kind: K::OneOf(&["DROP", "RETURN", "ACCEPT"]), default: "DROP", group: G::Endpoints, non_zero: true,
        doc: "What happens to traffic from a workload to the host itself after workload policy: `DROP`, `ACCEPT`, or `RETURN` (continue into host rules)." }
    FailsafeInboundHostPorts { v3_field: Some("failsafeInboundHostPorts"), kind: K::PortList, default: "tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667", group: G::Endpoints,
        doc: "Inbound host ports that stay open whatever host endpoint policy says; `none` removes them all." }
    FailsafeOutboundHostPorts { v3_field: Some("failsafeOutboundHostPorts"), kind: K::PortList, default: "udp:53,udp:67,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667", group: G::Endpoints,
        doc: "Outbound host ports that stay open whatever host endpoint policy says; `none` removes them all." }
    KubeNodePortRanges { v3_field: Some("kubeNodePortRanges"), kind: K::PortRangeList, default: "30000:32767", group: G::Endpoints,
        doc: "Kubernetes NodePort ranges, so that host endpoint rules can treat NodePort traffic as forwarded." }
    WorkloadSourceSpoofing { v3_field: Some("workloadSourceSpoofing"), kind: K::OneOf(&["Disabled", "Any"]), default: "Disabled", group: G::Endpoints,
        doc: "`Any` lets a workload endpoint send from the prefixes in its `allowSpoofedSourcePrefixes` (set from the pod annotation `cni.projectcalico.org/allowedSourcePrefixes`): they skip the anti-spoofing RPF check. With `Disabled` an endpoint that asks for it is ignored (as invalid)." }
    AllowVXLANPacketsFromWorkloads { v3_field: Some("allowVXLANPacketsFromWorkloads"), kind: K::Bool, group: G::Endpoints,
        doc: "Do not drop VXLAN-encapsulated packets sent by workloads." }
    AllowIPIPPacketsFromWorkloads { v3_field: Some("allowIPIPPacketsFromWorkloads"), kind: K::Bool, group: G::Endpoints,
        doc: "Do not drop IP-in-IP packets sent by workloads." }
    ExternalNodesCIDRList { v3_field: Some("externalNodesList"), kind: K::CidrList, group: G::Endpoints,
        doc: "Addresses of nodes outside the cluster that may send IP-in-IP traffic to this host." }
    EndpointReportingEnabled { v3_field: Some("endpointReportingEnabled"), kind: K::Bool, group: G::Endpoints,
        doc: "Report per-endpoint status back to the datastore: with `UseInternalDataplaneDriver=false` on etcd, the external driver's endpoint status reports are written to upstream's `/calico/felix/v2/no-region/host/<node>/workload/...` and `/calico/felix/v1/host/<node>/endpoint/...` keys. The in-process dataplane reports no endpoint status." }
    EndpointReportingDelaySecs { v3_field: Some("endpointReportingDelay"), kind: SECS, default: "1", group: G::Endpoints,
        doc: "Minimum delay between endpoint status writes to the datastore (rate limit; see `EndpointReportingEnabled`)." }
    EndpointStatusPathPrefix { v3_field: Some("endpointStatusPathPrefix"), kind: K::File { must_exist: false }, default: "/var/run/calico", group: G::Endpoints,
        doc: "Directory where per-endpoint status files are written (`endpoint-status/<orchestrator> <workload> <endpoint>`, for the CNI plugin) from the external driver's reports (`UseInternalDataplaneDriver=false`); `none` disables the files. The in-process dataplane writes none." }
    PolicySyncPathPrefix { v3_field: Some("policySyncPathPrefix"), kind: K::File { must_exist: false }, group: G::Endpoints,
        doc: "Directory for the per-workload policy-sync sockets; empty disables the policy-sync API." }

    // ---- Dataplane selection and general behaviour ----
    BPFEnabled { v3_field: Some("bpfEnabled"), kind: K::Bool, group: G::Dataplane,
        doc: "Use the eBPF dataplane instead of iptables/nftables." }
    UseInternalDataplaneDriver { v3_field: Some("useInternalDataplaneDriver"), kind: K::Bool, default: "true", group: G::Dataplane, restart: true,
        doc: "`false` hands the dataplane to the external driver `DataplaneDriver`: felix starts it as a child, sends it `ToDataplane` messages on its file descriptor 3 and reads `FromDataplane` status reports on its descriptor 4 (8-byte little-endian length, then the protobuf message), and programs no kernel state itself; the driver's exit stops felix with an error." }
    DataplaneDriver { v3_field: Some("dataplaneDriver"), kind: K::Str(S::Any), default: "calico-iptables-plugin", group: G::Dataplane, restart: true,
        doc: "The external dataplane driver's executable (a path, or a name looked up on `PATH`), used when `UseInternalDataplaneDriver` is `false`; started with no arguments. `felix` itself is such a driver when invoked as `felix dataplane-driver` or through a link named `felix-dataplane-driver`." }
    NFTablesMode { v3_field: Some("nftablesMode"), kind: K::OneOf(&["Enabled", "Disabled", "Auto"]), default: "Auto", group: G::Dataplane,
        doc: "`Enabled` programs policy with nftables; `Disabled` with iptables; `Auto` lets the daemon choose at start (iptables unless the host is detected to use nftables)." }
    IptablesBackend { v3_field: Some("iptablesBackend"), kind: K::OneOf(&["legacy", "nft", "auto"]), default: "auto", group: G::Dataplane,
        doc: "Which iptables flavour to drive in iptables mode: `legacy`, `nft` (iptables-nft), or `auto` (detect what the host already uses)." }
    Ipv6Support { v3_field: Some("ipv6Support"), kind: K::Bool, default: "true", group: G::Dataplane,
        doc: "Program the IPv6 dataplane as well as IPv4." }
    IPForwarding { v3_field: Some("ipForwarding"), kind: ENABLED_DISABLED, default: "Enabled", group: G::Dataplane,
        doc: "Turn on IP forwarding in the kernel at start-up." }
    ChainInsertMode { v3_field: Some("chainInsertMode"), kind: K::OneOf(&["insert", "append"]), default: "insert", group: G::Dataplane, non_zero: true,
        doc: "Whether Felix's hook rules go at the top (`insert`) or the bottom (`append`) of the kernel's base chains (INPUT, FORWARD, OUTPUT, PREROUTING, POSTROUTING); hooks found elsewhere are moved on the next refresh. iptables mode only: nftables mode programs its own tables and ignores it." }
    ServiceLoopPrevention { v3_field: Some("serviceLoopPrevention"), kind: K::OneOf(&["Drop", "Reject", "Disabled"]), default: "Drop", group: G::Dataplane,
        doc: "What to do with traffic to an unused service IP that would otherwise loop between host and network." }
    DisableConntrackInvalidCheck { v3_field: Some("disableConntrackInvalidCheck"), kind: K::Bool, group: G::Dataplane,
        doc: "Stop dropping packets that conntrack classifies as INVALID." }
    FeatureDetectOverride { v3_field: Some("featureDetectOverride"), kind: K::KeyValueList, group: G::Dataplane,
        doc: "Force the result of kernel/tool feature detection, e.g. `SNATFullyRandom=true`." }
    FeatureGates { v3_field: Some("featureGates"), kind: K::KeyValueList, group: G::Dataplane,
        doc: "Opt-in switches for experimental behaviour, `name=value`." }
    MTUIfacePattern { v3_field: Some("mtuIfacePattern"), kind: K::Regex, default: "^((en|wl|ww|sl|ib)[Pcopsvx].*|(eth|wlan|wwan).*)", group: G::Dataplane,
        doc: "Host interfaces considered when detecting the network MTU. Here: no effect; with `VXLANMTU`/`VXLANMTUV6` at 0 the VXLAN device's MTU is that of the interface carrying the node's address (the tunnel's parent) minus 50 (IPv4) / 70 (IPv6)." }

    // ---- iptables ----
    IptablesRefreshInterval { v3_field: Some("iptablesRefreshInterval"), kind: SECS, default: "180", group: G::Iptables,
        doc: "Period of the full re-read and repair of Felix's iptables chains; 0 disables it." }
    IptablesPostWriteCheckIntervalSecs { v3_field: Some("iptablesPostWriteCheckInterval"), kind: SECS, default: "5", group: G::Iptables,
        doc: "Delay before re-reading a table after writing it, to catch other agents clobbering it." }
    IptablesLockProbeIntervalMillis { v3_field: Some("iptablesLockProbeInterval"), kind: K::Millis, default: "50", group: G::Iptables,
        doc: "Poll interval while waiting for the iptables lock." }
    IptablesLockFilePath { v3_field: Some("iptablesLockFilePath"), kind: K::File { must_exist: false }, default: "/run/xtables.lock", group: G::Iptables, deprecated: true,
        doc: "Deprecated (removed upstream): path of the iptables lock file; accepted and ignored." }
    IptablesLockTimeoutSecs { v3_field: Some("iptablesLockTimeout"), kind: SECS, default: "0", group: G::Iptables, deprecated: true,
        doc: "Deprecated (removed upstream): how long to wait for the iptables lock; accepted and ignored." }
    IptablesMarkMask { v3_field: Some("iptablesMarkMask"), kind: K::MarkBitmask, default: "0xffff0000", group: G::Iptables, non_zero: true,
        doc: "Packet-mark bits Felix may use in iptables mode; must not clash with other users of the mark." }
    IptablesFilterAllowAction { v3_field: Some("iptablesFilterAllowAction"), kind: ACCEPT_RETURN, default: "ACCEPT", group: G::Iptables, non_zero: true,
        doc: "Verdict for allowed traffic in the filter table: `ACCEPT`, or `RETURN` to let later rules see it." }
    IptablesMangleAllowAction { v3_field: Some("iptablesMangleAllowAction"), kind: ACCEPT_RETURN, default: "ACCEPT", group: G::Iptables, non_zero: true,
        doc: "Verdict for allowed traffic in the mangle table (pre-DNAT policy)." }
    IptablesFilterDenyAction { v3_field: Some("iptablesFilterDenyAction"), kind: DROP_REJECT, default: "DROP", group: G::Iptables, non_zero: true,
        doc: "Verdict for denied traffic: `DROP` silently or `REJECT` with an error." }
    IptablesNATOutgoingInterfaceFilter { v3_field: Some("iptablesNATOutgoingInterfaceFilter"), kind: K::Str(S::IfaceParam), group: G::Iptables,
        doc: "When set, outgoing NAT (masquerade) applies only to traffic leaving this interface (`+` wildcard allowed)." }

    // ---- nftables ----
    NftablesRefreshInterval { v3_field: Some("nftablesRefreshInterval"), kind: SECS, default: "180", group: G::Nftables,
        doc: "Period of the full re-read and repair of Felix's nftables table; 0 disables it." }
    NftablesMarkMask { v3_field: Some("nftablesMarkMask"), kind: K::MarkBitmask, default: "0xffff0000", group: G::Nftables, non_zero: true,
        doc: "Packet-mark bits Felix may use in nftables mode." }
    NftablesFilterAllowAction { v3_field: Some("nftablesFilterAllowAction"), kind: ACCEPT_RETURN, default: "ACCEPT", group: G::Nftables, non_zero: true,
        doc: "Verdict for allowed traffic in nftables filter chains." }
    NftablesMangleAllowAction { v3_field: Some("nftablesMangleAllowAction"), kind: ACCEPT_RETURN, default: "ACCEPT", group: G::Nftables, non_zero: true,
        doc: "Verdict for allowed traffic in nftables mangle chains." }
    NftablesFilterDenyAction { v3_field: Some("nftablesFilterDenyAction"), kind: DROP_REJECT, default: "DROP", group: G::Nftables, non_zero: true,
        doc: "Verdict for denied traffic in nftables mode." }
    NFTablesFlowTableOffload { v3_field: Some("nftablesFlowTableOffload"), kind: K::OneOf(&["All", "Disabled"]), default: "Disabled", group: G::Nftables,
        doc: "`All` offloads established flows to an nftables flowtable." }
    NFTablesFlowTableDataIfacePattern { v3_field: Some("nftablesFlowTableDataIfacePattern"), kind: K::Regex, group: G::Nftables,
        doc: "Host interfaces added to the flowtable alongside workload interfaces." }

    // ---- IP sets ----
    IpsetsRefreshInterval { v3_field: Some("ipsetsRefreshInterval"), kind: SECS, default: "90", group: G::IpSets,
        doc: "Period of the full re-read and repair of Felix's IP sets; 0 disables it." }
    MaxIpsetSize { v3_field: Some("maxIpsetSize"), kind: INT, default: "1048576", group: G::IpSets, non_zero: true,
        doc: "Maximum number of members of one IP set (the kernel `maxelem`)." }

    // ---- Routing ----
    RouteRefreshInterval { v3_field: Some("routeRefreshInterval"), kind: SECS, default: "90", group: G::Routing,
        doc: "Period of the full resync of routes, routing rules and VXLAN FDB entries; 0 disables it." }
    RouteSource { v3_field: Some("routeSource"), kind: K::OneOf(&["WorkloadIPs", "CalicoIPAM"]), default: "CalicoIPAM", group: G::Routing,
        doc: "Where remote routes come from: IPAM blocks (`CalicoIPAM`) or individual workload addresses (`WorkloadIPs`)." }
    RouteTableRange { v3_field: Some("routeTableRange"), kind: K::RouteTableRange, group: G::Routing, deprecated: true,
        doc: "Deprecated single range of routing tables Felix may use; `RouteTableRanges` wins when both are set. Here: accepted, but nothing on this node allocates a table (WireGuard and egress gateways are absent), so every route felix programs is in the main table." }
    RouteTableRanges { v3_field: Some("routeTableRanges"), kind: K::RouteTableRanges, group: G::Routing,
        doc: "Routing tables Felix may allocate (empty means 1-250); tables 253-255 are skipped. Here: accepted, but nothing on this node allocates a table (WireGuard and egress gateways are absent), so every route felix programs is in the main table." }
    RouteSyncDisabled { v3_field: Some("routeSyncDisabled"), kind: K::Bool, group: G::Routing,
        doc: "Do not program routes at all (another agent owns them): no route driver runs; the VXLAN device and its ARP/FDB entries are still programmed." }
    RemoveExternalRoutes { v3_field: Some("removeExternalRoutes"), kind: K::Bool, default: "true", group: G::Routing,
        doc: "Remove routes to workload interfaces that Felix did not create." }
    DeviceRouteSourceAddress { v3_field: Some("deviceRouteSourceAddress"), kind: K::Ipv4, group: G::Routing,
        doc: "Source address set on IPv4 routes to local workloads; unset means the kernel chooses." }
    DeviceRouteSourceAddressIPv6 { v3_field: Some("deviceRouteSourceAddressIPv6"), kind: K::Ipv6, group: G::Routing,
        doc: "Source address set on IPv6 routes to local workloads." }
    DeviceRouteProtocol { v3_field: Some("deviceRouteProtocol"), kind: INT, default: "3", group: G::Routing,
        doc: "Routing protocol number stamped on routes Felix programs (3 = boot)." }
    ProgramClusterRoutes { v3_field: Some("programClusterRoutes"), kind: K::OneOf(&["Enabled", "Disabled", "EnabledIPIPOnly", "EnabledNoEncapOnly"]), default: "EnabledIPIPOnly", group: G::Routing,
        doc: "Which cluster routes Felix programs itself rather than leaving them to BGP: all, none, IP-in-IP pools only, or unencapsulated pools only." }
    NetlinkTimeoutSecs { v3_field: Some("netlinkTimeout"), kind: SECS, default: "10", group: G::Routing,
        doc: "Timeout of one netlink request." }

    // ---- Encapsulation ----
    VXLANEnabled { v3_field: Some("vxlanEnabled"), kind: K::OptBool, group: G::Encapsulation,
        doc: "Force the VXLAN device on or off; unset means decide from the IP pools." }
    VXLANPort { v3_field: Some("vxlanPort"), kind: INT, default: "4789", group: G::Encapsulation,
        doc: "UDP port of VXLAN traffic." }
    VXLANVNI { v3_field: Some("vxlanVNI"), kind: INT, default: "4096", group: G::Encapsulation,
        doc: "VXLAN network identifier." }
    VXLANMTU { v3_field: Some("vxlanMTU"), kind: INT, default: "0", group: G::Encapsulation,
        doc: "MTU of the IPv4 VXLAN device; 0 means detect." }
    VXLANMTUV6 { v3_field: Some("vxlanMTUV6"), kind: INT, default: "0", group: G::Encapsulation,
        doc: "MTU of the IPv6 VXLAN device; 0 means detect." }
    IPv4VXLANTunnelAddr { kind: K::Ipv4, group: G::Encapsulation,
        doc: "This node's IPv4 VXLAN tunnel address (per-host value from the Node resource). The device takes the address of this node's VTEP as the calculation graph derives it from the Node resource (`spec.ipv4VXLANTunnelAddr`), so a value set here has no effect of its own." }
    IPv6VXLANTunnelAddr { kind: K::Ipv6, group: G::Encapsulation,
        doc: "This node's IPv6 VXLAN tunnel address (per-host value from the Node resource). As `IPv4VXLANTunnelAddr`: the Node resource's `spec.ipv6VXLANTunnelAddr` decides." }
    VXLANTunnelMACAddr { kind: K::Str(S::Any), group: G::Encapsulation,
        doc: "MAC address of the IPv4 VXLAN device (per-host value); empty means generate. The device takes the MAC of this node's VTEP (the Node resource's `spec.vxlanTunnelMACAddr`, else upstream's derivation from the node name)." }
    VXLANTunnelMACAddrV6 { kind: K::Str(S::Any), group: G::Encapsulation,
        doc: "MAC address of the IPv6 VXLAN device (per-host value); empty means generate. As `VXLANTunnelMACAddr`, from `spec.vxlanTunnelMACAddrV6`." }
    IpInIpEnabled { v3_field: Some("ipipEnabled"), kind: K::OptBool, group: G::Encapsulation,
        doc: "Force the IP-in-IP device on or off; unset means decide from the IP pools. Here: detection only; without the kernel's IPIP module an IPIP pool is reported as unsupported (error log once per pool) and its blocks get no routes." }
    IpInIpMtu { v3_field: Some("ipipMTU"), kind: INT, default: "0", group: G::Encapsulation,
        doc: "MTU of the IP-in-IP device; 0 means detect. Here: no effect (no IPIP device is created; see `IpInIpEnabled`)." }
    IpInIpTunnelAddr { kind: K::Ipv4, group: G::Encapsulation,
        doc: "This node's IP-in-IP tunnel address (per-host value from the Node resource). Here: no effect (no IPIP device is created)." }

    // ---- NAT ----
    NATOutgoingAddress { v3_field: Some("natOutgoingAddress"), kind: K::Ipv4, group: G::Nat,
        doc: "When set, outgoing NAT uses SNAT to this address instead of masquerade." }
    NATPortRange { v3_field: Some("natPortRange"), kind: K::PortRange, group: G::Nat,
        doc: "Source ports used by outgoing NAT; unset means the kernel's choice." }
    NATOutgoingExclusions { v3_field: Some("natOutgoingExclusions"), kind: K::OneOf(&["IPPoolsOnly", "IPPoolsAndHostIPs"]), default: "IPPoolsOnly", group: G::Nat,
        doc: "Destinations exempt from outgoing NAT: IP pools only, or IP pools and every node's address (the `all-hosts-net` IP set)." }

    // ---- eBPF dataplane ----
    BPFLogLevel { v3_field: Some("bpfLogLevel"), kind: K::OneOf(&["off", "info", "debug"]), default: "off", group: G::Bpf, non_zero: true,
        doc: "Verbosity of the BPF programs' trace output." }
    BPFConntrackLogLevel { v3_field: Some("bpfConntrackLogLevel"), kind: K::OneOf(&["off", "debug"]), default: "off", group: G::Bpf, non_zero: true,
        doc: "Verbosity of the BPF conntrack cleaner." }
    BPFAttachType { v3_field: Some("bpfAttachType"), kind: K::OneOf(&["Netkit", "TCX", "TC"]), default: "Netkit", group: G::Bpf, non_zero: true,
        doc: "How programs are attached: `Netkit` (netkit devices where possible), `TCX`, or legacy `TC` (clsact); falls back when the kernel lacks support." }
    BPFDataIfacePattern { v3_field: Some("bpfDataIfacePattern"), kind: K::Regex, default: "^((en|wl|ww|sl|ib)[Popsx].*|(eth|wlan|wwan|bond).*)", group: G::Bpf,
        doc: "Host interfaces that carry cluster traffic and get BPF programs." }
    BPFL3IfacePattern { v3_field: Some("bpfL3IfacePattern"), kind: K::Regex, group: G::Bpf,
        doc: "Extra layer-3 (no Ethernet header) interfaces that get BPF programs." }
    BPFDisableUnprivileged { v3_field: Some("bpfDisableUnprivileged"), kind: K::Bool, default: "true", group: G::Bpf,
        doc: "Set the sysctl that stops unprivileged users from loading BPF." }
    BPFPolicyDebugEnabled { v3_field: Some("bpfPolicyDebugEnabled"), kind: K::Bool, default: "true", group: G::Bpf,
        doc: "Keep the per-interface policy debug information used by inspection tools." }
    BPFEnforceRPF { v3_field: Some("bpfEnforceRPF"), kind: K::OneOf(&["Disabled", "Strict", "Loose"]), default: "Loose", group: G::Bpf, non_zero: true,
        doc: "Reverse-path filtering done by the BPF programs." }
    BPFRedirectToPeer { v3_field: Some("bpfRedirectToPeer"), kind: K::OneOf(&["Disabled", "Enabled", "L2Only"]), default: "Enabled", group: G::Bpf, non_zero: true,
        doc: "Redirect packets straight to the peer device where possible (`L2Only` is treated as `Enabled`)." }
    BPFForceTrackPacketsFromIfaces { v3_field: Some("bpfForceTrackPacketsFromIfaces"), kind: K::IfaceFilterList, default: "docker+", group: G::Bpf,
        doc: "Interfaces whose packets always go through Linux conntrack even in BPF mode." }
    BPFDisableGROForIfaces { v3_field: Some("bpfDisableGROForIfaces"), kind: K::Regex, group: G::Bpf,
        doc: "Interfaces on which generic receive offload is turned off." }
    BPFExcludeCIDRsFromNAT { v3_field: Some("bpfExcludeCIDRsFromNAT"), kind: K::CidrList, group: G::Bpf,
        doc: "Destinations that BPF service NAT leaves alone." }
    BPFExtToServiceConnmark { v3_field: Some("bpfExtToServiceConnmark"), kind: INT, default: "0", group: G::Bpf,
        doc: "Connmark set on external traffic to services, for interop with other agents; 0 disables." }
    BPFHostConntrackBypass { v3_field: Some("bpfHostConntrackBypass"), kind: K::Bool, group: G::Bpf,
        doc: "Let host traffic that BPF already tracks skip Linux conntrack." }
    BPFLogFilters { v3_field: Some("bpfLogFilters"), kind: K::KeyValueList, group: G::Bpf,
        doc: "Per-interface pcap-style filters for BPF debug logging, `iface=filter`. Here: no effect; with `BPFLogLevel=Debug` every packet of every interface takes the debug path (the match-all log filter)." }
    BPFMapSizeIPSets { v3_field: Some("bpfMapSizeIPSets"), kind: INT, default: "1048576", group: G::Bpf, non_zero: true,
        doc: "Capacity of the BPF IP-set map (total members of all sets)." }
    BPFMapSizeIfState { v3_field: Some("bpfMapSizeIfState"), kind: INT, default: "1000", group: G::Bpf, non_zero: true,
        doc: "Capacity of the BPF interface-state map." }
    BPFMapSizeRoute { v3_field: Some("bpfMapSizeRoute"), kind: INT, default: "262144", group: G::Bpf, non_zero: true,
        doc: "Capacity of the BPF route map." }
    BPFMapSizeConntrack { v3_field: Some("bpfMapSizeConntrack"), kind: INT, default: "512000", group: G::Bpf, non_zero: true,
        doc: "Capacity of the BPF conntrack map." }

    // ---- XDP ----
    XDPEnabled { v3_field: Some("xdpEnabled"), kind: K::Bool, default: "true", group: G::Xdp,
        doc: "Accelerate untracked deny policies with XDP where the interface supports it." }
    GenericXDPEnabled { v3_field: Some("genericXDPEnabled"), kind: K::Bool, group: G::Xdp,
        doc: "Allow generic (driver-independent) XDP mode when native XDP is not available." }
    XDPRefreshInterval { v3_field: Some("xdpRefreshInterval"), kind: SECS, default: "90", group: G::Xdp,
        doc: "Period of the full re-check of XDP programs and maps; 0 disables it." }

    // ---- Status and usage reporting ----
    ReportingIntervalSecs { v3_field: Some("reportingInterval"), kind: SECS, default: "30", group: G::Reporting,
        doc: "Period of this node's status report to the datastore (also the dataplane status-report period); 0 disables." }
    ReportingTTLSecs { v3_field: Some("reportingTTL"), kind: SECS, default: "90", group: G::Reporting,
        doc: "Time-to-live (an etcd lease) of the process status key `/calico/felix/v2/no-region/host/<node>/status` written from the external driver's `ProcessStatusUpdate` reports (`UseInternalDataplaneDriver=false`, etcd datastore)." }
    UsageReportingEnabled { v3_field: Some("usageReportingEnabled"), kind: K::Bool, default: "true", group: G::Reporting,
        doc: "Send anonymous usage statistics (felix-rs never sends them; kept for compatibility)." }
    UsageReportingInitialDelaySecs { v3_field: Some("usageReportingInitialDelay"), kind: SECS, default: "300", group: G::Reporting,
        doc: "Delay before the first usage report." }
    UsageReportingIntervalSecs { v3_field: Some("usageReportingInterval"), kind: SECS, default: "86400", group: G::Reporting,
        doc: "Period of usage reports." }

    // ---- Cluster information ----
    ClusterGUID { kind: K::Str(S::Any), default: "baddecaf", group: G::ClusterInfo, restart: false,
        doc: "Cluster identifier from ClusterInformation." }
    ClusterType { kind: K::Str(S::Any), group: G::ClusterInfo, restart: false,
        doc: "Comma-separated cluster type tags from ClusterInformation." }
    CalicoVersion { kind: K::Str(S::Any), group: G::ClusterInfo, restart: false,
        doc: "Calico version recorded in ClusterInformation." }

    // ---- Debugging and fault simulation ----
    DebugMemoryProfilePath { v3_field: Some("debugMemoryProfilePath"), kind: K::File { must_exist: false }, group: G::Debug,
        doc: "Where to write a memory profile on request; empty disables." }
    DebugSimulateCalcGraphHangAfter { v3_field: Some("debugSimulateCalcGraphHangAfter"), kind: SECS, default: "0", group: G::Debug,
        doc: "Test hook: this long after the dataplane starts, the calculation graph hangs (no updates, flushes or health reports, so its liveness times out); 0 disables." }
    DebugSimulateDataplaneHangAfter { v3_field: Some("debugSimulateDataplaneHangAfter"), kind: SECS, default: "0", group: G::Debug,
        doc: "Test hook: this long after it starts, the dataplane hangs (no applies or health reports, so its liveness times out); 0 disables." }
    DebugSimulateDataplaneApplyDelay { v3_field: Some("debugSimulateDataplaneApplyDelay"), kind: SECS, default: "0", group: G::Debug,
        doc: "Test hook: add this delay to every dataplane apply; 0 disables." }
    IstioAmbientMode { v3_field: Some("istioAmbientMode"), kind: ENABLED_DISABLED, default: "Disabled", group: G::Dataplane, restart: true,
        doc: "`Enabled` builds the Istio ambient calculator: the `all-istio-weps` IP set of workloads in ambient mode, and the ambient mark on their endpoints. Read when the calculation graph is built (`felix run` from its local configuration; `felix calc` and `felix explain` also from the first state's FelixConfiguration); a change restarts felix." }
    DebugPanicAfter { kind: SECS, default: "0", group: G::Debug,
        doc: "Test hook: this long after the dataplane starts, `felix run` stops and exits non-zero with an error naming this setting; 0 disables. Host-local in practice (not in the v3 API)." }
    DebugHost { v3_field: Some("debugHost"), kind: K::Str(S::HostAddress), default: "localhost", group: G::Debug,
        doc: "Address of the debug HTTP server." }
    DebugPort { v3_field: Some("debugPort"), kind: PORT, group: G::Debug,
        doc: "Port of the debug HTTP server; 0 disables it." }
}

/// Upstream Felix parameters that felix-rs deliberately does not implement.
/// Setting one gives a clear "not implemented" message instead of "unknown".
/// Pairs are (canonical name, v3 field when it differs only by more than
/// case from the name).
pub static UNSUPPORTED_UPSTREAM: &[(&str, Option<&str>)] = &[
    ("WireguardEnabled", None),
    ("WireguardEnabledV6", None),
    ("WireguardListeningPort", None),
    ("WireguardListeningPortV6", None),
    ("WireguardRoutingRulePriority", None),
    ("WireguardInterfaceName", None),
    ("WireguardInterfaceNameV6", None),
    ("WireguardMTU", None),
    ("WireguardMTUV6", None),
    ("WireguardHostEncryptionEnabled", None),
    ("WireguardPersistentKeepAlive", Some("wireguardKeepAlive")),
    ("WireguardThreadingEnabled", None),
    ("BPFOverlayHostSourceIP", None),
    ("BPFJITHardening", None),
    ("BPFConntrackCleanupMode", Some("bpfConntrackMode")),
    ("BPFConntrackTimeouts", None),
    ("BPFIPFragTimeout", None),
    ("BPFCTLBLogFilter", None),
    ("BPFConnectTimeLoadBalancingEnabled", None),
    ("BPFConnectTimeLoadBalancing", None),
    ("BPFHostNetworkedNATWithoutCTLB", None),
    ("BPFExternalServiceMode", None),
    ("BPFDSROptoutCIDRs", None),
    ("BPFKubeProxyIptablesCleanupEnabled", None),
    ("BPFKubeProxyMinSyncPeriod", None),
    ("BPFKubeProxyHealthzPort", None),
    ("BPFPSNATPorts", None),
    ("BPFMapSizeNATFrontend", None),
    ("BPFMapSizeNATBackend", None),
    ("BPFMapSizeNATAffinity", None),
    ("BPFMapSizePerCPUConntrack", None),
    ("BPFMapSizeConntrackScaling", None),
    ("BPFMapSizeConntrackCleanupQueue", None),
    ("BPFIPFragmentReassemblyEnabled", None),
    ("BPFExportBufferSizeMB", None),
    ("BPFProfiling", None),
    ("BPFMaglevMaxEndpointsPerService", None),
    ("BPFMaglevMaxServices", None),
    ("IstioDSCPMark", None),
    ("CgroupV2Path", None),
    ("DebugBPFCgroupV2", None),
    ("TyphaAddr", None),
    ("TyphaK8sServiceName", None),
    ("TyphaK8sNamespace", None),
    ("TyphaReadTimeout", None),
    ("TyphaWriteTimeout", None),
    ("TyphaKeyFile", None),
    ("TyphaCertFile", None),
    ("TyphaCAFile", None),
    ("TyphaCN", None),
    ("TyphaURISAN", None),
    ("MetadataAddr", None),
    ("MetadataPort", None),
    ("OpenstackRegion", None),
    ("FloatingIPs", None),
    ("LocalSubnetL2Reachability", None),
    ("LocalSubnetL2ReachabilityRefreshInterval", None),
    ("WindowsManageFirewallRules", None),
    ("AWSSrcDstCheck", None),
    ("PrometheusGoMetricsEnabled", None),
    ("PrometheusWireGuardMetricsEnabled", None),
    ("PrometheusMetricsCAFile", None),
    ("PrometheusMetricsCertFile", None),
    ("PrometheusMetricsKeyFile", None),
    ("PrometheusMetricsClientAuth", None),
    ("FlowLogsFlushInterval", None),
    ("FlowLogsCollectorDebugTrace", None),
    ("FlowLogsGoldmaneServer", None),
    ("FlowLogsLocalReporter", None),
    ("FlowLogsPolicyEvaluationMode", None),
    ("Variant", None),
    ("GoGCThreshold", None),
    ("GoMemoryLimitMB", None),
    ("GoMaxProcs", None),
    ("DebugCPUProfilePath", None),
    ("DebugSimulateDataRace", None),
    ("IPv4NormalRoutePriority", None),
    ("IPv4ElevatedRoutePriority", None),
    ("IPv6NormalRoutePriority", None),
    ("IPv6ElevatedRoutePriority", None),
    ("LiveMigrationRouteConvergenceTime", None),
    ("SidecarAccelerationEnabled", None),
    ("RequireMTUFile", None),
];

/// Looks a parameter up by name, ignoring case.
pub fn lookup(name: &str) -> Option<Param> {
    Param::ALL
        .iter()
        .copied()
        .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
}

/// The canonical name of an upstream parameter felix-rs does not implement.
pub fn lookup_unsupported(name: &str) -> Option<&'static str> {
    UNSUPPORTED_UPSTREAM
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
        .map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_default_parses_with_its_own_kind() {
        for spec in PARAMS {
            if !spec.default.is_empty() {
                assert!(
                    spec.kind.parse(spec.default).is_ok(),
                    "default of {} does not parse: {:?}",
                    spec.name,
                    spec.kind.parse(spec.default)
                );
            }
        }
    }

    #[test]
    fn names_and_v3_fields_are_unique_ignoring_case() {
        let mut names = HashSet::new();
        let mut fields = HashSet::new();
        for spec in PARAMS {
            assert!(
                names.insert(spec.name.to_ascii_lowercase()),
                "dup {}",
                spec.name
            );
            if let Some(f) = spec.v3_field {
                assert!(fields.insert(f.to_ascii_lowercase()), "dup v3 {f}");
                assert!(
                    f.starts_with(|c: char| c.is_ascii_lowercase()),
                    "{f} not lowerCamel"
                );
            }
        }
        for (n, _) in UNSUPPORTED_UPSTREAM {
            assert!(
                !names.contains(&n.to_ascii_lowercase()),
                "{n} is both supported and not"
            );
        }
    }

    #[test]
    fn param_enum_indexes_the_table() {
        assert_eq!(Param::ALL.len(), PARAMS.len());
        for (i, p) in Param::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
            assert_eq!(format!("{p:?}"), p.name());
        }
    }

    #[test]
    fn non_zero_params_have_a_non_empty_default_or_are_local() {
        for spec in PARAMS.iter().filter(|s| s.non_zero) {
            assert!(
                !spec.default.is_empty() || spec.local,
                "{} is non-zero but defaults to zero",
                spec.name
            );
        }
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup("interfaceprefix"), Some(Param::InterfacePrefix));
        assert_eq!(lookup("INTERFACEPREFIX"), Some(Param::InterfacePrefix));
        assert_eq!(lookup("NoSuchThing"), None);
        assert_eq!(
            lookup_unsupported("wireguardenabled"),
            Some("WireguardEnabled")
        );
    }
}
