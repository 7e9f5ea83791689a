//! `manager/static-v4` / `-v6`: owns the static chains of all four tables
//! (top-level `cali-*` chains, failsafe chains, workload-to-host chain, ...)
//! and our rules inserted at the top of the kernel chains.
//!
//! Placeholder chains the renderer includes for other owners are written
//! only while nobody else holds them.
//!
//! It takes no messages: it is dirty once, at construction, and writes its
//! whole share then (which also makes every restart a full rewrite). It is
//! registered first, so the static chains — including the fail-closed
//! drops — are in the first programming pass before anything else.

use std::sync::Arc;

use felix_actors::{ApplyCtx, ApplyError, Manager};

use crate::dataplane::generictables::Chain;
use crate::dataplane::rules::TableName;

use super::render::ChainSource;
use super::targets::TableInputs;
use super::Payload;

/// See the module docs.
pub struct StaticManager {
    name: String,
    source: Arc<dyn ChainSource>,
    tables: TableInputs,
    dirty: bool,
}

impl StaticManager {
    /// A manager writing as `name` into `tables`.
    pub fn new(name: &str, source: Arc<dyn ChainSource>, tables: TableInputs) -> Self {
        StaticManager {
            name: name.to_string(),
            source,
            tables,
            dirty: true,
        }
    }
}

impl Manager<Payload> for StaticManager {
    fn on_update(&mut self, _msg: &Payload) {}

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if !self.dirty && !ctx.full_rewrite() {
            return Ok(());
        }
        for t in TableName::ALL {
            let chains = self.source.static_chains(t);
            let inserts = self.source.static_insert_rules(t);
            let owner = self.name.as_str();
            self.tables.write(ctx, t, |d| {
                // The static set includes empty placeholders for chains other
                // managers own (e.g. `cali-nat-outgoing`); once another
                // manager holds one, leave it to that manager.
                let mine: Vec<(String, Chain)> = chains
                    .into_iter()
                    .filter(|c| d.chains.owner_of(&c.name).is_none_or(|o| o == owner))
                    .map(|c| (c.name.clone(), c))
                    .collect();
                d.chains.replace_owned(owner, mine);
                d.inserts.replace_owned(owner, inserts);
            });
        }
        self.dirty = false;
        Ok(())
    }
}
