//! The shape of one parameter's entry in the table ([`crate::params`]).

use crate::value::{Kind, Value};

/// Documentation group of a parameter (sections of `docs/config.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Datastore connection and node identity.
    Datastore,
    /// Logging.
    Logging,
    /// Health and metrics.
    HealthMetrics,
    /// Endpoints and host protection.
    Endpoints,
    /// Dataplane selection and general behaviour.
    Dataplane,
    /// iptables.
    Iptables,
    /// nftables.
    Nftables,
    /// IP sets.
    IpSets,
    /// Routing.
    Routing,
    /// Encapsulation (VXLAN, IP-in-IP).
    Encapsulation,
    /// NAT.
    Nat,
    /// eBPF dataplane.
    Bpf,
    /// XDP.
    Xdp,
    /// Status and usage reporting.
    Reporting,
    /// Cluster information (from `ClusterInformation`).
    ClusterInfo,
    /// Debugging and fault simulation.
    Debug,
}

impl Group {
    /// Every group, in documentation order.
    pub const ALL: [Group; 16] = [
        Group::Datastore,
        Group::Logging,
        Group::HealthMetrics,
        Group::Endpoints,
        Group::Dataplane,
        Group::Iptables,
        Group::Nftables,
        Group::IpSets,
        Group::Routing,
        Group::Encapsulation,
        Group::Nat,
        Group::Bpf,
        Group::Xdp,
        Group::Reporting,
        Group::ClusterInfo,
        Group::Debug,
    ];

    /// Section heading of the group in `docs/config.md`.
    pub fn title(self) -> &'static str {
        match self {
            Group::Datastore => "Datastore connection and node identity",
            Group::Logging => "Logging",
            Group::HealthMetrics => "Health and metrics",
            Group::Endpoints => "Endpoints and host protection",
            Group::Dataplane => "Dataplane selection and general behaviour",
            Group::Iptables => "iptables",
            Group::Nftables => "nftables",
            Group::IpSets => "IP sets",
            Group::Routing => "Routing",
            Group::Encapsulation => "Encapsulation (VXLAN, IP-in-IP)",
            Group::Nat => "NAT",
            Group::Bpf => "eBPF dataplane",
            Group::Xdp => "XDP",
            Group::Reporting => "Status and usage reporting",
            Group::ClusterInfo => "Cluster information (from ClusterInformation)",
            Group::Debug => "Debugging and fault simulation",
        }
    }
}

/// Static description of one parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Canonical (upstream) name, e.g. `IptablesRefreshInterval`.
    pub name: &'static str,
    /// Field name in the v3 `FelixConfiguration` spec, if the parameter can
    /// be set there.
    pub v3_field: Option<&'static str>,
    /// Syntax and validation rule of the value.
    pub kind: Kind,
    /// Default in the parameter's text syntax; empty means the zero value
    /// of the kind (false, 0, empty, unset).
    pub default: &'static str,
    /// Documentation group the parameter is listed under.
    pub group: Group,
    /// May only come from the config file or environment.
    pub local: bool,
    /// `none` (the explicit zero value) is not allowed.
    pub non_zero: bool,
    /// A change at run time needs a daemon restart (upstream: every
    /// parameter except a short list the daemon applies live).
    pub restart: bool,
    /// The parameter was removed upstream; accepted so that old config
    /// files keep working, documented as deprecated.
    pub deprecated: bool,
    /// What the parameter does, in this project's words.
    pub doc: &'static str,
}

impl ParamSpec {
    /// Base used by the table macro; every entry overrides the fields it needs.
    pub(crate) const BASE: ParamSpec = ParamSpec {
        name: "",
        v3_field: None,
        kind: Kind::Bool,
        default: "",
        group: Group::Dataplane,
        local: false,
        non_zero: false,
        restart: true,
        deprecated: false,
        doc: "",
    };

    /// `FELIX_<UPPER-CASE NAME>`.
    pub fn env_name(&self) -> String {
        format!("FELIX_{}", self.name.to_ascii_uppercase())
    }

    /// The parsed default. Every table default is checked by a unit test,
    /// so the zero-value fallback is never used in practice.
    pub fn default_value(&self) -> Value {
        if self.default.is_empty() {
            return self.kind.zero();
        }
        self.kind
            .parse(self.default)
            .unwrap_or_else(|_| self.kind.zero())
    }
}
