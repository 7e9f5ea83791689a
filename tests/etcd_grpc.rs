//! etcd range reads over native gRPC against a real etcd server (Debian's
//! etcd-server, started on loopback ports by the harness): the answers
//! equal the JSON gateway's, page by page, and failures are typed.

use std::net::TcpListener;
use std::time::Duration;

use felix::datastore::etcd::client::{prefix_end, RangePage};
use felix::datastore::etcd::testing::EtcdTestServer;
use felix::datastore::etcd::{EtcdClient, EtcdError};

fn server() -> EtcdTestServer {
    EtcdTestServer::start().expect("start etcd (Debian etcd-server must be installed)")
}

/// Fills `/t/` with keys of varied values and histories: some updated
/// (create != mod revision), some deleted, some binary or empty, plus
/// keys outside the prefix.  Returns the revision after the writes.
fn populate(c: &EtcdClient) -> i64 {
    c.put(b"/s", b"before the prefix").unwrap();
    c.put(b"/u", b"after the prefix").unwrap();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for i in 0..230u32 {
        let key = format!("/t/{i:04}").into_bytes();
        let value = match i % 5 {
            0 => Vec::new(),
            1 => vec![0, 0xff, b'\n', b'"', 0x80, i as u8],
            _ => format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i as usize)).into_bytes(),
        };
        pairs.push((key, value));
    }
    for chunk in pairs.chunks(100) {
        let refs: Vec<(&[u8], &[u8])> = chunk
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        c.put_many(&refs).unwrap();
    }
    for i in (0..230u32).step_by(7) {
        c.put(
            format!("/t/{i:04}").as_bytes(),
            format!("v2-{i}").as_bytes(),
        )
        .unwrap();
    }
    for i in (3..230u32).step_by(11) {
        assert_eq!(c.delete(format!("/t/{i:04}").as_bytes()).unwrap(), 1);
    }
    c.current_revision().unwrap()
}

/// Pages through `[start, end)` at `revision` with `read`.
fn pages(
    read: impl Fn(&[u8], i64) -> Result<RangePage, EtcdError>,
    prefix: &[u8],
    limit: i64,
) -> Vec<RangePage> {
    let mut start = prefix.to_vec();
    let mut out = Vec::new();
    loop {
        let page = read(&start, limit).unwrap();
        let more = page.more;
        if let Some(last) = page.kvs.last() {
            start = last.key.clone();
            start.push(0);
        }
        out.push(page);
        if !more {
            return out;
        }
        assert!(out.len() < 1000, "paging does not end");
    }
}

fn assert_same(grpc: &[RangePage], gateway: &[RangePage]) {
    assert_eq!(grpc.len(), gateway.len(), "page count");
    for (i, (g, j)) in grpc.iter().zip(gateway).enumerate() {
        assert_eq!(g.revision, j.revision, "page {i} revision");
        assert_eq!(g.more, j.more, "page {i} more");
        assert_eq!(g.kvs, j.kvs, "page {i} keys");
    }
}

#[test]
fn range_over_grpc_equals_the_gateway_page_by_page() {
    let etcd = server();
    let c = etcd.client();
    let revision = populate(&c);
    let end = prefix_end(b"/t/");
    for limit in [1, 7, 50, 1000] {
        let grpc = pages(|s, l| c.range(s, &end, revision, l), b"/t/", limit);
        let gateway = pages(|s, l| c.range_gateway(s, &end, revision, l), b"/t/", limit);
        assert_same(&grpc, &gateway);
        let keys: usize = grpc.iter().map(|p| p.kvs.len()).sum();
        // 230 written, every 11th from 3 deleted.
        assert_eq!(keys, 230 - (3..230).step_by(11).count(), "limit {limit}");
        if limit < 200 {
            assert!(grpc.len() > 1 && grpc[0].more, "limit {limit} pages");
        }
    }
    // Revisions, values and the boundaries are the ones written.
    let all = pages(|s, l| c.range(s, &end, revision, l), b"/t/", 1000);
    let kvs = &all[0].kvs;
    assert_eq!(kvs.first().unwrap().key, b"/t/0000");
    let k1 = kvs.iter().find(|kv| kv.key == b"/t/0001").unwrap();
    assert_eq!(k1.value, vec![0, 0xff, b'\n', b'"', 0x80, 1]);
    assert_eq!(k1.create_revision, k1.mod_revision);
    let k7 = kvs.iter().find(|kv| kv.key == b"/t/0007").unwrap();
    assert_eq!(k7.value, b"v2-7");
    assert!(k7.mod_revision > k7.create_revision);
    assert!(kvs.iter().all(|kv| kv.key != b"/t/0003"));

    // An older revision (before the updates and deletions) is served as
    // it was, by both transports.
    let old = revision - 40;
    let grpc = pages(|s, l| c.range(s, &end, old, l), b"/t/", 13);
    let gateway = pages(|s, l| c.range_gateway(s, &end, old, l), b"/t/", 13);
    assert_same(&grpc, &gateway);
    assert!(grpc.iter().all(|p| p.revision == revision));

    // Keys only: same keys and revisions, no values.
    let keys_only = c.range_keys(b"/t/", &end, revision, 1000).unwrap();
    assert_eq!(keys_only.kvs.len(), kvs.len());
    for (k, full) in keys_only.kvs.iter().zip(kvs) {
        assert_eq!(k.key, full.key);
        assert_eq!(k.mod_revision, full.mod_revision);
        assert!(k.value.is_empty());
    }

    // Single keys and the current revision.
    assert_eq!(c.get(b"/t/0007").unwrap().unwrap().value, b"v2-7");
    assert_eq!(c.get(b"/t/0003").unwrap(), None);
    c.put(b"/t/new", b"1").unwrap();
    assert_eq!(c.current_revision().unwrap(), revision + 1);
    // An empty range.
    let empty = c.range(b"/none/", &prefix_end(b"/none/"), 0, 10).unwrap();
    assert!(empty.kvs.is_empty() && !empty.more);
    assert_eq!(empty.revision, revision + 1);
}

