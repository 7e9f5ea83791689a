//! Functional verification for felix-rs.
//!
//! [`calcfv`] is the calculation-graph FV framework: tests are sequences of
//! datastore states, each with the dataplane view expected after it; every
//! sequence is also run through the expanders and flush strategies, and
//! every emitted message stream is checked against the flush-order
//! contract by [`felix::calc::view::DataplaneView`].

pub mod calcfv;
