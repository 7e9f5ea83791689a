//! The external dataplane driver protocol (`UseInternalDataplaneDriver=false`): felix and a
//! driver process exchange `felixbackend.proto` messages over two pipes, as upstream drives
//! its VPP dataplane.
//!
//! * [`frame`]: the wire format both sides share (length-prefixed frames, sequence numbers).
//! * [`child`]: starting a driver with the pipes on its descriptors 3 and 4.
//! * [`endpoint_status`]: the endpoint status a driver reports.
//! * [`reports`]: what a driver reported (`FromDataplane`), for `/status`.
//! * [`proxy`]: one admin socket for felix and its driver.
//! * [`status_files`]: per-endpoint status files, where upstream writes them.
//!
//! The two process topologies are wired in `crate::daemon::external` (felix driving a
//! driver) and `crate::daemon::driver` (`felix dataplane-driver`).

pub mod child;
pub mod endpoint_status;
pub mod frame;
pub mod proxy;
pub mod reports;
pub mod status_files;
