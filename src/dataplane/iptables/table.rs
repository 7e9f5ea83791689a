//! [`IptablesTable`]: reconciles one iptables table (per IP version) with
//! the desired chains and inserted rules.
//!
//! Invariants:
//! - Chains whose names start with one of our prefixes (`cali-`) are ours
//!   outright; any such chain that is not desired is swept when kernel state
//!   is read back (the first apply always reads back).
//! - In kernel chains we touch only rules carrying our hash comment (or
//!   jumping to one of our chains); ours sit together, in desired order, at
//!   the top ([`ChainInsertMode::Insert`]) or the bottom
//!   ([`ChainInsertMode::Append`]) of the chain. Hooks found anywhere else
//!   (e.g. after a mode change, or a foreign rule inserted above/appended
//!   below them) are deleted and rewritten at the right end.
//! - A rule whose hash matches the kernel's is never rewritten, so its
//!   counters survive; all writes of one apply are one `iptables-restore
//!   --noflush` transaction.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::dataplane::generictables::attempts::{apply_with_retries, Attempt, RetriedTable};
use crate::dataplane::generictables::quarantine::{
    dry_run_verdict, find_rejected, quarantine_found, refused_candidates, HoldsQuarantine,
    Quarantined, RejectedChain,
};
use crate::dataplane::generictables::{
    ApplyStats, Chain, Rule, Table, TableError, RULE_HASH_PREFIX,
};
use crate::dataplane::kernel::{Commands, KernelError, RetryPolicy};
use crate::dataplane::IpVersion;

use super::backend::{
    backend_binaries_present, find_best_binary, legacy_modules_loaded, ResolvedBackend,
};
use super::render::IptablesRenderer;
use super::save_parse::{parse_save, SavedRule, SavedTable};

/// What the table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesMode {
    /// Program the desired state.
    Program,
    /// Only remove our state (used on the backend we are not programming).
    /// Never panics; sweeps are paced by the refresh interval and a failed
    /// sweep is retried only at the next pacing point.
    CleanupOnly,
}

/// Where our hook rules go in the kernel's own chains (`ChainInsertMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChainInsertMode {
    /// At the top, before any foreign rule (`-I <chain> <n>`).
    #[default]
    Insert,
    /// At the bottom, after every foreign rule (`-A <chain>`).
    Append,
}

impl ChainInsertMode {
    /// True if `current` (a kernel chain as read back) holds exactly our
    /// `hashes`, in order, at the end this mode requires, and no other rule
    /// of ours anywhere else.
    pub fn hooks_in_place(self, current: &[SavedRule], hashes: &[String]) -> bool {
        let ours = current.iter().filter(|r| r.is_ours()).count();
        if ours != hashes.len() || hashes.len() > current.len() {
            return false;
        }
        let window = match self {
            ChainInsertMode::Insert => &current[..hashes.len()],
            ChainInsertMode::Append => &current[current.len() - hashes.len()..],
        };
        window
            .iter()
            .zip(hashes)
            .all(|(r, h)| r.hash.as_deref() == Some(h.as_str()))
    }

    /// The iptables-restore operation that writes the `index`-th (0-based)
    /// of our hooks into `chain`.
    pub fn hook_op(self, chain: &str, index: usize) -> String {
        match self {
            ChainInsertMode::Insert => format!("-I {chain} {}", index + 1),
            ChainInsertMode::Append => format!("-A {chain}"),
        }
    }
}

/// Tunables; `Default` gives upstream's values.
#[derive(Clone)]
pub struct IptablesOptions {
    /// Hash comment prefix (`cali:`).
    pub hash_prefix: String,
    /// Prefixes of chains we own (`cali-`).
    pub chain_prefixes: Vec<String>,
    /// Retries, backoff, sleep and clock.
    pub retry: RetryPolicy,
    /// xtables lock wait passed as `-w <secs>` (zero: do not wait).
    pub lock_timeout: Duration,
    /// Lock probe interval passed as `-W <usecs>`.
    pub lock_probe_interval: Duration,
    /// Pacing of sweeps in [`IptablesMode::CleanupOnly`].
    pub refresh_interval: Duration,
    /// Top or bottom of the kernel chains for our hooks.
    pub insert_mode: ChainInsertMode,
}

