//! Shared helpers of the calc-graph FV tests.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses a different part of the shared support"
)]

pub use felix_fv::calcfv::expect::{named_port_set_id as nid, selector_set_id as sid};
pub use felix_fv::calcfv::yaml::{self, Pol, Wep};
pub use felix_fv::calcfv::Expect;
pub use serde_json::json;

/// The model selector of a rule's source (`src`) or destination as the
/// v3 conversion produced it (namespace and service-account selectors
/// folded in), read from the decoded policy in `policy_yaml`.
pub fn rule_selector(policy_yaml: &str, ingress: bool, idx: usize, src: bool) -> String {
    use felix::model::Value;
    let docs = felix::resources::decode_documents(
        policy_yaml,
        "rule_selector",
        felix::resources::Format::Yaml,
    )
    .expect("policy YAML decodes");
    for d in docs {
        let entries = d.result.expect("policy is valid");
        for (_, v) in entries {
            if let Value::Policy(p) = v {
                let rules = if ingress {
                    &p.inbound_rules
                } else {
                    &p.outbound_rules
                };
                let r = &rules[idx];
                return if src {
                    r.src_selector.clone()
                } else {
                    r.dst_selector.clone()
                };
            }
        }
    }
    panic!("no policy in YAML");
}
