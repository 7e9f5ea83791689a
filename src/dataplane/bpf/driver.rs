//! `driver/bpf`: reconciles [`BpfDesired`] through `felix_bpf::BpfDataplane`, one driver for
//! both IP families (the `cali_iface` map and the jump maps are shared), and publishes the
//! interfaces it has programmed ([`BpfReady`]).
//!
//! Registered in the `Routes` phase, which does not hold the `*tables` phase: the accept
//! chains of `manager/bpf-tables-vN` follow [`BpfReady`] instead (an interface gets its accept
//! chain only in the pass after its programs run), so a failed attach of one interface leaves
//! that interface dropped by the dispatch chains, retried, reported (typed, with op and errno)
//! in `/status`, and the rest of the node programmed. Inside the driver, maps and jump maps
//! come before the attachments that use them (`BpfDataplane::apply`).
//!
//! Per interface (resolved to its ifindex through sysfs, cached until the interface monitor
//! reports the name, a resync or a failed apply):
//! 1. if not both hooks are attached yet, the `cali_iface` entry is written NOT READY (a
//!    forward to the interface is refused while its programs are missing: the attach gap);
//! 2. both hooks are programmed (`BpfDataplane::apply`: generic programs, the endpoint's
//!    policy slot, the preamble, re-attached only when its globals differ);
//! 3. the entry is written READY, and the interface joins [`BpfReady`].
//!
//! A workload whose endpoint is removed is retired, not detached: its lists are removed (its
//! programs, still attached, deny everything), its `cali_iface` entry is written NOT READY,
//! and it leaves [`BpfReady`]. Its hooks stay while the interface lives (as upstream keeps a
//! default-drop program on a workload interface without an endpoint) and are removed in the
//! first pass that finds the interface gone or re-created. So an interface never has an
//! accept chain without a program (detaching in the removing pass would race with the tables
//! phase, which the `Routes` phase overlaps, and after a kill last until the next felix's first
//! apply), and an endpoint that comes back on the same interface reuses its hooks: no new
//! attachment, which on TCX holds the kernel's RTNL lock for an RCU grace period per hook
//! (about 10 ms each, measured in the chaos soak). The resync sweep at start retires workload
//! hooks the same way. Host endpoints (no accept chain) are removed at once.
//!
//! An interface is re-programmed only when its desired state, mechanism or ifindex changed,
//! or on a resync. The loader starts lazily in the first apply (the runtime applies only
//! after in-sync); that first apply is a resync: every hook recorded in the pins and every
//! `cali_iface` entry of an interface not desired is removed (mark-and-sweep). Afterwards an
//! interface leaving the desired state is removed at once. Interfaces that do not exist yet
//! wait for the interface monitor (or, without one, keep the driver dirty); any interface
//! event re-runs the reconcile, so an interface re-created under the same name (another
//! ifindex) is re-programmed and its old hooks removed.
//!
//! Conntrack: after a successful reconcile, every [`ct_scan::SCAN_PERIOD`] (the driver stays
//! dirty until the scan is due), [`CtScanner`] expires `cali_ct` entries and removes those
//! approved on hooks felix no longer programs, and publishes the conntrack metric families.
//!
//! Drop reports (`DropAttributionEnabled`): at start the driver writes the switch and rate
//! into `cali_drop_cfg` ([`DropReports`]), and the policy writer records what each report's
//! numbers mean in [`SharedDropNames`] (each interface programmed is named there too), which
//! the daemon's drop reader resolves.
//!
//! Restart: at construction the driver seeds [`BpfReady`] read-only from the pinned
//! `cali_iface` (READY workload entries whose name still has that ifindex), so the first
//! programming pass of a restarted daemon keeps the accept chains of the interfaces whose
//! programs kept running while it was down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use felix_actors::{ActorSeam, Driver, DriverError, FailureKind};
use felix_bpf::attach::select_mechanism;
use felix_bpf::drops::DropConfig;
use felix_bpf::layout::{
    GLOBALS_F_WEP, IFACE_STATE_V4_READY, IFACE_STATE_V6_READY, IFACE_STATE_WEP,
};
use felix_bpf::maps::{IfaceMap, IFACE_MAP};
use felix_bpf::ops::op;
use felix_bpf::{
    AttachPoint, BpfDataplane, BpfError, BpfOps, DeviceKind, EndpointKind, FeatureProbe, Hook,
    KernelProbe, KernelSupport, Mechanism, Options,
};

