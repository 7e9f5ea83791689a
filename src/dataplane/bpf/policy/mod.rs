//! eBPF-mode policy (issue 22): the compiler from the calc graph's policies, profiles,
//! tiers and IP sets to the records of `felix-bpf`'s policy interpreter (`cali_pol_rules`),
//! and the incremental writer that keeps the pinned maps in step.
//!
//! | file | what |
//! |---|---|
//! | [`engine`] | [`BpfPolicyEngine`]: the writer plus the interpreter per (mechanism, direction); what the driver holds |
//! | [`compile`] | proto `Rule` -> interpreter rules per IP version, with the *tables renderer's semantics |
//! | [`writer`] | [`PolicyWriter`]: policy/profile = new records + one index swap; endpoint = new list + one swap; IP sets as member deltas |
//! | [`setid`] | set ids derived from the calc graph's set ID exactly as upstream (`felix/idalloc`) |
//! | [`members`] | IP-set members (address, CIDR, `addr,proto:port`) as LPM keys |
//! | [`alloc`] | free space of the record array |
//! | [`names`] | [`SharedDropNames`]: what eBPF drop reports' handles and record indices mean (written by the writer, read by the drop reader) |
//! | [`sync`] | [`PolicySync`]: `driver/bpf`'s ordered sync of sets, policies, profiles and endpoint lists |
//!
//! The daemon's BPF driver owns one [`BpfPolicyEngine`]: a [`PolicyWriter`] over a
//! [`BpfPolicyStore`] and the interpreter loaded once per (attach mechanism, TC direction)
//! (`felix_bpf::PolicyProgram`), installed into each endpoint's policy slot.

pub mod alloc;
pub mod compile;
pub mod engine;
pub mod members;
pub mod names;
pub mod setid;
pub mod sync;
pub mod writer;

#[cfg(test)]
pub(crate) mod kernel_tests;
#[cfg(test)]
pub(crate) mod reference;
#[cfg(test)]
mod tests;

pub use compile::{compile_one, compile_rules, Compiled, Unrenderable};
pub use engine::BpfPolicyEngine;
pub use names::{Owner, Resolved, SharedDropNames};
pub use setid::SetIdAllocator;
pub use sync::{EndpointRef, PolicySync};
pub use writer::{
    BpfPolicyStore, Existing, PolicyDir, PolicyStore, PolicyWriteError, PolicyWriter,
};
