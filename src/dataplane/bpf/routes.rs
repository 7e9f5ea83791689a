//! [`RouteSync`]: `driver/bpf`'s side of the routes map and the failsafe map.
//!
//! # Invariants
//! * `a_workloads_route_is_written_before_its_programs_run`: [`RouteSync::add_and_change`]
//!   runs before any interface is attached in the apply (main drops what a workload sends
//!   from a source the routes map does not give it, so a missing route would drop its
//!   traffic); [`RouteSync::remove_unwanted`] runs after the interfaces leaving were
//!   detached.
//! * Only differences are written: the map is compared with what was last written (at start,
//!   with what a previous run left, so a restart rewrites nothing that is still right).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use felix_bpf::routes::{Failsafe, RouteMaps, RouteVal};
use felix_bpf::{BpfError, BpfOps};
use ipnet::IpNet;

use super::desired::RouteEntry;

/// See the module doc.
#[derive(Debug)]
pub struct RouteSync {
    ops: BpfOps,
    maps: RouteMaps,
    written: BTreeMap<IpNet, RouteVal>,
    failsafes: Option<Arc<Vec<Failsafe>>>,
}

impl RouteSync {
    /// Opens (or creates) both maps under `root`, adopting what a previous run wrote.
    pub fn start(ops: BpfOps, root: &Path) -> Result<Self, BpfError> {
        let maps = RouteMaps::open_or_create(&ops, root)?;
        let written = maps.routes(&ops)?.into_iter().collect();
        Ok(Self {
            ops,
            maps,
            written,
            failsafes: None,
        })
    }

    /// The map's value of `e`: a route naming an interface that has no ifindex (not there
    /// yet) is written without it, so nothing may use it as that workload's source.
    fn value(e: &RouteEntry, ifindex: &dyn Fn(&str) -> Option<u32>) -> RouteVal {
        RouteVal {
            flags: e.flags,
            ifindex: e.iface.as_deref().and_then(ifindex).unwrap_or(0),
        }
    }

    /// Writes the routes that are new or changed, and the failsafes if they changed.
    pub fn add_and_change(
        &mut self,
        routes: &BTreeMap<IpNet, RouteEntry>,
        failsafes: &Arc<Vec<Failsafe>>,
        ifindex: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<(), BpfError> {
        for (net, e) in routes {
            let v = Self::value(e, ifindex);
            if self.written.get(net) == Some(&v) {
                continue;
            }
            self.maps.set_route(&self.ops, net, v)?;
            self.written.insert(*net, v);
        }
        if self
            .failsafes
            .as_ref()
            .is_none_or(|f| !Arc::ptr_eq(f, failsafes) && f != failsafes)
        {
            for f in failsafes.iter() {
                self.maps.add_failsafe(&self.ops, f)?;
            }
            self.maps.retain_failsafes(&self.ops, failsafes)?;
            self.failsafes = Some(failsafes.clone());
        }
        Ok(())
    }

    /// Removes the routes `routes` no longer has.
    pub fn remove_unwanted(
        &mut self,
        routes: &BTreeMap<IpNet, RouteEntry>,
    ) -> Result<(), BpfError> {
        let gone: Vec<IpNet> = self
            .written
            .keys()
            .filter(|n| !routes.contains_key(*n))
            .copied()
            .collect();
        for net in gone {
            self.maps.delete_route(&self.ops, &net)?;
            self.written.remove(&net);
        }
        Ok(())
    }

    /// The routes map, for tests and read-back.
    pub fn maps(&self) -> &RouteMaps {
        &self.maps
    }
}