use super::ct_scan::{self, CtScanner};
use super::desired::{BpfDesired, IfaceDesired};
use super::ifindex::IfindexCache;
use super::policy::{EndpointRef, PolicySync, SharedDropNames};
use super::ready::BpfReady;
use super::routes::RouteSync;
use crate::dataplane::ifacemon::IfaceSubscription;
use felix_actors::clock::SharedClock;
use felix_bpf::PolicyKind;
use felix_proto::{HostEndpoint, WorkloadEndpoint};
use std::sync::Arc;

/// The endpoint an interface's lists were written for.
#[derive(Debug, Clone, PartialEq)]
enum WrittenEp {
    Workload(Arc<WorkloadEndpoint>),
    Host(Arc<HostEndpoint>),
}

impl WrittenEp {
    fn of(d: &BpfDesired, name: &str) -> Option<Self> {
        if let Some(h) = d.hosts.get(name) {
            return Some(Self::Host(h.clone()));
        }
        d.endpoints.get(name).map(|e| Self::Workload(e.clone()))
    }

    fn as_ref(&self) -> EndpointRef<'_> {
        match self {
            Self::Workload(e) => EndpointRef::Workload(e),
            Self::Host(h) => EndpointRef::Host(h),
        }
    }
}

/// How `driver/bpf` is set up.
#[derive(Debug, Clone)]
pub struct BpfDriverOptions {
    /// The loader's pin locations and debug flag (`BPFLogLevel=Debug`: debug path).
    pub loader: Options,
    /// Where interfaces are looked up by name (`/sys/class/net`).
    pub sysfs_net: PathBuf,
    /// The clock the conntrack scan is scheduled on.
    pub clock: SharedClock,
    /// Drop reports: the switch and rate, and where their numbers are named.
    pub drops: DropReports,
}

/// `driver/bpf`'s part of drop attribution.
#[derive(Debug, Clone, Default)]
pub struct DropReports {
    /// Written into `cali_drop_cfg` at start (off by default).
    pub config: DropConfig,
    /// Where the policy writer names handles, records and interfaces.
    pub names: SharedDropNames,
}

impl Default for BpfDriverOptions {
    fn default() -> Self {
        Self {
            loader: Options::default(),
            sysfs_net: PathBuf::from("/sys/class/net"),
            clock: felix_actors::clock::system(),
            drops: DropReports::default(),
        }
    }
}

/// What an interface was last programmed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Applied {
    ifindex: u32,
    mechanism: Mechanism,
    want: IfaceDesired,
}

