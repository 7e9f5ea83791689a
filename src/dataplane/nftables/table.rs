//! [`NftablesTable`]: reconciles our own nftables table (`calico` in family
//! `ip` or `ip6`) with the desired chains, base-chain rules and sets.
//!
//! Invariants:
//! - Everything in our table is ours: chains and sets that are not desired
//!   are deleted when kernel state is read back (the first apply reads back;
//!   only our table is ever listed, never the whole ruleset).
//! - One apply is one `nft -f -` transaction; a chain whose rule hashes
//!   match the kernel is not touched; a changed chain is flushed and
//!   re-added; set membership changes are element deltas.
//! - After `rebuild_after_failures` consecutive failed transactions the
//!   next attempt deletes and re-adds the table and everything in it in a
//!   single transaction, so a failed rebuild leaves the old table in place.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::dataplane::generictables::attempts::{apply_with_retries, Attempt, RetriedTable};
use crate::dataplane::generictables::quarantine::{
    dry_run_verdict, find_rejected, quarantine_found, refused_candidates, HoldsQuarantine,
    Quarantined, RejectedChain,
};
use crate::dataplane::generictables::{
    Action, ApplyStats, Chain, Rule, Table, TableError, RULE_HASH_PREFIX,
};
use crate::dataplane::kernel::{Commands, KernelError, RetryPolicy};
use crate::dataplane::IpVersion;

use super::json::{parse_table, ActualSet, NftState};
use super::render::{legalize_set_name, NftRenderer};
use super::sets::{
    canonical_member, canonical_member_owned, element, in_element_order, kernel_members, NftSetKind,
};

/// nftables address family of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NftFamily {
    /// `ip`
    Ip,
    /// `ip6`
    Ip6,
}

impl NftFamily {
    /// The family for an IP version.
    pub fn for_version(ipv: IpVersion) -> Self {
        match ipv {
            IpVersion::V4 => NftFamily::Ip,
            IpVersion::V6 => NftFamily::Ip6,
        }
    }
    /// `ip` or `ip6`.
    pub fn name(self) -> &'static str {
        match self {
            NftFamily::Ip => "ip",
            NftFamily::Ip6 => "ip6",
        }
    }
}

/// A base chain of our table: hook, chain type and priority, as upstream
/// lays them out (so that they order correctly against kube-proxy's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    /// Chain name, e.g. `filter-INPUT`.
    pub name: &'static str,
    /// Netfilter hook.
    pub hook: &'static str,
    /// Chain type (`filter`, `nat`, `route`).
    pub kind: &'static str,
    /// Priority.
    pub priority: i32,
}

const BASE_CHAINS: &[BaseChain] = &[
    BaseChain {
        name: "filter-INPUT",
        hook: "input",
        kind: "filter",
        priority: 0,
    },
    BaseChain {
        name: "filter-FORWARD",
        hook: "forward",
        kind: "filter",
        priority: 0,
    },
    BaseChain {
        name: "filter-OUTPUT",
        hook: "output",
        kind: "filter",
        priority: 0,
    },
    BaseChain {
        name: "nat-PREROUTING",
        hook: "prerouting",
        kind: "nat",
        priority: -100,
    },
    BaseChain {
        name: "nat-INPUT",
        hook: "input",
        kind: "nat",
        priority: -100,
    },
    BaseChain {
        name: "nat-OUTPUT",
        hook: "output",
        kind: "nat",
        priority: 110,
    },
    BaseChain {
        name: "nat-POSTROUTING",
        hook: "postrouting",
        kind: "nat",
        priority: 110,
    },
    BaseChain {
        name: "mangle-PREROUTING",
        hook: "prerouting",
        kind: "filter",
        priority: -150,
    },
    BaseChain {
        name: "mangle-INPUT",
        hook: "input",
        kind: "filter",
        priority: -150,
    },
    BaseChain {
        name: "mangle-FORWARD",
        hook: "forward",
        kind: "filter",
        priority: -150,
    },
    BaseChain {
        name: "mangle-OUTPUT",
        hook: "output",
        kind: "route",
        priority: -150,
    },
    BaseChain {
        name: "mangle-POSTROUTING",
        hook: "postrouting",
        kind: "filter",
        priority: -150,
    },
    BaseChain {
        name: "raw-PREROUTING",
        hook: "prerouting",
        kind: "filter",
        priority: -300,
    },
    BaseChain {
        name: "raw-OUTPUT",
        hook: "output",
        kind: "filter",
        priority: -300,
    },
];

