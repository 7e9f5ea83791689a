//! A reported packet -> a [`DropRecord`]: the prefix says which deny fired
//! (see `rules::drop_prefix`), the desired view says whose it is.

use felix_proto as pb;
use serde_json::json;

use crate::calc::view::DataplaneView;
use crate::dataplane::rules::drop_prefix::{self, DropPrefix};
use crate::dataplane::rules::{
    HOST_FROM_ENDPOINT_FORWARD_PFX, HOST_FROM_ENDPOINT_PFX, HOST_TO_ENDPOINT_FORWARD_PFX,
    HOST_TO_ENDPOINT_PFX, WORKLOAD_FROM_ENDPOINT_PFX, WORKLOAD_TO_ENDPOINT_PFX,
};
use crate::explain::leg::policy_name;

use super::nflog::LoggedPacket;
use super::DropRecord;
use crate::dataplane::bpf::policy::PolicyDir;
use crate::dataplane::bpf::policy::{Owner, Resolved, SharedDropNames};
use felix_bpf::drops::DropEvent;
use felix_bpf::policy::{
    POL_DIR_FORWARD_IN, POL_DIR_INGRESS, POL_DIR_PREDNAT_IN, POL_DIR_UNTRACKED_IN,
};

/// The endpoint an endpoint chain belongs to: its name, its tiers for the
/// chain, and the direction.
fn endpoint_of<'a>(
    view: &'a DataplaneView,
    chain: &str,
) -> Option<(String, &'a [pb::TierInfo], &'static str)> {
    let workload = [
        (WORKLOAD_TO_ENDPOINT_PFX, "ingress"),
        (WORKLOAD_FROM_ENDPOINT_PFX, "egress"),
    ];
    for (pfx, dir) in workload {
        if let Some(iface) = chain.strip_prefix(pfx) {
            let (id, ep) = view
                .workload_endpoints
                .iter()
                .find(|(_, ep)| ep.name == iface)?;
            return Some((id.1.clone(), &ep.tiers, dir));
        }
    }
    // Longest prefixes first: `cali-thfw-` before `cali-th-`.
    let host = [
        (HOST_TO_ENDPOINT_FORWARD_PFX, "ingress", true),
        (HOST_FROM_ENDPOINT_FORWARD_PFX, "egress", true),
        (HOST_TO_ENDPOINT_PFX, "ingress", false),
        (HOST_FROM_ENDPOINT_PFX, "egress", false),
    ];
    for (pfx, dir, fwd) in host {
        if let Some(iface) = chain.strip_prefix(pfx) {
            let (id, ep) = view
                .host_endpoints
                .iter()
                .find(|(_, ep)| ep.name == iface)?;
            let tiers = if fwd { &ep.forward_tiers } else { &ep.tiers };
            return Some((format!("hep/{id}"), tiers, dir));
        }
    }
    None
}

/// What the prefix names, as `felix explain`'s `decidedBy` plus the
/// direction (and the endpoint, for endpoint-chain denies).
pub fn decided_by(view: &DataplaneView, prefix: &str) -> serde_json::Value {
    match drop_prefix::parse(prefix) {
        Some(DropPrefix::Rule {
            ingress,
            index,
            key,
        }) => {
            let direction = if ingress { "ingress" } else { "egress" };
            if let Some(((kind, ns, name), pol)) = view.policies.iter().find(|((k, n, m), _)| {
                let id = pb::PolicyId {
                    kind: k.clone(),
                    namespace: n.clone(),
                    name: m.clone(),
                };
                drop_prefix::owner_key(Some(&id), "") == key
            }) {
                let id = pb::PolicyId {
                    kind: kind.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                };
                return json!({"kind": "rule", "tier": pol.tier, "policy": policy_name(&id),
                              "rule": index, "action": "Deny", "direction": direction});
            }
            if let Some(name) = view
                .profiles
                .keys()
                .find(|n| drop_prefix::owner_key(None, n) == key)
            {
                return json!({"kind": "rule", "profile": name, "rule": index,
                              "action": "Deny", "direction": direction});
            }
            json!({"kind": "rule", "unknownOwner": key, "rule": index, "action": "Deny",
                   "direction": direction})
        }
        Some(DropPrefix::TierEnd { tier, chain }) => match endpoint_of(view, &chain) {
            Some((ep, tiers, dir)) => {
                let name = tiers.get(tier).map(|t| t.name.clone());
                json!({"kind": "tierDefault", "tier": name, "action": "Deny",
                       "endpoint": ep, "direction": dir})
            }
            None => json!({"kind": "tierDefault", "tierIndex": tier, "action": "Deny",
                           "chain": chain}),
        },
        Some(DropPrefix::NoMatch { chain }) => match endpoint_of(view, &chain) {
            Some((ep, _, dir)) => json!({"kind": "noMatch", "endpoint": ep, "direction": dir}),
            None => json!({"kind": "noMatch", "chain": chain}),
        },
        None => json!({"kind": "unknown"}),
    }
}

/// The local endpoint with address `a`, as `namespace/pod` (workloads) or
/// `hep/<id>`: the same lookup `felix explain` makes.
fn endpoint_name(view: &DataplaneView, a: std::net::IpAddr) -> Option<String> {
    if let Some((id, _)) = crate::explain::find_workload(view, a) {
        return Some(id.workload_id);
    }
    crate::explain::find_host_endpoint(view, a).map(|(id, _)| format!("hep/{id}"))
}