impl std::fmt::Debug for IptablesOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IptablesOptions")
            .field("chain_prefixes", &self.chain_prefixes)
            .field("retry", &self.retry)
            .field("lock_timeout", &self.lock_timeout)
            .field("refresh_interval", &self.refresh_interval)
            .field("insert_mode", &self.insert_mode)
            .finish_non_exhaustive()
    }
}

impl Default for IptablesOptions {
    fn default() -> Self {
        IptablesOptions {
            hash_prefix: RULE_HASH_PREFIX.into(),
            chain_prefixes: vec!["cali-".into()],
            retry: RetryPolicy::default(),
            lock_timeout: Duration::from_secs(10),
            lock_probe_interval: Duration::from_millis(50),
            refresh_interval: Duration::from_secs(90),
            insert_mode: ChainInsertMode::Insert,
        }
    }
}

struct Desired {
    rules: Vec<Rule>,
    hashes: Vec<String>,
    /// Set while the kernel refuses this content: what is programmed instead.
    quarantine: Option<Quarantined>,
}

impl HoldsQuarantine for Desired {
    fn quarantine_mut(&mut self) -> &mut Option<Quarantined> {
        &mut self.quarantine
    }
    fn is_quarantined(&self) -> bool {
        self.quarantine.is_some()
    }
}

/// What is programmed for a desired chain.
struct Live<'a> {
    rules: &'a [Rule],
    hashes: &'a [String],
}

impl Desired {
    fn new(rules: Vec<Rule>, hashes: Vec<String>) -> Self {
        Desired {
            rules,
            hashes,
            quarantine: None,
        }
    }

    fn live(&self) -> Live<'_> {
        match &self.quarantine {
            Some(q) => Live {
                rules: &q.rules,
                hashes: &q.hashes,
            },
            None => Live {
                rules: &self.rules,
                hashes: &self.hashes,
            },
        }
    }
}

/// One iptables table (`filter`, `nat`, `mangle` or `raw`) for one IP version and backend.
///
/// # API model
/// Declarative: callers set the desired contents of the chains we own and the rules we insert
/// into kernel chains ([`Table::set_chain`], [`Table::remove_chain`],
/// [`Table::set_insert_rules`]), which only records them; [`Table::apply`] reconciles the
/// kernel. [`Table::queue_resync`] makes the next apply read the kernel back first.
///
/// # Design
/// Every rule carries a hash of its intended content in a comment (`cali:<hash>`). An apply
/// diffs desired hashes against what it last read back and writes only the difference as one
/// `iptables-restore --noflush` transaction (delta scripts go to a long-lived
/// `iptables-nft-restore` process where available); an unchanged rule is never rewritten, so
/// its counters survive.
///
/// # Identification of our state
/// Chains named with our prefix (`cali-`) are ours outright and swept when undesired; in
/// kernel chains a rule is ours when it carries our hash comment or jumps to one of our
/// chains. Nothing else is touched. `IptablesMode::CleanupOnly` uses the same
/// identification to sweep the backend we are not programming.
///
/// # Retry policy
/// A refused transaction is retried within the apply (shared [`RetryPolicy`]: 1 ms doubling
/// to 1 s, 10 retries), re-reading the kernel first; after a refusal the policy and profile
/// chains it wrote are dry-run alone (`--test`) and a chain refused on its own is programmed as
/// drop-everything ([`crate::dataplane::generictables::quarantine`]). When retries run out the
/// apply returns [`TableError::GaveUp`] and the work stays pending for the next apply.
///
/// # Thread safety
/// Not shared: one driver actor owns it and calls it from one blocking-pool thread at a time
/// (`&mut self`).
pub struct IptablesTable {
    table: String,
    ipv: IpVersion,
    backend: ResolvedBackend,
    mode: IptablesMode,
    cmds: Commands,
    opts: IptablesOptions,
    renderer: IptablesRenderer,
    restore_cmd: Option<String>,
    save_cmd: Option<String>,
    chains: BTreeMap<String, Desired>,
    inserts: BTreeMap<String, Desired>,
    /// Kernel state as of the last read-back plus our successful writes;
    /// `None` forces a read-back before the next write.
    actual: Option<SavedTable>,
    dirty_chains: BTreeSet<String>,
    dirty_inserts: BTreeSet<String>,
    next_cleanup: Option<Instant>,
    /// Policy and profile chains the last refused transaction wrote: the
    /// candidates for [`RetriedTable::quarantine_rejected`].
    refused: Vec<String>,
}

