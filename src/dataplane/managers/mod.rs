//! Dataplane managers and the driver adapters they feed.
//!
//! A manager (`felix_actors::Manager<Payload>`) records calc-graph messages
//! in `on_update` (no kernel access), and in its programming pass writes the
//! desired state of what it owns into driver inputs ([`desired`]):
//!
//! | manager | owns |
//! |---|---|
//! | `manager/static-v4/-v6` | static chains and kernel-chain inserts of all tables |
//! | `manager/ipsets-v4/-v6` | the calc graph's IP sets |
//! | `manager/policy-v4/-v6` | policy and profile chains |
//! | `manager/endpoints-v4/-v6` | endpoint and dispatch chains, routes to local workloads, workload interface settings |
//! | `manager/masq-v4/-v6` | NAT-outgoing sets and chain |
//!
//! The [`drivers`] adapt the kernel-facing drivers (iptables / nftables
//! tables, `ipset`, routes, interface settings, cleanup of the other
//! backend) to `felix_actors::Driver`; each reads its input, pushes what
//! changed and reconciles, every kernel command going through the actor
//! seam. `crate::dataplane::wiring` registers the set for the mode.

mod chains;
mod desired;
pub mod drivers;
mod endpoints;
mod ipsets;
#[cfg(test)]
mod kernel_tests;
mod masq;
mod policy;
mod render;
mod static_chains;
mod targets;
#[cfg(test)]
mod tests;

pub use chains::{OwnedChains, TablePlan};
pub use desired::{
    IfaceSettings, IfacesDesired, IpSetsDesired, MapDiff, NftDesired, OwnedMap, Pushed,
    RoutesDesired, SetSpec, TableDesired, Versioned,
};
pub use endpoints::{EndpointManager, EndpointOutputs};
pub use ipsets::{set_type_of, IpSetsManager};
pub use masq::{MasqManager, IPSET_ID_ALL_POOLS, IPSET_ID_MASQ_POOLS};
pub use policy::PolicyManager;
pub use render::{ChainSource, RendererSource};
pub use static_chains::StaticManager;
pub use targets::{SetInputs, TableInputs};

/// The message type the dataplane supervisor carries.
pub type Payload = felix_proto::to_dataplane::Payload;
