//! The etcd syncer against a real etcd server (Debian's etcd-server,
//! started on loopback ports by the harness).

mod etcd_support;

use std::sync::mpsc;
use std::time::Duration;

use etcd_support::*;
use felix::datastore::etcd::testing::EtcdTestServer;
use felix::datastore::etcd::{EtcdConfig, EtcdSyncer, EtcdSyncerConfig};
use felix::model::{Key, SyncStatus, Value};

fn server() -> EtcdTestServer {
    EtcdTestServer::start().expect("start etcd (Debian etcd-server must be installed)")
}

fn config(server: &EtcdTestServer) -> EtcdSyncerConfig {
    EtcdSyncerConfig::new(EtcdConfig::with_endpoints(&server.url()).unwrap())
}

fn start(cfg: EtcdSyncerConfig, capacity: usize) -> (EtcdSyncer, Consumer) {
    let (tx, rx) = mpsc::sync_channel(capacity);
    (EtcdSyncer::start(cfg, tx).unwrap(), Consumer::new(rx))
}

#[test]
fn initial_sync_is_complete_before_in_sync_and_in_sync_is_sent_once() {
    let etcd = server();
    let c = etcd.client();
    for i in 0..50 {
        c.put(
            tier_key(&format!("t{i}")).as_bytes(),
            tier(&format!("t{i}"), i).as_bytes(),
        )
        .unwrap();
    }
    // Kinds stored elsewhere, and keys the syncer must ignore.
    c.put(
        b"/calico/ipam/v2/assignment/ipv4/block/10.65.0.0-26",
        br#"{"cidr":"10.65.0.0/26","affinity":"host:node1","allocations":[],"unallocated":[],"attributes":[],"deleted":false}"#,
    )
    .unwrap();
    c.put(
        b"/calico/resources/v3/kubernetes/namespaces/ns1",
        br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","labels":{"team":"a"}}}"#,
    )
    .unwrap();
    c.put(b"/calico/resources/v3/projectcalico.org/bgppeers/p", b"{}")
        .unwrap();
    c.put(b"/calico/ipam/v2/handle/h1", b"{}").unwrap();
    c.put(b"/unrelated", b"x").unwrap();

    let mut cfg = config(&etcd);
    cfg.batch_size = 7;
    cfg.page_size = 5;
    let (syncer, mut consumer) = start(cfg, 4);
    consumer.wait_in_sync();
    // 50 tiers + block + namespace (its labels and its kns. profile).
    assert_eq!(consumer.tier_order("t49"), Some(49.0));
    assert_eq!(
        consumer
            .state
            .keys()
            .filter(|k| matches!(k, Key::Tier(_)))
            .count(),
        50
    );
    assert!(consumer
        .state
        .keys()
        .any(|k| matches!(k, Key::IpamBlock(c) if c.to_string() == "10.65.0.0/26")));
    assert!(consumer.state.contains_key(&Key::Namespace("ns1".into())));
    assert!(consumer.state.contains_key(&Key::Profile("kns.ns1".into())));
    assert!(consumer.max_batch <= 7, "batch of {}", consumer.max_batch);
    assert_eq!(
        consumer.statuses,
        vec![
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync
        ]
    );
    let stats = syncer.stats();
    assert_eq!(stats.lists, 1);
    assert_eq!(stats.keys, 52);
    assert_eq!(consumer.redundant, 0);
}

#[test]
fn live_create_update_delete() {
    let etcd = server();
    let c = etcd.client();
    let (_syncer, mut consumer) = start(config(&etcd), 4);
    consumer.wait_in_sync();
    assert!(consumer.state.is_empty());

    c.put(tier_key("a").as_bytes(), tier("a", 1).as_bytes())
        .unwrap();
    assert!(
        consumer.wait_until(|s| s.tier_order("a") == Some(1.0)),
        "create"
    );
    c.put(tier_key("a").as_bytes(), tier("a", 2).as_bytes())
        .unwrap();
    assert!(
        consumer.wait_until(|s| s.tier_order("a") == Some(2.0)),
        "update"
    );
    // Rewriting the same value changes nothing downstream.
    let seen = consumer.updates_seen;
    c.put(tier_key("a").as_bytes(), tier("a", 2).as_bytes())
        .unwrap();
    c.put(tier_key("canary").as_bytes(), tier("canary", 1).as_bytes())
        .unwrap();
    assert!(consumer.wait_until(|s| s.has_tier("canary")));
    assert_eq!(consumer.updates_seen, seen + 1);
    c.delete(tier_key("a").as_bytes()).unwrap();
    assert!(consumer.wait_until(|s| !s.has_tier("a")), "delete");
    // Prefix deletion (as `etcdctl del --prefix`) removes everything.
    c.delete_prefix(b"/calico/resources/v3/projectcalico.org/tiers/")
        .unwrap();
    assert!(consumer.wait_until(|s| s.state.is_empty()));
    assert_eq!(consumer.in_syncs(), 1);
    assert_eq!(consumer.redundant, 0);
}

