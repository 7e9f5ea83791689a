//! Rule rendering: converts calc-graph messages (policies, profiles,
//! endpoints) and Felix's configuration into backend-neutral `*tables`
//! chains, as upstream's `felix/rules` does. Chain names, mark-bit layout
//! and rule order follow upstream so that kernel state is recognisable
//! across versions; the drivers render the chains in iptables or nft
//! syntax.
//!
//! Entry points: [`RenderConfig`] (settings, mark bits) and [`Renderer`].

mod config;
mod dispatch;
pub mod drop_prefix;
mod endpoints;
mod layer;
mod markbits;
mod names;
mod policy;
mod renderer;
mod statics;

pub use config::{
    Backend, DropLog, EndpointToHostAction, FailsafePort, RenderConfig, RenderError, TableName,
};
pub use dispatch::{
    interface_dispatch_chains, workload_dispatch_chains, DispatchChains, DispatchConfig,
    EndpointDirection,
};
pub use layer::{nft_layer_chain, nft_layer_rules, nft_name};
pub use markbits::{MarkBitsError, MarkBitsManager};
pub use names::*;
pub use policy::{
    is_staged, kind_short_name, policy_chain_name, policy_id_string, profile_chain_name,
    split_ports,
};
pub use renderer::{IpSetNamer, Renderer};
pub use statics::{CHAIN_FIP_DNAT, CHAIN_FIP_SNAT, CHAIN_LOG_CONN, CHAIN_RPF_SKIP};
#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod render_tests;
#[cfg(test)]
mod rule_load_tests;
