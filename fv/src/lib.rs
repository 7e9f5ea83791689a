//! Functional verification for felix-rs.
//!
//! [`calcfv`] is the calculation-graph FV framework: tests are sequences of
//! datastore states, each with the dataplane view expected after it; every
//! sequence is also run through the expanders and flush strategies, and
//! every emitted message stream is checked against the flush-order
//! contract by [`felix::calc::view::DataplaneView`].
//!
//! [`netfv`] is the dataplane FV harness: `felix run` in network namespaces
//! with real traffic between CNI-wired workloads, for both backends.

#![forbid(unsafe_code)]

pub mod calcfv;
pub mod netfv;
