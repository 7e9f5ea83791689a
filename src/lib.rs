//! felix-rs: Calico's per-node agent rebuilt in Rust.
//!
//! One update's path through the crate, top to bottom:
//!
//! 1. [`datastore`]: a syncer (file or etcd) reads Calico v3 resources.
//! 2. [`resources`]: each resource is parsed, validated and converted into
//!    the internal [`model`]; invalid resources are treated as absent.
//! 3. [`calc`]: the calculation graph turns the update stream into this
//!    node's desired dataplane state as `felixbackend.proto` messages.
//! 4. The dataplane (managers and drivers, run as actors by `felix-actors`)
//!    reconciles the kernel.
//!
//! [`selector`] is the Calico selector language, shared by validation, the
//! calculation graph and the label indexes.

pub mod allocator;
#[cfg(feature = "bench")]
pub mod bench;
pub mod calc;
pub mod cli;
pub mod cputime;
pub mod daemon;
pub mod dataplane;
pub mod datastore;
pub mod explain;
pub mod hash;
pub mod model;
pub mod resources;
pub mod selector;