/// The ifindex of interface `name` as `sysfs_net` (`/sys/class/net`) says; `None` when there
/// is no such interface.
fn ifindex_in(
    ops: &BpfOps,
    sysfs_net: &std::path::Path,
    name: &str,
) -> Result<Option<u32>, BpfError> {
    // A name with a path separator cannot be an interface (and must not escape sysfs).
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Ok(None);
    }
    let path = sysfs_net.join(name).join("ifindex");
    match ops.run(op::PROBE, path.display(), || std::fs::read_to_string(&path)) {
        Ok(text) => Ok(text.trim().parse::<u32>().ok()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the hooks felix recorded on `ifindex` are a workload's (retired, not removed,
/// while the interface lives; the read-back expects them so).
pub(super) fn is_workload_hook(dp: &BpfDataplane, ifindex: u32) -> bool {
    Hook::ALL.iter().any(|h| {
        dp.record(ifindex, *h)
            .is_some_and(|r| r.globals.flags & GLOBALS_F_WEP != 0)
    })
}

/// See the module docs.
pub struct BpfDriver {
    ops: BpfOps,
    opts: BpfDriverOptions,
    dp: Option<BpfDataplane>,
    support: KernelSupport,
    applied: BTreeMap<String, Applied>,
    waiting: BTreeSet<String>,
    resync: bool,
    failed: bool,
    ifaces: Option<IfaceSubscription>,
    ready: BpfReady,
    /// [`BpfReady`] changed in the last apply: one more pass so the tables follow.
    kick: bool,
    ct: CtScanner,
    metrics: felix_actors::Metrics,
    /// Addresses of the interfaces removed since the last conntrack scan (not desired again).
    ct_gone_addrs: BTreeSet<std::net::IpAddr>,
    /// The last desired addresses per interface.
    addrs: BTreeMap<String, Vec<std::net::IpAddr>>,
    /// The policy engine (started with the loader).
    policy: Option<PolicySync>,
    /// The endpoint each interface's lists were last written for.
    written_eps: BTreeMap<String, Option<WrittenEp>>,
    /// The routes and failsafe maps (started with the loader).
    routes: Option<RouteSync>,
    /// Interface name -> ifindex as last probed (see [`IfindexCache`]).
    ifindex_cache: IfindexCache,
    /// Workload interfaces whose endpoint is gone (lists removed, NOT READY), by ifindex, with
    /// the interface's name: their hooks stay attached, denying everything, while an
    /// interface of that name and ifindex lives, and are removed once it is gone (see the
    /// module docs).
    retired: BTreeMap<u32, String>,
}

/// A BPF error as a driver error: the failed operation's name (one of
/// `felix_bpf::ops::op`, the same name an armed fault uses), its kind, and the cause (with its
/// errno).
pub fn driver_error(e: BpfError) -> DriverError {
    let (op, kind) = match &e {
        BpfError::Os { op, .. } => (*op, FailureKind::Refused),
        BpfError::Unexpected { op, .. } => (*op, FailureKind::Unreadable),
        BpfError::Injected(i) => return DriverError::from(i.clone()),
    };
    DriverError::op(op, kind, e)
}

impl BpfDriver {
    /// A driver whose BPF operations run through `seam`, publishing into `ready` (seeded from
    /// the pins, see the module docs).
    pub fn new(seam: &ActorSeam, opts: BpfDriverOptions, ready: BpfReady) -> Self {
        let ct = CtScanner::new(
            opts.clock.clone(),
            ct_scan::SCAN_PERIOD,
            opts.loader.ct_capacity,
        );
        let d = Self {
            ct,
            metrics: seam.shared().metrics().clone(),
            ct_gone_addrs: BTreeSet::new(),
            addrs: BTreeMap::new(),
            policy: None,
            written_eps: BTreeMap::new(),
            routes: None,
            ifindex_cache: IfindexCache::default(),
            retired: BTreeMap::new(),
            ops: BpfOps::new(seam.clone()),
            opts,
            dp: None,
            support: KernelSupport::default(),
            applied: BTreeMap::new(),
            waiting: BTreeSet::new(),
            resync: true,
            failed: false,
            ifaces: None,
            ready,
            kick: false,
        };
        match d.ready_in_pins() {
            Ok(names) => {
                d.ready.set(names);
            }
            Err(e) => tracing::warn!(error = %e, "reading the READY interfaces of the pins failed"),
        }
        d
    }

    /// The READY workload interfaces of the pinned `cali_iface` whose name still resolves to
    /// the entry's ifindex. Read-only: nothing is created or mounted.
    fn ready_in_pins(&self) -> Result<BTreeSet<String>, BpfError> {
        let mut out = BTreeSet::new();
        let root = &self.opts.loader.root;
        if !root.join(IFACE_MAP.versioned_name()).exists() {
            return Ok(out);
        }
        let map = IfaceMap::open_or_create(&self.ops, root)?;
        for ifindex in map.ifindices(&self.ops)? {
            let Some(st) = map.get(&self.ops, ifindex)? else {
                continue;
            };
            let want = IFACE_STATE_WEP | IFACE_STATE_V4_READY;
            if st.flags & want == want && self.ifindex_of(&st.name)? == Some(ifindex) {
                out.insert(st.name);
            }
        }
        Ok(out)
    }

    /// Retries interfaces that did not exist when the monitor reports a change.
    pub fn with_interface_events(mut self, sub: IfaceSubscription) -> Self {
        self.ifaces = Some(sub);
        self
    }

    fn ifindex_of(&self, name: &str) -> Result<Option<u32>, BpfError> {
        ifindex_in(&self.ops, &self.opts.sysfs_net, name)
    }

    fn start(&mut self) -> Result<(), BpfError> {
        if self.dp.is_none() {
            let dp = BpfDataplane::start(self.ops.clone(), self.opts.loader.clone())?;
            let policy = PolicySync::start(
                self.ops.clone(),
                &self.opts.loader.root,
                self.opts.loader.debug,
                &self.opts.drops,
            )?;
            self.policy = Some(policy);
            self.routes = Some(RouteSync::start(self.ops.clone(), &self.opts.loader.root)?);
            self.support = KernelProbe::new(self.ops.clone()).probe();
            tracing::info!(
                tcx = self.support.tcx,
                netkit = self.support.netkit,
                debug = self.opts.loader.debug,
                "BPF dataplane started"
            );
            self.dp = Some(dp);
            self.resync = true;
        }
        Ok(())
    }

    /// Removes the endpoint lists of both hooks of `ifindex` (its programs, while attached,
    /// deny everything from then on).
    fn forget_lists(
        dp: &BpfDataplane,
        policy: &mut PolicySync,
        ifindex: u32,
    ) -> Result<(), BpfError> {
        for hook in Hook::ALL {
            if let Some(r) = dp.record(ifindex, hook) {
                policy.forget(r.mechanism, hook, r.globals.policy_slot)?;
            }
        }
        Ok(())
    }

    /// Removes the endpoint lists of both hooks of `ifindex`, detaches them and removes its
    /// `cali_iface` entry.
    fn remove_iface(
        dp: &mut BpfDataplane,
        policy: &mut PolicySync,
        ifindex: u32,
    ) -> Result<(), BpfError> {
        Self::forget_lists(dp, policy, ifindex)?;
        for hook in Hook::ALL {
            dp.remove(ifindex, hook)?;
        }
        policy.forget_iface(ifindex);
        dp.iface_map().delete(dp.ops(), ifindex)
    }

    /// A workload's endpoint is gone but maybe not its interface: its lists go (the
    /// programs, still attached, deny everything) and its `cali_iface` entry is written NOT
    /// READY. Its hooks stay while the interface lives ([`BpfDriver::retired`]). Returns the
    /// interface's name as its entry has it (empty without an entry).
    fn retire_iface(
        dp: &mut BpfDataplane,
        policy: &mut PolicySync,
        ifindex: u32,
    ) -> Result<String, BpfError> {
        Self::forget_lists(dp, policy, ifindex)?;
        match dp.iface_map().get(dp.ops(), ifindex)? {
            Some(mut st) => {
                st.flags &= !(IFACE_STATE_V4_READY | IFACE_STATE_V6_READY);
                dp.iface_map().set(dp.ops(), ifindex, &st)?;
                Ok(st.name)
            }
            None => Ok(String::new()),
        }
    }

    fn program(
        dp: &mut BpfDataplane,
        policy: &mut PolicySync,
        name: &str,
        a: &Applied,
        ep: Option<EndpointRef<'_>>,
    ) -> Result<(), BpfError> {
        let both = Hook::ALL.iter().all(|h| dp.record(a.ifindex, *h).is_some());
        policy.name_iface(a.ifindex, name, a.mechanism);
        if !both {
            // Not ready until both hooks run (the attach gap).
            dp.set_iface(a.ifindex, name, a.want.kind, false)?;
        }
        for hook in Hook::ALL {
            let ap = AttachPoint {
                ifindex: a.ifindex,
                name: name.to_string(),
                hook,
                mechanism: a.mechanism,
                kind: a.want.kind,
                policy: a.want.policy(hook),
            };
            let rules = ap.policy == PolicyKind::Rules;
            let mech = a.mechanism;
            // The endpoint's list and the interpreter are in the slot before a preamble
            // that uses it is attached.
            dp.apply_with(&ap, &mut |slot| {
                if rules {
                    policy.fill(mech, hook, slot, ep)
                } else {
                    Ok(())
                }
            })?;
        }
        dp.set_iface(a.ifindex, name, a.want.kind, true)
    }

    /// The conntrack scan, when due: flows approved on hooks of interfaces no longer
    /// programmed go with the expired ones.
    fn scan_conntrack(&mut self) -> Result<(), BpfError> {
        let Some(dp) = self.dp.as_ref() else {
            return Ok(());
        };
        if !self.ct.due() {
            return Ok(());
        }
        let programmed: BTreeSet<u32> = self.applied.values().map(|a| a.ifindex).collect();
        // An address desired again (a new endpoint reusing it) is not cleaned.
        let live: BTreeSet<&std::net::IpAddr> = self.addrs.values().flatten().collect();
        self.ct_gone_addrs.retain(|a| !live.contains(a));
        self.ct
            .run(dp, &programmed, &self.ct_gone_addrs, &self.metrics)?;
        self.ct_gone_addrs.clear();
        Ok(())
    }

    /// One pass ([`BpfDriver::pass`]); after a failure the ifindex cache is dropped: a
    /// failure may come from a stale ifindex (an interface re-created before its event
    /// arrived), so the retry probes every name again.
    fn reconcile(&mut self, desired: &BpfDesired) -> Result<(), BpfError> {
        let r = self.pass(desired);
        if r.is_err() {
            self.ifindex_cache.clear();
        }
        r
    }

    /// Reconciles `desired` once: removals, routes, IP sets and policies, interfaces, then
    /// what nobody refers to any more (see the module docs).
    fn pass(&mut self, desired: &BpfDesired) -> Result<(), BpfError> {
        self.start()?;
        for (name, old) in &self.addrs {
            if !desired.addrs.contains_key(name) {
                self.ct_gone_addrs.extend(old.iter().copied());
            }
        }
        if self.addrs != desired.addrs {
            self.addrs = desired.addrs.clone();
        }
        // Names the interface monitor reported are probed again; without a monitor, or on a
        // resync, every name is.
        self.ifindex_cache.invalidate(
            self.ifaces.as_ref().map(IfaceSubscription::take),
            self.resync,
        );
        self.waiting.clear();
        let mut resolved: BTreeMap<String, Applied> = BTreeMap::new();
        for (name, want) in &desired.ifaces {
            let (ops, sysfs) = (&self.ops, &self.opts.sysfs_net);
            let ifindex = self
                .ifindex_cache
                .get(name, |n| ifindex_in(ops, sysfs, n))?;
            match ifindex {
                Some(ifindex) => {
                    let mechanism = select_mechanism(
                        desired.attach_type,
                        self.support,
                        DeviceKind::Other,
                        want.kind == EndpointKind::Workload,
                    );
                    resolved.insert(
                        name.clone(),
                        Applied {
                            ifindex,
                            mechanism,
                            want: *want,
                        },
                    );
                }
                None => {
                    self.waiting.insert(name.clone());
                }
            }
        }
        let keep: BTreeSet<u32> = resolved.values().map(|a| a.ifindex).collect();
        let (Some(dp), Some(policy), Some(routes)) =
            (self.dp.as_mut(), self.policy.as_mut(), self.routes.as_mut())
        else {
            return Ok(());
        };
        // Removals first: a removed workload's programs deny everything (its lists are
        // gone) before its addresses leave any IP set, so that no set change opens a
        // flow to or from it (leaving a deny set before an allow set would). A workload that
        // could not be retired holds the IP-set and policy updates of this pass.
        let mut first_err: Option<BpfError> = None;
        let mut unretired: Option<BpfError> = None;
        // Retired workloads: their hooks go with their interface (desired again: programmed
        // below, reusing the hooks).
        for (ifindex, name) in std::mem::take(&mut self.retired) {
            if keep.contains(&ifindex) {
                continue;
            }
            let (ops, sysfs) = (&self.ops, &self.opts.sysfs_net);
            let removed = match self.ifindex_cache.get(&name, |n| ifindex_in(ops, sysfs, n)) {
                Ok(found) if found == Some(ifindex) => {
                    // The interface lives: its hooks stay.
                    self.retired.insert(ifindex, name);
                    continue;
                }
                Ok(_) => Self::remove_iface(dp, policy, ifindex),
                Err(e) => Err(e),
            };
            if let Err(e) = removed {
                self.retired.insert(ifindex, name);
                first_err.get_or_insert(e);
            }
        }
        // Sweep: interfaces no longer desired (or re-created under another ifindex).
        let gone: Vec<(String, u32)> = self
            .applied
            .iter()
            .filter(|(n, a)| resolved.get(*n).map(|r| r.ifindex) != Some(a.ifindex))
            .map(|(n, a)| (n.clone(), a.ifindex))
            .collect();
        for (name, ifindex) in gone {
            let r = if keep.contains(&ifindex) {
                Ok(())
            } else if is_workload_hook(dp, ifindex) {
                Self::retire_iface(dp, policy, ifindex)
                    .map(|iface| {
                        self.retired.insert(ifindex, iface);
                    })
                    .map_err(|e| {
                        unretired.get_or_insert(e);
                    })
            } else {
                Self::remove_iface(dp, policy, ifindex).map_err(|e| {
                    first_err.get_or_insert(e);
                })
            };
            if r.is_ok() {
                self.applied.remove(&name);
            }
        }
        if self.resync {
            // Mark-and-sweep from the kernel's view: pins of hooks and ifstate entries of
            // interfaces nobody wants any more (also those of a previous run).
            let mut stale: BTreeSet<u32> = dp
                .records()
                .map(|((ifindex, _), _)| ifindex)
                .filter(|i| !keep.contains(i))
                .collect();
            match dp.iface_map().ifindices(dp.ops()) {
                Ok(v) => stale.extend(v.into_iter().filter(|i| !keep.contains(i))),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
            for ifindex in stale {
                if self.retired.contains_key(&ifindex) {
                    continue;
                }
                tracing::info!(
                    ifindex,
                    "removing BPF programs of an interface felix no longer programs"
                );
                if is_workload_hook(dp, ifindex) {
                    match Self::retire_iface(dp, policy, ifindex) {
                        Ok(iface) => {
                            self.retired.insert(ifindex, iface);
                        }
                        Err(e) => {
                            unretired.get_or_insert(e);
                        }
                    }
                } else if let Err(e) = Self::remove_iface(dp, policy, ifindex) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = unretired {
            // Its addresses stay in their sets until its hooks deny: the pass is retried.
            return Err(e);
        }
        // Routes (a workload's source check) and failsafes before any program uses them.
        routes.add_and_change(&desired.routes, &desired.failsafes, &|n| {
            resolved.get(n).map(|a| a.ifindex)
        })?;
        // IP sets, then policies and profiles, before any endpoint refers to them.
        policy.add_and_change(desired)?;
        for (name, a) in resolved {
            let ep = WrittenEp::of(desired, &name);
            let ep_same = self.written_eps.get(&name) == Some(&ep);
            if !self.resync && self.applied.get(&name) == Some(&a) && ep_same {
                continue;
            }
            match Self::program(dp, policy, &name, &a, ep.as_ref().map(WrittenEp::as_ref)) {
                Ok(()) => {
                    self.applied.insert(name.clone(), a);
                    self.written_eps.insert(name, ep);
                }
                Err(e) => {
                    tracing::warn!(iface = %name, error = %e, "programming BPF failed; retried");
                    self.applied.remove(&name);
                    self.written_eps.remove(&name);
                    first_err.get_or_insert(e);
                }
            }
        }
        self.written_eps.retain(|n, _| self.applied.contains_key(n));
        // Policies, profiles and then IP sets nobody refers to any more.
        if first_err.is_none() {
            policy.remove_unwanted(desired)?;
            routes.remove_unwanted(&desired.routes)?;
            // The first complete apply: what a previous run left and nobody rewrote goes.
            if self.waiting.is_empty() {
                policy.sweep_once()?;
            }
        }
        self.resync = false;
        if self.ready.set(self.applied.keys().cloned().collect()) {
            self.kick = true;
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Driver for BpfDriver {
    type Desired = BpfDesired;

    fn apply(&mut self, desired: &BpfDesired) -> Result<(), DriverError> {
        self.kick = false;
        let r = self.reconcile(desired).and_then(|()| self.scan_conntrack());
        self.failed = r.is_err();
        r.map_err(driver_error)
    }

    fn queue_resync(&mut self) {
        self.resync = true;
    }

    fn read_back(
        &mut self,
        desired: &BpfDesired,
    ) -> Option<Result<felix_actors::ReadBack, DriverError>> {
        let (ops, sysfs) = (&self.ops, &self.opts.sysfs_net);
        let ifindex_of = |n: &str| ifindex_in(ops, sysfs, n);
        Some(
            super::readback::read_back(self.dp.as_ref(), ops, desired, &ifindex_of)
                .map_err(driver_error),
        )
    }

    fn is_dirty(&self) -> bool {
        // With the monitor, any interface change re-runs the reconcile (cheap when nothing
        // changed): a waiting interface may have appeared, or a programmed one been
        // re-created under another ifindex with the same name.
        // Without it, missing interfaces and the interfaces of retired workloads are polled.
        let waiting = match &self.ifaces {
            Some(sub) => sub.has_pending(),
            None => !self.waiting.is_empty() || !self.retired.is_empty(),
        };
        self.failed || self.resync || waiting || self.kick || self.ct.due()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_actors::seam::{Fault, FaultAction};

    #[test]
    fn bpf_errors_keep_the_operation_and_errno() {
        let e = driver_error(BpfError::Os {
            op: op::TCX_ATTACH,
            what: "ifindex 7".into(),
            source: std::io::Error::from_raw_os_error(libc::EPERM),
        });
        assert_eq!(e.operation(), Some("tcx_attach"));
        assert_eq!(e.kind(), Some(FailureKind::Refused));
        let src = std::error::Error::source(&e).expect("cause kept");
        let bpf = src.downcast_ref::<BpfError>().expect("typed cause");
        assert_eq!(bpf.raw_os_error(), Some(libc::EPERM));
    }

    /// A veth `cali<tag>0` in a namespace of its own, and a driver for it: runs `f` with the
    /// driver, its [`BpfReady`], the interface's ifindex and the driver's seam on a thread in
    /// the namespace (the caller has passed the kernel-test gate).
    fn with_workload_iface(
        tag: &str,
        f: impl FnOnce(BpfDriver, BpfReady, u32, ActorSeam) + Send + 'static,
    ) {
        let ns = felix_netns::Netns::unique(&format!("fdrv{tag}")).expect("netns");
        let (iface, peer) = (format!("cali{tag}0"), format!("peer{tag}0"));
        ns.ip(&["link", "add", &iface, "type", "veth", "peer", "name", &peer])
            .expect("veth");
        ns.ip(&["link", "set", &iface, "up"]).expect("up");
        let idx: u32 = ns
            .exec("cat", &[&format!("/sys/class/net/{iface}/ifindex")])
            .expect("ifindex")
            .trim()
            .parse()
            .expect("numeric");
        // The driver reads ifindices from sysfs, which a thread in the namespace does not
        // see: a directory of its own says the same.
        let pid = std::process::id();
        let tmp = std::env::temp_dir().join(format!("felix-drv-{tag}-{pid}"));
        std::fs::create_dir_all(tmp.join(&iface)).expect("sysfs dir");
        std::fs::write(tmp.join(&iface).join("ifindex"), format!("{idx}\n")).expect("ifindex");
        let root = std::path::PathBuf::from(format!("/sys/fs/bpf/felix-drv-{tag}-{pid}"));
        let (tmp2, root2) = (tmp.clone(), root.clone());
        ns.spawn_in(move || {
            let seam = ActorSeam::default();
            let opts = BpfDriverOptions {
                loader: Options {
                    root: root2,
                    ct_capacity: 1024,
                    ..Options::default()
                },
                sysfs_net: tmp2,
                ..BpfDriverOptions::default()
            };
            let ready = BpfReady::default();
            let d = BpfDriver::new(&seam, opts, ready.clone());
            f(d, ready, idx, seam)
        })
        .join()
        .expect("test thread")
        .expect("entered netns");
        let _ = std::fs::remove_dir_all(&tmp);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// `iface` as a workload with policy lists on both hooks.
    fn workload_desired(iface: &str) -> BpfDesired {
        let mut want = BpfDesired::default();
        want.ifaces.insert(
            iface.into(),
            IfaceDesired {
                kind: EndpointKind::Workload,
                from_endpoint: PolicyKind::Rules,
                to_endpoint: PolicyKind::Rules,
            },
        );
        want
    }

    fn attached(d: &BpfDriver, idx: u32) -> bool {
        let dp = d.dp.as_ref().expect("started");
        Hook::ALL.iter().all(|h| {
            dp.record(idx, *h)
                .is_some_and(|r| dp.is_attached(idx, *h, r).unwrap_or(false))
        })
    }

    /// Attachments so far (TCX or TC), as the seam counted them.
    fn attachments(seam: &ActorSeam) -> u64 {
        let m = seam.shared().metrics();
        [op::TCX_ATTACH, op::TC_ATTACH]
            .iter()
            .map(|o| m.seam_op_counts(seam.actor(), o).0)
            .sum()
    }

    fn ready_flag(d: &BpfDriver, idx: u32) -> Option<u32> {
        let dp = d.dp.as_ref().expect("started");
        dp.iface_map()
            .get(dp.ops(), idx)
            .expect("lookup")
            .map(|st| st.flags & IFACE_STATE_V4_READY)
    }

    /// Review note (session 25 soak): every endpoint removed and added back on a live
    /// interface cost a detach and two TCX attaches, each holding RTNL for an RCU grace
    /// period; under load the interface drivers stalled behind them. A retired workload's
    /// hooks now deny while the interface lives, are reused when the endpoint returns and go
    /// with the interface.
    #[test]
    fn a_removed_workload_keeps_denying_hooks_while_its_interface_lives() {
        felix_netns::require!(netns["ip"]);
        with_workload_iface("rm", |mut d, ready, idx, seam| {
            d.apply(&workload_desired("calirm0")).expect("programmed");
            assert!(ready.snapshot().1.contains("calirm0"));
            assert!(attached(&d, idx));
            let attached_once = attachments(&seam);
            assert!(attached_once >= 2, "both hooks attached: {attached_once}");
            // The endpoint goes: NOT READY, out of BpfReady, programs still attached.
            d.apply(&BpfDesired::default()).expect("retired");
            assert!(ready.snapshot().1.is_empty(), "no accept chain from now on");
            assert!(attached(&d, idx));
            assert_eq!(ready_flag(&d, idx), Some(0), "NOT READY");
            // Later passes keep them: the interface lives.
            d.apply(&BpfDesired::default()).expect("kept");
            assert!(
                attached(&d, idx),
                "the hooks stay while the interface lives"
            );
            assert_eq!(d.retired.get(&idx).map(String::as_str), Some("calirm0"));
            // Which is what a resync would leave: no drift.
            let rb = d
                .read_back(&BpfDesired::default())
                .expect("driver/bpf reads back")
                .expect("read back");
            assert!(rb.changes.is_empty(), "drift: {:?}", rb.changes);
            // The endpoint comes back: same hooks, no attachment.
            d.apply(&workload_desired("calirm0"))
                .expect("re-programmed");
            assert!(ready.snapshot().1.contains("calirm0"));
            assert_eq!(
                ready_flag(&d, idx),
                Some(IFACE_STATE_V4_READY),
                "READY again"
            );
            assert_eq!(attachments(&seam), attached_once, "no new attachment");
            assert!(d.retired.is_empty());
            // Removed again, then the interface goes (the monitor's report is the
            // sysfs entry gone here): the next pass removes the records and the entry.
            d.apply(&BpfDesired::default()).expect("retired");
            let out = std::process::Command::new("ip")
                .args(["link", "del", "calirm0"])
                .output()
                .expect("ip runs");
            assert!(out.status.success(), "ip link del: {out:?}");
            std::fs::remove_dir_all(d.opts.sysfs_net.join("calirm0")).expect("sysfs entry");
            d.apply(&BpfDesired::default()).expect("removed");
            let dp = d.dp.as_ref().expect("started");
            assert!(Hook::ALL.iter().all(|h| dp.record(idx, *h).is_none()));
            assert_eq!(dp.iface_map().get(dp.ops(), idx).expect("lookup"), None);
            assert!(d.retired.is_empty());
        });
    }

    /// Review note (session 24 soak): a removed workload's address left the quarantine
    /// (deny) set before its programs denied, so for that moment a flow from it passed by
    /// way of a network set that still held it.
    #[test]
    fn a_removed_workload_denies_before_its_address_leaves_any_ip_set() {
        felix_netns::require!(netns["ip"]);
        with_workload_iface("rs", |mut d, _ready, idx, seam| {
            let mut want = workload_desired("calirs0");
            want.ipsets
                .insert("s:deny".into(), Arc::new(vec!["10.65.9.9/32".into()]));
            d.apply(&want).expect("programmed");
            let members = |d: &mut BpfDriver| {
                d.policy
                    .as_mut()
                    .expect("started")
                    .kernel_members()
                    .expect("members")
            };
            assert_eq!(members(&mut d), 1);
            // The workload and its address go in one pass, and writing it NOT READY (the
            // last step of its retirement) fails: its address stays in the set.
            seam.shared()
                .faults()
                .arm(Fault {
                    target: seam.actor().to_string(),
                    op: op::MAP_UPDATE.into(),
                    action: FaultAction::Error,
                    count: 1,
                    delay_ms: 0,
                })
                .expect("valid fault");
            let mut gone = BpfDesired::default();
            gone.ipsets.insert("s:deny".into(), Arc::new(Vec::new()));
            let err = d.apply(&gone).expect_err("retirement failed");
            assert_eq!(err.kind(), Some(FailureKind::Injected));
            assert_eq!(
                members(&mut d),
                1,
                "the address left a set before its hooks deny"
            );
            assert!(d.is_dirty());
            // The retry retires it, and only then the address leaves.
            d.apply(&gone).expect("retired");
            assert_eq!(members(&mut d), 0);
            assert!(d.retired.contains_key(&idx), "retired, its hooks denying");
        });
    }

    #[test]
    fn an_injected_fault_fails_the_apply_typed_and_keeps_the_driver_dirty() {
        let seam = ActorSeam::default();
        seam.shared()
            .faults()
            .arm(Fault {
                target: seam.actor().to_string(),
                op: op::MOUNT.into(),
                action: FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .expect("valid fault");
        let root = std::env::temp_dir().join(format!("felix-bpf-drv-{}", std::process::id()));
        let opts = BpfDriverOptions {
            loader: Options {
                bpffs: root.clone(),
                root: root.join("cali"),
                debug: false,
                ct_capacity: 1024,
            },
            ..BpfDriverOptions::default()
        };
        let mut d = BpfDriver::new(&seam, opts, BpfReady::default());
        let err = d.apply(&BpfDesired::default()).expect_err("fault");
        assert_eq!(err.kind(), Some(FailureKind::Injected));
        assert!(d.is_dirty(), "a failed apply stays pending");
        let _ = std::fs::remove_dir_all(&root);
    }
}
