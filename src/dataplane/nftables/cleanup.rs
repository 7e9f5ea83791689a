//! [`IptablesNftCleanup`]: removes what an iptables-nft Felix left in the
//! nftables copies of the shared tables (`filter`, `nat`, `mangle`, `raw`).
//!
//! Invariants:
//! - Only base chains are read for rules (the only chains we ever inserted
//!   into); a rule is ours if its comment carries our hash prefix or it
//!   jumps/goes to one of our chains. Chains with our prefix are flushed and
//!   deleted. Nothing else is touched.
//! - The family-wide chain listing is the expensive part, so sweeps are
//!   paced by the refresh interval; cleanup never terminates (a shared table
//!   can be written again at any time).
//! - iptables-nft stores `-m comment` as an iptables match nft cannot show;
//!   for such rules the table is additionally read with `iptables-nft-save`
//!   (when it can express the table) and its hashes matched by position.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dataplane::generictables::{ApplyStats, TableError, RULE_HASH_PREFIX};
use crate::dataplane::iptables::parse_save;
use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

use super::json::{parse_chains, parse_rules, ListedRule};
use super::table::NftFamily;

/// The shared iptables tables.
pub const SHARED_TABLES: [&str; 4] = ["filter", "nat", "mangle", "raw"];

/// Sweeper of what an iptables-nft Felix left in the nftables copies of the shared tables.
///
/// # API model
/// Imperative and endless: [`IptablesNftCleanup::clean_up`] sweeps once and says when to sweep
/// next; the cleanup driver calls it at that pace for ever.
///
/// # Design
/// Reads the family's chains over netlink (`nft -j list chains`) and the rules of base chains
/// only, the only chains we ever inserted into; rules whose comment iptables-nft stores as an
/// iptables match are matched by position against `iptables-nft-save`.
///
/// # Identification of our state
/// A rule is ours if its comment carries our hash prefix or it jumps to one of our chains;
/// chains with our prefix (`cali-`) are flushed and deleted. Nothing else is touched.
///
/// # Retry policy
/// Failures are returned to the caller, which logs them and sweeps again at the next pacing
/// point (the refresh interval); they never fail an apply.
///
/// # Thread safety
/// Not shared: owned by the cleanup driver, one thread at a time (`&mut self`).
pub struct IptablesNftCleanup {
    ipv: IpVersion,
    cmds: Commands,
    chain_prefixes: Vec<String>,
    hash_prefix: String,
    refresh_interval: Duration,
    now: Arc<dyn Fn() -> Instant + Send + Sync>,
    last_sweep: Option<Instant>,
}

impl std::fmt::Debug for IptablesNftCleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IptablesNftCleanup")
            .field("ipv", &self.ipv)
            .finish_non_exhaustive()
    }
}

impl IptablesNftCleanup {
    /// A sweeper for `ipv`, pacing sweeps by `refresh_interval`.
    pub fn new(ipv: IpVersion, cmds: Commands, refresh_interval: Duration) -> Self {
        IptablesNftCleanup {
            ipv,
            cmds,
            chain_prefixes: vec!["cali-".into()],
            hash_prefix: RULE_HASH_PREFIX.into(),
            refresh_interval,
            now: Arc::new(felix_actors::clock::real_now),
            last_sweep: None,
        }
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, now: Arc<dyn Fn() -> Instant + Send + Sync>) -> Self {
        self.now = now;
        self
    }

    fn ours(&self, name: &str) -> bool {
        self.chain_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }

