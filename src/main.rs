//! The `felix` binary: command-line front end.  Each subcommand lives in
//! its own module under `cli/`; errors are reported as one line and mapped
//! to the exit codes of INTERFACES.md (0 ok, 1 runtime failure, 2 bad usage
//! or bad input).

use std::process::ExitCode;

use clap::Parser;

use felix::cli::{self, Cli};

/// mimalloc instead of glibc's allocator: the calculation graph and the
/// datastore decoder allocate many small objects, and glibc's free-list
/// consolidation dominated their profiles.  The `system-alloc` feature
/// builds with glibc's allocator instead, for heap profilers that hook it
/// (`heaptrack`); nothing else changes.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: Mimalloc = Mimalloc;

extern "C" {
    // mimalloc's plain entry points (the bundled v3 library).
    fn mi_malloc(size: usize) -> *mut std::ffi::c_void;
    fn mi_zalloc(size: usize) -> *mut std::ffi::c_void;
    fn mi_realloc(p: *mut std::ffi::c_void, newsize: usize) -> *mut std::ffi::c_void;
    fn mi_free(p: *mut std::ffi::c_void);
}

/// Alignment every mimalloc block has whatever its size: block sizes are
/// whole machine words, and pages start word-aligned.  (Larger alignments
/// hold only for some size classes; mimalloc's own aligned path checks the
/// actual address, so those layouts go there.)
const MI_WORD_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc through its plain entry points whenever the layout's alignment
/// is one every block has (at most a machine word: nearly every Rust
/// allocation); other layouts go through the `mimalloc` crate's aligned
/// path.
/// The crate's own `GlobalAlloc` always takes the aligned entry point,
/// which cost about 7 % of the datastore load's instructions (callgrind).
/// `mi_free` releases blocks from either path.
#[cfg_attr(feature = "system-alloc", allow(dead_code))]
struct Mimalloc;

fn plain(layout: std::alloc::Layout) -> bool {
    layout.align() <= MI_WORD_ALIGN
}

// SAFETY: every method either forwards to mimalloc's plain functions for
// layouts whose alignment those functions guarantee (see `plain`), or to
// `mimalloc::MiMalloc`, which implements the same contract; `mi_free` and
// `mi_realloc` accept blocks from both.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if plain(layout) {
            // SAFETY: see the impl comment.
            unsafe { mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if plain(layout) {
            // SAFETY: see the impl comment.
            unsafe { mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator (caller's guarantee).
        unsafe { mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let new_layout = std::alloc::Layout::from_size_align(new_size, layout.align());
        match new_layout {
            // SAFETY: `ptr` came from this allocator; the new block keeps
            // an alignment mimalloc guarantees for its size.
            Ok(l) if plain(layout) && plain(l) => unsafe {
                mi_realloc(ptr.cast(), new_size).cast()
            },
            // SAFETY: forwarded with the caller's guarantees.
            _ => unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
        }
    }
}

fn main() -> ExitCode {
    felix::allocator::tune();
    // Started as `DataplaneDriver` through a link named felix-dataplane-driver, with no
    // arguments (as felix starts its driver).
    let mut argv = std::env::args_os();
    let as_driver = argv
        .next()
        .is_some_and(|a0| cli::driver::invoked_as_driver(&a0))
        && argv.next().is_none();
    let result = if as_driver {
        cli::driver::run(cli::driver::DriverArgs::default())
    } else {
        cli::run(Cli::parse())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("felix: {e:#}");
            ExitCode::from(e.exit_code())
        }
    }
}
