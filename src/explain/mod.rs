//! `felix explain`: which rule decides a flow (INTERFACES.md, "`felix
//! explain`").
//!
//! The input is the desired dataplane view ([`DataplaneView`]): the calc
//! graph's resolved per-endpoint tiers, policies, profiles and IP sets, the
//! same messages the dataplane's managers consume, live from the daemon
//! (admin socket `POST /explain`) or replayed offline from datastore states
//! as `felix calc` does. Rules are compiled and evaluated as the dataplane
//! compiles them ([`rules`]); endpoint walks follow the renderer's chain
//! order ([`leg`]). A differential test in `fv/` (`netfv_explain`) holds the
//! verdicts equal to what real traffic does in each mode.
//!
//! Which legs a flow has:
//! * `egress`: the source is a local workload (its egress policy; before it,
//!   admin-down and encapsulated-from-workload drops), or a host endpoint's
//!   expected address (the host sends: failsafe, untracked, normal egress);
//! * `ingress`: the destination is a local workload (its ingress policy), a
//!   host endpoint's address (failsafe, untracked, pre-DNAT, normal ingress),
//!   or this host's own address reached from a local workload (the
//!   `DefaultEndpointToHostAction`, endpoint `{"host": NODE}`);
//! * neither: [`ExplainError::NotLocal`].
//!
//! The flow is allowed when every leg it has allows it.

pub mod admin;
pub mod flow;
pub mod leg;
pub mod rules;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use felix_config::{Config, EndpointToHostAction, ProtoPort, Source};
use felix_proto as pb;
use ipnet::IpNet;
use serde::Serialize;
use serde_json::json;

use crate::calc::view::{to_json, DataplaneView};

pub use flow::{Flow, FlowError, FlowSpec};
pub use leg::{DecidedBy, Leg, TraceStep, Verdict};

use leg::{Dir, WalkEnd, WalkKind, Walker};
use rules::Sets;

/// The settings that change a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `VXLANPort`: UDP to it from a workload is dropped unless allowed.
    pub vxlan_port: u16,
    /// `AllowVXLANPacketsFromWorkloads`.
    pub allow_vxlan: bool,
    /// `AllowIPIPPacketsFromWorkloads`.
    pub allow_ipip: bool,
    /// `DefaultEndpointToHostAction`.
    pub endpoint_to_host: EndpointToHostAction,
    /// `FailsafeInboundHostPorts`.
    pub failsafe_in: Vec<ProtoPort>,
    /// `FailsafeOutboundHostPorts`.
    pub failsafe_out: Vec<ProtoPort>,
}

impl Settings {
    /// The settings of a daemon's configuration.
    pub fn from_config(cfg: &Config) -> Settings {
        Settings {
            vxlan_port: u16::try_from(cfg.vxlan_port()).unwrap_or(4789),
            allow_vxlan: cfg.allow_vxlan_packets_from_workloads(),
            allow_ipip: cfg.allow_ipip_packets_from_workloads(),
            endpoint_to_host: cfg.default_endpoint_to_host_action(),
            failsafe_in: cfg.failsafe_inbound_host_ports().to_vec(),
            failsafe_out: cfg.failsafe_outbound_host_ports().to_vec(),
        }
    }

    /// Offline: the view's datastore configuration under this process's
    /// `FELIX_*` environment, as `felix run` would merge them.
    pub fn from_view(view: &DataplaneView) -> Settings {
        let layers = [
            (Source::DatastoreGlobal, view.config.clone()),
            (Source::Environment, felix_config::process_env_overrides()),
        ];
        let (cfg, _) = Config::build(&layers);
        Settings::from_config(&cfg)
    }
}

/// A flow that cannot be explained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// Neither end is an endpoint of this node.
    #[error(
        "neither {src} nor {dst} is a workload or host endpoint of node {node:?}: \
         this node's dataplane does not police the flow"
    )]
    NotLocal {
        /// The source.
        src: IpAddr,
        /// The destination.
        dst: IpAddr,
        /// The node.
        node: String,
    },
}

/// The answer (INTERFACES.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// `allow` when every leg allows.
    pub verdict: Verdict,
    /// The source's leg.
    pub egress: Option<Leg>,
    /// The destination's leg.
    pub ingress: Option<Leg>,
}