/// The base chain called `name`, if it is one of ours.
pub fn base_chain(name: &str) -> Option<BaseChain> {
    BASE_CHAINS.iter().copied().find(|b| b.name == name)
}

/// What the table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NftablesMode {
    /// Program the desired state.
    Program,
    /// Delete our table if present (iptables mode), paced by the refresh
    /// interval; never terminates.
    CleanupOnly,
}

/// Tunables; `Default` gives upstream-like values.
#[derive(Clone)]
pub struct NftablesOptions {
    /// Our table's name (`calico`).
    pub table_name: String,
    /// Hash comment prefix (`cali:`).
    pub hash_prefix: String,
    /// Retries after a failed transaction, backoff, sleep and clock.
    pub retry: RetryPolicy,
    /// Consecutive failures after which the table is rebuilt.
    pub rebuild_after_failures: u32,
    /// Pacing of [`NftablesMode::CleanupOnly`].
    pub refresh_interval: Duration,
}

impl std::fmt::Debug for NftablesOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NftablesOptions")
            .field("table_name", &self.table_name)
            .field("retry", &self.retry)
            .field("rebuild_after_failures", &self.rebuild_after_failures)
            .finish_non_exhaustive()
    }
}

impl Default for NftablesOptions {
    fn default() -> Self {
        NftablesOptions {
            table_name: "calico".into(),
            hash_prefix: RULE_HASH_PREFIX.into(),
            retry: RetryPolicy::default(),
            rebuild_after_failures: 5,
            refresh_interval: Duration::from_secs(90),
        }
    }
}

struct DChain {
    rules: Vec<Rule>,
    hashes: Vec<String>,
    base: Option<BaseChain>,
    /// Set while the kernel refuses this content: what is programmed instead.
    quarantine: Option<Quarantined>,
}

impl HoldsQuarantine for DChain {
    fn quarantine_mut(&mut self) -> &mut Option<Quarantined> {
        &mut self.quarantine
    }
    fn is_quarantined(&self) -> bool {
        self.quarantine.is_some()
    }
}

impl DChain {
    /// The rules and hashes programmed for this chain.
    fn live(&self) -> (&[Rule], &[String]) {
        match &self.quarantine {
            Some(q) => (&q.rules, &q.hashes),
            None => (&self.rules, &self.hashes),
        }
    }
}

struct DSet {
    kind: NftSetKind,
    members: BTreeSet<String>,
}

/// Changes to our picture of the kernel once a plan has been written
/// (`None` removes the object), applied in place.
#[derive(Default)]
struct StateUpdates {
    chains: Vec<(String, Option<Vec<Option<String>>>)>,
    sets: Vec<(String, SetUpdate)>,
}