impl std::fmt::Debug for IptablesTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IptablesTable")
            .field("table", &self.table)
            .field("ipv", &self.ipv)
            .field("backend", &self.backend)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// Scripts with at least this many commands, on the nft backend, ask
/// iptables for a whole-table cache (see [`whole_table_cache`]).
pub const WHOLE_TABLE_CACHE_MIN_COMMANDS: usize = 1_000;

/// Whether a restore script of `commands` commands, against a kernel table
/// holding `kernel_rules` rules, should make iptables-nft cache the whole
/// table rather than the chains the script names.
///
/// With `--noflush`, iptables-nft 1.8 collects every chain name a script
/// mentions in a sorted linked list, walked from its head for each command:
/// O(commands x chains), seconds at start of day.  A command that names no
/// chain (`-S`, which only prints) switches it to fetching the whole table
/// instead, which costs in proportion to what the kernel already holds.  So
/// the switch pays only for a big script against a table that is not bigger
/// than the script.  iptables-legacy always reads the whole table: never.
pub fn whole_table_cache(backend: ResolvedBackend, commands: usize, kernel_rules: usize) -> bool {
    backend == ResolvedBackend::Nft
        && commands >= WHOLE_TABLE_CACHE_MIN_COMMANDS
        && commands >= kernel_rules
}

/// Built-in chains of each table (they always exist, even if a dump omits them).
fn builtin_chains(table: &str) -> &'static [&'static str] {
    match table {
        "filter" => &["INPUT", "FORWARD", "OUTPUT"],
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        "raw" => &["PREROUTING", "OUTPUT"],
        _ => &[],
    }
}

/// Per-chain changes to our picture of the kernel once a plan has been
/// written (`None` removes the chain). Applied in place so a small change
/// never copies the whole table state.
type ChainUpdates = Vec<(String, Option<Vec<SavedRule>>)>;

fn apply_updates(actual: &mut SavedTable, updates: ChainUpdates) {
    for (name, rules) in updates {
        match rules {
            Some(r) => {
                actual.chains.insert(name, r);
            }
            None => {
                actual.chains.remove(&name);
            }
        }
    }
}

struct Plan {
    script: String,
    updates: ChainUpdates,
    stats: ApplyStats,
}

impl IptablesTable {
    /// A table driver. `cmds` carries the seam, hook and actor name.
    pub fn new(
        table: &str,
        ipv: IpVersion,
        backend: ResolvedBackend,
        mode: IptablesMode,
        cmds: Commands,
        opts: IptablesOptions,
    ) -> Self {
        let restore_cmd = find_best_binary(&cmds, ipv, backend, "restore");
        let save_cmd = find_best_binary(&cmds, ipv, backend, "save");
        IptablesTable {
            table: table.into(),
            ipv,
            backend,
            mode,
            renderer: IptablesRenderer::new(&opts.hash_prefix),
            cmds,
            opts,
            restore_cmd,
            save_cmd,
            chains: BTreeMap::new(),
            inserts: BTreeMap::new(),
            actual: None,
            dirty_chains: BTreeSet::new(),
            dirty_inserts: BTreeSet::new(),
            next_cleanup: None,
            refused: Vec::new(),
        }
    }

