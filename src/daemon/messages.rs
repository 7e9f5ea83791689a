//! The calc graph's messages as the dataplane supervisor sees them.
//!
//! * [`state_key`] classifies each `ToDataplane` payload for the
//!   supervisor's latest-state map (what a restarted manager is replayed
//!   from): an update sets the state of its object, a remove clears it.
//! * [`to_dataplane`] turns one flushed batch into the supervisor's batch.
//!   IP-set delta updates are replaced by a full `IPSetUpdate` carrying the
//!   set's membership after the delta. Reason: the latest-state map keeps
//!   one message per object, and a delta cannot stand in for a set's state,
//!   so a manager restarted from deltas would get stale membership. The
//!   replacement keeps the map exact at the cost of sending whole member
//!   lists for sets that changed in a flush (flushes are batched, so this
//!   is at most once per set per flush).
//! * `InSync` is not forwarded as an update: the supervisor has its own
//!   `InSync` message, sent after the batch that carried it.

use felix_actors::StateKey;
use felix_proto as pb;
use pb::to_dataplane::Payload;

use crate::calc::view::DataplaneView;

fn set(kind: &str, id: impl AsRef<str>) -> StateKey {
    StateKey::Set(format!("{kind}/{}", id.as_ref()))
}

fn remove(kind: &str, id: impl AsRef<str>) -> StateKey {
    StateKey::Remove(format!("{kind}/{}", id.as_ref()))
}

fn policy_id(id: &Option<pb::PolicyId>) -> String {
    id.as_ref()
        .map(|i| format!("{}/{}/{}", i.kind, i.namespace, i.name))
        .unwrap_or_default()
}

fn wep_id(id: &Option<pb::WorkloadEndpointId>) -> String {
    id.as_ref()
        .map(|i| format!("{}/{}/{}", i.orchestrator_id, i.workload_id, i.endpoint_id))
        .unwrap_or_default()
}

fn hep_id(id: &Option<pb::HostEndpointId>) -> String {
    id.as_ref()
        .map(|i| i.endpoint_id.clone())
        .unwrap_or_default()
}

fn profile_id(id: &Option<pb::ProfileId>) -> String {
    id.as_ref().map(|i| i.name.clone()).unwrap_or_default()
}

fn sa_id(id: &Option<pb::ServiceAccountId>) -> String {
    id.as_ref()
        .map(|i| format!("{}/{}", i.namespace, i.name))
        .unwrap_or_default()
}

fn ns_id(id: &Option<pb::NamespaceId>) -> String {
    id.as_ref().map(|i| i.name.clone()).unwrap_or_default()
}

/// The latest-state key of a payload (see the module docs).
pub fn state_key(p: &Payload) -> StateKey {
    match p {
        Payload::InSync(_) => StateKey::Transient,
        Payload::ConfigUpdate(_) => set("config", ""),
        Payload::Encapsulation(_) => set("encapsulation", ""),
        Payload::GlobalBgpConfigUpdate(_) => set("bgp", ""),
        Payload::IpsetUpdate(u) => set("ipset", &u.id),
        // Deltas are folded by `to_dataplane`; one that slips through still
        // must not replace the set's full state.
        Payload::IpsetDeltaUpdate(_) => StateKey::Transient,
        Payload::IpsetRemove(u) => remove("ipset", &u.id),
        Payload::ActiveProfileUpdate(u) => set("profile", profile_id(&u.id)),
        Payload::ActiveProfileRemove(u) => remove("profile", profile_id(&u.id)),
        Payload::ActivePolicyUpdate(u) => set("policy", policy_id(&u.id)),
        Payload::ActivePolicyRemove(u) => remove("policy", policy_id(&u.id)),
        Payload::HostEndpointUpdate(u) => set("hep", hep_id(&u.id)),
        Payload::HostEndpointRemove(u) => remove("hep", hep_id(&u.id)),
        Payload::WorkloadEndpointUpdate(u) => set("wep", wep_id(&u.id)),
        Payload::WorkloadEndpointRemove(u) => remove("wep", wep_id(&u.id)),
        Payload::HostMetadataUpdate(u) => set("host", &u.hostname),
        Payload::HostMetadataRemove(u) => remove("host", &u.hostname),
        Payload::IpamPoolUpdate(u) => set("pool", &u.id),
        Payload::IpamPoolRemove(u) => remove("pool", &u.id),
        Payload::ServiceAccountUpdate(u) => set("sa", sa_id(&u.id)),
        Payload::ServiceAccountRemove(u) => remove("sa", sa_id(&u.id)),
        Payload::NamespaceUpdate(u) => set("ns", ns_id(&u.id)),
        Payload::NamespaceRemove(u) => remove("ns", ns_id(&u.id)),
        Payload::RouteUpdate(u) => set("route", &u.dst),
        Payload::RouteRemove(u) => remove("route", &u.dst),
        Payload::VtepUpdate(u) => set("vtep", &u.node),
        Payload::VtepRemove(u) => remove("vtep", &u.node),
        Payload::WireguardEndpointUpdate(u) => set("wg", &u.hostname),
        Payload::WireguardEndpointRemove(u) => remove("wg", &u.hostname),
        Payload::WireguardEndpointV6Update(u) => set("wg6", &u.hostname),
        Payload::WireguardEndpointV6Remove(u) => remove("wg6", &u.hostname),
        Payload::ServiceUpdate(u) => set("svc", format!("{}/{}", u.namespace, u.name)),
        Payload::ServiceRemove(u) => remove("svc", format!("{}/{}", u.namespace, u.name)),
    }
}

