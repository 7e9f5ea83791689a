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
mod markbits;
mod names;
mod renderer;

pub use config::{
    Backend, EndpointToHostAction, FailsafePort, RenderConfig, RenderError, TableName,
};
pub use dispatch::{
    interface_dispatch_chains, workload_dispatch_chains, DispatchChains, DispatchConfig,
    EndpointDirection,
};
pub use markbits::{MarkBitsError, MarkBitsManager};
pub use names::*;
pub use renderer::{IpSetNamer, Renderer};
#[cfg(test)]
mod kernel_tests;