    /// The backend this table programs.
    pub fn backend(&self) -> ResolvedBackend {
        self.backend
    }

    /// The renderer (hashes and rule lines) this table uses.
    pub fn renderer(&self) -> &IptablesRenderer {
        &self.renderer
    }

    /// Hashes the kernel holds for a chain, as last read back or written
    /// (`None` if unknown).
    pub fn actual_hashes(&self, chain: &str) -> Option<Vec<Option<String>>> {
        let a = self.actual.as_ref()?;
        Some(
            a.chains
                .get(chain)?
                .iter()
                .map(|r| r.hash.clone())
                .collect(),
        )
    }

    fn is_our_chain(&self, name: &str) -> bool {
        self.opts
            .chain_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }

    fn desc(&self) -> String {
        format!(
            "{}/v{}/{}",
            self.table,
            self.ipv.number(),
            self.backend.mode()
        )
    }

    fn read_back(&self) -> Result<SavedTable, TableError> {
        let Some(save) = &self.save_cmd else {
            return Err(TableError::ReadBack {
                table: self.desc(),
                source: KernelError::Failed {
                    op: "iptables-save".into(),
                    command: format!(
                        "ip{}tables-save",
                        if self.ipv == IpVersion::V6 { "6" } else { "" }
                    ),
                    status: None,
                    stderr: "binary not found".into(),
                },
            });
        };
        let out = self
            .cmds
            .run("iptables-save", save, &["-t", &self.table], None)
            .map_err(|source| TableError::ReadBack {
                table: self.desc(),
                source,
            })?;
        parse_save(
            &out.stdout,
            &self.opts.hash_prefix,
            &self.opts.chain_prefixes,
        )
        .map_err(|e| TableError::Parse {
            table: self.desc(),
            detail: e.to_string(),
        })
    }

    fn ours_as_saved(hashes: &[String]) -> Vec<SavedRule> {
        hashes
            .iter()
            .map(|h| SavedRule {
                hash: Some(h.clone()),
                jumps_to_ours: false,
            })
            .collect()
    }

