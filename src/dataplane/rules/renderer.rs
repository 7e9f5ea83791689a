//! The rule renderer: pure functions from calc-graph messages plus
//! [`RenderConfig`] to backend-neutral [`Chain`]s ready for a table driver.
//!
//! For the nftables backend every returned chain name, jump target and
//! kernel-chain name is already layered into its logical table's namespace
//! (`filter-cali-INPUT`, `filter-INPUT`; see [`super::nft_name`]), because
//! the nftables driver keeps all logical tables in one nft table. For
//! iptables names are upstream's plain names.

use std::net::IpAddr;

use felix_proto::{HostEndpoint, Policy, PolicyId, Profile, ProfileId, WorkloadEndpoint};
use ipnet::IpNet;

use crate::dataplane::generictables::{Action, Chain, Rule};

use super::config::{Backend, RenderConfig, TableName};
use super::dispatch::{workload_dispatch_chains, DispatchConfig};
use super::endpoints::{
    endpoint_chain, floating_ip_chains, host_dispatch_chains, nat_outgoing_chain, rpf_skip_chain,
    ChainKind, Dir, EndpointChainSpec,
};
use super::layer::{nft_layer_chain, nft_layer_rules, nft_name};
use super::names::*;
use super::policy::{
    is_staged, policy_chain_name, policy_id_string, profile_chain_name, render_rules, Owner,
};
use super::statics::{filter_forward_append_rules, static_chains, static_insert_rules};