/// What a written plan did to one set of our picture of the kernel.
enum SetUpdate {
    /// The set now is exactly this.
    Replace(ActualSet),
    /// Members added to and removed from a set whose members we knew: a
    /// delta costs in proportion to the change, not to the set.
    Delta {
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// The set is gone.
    Remove,
}

impl StateUpdates {
    fn apply_to(self, st: &mut NftState) {
        for (n, c) in self.chains {
            match c {
                Some(c) => {
                    st.chains.insert(n, c);
                }
                None => {
                    st.chains.remove(&n);
                }
            }
        }
        for (n, v) in self.sets {
            match v {
                SetUpdate::Replace(v) => {
                    st.sets.insert(n, v);
                }
                SetUpdate::Delta { added, removed } => {
                    // Planned against this very state, so the members are
                    // known; anything else forgets them (a later apply
                    // then rewrites the set in full).
                    match st.sets.get_mut(&n).and_then(|a| a.members.as_mut()) {
                        Some(m) => {
                            for r in &removed {
                                m.remove(r);
                            }
                            m.extend(added);
                        }
                        None => {
                            st.sets.remove(&n);
                        }
                    }
                }
                SetUpdate::Remove => {
                    st.sets.remove(&n);
                }
            }
        }
    }
}

struct Plan {
    script: String,
    updates: StateUpdates,
    stats: ApplyStats,
}

/// Elements per `add element` line.
const ELEMENT_BATCH: usize = 1000;

/// Our nftables table (`calico` in family `ip` or `ip6`): the chains of all four layers, the
/// base chains hooking them, and the IP sets.
///
/// # API model
/// Declarative, as [`crate::dataplane::generictables::Table`]: chains, inserted rules and sets
/// are recorded by setters; [`Table::apply`](crate::dataplane::generictables::Table::apply)
/// reconciles; `queue_resync` makes the next apply read the table back.
///
/// # Design
/// One apply is one `nft -f -` transaction (served in process by libnftables when possible):
/// a chain whose rule hashes match the kernel is left alone, a changed chain is flushed and
/// re-added, set membership changes are element deltas (CIDR sets hold only members no other
/// member covers, so a single-member delete always names an element the kernel holds).
///
/// # Identification of our state
/// Everything in our table is ours: undesired chains and sets are deleted on read-back. Only
/// our table is ever listed, never the whole ruleset.
///
/// # Retry policy
/// A refused transaction is retried within the apply with the shared retry policy, re-reading
/// the table first; after a refusal the policy and profile chains it wrote are dry-run alone
/// (`nft -c`) and a chain refused on its own is programmed as drop-everything; after
/// `rebuild_after_failures` consecutive failures the next attempt deletes and re-adds the whole
/// table in the same transaction, so a failed rebuild leaves the old table in place.
///
/// # Thread safety
/// Not shared: owned by one driver actor, called from one thread at a time (`&mut self`).
pub struct NftablesTable {
    ipv: IpVersion,
    family: NftFamily,
    mode: NftablesMode,
    cmds: Commands,
    opts: NftablesOptions,
    renderer: NftRenderer,
    chains: BTreeMap<String, DChain>,
    sets: BTreeMap<String, DSet>,
    actual: Option<NftState>,
    dirty_chains: BTreeSet<String>,
    dirty_sets: BTreeSet<String>,
    consecutive_failures: u32,
    next_cleanup: Option<Instant>,
    /// Policy and profile chains the last refused transaction wrote: the
    /// candidates for [`RetriedTable::quarantine_rejected`].
    refused: Vec<String>,
}

impl std::fmt::Debug for NftablesTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NftablesTable")
            .field("family", &self.family)
            .field("table", &self.opts.table_name)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl NftablesTable {
    /// Our table for `ipv`.
    pub fn new(ipv: IpVersion, mode: NftablesMode, cmds: Commands, opts: NftablesOptions) -> Self {
        NftablesTable {
            ipv,
            family: NftFamily::for_version(ipv),
            mode,
            renderer: NftRenderer::new(ipv, &opts.hash_prefix),
            cmds,
            opts,
            chains: BTreeMap::new(),
            sets: BTreeMap::new(),
            actual: None,
            dirty_chains: BTreeSet::new(),
            dirty_sets: BTreeSet::new(),
            consecutive_failures: 0,
            next_cleanup: None,
            refused: Vec::new(),
        }
    }

    /// The renderer this table uses.
    pub fn renderer(&self) -> &NftRenderer {
        &self.renderer
    }

    /// Consecutive failed transactions so far.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Sets the full membership of an IP set (by calc-graph kernel name,
    /// e.g. `cali40s:abc`; legalised for nft). Members that do not parse or
    /// are of the other family are dropped.
    pub fn set_ip_set(
        &mut self,
        name: &str,
        kind: NftSetKind,
        members: impl IntoIterator<Item = String>,
    ) {
        let mut dropped = 0usize;
        let members: BTreeSet<String> = members
            .into_iter()
            .filter_map(|m| {
                let c = canonical_member_owned(kind, self.ipv, m);
                dropped += usize::from(c.is_none());
                c
            })
            .collect();
        if dropped > 0 {
            tracing::debug!(set = name, dropped, "dropping unusable set members");
        }
        let legal = legalize_set_name(name);
        if self
            .sets
            .get(&legal)
            .is_some_and(|s| s.kind == kind && s.members == members)
        {
            return;
        }
        self.dirty_sets.insert(legal.clone());
        self.sets.insert(legal, DSet { kind, members });
    }

    /// Adds members to an existing desired set (no-op if unknown).
    pub fn add_ip_set_members(&mut self, name: &str, members: impl IntoIterator<Item = String>) {
        let legal = legalize_set_name(name);
        let ipv = self.ipv;
        if let Some(s) = self.sets.get_mut(&legal) {
            let kind = s.kind;
            s.members.extend(
                members
                    .into_iter()
                    .filter_map(|m| canonical_member_owned(kind, ipv, m)),
            );
            self.dirty_sets.insert(legal);
        }
    }

    /// Removes members from an existing desired set (no-op if unknown).
    pub fn remove_ip_set_members(&mut self, name: &str, members: impl IntoIterator<Item = String>) {
        let legal = legalize_set_name(name);
        let ipv = self.ipv;
        if let Some(s) = self.sets.get_mut(&legal) {
            let kind = s.kind;
            for m in members {
                if let Some(c) = canonical_member(kind, ipv, &m) {
                    s.members.remove(&c);
                }
            }
            self.dirty_sets.insert(legal);
        }
    }

    /// Removes a set (deleted at the next apply; callers must first stop
    /// referencing it).
    pub fn remove_ip_set(&mut self, name: &str) {
        let legal = legalize_set_name(name);
        if self.sets.remove(&legal).is_some() {
            self.dirty_sets.insert(legal);
        }
    }

    fn desc(&self) -> String {
        format!("{} {}", self.family.name(), self.opts.table_name)
    }

    /// Our table as `nft -j list table` gives it, or `None` when it does not exist (nft
    /// then fails at once, without fetching the rest of the namespace).
    fn list_own_table(&self) -> Result<Option<String>, TableError> {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        match self.cmds.run(
            "nft-list-table",
            "nft",
            &["-j", "list", "table", fam, t],
            None,
        ) {
            Ok(out) => Ok(Some(out.stdout)),
            Err(e) if e.stderr().contains("No such file or directory") => Ok(None),
            Err(source) => Err(TableError::ReadBack {
                table: self.desc(),
                source,
            }),
        }
    }

    fn read_back(&self) -> Result<NftState, TableError> {
        let Some(listing) = self.list_own_table()? else {
            return Ok(NftState::default());
        };
        parse_table(&listing, self.ipv, &self.opts.hash_prefix).map_err(|detail| {
            TableError::Parse {
                table: self.desc(),
                detail,
            }
        })
    }

    fn chain_decl(&self, name: &str, base: Option<BaseChain>) -> String {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        match base {
            Some(b) => format!(
                "add chain {fam} {t} {name} {{ type {} hook {} priority {}; policy accept; }}",
                b.kind, b.hook, b.priority
            ),
            None => format!("add chain {fam} {t} {name}"),
        }
    }

    /// `add set` for a new set, its members inline.
    fn set_declaration(&self, set: &str, kind: NftSetKind, members: &BTreeSet<String>) -> String {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        let decl = kind.declaration(self.ipv);
        if members.is_empty() {
            return format!("add set {fam} {t} {set} {{ {decl} }}");
        }
        let mut line = format!("add set {fam} {t} {set} {{ {decl} elements = {{ ");
        for (i, m) in in_element_order(kind, members).into_iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            line.push_str(&element(kind, m));
        }
        line.push_str(" }; }");
        line
    }

