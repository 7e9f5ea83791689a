//! Dataplane managers and the driver adapters they feed.
//!
//! A manager (`felix_actors::Manager<Payload>`) records calc-graph messages
//! in `on_update` (no kernel access), and in its programming pass writes the
//! desired state of what it owns into driver inputs ([`crate::dataplane::desired`]):
//!
//! | manager | owns |
//! |---|---|
//! | `manager/static-v4/-v6` | static chains and kernel-chain inserts of all tables |
//! | `manager/ipsets-v4/-v6` | the calc graph's IP sets |
//! | `manager/policy-v4/-v6` | policy and profile chains |
//! | `manager/endpoints-v4/-v6` | endpoint and dispatch chains, routes to local workloads, workload interface settings |
//! | `manager/masq-v4/-v6` | NAT-outgoing sets and chain |
//!
//! The driver actors that read those inputs sit with the drivers they wrap
//! (see `crate::dataplane`); `crate::dataplane::wiring` registers the set for
//! the mode.

mod chains;
mod cluster_routes;
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
pub use cluster_routes::{
    kernel_has_ipip, ClusterRouteSettings, ClusterRoutesManager, CLUSTER_ROUTE_PROTO,
};
pub use endpoints::{resolve_host_endpoints, EndpointManager, EndpointOutputs};
pub use ipsets::{set_type_of, IpSetsManager};
pub use masq::{MasqManager, IPSET_ID_ALL_HOSTS, IPSET_ID_ALL_POOLS, IPSET_ID_MASQ_POOLS};
pub use policy::PolicyManager;
pub use render::{ChainSource, RendererSource};
pub use static_chains::StaticManager;
pub use targets::{SetInputs, TableInputs};

/// The message type the dataplane supervisor carries.
pub type Payload = felix_proto::to_dataplane::Payload;
