//! Benchmark of the etcd syncer (ignored by default; prints figures):
//! initial sync of 100,000 workload endpoints + 10,000 policies, RSS, and
//! recovery time after an etcd restart.
//!
//! `cargo test --release -p felix --test etcd_bench -- --ignored --nocapture`
//! (sizes can be overridden with FELIX_BENCH_WEPS / FELIX_BENCH_POLICIES,
//! the listing page size with FELIX_BENCH_PAGE_SIZE; FELIX_BENCH_PREFETCH=0
//! reads each page only after the previous one was decoded).
//!
//! The process uses mimalloc with the daemon's settings
//! ([`felix::allocator::tune`]), as `felix` itself does, so the figures are
//! the daemon's.

use felix::datastore::etcd::bench;
use felix::datastore::etcd::testing::EtcdTestServer;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn etcd_initial_sync_and_recovery() {
    felix::allocator::tune();
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