fn nets_contain(nets: &[String], a: IpAddr) -> bool {
    nets.iter()
        .filter_map(|n| n.parse::<IpNet>().ok())
        .any(|n| n.contains(&a))
}

/// The local workload endpoint holding address `a` (in its family's nets).
pub(crate) fn find_workload(
    view: &DataplaneView,
    a: IpAddr,
) -> Option<(pb::WorkloadEndpointId, &pb::WorkloadEndpoint)> {
    view.workload_endpoints.iter().find_map(|((o, w, e), ep)| {
        let nets = if a.is_ipv6() {
            &ep.ipv6_nets
        } else {
            &ep.ipv4_nets
        };
        nets_contain(nets, a).then(|| {
            (
                pb::WorkloadEndpointId {
                    orchestrator_id: o.clone(),
                    workload_id: w.clone(),
                    endpoint_id: e.clone(),
                },
                ep,
            )
        })
    })
}

/// The local host endpoint expecting address `a`.
pub(crate) fn find_host_endpoint(
    view: &DataplaneView,
    a: IpAddr,
) -> Option<(&String, &pb::HostEndpoint)> {
    let s = a.to_string();
    view.host_endpoints.iter().find(|(_, ep)| {
        let addrs = if a.is_ipv6() {
            &ep.expected_ipv6_addrs
        } else {
            &ep.expected_ipv4_addrs
        };
        addrs
            .iter()
            .any(|x| x.parse::<IpAddr>().ok() == Some(a) || *x == s)
    })
}

fn is_host_address(view: &DataplaneView, node: &str, a: IpAddr) -> bool {
    view.host_metadata.get(node).is_some_and(|h| {
        [&h.ipv4_addr, &h.ipv6_addr].into_iter().any(|x| {
            let x = x.split('/').next().unwrap_or_default();
            x.parse::<IpAddr>().ok() == Some(a)
        })
    })
}

/// Whether (proto, port, peer) is one of the failsafe ports.
fn failsafe(ports: &[ProtoPort], f: &Flow, port: u16, peer: IpAddr) -> bool {
    let name = match f.proto {
        6 => "tcp",
        17 => "udp",
        _ => return false,
    };
    ports
        .iter()
        .any(|p| p.protocol == name && p.port == port && p.net.is_none_or(|n| n.contains(&peer)))
}

fn leg(endpoint: serde_json::Value, end: WalkEnd, trace: Vec<TraceStep>) -> Leg {
    let (verdict, decided_by) = match end {
        WalkEnd::Decided(v, d) => (v, d),
        WalkEnd::Undecided => (Verdict::Allow, DecidedBy::NoMatch {}),
    };
    Leg {
        endpoint,
        verdict,
        decided_by,
        trace,
    }
}

fn endpoint_reason(v: Verdict, reason: String) -> WalkEnd {
    WalkEnd::Decided(v, DecidedBy::Endpoint { reason })
}

/// A workload's leg in `dir`.
fn workload_leg(
    w: &mut Walker<'_>,
    settings: &Settings,
    ep: &pb::WorkloadEndpoint,
    dir: Dir,
) -> WalkEnd {
    if ep.state != "active" {
        return endpoint_reason(
            Verdict::Deny,
            format!("endpoint is admin-down (state {:?})", ep.state),
        );
    }
    if dir == Dir::Egress {
        let f = w.flow;
        if f.proto == 17 && f.dst_port == settings.vxlan_port && !settings.allow_vxlan {
            return endpoint_reason(
                Verdict::Deny,
                "VXLAN from a workload (AllowVXLANPacketsFromWorkloads is false)".into(),
            );
        }
        if f.proto == 4 && !settings.allow_ipip {
            return endpoint_reason(
                Verdict::Deny,
                "IP-in-IP from a workload (AllowIPIPPacketsFromWorkloads is false)".into(),
            );
        }
    }
    w.walk(&ep.tiers, &ep.profile_ids, dir, WalkKind::Normal)
}

