//! `manager/bpf-tables-v4` / `-v6`: the `*tables` rules BPF mode keeps besides the static
//! chains (which `manager/static-vN` writes as in iptables mode).
//!
//! Upstream keeps a small iptables/nftables ruleset in BPF mode so that traffic the programs
//! hand to the host stack from or to an interface they do not (yet) cover is dropped. Here:
//! the workload dispatch chains of the static ruleset (`cali-from-wl-dispatch`,
//! `cali-to-wl-dispatch`, ending in the drop of unknown interfaces) over the local workload
//! interfaces that are READY ([`BpfReady`], published by `driver/bpf`), and for each of those
//! a `cali-fw-`/`cali-tw-` chain that only marks the packet accepted (the BPF programs on the
//! device applied the policy); plus the host-endpoint dispatch chains (empty trees: host
//! endpoint policy, failsafes included, is the BPF programs' on the host interfaces) the
//! static chains jump to. No policy or profile chain exists in BPF mode.
//!
//! Invariant: an interface has an accept chain only while it is both a local workload
//! endpoint here and READY (its programs run on both hooks). A new interface gets it in the
//! programming pass after `driver/bpf` programmed it; a removed endpoint loses it in the pass
//! that removes it; an unknown or not-yet-ready `cali*` interface falls to the drop.

use std::collections::{BTreeMap, BTreeSet};

use felix_actors::{ApplyCtx, ApplyError, Manager};

use super::ready::BpfReady;
use crate::dataplane::generictables::{Action, Chain, MatchCriteria, Rule};
use crate::dataplane::managers::{Payload, TableInputs};
use crate::dataplane::rules::{
    endpoint_chain_name, Renderer, TableName, WORKLOAD_FROM_ENDPOINT_PFX, WORKLOAD_TO_ENDPOINT_PFX,
};

/// See the module docs.
pub struct BpfTablesManager {
    name: String,
    renderer: Renderer,
    tables: TableInputs,
    /// Interface of each local workload endpoint, by endpoint ID.
    workloads: BTreeMap<(String, String, String), String>,
    ready: BpfReady,
    /// The [`BpfReady`] version the chains were last written for.
    ready_seen: Option<u64>,
    dirty: bool,
}

impl BpfTablesManager {
    /// A manager writing as `name` into `tables`, rendering with `renderer`, passing the
    /// interfaces of `ready`.
    pub fn new(name: &str, renderer: Renderer, tables: TableInputs, ready: BpfReady) -> Self {
        Self {
            name: name.to_string(),
            renderer,
            tables,
            workloads: BTreeMap::new(),
            ready,
            ready_seen: None,
            dirty: true,
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::WorkloadEndpointUpdate(_) | Payload::WorkloadEndpointRemove(_)
        )
    }

    /// The chains this manager owns, per table, for the current endpoints that are in
    /// `ready`.
    pub fn chains(&self, ready: &BTreeSet<String>) -> BTreeMap<TableName, Vec<Chain>> {
        let names: Vec<String> = self
            .workloads
            .values()
            .filter(|n| !n.is_empty() && ready.contains(*n))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut out: BTreeMap<TableName, Vec<Chain>> =
            TableName::ALL.iter().map(|t| (*t, Vec::new())).collect();
        for (t, c) in self.renderer.dispatch_chains(&names, &[]) {
            out.entry(t).or_default().push(c);
        }
        let cfg = self.renderer.config();
        let max = cfg.max_chain_name_len();
        let accept = vec![Rule::new(
            MatchCriteria::new(),
            Action::SetMark {
                mark: cfg.mark_accept,
            },
        )
        .comment("BPF mode: the interface's programs applied the policy")];
        let filter = out.entry(TableName::Filter).or_default();
        for n in &names {
            for pfx in [WORKLOAD_FROM_ENDPOINT_PFX, WORKLOAD_TO_ENDPOINT_PFX] {
                filter.push(Chain::new(
                    &endpoint_chain_name(pfx, n, max),
                    accept.clone(),
                ));
            }
        }
        out
    }
}