#[test]
fn prefetched_reads_equal_blocking_ones() {
    let etcd = server();
    let c = etcd.client();
    let revision = populate(&c);
    let end = prefix_end(b"/t/");
    let a = c.start_range(b"/t/", &end, revision, 10).unwrap();
    let b = c.start_range(b"/t/0100", &end, revision, 10).unwrap();
    // Collected out of order; a third one is abandoned unread.
    let b = c.finish_range(b).unwrap();
    drop(c.start_range(b"/t/", &end, revision, 10).unwrap());
    let a = c.finish_range(a).unwrap();
    assert_same(
        &[a, b],
        &[
            c.range_gateway(b"/t/", &end, revision, 10).unwrap(),
            c.range_gateway(b"/t/0100", &end, revision, 10).unwrap(),
        ],
    );
}

#[test]
fn compacted_revision_is_a_typed_error() {
    let etcd = server();
    let c = etcd.client();
    let first = c.put(b"/t/a", b"1").unwrap();
    let now = c.put(b"/t/a", b"2").unwrap();
    c.compact(now).unwrap();
    let end = prefix_end(b"/t/");
    match c.range(b"/t/", &end, first, 10) {
        Err(EtcdError::Compacted { revision, .. }) => assert_eq!(revision, first),
        other => panic!("expected Compacted, got {other:?}"),
    }
    // A revision in the future is a server error, not a compaction.
    match c.range(b"/t/", &end, now + 100, 10) {
        Err(EtcdError::Server { code, message }) => {
            assert_eq!(code, 11, "{message}");
            assert!(message.contains("future"), "{message}");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    // The connection stays usable.
    assert_eq!(c.range(b"/t/", &end, now, 10).unwrap().kvs.len(), 1);
}

#[test]
fn unreachable_etcd_is_unavailable_and_restart_is_reconnected() {
    // Nothing listens on a port just released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let c = EtcdClient::new(std::slice::from_ref(&url), None).unwrap();
    let t = felix_actors::clock::real_now();
    match c.range(b"/", b"0", 0, 1) {
        Err(EtcdError::Unavailable(m)) => assert!(m.contains(&url), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));

    // A second endpoint that works is used after the dead one.
    let mut etcd = server();
    let c = EtcdClient::new(&[url, etcd.url()], None).unwrap();
    c.put(b"/k", b"v").unwrap();
    assert_eq!(c.get(b"/k").unwrap().unwrap().value, b"v");

    // etcd killed: the kept connection fails as Unavailable; restarted:
    // the next read reconnects by itself.
    etcd.stop();
    assert!(matches!(
        c.range(b"/", b"0", 0, 1),
        Err(EtcdError::Unavailable(_))
    ));
    etcd.restart().unwrap();
    assert_eq!(c.get(b"/k").unwrap().unwrap().value, b"v");
}

#[test]
fn stop_flag_abandons_reads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let etcd = server();
    let stop = Arc::new(AtomicBool::new(false));
    let c = EtcdClient::new(&[etcd.url()], Some(stop.clone())).unwrap();
    assert_eq!(c.get(b"/k").unwrap(), None);
    stop.store(true, Ordering::SeqCst);
    assert!(matches!(c.get(b"/k"), Err(EtcdError::Stopped)));
}
