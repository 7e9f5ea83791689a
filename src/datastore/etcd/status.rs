//! Status reports written to etcd where upstream's status reporter writes them (external
//! dataplane driver mode, `EndpointReportingEnabled`):
//!
//! | report | key | value |
//! |---|---|---|
//! | workload endpoint | `/calico/felix/v2/no-region/host/<node>/workload/<orch>/<workload>/endpoint/<ep>` | `{"status": "up"\|"down"\|"error"}` |
//! | host endpoint | `/calico/felix/v1/host/<node>/endpoint/<ep>` | the same |
//! | process status | `/calico/felix/v2/no-region/host/<node>/status` (lease of `ReportingTTLSecs`) and `.../last_reported_status` | `{"time", "uptime", "first_update"}` |
//!
//! Names are escaped as upstream escapes them (`%` -> `%25`, `/` -> `%2f`); a remove deletes
//! the key. The region is always `no-region` (felix-rs has no `OpenstackRegion`).
//!
//! # Invariants
//! * `status_keys_are_upstreams_and_endpoint_writes_are_rate_limited`: endpoint writes wait
//!   in a pending map (the latest report per endpoint wins) and at most one goes out per
//!   `EndpointReportingDelaySecs`; a write that fails stays pending and is tried again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use felix_proto as pb;
use felix_proto::from_dataplane::Payload;

use super::client::EtcdClient;

const REGION: &str = "no-region";

/// Upstream's name escaping in status keys.
pub fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2f")
}

/// The key of a workload endpoint's status.
pub fn workload_key(node: &str, id: &pb::WorkloadEndpointId) -> String {
    format!(
        "/calico/felix/v2/{REGION}/host/{node}/workload/{}/{}/endpoint/{}",
        escape(&id.orchestrator_id),
        escape(&id.workload_id),
        escape(&id.endpoint_id)
    )
}

/// The key of a host endpoint's status.
pub fn host_key(node: &str, id: &pb::HostEndpointId) -> String {
    format!(
        "/calico/felix/v1/host/{node}/endpoint/{}",
        escape(&id.endpoint_id)
    )
}

/// Where the process status goes: the leased key and the lasting one.
pub fn process_keys(node: &str) -> (String, String) {
    let base = format!("/calico/felix/v2/{REGION}/host/{node}");
    (
        format!("{base}/status"),
        format!("{base}/last_reported_status"),
    )
}

/// Writes the driver's reports to etcd.
pub struct EtcdStatusWriter {
    client: EtcdClient,
    node: String,
    endpoints: bool,
    delay: Duration,
    ttl: Duration,
    /// Key -> value to write (`None`: delete).
    pending: BTreeMap<String, Option<String>>,
    last_write: Option<Instant>,
    first_status: bool,
}