#[test]
fn malformed_and_invalid_values_are_absent_and_recover_when_fixed() {
    let etcd = server();
    let c = etcd.client();
    c.put(
        netset_key("ok").as_bytes(),
        netset("ok", "10.0.0.0/24").as_bytes(),
    )
    .unwrap();
    c.put(netset_key("garbage").as_bytes(), b"{not json")
        .unwrap();
    c.put(
        netset_key("invalid").as_bytes(),
        netset("invalid", "10.0.0.0/33").as_bytes(),
    )
    .unwrap();
    // The value names another resource than its key.
    c.put(
        netset_key("renamed").as_bytes(),
        netset("other", "10.1.0.0/24").as_bytes(),
    )
    .unwrap();
    let (_syncer, mut consumer) = start(config(&etcd), 4);
    consumer.wait_in_sync();
    assert_eq!(
        consumer.state.keys().cloned().collect::<Vec<_>>(),
        vec![netset_model_key("ok")]
    );

    // A good value turning bad is deleted downstream; fixing it restores it.
    c.put(netset_key("ok").as_bytes(), b"\xff\xfe").unwrap();
    assert!(consumer.wait_until(|s| s.state.is_empty()));
    c.put(
        netset_key("garbage").as_bytes(),
        netset("garbage", "10.2.0.0/24").as_bytes(),
    )
    .unwrap();
    assert!(consumer.wait_until(|s| s.state.contains_key(&netset_model_key("garbage"))));
    c.put(
        netset_key("invalid").as_bytes(),
        netset("invalid", "10.3.0.0/24").as_bytes(),
    )
    .unwrap();
    assert!(consumer.wait_until(|s| s.state.contains_key(&netset_model_key("invalid"))));
    assert!(!consumer.state.contains_key(&netset_model_key("ok")));
    assert_eq!(consumer.redundant, 0);
}

/// The watch starts after `InSync` has been handed over.  With a
/// rendezvous channel the syncer is held before its watch while the test
/// changes etcd and compacts past the listing's revision, so the watch is
/// refused as compacted and the syncer must relist.
#[test]
fn watch_broken_by_compaction_relists_and_sends_only_differences() {
    let etcd = server();
    let c = etcd.client();
    for name in ["keep", "change", "remove"] {
        c.put(tier_key(name).as_bytes(), tier(name, 1).as_bytes())
            .unwrap();
    }
    let (syncer, mut consumer) = start(config(&etcd), 0);
    // Take everything up to the last initial update, but not InSync.
    assert!(consumer.wait_until(|s| s.state.len() == 3));
    std::thread::sleep(Duration::from_millis(300));

    c.put(tier_key("change").as_bytes(), tier("change", 2).as_bytes())
        .unwrap();
    c.delete(tier_key("remove").as_bytes()).unwrap();
    c.put(tier_key("new").as_bytes(), tier("new", 3).as_bytes())
        .unwrap();
    let rev = c.current_revision().unwrap();
    c.compact(rev).unwrap();

    consumer.wait_in_sync();
    assert!(consumer.wait_until(|s| s.tier_order("change") == Some(2.0)
        && !s.has_tier("remove")
        && s.tier_order("new") == Some(3.0)));
    assert_eq!(consumer.tier_order("keep"), Some(1.0));
    let stats = syncer.stats();
    assert!(stats.compactions >= 1, "{stats:?}");
    assert!(stats.lists >= 2, "{stats:?}");
    // Live changes still flow after the resync.
    c.put(tier_key("later").as_bytes(), tier("later", 4).as_bytes())
        .unwrap();
    assert!(consumer.wait_until(|s| s.has_tier("later")));
    assert_eq!(consumer.in_syncs(), 1);
    assert_eq!(consumer.redundant, 0, "unchanged keys were re-sent");
}

