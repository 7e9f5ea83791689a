//! The iptables driver: one [`IptablesTable`] per (table, IP version),
//! programming through `iptables-restore --noflush` and reading back with
//! `iptables-save -t <table>`, with nft/legacy backend selection.

/// The command operations of `driver/iptables-<table>-vN` (its fault targets).
pub const OPS: &[&str] = &[
    "iptables-restore",
    "iptables-restore-check",
    "iptables-save",
];

mod actor;
mod backend;
mod render;
mod save_parse;
mod table;
#[cfg(test)]
mod tests;

pub use actor::{BackendChoice, IptablesDriver};
pub use backend::{
    backend_binaries_present, detect_backend, find_best_binary, legacy_modules_loaded,
    IptablesBackend, ResolvedBackend,
};
pub use render::{render_action, render_match_criteria, render_rule, IptablesRenderer};
pub use save_parse::{parse_save, SavedRule, SavedTable};
pub use table::{
    whole_table_cache, ChainInsertMode, IptablesMode, IptablesOptions, IptablesTable,
    WHOLE_TABLE_CACHE_MIN_COMMANDS,
};
