//! [`IpSets`]: reconciles kernel IP sets (one IP version) with the desired
//! sets.
//!
//! Invariants (the seed's three, plus ordering):
//! - (a) The start-of-day full resync (name listing plus every set's
//!   contents, at must priority) completes before the first write.
//! - (b) A desired set found missing from a name listing is recreated in
//!   the same apply as the listing that found it.
//! - (c) A set whose write failed is re-read at must priority before it is
//!   written again.
//! - Sets are never deleted by `apply_updates`; undesired sets (ours by name
//!   prefix) are deleted by `apply_deletions`, at most
//!   `max_deletions_per_iteration` per call, which the supervisor calls
//!   after the `*tables` have stopped referencing them.
//! - Members are added by `apply_updates` but removed only by
//!   `apply_deletions`: between the two a set holds the union of its old and
//!   new members. A set in a deny rule then denies more, never less, while
//!   the tables change; a set in an allow rule keeps allowing only what the
//!   old state allowed. Removing a member first could open a flow that both
//!   states deny (an endpoint leaving a quarantine set in the same change
//!   that removes its chains) for as long as a kill between the phases
//!   leaves it. Test: `members_leave_a_set_only_after_the_tables_phase`.
//! - A change of type or `maxelem` of an existing set goes through a
//!   temporary set and `swap`, so in-use sets change atomically.
//! - A set is created with a hash size fitted to its membership
//!   ([`hash_size_for`]), so the kernel does not rehash it while it fills.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::dataplane::kernel::{Commands, KernelError, RetryPolicy};
use crate::dataplane::nftables::canonical_member_owned;

use super::names::{IpSetType, IpVersionConfig};
use super::parse::{parse_list, parse_names};

/// What a set should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSetMetadata {
    /// Calc-graph IP set ID (the kernel name is derived from it).
    pub set_id: String,
    /// Kernel type.
    pub set_type: IpSetType,
    /// `maxelem`.
    pub max_size: u32,
}

/// Tunables; `Default` gives upstream's values.
#[derive(Clone)]
pub struct IpSetsOptions {
    /// Retries per `apply_updates` (attempts are one more), backoff, sleep
    /// and clock.
    pub retry: RetryPolicy,
    /// Time budget per apply for background re-checks.
    pub background_budget: Duration,
    /// Deletions per `apply_deletions` call.
    pub max_deletions_per_iteration: usize,
}

impl std::fmt::Debug for IpSetsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpSetsOptions")
            .field("retry", &self.retry)
            .field("background_budget", &self.background_budget)
            .field(
                "max_deletions_per_iteration",
                &self.max_deletions_per_iteration,
            )
            .finish_non_exhaustive()
    }
}

impl Default for IpSetsOptions {
    fn default() -> Self {
        IpSetsOptions {
            // Ten attempts, as upstream.
            retry: RetryPolicy {
                max_retries: 9,
                ..RetryPolicy::default()
            },
            background_budget: Duration::from_millis(100),
            max_deletions_per_iteration: 1,
        }
    }
}

/// What one `apply_updates` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpSetsStats {
    /// `ipset restore` runs that succeeded.
    pub restores: usize,
    /// Sets created directly.
    pub sets_created: usize,
    /// Sets replaced through a temporary set and swap.
    pub sets_swapped: usize,
    /// Member lines (add/del) written.
    pub member_lines: usize,
    /// `ipset list -n` runs.
    pub name_listings: usize,
    /// `ipset list <set>` runs.
    pub set_listings: usize,
    /// Failed attempts retried.
    pub retries: usize,
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum IpSetsError {
    /// Kept failing after every attempt.
    #[error("ip sets (v{ipv}): giving up after {attempts} attempts: {source}")]
    GaveUp {
        /// 4 or 6.
        ipv: u8,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        #[source]
        source: KernelError,
    },
}