/// The record of one reported packet (`seq` is set by the ring).
pub fn record(view: &DataplaneView, p: &LoggedPacket, time: String) -> DropRecord {
    let f = p.packet;
    let ports = f.filter(|f| matches!(f.proto, 6 | 17 | 132));
    DropRecord {
        seq: 0,
        time,
        src: f.map(|f| f.src.to_string()),
        dst: f.map(|f| f.dst.to_string()),
        protocol: f.map(|f| f.proto),
        src_port: ports.map(|f| f.src_port),
        dst_port: ports.map(|f| f.dst_port),
        src_endpoint: f.and_then(|f| endpoint_name(view, f.src)),
        dst_endpoint: f.and_then(|f| endpoint_name(view, f.dst)),
        decided_by: decided_by(view, &p.prefix),
        prefix: p.prefix.clone(),
    }
}

/// The endpoint whose interface is `iface`: `namespace/pod` or `hep/<id>`.
fn endpoint_by_iface(view: &DataplaneView, iface: &str) -> Option<String> {
    if let Some((id, _)) = view
        .workload_endpoints
        .iter()
        .find(|(_, ep)| ep.name == iface)
    {
        return Some(id.1.clone());
    }
    view.host_endpoints
        .iter()
        .find(|(_, ep)| ep.name == iface)
        .map(|(id, _)| format!("hep/{id}"))
}

/// The direction an eBPF endpoint list (`POL_DIR_*`) enforces.
fn list_direction(list: u32) -> &'static str {
    match list {
        POL_DIR_INGRESS | POL_DIR_UNTRACKED_IN | POL_DIR_PREDNAT_IN | POL_DIR_FORWARD_IN => {
            "ingress"
        }
        _ => "egress",
    }
}

/// What an eBPF drop report names, in the same form as the NFLOG reports' `decidedBy`.
pub fn bpf_decided_by(
    view: &DataplaneView,
    iface: Option<&str>,
    resolved: &Resolved,
    e: &DropEvent,
) -> serde_json::Value {
    let direction = list_direction(e.list);
    let endpoint = iface.and_then(|i| endpoint_by_iface(view, i));
    let owner_json = |owner: &Owner| match owner {
        Owner::Policy(id) => {
            let tier = view
                .policies
                .get(&(id.kind.clone(), id.namespace.clone(), id.name.clone()))
                .map(|p| p.tier.clone());
            json!({"tier": tier, "policy": policy_name(id)})
        }
        Owner::Profile(name) => json!({"profile": name}),
    };
    let mut v = match resolved {
        Resolved::Rule { owner, dir, rule } => {
            let mut v = owner_json(owner);
            v["kind"] = json!("rule");
            v["rule"] = json!(rule);
            v["action"] = json!("Deny");
            v["direction"] = json!(match dir {
                PolicyDir::Ingress => "ingress",
                PolicyDir::Egress => "egress",
            });
            return v;
        }
        Resolved::TierEnd { tier } => {
            json!({"kind": "tierDefault", "tier": tier, "action": "Deny", "direction": direction})
        }
        Resolved::ListEnd => json!({"kind": "noMatch", "direction": direction}),
        Resolved::Missing { owner } => {
            let mut v = owner.as_ref().map(owner_json).unwrap_or_else(|| json!({}));
            v["kind"] = json!("failClosed");
            v["reason"] = json!(if owner.is_some() || e.handle != 0 {
                "policy not programmed yet"
            } else {
                "no policy list for the endpoint"
            });
            v["direction"] = json!(direction);
            v
        }
        Resolved::Broken => {
            json!({"kind": "failClosed", "reason": "policy walk incomplete", "direction": direction})
        }
        Resolved::UnknownHandle(h) => {
            json!({"kind": "rule", "unknownHandle": h, "action": "Deny", "direction": direction})
        }
    };
    if let Some(ep) = endpoint {
        v["endpoint"] = json!(ep);
    }
    v
}

/// The record of one eBPF drop report (`seq` is set by the ring); `prefix` carries the raw
/// numbers (`bpf:<why>:<handle>:<index>:<iface>`).
pub fn bpf_record(
    view: &DataplaneView,
    names: &SharedDropNames,
    e: &DropEvent,
    time: String,
) -> DropRecord {
    let (iface, resolved) = names.resolve(e);
    let iface = iface.map(|i| i.name);
    let ports = e.st_flags & DropEvent::PORTS != 0;
    let (src, dst) = (e.src_addr(), e.dst_addr());
    DropRecord {
        seq: 0,
        time,
        src: Some(src.to_string()),
        dst: Some(dst.to_string()),
        protocol: Some(e.proto),
        src_port: ports.then_some(e.sport),
        dst_port: ports.then_some(e.dport),
        src_endpoint: endpoint_name(view, src),
        dst_endpoint: endpoint_name(view, dst),
        decided_by: bpf_decided_by(view, iface.as_deref(), &resolved, e),
        prefix: format!(
            "bpf:{:?}:{}:{}:{}",
            e.why,
            e.handle,
            e.index,
            iface.as_deref().unwrap_or("?")
        ),
    }
}
