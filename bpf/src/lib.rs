//! felix-rs's eBPF dataplane foundation (issue 21, part 1): the TC programs (`progs/*.c`,
//! compiled by `build.rs`), their loader and attacher, and typed handles of the pinned maps.
//!
//! * [`layout`]: jump-map slots, the `skb->cb` convention, the preamble's globals, the
//!   `cali_iface` value (the contract with the C side).
//! * [`ops`]: the one seam all BPF syscalls go through ([`BpfOps`]), and [`BpfError`].
//! * [`maps`]: map specs (versioned `cali_*` names), pinned map handles, the slot allocator,
//!   bpffs mount and old-version removal.
//! * [`attach`]: `BPFAttachType`, kernel probes, mechanism selection.
//! * [`conntrack`]: the `cali_ct` map, its layouts, expiry scan and timeouts.
//! * [`drops`]: drop reports of the policy interpreter (ring buffer, switch, rate limit).
//! * [`identity`]: the layout identity pinned beside the jump maps, and the checks that let a
//!   restart adopt an earlier run's programs instead of loading them again.
//! * [`migrate`]: copy-on-upgrade (and resize) of a pinned map that must keep its contents.
//! * [`policy`]: the policy interpreter's records (`progs/pol_rules.c`) and their assembler.
//! * [`polmaps`]: the interpreter's pinned maps (rule records, policy index, endpoint lists,
//!   IP sets) and its loader.
//! * [`dataplane`]: [`BpfDataplane`], which loads and attaches (see its module doc for the
//!   design and the pin layout).
//!
//! All `unsafe` of felix's BPF support is in this crate.

pub mod attach;
pub mod conntrack;
pub mod dataplane;
pub mod drops;
pub mod identity;
pub mod layout;
pub mod maps;
pub mod migrate;
pub mod ops;
pub mod policy;
pub mod polmaps;
pub mod routes;

pub use attach::{BpfAttachType, DeviceKind, FeatureProbe, KernelProbe, KernelSupport, Mechanism};
pub use dataplane::{
    teardown, AttachOutcome, AttachPoint, BpfDataplane, EndpointKind, HookRecord, Options,
    PolicyKind, Preamble, SkbCtx, Teardown, TestRun,
};
pub use layout::{Hook, IfaceState, TcGlobals};
pub use ops::{BpfError, BpfOps};
pub use polmaps::{PolicyMaps, PolicyProgram};
