//! SIGTERM / SIGINT handling for `felix run`.
//!
//! The handlers are registered before [`install`] returns (so a signal that
//! arrives during start-up is not lost) and are served by a small thread
//! with its own tokio runtime. The first signal is passed to the daemon,
//! which stops cleanly; a second one while stopping ends the process at
//! once (exit 1), as upstream does.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{signal, SignalKind};

/// Set by the first SIGTERM/SIGINT of the process (the handler stays installed until exit).
static RECEIVED: AtomicBool = AtomicBool::new(false);

/// True once a SIGTERM or SIGINT has been received: a restart in progress must then stop
/// instead of re-executing felix.
pub fn received() -> bool {
    RECEIVED.load(Ordering::Acquire)
}

/// Registers the handlers and starts the thread; `on_signal` is called with
/// the signal's name for the first signal.
pub fn install(on_signal: impl Fn(&'static str) + Send + 'static) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut term, mut int) = {
        let _guard = rt.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut seen = 0u32;
                loop {
                    let name = tokio::select! {
                        Some(()) = term.recv() => "SIGTERM",
                        Some(()) = int.recv() => "SIGINT",
                        else => return,
                    };
                    seen += 1;
                    RECEIVED.store(true, Ordering::Release);
                    if seen == 1 {
                        tracing::info!(signal = name, "shutting down");
                        on_signal(name);
                    } else {
                        tracing::error!(
                            signal = name,
                            "signal received while shutting down; exiting now"
                        );
                        std::process::exit(1);
                    }
                }
            });
        })?;
    Ok(())
}
