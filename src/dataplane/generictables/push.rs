//! The step every table driver actor shares: push what changed in its desired-state cell into
//! its [`Table`], and report the chains the table quarantined.

use felix_actors::ActorSeam;

use crate::dataplane::desired::{Pushed, TableDesired};
use crate::dataplane::generictables::{Chain, Rule, Table};

/// Reports the chains `table` programs as drop-everything because the
/// kernel refused them (`/status`, `felix_dataplane_rejected_chains`).
pub(crate) fn report_rejected(table: &dyn Table, seam: &ActorSeam) {
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
pub(crate) fn push_table(
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
