//! The daemon's settings of mimalloc, the global allocator of `felix` (`src/main.rs`).
//!
//! Every program that measures felix (the `felix` binary, the benchmark test binaries)
//! calls [`tune`] first, so that their figures are the daemon's: the settings below change
//! a datastore load's CPU time severalfold on this kind of VM.

// The `mimalloc` crate links the bundled library that exports `mi_option_set`, also into
// programs whose global allocator is another one.
use mimalloc as _;

extern "C" {
    /// mimalloc's runtime option setter (exported by the bundled v3 library, linked
    /// through the `mimalloc` crate whichever allocator is global).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in the bundled mimalloc v3 (`mimalloc.h`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// `mi_option_allow_thp` in the bundled mimalloc v3 (`mimalloc.h`).
const MI_OPTION_ALLOW_THP: std::ffi::c_int = 43;

/// mimalloc returns freed memory to the OS 10 ms after it becomes free; with
/// transparent huge pages every re-fault then clears 2 MiB, which cost a
/// fifth to a quarter of the datastore-load profile (measured: 3,900 page
/// faults per load with the default or 1 s, 490 with 10 s).  Ten seconds
/// keeps bursts (a load, a resync) on warm memory and still hands memory
/// back when the daemon idles.  `MIMALLOC_PURGE_DELAY` in the environment
/// still wins.
///
/// Transparent huge pages are switched off for the process (mimalloc asks
/// for them on its arenas with `madvise`).  On this kind of VM the first
/// touch of a 2 MiB page costs far more than 512 first touches of 4 KiB
/// pages: in the calculation benchmark's workload (a) the kernel's page
/// clearing was 26 % of all samples with huge pages and under 1 % without,
/// and peak RSS fell from 170 to 148 MiB (untouched parts of huge pages are
/// no longer resident).  `MIMALLOC_ALLOW_THP` in the environment still
/// wins.  The setting is inherited by the tools we start, which is harmless.
pub fn tune() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: plain setter of a process-wide integer option; valid at
        // any time, from any thread.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: as above.  The option stops mimalloc's `madvise` on new
        // arenas; the prctl covers mappings made before this point (the
        // kernel checks the flag at fault time).  prctl only sets a flag on
        // this process; its result is deliberately ignored (older kernels).
        unsafe {
            mi_option_set(MI_OPTION_ALLOW_THP, 0);
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    /// After [`super::tune`], the kernel gives this process no transparent huge pages
    /// (unless the environment chose otherwise).
    #[test]
    fn tuning_switches_off_transparent_huge_pages() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        super::tune();
        // SAFETY: reads a flag of this process; no pointers involved.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1);
    }
}