    fn plan(&self, actual: &SavedTable, full: bool) -> Plan {
        let mut decls = Vec::new();
        let mut body = Vec::new();
        let mut flushes = Vec::new();
        let mut deletes = Vec::new();
        let mut updates: ChainUpdates = Vec::new();
        let mut stats = ApplyStats::default();
        // Built-in chains we write hooks into that the kernel may not have
        // yet (iptables-nft-save shows them all, with zero counters).
        let mut maybe_missing_builtins: Vec<String> = Vec::new();

        let candidates: BTreeSet<String> = if full {
            self.chains
                .keys()
                .chain(actual.chains.keys().filter(|n| self.is_our_chain(n)))
                .cloned()
                .collect()
        } else {
            self.dirty_chains.clone()
        };
        for name in &candidates {
            match (
                self.chains.get(name).map(Desired::live),
                actual.chains.get(name),
            ) {
                (Some(d), None) => {
                    decls.push(format!(":{name} - -"));
                    stats.chains_created += 1;
                    for (rule, hash) in d.rules.iter().zip(d.hashes) {
                        body.push(self.renderer.line(&format!("-A {name}"), hash, rule));
                        stats.rules_written += 1;
                    }
                    updates.push((name.clone(), Some(Self::ours_as_saved(d.hashes))));
                }
                (Some(d), Some(a)) => {
                    for (i, (rule, hash)) in d.rules.iter().zip(d.hashes).enumerate() {
                        match a.get(i) {
                            Some(r) if r.hash.as_deref() == Some(hash.as_str()) => {}
                            Some(_) => {
                                body.push(self.renderer.line(
                                    &format!("-R {name} {}", i + 1),
                                    hash,
                                    rule,
                                ));
                                stats.rules_written += 1;
                            }
                            None => {
                                body.push(self.renderer.line(&format!("-A {name}"), hash, rule));
                                stats.rules_written += 1;
                            }
                        }
                    }
                    for _ in d.rules.len()..a.len() {
                        body.push(format!("-D {name} {}", d.rules.len() + 1));
                        stats.rules_deleted += 1;
                    }
                    updates.push((name.clone(), Some(Self::ours_as_saved(d.hashes))));
                }
                (None, Some(a)) if self.is_our_chain(name) => {
                    if !a.is_empty() {
                        flushes.push(format!("-F {name}"));
                    }
                    deletes.push(format!("-X {name}"));
                    stats.rules_deleted += a.len();
                    stats.chains_deleted += 1;
                    updates.push((name.clone(), None));
                }
                _ => {}
            }
        }

        let kernel_candidates: BTreeSet<String> = if full {
            self.inserts
                .keys()
                .chain(
                    actual
                        .chains
                        .iter()
                        .filter(|(n, rules)| {
                            !self.is_our_chain(n) && rules.iter().any(SavedRule::is_ours)
                        })
                        .map(|(n, _)| n),
                )
                .cloned()
                .collect()
        } else {
            self.dirty_inserts.clone()
        };
        let empty = Desired::new(Vec::new(), Vec::new());
        for k in &kernel_candidates {
            if self.is_our_chain(k) {
                continue;
            }
            let d = self.inserts.get(k).unwrap_or(&empty);
            let builtin = builtin_chains(&self.table).contains(&k.as_str());
            if builtin && (actual.zero_counters.contains(k) || !actual.chains.contains_key(k)) {
                maybe_missing_builtins.push(k.clone());
            }
            let current: Vec<SavedRule> = match actual.chains.get(k) {
                Some(r) => r.clone(),
                None if builtin => Vec::new(),
                None => {
                    if !d.rules.is_empty() {
                        tracing::warn!(table = %self.desc(), chain = %k, "kernel chain missing; cannot insert rules");
                    }
                    continue;
                }
            };
            let mode = self.opts.insert_mode;
            if mode.hooks_in_place(&current, &d.hashes) {
                continue;
            }
            // Delete every rule of ours (bottom up, so positions stay
            // valid), then write the desired hooks at the mode's end.
            let ours: Vec<usize> = current
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_ours())
                .map(|(i, _)| i)
                .collect();
            for &pos in ours.iter().rev() {
                body.push(format!("-D {k} {}", pos + 1));
                stats.rules_deleted += 1;
            }
            for (i, (rule, hash)) in d.rules.iter().zip(&d.hashes).enumerate() {
                body.push(self.renderer.line(&mode.hook_op(k, i), hash, rule));
                stats.rules_written += 1;
            }
            let foreign = current.into_iter().filter(|r| !r.is_ours());
            let rules: Vec<SavedRule> = match mode {
                ChainInsertMode::Insert => Self::ours_as_saved(&d.hashes)
                    .into_iter()
                    .chain(foreign)
                    .collect(),
                ChainInsertMode::Append => foreign.chain(Self::ours_as_saved(&d.hashes)).collect(),
            };
            updates.push((k.clone(), Some(rules)));
        }