    fn element_lines(
        &self,
        verb: &str,
        set: &str,
        kind: NftSetKind,
        members: &[&String],
        out: &mut Vec<String>,
    ) {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        let members = in_element_order(kind, members.iter().copied());
        for chunk in members.chunks(ELEMENT_BATCH) {
            let elems: Vec<String> = chunk.iter().map(|m| element(kind, m)).collect();
            out.push(format!(
                "{verb} element {fam} {t} {set} {{ {} }}",
                elems.join(", ")
            ));
        }
    }

    fn plan(&self, actual: &NftState, full: bool, rebuild: bool) -> Plan {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        let empty = NftState::default();
        let actual = if rebuild { &empty } else { actual };
        let mut stats = ApplyStats::default();
        let mut updates = StateUpdates::default();
        let (
            mut add_chains,
            mut flush_chains,
            mut del_sets,
            mut set_ops,
            mut add_rules,
            mut del_chains,
        ) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );

        let all = full || rebuild;
        let set_candidates: BTreeSet<String> = if all {
            self.sets
                .keys()
                .chain(actual.sets.keys())
                .cloned()
                .collect()
        } else {
            self.dirty_sets.clone()
        };
        let mut recreated_sets = BTreeSet::new();
        for name in &set_candidates {
            match (self.sets.get(name), actual.sets.get(name)) {
                (Some(d), a) => {
                    let recreate = a.is_some_and(|a| a.kind != Some(d.kind));
                    if recreate {
                        del_sets.push(format!("delete set {fam} {t} {name}"));
                        recreated_sets.insert(name.clone());
                    }
                    // What the kernel is to hold (covered CIDRs left out).
                    let want = kernel_members(d.kind, &d.members);
                    let replace = || {
                        SetUpdate::Replace(ActualSet {
                            kind: Some(d.kind),
                            members: Some(want.clone().into_owned()),
                        })
                    };
                    let update = match a {
                        Some(a) if !recreate => match &a.members {
                            Some(cur) => {
                                let removed: Vec<&String> = cur.difference(&want).collect();
                                let added: Vec<&String> = want.difference(cur).collect();
                                self.element_lines("delete", name, d.kind, &removed, &mut set_ops);
                                self.element_lines("add", name, d.kind, &added, &mut set_ops);
                                // Not recreated: the kind is already right.
                                SetUpdate::Delta {
                                    added: added.into_iter().cloned().collect(),
                                    removed: removed.into_iter().cloned().collect(),
                                }
                            }
                            None => {
                                set_ops.push(format!("flush set {fam} {t} {name}"));
                                let all: Vec<&String> = want.iter().collect();
                                self.element_lines("add", name, d.kind, &all, &mut set_ops);
                                replace()
                            }
                        },
                        _ => {
                            // A new set carries its members in its
                            // declaration: nft builds it in one go, about 40%
                            // faster than the same members as `add element`
                            // commands (measured at 50 interval sets of
                            // 10,000).
                            set_ops.push(self.set_declaration(name, d.kind, &want));
                            replace()
                        }
                    };
                    updates.sets.push((name.clone(), update));
                }
                (None, Some(_)) => {
                    del_sets.push(format!("delete set {fam} {t} {name}"));
                    updates.sets.push((name.clone(), SetUpdate::Remove));
                }
                (None, None) => {}
            }
        }