/// A compaction between two pages of the initial listing restarts the
/// listing at a new revision; the result is still one consistent state.
#[test]
fn listing_interrupted_by_compaction_restarts_consistently() {
    let etcd = server();
    let c = etcd.client();
    // Enough pages that the fetcher (which runs a few pages ahead of the
    // held-up syncer) cannot have read them all before the compaction.
    for i in 0..20 {
        let n = format!("t{i}");
        c.put(tier_key(&n).as_bytes(), tier(&n, 1).as_bytes())
            .unwrap();
    }
    let mut cfg = config(&etcd);
    cfg.page_size = 2;
    cfg.batch_size = 1;
    let (syncer, mut consumer) = start(cfg, 0);
    // Let the first page through, then hold the syncer.
    assert!(consumer.wait_until(|s| !s.state.is_empty()));
    std::thread::sleep(Duration::from_millis(200));
    c.delete(tier_key("t9").as_bytes()).unwrap();
    c.put(tier_key("t0").as_bytes(), tier("t0", 9).as_bytes())
        .unwrap();
    let rev = c.current_revision().unwrap();
    c.compact(rev).unwrap();
    consumer.wait_in_sync();
    assert_eq!(consumer.tier_order("t0"), Some(9.0));
    assert!(!consumer.has_tier("t9"));
    assert_eq!(consumer.state.len(), 19);
    assert!(syncer.stats().compactions >= 1, "{:?}", syncer.stats());
    assert_eq!(consumer.in_syncs(), 1);
}

#[test]
fn etcd_restart_mid_stream_loses_nothing_and_applies_offline_deletions() {
    let mut etcd = server();
    let c = etcd.client();
    for name in ["a", "b", "c"] {
        c.put(tier_key(name).as_bytes(), tier(name, 1).as_bytes())
            .unwrap();
    }
    let mut cfg = config(&etcd);
    cfg.backoff_max = Duration::from_millis(200);
    let (syncer, mut consumer) = start(cfg, 4);
    consumer.wait_in_sync();
    c.put(tier_key("d").as_bytes(), tier("d", 1).as_bytes())
        .unwrap();
    assert!(consumer.wait_until(|s| s.has_tier("d")));

    // etcd goes away; while the syncer cannot reach it, the data changes.
    etcd.offline(|o| {
        o.delete(tier_key("a").as_bytes()).unwrap();
        o.put(tier_key("b").as_bytes(), tier("b", 2).as_bytes())
            .unwrap();
        o.put(tier_key("e").as_bytes(), tier("e", 1).as_bytes())
            .unwrap();
    })
    .unwrap();
    let back = felix_actors::clock::real_now();
    assert!(consumer
        .wait_until(|s| !s.has_tier("a") && s.tier_order("b") == Some(2.0) && s.has_tier("e")));
    eprintln!("converged {:?} after etcd came back", back.elapsed());
    assert!(consumer.has_tier("c") && consumer.has_tier("d"));

    // Several restarts in a row; then live changes still flow.
    etcd.restart().unwrap();
    etcd.restart().unwrap();
    let c = etcd.client();
    c.put(tier_key("f").as_bytes(), tier("f", 1).as_bytes())
        .unwrap();
    assert!(consumer.wait_until(|s| s.has_tier("f")));
    consumer.drain_for(Duration::from_millis(300));
    assert_eq!(consumer.in_syncs(), 1);
    assert_eq!(
        consumer.statuses,
        vec![
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync
        ]
    );
    assert_eq!(consumer.redundant, 0, "unchanged keys were re-sent");
    // Reconnection resumed the watch (or relisted): never a second InSync.
    let stats = syncer.stats();
    assert!(stats.lists + stats.resumes >= 2, "{stats:?}");
}

#[test]
fn unreachable_etcd_is_waited_for_without_busy_looping() {
    let mut etcd = server();
    let c = etcd.client();
    c.put(tier_key("x").as_bytes(), tier("x", 1).as_bytes())
        .unwrap();
    etcd.stop();
    let mut cfg = config(&etcd);
    cfg.backoff_min = Duration::from_millis(20);
    cfg.backoff_max = Duration::from_millis(400);
    let (syncer, mut consumer) = start(cfg, 4);
    consumer.drain_for(Duration::from_millis(1500));
    assert_eq!(consumer.statuses, vec![SyncStatus::WaitForDatastore]);
    let failures = syncer.stats().failures;
    // 20+40+80+160+320+400+400 ms... : a handful of attempts, not hundreds.
    assert!((2..=12).contains(&failures), "{failures} attempts in 1.5 s");
    etcd.restart().unwrap();
    consumer.wait_in_sync();
    assert!(consumer.has_tier("x"));
}

