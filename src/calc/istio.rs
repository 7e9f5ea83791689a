//! The Istio ambient calculator (upstream `IstioCalculator`).
//!
//! When Istio ambient mode is enabled the graph keeps one extra IP set,
//! [`ALL_ISTIO_WEPS`], holding the addresses of every Kubernetes pod (local
//! or remote) that is in the ambient mesh, and marks each local workload
//! endpoint in the mesh with `is_istio_ambient`.
//!
//! Mesh membership is [`ISTIO_SELECTOR`]: a pod of the `k8s` orchestrator
//! whose namespace is labelled ambient (inherited as `pcns.` labels
//! through the namespace's profile) and that does not opt out with
//! `istio.io/dataplane-mode: none`, or whose own label says ambient.  The
//! orchestrator term keeps network sets of ambient namespaces out.
//!
//! Invariants:
//! * The set is announced once, when the graph is built (as upstream does,
//!   before any endpoint), and never removed: the dataplane may refer to
//!   it at any time while the mode is on.
//! * Local membership comes from the active-rules calculator's computed
//!   selector matches, so the mark follows label, namespace-label and
//!   endpoint changes in either order, and is cleared before the endpoint
//!   goes.  Only workload endpoints are ever marked.

use super::computed::ComputedUpdate;
use super::EndpointKey;
use crate::model::WorkloadEndpointKey;

/// ID of the "all Istio ambient workload endpoints" IP set (upstream
/// `rules.IPSetIDAllIstioWEPs`).
pub const ALL_ISTIO_WEPS: &str = "all-istio-weps";

/// Upstream's mesh-membership selector, built from the v3 label names.
pub const ISTIO_SELECTOR: &str = "projectcalico.org/orchestrator == 'k8s' && \
     (pcns.istio.io/dataplane-mode == 'ambient' && istio.io/dataplane-mode != 'none' || \
     istio.io/dataplane-mode == 'ambient')";

/// Turns a computed-selector match of [`ISTIO_SELECTOR`] into the
/// endpoint's computed data; `None` for host endpoints, which are never
/// marked.
pub fn on_match(ep: &EndpointKey, matched: bool) -> Option<(&WorkloadEndpointKey, ComputedUpdate)> {
    match ep {
        EndpointKey::Workload(k) => Some((k, ComputedUpdate::IstioAmbient(matched))),
        EndpointKey::Host(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostEndpointKey, Labels};
    use crate::selector;

    fn labels(l: &[(&str, &str)]) -> Labels {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_matches_upstream_semantics() {
        let sel = selector::parse(ISTIO_SELECTOR).unwrap();
        let k8s = ("projectcalico.org/orchestrator", "k8s");
        let ns_ambient = ("pcns.istio.io/dataplane-mode", "ambient");
        let pod_none = ("istio.io/dataplane-mode", "none");
        let pod_ambient = ("istio.io/dataplane-mode", "ambient");
        assert!(sel.evaluate(&labels(&[k8s, ns_ambient])));
        assert!(sel.evaluate(&labels(&[k8s, pod_ambient])));
        assert!(!sel.evaluate(&labels(&[k8s, ns_ambient, pod_none])));
        assert!(!sel.evaluate(&labels(&[k8s])));
        // Network sets and non-k8s workloads never match.
        assert!(!sel.evaluate(&labels(&[ns_ambient])));
        assert!(!sel.evaluate(&labels(&[
            ("projectcalico.org/orchestrator", "openstack"),
            pod_ambient
        ])));
    }

    #[test]
    fn host_endpoints_are_never_marked() {
        let h = EndpointKey::Host(crate::calc::shared_key::Shared::new(HostEndpointKey {
            hostname: "n".into(),
            endpoint_id: "e".into(),
        }));
        assert!(on_match(&h, true).is_none());
        let w = WorkloadEndpointKey {
            hostname: "n".into(),
            orchestrator_id: "k8s".into(),
            workload_id: "ns/p".into(),
            endpoint_id: "eth0".into(),
        };
        let ek = EndpointKey::Workload(crate::calc::shared_key::Shared::new(w.clone()));
        assert_eq!(
            on_match(&ek, false),
            Some((&w, ComputedUpdate::IstioAmbient(false)))
        );
    }
}
