//! Table driver adapters: [`IptablesDriver`] (one iptables table of one IP
//! version) and [`NftablesDriver`] (our nftables table of one family, all
//! four layers plus the native IP sets).
//!
//! nftables layering: our table holds the chains of all four logical tables,
//! so a chain `cali-FORWARD` of layer `filter` is named `filter-cali-FORWARD`
//! (jump and goto targets are renamed the same way) and rules inserted into
//! kernel chain `FORWARD` of layer `filter` go to our base chain
//! `filter-FORWARD`.

use std::sync::{Arc, OnceLock};

use felix_actors::{ActorSeam, Driver, DriverError};

use crate::dataplane::generictables::{Action, Chain, IpVersion, Rule, Table};
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::iptables::{
    detect_backend, IptablesBackend, IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
};
use crate::dataplane::kernel::Commands;
use crate::dataplane::nftables::{base_chain, NftablesMode, NftablesOptions, NftablesTable};
use crate::dataplane::rules::TableName;

use super::super::desired::{NftDesired, Pushed, TableDesired};

/// The iptables backend, detected once (by the first table driver to apply,
/// through its seam) and shared by every table and cleanup driver, so that
/// programming one table cannot flip the detection for the next.
#[derive(Debug, Clone)]
pub struct BackendChoice {
    configured: IptablesBackend,
    resolved: Arc<OnceLock<ResolvedBackend>>,
}

impl BackendChoice {
    /// Detection honouring the configured backend.
    pub fn new(configured: IptablesBackend) -> Self {
        BackendChoice {
            configured,
            resolved: Arc::new(OnceLock::new()),
        }
    }

    /// The backend, detecting it with `cmds` on first use.
    pub fn resolve(&self, cmds: &Commands) -> ResolvedBackend {
        *self
            .resolved
            .get_or_init(|| detect_backend(cmds, self.configured))
    }

    /// The backend if already detected.
    pub fn get(&self) -> Option<ResolvedBackend> {
        self.resolved.get().copied()
    }
}

/// Reports the chains `table` programs as drop-everything because the
/// kernel refused them (`/status`, `felix_dataplane_rejected_chains`).
fn report_rejected(table: &dyn Table, seam: &ActorSeam) {
    seam.report_rejected_chains(
        table
            .rejected_chains()
            .into_iter()
            .map(|r| felix_actors::RejectedChain {
                chain: r.chain,
                kernel_error: r.message,
            })
            .collect(),
    );
}

/// Pushes what changed in `desired` into `table`.
fn push_table(
    desired: &TableDesired,
    chains: &mut Pushed<String>,
    inserts: &mut Pushed<String>,
    table: &mut dyn Table,
    rename: &dyn Fn(&Chain) -> Chain,
    insert_target: &dyn Fn(&str) -> Option<String>,
    rename_rules: &dyn Fn(&[Rule]) -> Vec<Rule>,
) {
    let d = chains.diff(&desired.chains);
    for name in d.removed {
        table.remove_chain(&rename(&Chain::new(&name, Vec::new())).name);
    }
    for (_, c) in d.changed {
        table.set_chain(rename(c));
    }
    chains.mark_pushed(&desired.chains);
    let d = inserts.diff(&desired.inserts);
    for kc in d.removed {
        if let Some(t) = insert_target(&kc) {
            table.set_insert_rules(&t, Vec::new());
        }
    }
    for (kc, rules) in d.changed {
        match insert_target(kc) {
            Some(t) => table.set_insert_rules(&t, rename_rules(rules)),
            None => tracing::warn!(chain = %kc, "no base chain for inserted rules; skipped"),
        }
    }
    inserts.mark_pushed(&desired.inserts);
}

/// `driver/iptables-<table>-v4/-v6`: one iptables table.
pub struct IptablesDriver {
    table: TableName,
    ipv: IpVersion,
    cmds: Commands,
    backend: BackendChoice,
    opts: IptablesOptions,
    inner: Option<IptablesTable>,
    chains: Pushed<String>,
    inserts: Pushed<String>,
}

impl IptablesDriver {
    /// An adapter running its commands on `cmds`; the table is built (and the backend
    /// detected) at the first apply.
    pub fn new(
        table: TableName,
        ipv: IpVersion,
        cmds: Commands,
        backend: BackendChoice,
        opts: IptablesOptions,
    ) -> Self {
        IptablesDriver {
            table,
            ipv,
            cmds,
            backend,
            opts,
            inner: None,
            chains: Pushed::default(),
            inserts: Pushed::default(),
        }
    }
}

