//! What the managers need from rule rendering, as a narrow trait
//! ([`ChainSource`]) implemented by the real renderer ([`RendererSource`],
//! over `rules::Renderer`). Managers depend only on the trait, so their
//! tests can use a small fake and they are insulated from the renderer's
//! internals.

use felix_proto::{HostEndpoint, Policy, PolicyId, Profile, ProfileId, WorkloadEndpoint};

use crate::dataplane::generictables::{Chain, Rule};
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::rules::{Renderer, TableName};

/// Chains and names the managers program. Pure: no I/O, no state.
pub trait ChainSource: Send + Sync + 'static {
    /// Static chains of a table.
    fn static_chains(&self, table: TableName) -> Vec<Chain>;
    /// Our rules at the top of the table's kernel chains (for a kernel
    /// chain with rules upstream appends, those follow ours at the top).
    fn static_insert_rules(&self, table: TableName) -> Vec<(String, Vec<Rule>)>;
    /// A policy's chains, with the table each belongs in.
    fn policy_chains(&self, id: &PolicyId, policy: &Policy) -> Vec<(TableName, Chain)>;
    /// A profile's chains, with the table each belongs in.
    fn profile_chains(&self, id: &ProfileId, profile: &Profile) -> Vec<(TableName, Chain)>;
    /// A workload endpoint's chains (filter table).
    fn workload_endpoint_chains(&self, iface: &str, ep: &WorkloadEndpoint) -> Vec<Chain>;
    /// A host endpoint's chains, per table.
    fn host_endpoint_chains(&self, iface: &str, ep: &HostEndpoint) -> Vec<(TableName, Chain)>;
    /// Dispatch chains for the local endpoints, per table.
    fn dispatch_chains(
        &self,
        workload_ifaces: &[String],
        host_ifaces: &[String],
    ) -> Vec<(TableName, Chain)>;
    /// The NAT-outgoing chains (nat table), given kernel set names.
    fn masquerade_chains(&self, masq_pool_set: &str, all_pools_set: &str) -> Vec<Chain>;
    /// Kernel name of a calc-graph IP set ID.
    fn ipset_name(&self, set_id: &str) -> String;
}

/// [`ChainSource`] over the real renderer and upstream IP-set naming.
#[derive(Debug, Clone)]
pub struct RendererSource {
    renderer: Renderer,
    sets: IpVersionConfig,
}

impl RendererSource {
    /// A source rendering with `renderer`; set names for its IP version.
    pub fn new(renderer: Renderer) -> Self {
        let sets = IpVersionConfig::new(renderer.config().ip_version);
        RendererSource { renderer, sets }
    }
}

impl ChainSource for RendererSource {
    fn static_chains(&self, table: TableName) -> Vec<Chain> {
        self.renderer.static_chains(table)
    }
    fn static_insert_rules(&self, table: TableName) -> Vec<(String, Vec<Rule>)> {
        // The table drivers only insert at the top; rules upstream appends
        // to a kernel chain go right after our inserts there.
        let mut v = self.renderer.static_insert_rules(table);
        for (kc, rules) in self.renderer.static_append_rules(table) {
            match v.iter_mut().find(|(k, _)| *k == kc) {
                Some((_, existing)) => existing.extend(rules),
                None => v.push((kc, rules)),
            }
        }
        v
    }
    fn policy_chains(&self, id: &PolicyId, policy: &Policy) -> Vec<(TableName, Chain)> {
        let namer = |s: &str| self.sets.name_for_main_ipset(s);
        let table = self.renderer.policy_table(policy);
        self.renderer
            .policy_chains_in(table, id, policy, &namer)
            .into_iter()
            .map(|c| (table, c))
            .collect()
    }
    fn profile_chains(&self, id: &ProfileId, profile: &Profile) -> Vec<(TableName, Chain)> {
        let namer = |s: &str| self.sets.name_for_main_ipset(s);
        self.renderer
            .profile_chains(id, profile, &namer)
            .into_iter()
            .map(|c| (TableName::Filter, c))
            .collect()
    }
    fn workload_endpoint_chains(&self, iface: &str, ep: &WorkloadEndpoint) -> Vec<Chain> {
        self.renderer.workload_endpoint_chains(iface, ep)
    }
    fn host_endpoint_chains(&self, iface: &str, ep: &HostEndpoint) -> Vec<(TableName, Chain)> {
        self.renderer.host_endpoint_chains(iface, ep)
    }
    fn dispatch_chains(
        &self,
        workload_ifaces: &[String],
        host_ifaces: &[String],
    ) -> Vec<(TableName, Chain)> {
        self.renderer.dispatch_chains(workload_ifaces, host_ifaces)
    }
    fn masquerade_chains(&self, masq_pool_set: &str, all_pools_set: &str) -> Vec<Chain> {
        self.renderer
            .masquerade_chains(masq_pool_set, all_pools_set)
    }
    fn ipset_name(&self, set_id: &str) -> String {
        self.sets.name_for_main_ipset(set_id)
    }
}
