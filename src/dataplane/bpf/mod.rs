//! eBPF mode (issue 21, part 1): the daemon side of the `felix-bpf` loader.
//!
//! | file | actor | what it does |
//! |---|---|---|
//! | [`desired`] | — | [`BpfDesired`]: per workload interface, the policy program of each direction and the configured `BPFAttachType` |
//! | [`manager`] | `manager/bpf-endpoints` | [`BpfEndpointManager`]: workload endpoints, active policies and profiles in, [`BpfDesired`] out (no kernel access) |
//! | [`driver`] | `driver/bpf` | [`BpfDriver`]: reconciles [`BpfDesired`] through `felix_bpf::BpfDataplane` (maps, jump maps, preambles, `cali_iface`), mark-and-sweep after in-sync; publishes [`BpfReady`] |
//! | [`ct_scan`] | (in `driver/bpf`) | [`CtScanner`]: the periodic conntrack scan (expiry, flows of removed endpoints) and its metric families |
//! | [`tables`] | `manager/bpf-tables-vN` | [`BpfTablesManager`]: the small `*tables` ruleset BPF mode keeps (dispatch chains that pass the READY workload interfaces and drop every other `cali*` interface) |
//! | [`ready`] | — | [`BpfReady`]: the interfaces `driver/bpf` has programmed (READY), which the accept chains follow |
//! | `readback` | (in `driver/bpf`) | its read-back for `GET /drift`: hooks and `cali_iface` entries against the desired interfaces |
//! | [`cleanup`] | `driver/bpf-cleanup` | [`BpfCleanupDriver`]: in iptables/nftables mode, removes every BPF object an eBPF-mode run left |
//!
//! The part-1 policy is "a simple policy program": a direction of a workload gets the allow
//! program when one of its applicable policies or profiles has an `allow` rule for that
//! direction, the deny program otherwise (the full Calico policy is part 2).

pub mod cleanup;
pub mod ct_scan;
pub mod desired;
pub mod driver;
pub mod ifindex;
pub mod manager;
pub mod policy;
mod readback;
pub mod ready;
pub mod routes;
pub mod tables;

pub use cleanup::BpfCleanupDriver;
pub use ct_scan::CtScanner;
pub use desired::{BpfDesired, IfaceDesired};
pub use driver::{BpfDriver, BpfDriverOptions};
pub use manager::BpfEndpointManager;
pub use ready::BpfReady;
pub use tables::BpfTablesManager;
