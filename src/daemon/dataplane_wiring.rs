//! The one place where the dataplane's managers and drivers are registered
//! with the supervisor.
//!
//! [`register`] receives the effective configuration and the dataplane
//! mode and adds every manager (`ManagerSpec`) and driver (`DriverSpec`)
//! that mode needs, in programming-pass order. Actor names follow
//! `docs/architecture.md` (`manager/<name>`, `driver/<name>`).
//!
//! The managers and drivers themselves live in `crate::dataplane`
//! (`crate::dataplane::wiring::register`); this function hands them the
//! kernel seam of the network namespace the daemon runs in.

use felix_actors::SupervisorBuilder;
use felix_config::{Config, DataplaneMode};
use felix_proto::to_dataplane::Payload;

use crate::dataplane::bpf::policy::SharedDropNames;
use crate::dataplane::ifacemon::InterfaceState;
use crate::dataplane::wiring::WiringError;

/// Adds the managers and drivers for `mode` to `builder`; the route and
/// interface drivers subscribe to `ifaces` (fed by the interface monitor); in eBPF mode
/// `driver/bpf` records what its drop reports mean in `bpf_drop_names`.  An error
/// (for example a mark mask too small for
/// the rule renderer) stops the daemon: running without a dataplane would
/// leave the node silently unprotected.
pub fn register(
    builder: SupervisorBuilder<Payload>,
    cfg: &Config,
    mode: DataplaneMode,
    ifaces: &InterfaceState,
    bpf_drop_names: &SharedDropNames,
) -> Result<SupervisorBuilder<Payload>, WiringError> {
    tracing::info!(
        dataplane = mode.as_str(),
        interface_prefix = ?cfg.interface_prefix(),
        "registering dataplane managers and drivers"
    );
    let runner: std::sync::Arc<dyn crate::dataplane::kernel::CommandRunner> =
        std::sync::Arc::new(crate::dataplane::kernel::SystemCommands::new());
    crate::dataplane::wiring::register_with_interfaces(builder, cfg, runner, ifaces, bpf_drop_names)
}
