//! Rule rendering (first part): chain names as upstream, the mark-bits
//! allocator and the interface-name dispatch chains. Static chains, policy
//! and endpoint chains build on these.

mod dispatch;
mod markbits;
mod names;

pub use dispatch::{
    interface_dispatch_chains, workload_dispatch_chains, DispatchChains, DispatchConfig,
    EndpointDirection,
};
pub use markbits::{MarkBitsError, MarkBitsManager};
pub use names::*;
#[cfg(test)]
mod kernel_tests;
