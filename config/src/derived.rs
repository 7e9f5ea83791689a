//! Typed enums for the enum parameters the daemon branches on, and helpers
//! that combine several parameters the way upstream's dataplane does.

use crate::config::Config;
use crate::types::IndexRange;
use std::time::Duration;

/// A log severity (`LogSeverity*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `TRACE`: everything.
    Trace,
    /// `DEBUG`.
    Debug,
    /// `INFO` (the default).
    Info,
    /// `WARNING`.
    Warning,
    /// `ERROR`.
    Error,
    /// `FATAL`: logged at error level.
    Fatal,
}

impl LogLevel {
    /// Maps the canonical parameter text; unknown text (impossible after
    /// validation) maps to `Info`.
    pub fn from_param(s: &str) -> LogLevel {
        match s {
            "TRACE" => LogLevel::Trace,
            "DEBUG" => LogLevel::Debug,
            "WARNING" => LogLevel::Warning,
            "ERROR" => LogLevel::Error,
            "FATAL" => LogLevel::Fatal,
            _ => LogLevel::Info,
        }
    }

    /// The `tracing` level filter to install (`FATAL` has no own level in
    /// `tracing`; it keeps errors only).
    pub fn to_tracing(self) -> tracing::Level {
        match self {
            LogLevel::Trace => tracing::Level::TRACE,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Warning => tracing::Level::WARN,
            LogLevel::Error | LogLevel::Fatal => tracing::Level::ERROR,
        }
    }
}

/// `NFTablesMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NftablesMode {
    /// `Enabled`: program nftables.
    Enabled,
    /// `Disabled`: do not use nftables.
    Disabled,
    /// `Auto`: the daemon chooses at start.
    Auto,
}

/// `IptablesBackend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IptablesBackend {
    /// `legacy`: the legacy iptables backend.
    Legacy,
    /// `nft`: the iptables-nft backend.
    Nft,
    /// `auto`: detect the backend in use.
    Auto,
}

/// `ChainInsertMode`: where the iptables dataplane puts its hooks in the
/// kernel's base chains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainInsertMode {
    /// `insert`: hooks go at the top of the base chains (the default).
    Insert,
    /// `append`: hooks go at the end of the base chains.
    Append,
}

/// `BPFAttachType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BpfAttachType {
    /// `Netkit`: netkit devices where possible (the default).
    Netkit,
    /// `TCX`: attach through the tcx hook.
    Tcx,
    /// `TC`: attach as classic tc filters.
    Tc,
}

/// `DefaultEndpointToHostAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointToHostAction {
    /// `DROP`: drop traffic from workloads to the host (the default).
    Drop,
    /// `RETURN`: continue into the host rules.
    Return,
    /// `ACCEPT`: accept it.
    Accept,
}

/// Which dataplane `felix run` programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataplaneMode {
    /// The iptables dataplane.
    Iptables,
    /// The nftables dataplane.
    Nftables,
    /// The eBPF dataplane.
    Bpf,
}

impl DataplaneMode {
    /// Name used by the admin socket's `/status` (`iptables`, `nftables`, `bpf`).
    pub fn as_str(self) -> &'static str {
        match self {
            DataplaneMode::Iptables => "iptables",
            DataplaneMode::Nftables => "nftables",
            DataplaneMode::Bpf => "bpf",
        }
    }
}

/// Default routing-table range when neither range parameter is set.
pub const DEFAULT_ROUTE_TABLE_RANGE: IndexRange = IndexRange { min: 1, max: 250 };

impl Config {
    /// `LogSeverityScreen`: minimum level of lines written to stderr.
    pub fn log_severity_screen(&self) -> LogLevel {
        LogLevel::from_param(self.log_severity_screen_str())
    }
    /// `LogSeverityFile`: minimum level of lines written to the log file.
    pub fn log_severity_file(&self) -> LogLevel {
        LogLevel::from_param(self.log_severity_file_str())
    }
    /// `LogSeveritySys`: minimum level of lines sent to syslog.
    pub fn log_severity_sys(&self) -> LogLevel {
        LogLevel::from_param(self.log_severity_sys_str())
    }

    /// `NFTablesMode`, parsed; unknown text maps to `Auto`.
    pub fn nftables_mode(&self) -> NftablesMode {
        match self.nftables_mode_str() {
            "Enabled" => NftablesMode::Enabled,
            "Disabled" => NftablesMode::Disabled,
            _ => NftablesMode::Auto,
        }
    }

    /// `IptablesBackend`, parsed; unknown text maps to `Auto`.
    pub fn iptables_backend(&self) -> IptablesBackend {
        match self.iptables_backend_str() {
            "legacy" => IptablesBackend::Legacy,
            "nft" => IptablesBackend::Nft,
            _ => IptablesBackend::Auto,
        }
    }

