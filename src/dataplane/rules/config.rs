//! Rendering settings: everything the rule renderer needs from Felix's
//! configuration, already resolved (mark bits allocated, actions parsed), so
//! rendering itself is a pure function of (settings, input message).

use std::net::IpAddr;

use felix_config::{Config, EndpointToHostAction as CfgEpToHost};
use ipnet::IpNet;

use crate::dataplane::generictables::{Action, PortRange};
use crate::dataplane::IpVersion;

use super::markbits::{MarkBitsError, MarkBitsManager};
use super::names::{MAX_CHAIN_NAME_LENGTH_IPTABLES, MAX_CHAIN_NAME_LENGTH_NFT};

/// The `*tables` backend the rules are rendered for. Rules are identical on
/// both backends except where noted (chain-name length limit, log prefix
/// length limit, `cali*` wildcard rendering is the drivers' job).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// iptables (legacy or nft flavour) through `iptables-restore`.
    Iptables,
    /// Native nftables (our own `calico` table).
    Nftables,
}

impl Backend {
    /// Longest chain name the backend accepts.
    pub fn max_chain_name_len(self) -> usize {
        match self {
            Backend::Iptables => MAX_CHAIN_NAME_LENGTH_IPTABLES,
            Backend::Nftables => MAX_CHAIN_NAME_LENGTH_NFT,
        }
    }

    /// Longest log prefix (including the `": "` the Log action appends).
    pub fn max_log_prefix_len(self) -> usize {
        match self {
            Backend::Iptables => 29,
            Backend::Nftables => 126,
        }
    }
}

/// The logical `*tables` table a chain belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableName {
    /// `filter`
    Filter,
    /// `nat`
    Nat,
    /// `mangle`
    Mangle,
    /// `raw`
    Raw,
}

impl TableName {
    /// All four tables.
    pub const ALL: [TableName; 4] = [
        TableName::Filter,
        TableName::Nat,
        TableName::Mangle,
        TableName::Raw,
    ];

    /// The kernel's name for the table (`filter`, `nat`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TableName::Filter => "filter",
            TableName::Nat => "nat",
            TableName::Mangle => "mangle",
            TableName::Raw => "raw",
        }
    }
}

/// What happens to workload-to-host traffic after the workload's egress
/// policy (`DefaultEndpointToHostAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointToHostAction {
    /// Drop it.
    Drop,
    /// Return to INPUT (host rules decide).
    Return,
    /// Accept it.
    Accept,
}

/// A failsafe port: always-open host port, optionally only for a peer net.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FailsafePort {
    /// Protocol name (`tcp`, `udp`, ...).
    pub protocol: String,
    /// Port.
    pub port: u16,
    /// Peer network restriction; the rule is only rendered for its family.
    pub net: Option<IpNet>,
}

/// Why settings could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The mark mask is too small for the bits we need.
    #[error("allocating mark bits: {0}")]
    MarkBits(#[from] MarkBitsError),
    /// A configuration value is not usable for rendering.
    #[error("invalid rendering setting {param}: {detail}")]
    InvalidSetting {
        /// Parameter name.
        param: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// Where and how fast denied packets are reported (drop attribution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropLog {
    /// NFLOG group.
    pub group: u16,
    /// Reports per second per reporting rule (and the burst).
    pub rate: u32,
}

/// Resolved rendering settings for one IP version and backend.
///
/// Invariants (established by [`RenderConfig::from_felix_config`] and relied
/// on by the renderer): the single-bit marks are distinct single bits of the
/// mark mask; `mark_endpoint` is disjoint from them; `mark_conn_log` is
/// non-zero iff `log_connection_transitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderConfig {
    /// IP version the chains are for.
    pub ip_version: IpVersion,
    /// Backend the chains are for.
    pub backend: Backend,
    /// Workload interface prefixes (`InterfacePrefix`, e.g. `cali`).
    pub workload_iface_prefixes: Vec<String>,
    /// Packet accepted by policy.
    pub mark_accept: u32,
    /// Policy said Pass (next tier).
    pub mark_pass: u32,
    /// Reserved drop bit (allocated for layout compatibility with upstream).
    pub mark_drop: u32,
    /// Scratch bit 0 (per-rule multi-match, from-workload in raw).
    pub mark_scratch0: u32,
    /// Scratch bit 1.
    pub mark_scratch1: u32,
    /// Connection-transition-logging connmark bit; 0 when disabled.
    pub mark_conn_log: u32,
    /// The endpoint-mark block (remaining bits of the mask).
    pub mark_endpoint: u32,
    /// Inbound failsafe ports.
    pub failsafe_inbound: Vec<FailsafePort>,
    /// Outbound failsafe ports.
    pub failsafe_outbound: Vec<FailsafePort>,
    /// `DefaultEndpointToHostAction`.
    pub endpoint_to_host_action: EndpointToHostAction,
    /// Allow verdict in the filter table (`Accept` or `Return`).
    pub filter_allow_action: Action,
    /// Allow verdict in the mangle table (`Accept` or `Return`).
    pub mangle_allow_action: Action,
    /// Deny verdict (`Drop` or `Reject`).
    pub filter_deny_action: Action,
    /// Prefix of policy `Log` actions (`LogPrefix`).
    pub log_prefix: String,
    /// `LogActionRateLimit` and its burst (`None`: unlimited).
    pub log_rate_limit: Option<(String, u16)>,
    /// Drop attribution (`DropAttributionEnabled`): the NFLOG group and the
    /// per-rule rate (packets per second) denied packets are reported at.
    pub drop_log: Option<DropLog>,
    /// `LogConnectionTransitions=FirstResponseAfterLog`.
    pub log_connection_transitions: bool,
    /// `LogConnectionTransitionsPrefix`, truncated to the backend limit.
    pub log_connection_transitions_prefix: String,
    /// `DisableConntrackInvalidCheck`.
    pub disable_conntrack_invalid: bool,
    /// `VXLANPort` (for the VXLAN-from-workload drop).
    pub vxlan_port: u16,
    /// `AllowVXLANPacketsFromWorkloads`.
    pub allow_vxlan_from_workloads: bool,
    /// `AllowIPIPPacketsFromWorkloads`.
    pub allow_ipip_from_workloads: bool,
    /// `NATOutgoingAddress` (SNAT instead of MASQUERADE when set, v4 only).
    pub nat_outgoing_address: Option<IpAddr>,
    /// `NATPortRange`.
    pub nat_port_range: Option<PortRange>,
    /// `IptablesNATOutgoingInterfaceFilter` (empty: any interface).
    pub nat_outgoing_iface_filter: String,
}