impl From<IpSetsError> for felix_actors::DriverError {
    fn from(e: IpSetsError) -> Self {
        let IpSetsError::GaveUp { source, .. } = &e;
        let (op, kind) = (source.op().to_string(), source.kind());
        felix_actors::DriverError::op(op, kind, e)
    }
}

/// The ipset default (and smallest) hash size.
const MIN_HASH_SIZE: usize = 1024;

/// Hash size for a new set of `members`: a power of two with at most about
/// three members per bucket, the size the kernel would have grown the
/// table to by resizing while the members were added one by one (what
/// `ipset save` reports, and why replaying its output was faster than our
/// restore). Never below ipset's default.
pub fn hash_size_for(members: usize) -> usize {
    members
        .div_ceil(3)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX)
        .max(MIN_HASH_SIZE)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Desired {
    set_type: IpSetType,
    max_size: u32,
    /// Shared with [`Dp::members`] once written, so recording what the
    /// kernel holds costs no copy; changed copy-on-write.
    members: Arc<BTreeSet<String>>,
}

/// Known kernel state of one set. `meta` / `members` `None` = unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dp {
    meta: Option<(IpSetType, u32)>,
    members: Option<Arc<BTreeSet<String>>>,
}

/// The `ipset` driver for one IP version (iptables mode; nftables mode keeps its sets in the
/// table, and uses this driver only to sweep sets an iptables-mode run left).
///
/// # API model
/// Declarative: [`IpSets::add_or_replace_ip_set`] / [`IpSets::remove_ip_set`] record desired
/// sets; [`IpSets::apply_updates`] creates and updates; [`IpSets::apply_deletions`] deletes
/// undesired sets and must only be called after the `*tables` stopped referencing them.
///
/// # Design
/// Writes are `ipset restore` scripts; membership changes are deltas; a change of type or
/// `maxelem` goes through a temporary set and `swap`. Periodic resyncs list names and
/// re-check contents incrementally (must / background queues), because listing every set is
/// slow.
///
/// # Identification of our state
/// By name: `cali40` / `cali60` (and the temporary `cali4t` / `cali6t`) followed by the set ID
/// the calc graph derives, as upstream. Only sets with our prefixes are listed or deleted.
///
/// # Retry policy
/// A failed script is retried within the apply (10 attempts, shared backoff); a set whose
/// write failed is re-read at must priority before it is written again; when attempts run
/// out the apply returns [`IpSetsError::GaveUp`] and the work stays pending. Deletions are
/// rate-limited (`max_deletions_per_iteration` per call).
///
/// # Thread safety
/// Not shared: owned by one driver actor, called from one thread at a time (`&mut self`).
pub struct IpSets {
    cfg: IpVersionConfig,
    cmds: Commands,
    opts: IpSetsOptions,
    desired: BTreeMap<String, Desired>,
    /// Kernel state as known (ours only).
    dataplane: BTreeMap<String, Dp>,
    /// Sets the last name listing saw that are not ours (for `felix_ipsets_total`).
    foreign_sets: usize,
    full_resync_required: bool,
    bg_resync_requested: bool,
    must: BTreeSet<String>,
    background: VecDeque<String>,
    delete_failed: BTreeSet<String>,
    next_temp: u32,
    /// Sets changed by the caller since the last successful write.
    dirty: BTreeSet<String>,
    /// Kernel knowledge changed (resync): compare every desired set.
    check_all: bool,
    /// Desired sets whose kernel membership is a strict superset of the desired one: the
    /// extra members wait for `apply_deletions`.
    shrink: BTreeSet<String>,
}

impl std::fmt::Debug for IpSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpSets")
            .field("ipv", &self.cfg.ip_version())
            .field("desired", &self.desired.len())
            .finish_non_exhaustive()
    }
}