        let mut chain_candidates: BTreeSet<String> = if all {
            self.chains
                .keys()
                .chain(actual.chains.keys())
                .cloned()
                .collect()
        } else {
            self.dirty_chains.clone()
        };
        // Chains referencing a recreated set must be re-added after it.
        // (Scanning every rule is skipped in the common case: a delta
        // apply must not cost time proportional to the whole ruleset.)
        let references_recreated = |c: &DChain| {
            !recreated_sets.is_empty()
                && c.live().0.iter().any(|r| {
                    r.match_criteria
                        .ip_set_names()
                        .iter()
                        .any(|s| recreated_sets.contains(&legalize_set_name(s)))
                })
        };
        if !recreated_sets.is_empty() {
            for (name, c) in &self.chains {
                if references_recreated(c) {
                    chain_candidates.insert(name.clone());
                }
            }
        }
        for name in &chain_candidates {
            match (self.chains.get(name), actual.chains.get(name)) {
                (Some(d), a) => {
                    let (rules, hashes) = d.live();
                    let want: Vec<Option<String>> = hashes.iter().cloned().map(Some).collect();
                    let references_recreated = references_recreated(d);
                    match a {
                        None => {
                            add_chains.push(self.chain_decl(name, d.base));
                            stats.chains_created += 1;
                        }
                        Some(a) if *a == want && !references_recreated => continue,
                        Some(a) => {
                            flush_chains.push(format!("flush chain {fam} {t} {name}"));
                            stats.rules_deleted += a.len();
                        }
                    }
                    for (rule, hash) in rules.iter().zip(hashes) {
                        add_rules.push(self.renderer.add_rule(fam, t, name, hash, rule));
                        stats.rules_written += 1;
                    }
                    updates.chains.push((name.clone(), Some(want)));
                }
                (None, Some(a)) => {
                    if !a.is_empty() {
                        flush_chains.push(format!("flush chain {fam} {t} {name}"));
                    }
                    del_chains.push(format!("delete chain {fam} {t} {name}"));
                    stats.rules_deleted += a.len();
                    stats.chains_deleted += 1;
                    updates.chains.push((name.clone(), None));
                }
                (None, None) => {}
            }
        }