        let mut script = String::new();
        if !(decls.is_empty() && body.is_empty() && flushes.is_empty() && deletes.is_empty()) {
            let _ = writeln!(script, "*{}", self.table);
            let commands = decls.len() + body.len() + flushes.len() + deletes.len();
            let kernel_rules = actual.chains.values().map(Vec::len).sum();
            if whole_table_cache(self.backend, commands, kernel_rules) {
                // `-S` only prints; it makes iptables cache the whole table.
                // That cache holds stand-ins for missing built-in chains, so
                // those are declared to be created: `-` keeps the policy of
                // one that exists, and the `[0:0]` it gets is what it had
                // (only chains that read back with zero counters are
                // declared).
                script.push_str("-S\n");
                for k in &maybe_missing_builtins {
                    let _ = writeln!(script, ":{k} - [0:0]");
                }
            }
            for l in decls.iter().chain(&body).chain(&flushes).chain(&deletes) {
                script.push_str(l);
                script.push('\n');
            }
            script.push_str("COMMIT\n");
        }
        Plan {
            script,
            updates,
            stats,
        }
    }

    fn restore(&self, script: &str) -> Result<(), KernelError> {
        let Some(restore) = &self.restore_cmd else {
            return Err(KernelError::Failed {
                op: "iptables-restore".into(),
                command: "iptables-restore".into(),
                status: None,
                stderr: "binary not found".into(),
            });
        };
        let mut args: Vec<String> = vec!["--noflush".into()];
        if !self.opts.lock_timeout.is_zero() {
            args.push("-w".into());
            args.push(self.opts.lock_timeout.as_secs().max(1).to_string());
            args.push("-W".into());
            args.push(self.opts.lock_probe_interval.as_micros().to_string());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cmds
            .run("iptables-restore", restore, &argv, Some(script.as_bytes()))
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
        // Without the backend's own binaries the fallback would be the
        // backend we program; without its modules nothing of ours exists.
        if !backend_binaries_present(&self.cmds, self.ipv, self.backend)
            || (self.backend == ResolvedBackend::Legacy
                && !legacy_modules_loaded(&self.cmds, self.ipv))
        {
            return Ok(ApplyStats::default());
        }
        let mut stats = ApplyStats {
            read_backs: 1,
            ..Default::default()
        };
        let mut actual = self.read_back()?;
        let plan = self.plan(&actual, true);
        if !plan.script.is_empty() {
            self.restore(&plan.script)
                .map_err(|source| TableError::GaveUp {
                    table: self.desc(),
                    attempts: 1,
                    source,
                })?;
            stats.transactions = 1;
            stats.rules_written = plan.stats.rules_written;
            stats.rules_deleted = plan.stats.rules_deleted;
            stats.chains_deleted = plan.stats.chains_deleted;
        }
        apply_updates(&mut actual, plan.updates);
        self.actual = Some(actual);
        Ok(stats)
    }
}

impl RetriedTable for IptablesTable {
    fn describe(&self) -> String {
        self.desc()
    }

    fn kind(&self) -> &'static str {
        "iptables"
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.opts.retry.clone()
    }

    fn attempt(&mut self, total: &mut ApplyStats) -> Attempt {
        let full = self.actual.is_none();
        if self.actual.is_none() {
            match self.read_back() {
                Ok(a) => {
                    self.actual = Some(a);
                    total.read_backs += 1;
                }
                Err(e) => return Attempt::ReadFailed(e),
            }
        }
        let Some(actual) = self.actual.as_ref() else {
            return Attempt::ReadFailed(TableError::Parse {
                table: self.desc(),
                detail: "no kernel state".into(),
            });
        };
        let plan = self.plan(actual, full);
        if !plan.script.is_empty() {
            if let Err(e) = self.restore(&plan.script) {
                self.refused = refused_candidates(
                    plan.updates.iter().map(|(n, r)| (n, r.is_some())),
                    &self.chains,
                );
                return Attempt::WriteFailed(e);
            }
        }
        let stats = ApplyStats {
            transactions: usize::from(!plan.script.is_empty()),
            ..plan.stats
        };
        if let Some(a) = self.actual.as_mut() {
            apply_updates(a, plan.updates);
        }
        self.dirty_chains.clear();
        self.dirty_inserts.clear();
        Attempt::Written(stats)
    }

    fn attempt_failed(&mut self) {
        // Our picture of the kernel may be wrong: re-read it.
        self.actual = None;
    }

    fn quarantine_rejected(&mut self, _err: &KernelError) -> usize {
        let candidates = std::mem::take(&mut self.refused);
        let found = find_rejected(&candidates, &mut |group: &[String]| self.dry_run(group));
        let desc = self.desc();
        let renderer = &self.renderer;
        quarantine_found(
            &desc,
            found,
            &mut self.chains,
            &mut self.dirty_chains,
            |chain, rules| renderer.hashes(chain, rules),
        )
    }
}