/// Maps a calc-graph IP set ID to the kernel set name. For iptables mode
/// this is `IpVersionConfig::name_for_main_ipset`; the nftables driver
/// legalises the name (`:` to `-`) itself, so the same namer serves both.
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

    fn nft(&self) -> bool {
        self.cfg.backend == Backend::Nftables
    }

    /// A chain name as the driver of `table` knows it (layered for nft).
    pub fn chain_name(&self, table: TableName, name: &str) -> String {
        if self.nft() {
            nft_name(table, name)
        } else {
            name.to_string()
        }
    }

    fn layer(&self, table: TableName, chains: Vec<Chain>) -> Vec<Chain> {
        if self.nft() {
            chains
                .into_iter()
                .map(|c| nft_layer_chain(table, c))
                .collect()
        } else {
            chains
        }
    }

    fn layer_tagged(&self, v: Vec<(TableName, Chain)>) -> Vec<(TableName, Chain)> {
        if self.nft() {
            v.into_iter()
                .map(|(t, c)| (t, nft_layer_chain(t, c)))
                .collect()
        } else {
            v
        }
    }

    fn kernel_rules(
        &self,
        table: TableName,
        v: Vec<(&'static str, Vec<Rule>)>,
    ) -> Vec<(String, Vec<Rule>)> {
        v.into_iter()
            .map(|(k, rules)| {
                if self.nft() {
                    (nft_name(table, k), nft_layer_rules(table, rules))
                } else {
                    (k.to_string(), rules)
                }
            })
            .collect()
    }

    /// Static chains of `table`: top-level `cali-*` chains, failsafe
    /// chains, `cali-wl-to-host`, `cali-log-conn` (when connection
    /// transition logging is on), and empty placeholders for chains other
    /// components own (`cali-rpf-skip`, `cali-fip-dnat`, `cali-fip-snat`,
    /// `cali-nat-outgoing`) so that the static set loads on its own; set
    /// those owners' chains after these.
    pub fn static_chains(&self, table: TableName) -> Vec<Chain> {
        self.layer(table, static_chains(&self.cfg, table))
    }

    /// Our jumps inserted at the top of the kernel chains of `table`:
    /// `(kernel chain, rules)`; for nftables the base-chain names of our
    /// table (`filter-INPUT`).
    pub fn static_insert_rules(&self, table: TableName) -> Vec<(String, Vec<Rule>)> {
        self.kernel_rules(table, static_insert_rules(table))
    }

    /// Rules upstream appends (not inserts) to kernel chains: filter
    /// FORWARD's accept-if-policy-accepted and set-accept-mark pair.
    pub fn static_append_rules(&self, table: TableName) -> Vec<(String, Vec<Rule>)> {
        match table {
            TableName::Filter => self.kernel_rules(
                table,
                vec![("FORWARD", filter_forward_append_rules(&self.cfg))],
            ),
            _ => Vec::new(),
        }
    }

    /// The table a policy's chains belong in: raw for untracked, mangle for
    /// pre-DNAT, filter otherwise. (Normal policies are also referenced by
    /// host endpoints' mangle egress chain: when host endpoints exist, also
    /// set [`Renderer::policy_chains_in`] for mangle.)
    pub fn policy_table(&self, policy: &Policy) -> TableName {
        if policy.untracked {
            TableName::Raw
        } else if policy.pre_dnat {
            TableName::Mangle
        } else {
            TableName::Filter
        }
    }

    /// `cali-pi-<id>` and `cali-po-<id>` of a policy, for the table
    /// [`Renderer::policy_table`] picks. Staged policies render nothing.
    pub fn policy_chains(&self, id: &PolicyId, policy: &Policy, ipset: IpSetNamer) -> Vec<Chain> {
        self.policy_chains_in(self.policy_table(policy), id, policy, ipset)
    }

    /// As [`Renderer::policy_chains`], namespaced for `table`.
    pub fn policy_chains_in(
        &self,
        table: TableName,
        id: &PolicyId,
        policy: &Policy,
        ipset: IpSetNamer,
    ) -> Vec<Chain> {
        if is_staged(&id.kind) {
            return Vec::new();
        }
        let max = self.cfg.max_chain_name_len();
        let owner = Owner::Policy {
            id,
            tier: &policy.tier,
        };
        let label = {
            let kind = if id.kind.is_empty() {
                "Policy"
            } else {
                &id.kind
            };
            if id.namespace.is_empty() {
                format!("{kind} {}", id.name)
            } else {
                format!("{kind} {}/{}", id.namespace, id.name)
            }
        };
        let chains = vec![
            Chain::new(
                &policy_chain_name(POLICY_INBOUND_PFX, id, max),
                render_rules(
                    &self.cfg,
                    &policy.inbound_rules,
                    owner,
                    policy.untracked,
                    true,
                    &format!("{label} ingress"),
                    ipset,
                ),
            ),
            Chain::new(
                &policy_chain_name(POLICY_OUTBOUND_PFX, id, max),
                render_rules(
                    &self.cfg,
                    &policy.outbound_rules,
                    owner,
                    policy.untracked,
                    false,
                    &format!("{label} egress"),
                    ipset,
                ),
            ),
        ];
        self.layer(table, chains)
    }

    /// Names of a policy's chains in `table` (for removal).
    pub fn policy_chain_names(&self, table: TableName, id: &PolicyId) -> Vec<String> {
        let max = self.cfg.max_chain_name_len();
        [POLICY_INBOUND_PFX, POLICY_OUTBOUND_PFX]
            .iter()
            .map(|p| self.chain_name(table, &policy_chain_name(p, id, max)))
            .collect()
    }

    /// Upstream's policy ID string (`gnp/name`, `np/ns/name`).
    pub fn policy_id_string(id: &PolicyId) -> String {
        policy_id_string(id)
    }

    /// `cali-pri-<name>` and `cali-pro-<name>` of a profile (filter table;
    /// use [`Renderer::profile_chains_in`] for mangle).
    pub fn profile_chains(
        &self,
        id: &ProfileId,
        profile: &Profile,
        ipset: IpSetNamer,
    ) -> Vec<Chain> {
        self.profile_chains_in(TableName::Filter, id, profile, ipset)
    }

    /// As [`Renderer::profile_chains`], namespaced for `table`.
    pub fn profile_chains_in(
        &self,
        table: TableName,
        id: &ProfileId,
        profile: &Profile,
        ipset: IpSetNamer,
    ) -> Vec<Chain> {
        let max = self.cfg.max_chain_name_len();
        let owner = Owner::Profile { name: &id.name };
        let chains = vec![
            Chain::new(
                &profile_chain_name(PROFILE_INBOUND_PFX, &id.name, max),
                render_rules(
                    &self.cfg,
                    &profile.inbound_rules,
                    owner,
                    false,
                    true,
                    &format!("Profile {} ingress", id.name),
                    ipset,
                ),
            ),
            Chain::new(
                &profile_chain_name(PROFILE_OUTBOUND_PFX, &id.name, max),
                render_rules(
                    &self.cfg,
                    &profile.outbound_rules,
                    owner,
                    false,
                    false,
                    &format!("Profile {} egress", id.name),
                    ipset,
                ),
            ),
        ];
        self.layer(table, chains)
    }

    /// Names of a profile's chains in `table` (for removal).
    pub fn profile_chain_names(&self, table: TableName, id: &ProfileId) -> Vec<String> {
        let max = self.cfg.max_chain_name_len();
        [PROFILE_INBOUND_PFX, PROFILE_OUTBOUND_PFX]
            .iter()
            .map(|p| self.chain_name(table, &profile_chain_name(p, &id.name, max)))
            .collect()
    }

    /// `cali-tw-<iface>` (ingress policy) and `cali-fw-<iface>` (egress
    /// policy) of a workload endpoint (filter table). An endpoint whose
    /// state is not `active` denies everything.
    pub fn workload_endpoint_chains(&self, iface: &str, ep: &WorkloadEndpoint) -> Vec<Chain> {
        let admin_up = ep.state == "active";
        let spec = |pfx, dir, deny_encap| EndpointChainSpec {
            name: iface,
            endpoint_pfx: pfx,
            tiers: &ep.tiers,
            profiles: &ep.profile_ids,
            dir,
            kind: ChainKind::Normal,
            failsafe: None,
            admin_up,
            allow_action: self.cfg.filter_allow_action.clone(),
            deny_encap,
        };
        let chains = vec![
            endpoint_chain(
                &self.cfg,
                &spec(WORKLOAD_TO_ENDPOINT_PFX, Dir::Ingress, false),
            ),
            endpoint_chain(
                &self.cfg,
                &spec(WORKLOAD_FROM_ENDPOINT_PFX, Dir::Egress, true),
            ),
        ];
        self.layer(TableName::Filter, chains)
    }

    /// Names of a workload endpoint's chains (filter table, for removal).
    pub fn workload_endpoint_chain_names(&self, iface: &str) -> Vec<String> {
        let max = self.cfg.max_chain_name_len();
        [WORKLOAD_TO_ENDPOINT_PFX, WORKLOAD_FROM_ENDPOINT_PFX]
            .iter()
            .map(|p| self.chain_name(TableName::Filter, &endpoint_chain_name(p, iface, max)))
            .collect()
    }

    /// Every chain of a host endpoint, with its table: filter `cali-th-`,
    /// `cali-fh-` (normal tiers, profiles, failsafes), `cali-thfw-`,
    /// `cali-fhfw-` (forward tiers, apply-on-forward); mangle `cali-th-`
    /// (normal tiers for DNATted traffic) and `cali-fh-` (pre-DNAT tiers);
    /// raw `cali-th-`/`cali-fh-` (untracked tiers).
    pub fn host_endpoint_chains(&self, iface: &str, ep: &HostEndpoint) -> Vec<(TableName, Chain)> {
        let allow = self.cfg.filter_allow_action.clone();
        let none: &[String] = &[];
        let mk = |pfx: &'static str,
                  tiers: &[felix_proto::TierInfo],
                  profiles: &[String],
                  dir: Dir,
                  kind: ChainKind,
                  failsafe: Option<&'static str>,
                  allow_action: Action| {
            endpoint_chain(
                &self.cfg,
                &EndpointChainSpec {
                    name: iface,
                    endpoint_pfx: pfx,
                    tiers,
                    profiles,
                    dir,
                    kind,
                    failsafe,
                    admin_up: true,
                    allow_action,
                    deny_encap: false,
                },
            )
        };
        let fs_in = Some(CHAIN_FAILSAFE_IN);
        let fs_out = Some(CHAIN_FAILSAFE_OUT);
        let p = &ep.profile_ids;
        let v = vec![
            (
                TableName::Filter,
                mk(
                    HOST_TO_ENDPOINT_PFX,
                    &ep.tiers,
                    p,
                    Dir::Egress,
                    ChainKind::Normal,
                    fs_out,
                    allow.clone(),
                ),
            ),
            (
                TableName::Filter,
                mk(
                    HOST_FROM_ENDPOINT_PFX,
                    &ep.tiers,
                    p,
                    Dir::Ingress,
                    ChainKind::Normal,
                    fs_in,
                    allow.clone(),
                ),
            ),
            (
                TableName::Filter,
                mk(
                    HOST_TO_ENDPOINT_FORWARD_PFX,
                    &ep.forward_tiers,
                    p,
                    Dir::Egress,
                    ChainKind::Forward,
                    None,
                    allow.clone(),
                ),
            ),
            (
                TableName::Filter,
                mk(
                    HOST_FROM_ENDPOINT_FORWARD_PFX,
                    &ep.forward_tiers,
                    p,
                    Dir::Ingress,
                    ChainKind::Forward,
                    None,
                    allow,
                ),
            ),
            (
                TableName::Mangle,
                mk(
                    HOST_TO_ENDPOINT_PFX,
                    &ep.tiers,
                    p,
                    Dir::Egress,
                    ChainKind::Normal,
                    fs_out,
                    Action::Return,
                ),
            ),
            (
                TableName::Mangle,
                mk(
                    HOST_FROM_ENDPOINT_PFX,
                    &ep.pre_dnat_tiers,
                    none,
                    Dir::Ingress,
                    ChainKind::PreDnat,
                    fs_in,
                    self.cfg.mangle_allow_action.clone(),
                ),
            ),
            (
                TableName::Raw,
                mk(
                    HOST_TO_ENDPOINT_PFX,
                    &ep.untracked_tiers,
                    none,
                    Dir::Egress,
                    ChainKind::Untracked,
                    fs_out,
                    Action::Accept,
                ),
            ),
            (
                TableName::Raw,
                mk(
                    HOST_FROM_ENDPOINT_PFX,
                    &ep.untracked_tiers,
                    none,
                    Dir::Ingress,
                    ChainKind::Untracked,
                    fs_in,
                    Action::Accept,
                ),
            ),
        ];
        self.layer_tagged(v)
    }

    /// Names of a host endpoint's chains with their tables (for removal).
    pub fn host_endpoint_chain_names(&self, iface: &str) -> Vec<(TableName, String)> {
        let max = self.cfg.max_chain_name_len();
        let mut v = Vec::new();
        for (t, pfxs) in [
            (
                TableName::Filter,
                &[
                    HOST_TO_ENDPOINT_PFX,
                    HOST_FROM_ENDPOINT_PFX,
                    HOST_TO_ENDPOINT_FORWARD_PFX,
                    HOST_FROM_ENDPOINT_FORWARD_PFX,
                ][..],
            ),
            (
                TableName::Mangle,
                &[HOST_TO_ENDPOINT_PFX, HOST_FROM_ENDPOINT_PFX][..],
            ),
            (
                TableName::Raw,
                &[HOST_TO_ENDPOINT_PFX, HOST_FROM_ENDPOINT_PFX][..],
            ),
        ] {
            for p in pfxs {
                v.push((t, self.chain_name(t, &endpoint_chain_name(p, iface, max))));
            }
        }
        v
    }

    /// Workload dispatch chains (filter): a shallow prefix tree over the
    /// interface names that ends in the deny action, so an unknown `cali*`
    /// interface passes nothing (fail closed).
    pub fn workload_dispatch_chains(&self, workload_ifaces: &[String]) -> Vec<Chain> {
        let dc = DispatchConfig {
            wildcard: "+".into(),
            deny_action: self.cfg.filter_deny_action.clone(),
            max_name_len: self.cfg.max_chain_name_len(),
        };
        self.layer(
            TableName::Filter,
            workload_dispatch_chains(workload_ifaces, &dc).all(),
        )
    }

    /// Host-endpoint dispatch chains with their tables (filter, mangle,
    /// raw). Interfaces without a host endpoint fall through.
    pub fn host_dispatch_chains(&self, host_ifaces: &[String]) -> Vec<(TableName, Chain)> {
        self.layer_tagged(host_dispatch_chains(&self.cfg, host_ifaces))
    }

    /// All dispatch chains with their tables: the workload tree (filter)
    /// and the host-endpoint trees.
    pub fn dispatch_chains(
        &self,
        workload_ifaces: &[String],
        host_ifaces: &[String],
    ) -> Vec<(TableName, Chain)> {
        let mut v: Vec<(TableName, Chain)> = self
            .workload_dispatch_chains(workload_ifaces)
            .into_iter()
            .map(|c| (TableName::Filter, c))
            .collect();
        v.extend(self.host_dispatch_chains(host_ifaces));
        v
    }

    /// `cali-nat-outgoing` (nat table): masquerade (or SNAT to
    /// `NATOutgoingAddress`) traffic from the `masq_pool_set` sources to
    /// destinations outside `all_pools_set` (and outside `all_hosts_set`
    /// when given: `NATOutgoingExclusions=IPPoolsAndHostIPs`). With no
    /// natOutgoing pools the masquerade set is empty and the rule matches
    /// nothing.
    pub fn masquerade_chains(
        &self,
        masq_pool_set: &str,
        all_pools_set: &str,
        all_hosts_set: Option<&str>,
    ) -> Vec<Chain> {
        self.layer(
            TableName::Nat,
            vec![nat_outgoing_chain(
                &self.cfg,
                masq_pool_set,
                all_pools_set,
                all_hosts_set,
            )],
        )
    }

    /// `cali-fip-dnat` / `cali-fip-snat` (nat table) from the local
    /// workloads' `(external, internal)` floating-IP pairs; pairs of the
    /// other IP family are ignored.
    pub fn floating_ip_chains(&self, pairs: &[(IpAddr, IpAddr)]) -> Vec<Chain> {
        let v6 = self.cfg.ip_version == crate::dataplane::IpVersion::V6;
        let mine: Vec<(IpAddr, IpAddr)> = pairs
            .iter()
            .copied()
            .filter(|(e, i)| e.is_ipv6() == v6 && i.is_ipv6() == v6)
            .collect();
        self.layer(TableName::Nat, floating_ip_chains(&mine))
    }

    /// `cali-rpf-skip` (raw table): per workload interface, the source
    /// prefixes exempt from the anti-spoofing check.
    pub fn rpf_skip_chain(&self, allowed: &[(String, Vec<IpNet>)]) -> Chain {
        let c = rpf_skip_chain(&self.cfg, allowed);
        if self.nft() {
            nft_layer_chain(TableName::Raw, c)
        } else {
            c
        }
    }
}