    fn fam(&self) -> &'static str {
        NftFamily::for_version(self.ipv).name()
    }

    /// Runs a sweep if one is due. Returns the time until the next sweep is
    /// due and what was done; errors are per table and do not stop the
    /// other tables.
    pub fn clean_up(&mut self) -> (Duration, Result<ApplyStats, Vec<TableError>>) {
        let now = (self.now)();
        if let Some(last) = self.last_sweep {
            let since = now.saturating_duration_since(last);
            if since < self.refresh_interval {
                return (self.refresh_interval - since, Ok(ApplyStats::default()));
            }
        }
        self.last_sweep = Some(now);
        if !self.cmds.program_exists("nft") {
            return (self.refresh_interval, Ok(ApplyStats::default()));
        }
        (self.refresh_interval, self.sweep())
    }

    fn sweep(&self) -> Result<ApplyStats, Vec<TableError>> {
        let fam = self.fam();
        let desc = |t: &str| format!("{fam} {t} (iptables-nft copy)");
        let mut stats = ApplyStats {
            read_backs: 1,
            ..Default::default()
        };
        let listing = self
            .cmds
            .run(
                "nft-list-chains",
                "nft",
                &["-j", "list", "chains", fam],
                None,
            )
            .map_err(|source| {
                vec![TableError::ReadBack {
                    table: desc("*"),
                    source,
                }]
            })?;
        let chains = parse_chains(&listing.stdout).map_err(|detail| {
            vec![TableError::Parse {
                table: desc("*"),
                detail,
            }]
        })?;
        let mut errors = Vec::new();
        for table in SHARED_TABLES {
            let in_table: Vec<_> = chains.iter().filter(|c| c.table == table).collect();
            if in_table.is_empty() {
                continue;
            }
            match self.sweep_table(
                table,
                &in_table
                    .iter()
                    .map(|c| (c.name.as_str(), c.base))
                    .collect::<Vec<_>>(),
            ) {
                Ok(s) => {
                    stats.transactions += s.transactions;
                    stats.rules_deleted += s.rules_deleted;
                    stats.chains_deleted += s.chains_deleted;
                    stats.read_backs += s.read_backs;
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(stats)
        } else {
            Err(errors)
        }
    }

    fn sweep_table(&self, table: &str, chains: &[(&str, bool)]) -> Result<ApplyStats, TableError> {
        let fam = self.fam();
        let desc = format!("{fam} {table} (iptables-nft copy)");
        let mut stats = ApplyStats::default();
        let our_chains: Vec<&str> = chains
            .iter()
            .filter(|(n, _)| self.ours(n))
            .map(|(n, _)| *n)
            .collect();
        let mut to_delete: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut listed: BTreeMap<String, Vec<ListedRule>> = BTreeMap::new();
        for (name, base) in chains {
            if !base {
                continue;
            }
            stats.read_backs += 1;
            let out = self
                .cmds
                .run(
                    "nft-list-chain",
                    "nft",
                    &["-j", "list", "chain", fam, table, name],
                    None,
                )
                .map_err(|source| TableError::ReadBack {
                    table: desc.clone(),
                    source,
                })?;
            let rules = parse_rules(&out.stdout).map_err(|detail| TableError::Parse {
                table: desc.clone(),
                detail,
            })?;
            listed.insert(name.to_string(), rules);
        }
        let mut need_save = false;
        for (chain, rules) in &listed {
            for r in rules {
                let by_comment = r
                    .comment
                    .as_deref()
                    .is_some_and(|c| c.starts_with(&self.hash_prefix));
                let by_jump = r.jump_target.as_deref().is_some_and(|t| self.ours(t));
                if by_comment || by_jump {
                    to_delete.entry(chain.clone()).or_default().push(r.handle);
                } else if r.opaque_comment {
                    need_save = true;
                }
            }
        }
        if need_save {
            self.match_opaque_comments(table, &listed, &mut to_delete);
        }
        if our_chains.is_empty() && to_delete.is_empty() {
            return Ok(stats);
        }
        let mut script = String::new();
        for (chain, handles) in &to_delete {
            for h in handles {
                script.push_str(&format!("delete rule {fam} {table} {chain} handle {h}\n"));
                stats.rules_deleted += 1;
            }
        }
        for c in &our_chains {
            script.push_str(&format!("flush chain {fam} {table} {c}\n"));
        }
        self.cmds
            .run("nft-cleanup", "nft", &["-f", "-"], Some(script.as_bytes()))
            .map_err(|source| TableError::GaveUp {
                table: desc.clone(),
                attempts: 1,
                source,
            })?;
        stats.transactions += 1;
        if !our_chains.is_empty() {
            let all: String = our_chains
                .iter()
                .map(|c| format!("delete chain {fam} {table} {c}\n"))
                .collect();
            if self
                .cmds
                .run("nft-cleanup", "nft", &["-f", "-"], Some(all.as_bytes()))
                .is_ok()
            {
                stats.chains_deleted += our_chains.len();
            } else {
                // Something outside the base chains still jumps to some of
                // them: delete what can be deleted, one by one.
                for c in &our_chains {
                    if self
                        .cmds
                        .run(
                            "nft-cleanup",
                            "nft",
                            &["delete", "chain", fam, table, c],
                            None,
                        )
                        .is_ok()
                    {
                        stats.chains_deleted += 1;
                    } else {
                        tracing::warn!(
                            table,
                            chain = c,
                            "left an empty chain behind; it is still referenced"
                        );
                    }
                }
            }
            stats.transactions += 1;
        }
        Ok(stats)
    }

    /// Uses `iptables-nft-save` to read the comments nft cannot show, when
    /// the table is expressible; matches rules by position per chain.
    fn match_opaque_comments(
        &self,
        table: &str,
        listed: &BTreeMap<String, Vec<ListedRule>>,
        to_delete: &mut BTreeMap<String, Vec<u64>>,
    ) {
        let bin = match self.ipv {
            IpVersion::V4 => "iptables-nft-save",
            IpVersion::V6 => "ip6tables-nft-save",
        };
        if !self.cmds.program_exists(bin) {
            return;
        }
        let Ok(out) = self.cmds.run("iptables-save", bin, &["-t", table], None) else {
            return;
        };
        let Ok(saved) = parse_save(&out.stdout, &self.hash_prefix, &self.chain_prefixes) else {
            return;
        };
        for (chain, rules) in listed {
            let Some(saved_rules) = saved.chains.get(chain) else {
                continue;
            };
            if saved_rules.len() != rules.len() {
                continue;
            }
            for (s, r) in saved_rules.iter().zip(rules) {
                if s.is_ours() {
                    let v = to_delete.entry(chain.clone()).or_default();
                    if !v.contains(&r.handle) {
                        v.push(r.handle);
                    }
                }
            }
        }
    }
}