impl IpSets {
    /// A driver; the first `apply_updates` performs a full resync.
    pub fn new(cfg: IpVersionConfig, cmds: Commands, opts: IpSetsOptions) -> Self {
        IpSets {
            cfg,
            cmds,
            opts,
            desired: BTreeMap::new(),
            foreign_sets: 0,
            dataplane: BTreeMap::new(),
            full_resync_required: true,
            bg_resync_requested: false,
            must: BTreeSet::new(),
            background: VecDeque::new(),
            delete_failed: BTreeSet::new(),
            next_temp: 0,
            dirty: BTreeSet::new(),
            check_all: true,
            shrink: BTreeSet::new(),
        }
    }

    /// The naming config.
    pub fn config(&self) -> &IpVersionConfig {
        &self.cfg
    }

    fn canon(&self, t: IpSetType, members: impl IntoIterator<Item = String>) -> BTreeSet<String> {
        let (kind, ipv) = (t.nft_kind(), self.cfg.ip_version());
        members
            .into_iter()
            .filter_map(|m| canonical_member_owned(kind, ipv, m))
            .collect()
    }

    /// Sets (creates or replaces) a set and its full membership. Members of
    /// the other IP version or that do not parse are dropped.
    pub fn add_or_replace_ip_set(
        &mut self,
        meta: IpSetMetadata,
        members: impl IntoIterator<Item = String>,
    ) {
        let name = self.cfg.name_for_main_ipset(&meta.set_id);
        let members = self.canon(meta.set_type, members);
        self.dirty.insert(name.clone());
        self.desired.insert(
            name,
            Desired {
                set_type: meta.set_type,
                max_size: meta.max_size,
                members: Arc::new(members),
            },
        );
    }

    /// Adds members to a desired set (no-op if unknown).
    pub fn add_members(&mut self, set_id: &str, members: impl IntoIterator<Item = String>) {
        let name = self.cfg.name_for_main_ipset(set_id);
        if let Some(t) = self.desired.get(&name).map(|d| d.set_type) {
            let add = self.canon(t, members);
            if let Some(d) = self.desired.get_mut(&name) {
                Arc::make_mut(&mut d.members).extend(add);
            }
            self.dirty.insert(name);
        }
    }

    /// Removes members from a desired set (no-op if unknown).
    pub fn remove_members(&mut self, set_id: &str, members: impl IntoIterator<Item = String>) {
        let name = self.cfg.name_for_main_ipset(set_id);
        if let Some(t) = self.desired.get(&name).map(|d| d.set_type) {
            let del = self.canon(t, members);
            if let Some(d) = self.desired.get_mut(&name) {
                Arc::make_mut(&mut d.members).retain(|m| !del.contains(m));
            }
            self.dirty.insert(name);
        }
    }

    /// Stops wanting a set; it is destroyed by a later `apply_deletions`.
    pub fn remove_ip_set(&mut self, set_id: &str) {
        let name = self.cfg.name_for_main_ipset(set_id);
        self.desired.remove(&name);
    }

    /// Queues a background resync (periodic refresh).
    pub fn queue_resync(&mut self) {
        self.bg_resync_requested = true;
    }

    /// Forces a full (must-tier) resync at the next apply.
    pub fn queue_full_resync(&mut self) {
        self.full_resync_required = true;
    }

    /// True if the kernel lacks something of `d` that `apply_updates` writes: the set, its
    /// type or size, or a member. Extra members are not this: see [`Self::has_extra`].
    fn needs_write(&self, name: &str, d: &Desired) -> bool {
        match self.dataplane.get(name) {
            None => true,
            Some(dp) => {
                dp.meta != Some((d.set_type, d.max_size))
                    || !dp
                        .members
                        .as_ref()
                        .is_some_and(|m| Arc::ptr_eq(m, &d.members) || d.members.is_subset(m))
            }
        }
    }

    /// True if the kernel's copy of `name` holds members `d` does not (removed by
    /// `apply_deletions`).
    fn has_extra(&self, name: &str, d: &Desired) -> bool {
        self.dataplane
            .get(name)
            .and_then(|dp| dp.members.as_ref())
            .is_some_and(|m| !Arc::ptr_eq(m, &d.members) && !m.is_subset(&d.members))
    }

