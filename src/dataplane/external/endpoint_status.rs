//! The endpoint status a driver reports, judged as upstream's endpoint manager judges it:
//! a workload endpoint is `up` when its interface is operationally up, else `down`; a host
//! endpoint is `up` when the interfaces it names (by name or by expected address) are all
//! up, `down` when one of them is down, `error` when none is found (`*` is always `up`).
//!
//! # Invariants
//! * `endpoint_reports_are_sent_on_change_only_and_removes_follow_the_view`: an endpoint's
//!   status is reported when it first appears and whenever it changes, never twice the same;
//!   an endpoint gone from the desired state is reported removed once.

use std::collections::BTreeMap;

use felix_proto as pb;
use felix_proto::from_dataplane::Payload;

use crate::calc::view::DataplaneView;
use crate::dataplane::ifacemon::InterfaceState;

/// The status of a workload endpoint.
pub fn workload_status(ep: &pb::WorkloadEndpoint, ifaces: &InterfaceState) -> &'static str {
    match ifaces.get(&ep.name) {
        Some(v) if v.link.up => "up",
        _ => "down",
    }
}

/// The status of a host endpoint.
pub fn host_status(ep: &pb::HostEndpoint, ifaces: &InterfaceState) -> &'static str {
    if ep.name == "*" {
        return "up";
    }
    if !ep.name.is_empty() {
        return match ifaces.get(&ep.name) {
            Some(v) if v.link.up => "up",
            Some(_) => "down",
            None => "error",
        };
    }
    let wanted: Vec<std::net::IpAddr> = ep
        .expected_ipv4_addrs
        .iter()
        .chain(&ep.expected_ipv6_addrs)
        .filter_map(|a| a.parse().ok())
        .collect();
    let matching: Vec<bool> = ifaces
        .all()
        .values()
        .filter(|v| v.addrs.iter().any(|a| wanted.contains(a)))
        .map(|v| v.link.up)
        .collect();
    match (matching.is_empty(), matching.iter().all(|u| *u)) {
        (true, _) => "error",
        (false, true) => "up",
        (false, false) => "down",
    }
}

/// Remembers what was reported and produces the reports of what changed.
#[derive(Debug, Default)]
pub struct EndpointReporter {
    workloads: BTreeMap<(String, String, String), &'static str>,
    hosts: BTreeMap<String, &'static str>,
}

impl EndpointReporter {
    /// The reports that bring the driven side from what was reported to `view`'s endpoints
    /// as `ifaces` shows them.
    pub fn changes(&mut self, view: &DataplaneView, ifaces: &InterfaceState) -> Vec<Payload> {
        let mut out = Vec::new();
        let wid = |k: &(String, String, String)| pb::WorkloadEndpointId {
            orchestrator_id: k.0.clone(),
            workload_id: k.1.clone(),
            endpoint_id: k.2.clone(),
        };
        for (k, ep) in &view.workload_endpoints {
            let s = workload_status(ep, ifaces);
            if self.workloads.get(k) != Some(&s) {
                self.workloads.insert(k.clone(), s);
                out.push(Payload::WorkloadEndpointStatusUpdate(
                    pb::WorkloadEndpointStatusUpdate {
                        id: Some(wid(k)),
                        status: Some(pb::EndpointStatus { status: s.into() }),
                        endpoint: Some(ep.clone()),
                    },
                ));
            }
        }
        let gone: Vec<_> = self
            .workloads
            .keys()
            .filter(|k| !view.workload_endpoints.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            self.workloads.remove(&k);
            out.push(Payload::WorkloadEndpointStatusRemove(
                pb::WorkloadEndpointStatusRemove { id: Some(wid(&k)) },
            ));
        }
        for (k, ep) in &view.host_endpoints {
            let s = host_status(ep, ifaces);
            if self.hosts.get(k) != Some(&s) {
                self.hosts.insert(k.clone(), s);
                out.push(Payload::HostEndpointStatusUpdate(
                    pb::HostEndpointStatusUpdate {
                        id: Some(pb::HostEndpointId {
                            endpoint_id: k.clone(),
                        }),
                        status: Some(pb::EndpointStatus { status: s.into() }),
                    },
                ));
            }
        }
        let gone: Vec<_> = self
            .hosts
            .keys()
            .filter(|k| !view.host_endpoints.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            self.hosts.remove(&k);
            out.push(Payload::HostEndpointStatusRemove(
                pb::HostEndpointStatusRemove {
                    id: Some(pb::HostEndpointId { endpoint_id: k }),
                },
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ifacemon::{IfaceEvent, LinkInfo};

    fn link(index: u32, name: &str, up: bool) -> IfaceEvent {
        IfaceEvent::Link(LinkInfo {
            index,
            name: name.into(),
            up,
        })
    }

    #[test]
    fn endpoint_reports_are_sent_on_change_only_and_removes_follow_the_view() {
        let ifaces = InterfaceState::default();
        let mut view = DataplaneView::new();
        let key = ("k8s".to_string(), "ns/a".to_string(), "eth0".to_string());
        view.workload_endpoints.insert(
            key.clone(),
            pb::WorkloadEndpoint {
                name: "calia".into(),
                ..Default::default()
            },
        );
        view.host_endpoints.insert(
            "h1".into(),
            pb::HostEndpoint {
                name: "eth9".into(),
                ..Default::default()
            },
        );
        let mut r = EndpointReporter::default();
        let status = |p: &Payload| match p {
            Payload::WorkloadEndpointStatusUpdate(u) => {
                format!("wep {}", u.status.clone().unwrap_or_default().status)
            }
            Payload::HostEndpointStatusUpdate(u) => {
                format!("hep {}", u.status.clone().unwrap_or_default().status)
            }
            Payload::WorkloadEndpointStatusRemove(_) => "wep removed".into(),
            Payload::HostEndpointStatusRemove(_) => "hep removed".into(),
            other => format!("{other:?}"),
        };
        let got: Vec<String> = r.changes(&view, &ifaces).iter().map(status).collect();
        assert_eq!(got, vec!["wep down", "hep error"]);
        assert!(r.changes(&view, &ifaces).is_empty(), "no change, no report");
        ifaces.apply(link(5, "calia", true));
        ifaces.apply(link(6, "eth9", false));
        let got: Vec<String> = r.changes(&view, &ifaces).iter().map(status).collect();
        assert_eq!(got, vec!["wep up", "hep down"]);
        view.workload_endpoints.remove(&key);
        view.host_endpoints.clear();
        let got: Vec<String> = r.changes(&view, &ifaces).iter().map(status).collect();
        assert_eq!(got, vec!["wep removed", "hep removed"]);
        assert!(r.changes(&view, &ifaces).is_empty());
    }
}
