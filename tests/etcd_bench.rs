//! Benchmark of the etcd syncer (ignored by default; prints figures):
//! initial sync of 100,000 workload endpoints + 10,000 policies, RSS, and
//! recovery time after an etcd restart.
//!
//! `cargo test --release -p felix --test etcd_bench -- --ignored --nocapture`
//! (sizes can be overridden with FELIX_BENCH_WEPS / FELIX_BENCH_POLICIES).

use felix::datastore::etcd::bench;
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
    let mut etcd = EtcdTestServer::start().unwrap();
    let weps = size("FELIX_BENCH_WEPS", 100_000);
    let policies = size("FELIX_BENCH_POLICIES", 10_000);
    let report = bench::run(&mut etcd, weps, policies).unwrap();
    println!("{report}");
    // Every key became exactly one model update.
    assert_eq!(report.updates, report.keys);
}