    /// A set of ours in the kernel that nobody wants (and whose deletion has not failed).
    fn is_pending_deletion(&self, name: &str) -> bool {
        !self.desired.contains_key(name) && !self.delete_failed.contains(name)
    }

    fn pending_deletions(&self) -> Vec<String> {
        self.dataplane
            .keys()
            .filter(|n| self.is_pending_deletion(n))
            .cloned()
            .collect()
    }

    /// The sets to compare: caller-touched ones, or every desired set when a resync changed
    /// our knowledge of the kernel.
    fn candidates(&self) -> Box<dyn Iterator<Item = (&String, &Desired)> + '_> {
        if self.check_all {
            Box::new(self.desired.iter())
        } else {
            Box::new(
                self.dirty
                    .iter()
                    .filter_map(|n| self.desired.get_key_value(n)),
            )
        }
    }

    /// Desired sets whose kernel state lacks something wanted (see [`Self::needs_write`]).
    fn sets_to_write(&self) -> Vec<String> {
        self.candidates()
            .filter(|(n, d)| self.needs_write(n, d))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Desired sets, among the candidates, holding members no longer wanted.
    fn sets_to_shrink(&self) -> Vec<String> {
        self.candidates()
            .filter(|(n, d)| self.has_extra(n, d))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// True if `apply_updates` has work to do.
    pub fn is_dirty(&self) -> bool {
        self.full_resync_required
            || self.bg_resync_requested
            || !self.must.is_empty()
            || !self.background.is_empty()
            || self.candidates().any(|(n, d)| self.needs_write(n, d))
    }

    /// True if sets or members are waiting for `apply_deletions`.
    pub fn has_pending_deletions(&self) -> bool {
        // Asked on every dirtiness check: stops at the first set found, collects nothing.
        !self.shrink.is_empty()
            || self.dataplane.keys().any(|n| self.is_pending_deletion(n))
            || self.candidates().any(|(n, d)| self.has_extra(n, d))
    }

    fn list_names(&mut self, stats: &mut IpSetsStats) -> Result<BTreeSet<String>, KernelError> {
        stats.name_listings += 1;
        let out = self
            .cmds
            .run("ipset-list-names", "ipset", &["list", "-n"], None)?;
        let (ours, foreign): (BTreeSet<String>, BTreeSet<String>) = parse_names(&out.stdout)
            .into_iter()
            .partition(|n| self.cfg.owns_ipset(n));
        self.foreign_sets = foreign.len();
        Ok(ours)
    }

    /// Forgets kernel knowledge of any desired or known set not listed, so
    /// it is (re)created in this same apply (invariant b).
    fn sweep_missing(&mut self, listed: &BTreeSet<String>) {
        self.dataplane.retain(|n, _| listed.contains(n));
        self.must.retain(|n| listed.contains(n));
        self.background.retain(|n| listed.contains(n));
        self.delete_failed.retain(|n| listed.contains(n));
    }

    fn resync_set(&mut self, name: &str, stats: &mut IpSetsStats) -> Result<(), KernelError> {
        stats.set_listings += 1;
        match self.cmds.run("ipset-list", "ipset", &["list", name], None) {
            Ok(out) => {
                match parse_list(&out.stdout) {
                    Ok(l) => {
                        let meta = match (l.set_type, l.max_elem) {
                            (Some(t), Some(m)) if l.family == self.cfg.family() => Some((t, m)),
                            _ => None,
                        };
                        self.dataplane.insert(
                            name.to_string(),
                            Dp {
                                meta,
                                members: l.members.map(Arc::new),
                            },
                        );
                        self.delete_failed.remove(name);
                    }
                    Err(_) => {
                        self.dataplane.insert(
                            name.to_string(),
                            Dp {
                                meta: None,
                                members: None,
                            },
                        );
                    }
                }
                Ok(())
            }
            Err(e) if e.stderr().contains("does not exist") => {
                self.dataplane.remove(name);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn try_resync(
        &mut self,
        stats: &mut IpSetsStats,
        budget: &mut Duration,
    ) -> Result<(), KernelError> {
        // What we know of the kernel may change below: compare every
        // desired set at the next write, not only the caller-touched ones.
        self.check_all = true;
        if self.full_resync_required {
            self.must.clear();
            self.background.clear();
            self.dataplane.clear();
            self.delete_failed.clear();
            let listed = self.list_names(stats)?;
            self.sweep_missing(&listed);
            self.must.extend(listed);
            self.bg_resync_requested = false;
        } else if self.bg_resync_requested {
            let listed = self.list_names(stats)?;
            self.sweep_missing(&listed);
            for n in listed {
                if !self.must.contains(&n) && !self.background.contains(&n) {
                    self.background.push_back(n);
                }
            }
            self.bg_resync_requested = false;
        }
        while let Some(name) = self.must.pop_first() {
            if let Err(e) = self.resync_set(&name, stats) {
                self.must.insert(name);
                return Err(e);
            }
        }
        let mut last = self.opts.retry.now();
        while !budget.is_zero() {
            let Some(name) = self.background.pop_front() else {
                break;
            };
            if let Err(e) = self.resync_set(&name, stats) {
                self.must.insert(name);
                return Err(e);
            }
            let now = self.opts.retry.now();
            *budget = budget.saturating_sub(now.saturating_duration_since(last));
            last = now;
        }
        Ok(())
    }

    /// Destroys leftover temporary sets (never referenced by rules).
    fn delete_temp_sets(&mut self) {
        let temps: Vec<String> = self
            .dataplane
            .keys()
            .filter(|n| self.cfg.is_temp_ipset(n))
            .cloned()
            .collect();
        for t in temps {
            if self
                .cmds
                .run("ipset-destroy", "ipset", &["destroy", &t], None)
                .is_ok()
            {
                self.dataplane.remove(&t);
            }
        }
    }

    fn try_updates(
        &mut self,
        dirty: &[String],
        stats: &mut IpSetsStats,
    ) -> Result<(), KernelError> {
        if dirty.is_empty() {
            return Ok(());
        }
        let fam = self.cfg.family();
        // Sized for every member line up front: growing a script of tens
        // of MiB by doubling copies it and faults in fresh pages each time.
        let estimate: usize = dirty
            .iter()
            .filter_map(|n| self.desired.get(n))
            .map(|d| (d.members.len() + 2) * line_len_hint(d))
            .sum();
        let mut script = String::with_capacity(estimate);
        let mut new_dp: Vec<(String, Dp)> = Vec::new();
        let mut local = IpSetsStats::default();
        for name in dirty {
            // Borrowed, not cloned: at start of day these are every member
            // of every set.
            let Some(d) = self.desired.get(name) else {
                continue;
            };
            let dp = self.dataplane.get(name);
            let create = |s: &mut String, target: &str| {
                let _ = writeln!(
                    s,
                    "create {target} {} family {fam} hashsize {} maxelem {}",
                    d.set_type.as_str(),
                    hash_size_for(d.members.len()),
                    d.max_size
                );
            };
            match dp {
                None => {
                    create(&mut script, name);
                    local.sets_created += 1;
                    for m in d.members.iter() {
                        let _ = writeln!(script, "add {name} {m}");
                        local.member_lines += 1;
                    }
                }
                Some(Dp {
                    meta: Some(meta),
                    members: Some(cur),
                }) if *meta == (d.set_type, d.max_size) => {
                    // Adds only: extra members go in `apply_deletions`, after the tables.
                    for m in d.members.difference(cur.as_ref()) {
                        let _ = writeln!(script, "add {name} {m}");
                        local.member_lines += 1;
                    }
                    if !cur.is_subset(&d.members) {
                        let mut union = BTreeSet::clone(cur);
                        union.extend(d.members.iter().cloned());
                        new_dp.push((
                            name.clone(),
                            Dp {
                                meta: Some(*meta),
                                members: Some(Arc::new(union)),
                            },
                        ));
                        continue;
                    }
                }
                Some(Dp {
                    meta: Some((old_type, _)),
                    ..
                }) if *old_type != d.set_type => {
                    // Sets of different types cannot be swapped; the set
                    // must be unreferenced for this to succeed (calc-graph
                    // IDs encode the type, so this only follows a bug or a
                    // foreign set squatting on our name).
                    let _ = writeln!(script, "destroy {name}");
                    create(&mut script, name);
                    local.sets_created += 1;
                    for m in d.members.iter() {
                        let _ = writeln!(script, "add {name} {m}");
                        local.member_lines += 1;
                    }
                }
                Some(old) => {
                    let temp = loop {
                        let n = self.cfg.name_for_temp_ipset(self.next_temp);
                        self.next_temp += 1;
                        if !self.dataplane.contains_key(&n) {
                            break n;
                        }
                    };
                    create(&mut script, &temp);
                    for m in d.members.iter() {
                        let _ = writeln!(script, "add {temp} {m}");
                        local.member_lines += 1;
                    }
                    let _ = writeln!(script, "swap {name} {temp}");
                    local.sets_swapped += 1;
                    // After the swap the temp set holds the old contents.
                    new_dp.push((temp, old.clone()));
                }
            }
            new_dp.push((
                name.clone(),
                Dp {
                    meta: Some((d.set_type, d.max_size)),
                    members: Some(d.members.clone()),
                },
            ));
        }
        script.push_str("COMMIT\n");
        crate::dataplane::metrics::report_ipset_lines(
            self.cmds.seam().shared().metrics(),
            script.lines().count(),
        );
        self.cmds.run_owned(
            "ipset-restore",
            "ipset",
            &["restore"],
            Some(script.into_bytes()),
        )?;
        stats.restores += 1;
        stats.sets_created += local.sets_created;
        stats.sets_swapped += local.sets_swapped;
        stats.member_lines += local.member_lines;
        self.dataplane.extend(new_dp);
        Ok(())
    }

    /// Creates and updates sets (never deletes main sets). Call before the
    /// `*tables` apply.
    pub fn apply_updates(&mut self) -> Result<IpSetsStats, IpSetsError> {
        let mut stats = IpSetsStats::default();
        let mut backoff = self.opts.retry.backoff();
        let max_attempts = self.opts.retry.max_retries.saturating_add(1);
        let mut budget = self.opts.background_budget;
        let mut last_err = None;
        for attempt in 0..max_attempts {
            if attempt > 0 {
                stats.retries += 1;
                self.opts.retry.wait(&mut backoff);
            }
            let transient = attempt < max_attempts / 2;
            if self.full_resync_required
                || self.bg_resync_requested
                || !self.must.is_empty()
                || !self.background.is_empty()
            {
                if let Err(e) = self.try_resync(&mut stats, &mut budget) {
                    // Never write before the must tier is drained (a, c).
                    tracing::warn!(error = %e, "ip set resync failed; retrying");
                    last_err = Some(e);
                    continue;
                }
                self.full_resync_required = false;
            }
            self.delete_temp_sets();
            // Only caller-touched sets are compared unless a resync changed
            // our knowledge of the kernel: comparing every member of every
            // set on each apply costs more than the write itself at scale.
            let dirty = self.sets_to_write();
            match self.try_updates(&dirty, &mut stats) {
                Ok(()) => {
                    let shrink = self.sets_to_shrink();
                    self.shrink.extend(shrink);
                    self.dirty.clear();
                    self.check_all = false;
                    crate::dataplane::metrics::report_ipsets(
                        self.cmds.seam().shared().metrics(),
                        self.cfg.ip_version(),
                        self.desired.len(),
                        Some(self.foreign_sets + self.dataplane.len()),
                    );
                    return Ok(stats);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ip set update failed; retrying");
                    if transient {
                        // Re-read exactly the sets we failed to write (c).
                        for n in &dirty {
                            if self.dataplane.contains_key(n) {
                                self.must.insert(n.clone());
                            }
                        }
                        // A set we thought absent may exist: re-list names.
                        self.bg_resync_requested = true;
                    } else {
                        self.full_resync_required = true;
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(IpSetsError::GaveUp {
            ipv: self.cfg.ip_version().number(),
            attempts: max_attempts,
            source: last_err.unwrap_or_else(|| KernelError::Failed {
                op: "ipset-restore".into(),
                command: "ipset".into(),
                status: None,
                stderr: "no attempts made".into(),
            }),
        })
    }

    /// Removes the members desired sets no longer want (one `ipset restore`, not rate
    /// limited), then destroys up to `max_deletions_per_iteration` undesired sets. Call after
    /// the `*tables` apply. Returns true if the caller should call again soon (more deletions
    /// pending or resync work queued); upstream reschedules no sooner than 100ms.
    ///
    /// # Errors
    /// The member removals' restore failed: the sets it touched are re-read before they are
    /// written again (invariant c) and the removals stay pending.
    pub fn apply_deletions(&mut self) -> Result<bool, IpSetsError> {
        self.remove_extra_members()?;
        let mut done = 0;
        for name in self.pending_deletions() {
            if done >= self.opts.max_deletions_per_iteration {
                break;
            }
            match self
                .cmds
                .run("ipset-destroy", "ipset", &["destroy", &name], None)
            {
                Ok(_) => {
                    self.dataplane.remove(&name);
                    self.must.remove(&name);
                    self.background.retain(|n| n != &name);
                    done += 1;
                }
                Err(e) if e.stderr().contains("does not exist") => {
                    self.dataplane.remove(&name);
                }
                Err(e) => {
                    tracing::warn!(set = %name, error = %e, "failed to destroy ip set; will retry after a resync");
                    self.delete_failed.insert(name);
                }
            }
        }
        Ok(!self.background.is_empty()
            || !self.must.is_empty()
            || (done > 0 && self.has_pending_deletions()))
    }

    /// Writes the deferred member removals of the sets in `shrink`.
    fn remove_extra_members(&mut self) -> Result<(), IpSetsError> {
        let mut script = String::new();
        let mut done: Vec<(String, Arc<BTreeSet<String>>)> = Vec::new();
        for name in std::mem::take(&mut self.shrink) {
            let (Some(d), Some(cur)) = (
                self.desired.get(&name),
                self.dataplane.get(&name).and_then(|dp| dp.members.as_ref()),
            ) else {
                continue;
            };
            let before = script.len();
            for m in cur.difference(d.members.as_ref()) {
                let _ = writeln!(script, "del {name} {m} --exist");
            }
            if script.len() > before {
                done.push((name, d.members.clone()));
            }
        }
        if done.is_empty() {
            return Ok(());
        }
        script.push_str("COMMIT\n");
        crate::dataplane::metrics::report_ipset_lines(
            self.cmds.seam().shared().metrics(),
            script.lines().count(),
        );
        match self.cmds.run_owned(
            "ipset-restore",
            "ipset",
            &["restore"],
            Some(script.into_bytes()),
        ) {
            Ok(_) => {
                for (name, members) in done {
                    if let Some(dp) = self.dataplane.get_mut(&name) {
                        dp.members = Some(members);
                    }
                }
                Ok(())
            }
            Err(e) => {
                for (name, _) in done {
                    self.must.insert(name.clone());
                    self.shrink.insert(name);
                }
                Err(IpSetsError::GaveUp {
                    ipv: self.cfg.ip_version().number(),
                    attempts: 1,
                    source: e,
                })
            }
        }
    }
}

/// Bytes of one `add <name> <member>` line of `d`, for presizing: a
/// member's length plus the longest name (`cali40s:` + 23), the verb,
/// spaces and some slack.
fn line_len_hint(d: &Desired) -> usize {
    let member = d.members.iter().next().map_or(16, String::len);
    member + 44
}
