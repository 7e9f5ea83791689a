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

/// SIGTERM and SIGINT as a signal set.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set we own on the stack.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT on the calling thread. Called just before re-executing: the
/// mask survives `exec`, so a stop signal that arrives while the new image starts stays
/// pending until its handlers are installed ([`install`] unblocks) instead of killing it.
pub fn block_for_exec() {
    let set = stop_signals();
    // SAFETY: pthread_sigmask with a valid set; the old mask is not needed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Registers the handlers and starts the thread; `on_signal` is called with
/// the signal's name for the first signal. Then unblocks SIGTERM and SIGINT on the calling
/// thread (blocked when the process image was started by a restart, see
/// [`block_for_exec`]), so one that arrived during the restart is handled now.
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
    let set = stop_signals();
    // SAFETY: pthread_sigmask with a valid set; the old mask is not needed.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    Ok(())
}
