//! The external driver's status reports written to a real etcd where upstream's status
//! reporter writes them (`felix::datastore::etcd::status`): the process status under a
//! lease of `ReportingTTLSecs` plus the lasting copy, endpoint status written and deleted.

use std::time::Duration;

use felix::datastore::etcd::status::{process_keys, workload_key, EtcdStatusWriter};
use felix::datastore::etcd::testing::EtcdTestServer;
use felix_proto as pb;
use felix_proto::from_dataplane::Payload;

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = felix_actors::clock::real_now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn process_and_endpoint_status_land_on_upstreams_keys() {
    let etcd = EtcdTestServer::start().expect("etcd");
    let client = etcd.client();
    let mut w = EtcdStatusWriter::new(
        etcd.client(),
        "node-a",
        true,
        Duration::ZERO,
        Duration::from_secs(2),
    );
    w.on_report(&Payload::ProcessStatusUpdate(pb::ProcessStatusUpdate {
        iso_timestamp: "2026-12-03T00:00:00Z".into(),
        uptime: 12.5,
    }));
    let (leased, lasting) = process_keys("node-a");
    let value = client
        .get(lasting.as_bytes())
        .expect("get")
        .expect("last_reported_status written");
    let v: serde_json::Value = serde_json::from_slice(&value.value).expect("json");
    assert_eq!(v["uptime"], 12.5);
    assert_eq!(v["first_update"], true);
    assert!(client.get(leased.as_bytes()).expect("get").is_some());
    // The leased key goes with its lease; the lasting one stays.
    wait_for("the status key outlived its lease", || {
        client.get(leased.as_bytes()).is_ok_and(|v| v.is_none())
    });
    assert!(client.get(lasting.as_bytes()).expect("get").is_some());

    let id = pb::WorkloadEndpointId {
        orchestrator_id: "k8s".into(),
        workload_id: "shop/db".into(),
        endpoint_id: "eth0".into(),
    };
    w.on_report(&Payload::WorkloadEndpointStatusUpdate(
        pb::WorkloadEndpointStatusUpdate {
            id: Some(id.clone()),
            status: Some(pb::EndpointStatus {
                status: "up".into(),
            }),
            endpoint: None,
        },
    ));
    w.tick(felix_actors::clock::real_now());
    let key = workload_key("node-a", &id);
    assert!(
        key.ends_with("/workload/k8s/shop%2fdb/endpoint/eth0"),
        "{key}"
    );
    let got = client.get(key.as_bytes()).expect("get").expect("written");
    assert_eq!(got.value, br#"{"status":"up"}"#);
    w.on_report(&Payload::WorkloadEndpointStatusRemove(
        pb::WorkloadEndpointStatusRemove { id: Some(id) },
    ));
    w.tick(felix_actors::clock::real_now());
    assert!(client.get(key.as_bytes()).expect("get").is_none());
    assert_eq!(w.pending(), 0);
}
