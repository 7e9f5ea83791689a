//! nftables name layering. The nftables dataplane keeps every logical table
//! (filter, nat, mangle, raw) in one nft table, so chain names are prefixed
//! with the logical table (`filter-cali-INPUT`), as upstream's table layer
//! does, and so are jump/goto targets. Kernel hook chains become the base
//! chains of our table (`INPUT` in filter becomes `filter-INPUT`).

use crate::dataplane::generictables::{Action, Chain, Rule};

use super::config::TableName;

/// `name` in `table`'s namespace (names already carrying the prefix are
/// left alone).
pub fn nft_name(table: TableName, name: &str) -> String {
    let t = table.as_str();
    if name.starts_with(t) {
        name.to_string()
    } else {
        format!("{t}-{name}")
    }
}

fn layer_rule(table: TableName, mut r: Rule) -> Rule {
    r.action = match r.action {
        Action::Jump(t) => Action::Jump(nft_name(table, &t)),
        Action::Goto(t) => Action::Goto(nft_name(table, &t)),
        a => a,
    };
    r
}

/// A chain moved into `table`'s namespace.
pub fn nft_layer_chain(table: TableName, chain: Chain) -> Chain {
    Chain {
        name: nft_name(table, &chain.name),
        rules: chain
            .rules
            .into_iter()
            .map(|r| layer_rule(table, r))
            .collect(),
    }
}

/// Rules for a kernel chain moved into `table`'s namespace.
pub fn nft_layer_rules(table: TableName, rules: Vec<Rule>) -> Vec<Rule> {
    rules.into_iter().map(|r| layer_rule(table, r)).collect()
}