        let mut lines = Vec::new();
        let has_work = rebuild
            || !(add_chains.is_empty()
                && flush_chains.is_empty()
                && del_sets.is_empty()
                && set_ops.is_empty()
                && add_rules.is_empty()
                && del_chains.is_empty());
        if has_work {
            lines.push(format!("add table {fam} {t}"));
            if rebuild {
                lines.push(format!("delete table {fam} {t}"));
                lines.push(format!("add table {fam} {t}"));
            }
            for group in [
                add_chains,
                flush_chains,
                del_sets,
                set_ops,
                add_rules,
                del_chains,
            ] {
                lines.extend(group);
            }
        }
        let mut script = lines.join("\n");
        if !script.is_empty() {
            script.push('\n');
        }
        Plan {
            script,
            updates,
            stats,
        }
    }

    fn run_script(&self, script: &str) -> Result<(), KernelError> {
        self.cmds
            .run("nft-apply", "nft", &["-f", "-"], Some(script.as_bytes()))
            .map(|_| ())
    }

    fn apply_program(&mut self) -> Result<ApplyStats, TableError> {
        apply_with_retries(self)
    }

    fn apply_cleanup(&mut self) -> Result<ApplyStats, TableError> {
        let now = self.opts.retry.now();
        if self.next_cleanup.is_some_and(|t| now < t) {
            return Ok(ApplyStats::default());
        }
        self.next_cleanup = Some(now + self.opts.refresh_interval);
        if !self.cmds.program_exists("nft") {
            return Ok(ApplyStats::default());
        }
        let fam = self.family.name();
        let t = self.opts.table_name.clone();
        // Our one table, not `nft list tables`: nft 1.0.6 fetches every rule of the namespace
        // for the latter (2.9 s with iptables-nft's 72,000 rules loaded).
        if self.list_own_table()?.is_none() {
            return Ok(ApplyStats {
                read_backs: 1,
                ..Default::default()
            });
        }
        self.cmds
            .run(
                "nft-delete-table",
                "nft",
                &["delete", "table", fam, &t],
                None,
            )
            .map_err(|source| TableError::GaveUp {
                table: self.desc(),
                attempts: 1,
                source,
            })?;
        Ok(ApplyStats {
            read_backs: 1,
            transactions: 1,
            chains_deleted: 1,
            ..Default::default()
        })
    }

    fn set_chain_inner(&mut self, chain: Chain, base: Option<BaseChain>) {
        let hashes = self.renderer.hashes(&chain.name, &chain.rules);
        if self
            .chains
            .get(&chain.name)
            .is_some_and(|d| d.hashes == hashes && d.base == base)
        {
            return;
        }
        if let Some(q) = self
            .chains
            .get(&chain.name)
            .and_then(|d| d.quarantine.as_ref())
        {
            tracing::info!(table = %self.desc(), chain = %chain.name, refused = %q.message.trim(), "refused chain changed; retrying it");
        }
        self.dirty_chains.insert(chain.name.clone());
        self.chains.insert(
            chain.name,
            DChain {
                rules: chain.rules,
                hashes,
                base,
                quarantine: None,
            },
        );
    }
}

