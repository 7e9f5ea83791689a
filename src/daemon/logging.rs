//! Logging for `felix run` (INTERFACES.md §5): `tracing` events to stderr,
//! one line each, filtered by `LogSeverityScreen`.
//!
//! The level is first taken from the local layers (so
//! `FELIX_LOGSEVERITYSCREEN` works before the datastore is read) and can be
//! changed once the full configuration is known, through a reload handle.
//! Actor names appear as the `actor` field of the runtime's spans/events.
//! The netlink packet decoder's warnings about attributes newer than it
//! knows (one per interface and dump, harmless) are dropped; its errors
//! are kept.

use felix_config::LogLevel;
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

/// Changes the screen log level after start.
#[derive(Clone)]
pub struct LogHandle {
    reload: Option<reload::Handle<LevelFilter, Registry>>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle")
            .field("installed", &self.reload.is_some())
            .finish()
    }
}

fn filter(level: LogLevel) -> LevelFilter {
    LevelFilter::from_level(level.to_tracing())
}

/// Installs the global subscriber at `level`. If a subscriber is already
/// installed (tests, embedding), that one is kept and the handle does
/// nothing.
pub fn init(level: LogLevel) -> LogHandle {
    let (layer, handle) = reload::Layer::new(filter(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .with_filter(filter_fn(|meta| {
            !meta.target().starts_with("netlink_packet_route")
                || *meta.level() == tracing::Level::ERROR
        }));
    let installed = tracing_subscriber::registry()
        .with(layer)
        .with(fmt)
        .try_init()
        .is_ok();
    LogHandle {
        reload: installed.then_some(handle),
    }
}

impl LogHandle {
    /// Sets the screen level.
    pub fn set_level(&self, level: LogLevel) {
        if let Some(h) = &self.reload {
            if let Err(e) = h.modify(|f| *f = filter(level)) {
                tracing::warn!("cannot change the log level: {e}");
            }
        }
    }
}
