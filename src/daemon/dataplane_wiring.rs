//! The one place where the dataplane's managers and drivers are registered
//! with the supervisor.
//!
//! [`register`] receives the effective configuration and the dataplane
//! mode and adds every manager (`ManagerSpec`) and driver (`DriverSpec`)
//! that mode needs, in programming-pass order. Actor names follow
//! `docs/architecture.md` (`manager/<name>`, `driver/<name>`).
//!
//! Today nothing is registered: the iptables / nftables managers and their
//! drivers in `crate::dataplane` are still being built. The supervisor runs
//! fine with zero actors (status, in-sync, applies, admin socket), so the
//! daemon is usable for the desired-state view meanwhile. Adding a manager
//! is a change to this function only.

use felix_actors::SupervisorBuilder;
use felix_config::{Config, DataplaneMode};
use felix_proto::to_dataplane::Payload;

/// Adds the managers and drivers for `mode` to `builder`.
pub fn register(
    builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    mode: DataplaneMode,
) -> SupervisorBuilder<Payload> {
    tracing::info!(
        dataplane = mode.as_str(),
        interface_prefix = ?cfg.interface_prefix(),
        "registering dataplane managers and drivers (none available in this build)"
    );
    builder
}
