//! `driver/nftables-v4/-v6`: the driver actor over our [`NftablesTable`] of one family (all
//! four layers plus the native IP sets).
//!
//! Layering: our table holds the chains of all four logical tables, so a chain `cali-FORWARD`
//! of layer `filter` is named `filter-cali-FORWARD` (jump and goto targets are renamed the same
//! way) and rules inserted into kernel chain `FORWARD` of layer `filter` go to our base chain
//! `filter-FORWARD`.

use felix_actors::{ActorSeam, Driver, DriverError};

use crate::dataplane::desired::{NftDesired, Pushed, TableDesired};
use crate::dataplane::generictables::push::{push_table, report_rejected, PushedTable};
use crate::dataplane::generictables::{Action, Chain, Rule, Table};
use crate::dataplane::ipsets::IpVersionConfig;
use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

use super::{base_chain, NftablesMode, NftablesOptions, NftablesTable};

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
    /// Per layer, what was pushed of it.
    layers: std::collections::BTreeMap<String, PushedTable>,
    sets: Pushed<String>,
}

impl NftablesDriver {
    /// An adapter running its commands on `cmds`.
    pub fn new(ipv: IpVersion, cmds: Commands, opts: NftablesOptions) -> Self {
        NftablesDriver {
            seam: cmds.seam().clone(),
            table: NftablesTable::new(ipv, NftablesMode::Program, cmds, opts),
            sets_cfg: IpVersionConfig::new(ipv),
            layers: Default::default(),
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
            .chain(self.layers.keys())
            .cloned()
            .collect();
        for layer in layers {
            let d = desired.tables.get(&layer).unwrap_or(&empty);
            let pushed = self.layers.entry(layer.clone()).or_default();
            let l = layer.as_str();
            push_table(
                d,
                pushed,
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
        let size = desired
            .tables
            .values()
            .map(crate::dataplane::metrics::table_size)
            .fold((0, 0), |(c, r), (c2, r2)| (c + c2, r + r2));
        crate::dataplane::metrics::report_table(
            self.seam.shared().metrics(),
            crate::dataplane::metrics::TableFamily::Nftables,
            self.table.ip_version(),
            "calico",
            size,
            r.as_ref().ok(),
        );
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