impl Manager<Payload> for BpfTablesManager {
    fn on_update(&mut self, msg: &Payload) {
        match msg {
            Payload::WorkloadEndpointUpdate(u) => {
                let Some(id) = &u.id else { return };
                let iface = u
                    .endpoint
                    .as_ref()
                    .map(|e| e.name.clone())
                    .unwrap_or_default();
                let key = (
                    id.orchestrator_id.clone(),
                    id.workload_id.clone(),
                    id.endpoint_id.clone(),
                );
                if self.workloads.get(&key) == Some(&iface) {
                    return;
                }
                self.workloads.insert(key, iface);
            }
            Payload::WorkloadEndpointRemove(r) => {
                let Some(id) = &r.id else { return };
                let key = (
                    id.orchestrator_id.clone(),
                    id.workload_id.clone(),
                    id.endpoint_id.clone(),
                );
                if self.workloads.remove(&key).is_none() {
                    return;
                }
            }
            _ => return,
        }
        self.dirty = true;
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        let (version, ready) = self.ready.snapshot();
        if !self.dirty && !ctx.full_rewrite() && self.ready_seen == Some(version) {
            return Ok(());
        }
        let owner = self.name.clone();
        for (t, chains) in self.chains(&ready) {
            self.tables.write(ctx, t, |d| {
                d.chains
                    .replace_owned(&owner, chains.into_iter().map(|c| (c.name.clone(), c)));
            });
        }
        self.dirty = false;
        self.ready_seen = Some(version);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::rules::RenderConfig;
    use crate::dataplane::IpVersion;
    use felix_actors::ApplyCtx;
    use felix_proto::{WorkloadEndpoint, WorkloadEndpointId, WorkloadEndpointUpdate};

    fn renderer(ipv: IpVersion) -> Renderer {
        let (cfg, errs) = felix_config::Config::build(&[]);
        assert!(errs.is_empty(), "{errs:?}");
        Renderer::new(RenderConfig::from_felix_config(&cfg, ipv).expect("render config"))
    }

    fn wep(name: &str, iface: &str) -> Payload {
        Payload::WorkloadEndpointUpdate(WorkloadEndpointUpdate {
            id: Some(WorkloadEndpointId {
                orchestrator_id: "k8s".into(),
                workload_id: name.into(),
                endpoint_id: "eth0".into(),
            }),
            endpoint: Some(WorkloadEndpoint {
                name: iface.into(),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn every_chain_the_kept_ruleset_references_exists_and_unknown_interfaces_drop() {
        for ipv in [IpVersion::V4, IpVersion::V6] {
            let r = renderer(ipv);
            let mut m = BpfTablesManager::new(
                "manager/bpf-tables",
                r.clone(),
                TableInputs::new_iptables(),
                BpfReady::default(),
            );
            m.on_update(&wep("a", "cali1234"));
            m.on_update(&wep("b", "cali5678"));
            let ready = ["cali1234".to_string(), "cali5678".to_string()].into();
            let mine = m.chains(&ready);
            for t in TableName::ALL {
                let mut all: Vec<Chain> = r.static_chains(t);
                all.extend(mine[&t].iter().cloned());
                let defined: BTreeSet<&str> = all.iter().map(|c| c.name.as_str()).collect();
                for c in &all {
                    for target in c.referenced_chains() {
                        assert!(
                            defined.contains(target),
                            "{ipv:?} {t:?}: {} jumps to missing {target}",
                            c.name
                        );
                    }
                }
            }
            let filter = &mine[&TableName::Filter];
            let chain = |n: &str| filter.iter().find(|c| c.name == n).cloned();
            let from = chain("cali-from-wl-dispatch").expect("dispatch");
            let last = from.rules.last().expect("rules");
            assert_eq!(last.action, Action::Drop, "unknown interfaces drop");
            let fw = chain("cali-fw-cali1234").expect("endpoint chain");
            assert!(matches!(fw.rules[0].action, Action::SetMark { .. }));
            assert!(chain("cali-tw-cali5678").is_some());
            assert!(filter.iter().all(|c| !c.name.starts_with("cali-pi-")));
        }
    }

    #[test]
    fn only_ready_interfaces_get_an_accept_chain_and_the_chains_follow_the_ready_set() {
        let ready = BpfReady::default();
        let tables = TableInputs::new_iptables();
        let mut m = BpfTablesManager::new(
            "manager/bpf-tables-v4",
            renderer(IpVersion::V4),
            tables.clone(),
            ready.clone(),
        );
        m.on_update(&wep("a", "cali1234"));
        m.on_update(&wep("b", "cali5678"));
        let accepting = |tables: &TableInputs| -> Vec<String> {
            tables.read(TableName::Filter, |d| {
                d.chains
                    .iter()
                    .map(|(k, _)| k.clone())
                    .filter(|k| k.starts_with("cali-fw-"))
                    .collect()
            })
        };
        let ctx = |n| ApplyCtx::new("manager/bpf-tables-v4", false, n);
        m.complete_deferred_work(&mut ctx(1)).expect("pass");
        assert!(accepting(&tables).is_empty(), "nothing READY yet");
        ready.set(["cali5678".to_string(), "cali-other".to_string()].into());
        m.complete_deferred_work(&mut ctx(2)).expect("pass");
        assert_eq!(accepting(&tables), vec!["cali-fw-cali5678".to_string()]);
        // Nothing changed: no write.
        let mut c = ctx(3);
        m.complete_deferred_work(&mut c).expect("pass");
        assert_eq!(c.writes(), 0);
    }
}
