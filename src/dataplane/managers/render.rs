//! What the managers need from rule rendering, as a narrow trait
//! ([`ChainSource`]) implemented by the real renderer ([`RendererSource`],
//! over `rules::Renderer`). Managers depend only on the trait, so their
//! tests can use a small fake and they are insulated from the renderer's
//! internals.

use felix_proto::{HostEndpoint, Policy, PolicyId, Profile, ProfileId, WorkloadEndpoint};
use ipnet::IpNet;

use crate::dataplane::generictables::{Chain, Rule};
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::rules::{Renderer, TableName, POLICY_OUTBOUND_PFX, PROFILE_OUTBOUND_PFX};

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
    /// The NAT-outgoing chains (nat table), given kernel set names;
    /// `all_hosts_set`: also exclude destinations in that set (node IPs).
    fn masquerade_chains(
        &self,
        masq_pool_set: &str,
        all_pools_set: &str,
        all_hosts_set: Option<&str>,
    ) -> Vec<Chain>;
    /// `cali-rpf-skip` (raw table): per workload interface, the source
    /// prefixes exempt from the anti-spoofing check.
    fn rpf_skip_chain(&self, allowed: &[(String, Vec<IpNet>)]) -> Chain;
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
    /// A normal policy's outbound chain goes into mangle too (as upstream's): host endpoints'
    /// mangle egress chain (DNATted traffic leaving the host) jumps to it.
    fn policy_chains(&self, id: &PolicyId, policy: &Policy) -> Vec<(TableName, Chain)> {
        let namer = |s: &str| self.sets.name_for_main_ipset(s);
        let table = self.renderer.policy_table(policy);
        let mut out: Vec<(TableName, Chain)> = self
            .renderer
            .policy_chains_in(table, id, policy, &namer)
            .into_iter()
            .map(|c| (table, c))
            .collect();
        if table == TableName::Filter {
            out.extend(
                self.renderer
                    .policy_chains_in(TableName::Mangle, id, policy, &namer)
                    .into_iter()
                    .filter(|c| {
                        c.name.starts_with(
                            &self
                                .renderer
                                .chain_name(TableName::Mangle, POLICY_OUTBOUND_PFX),
                        )
                    })
                    .map(|c| (TableName::Mangle, c)),
            );
        }
        out
    }
    /// A profile's outbound chain goes into mangle too, for the same reason.
    fn profile_chains(&self, id: &ProfileId, profile: &Profile) -> Vec<(TableName, Chain)> {
        let namer = |s: &str| self.sets.name_for_main_ipset(s);
        let mut out: Vec<(TableName, Chain)> = self
            .renderer
            .profile_chains(id, profile, &namer)
            .into_iter()
            .map(|c| (TableName::Filter, c))
            .collect();
        out.extend(
            self.renderer
                .profile_chains_in(TableName::Mangle, id, profile, &namer)
                .into_iter()
                .filter(|c| {
                    c.name.starts_with(
                        &self
                            .renderer
                            .chain_name(TableName::Mangle, PROFILE_OUTBOUND_PFX),
                    )
                })
                .map(|c| (TableName::Mangle, c)),
        );
        out
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
    fn masquerade_chains(
        &self,
        masq_pool_set: &str,
        all_pools_set: &str,
        all_hosts_set: Option<&str>,
    ) -> Vec<Chain> {
        self.renderer
            .masquerade_chains(masq_pool_set, all_pools_set, all_hosts_set)
    }
    fn rpf_skip_chain(&self, allowed: &[(String, Vec<IpNet>)]) -> Chain {
        self.renderer.rpf_skip_chain(allowed)
    }
    fn ipset_name(&self, set_id: &str) -> String {
        self.sets.name_for_main_ipset(set_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::rules::{Backend, RenderConfig};
    use crate::dataplane::IpVersion;

    fn source(backend: Backend) -> RendererSource {
        RendererSource::new(Renderer::new(RenderConfig::defaults(
            IpVersion::V4,
            backend,
        )))
    }

    /// Invariant: the outbound chains of normal policies and of profiles are in mangle too,
    /// under mangle's names, because a host endpoint's mangle egress chain jumps to them
    /// (a missing one fails the whole mangle table's write).
    #[test]
    fn normal_policy_and_profile_outbound_chains_are_also_in_mangle() {
        for backend in [Backend::Iptables, Backend::Nftables] {
            let s = source(backend);
            let id = PolicyId {
                name: "p".into(),
                ..PolicyId::default()
            };
            let placed = |v: Vec<(TableName, Chain)>| -> Vec<(TableName, String)> {
                v.into_iter().map(|(t, c)| (t, c.name)).collect()
            };
            let pol = placed(s.policy_chains(&id, &Policy::default()));
            let mangle_po = s.renderer.policy_chain_names(TableName::Mangle, &id)[1].clone();
            assert!(
                pol.contains(&(TableName::Mangle, mangle_po)),
                "{backend:?}: {pol:?}"
            );
            assert!(
                !pol.iter()
                    .any(|(t, n)| *t == TableName::Mangle && n.contains("cali-pi-")),
                "{backend:?}: inbound stays in filter: {pol:?}"
            );
            let pre_dnat = Policy {
                pre_dnat: true,
                ..Policy::default()
            };
            assert!(
                s.policy_chains(&id, &pre_dnat)
                    .iter()
                    .all(|(t, _)| *t == TableName::Mangle),
                "a pre-DNAT policy is mangle's only"
            );
            let pro =
                placed(s.profile_chains(&ProfileId { name: "x".into() }, &Profile::default()));
            let filter_pro = pro
                .iter()
                .find(|(t, n)| *t == TableName::Filter && n.contains("cali-pro-"))
                .map(|(_, n)| n.clone())
                .expect("filter outbound profile chain");
            let mangle_pro = s
                .renderer
                .chain_name(TableName::Mangle, filter_pro.trim_start_matches("filter-"));
            assert!(
                pro.contains(&(TableName::Mangle, mangle_pro)),
                "{backend:?}: {pro:?}"
            );
            assert_eq!(
                pro.iter().filter(|(t, _)| *t == TableName::Filter).count(),
                2
            );
        }
    }
}
