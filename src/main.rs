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

fn main() -> ExitCode {
    let args = Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("felix: {e:#}");
            ExitCode::from(e.exit_code())
        }
    }
}