/// A host endpoint's leg for traffic to (`Ingress`) or from the host.
fn host_endpoint_leg(
    w: &mut Walker<'_>,
    settings: &Settings,
    ep: &pb::HostEndpoint,
    dir: Dir,
) -> WalkEnd {
    let f = *w.flow;
    let fsafe = match dir {
        Dir::Ingress => failsafe(&settings.failsafe_in, &f, f.dst_port, f.src),
        Dir::Egress => failsafe(&settings.failsafe_out, &f, f.dst_port, f.dst),
    };
    if fsafe {
        let which = match dir {
            Dir::Ingress => "FailsafeInboundHostPorts",
            Dir::Egress => "FailsafeOutboundHostPorts",
        };
        return endpoint_reason(Verdict::Allow, format!("failsafe port ({which})"));
    }
    if let end @ WalkEnd::Decided(..) = w.walk(
        &ep.untracked_tiers,
        &[],
        dir,
        WalkKind::Optional("untracked"),
    ) {
        return end;
    }
    if dir == Dir::Ingress {
        if let end @ WalkEnd::Decided(..) =
            w.walk(&ep.pre_dnat_tiers, &[], dir, WalkKind::Optional("preDnat"))
        {
            return end;
        }
    }
    w.walk(&ep.tiers, &ep.profile_ids, dir, WalkKind::Normal)
}

/// Explains `flow` on node `node`'s desired dataplane `view`.
pub fn explain(
    view: &DataplaneView,
    settings: &Settings,
    node: &str,
    flow: &Flow,
) -> Result<Explanation, ExplainError> {
    let mut sets = Sets::new(&view.ip_sets);
    let src_wep = find_workload(view, flow.src);
    let dst_wep = find_workload(view, flow.dst);
    let src_hep = find_host_endpoint(view, flow.src);
    let dst_hep = find_host_endpoint(view, flow.dst);
    let mut walker = |f: &mut dyn FnMut(&mut Walker<'_>) -> (serde_json::Value, WalkEnd)| {
        let mut w = Walker {
            view,
            sets: &mut sets,
            flow,
            trace: Vec::new(),
        };
        let (id, end) = f(&mut w);
        leg(id, end, w.trace)
    };
    let egress = if let Some((id, ep)) = &src_wep {
        Some(walker(&mut |w| {
            (to_json(id), workload_leg(w, settings, ep, Dir::Egress))
        }))
    } else if let Some((id, ep)) = &src_hep {
        Some(walker(&mut |w| {
            (
                to_json(&pb::HostEndpointId {
                    endpoint_id: (*id).clone(),
                }),
                host_endpoint_leg(w, settings, ep, Dir::Egress),
            )
        }))
    } else {
        None
    };
    let to_host = src_wep.is_some()
        && dst_wep.is_none()
        && (dst_hep.is_some() || is_host_address(view, node, flow.dst));
    let ingress = if let Some((id, ep)) = &dst_wep {
        Some(walker(&mut |w| {
            (to_json(id), workload_leg(w, settings, ep, Dir::Ingress))
        }))
    } else if to_host {
        let end = match settings.endpoint_to_host {
            EndpointToHostAction::Drop => {
                endpoint_reason(Verdict::Deny, "DefaultEndpointToHostAction is DROP".into())
            }
            EndpointToHostAction::Accept | EndpointToHostAction::Return => endpoint_reason(
                Verdict::Allow,
                format!(
                    "DefaultEndpointToHostAction is {}",
                    match settings.endpoint_to_host {
                        EndpointToHostAction::Accept => "ACCEPT",
                        _ => "RETURN",
                    }
                ),
            ),
        };
        Some(leg(json!({ "host": node }), end, Vec::new()))
    } else if let Some((id, ep)) = &dst_hep {
        Some(walker(&mut |w| {
            (
                to_json(&pb::HostEndpointId {
                    endpoint_id: (*id).clone(),
                }),
                host_endpoint_leg(w, settings, ep, Dir::Ingress),
            )
        }))
    } else {
        None
    };
    if egress.is_none() && ingress.is_none() {
        return Err(ExplainError::NotLocal {
            src: flow.src,
            dst: flow.dst,
            node: node.to_string(),
        });
    }
    let verdict = if [&egress, &ingress]
        .into_iter()
        .flatten()
        .all(|l| l.verdict == Verdict::Allow)
    {
        Verdict::Allow
    } else {
        Verdict::Deny
    };
    Ok(Explanation {
        verdict,
        egress,
        ingress,
    })
}
