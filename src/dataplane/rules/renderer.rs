//! The rule renderer: pure functions from calc-graph messages plus
//! [`RenderConfig`] to backend-neutral [`Chain`]s. The table drivers render
//! the chains in iptables or nft syntax.

use felix_proto::{HostEndpoint, Policy, PolicyId, Profile, ProfileId, WorkloadEndpoint};

use crate::dataplane::generictables::{Chain, Rule};

use super::config::{RenderConfig, TableName};

/// Maps a calc-graph IP set ID to the kernel set name (for iptables mode
/// `IpVersionConfig::name_for_main_ipset`; the nftables driver legalises
/// `:` itself, so the same name works for both).
pub type IpSetNamer<'a> = &'a dyn Fn(&str) -> String;

/// Renders chains for one IP version and backend.
#[derive(Debug, Clone)]
pub struct Renderer {
    cfg: RenderConfig,
}

impl Renderer {
    /// A renderer with these settings.
    pub fn new(cfg: RenderConfig) -> Self {
        Renderer { cfg }
    }

    /// The settings.
    pub fn config(&self) -> &RenderConfig {
        &self.cfg
    }

    /// Static chains of `table` (top-level `cali-*` chains, failsafe chains,
    /// `cali-wl-to-host`, `cali-log-conn`, ...).
    pub fn static_chains(&self, _table: TableName) -> Vec<Chain> {
        Vec::new()
    }

    /// Our rules inserted at the top of kernel chains of `table`:
    /// `(kernel chain, rules)`, kernel chain as iptables names it (`INPUT`).
    pub fn static_insert_rules(&self, _table: TableName) -> Vec<(String, Vec<Rule>)> {
        Vec::new()
    }

    /// `cali-pi-<name>` / `cali-po-<name>` chains of a policy (empty chains
    /// for an empty direction are still returned, so references resolve).
    pub fn policy_chains(
        &self,
        _id: &PolicyId,
        _policy: &Policy,
        _ipset: IpSetNamer,
    ) -> Vec<Chain> {
        Vec::new()
    }

    /// `cali-pri-<name>` / `cali-pro-<name>` chains of a profile.
    pub fn profile_chains(
        &self,
        _id: &ProfileId,
        _profile: &Profile,
        _ipset: IpSetNamer,
    ) -> Vec<Chain> {
        Vec::new()
    }

    /// `cali-tw-<iface>` / `cali-fw-<iface>` chains of a workload endpoint.
    pub fn workload_endpoint_chains(&self, _iface: &str, _ep: &WorkloadEndpoint) -> Vec<Chain> {
        Vec::new()
    }

    /// Chains of a host endpoint, per table.
    pub fn host_endpoint_chains(
        &self,
        _iface: &str,
        _ep: &HostEndpoint,
    ) -> Vec<(TableName, Chain)> {
        Vec::new()
    }

    /// Dispatch chains (workload and host endpoints), per table.
    pub fn dispatch_chains(
        &self,
        _workload_ifaces: &[String],
        _host_ifaces: &[String],
    ) -> Vec<(TableName, Chain)> {
        Vec::new()
    }

    /// `cali-nat-outgoing` (nat table).
    pub fn masquerade_chains(&self, _masq_pool_set: &str, _all_pools_set: &str) -> Vec<Chain> {
        Vec::new()
    }
}