    /// `ChainInsertMode`, parsed; anything but `append` means `Insert`.
    pub fn chain_insert_mode(&self) -> ChainInsertMode {
        match self.chain_insert_mode_str() {
            "append" => ChainInsertMode::Append,
            _ => ChainInsertMode::Insert,
        }
    }

    /// `BPFAttachType`, parsed; unknown text maps to `Netkit`.
    pub fn bpf_attach_type(&self) -> BpfAttachType {
        match self.bpf_attach_type_str() {
            "TCX" => BpfAttachType::Tcx,
            "TC" => BpfAttachType::Tc,
            _ => BpfAttachType::Netkit,
        }
    }

    /// `DefaultEndpointToHostAction`, parsed; unknown text maps to `Drop`.
    pub fn default_endpoint_to_host_action(&self) -> EndpointToHostAction {
        match self.default_endpoint_to_host_action_str() {
            "RETURN" => EndpointToHostAction::Return,
            "ACCEPT" => EndpointToHostAction::Accept,
            _ => EndpointToHostAction::Drop,
        }
    }

    /// The dataplane to program: `BPFEnabled` wins, then
    /// `NFTablesMode=Enabled`; otherwise iptables. `Auto` resolves to
    /// iptables because felix-rs does not probe for an nftables-mode
    /// kube-proxy (the contract's default is iptables).
    pub fn dataplane_mode(&self) -> DataplaneMode {
        if self.bpf_enabled() {
            DataplaneMode::Bpf
        } else if self.nftables_mode() == NftablesMode::Enabled {
            DataplaneMode::Nftables
        } else {
            DataplaneMode::Iptables
        }
    }

    /// Whether felix's `*tables` rules are nftables rules: in nftables mode, and in eBPF mode
    /// with `NFTablesMode=Enabled` (the small ruleset BPF mode keeps follows `NFTablesMode`,
    /// as upstream's does); iptables otherwise.
    pub fn nftables_rules(&self) -> bool {
        match self.dataplane_mode() {
            DataplaneMode::Nftables => true,
            DataplaneMode::Bpf => self.nftables_mode() == NftablesMode::Enabled,
            DataplaneMode::Iptables => false,
        }
    }

    fn nft(&self) -> bool {
        self.nftables_rules()
    }

    /// Allow verdict of the filter table in the active `*tables` mode.
    pub fn filter_allow_action(&self) -> &str {
        if self.nft() {
            self.nftables_filter_allow_action()
        } else {
            self.iptables_filter_allow_action()
        }
    }

    /// Allow verdict of the mangle table in the active `*tables` mode.
    pub fn mangle_allow_action(&self) -> &str {
        if self.nft() {
            self.nftables_mangle_allow_action()
        } else {
            self.iptables_mangle_allow_action()
        }
    }

    /// Deny verdict in the active `*tables` mode.
    pub fn filter_deny_action(&self) -> &str {
        if self.nft() {
            self.nftables_filter_deny_action()
        } else {
            self.iptables_filter_deny_action()
        }
    }

    /// Mark mask of the active `*tables` mode.
    pub fn mark_mask(&self) -> u32 {
        if self.nft() {
            self.nftables_mark_mask()
        } else {
            self.iptables_mark_mask()
        }
    }

    /// Full-refresh period of the active `*tables` mode.
    pub fn table_refresh_interval(&self) -> Duration {
        if self.nft() {
            self.nftables_refresh_interval()
        } else {
            self.iptables_refresh_interval()
        }
    }

    /// Period of the dataplane's status reports (upstream feeds its
    /// internal `StatusReportingInterval` from `ReportingIntervalSecs`).
    pub fn status_reporting_interval(&self) -> Duration {
        self.reporting_interval()
    }

    /// Routing tables Felix may use: `RouteTableRanges` if set, else the
    /// deprecated `RouteTableRange` if set, else 1-250.
    pub fn route_table_indices(&self) -> Vec<IndexRange> {
        if !self.route_table_ranges().is_empty() {
            return self.route_table_ranges().to_vec();
        }
        match self.route_table_range() {
            Some(r) => vec![r],
            None => vec![DEFAULT_ROUTE_TABLE_RANGE],
        }
    }

    /// etcd endpoints to dial: `EtcdEndpoints`, or `EtcdScheme://EtcdAddr`.
    pub fn etcd_endpoint_urls(&self) -> Vec<String> {
        if !self.etcd_endpoints().is_empty() {
            return self.etcd_endpoints().to_vec();
        }
        vec![format!("{}://{}", self.etcd_scheme(), self.etcd_addr())]
    }

    /// Whether an interface name is a workload interface (`InterfacePrefix`).
    pub fn is_workload_iface(&self, iface: &str) -> bool {
        self.interface_prefix()
            .iter()
            .any(|p| iface.starts_with(p.as_str()))
    }

    /// Whether an interface is excluded (`InterfaceExclude`).
    pub fn is_excluded_iface(&self, iface: &str) -> bool {
        self.interface_exclude().iter().any(|p| p.matches(iface))
    }
}
