//! Self-tests of the calc-graph FV harness: a harness that cannot fail
//! proves nothing, so wrong expectations, leaks and contract violations
//! must all be reported.

mod common;

use common::*;
use felix::calc::view::DataplaneView;
use felix_fv::calcfv::expand::expansions;
use felix_fv::calcfv::expect::json_matches;
use felix_fv::calcfv::{run_test, State, Test, TierExp, WepExp};
use felix_proto as pb;
use pb::to_dataplane::Payload;

fn ep() -> Wep {
    Wep::new("a").labels(&[("x", "1")]).ips(&["10.0.0.1/32"])
}

fn pol() -> Pol {
    Pol::global("p")
        .selector("has(x)")
        .ingress("{action: Allow, source: {selector: \"has(x)\"}}")
}

fn good() -> Expect {
    Expect::new()
        .policies(&["p"])
        .sel_set("has(x)", &["10.0.0.1/32"])
        .wep(
            &ep().id(),
            WepExp::new(
                &[],
                &["10.0.0.1/32"],
                vec![TierExp::new("default", "", &["p"], &[])],
            ),
        )
}

fn state(e: Expect) -> State {
    State::new("s")
        .yaml(&ep().yaml())
        .yaml(&pol().yaml())
        .expect(e)
}

#[test]
fn correct_expectation_passes_every_run() {
    let r = run_test(&Test::new("good", vec![state(good())]));
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert!(r.runs >= 1);
}

#[test]
fn wrong_expectations_fail_every_run() {
    let wrong = [
        ("member", good().sel_set("has(x)", &["10.0.0.2/32"])),
        ("extra policy", good().policies(&["q"])),
        (
            "rule",
            good().policy_rules("p", vec![json!({"action": "deny"})], vec![]),
        ),
        (
            "tiers",
            good().wep(
                &ep().id(),
                WepExp::new(
                    &[],
                    &["10.0.0.1/32"],
                    vec![TierExp::both("default", "", &["p"])],
                ),
            ),
        ),
        ("missing namespace", good().namespace("ns", &[])),
        ("config", good().config(&[("A", "b")])),
        ("routes", good().route("10.0.0.0/8", json!({}))),
    ];
    for (what, e) in wrong {
        let r = run_test(&Test::new(what, vec![state(e)]));
        assert_eq!(r.failures.len(), r.runs, "{what}: every run must fail");
    }
}

#[test]
fn expectation_of_an_empty_state_must_be_empty() {
    // A state with no KVs but a non-empty expectation fails.
    let r = run_test(&Test::new(
        "empty",
        vec![State::empty().expect(Expect::new().policies(&["p"]))],
    ));
    assert_eq!(r.failures.len(), r.runs);
}

#[test]
fn expander_shapes() {
    let states = vec![
        state(good()),
        State::empty().named("e"),
        state(good()).named("again"),
    ];
    let exps = expansions(&states);
    if felix_fv::calcfv::expand::expansion_disabled() {
        assert_eq!(exps.len(), 1);
        return;
    }
    let names: Vec<&str> = exps.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "identity",
            "reverse-kv-order",
            "reverse-state-order",
            "insert-empties",
            "split-states[0]",
            "split-states[1]",
            "split-states[2]",
            "squash-states"
        ]
    );
    assert_eq!(exps[3].steps.len(), 5);
    assert_eq!(exps[7].steps.len(), 1);
    // Squash carries the deletions of the middle state as well.
    let deletes = exps[7].steps[0]
        .updates
        .iter()
        .filter(|u| u.value.is_none())
        .count();
    assert_eq!(deletes, 2);
    // Reverse KV order reverses the sets of the first step.
    let first: Vec<_> = exps[0].steps[0]
        .updates
        .iter()
        .map(|u| u.key.clone())
        .collect();
    let mut rev: Vec<_> = exps[1].steps[0]
        .updates
        .iter()
        .map(|u| u.key.clone())
        .collect();
    rev.reverse();
    assert_eq!(first, rev);
}

#[test]
fn json_patterns() {
    let got = json!({"action": "allow", "srcIpSetIds": ["a"], "protocol": {"name": "tcp"}});
    assert!(json_matches(&json!({"action": "allow"}), &got));
    assert!(json_matches(
        &json!({"protocol": {"name": "tcp"}, "dstNet": []}),
        &got
    ));
    assert!(!json_matches(&json!({"srcIpSetIds": []}), &got));
    assert!(!json_matches(&json!({"srcIpSetIds": ["a", "b"]}), &got));
    assert!(!json_matches(&json!({"dstNet": ["10.0.0.0/8"]}), &got));
}

#[test]
fn view_rejects_reference_before_referent() {
    // The contract checker the runner relies on: an endpoint naming a
    // policy the dataplane does not have is rejected.
    let mut v = DataplaneView::new();
    let ep = Payload::WorkloadEndpointUpdate(pb::WorkloadEndpointUpdate {
        id: Some(pb::WorkloadEndpointId::default()),
        endpoint: Some(pb::WorkloadEndpoint {
            tiers: vec![pb::TierInfo {
                name: "default".into(),
                ingress_policies: vec![pb::PolicyId {
                    name: "p".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
    });
    assert!(v.apply(&ep).is_err());
}