#[test]
fn two_keys_converting_to_one_model_key_follow_key_order() {
    let etcd = server();
    let c = etcd.client();
    // The Namespace `x` produces profile `kns.x`, as does this Profile.
    c.put(
        b"/calico/resources/v3/projectcalico.org/profiles/kns.x",
        br#"{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"kns.x"},"spec":{"labelsToApply":{"from":"profile"}}}"#,
    )
    .unwrap();
    let (_syncer, mut consumer) = start(config(&etcd), 4);
    consumer.wait_in_sync();
    let profile = |s: &Consumer| match s.state.get(&Key::Profile("kns.x".into())) {
        Some(Value::Profile(p)) => Some(p.labels.get("from").cloned()),
        _ => None,
    };
    assert_eq!(profile(&consumer), Some(Some("profile".into())));
    c.put(
        b"/calico/resources/v3/kubernetes/namespaces/x",
        br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x","labels":{"from":"namespace"}}}"#,
    )
    .unwrap();
    // The kubernetes/ key sorts first, so the namespace's profile wins.
    assert!(consumer.wait_until(|s| s.state.contains_key(&Key::Namespace("x".into()))));
    consumer.drain_for(Duration::from_millis(200));
    assert_ne!(profile(&consumer), Some(Some("profile".into())));
    c.delete(b"/calico/resources/v3/kubernetes/namespaces/x")
        .unwrap();
    assert!(consumer.wait_until(|s| profile(s) == Some(Some("profile".into()))));
}

#[test]
fn stop_is_prompt_while_watching_or_waiting() {
    let etcd = server();
    let (syncer, mut consumer) = start(config(&etcd), 4);
    consumer.wait_in_sync();
    let t = felix_actors::clock::real_now();
    syncer.stop();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Blocked on a full channel.
    let c = etcd.client();
    for i in 0..20 {
        let n = format!("t{i}");
        c.put(tier_key(&n).as_bytes(), tier(&n, 1).as_bytes())
            .unwrap();
    }
    let mut cfg = config(&etcd);
    cfg.batch_size = 1;
    let (syncer, consumer) = start(cfg, 1);
    std::thread::sleep(Duration::from_millis(300));
    let t = felix_actors::clock::real_now();
    syncer.stop();
    assert!(t.elapsed() < Duration::from_secs(2));
    drop(consumer);
}

#[test]
fn thread_ends_when_the_receiver_is_dropped() {
    let etcd = server();
    let (syncer, mut consumer) = start(config(&etcd), 4);
    consumer.wait_in_sync();
    drop(consumer);
    etcd.client()
        .put(tier_key("x").as_bytes(), tier("x", 1).as_bytes())
        .unwrap();
    let deadline = felix_actors::clock::real_now() + WAIT;
    while !syncer.is_finished() && felix_actors::clock::real_now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(syncer.is_finished());
}

/// After a restart the watch resumes from the last applied revision and
/// the replayed history is sent as net differences: a key created and
/// deleted while the syncer was away is never sent, a key changed twice is
/// sent once.  When that history was compacted meanwhile, the syncer
/// relists instead, with the same result.
#[test]
fn reconnection_replays_missed_history_as_net_differences_or_relists_if_compacted() {
    for compact in [false, true] {
        let mut etcd = server();
        let c = etcd.client();
        for name in ["a", "b"] {
            c.put(tier_key(name).as_bytes(), tier(name, 1).as_bytes())
                .unwrap();
        }
        let mut cfg = config(&etcd);
        cfg.backoff_max = Duration::from_millis(200);
        let (syncer, mut consumer) = start(cfg, 16);
        consumer.wait_in_sync();
        assert!(consumer.wait_until(|s| s.has_tier("a") && s.has_tier("b")));
        let seen = consumer.updates_seen;
        etcd.offline(|o| {
            o.put(tier_key("tmp").as_bytes(), tier("tmp", 1).as_bytes())
                .unwrap();
            o.delete(tier_key("tmp").as_bytes()).unwrap();
            o.put(tier_key("b").as_bytes(), tier("b", 2).as_bytes())
                .unwrap();
            o.put(tier_key("b").as_bytes(), tier("b", 3).as_bytes())
                .unwrap();
            o.delete(tier_key("a").as_bytes()).unwrap();
            if compact {
                o.compact(o.current_revision().unwrap()).unwrap();
            }
        })
        .unwrap();
        assert!(consumer.wait_until(|s| !s.has_tier("a") && s.tier_order("b") == Some(3.0)));
        consumer.drain_for(Duration::from_millis(300));
        assert!(!consumer.has_tier("tmp"));
        // Exactly two net changes: a deleted, b updated.
        assert_eq!(consumer.updates_seen - seen, 2, "compact={compact}");
        assert_eq!(consumer.redundant, 0);
        assert_eq!(consumer.in_syncs(), 1);
        let stats = syncer.stats();
        if compact {
            assert!(stats.lists >= 2 && stats.compactions >= 1, "{stats:?}");
        } else {
            assert!(stats.resumes >= 1 && stats.lists == 1, "{stats:?}");
        }
    }
}
