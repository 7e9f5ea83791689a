//! The external dataplane driver protocol (`UseInternalDataplaneDriver=false`): felix and a
//! driver process exchange `felixbackend.proto` messages over two pipes, as upstream drives
//! its VPP dataplane. [`frame`] is the wire format both sides share.

pub mod frame;
