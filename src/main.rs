//! The `felix` binary: command-line front end.  Each subcommand lives in
//! its own module under `cli/`; errors are reported as one line and mapped
//! to the exit codes of INTERFACES.md (0 ok, 1 runtime failure, 2 bad usage
//! or bad input).

use std::process::ExitCode;

use clap::Parser;

use felix::cli::{self, Cli};

/// mimalloc instead of glibc's allocator: the calculation graph and the
/// datastore decoder allocate many small objects, and glibc's free-list
/// consolidation dominated their profiles.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's runtime option setter (exported by the bundled v3 library).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in the bundled mimalloc v3 (`mimalloc.h`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// mimalloc returns freed memory to the OS 10 ms after it becomes free; with
/// transparent huge pages every re-fault then clears 2 MiB, which cost a
/// fifth to a quarter of the datastore-load profile (measured: 3,900 page
/// faults per load with the default or 1 s, 490 with 10 s).  Ten seconds
/// keeps bursts (a load, a resync) on warm memory and still hands memory
/// back when the daemon idles.  `MIMALLOC_PURGE_DELAY` in the environment
/// still wins.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: plain setter of a process-wide integer option; valid at
        // any time, from any thread.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let args = Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("felix: {e:#}");
            ExitCode::from(e.exit_code())
        }
    }
}