/// A full update for IP set `id` as `view` holds it now.
fn full_ipset(view: &DataplaneView, id: &str) -> Option<Payload> {
    view.ip_sets.get(id).map(|(t, members)| {
        Payload::IpsetUpdate(pb::IpSetUpdate {
            id: id.to_string(),
            members: members.iter().cloned().collect(),
            r#type: *t,
        })
    })
}

/// Applies one flushed batch to `view` and returns what the supervisor
/// gets, plus whether the batch carried `InSync`.
///
/// Contract violations (a calc-graph bug) are logged; the message is still
/// forwarded, since the dataplane must follow the graph.
///
/// With `fold` false (the external driver's wire, which carries deltas as upstream's does),
/// deltas are passed on as they are.
pub fn to_dataplane(
    view: &mut DataplaneView,
    flushed: Vec<Payload>,
    fold: bool,
) -> (Vec<Payload>, bool) {
    let mut out = Vec::with_capacity(flushed.len());
    let mut in_sync = false;
    for p in flushed {
        if let Err(e) = view.apply(&p) {
            tracing::error!("calculation graph output: {e}");
        }
        match p {
            Payload::InSync(_) => in_sync = true,
            Payload::IpsetDeltaUpdate(d) if !fold => out.push(Payload::IpsetDeltaUpdate(d)),
            Payload::IpsetDeltaUpdate(d) => match full_ipset(view, &d.id) {
                Some(full) => out.push(full),
                None => out.push(Payload::IpsetDeltaUpdate(d)),
            },
            other => out.push(other),
        }
    }
    (out, in_sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipset(id: &str, members: &[&str]) -> Payload {
        Payload::IpsetUpdate(pb::IpSetUpdate {
            id: id.into(),
            members: members.iter().map(|s| s.to_string()).collect(),
            r#type: 0,
        })
    }

    #[test]
    fn deltas_become_full_updates_with_the_membership_after_the_delta() {
        let mut view = DataplaneView::new();
        let delta = Payload::IpsetDeltaUpdate(pb::IpSetDeltaUpdate {
            id: "s:1".into(),
            added_members: vec!["10.0.0.3".into()],
            removed_members: vec!["10.0.0.1".into()],
        });
        let input = vec![
            ipset("s:1", &["10.0.0.1", "10.0.0.2"]),
            delta.clone(),
            Payload::InSync(pb::InSync {}),
        ];
        let (out, in_sync) = to_dataplane(&mut view, input.clone(), true);
        assert!(in_sync);
        assert_eq!(out.len(), 2, "InSync is not forwarded as an update");
        assert_eq!(out[1], ipset("s:1", &["10.0.0.2", "10.0.0.3"]));
        assert_eq!(state_key(&out[0]), state_key(&out[1]), "same object");
        // Unfolded (the external driver's wire): the delta as it came.
        let (out, in_sync) = to_dataplane(&mut DataplaneView::new(), input, false);
        assert!(in_sync);
        assert_eq!(out[1], delta);
    }

    #[test]
    fn updates_and_removes_of_one_object_share_a_key() {
        let upd = ipset("s:9", &[]);
        let rem = Payload::IpsetRemove(pb::IpSetRemove { id: "s:9".into() });
        match (state_key(&upd), state_key(&rem)) {
            (StateKey::Set(a), StateKey::Remove(b)) => assert_eq!(a, b),
            other => panic!("unexpected {other:?}"),
        }
        let pid = Some(pb::PolicyId {
            name: "p".into(),
            namespace: "ns".into(),
            kind: "NetworkPolicy".into(),
        });
        let pu = Payload::ActivePolicyUpdate(pb::ActivePolicyUpdate {
            id: pid.clone(),
            policy: None,
        });
        let pr = Payload::ActivePolicyRemove(pb::ActivePolicyRemove { id: pid });
        match (state_key(&pu), state_key(&pr)) {
            (StateKey::Set(a), StateKey::Remove(b)) => assert_eq!(a, b),
            other => panic!("unexpected {other:?}"),
        }
        assert_ne!(state_key(&upd), state_key(&pu));
    }
}