fn parse_allow(param: &'static str, v: &str) -> Result<Action, RenderError> {
    match v.to_ascii_uppercase().as_str() {
        "ACCEPT" => Ok(Action::Accept),
        "RETURN" => Ok(Action::Return),
        other => Err(RenderError::InvalidSetting {
            param,
            detail: format!("{other:?} is not ACCEPT or RETURN"),
        }),
    }
}

fn parse_deny(param: &'static str, v: &str) -> Result<Action, RenderError> {
    match v.to_ascii_uppercase().as_str() {
        "DROP" => Ok(Action::Drop),
        "REJECT" => Ok(Action::Reject { with: None }),
        other => Err(RenderError::InvalidSetting {
            param,
            detail: format!("{other:?} is not DROP or REJECT"),
        }),
    }
}

/// Truncates `s` to at most `max` bytes on a char boundary.
pub(crate) fn truncate_str(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn failsafes(ports: &[felix_config::ProtoPort]) -> Vec<FailsafePort> {
    ports
        .iter()
        .map(|p| FailsafePort {
            protocol: p.protocol.clone(),
            port: p.port,
            net: p.net,
        })
        .collect()
}

impl RenderConfig {
    /// Settings with upstream's defaults for `ip_version` and `backend`,
    /// mark bits allocated over `0xffff0000`, no connection logging.
    pub fn defaults(ip_version: IpVersion, backend: Backend) -> Self {
        let cfg = Config::default();
        // The default config is valid by construction; fall back to the
        // same values literally should that ever change.
        Self::build(&cfg, ip_version, backend).unwrap_or(RenderConfig {
            ip_version,
            backend,
            workload_iface_prefixes: vec!["cali".into()],
            mark_accept: 0x1_0000,
            mark_pass: 0x2_0000,
            mark_drop: 0x4_0000,
            mark_scratch0: 0x8_0000,
            mark_scratch1: 0x10_0000,
            mark_conn_log: 0,
            mark_endpoint: 0xffe0_0000,
            failsafe_inbound: Vec::new(),
            failsafe_outbound: Vec::new(),
            endpoint_to_host_action: EndpointToHostAction::Drop,
            filter_allow_action: Action::Accept,
            mangle_allow_action: Action::Accept,
            filter_deny_action: Action::Drop,
            log_prefix: "calico-packet".into(),
            log_rate_limit: None,
            drop_log: None,
            log_connection_transitions: false,
            log_connection_transitions_prefix: "calico-response".into(),
            disable_conntrack_invalid: false,
            vxlan_port: 4789,
            allow_vxlan_from_workloads: false,
            allow_ipip_from_workloads: false,
            nat_outgoing_address: None,
            nat_port_range: None,
            nat_outgoing_iface_filter: String::new(),
        })
    }

    /// Settings from Felix's configuration for `ip_version`; the backend is
    /// nftables if `NFTablesMode=Enabled` (in nftables and eBPF mode), else
    /// iptables. Mark bits are allocated by a [`MarkBitsManager`] over
    /// the backend's mark mask in upstream's order: accept, pass, drop,
    /// scratch 0, scratch 1, then (only if `LogConnectionTransitions` is on)
    /// the connection-log bit, then the rest as the endpoint-mark block.
    pub fn from_felix_config(cfg: &Config, ip_version: IpVersion) -> Result<Self, RenderError> {
        let backend = if cfg.nftables_rules() {
            Backend::Nftables
        } else {
            Backend::Iptables
        };
        Self::build(cfg, ip_version, backend)
    }

    /// As [`RenderConfig::from_felix_config`] with an explicit backend (the
    /// mask, allow and deny settings of that backend are used).
    pub fn build(
        cfg: &Config,
        ip_version: IpVersion,
        backend: Backend,
    ) -> Result<Self, RenderError> {
        let (mask, filter_allow, mangle_allow, deny) = match backend {
            Backend::Iptables => (
                cfg.iptables_mark_mask(),
                cfg.iptables_filter_allow_action(),
                cfg.iptables_mangle_allow_action(),
                cfg.iptables_filter_deny_action(),
            ),
            Backend::Nftables => (
                cfg.nftables_mark_mask(),
                cfg.nftables_filter_allow_action(),
                cfg.nftables_mangle_allow_action(),
                cfg.nftables_filter_deny_action(),
            ),
        };
        let mut bits = MarkBitsManager::new(mask, "felix-tables");
        let mark_accept = bits.next_single_bit_mark()?;
        let mark_pass = bits.next_single_bit_mark()?;
        let mark_drop = bits.next_single_bit_mark()?;
        let mark_scratch0 = bits.next_single_bit_mark()?;
        let mark_scratch1 = bits.next_single_bit_mark()?;
        let log_connection_transitions =
            cfg.log_connection_transitions() == "FirstResponseAfterLog";
        let mark_conn_log = if log_connection_transitions {
            bits.next_single_bit_mark()?
        } else {
            0
        };
        let (mark_endpoint, _) = bits.next_block_bits_mark(bits.available_bits());
        let endpoint_to_host_action = match cfg.default_endpoint_to_host_action() {
            CfgEpToHost::Drop => EndpointToHostAction::Drop,
            CfgEpToHost::Return => EndpointToHostAction::Return,
            CfgEpToHost::Accept => EndpointToHostAction::Accept,
        };
        // Room for the "-est"/"-rst"/"-icmp-err" suffixes plus ": ".
        let conn_prefix_room = backend
            .max_log_prefix_len()
            .saturating_sub(2 + "-icmp-err".len());
        Ok(RenderConfig {
            ip_version,
            backend,
            workload_iface_prefixes: cfg.interface_prefix().to_vec(),
            mark_accept,
            mark_pass,
            mark_drop,
            mark_scratch0,
            mark_scratch1,
            mark_conn_log,
            mark_endpoint,
            failsafe_inbound: failsafes(cfg.failsafe_inbound_host_ports()),
            failsafe_outbound: failsafes(cfg.failsafe_outbound_host_ports()),
            endpoint_to_host_action,
            filter_allow_action: parse_allow("FilterAllowAction", filter_allow)?,
            mangle_allow_action: parse_allow("MangleAllowAction", mangle_allow)?,
            filter_deny_action: parse_deny("FilterDenyAction", deny)?,
            log_prefix: cfg.log_prefix().to_string(),
            log_rate_limit: (!cfg.log_action_rate_limit().is_empty()).then(|| {
                (
                    cfg.log_action_rate_limit().to_string(),
                    u16::try_from(cfg.log_action_rate_limit_burst()).unwrap_or(0),
                )
            }),
            drop_log: (cfg.drop_attribution_enabled()
                && cfg.dataplane_mode() != felix_config::DataplaneMode::Bpf)
                .then(|| DropLog {
                    group: u16::try_from(cfg.drop_attribution_nflog_group()).unwrap_or(30),
                    rate: u32::try_from(cfg.drop_attribution_rate_limit()).unwrap_or(100),
                }),
            log_connection_transitions,
            log_connection_transitions_prefix: truncate_str(
                cfg.log_connection_transitions_prefix(),
                conn_prefix_room,
            ),
            disable_conntrack_invalid: cfg.disable_conntrack_invalid_check(),
            vxlan_port: u16::try_from(cfg.vxlan_port()).unwrap_or(4789),
            allow_vxlan_from_workloads: cfg.allow_vxlan_packets_from_workloads(),
            allow_ipip_from_workloads: cfg.allow_ipip_packets_from_workloads(),
            nat_outgoing_address: cfg.nat_outgoing_address().map(IpAddr::V4),
            nat_port_range: cfg.nat_port_range().map(|r| PortRange::range(r.min, r.max)),
            nat_outgoing_iface_filter: cfg.iptables_nat_outgoing_interface_filter().to_string(),
        })
    }

    /// Every single-bit mark we use, as one mask (cleared on entry to our
    /// top-level chains).
    pub fn all_calico_mark_bits(&self) -> u32 {
        self.mark_accept | self.mark_pass | self.mark_scratch0 | self.mark_scratch1
    }

    /// Longest chain name of the backend.
    pub fn max_chain_name_len(&self) -> usize {
        self.backend.max_chain_name_len()
    }
}