impl RetriedTable for NftablesTable {
    fn describe(&self) -> String {
        self.desc()
    }

    fn kind(&self) -> &'static str {
        "nftables"
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.opts.retry.clone()
    }

    fn attempt(&mut self, total: &mut ApplyStats) -> Attempt {
        let rebuild = self.consecutive_failures >= self.opts.rebuild_after_failures;
        let full = self.actual.is_none();
        if !rebuild && self.actual.is_none() {
            total.read_backs += 1;
            match self.read_back() {
                Ok(a) => self.actual = Some(a),
                Err(e) => return Attempt::ReadFailed(e),
            }
        }
        let empty = NftState::default();
        let base = if rebuild {
            &empty
        } else {
            self.actual.as_ref().unwrap_or(&empty)
        };
        let plan = self.plan(base, full, rebuild);
        if !plan.script.is_empty() {
            if rebuild {
                tracing::warn!(table = %self.desc(), "rebuilding nftables table after repeated failures");
            }
            if let Err(e) = self.run_script(&plan.script) {
                self.refused = refused_candidates(
                    plan.updates.chains.iter().map(|(n, c)| (n, c.is_some())),
                    &self.chains,
                );
                return Attempt::WriteFailed(e);
            }
        }
        let stats = ApplyStats {
            transactions: usize::from(!plan.script.is_empty()),
            ..plan.stats
        };
        let mut state = if rebuild {
            NftState::default()
        } else {
            self.actual.take().unwrap_or_default()
        };
        plan.updates.apply_to(&mut state);
        self.actual = Some(state);
        self.dirty_chains.clear();
        self.dirty_sets.clear();
        self.consecutive_failures = 0;
        Attempt::Written(stats)
    }

    fn attempt_failed(&mut self) {
        self.consecutive_failures += 1;
        self.actual = None;
    }

    fn quarantine_rejected(&mut self, _err: &KernelError) -> usize {
        let candidates = std::mem::take(&mut self.refused);
        let found = find_rejected(&candidates, &mut |group: &[String]| self.dry_run(group));
        let desc = self.desc();
        let renderer = &self.renderer;
        let n = quarantine_found(
            &desc,
            found,
            &mut self.chains,
            &mut self.dirty_chains,
            |chain, rules| renderer.hashes(chain, rules),
        );
        if n > 0 {
            // The refusal was explained: no reason to rebuild the table.
            self.consecutive_failures = self.consecutive_failures.saturating_sub(1);
        }
        n
    }
}