impl Driver for IptablesDriver {
    type Desired = TableDesired;

    fn apply(&mut self, desired: &TableDesired) -> Result<(), DriverError> {
        let table = match &mut self.inner {
            Some(t) => t,
            None => {
                let backend = self.backend.resolve(&self.cmds);
                self.inner.insert(IptablesTable::new(
                    self.table.as_str(),
                    self.ipv,
                    backend,
                    IptablesMode::Program,
                    self.cmds.clone(),
                    self.opts.clone(),
                ))
            }
        };
        push_table(
            desired,
            &mut self.chains,
            &mut self.inserts,
            table,
            &|c| c.clone(),
            &|kc| Some(kc.to_string()),
            &|r| r.to_vec(),
        );
        let r = table.apply();
        report_rejected(&*table, self.cmds.seam());
        r?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        if let Some(t) = &mut self.inner {
            t.queue_resync();
        }
    }

    fn is_dirty(&self) -> bool {
        self.inner.as_ref().is_none_or(|t| t.is_dirty())
    }
}

/// `name` in `layer`'s namespace. The renderer already layers names for
/// the nftables backend; names that carry the prefix are left alone, so
/// layering here is idempotent and also covers unlayered input.
fn layered(layer: &str, name: &str) -> String {
    if name.starts_with(layer) && name[layer.len()..].starts_with('-') {
        name.to_string()
    } else {
        format!("{layer}-{name}")
    }
}

fn rename_rules(layer: &str, rules: &[Rule]) -> Vec<Rule> {
    rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.action = match r.action {
                Action::Jump(t) => Action::Jump(layered(layer, &t)),
                Action::Goto(t) => Action::Goto(layered(layer, &t)),
                a => a,
            };
            r
        })
        .collect()
}

/// `driver/nftables-v4/-v6`: our nftables table with all layers and sets.
pub struct NftablesDriver {
    seam: ActorSeam,
    table: NftablesTable,
    sets_cfg: IpVersionConfig,
    chains: std::collections::BTreeMap<String, Pushed<String>>,
    inserts: std::collections::BTreeMap<String, Pushed<String>>,
    sets: Pushed<String>,
}

impl NftablesDriver {
    /// An adapter running its commands on `cmds`.
    pub fn new(ipv: IpVersion, cmds: Commands, opts: NftablesOptions) -> Self {
        NftablesDriver {
            seam: cmds.seam().clone(),
            table: NftablesTable::new(ipv, NftablesMode::Program, cmds, opts),
            sets_cfg: IpVersionConfig::new(ipv),
            chains: Default::default(),
            inserts: Default::default(),
            sets: Pushed::default(),
        }
    }
}

impl Driver for NftablesDriver {
    type Desired = NftDesired;

    fn apply(&mut self, desired: &NftDesired) -> Result<(), DriverError> {
        // Sets first: the transaction declares them before the rules that
        // reference them.
        let d = self.sets.diff(&desired.sets);
        for id in d.removed {
            self.table
                .remove_ip_set(&self.sets_cfg.name_for_main_ipset(&id));
        }
        for (id, spec) in d.changed {
            self.table.set_ip_set(
                &self.sets_cfg.name_for_main_ipset(id),
                spec.set_type.nft_kind(),
                spec.members.iter().cloned(),
            );
        }
        self.sets.mark_pushed(&desired.sets);
        let empty = TableDesired::default();
        let layers: std::collections::BTreeSet<String> = desired
            .tables
            .keys()
            .chain(self.chains.keys())
            .cloned()
            .collect();
        for layer in layers {
            let d = desired.tables.get(&layer).unwrap_or(&empty);
            let chains = self.chains.entry(layer.clone()).or_default();
            let inserts = self.inserts.entry(layer.clone()).or_default();
            let l = layer.as_str();
            push_table(
                d,
                chains,
                inserts,
                &mut self.table,
                &|c| Chain::new(&layered(l, &c.name), rename_rules(l, &c.rules)),
                &|kc| {
                    let name = layered(l, kc);
                    base_chain(&name).map(|b| b.name.to_string())
                },
                &|r| rename_rules(l, r),
            );
        }
        let r = self.table.apply();
        report_rejected(&self.table, &self.seam);
        r?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        self.table.queue_resync();
    }

    fn is_dirty(&self) -> bool {
        self.table.is_dirty()
    }
}
