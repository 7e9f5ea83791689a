//! Bookkeeping shared by the chain-writing managers: which chains each
//! object (policy, endpoint, ...) was rendered to, so that a changed or
//! removed object's stale chains are removed, and batching of a pass's
//! chain writes into one input write per table.

use std::collections::{BTreeMap, BTreeSet};

use felix_actors::ApplyCtx;

use crate::dataplane::generictables::Chain;
use crate::dataplane::rules::TableName;

use super::targets::TableInputs;

/// Chain writes and removals of one programming pass, per table.
#[derive(Debug, Default)]
pub struct TablePlan {
    sets: BTreeMap<TableName, Vec<Chain>>,
    removes: BTreeMap<TableName, BTreeSet<String>>,
}

impl TablePlan {
    /// Queues a chain write.
    pub fn set(&mut self, table: TableName, chain: Chain) {
        if let Some(r) = self.removes.get_mut(&table) {
            r.remove(&chain.name);
        }
        self.sets.entry(table).or_default().push(chain);
    }

    /// Queues a chain removal (ignored if the same pass writes the chain).
    pub fn remove(&mut self, table: TableName, name: String) {
        let written = self
            .sets
            .get(&table)
            .is_some_and(|v| v.iter().any(|c| c.name == name));
        if !written {
            self.removes.entry(table).or_default().insert(name);
        }
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty() && self.removes.is_empty()
    }

    /// Writes everything queued: one input write per touched table.
    pub fn flush(self, tables: &TableInputs, ctx: &mut ApplyCtx, owner: &str) {
        let touched: BTreeSet<TableName> = self
            .sets
            .keys()
            .chain(self.removes.keys())
            .copied()
            .collect();
        let TablePlan {
            mut sets,
            mut removes,
        } = self;
        for t in touched {
            let chains = sets.remove(&t).unwrap_or_default();
            let gone = removes.remove(&t).unwrap_or_default();
            tables.write(ctx, t, |d| {
                for name in gone {
                    d.chains.remove(&name);
                }
                for c in chains {
                    d.chains.set(owner, c.name.clone(), c);
                }
            });
        }
    }
}

/// For each object key, the `(table, chain)` names it was last rendered to.
#[derive(Debug)]
pub struct OwnedChains<K: Ord> {
    programmed: BTreeMap<K, BTreeSet<(TableName, String)>>,
}

impl<K: Ord> Default for OwnedChains<K> {
    fn default() -> Self {
        OwnedChains {
            programmed: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> OwnedChains<K> {
    /// Records that `key` now renders to `chains` (`None`: the object is
    /// gone) and queues the writes plus the removal of its stale chains.
    pub fn update(
        &mut self,
        plan: &mut TablePlan,
        key: &K,
        chains: Option<Vec<(TableName, Chain)>>,
    ) {
        let old = self.programmed.remove(key).unwrap_or_default();
        let Some(chains) = chains else {
            for (t, n) in old {
                plan.remove(t, n);
            }
            return;
        };
        let new: BTreeSet<(TableName, String)> =
            chains.iter().map(|(t, c)| (*t, c.name.clone())).collect();
        for (t, n) in old.difference(&new) {
            plan.remove(*t, n.clone());
        }
        for (t, c) in chains {
            plan.set(t, c);
        }
        self.programmed.insert(key.clone(), new);
    }

    /// True if `key` has been rendered.
    pub fn contains(&self, key: &K) -> bool {
        self.programmed.contains_key(key)
    }

    /// Full rewrite: `all` is every object's rendering; each table's share
    /// of `owner` is replaced wholesale (so chains an earlier incarnation
    /// wrote and nobody wants any more go too).
    pub fn rewrite_all(
        &mut self,
        tables: &TableInputs,
        ctx: &mut ApplyCtx,
        owner: &str,
        all: Vec<(K, Vec<(TableName, Chain)>)>,
    ) {
        self.programmed.clear();
        let mut per_table: BTreeMap<TableName, Vec<Chain>> =
            TableName::ALL.iter().map(|t| (*t, Vec::new())).collect();
        for (k, chains) in all {
            let names = chains.iter().map(|(t, c)| (*t, c.name.clone())).collect();
            self.programmed.insert(k, names);
            for (t, c) in chains {
                per_table.entry(t).or_default().push(c);
            }
        }
        for (t, chains) in per_table {
            tables.write(ctx, t, |d| {
                d.chains
                    .replace_owned(owner, chains.into_iter().map(|c| (c.name.clone(), c)));
            });
        }
    }
}
