//! Which configuration changes need a daemon restart.
//!
//! Upstream Felix restarts itself for a change to any parameter except a
//! short list it applies live (`ClusterGUID`, `ClusterType`,
//! `CalicoVersion`, `HealthTimeoutOverrides`). felix-rs keeps that rule:
//! the per-parameter `restart` flag in the table is `false` exactly for
//! those four. Host-local parameters (datastore connection, node name)
//! cannot change at run time at all, since only the config file and
//! environment set them and those are read once at start.

use crate::config::Config;
use crate::params::Param;

/// Names of parameters whose effective value differs between `old` and
/// `new` and whose change requires a restart, in table order.
pub fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    changed_params(old, new)
        .into_iter()
        .filter(|p| p.spec().restart)
        .map(Param::name)
        .collect()
}

/// Every parameter whose effective value differs, in table order.
pub fn changed_params(old: &Config, new: &Config) -> Vec<Param> {
    Param::ALL
        .iter()
        .copied()
        .filter(|p| old.value(*p) != new.value(*p))
        .collect()
}
