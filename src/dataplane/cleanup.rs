//! `driver/cleanup-v4/-v6`: removes what we left in the dataplanes we are
//! not programming (the seed's table):
//!
//! | mode | swept |
//! |---|---|
//! | iptables (either backend) | our nftables table (`calico`), deleted wholesale |
//! | iptables-legacy, or nftables mode | the nftables copies of the shared tables (iptables-nft leftovers) |
//! | iptables-nft, or nftables mode | the legacy copies (`CleanupOnly` tables) |
//!
//! The legacy copies are swept only when both backends' binaries exist and
//! the legacy modules are already loaded (so nothing is autoloaded, and the
//! sweep can never land on the backend we program); the iptables-nft sweep
//! only when both backends' binaries exist in iptables mode. Sweeps are
//! paced by the refresh interval and never end (a shared table can be
//! written again at any time). Failures are logged and retried at the next
//! pacing point; they never fail the apply, so they cannot trigger the
//! fail-closed exit meant for the tables we program.

/// The command operations of `driver/cleanup-vN` (its fault targets).
pub const OPS: &[&str] = &[
    "iptables-save",
    "iptables-restore",
    "nft-cleanup",
    "nft-list-chain",
    "nft-list-chains",
    "nft-list-table",
];

use std::time::{Duration, Instant};

use felix_actors::{Driver, DriverError};

use crate::dataplane::generictables::Table;
use crate::dataplane::iptables::{
    backend_binaries_present, legacy_modules_loaded, IptablesMode, IptablesOptions, IptablesTable,
    ResolvedBackend,
};
use crate::dataplane::kernel::Commands;
use crate::dataplane::nftables::{
    IptablesNftCleanup, NftablesMode, NftablesOptions, NftablesTable,
};
use crate::dataplane::rules::TableName;
use crate::dataplane::IpVersion;

use crate::dataplane::iptables::BackendChoice;

/// Which dataplane is being programmed.
#[derive(Debug, Clone)]
pub enum CleanupMode {
    /// iptables mode with this (lazily detected) backend.
    Iptables(BackendChoice),
    /// nftables mode.
    Nftables,
}

enum Item {
    Table(Box<dyn Table>),
    IptNft {
        sweeper: IptablesNftCleanup,
        next: Option<Instant>,
    },
}

/// See the module docs.
pub struct CleanupDriver {
    ipv: IpVersion,
    cmds: Commands,
    mode: CleanupMode,
    refresh: Duration,
    items: Option<Vec<Item>>,
}

impl CleanupDriver {
    /// An adapter running its commands on `cmds`, sweeping every `refresh`.
    pub fn new(ipv: IpVersion, cmds: Commands, mode: CleanupMode, refresh: Duration) -> Self {
        CleanupDriver {
            ipv,
            cmds,
            mode,
            refresh,
            items: None,
        }
    }

    fn build(&self, cmds: &Commands) -> Vec<Item> {
        let ipv = self.ipv;
        let both = backend_binaries_present(cmds, ipv, ResolvedBackend::Legacy)
            && backend_binaries_present(cmds, ipv, ResolvedBackend::Nft);
        let (nft_table, ipt_nft, legacy) = match &self.mode {
            CleanupMode::Iptables(choice) => {
                let backend = choice.resolve(cmds);
                (
                    true,
                    backend == ResolvedBackend::Legacy && both,
                    backend == ResolvedBackend::Nft && both,
                )
            }
            CleanupMode::Nftables => (false, true, both),
        };
        let legacy = legacy && legacy_modules_loaded(cmds, ipv);
        let mut items = Vec::new();
        if nft_table {
            let opts = NftablesOptions {
                refresh_interval: self.refresh,
                ..NftablesOptions::default()
            };
            items.push(Item::Table(Box::new(NftablesTable::new(
                ipv,
                NftablesMode::CleanupOnly,
                cmds.clone(),
                opts,
            ))));
        }
        if ipt_nft {
            items.push(Item::IptNft {
                sweeper: IptablesNftCleanup::new(ipv, cmds.clone(), self.refresh),
                next: None,
            });
        }
        if legacy {
            for t in TableName::ALL {
                let opts = IptablesOptions {
                    refresh_interval: self.refresh,
                    ..IptablesOptions::default()
                };
                items.push(Item::Table(Box::new(IptablesTable::new(
                    t.as_str(),
                    ipv,
                    ResolvedBackend::Legacy,
                    IptablesMode::CleanupOnly,
                    cmds.clone(),
                    opts,
                ))));
            }
        }
        items
    }
}

impl Driver for CleanupDriver {
    type Desired = ();

    fn apply(&mut self, _desired: &()) -> Result<(), DriverError> {
        if self.items.is_none() {
            self.items = Some(self.build(&self.cmds));
        }
        let now = felix_actors::clock::real_now();
        for item in self.items.iter_mut().flatten() {
            match item {
                Item::Table(t) => {
                    if t.is_dirty() {
                        if let Err(e) = t.apply() {
                            tracing::warn!(table = %t.name(), error = %e, "cleanup sweep failed; retried at the next refresh");
                        }
                    }
                }
                Item::IptNft { sweeper, next } => {
                    if next.is_none_or(|n| now >= n) {
                        let (wait, res) = sweeper.clean_up();
                        *next = Some(now + wait);
                        if let Err(errs) = res {
                            for e in errs {
                                tracing::warn!(error = %e, "iptables-nft cleanup failed; retried at the next refresh");
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn queue_resync(&mut self) {}

    fn is_dirty(&self) -> bool {
        let now = felix_actors::clock::real_now();
        match &self.items {
            None => true,
            Some(items) => items.iter().any(|i| match i {
                Item::Table(t) => t.is_dirty(),
                Item::IptNft { next, .. } => next.is_none_or(|n| now >= n),
            }),
        }
    }
}