impl std::fmt::Debug for EtcdStatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStatusWriter")
            .field("node", &self.node)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl EtcdStatusWriter {
    /// A writer for node `node`: endpoint status only with `endpoints`
    /// (`EndpointReportingEnabled`), at most one write per `delay`; process status with a
    /// lease of `ttl` (`ReportingTTLSecs`).
    pub fn new(
        client: EtcdClient,
        node: &str,
        endpoints: bool,
        delay: Duration,
        ttl: Duration,
    ) -> Self {
        EtcdStatusWriter {
            client,
            node: node.to_string(),
            endpoints,
            delay,
            ttl,
            pending: BTreeMap::new(),
            last_write: None,
            first_status: true,
        }
    }

    /// Takes one report.
    pub fn on_report(&mut self, p: &Payload) {
        let status = |s: &Option<pb::EndpointStatus>| {
            let s = s.as_ref().map(|s| s.status.clone()).unwrap_or_default();
            (!s.is_empty()).then(|| serde_json::json!({ "status": s }).to_string())
        };
        match p {
            Payload::ProcessStatusUpdate(u) => self.process_status(u),
            Payload::WorkloadEndpointStatusUpdate(u) if self.endpoints => {
                let id = u.id.clone().unwrap_or_default();
                self.pending
                    .insert(workload_key(&self.node, &id), status(&u.status));
            }
            Payload::WorkloadEndpointStatusRemove(r) if self.endpoints => {
                let id = r.id.clone().unwrap_or_default();
                self.pending.insert(workload_key(&self.node, &id), None);
            }
            Payload::HostEndpointStatusUpdate(u) if self.endpoints => {
                let id = u.id.clone().unwrap_or_default();
                self.pending
                    .insert(host_key(&self.node, &id), status(&u.status));
            }
            Payload::HostEndpointStatusRemove(r) if self.endpoints => {
                let id = r.id.clone().unwrap_or_default();
                self.pending.insert(host_key(&self.node, &id), None);
            }
            _ => {}
        }
    }

    fn process_status(&mut self, u: &pb::ProcessStatusUpdate) {
        let value = serde_json::json!({
            "time": u.iso_timestamp,
            "uptime": u.uptime,
            "first_update": self.first_status,
        })
        .to_string();
        let (leased, lasting) = process_keys(&self.node);
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(90).max(1);
        let res = self
            .client
            .lease_grant(ttl)
            .and_then(|lease| {
                self.client
                    .put_with_lease(leased.as_bytes(), value.as_bytes(), lease)
            })
            .and_then(|_| self.client.put(lasting.as_bytes(), value.as_bytes()));
        match res {
            Ok(_) => self.first_status = false,
            Err(e) => tracing::warn!(key = %leased, "cannot write the process status to etcd: {e}"),
        }
    }

    /// Writes one pending endpoint status if the rate limit allows; call it often.
    pub fn tick(&mut self, now: Instant) {
        if self
            .last_write
            .is_some_and(|t| now.duration_since(t) < self.delay)
        {
            return;
        }
        let Some((key, value)) = self.pending.pop_first() else {
            return;
        };
        self.last_write = Some(now);
        let res = match &value {
            Some(v) => self.client.put(key.as_bytes(), v.as_bytes()),
            None => self.client.delete(key.as_bytes()),
        };
        if let Err(e) = res {
            tracing::warn!(%key, "cannot write an endpoint status to etcd: {e}; will retry");
            self.pending.entry(key).or_insert(value);
        }
    }

    /// Endpoint writes waiting.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_keys_are_upstreams_and_endpoint_writes_are_rate_limited() {
        let id = pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: "ns/pod%1".into(),
            endpoint_id: "eth0".into(),
        };
        assert_eq!(
            workload_key("n1", &id),
            "/calico/felix/v2/no-region/host/n1/workload/k8s/ns%2fpod%251/endpoint/eth0"
        );
        assert_eq!(
            host_key(
                "n1",
                &pb::HostEndpointId {
                    endpoint_id: "h/1".into()
                }
            ),
            "/calico/felix/v1/host/n1/endpoint/h%2f1"
        );
        assert_eq!(
            process_keys("n1").1,
            "/calico/felix/v2/no-region/host/n1/last_reported_status"
        );
        // An unreachable etcd: writes stay pending, one attempt per delay.
        let client = EtcdClient::new(&["http://127.0.0.1:9".to_string()], None)
            .expect("client")
            .with_request_timeout(Duration::from_millis(200));
        let mut w = EtcdStatusWriter::new(
            client,
            "n1",
            true,
            Duration::from_secs(3600),
            Duration::from_secs(90),
        );
        let up = |s: &str| {
            Payload::WorkloadEndpointStatusUpdate(pb::WorkloadEndpointStatusUpdate {
                id: Some(id.clone()),
                status: Some(pb::EndpointStatus { status: s.into() }),
                endpoint: None,
            })
        };
        w.on_report(&up("down"));
        w.on_report(&up("up"));
        assert_eq!(w.pending(), 1, "the latest report per endpoint wins");
        let t = felix_actors::clock::real_now();
        w.tick(t);
        assert_eq!(w.pending(), 1, "a failed write stays pending");
        w.tick(t);
        assert_eq!(w.pending(), 1);
        // Endpoint reporting off: nothing is kept.
        let client = EtcdClient::new(&["http://127.0.0.1:9".to_string()], None).expect("client");
        let mut off =
            EtcdStatusWriter::new(client, "n1", false, Duration::ZERO, Duration::from_secs(90));
        off.on_report(&up("up"));
        assert_eq!(off.pending(), 0);
    }
}
