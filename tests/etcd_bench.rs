//! Benchmark of the etcd syncer (ignored by default; prints figures):
//! initial sync of 100,000 workload endpoints + 10,000 policies, RSS, and
//! recovery time after an etcd restart.
//!
//! `cargo test --release -p felix --test etcd_bench -- --ignored --nocapture`
//! (sizes can be overridden with FELIX_BENCH_WEPS / FELIX_BENCH_POLICIES,
//! the listing page size with FELIX_BENCH_PAGE_SIZE; FELIX_BENCH_PREFETCH=0
//! reads each page only after the previous one was decoded).
//!
//! The process uses mimalloc with the daemon's purge delay, as `felix`
//! itself does (`src/main.rs`), so the figures are the daemon's.

use felix::datastore::etcd::bench;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's runtime option setter (bundled with the mimalloc crate).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay`, set to the daemon's 10 s.
fn tune_allocator() {
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: plain setter of a process-wide integer option.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
    }
}
use felix::datastore::etcd::testing::EtcdTestServer;

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn etcd_initial_sync_and_recovery() {
    tune_allocator();
    let mut etcd = EtcdTestServer::start().unwrap();
    let weps = size("FELIX_BENCH_WEPS", 100_000);
    let policies = size("FELIX_BENCH_POLICIES", 10_000);
    let page_size = std::env::var("FELIX_BENCH_PAGE_SIZE")
        .ok()
        .and_then(|v| v.parse().ok());
    let report = bench::run_with(
        &mut etcd,
        bench::BenchOptions {
            workloads: weps,
            policies,
            page_size,
            prefetch: std::env::var("FELIX_BENCH_PREFETCH").map_or(true, |v| v != "0"),
        },
    )
    .unwrap();
    println!("{report}");
    // Every key became exactly one model update.
    assert_eq!(report.updates, report.keys);
}