impl NftablesTable {
    /// Dry-runs (`nft -c`) `group`'s desired chains on their own in our
    /// table, declaring the chains they jump to and the desired sets they
    /// reference; `Err` carries nft's message. Nothing is committed.
    fn dry_run(&self, group: &[String]) -> Result<(), String> {
        let fam = self.family.name();
        let t = &self.opts.table_name;
        let in_group: BTreeSet<&str> = group.iter().map(String::as_str).collect();
        let mut lines = vec![format!("add table {fam} {t}")];
        let mut rules = Vec::new();
        let mut targets = BTreeSet::new();
        let mut sets = BTreeSet::new();
        for name in group {
            let Some(d) = self.chains.get(name) else {
                continue;
            };
            lines.push(self.chain_decl(name, d.base));
            lines.push(format!("flush chain {fam} {t} {name}"));
            for (rule, hash) in d.rules.iter().zip(&d.hashes) {
                if let Action::Jump(c) | Action::Goto(c) = &rule.action {
                    if !in_group.contains(c.as_str()) {
                        targets.insert(c.clone());
                    }
                }
                for s in rule.match_criteria.ip_set_names() {
                    sets.insert(legalize_set_name(s));
                }
                rules.push(self.renderer.add_rule(fam, t, name, hash, rule));
            }
        }
        for c in targets {
            lines.push(self.chain_decl(&c, base_chain(&c)));
        }
        for name in sets {
            if let Some(d) = self.sets.get(&name) {
                lines.push(self.set_declaration(&name, d.kind, &BTreeSet::new()));
            }
        }
        lines.extend(rules);
        let mut script = lines.join("\n");
        script.push('\n');
        dry_run_verdict(self.cmds.run(
            "nft-check",
            "nft",
            &["-c", "-f", "-"],
            Some(script.as_bytes()),
        ))
    }
}

impl Table for NftablesTable {
    fn name(&self) -> String {
        self.desc()
    }

    fn rejected_chains(&self) -> Vec<RejectedChain> {
        self.chains
            .iter()
            .filter_map(|(n, d)| {
                d.quarantine.as_ref().map(|q| RejectedChain {
                    chain: n.clone(),
                    message: q.message.clone(),
                })
            })
            .collect()
    }

    fn ip_version(&self) -> IpVersion {
        self.ipv
    }

    fn set_chain(&mut self, chain: Chain) {
        if self.mode == NftablesMode::CleanupOnly {
            return;
        }
        let base = base_chain(&chain.name);
        self.set_chain_inner(chain, base);
    }

    fn remove_chain(&mut self, name: &str) {
        if self.chains.remove(name).is_some() {
            self.dirty_chains.insert(name.to_string());
        }
    }

    fn set_insert_rules(&mut self, kernel_chain: &str, rules: Vec<Rule>) {
        if self.mode == NftablesMode::CleanupOnly {
            return;
        }
        let Some(base) = base_chain(kernel_chain) else {
            tracing::warn!(
                chain = kernel_chain,
                "not a base chain of our nftables table; ignoring insert rules"
            );
            return;
        };
        if rules.is_empty() {
            self.remove_chain(kernel_chain);
        } else {
            self.set_chain_inner(Chain::new(kernel_chain, rules), Some(base));
        }
    }

    fn queue_resync(&mut self) {
        self.actual = None;
        if self.mode == NftablesMode::CleanupOnly {
            self.next_cleanup = None;
        }
    }

    fn apply(&mut self) -> Result<ApplyStats, TableError> {
        match self.mode {
            NftablesMode::Program => self.apply_program(),
            NftablesMode::CleanupOnly => self.apply_cleanup(),
        }
    }

    fn is_dirty(&self) -> bool {
        match self.mode {
            NftablesMode::Program => {
                self.actual.is_none()
                    || !self.dirty_chains.is_empty()
                    || !self.dirty_sets.is_empty()
            }
            NftablesMode::CleanupOnly => {
                self.next_cleanup.is_none_or(|t| self.opts.retry.now() >= t)
            }
        }
    }
}
