//! The Linux dataplane: managers (convert calc-graph messages into desired kernel state),
//! drivers (reconcile desired state with the kernel) and the kernel seams every kernel
//! operation goes through.
//!
//! | folder / file | what it is |
//! |---|---|
//! | [`family`], [`desired`] | the contract between the two sides: the IP family, and the desired-state cells managers write and drivers read |
//! | [`managers`] | `Manager<Payload>` impls: static chains, IP sets, policies, endpoints, masquerade |
//! | [`rules`] | the renderer: proto messages to backend-neutral chains |
//! | [`generictables`] | backend-neutral rules and chains, rule hashing, the `Table` trait, its retry loop and chain quarantine, and the table driver actors' shared push step |
//! | [`iptables`] | `IptablesTable` (iptables-restore/-save) and its actor `IptablesDriver` |
//! | [`nftables`] | `NftablesTable` (our `calico` tables, one `nft -f` per apply) and its actor `NftablesDriver`; the iptables-nft sweeper |
//! | [`ipsets`] | `IpSets` (`ipset restore`) and its actors `IpSetsDriver`, `IpSetCleanupDriver` |
//! | [`iproute`] | routes to local workloads and workload interface settings, through the `ip` and `sysctl` tools, and their actors `RoutesDriver`, `IfacesDriver` |
//! | [`bpf`] | eBPF mode: `BpfEndpointManager`, `BpfTablesManager`, the `BpfDriver` over `felix_bpf`, and `BpfCleanupDriver` (BPF leftovers in the other modes) |
//! | [`cleanup`] | `CleanupDriver`: sweeps the dataplanes we are not programming |
//! | [`ifacemon`] | the interface monitor (rtnetlink link and address events) |
//! | [`kernel`] | command runners behind the seam and the driver's `Commands` handle |
//! | [`wiring`] | one module per dataplane mode over a shared per-family part: which managers and drivers a run registers |
//!
//! Every driver actor (a `felix_actors::Driver`) is built with its `Commands` (its actor seam
//! plus the command runner), diffs its input cell against what it pushed before, pushes only
//! what changed into the kernel-facing driver it wraps, and lets that reconcile minimally; a
//! rebuilt actor has pushed nothing, so it pushes everything and its driver reads the kernel
//! back first.

pub mod bpf;
pub mod cleanup;
pub mod desired;
pub mod drops;
pub mod external;
pub mod family;
pub mod generictables;
pub mod ifacemon;
pub mod iproute;
pub mod ipsets;
pub mod iptables;
pub mod kernel;
pub mod managers;
pub mod metrics;
pub mod netlink;
pub mod nftables;
pub mod rules;
pub mod vxlan;
pub mod wiring;

pub use family::IpVersion;