impl IptablesTable {
    /// Dry-runs (`iptables-restore --test`) `group`'s desired chains on
    /// their own, declaring the chains they jump to; `Err` carries the
    /// tool's message. Nothing is committed.
    fn dry_run(&self, group: &[String]) -> Result<(), String> {
        let Some(restore) = &self.restore_cmd else {
            return Ok(());
        };
        let in_group: BTreeSet<&str> = group.iter().map(String::as_str).collect();
        let builtin = builtin_chains(&self.table);
        let mut decls = String::new();
        let mut body = String::new();
        let mut targets = BTreeSet::new();
        for name in group {
            let Some(d) = self.chains.get(name) else {
                continue;
            };
            let _ = writeln!(decls, ":{name} - -");
            for (rule, hash) in d.rules.iter().zip(&d.hashes) {
                if let Some(t) = rule.jump_target() {
                    if !in_group.contains(t) && !builtin.contains(&t) {
                        targets.insert(t.to_string());
                    }
                }
                body.push_str(&self.renderer.line(&format!("-A {name}"), hash, rule));
                body.push('\n');
            }
        }
        let mut script = format!("*{}\n{decls}", self.table);
        for t in targets {
            let _ = writeln!(script, ":{t} - -");
        }
        script.push_str(&body);
        script.push_str("COMMIT\n");
        let r = self
            .cmds
            .run(
                "iptables-restore-check",
                restore,
                &["--noflush", "--test"],
                Some(script.as_bytes()),
            )
            .map(|_| ());
        dry_run_verdict(r)
    }
}

impl Table for IptablesTable {
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
        if self.mode == IptablesMode::CleanupOnly {
            return;
        }
        let hashes = self.renderer.hashes(&chain.name, &chain.rules);
        if self
            .chains
            .get(&chain.name)
            .is_some_and(|d| d.hashes == hashes)
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
        self.chains
            .insert(chain.name, Desired::new(chain.rules, hashes));
    }

    fn remove_chain(&mut self, name: &str) {
        if self.chains.remove(name).is_some() {
            self.dirty_chains.insert(name.to_string());
        }
    }

    fn set_insert_rules(&mut self, kernel_chain: &str, rules: Vec<Rule>) {
        if self.mode == IptablesMode::CleanupOnly {
            return;
        }
        let hashes = self.renderer.hashes(kernel_chain, &rules);
        let unchanged = match self.inserts.get(kernel_chain) {
            Some(d) => d.hashes == hashes,
            None => hashes.is_empty(),
        };
        if unchanged {
            return;
        }
        self.dirty_inserts.insert(kernel_chain.to_string());
        if rules.is_empty() {
            self.inserts.remove(kernel_chain);
        } else {
            self.inserts
                .insert(kernel_chain.to_string(), Desired::new(rules, hashes));
        }
    }

    fn queue_resync(&mut self) {
        self.actual = None;
        if self.mode == IptablesMode::CleanupOnly {
            self.next_cleanup = None;
        }
    }

    fn apply(&mut self) -> Result<ApplyStats, TableError> {
        match self.mode {
            IptablesMode::Program => self.apply_program(),
            IptablesMode::CleanupOnly => self.apply_cleanup(),
        }
    }

    fn is_dirty(&self) -> bool {
        match self.mode {
            IptablesMode::Program => {
                self.actual.is_none()
                    || !self.dirty_chains.is_empty()
                    || !self.dirty_inserts.is_empty()
            }
            IptablesMode::CleanupOnly => {
                self.next_cleanup.is_none_or(|t| self.opts.retry.now() >= t)
            }
        }
    }
}
