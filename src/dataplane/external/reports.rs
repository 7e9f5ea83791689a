//! What an external driver reported (`FromDataplane`), kept for `/status` and the health
//! reporter: its process status, whether its dataplane is in sync, the status of each
//! endpoint and its WireGuard keys.
//!
//! # Invariants
//! * `reports_follow_updates_and_removes_and_count_sequence_gaps`: an endpoint status is
//!   shown from its update until its remove; a later update replaces it; a sequence number
//!   that is not the previous one plus one is counted as a gap (upstream numbers the
//!   driver's messages for log correlation only, so a gap is shown, not fatal).

use std::collections::BTreeMap;
use std::sync::Arc;

use felix_proto as pb;
use felix_proto::from_dataplane::Payload;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// The driver's reports; cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct DriverReports(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    process: Option<pb::ProcessStatusUpdate>,
    process_at: Option<String>,
    in_sync: bool,
    workloads: BTreeMap<String, (Value, String)>,
    hosts: BTreeMap<String, (Value, String)>,
    wireguard: BTreeMap<i32, String>,
    received: u64,
    last_seq: Option<u64>,
    seq_gaps: u64,
    by_type: BTreeMap<&'static str, u64>,
}

/// The `orchestrator/workload/endpoint` key of a workload endpoint id.
pub fn workload_key(id: &pb::WorkloadEndpointId) -> String {
    format!(
        "{}/{}/{}",
        id.orchestrator_id, id.workload_id, id.endpoint_id
    )
}

/// Name of a `FromDataplane` payload, as its proto field is called.
pub fn payload_name(p: &Payload) -> &'static str {
    match p {
        Payload::ProcessStatusUpdate(_) => "process_status_update",
        Payload::HostEndpointStatusUpdate(_) => "host_endpoint_status_update",
        Payload::HostEndpointStatusRemove(_) => "host_endpoint_status_remove",
        Payload::WorkloadEndpointStatusUpdate(_) => "workload_endpoint_status_update",
        Payload::WorkloadEndpointStatusRemove(_) => "workload_endpoint_status_remove",
        Payload::WireguardStatusUpdate(_) => "wireguard_status_update",
        Payload::DataplaneInSync(_) => "dataplane_in_sync",
    }
}

impl DriverReports {
    /// Records one message.
    pub fn apply(&self, msg: &pb::FromDataplane) {
        let mut i = self.0.lock();
        i.received += 1;
        if let Some(last) = i.last_seq {
            if msg.sequence_number != last.wrapping_add(1) {
                i.seq_gaps += 1;
            }
        }
        i.last_seq = Some(msg.sequence_number);
        let Some(p) = &msg.payload else { return };
        *i.by_type.entry(payload_name(p)).or_default() += 1;
        match p {
            Payload::ProcessStatusUpdate(s) => {
                i.process = Some(s.clone());
                i.process_at = Some(felix_actors::status::rfc3339(std::time::SystemTime::now()));
            }
            Payload::DataplaneInSync(_) => i.in_sync = true,
            Payload::WorkloadEndpointStatusUpdate(u) => {
                let id = u.id.clone().unwrap_or_default();
                let status = u.status.clone().unwrap_or_default().status;
                i.workloads
                    .insert(workload_key(&id), (crate::calc::view::to_json(&id), status));
            }
            Payload::WorkloadEndpointStatusRemove(r) => {
                i.workloads
                    .remove(&workload_key(&r.id.clone().unwrap_or_default()));
            }
            Payload::HostEndpointStatusUpdate(u) => {
                let id = u.id.clone().unwrap_or_default();
                let status = u.status.clone().unwrap_or_default().status;
                i.hosts.insert(
                    id.endpoint_id.clone(),
                    (crate::calc::view::to_json(&id), status),
                );
            }
            Payload::HostEndpointStatusRemove(r) => {
                i.hosts
                    .remove(&r.id.clone().unwrap_or_default().endpoint_id);
            }
            Payload::WireguardStatusUpdate(w) => {
                i.wireguard.insert(w.ip_version, w.public_key.clone());
            }
        }
    }

    /// Whether the driver said its dataplane is in sync.
    pub fn in_sync(&self) -> bool {
        self.0.lock().in_sync
    }

    /// The status of each workload endpoint, by `orchestrator/workload/endpoint`.
    pub fn workload_statuses(&self) -> BTreeMap<String, String> {
        self.0
            .lock()
            .workloads
            .iter()
            .map(|(k, (_, s))| (k.clone(), s.clone()))
            .collect()
    }

    /// The `driver` object of `/status` (without the fields the caller adds).
    pub fn to_json(&self) -> Value {
        let i = self.0.lock();
        let eps = |m: &BTreeMap<String, (Value, String)>| {
            m.values()
                .map(|(id, s)| json!({"id": id, "status": s}))
                .collect::<Vec<_>>()
        };
        json!({
            "processStatus": i.process.as_ref().map(|p| json!({
                "isoTimestamp": p.iso_timestamp,
                "uptime": p.uptime,
                "receivedAt": i.process_at,
            })),
            "dataplaneInSync": i.in_sync,
            "workloadEndpoints": eps(&i.workloads),
            "hostEndpoints": eps(&i.hosts),
            "wireguard": i.wireguard.iter().map(|(v, k)| json!({"ipVersion": v, "publicKey": k})).collect::<Vec<_>>(),
            "messages": i.received,
            "messagesByType": i.by_type,
            "lastSequenceNumber": i.last_seq,
            "sequenceGaps": i.seq_gaps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, p: Payload) -> pb::FromDataplane {
        pb::FromDataplane {
            sequence_number: seq,
            payload: Some(p),
        }
    }

    fn wep(name: &str) -> pb::WorkloadEndpointId {
        pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: format!("ns/{name}"),
            endpoint_id: "eth0".into(),
        }
    }

    #[test]
    fn reports_follow_updates_and_removes_and_count_sequence_gaps() {
        let r = DriverReports::default();
        assert!(!r.in_sync());
        let up = |name: &str, s: &str| {
            Payload::WorkloadEndpointStatusUpdate(pb::WorkloadEndpointStatusUpdate {
                id: Some(wep(name)),
                status: Some(pb::EndpointStatus { status: s.into() }),
                endpoint: None,
            })
        };
        r.apply(&msg(1, up("a", "down")));
        r.apply(&msg(2, up("b", "up")));
        r.apply(&msg(3, up("a", "up")));
        r.apply(&msg(
            4,
            Payload::WorkloadEndpointStatusRemove(pb::WorkloadEndpointStatusRemove {
                id: Some(wep("b")),
            }),
        ));
        r.apply(&msg(
            6,
            Payload::ProcessStatusUpdate(pb::ProcessStatusUpdate {
                iso_timestamp: "2026-12-03T00:00:00Z".into(),
                uptime: 1.5,
            }),
        ));
        r.apply(&msg(7, Payload::DataplaneInSync(pb::DataplaneInSync {})));
        assert!(r.in_sync());
        assert_eq!(
            r.workload_statuses(),
            BTreeMap::from([("k8s/ns/a/eth0".to_string(), "up".to_string())])
        );
        let j = r.to_json();
        assert_eq!(j["sequenceGaps"], 1, "5 is missing: {j}");
        assert_eq!(j["messages"], 6);
        assert_eq!(j["processStatus"]["uptime"], 1.5);
        assert_eq!(j["workloadEndpoints"][0]["status"], "up");
        assert_eq!(j["workloadEndpoints"][0]["id"]["workloadId"], "ns/a");
    }
}
