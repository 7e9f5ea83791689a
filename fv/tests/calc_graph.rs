//! Calculation-graph FV suite: sequences of datastore states with the
//! dataplane expected after each, run through every expander and flush
//! strategy (see `felix_fv::calcfv`).
//!
//! Each test names the graph nodes it covers.  Routes and VTEPs live in
//! `calc_routes.rs` (owned by the route-resolver work).

mod common;

use common::*;
use std::sync::Arc;

use felix::calc::GraphOptions;
use felix::model::{
    Key, LiveMigration, LiveMigrationKey, LiveMigrationSource, LiveMigrationTarget, Value,
    WorkloadEndpointIdentifier, WorkloadIdentifier,
};
use felix_fv::calcfv::{assert_passes, calc_stream, HepExp, State, Test, TierExp, WepExp};

// ---------------------------------------------------------------------------
// Endpoints, policies, shared IPs (local-endpoint filter, active rules,
// label index deduplication).
// ---------------------------------------------------------------------------

fn ep1() -> Wep {
    Wep::new("ep1")
        .labels(&[("id", "ep1"), ("shared", "yes")])
        .ips(&["10.0.0.1/32", "10.0.0.2/32"])
        .profiles(&["prof-1"])
}

fn ep2() -> Wep {
    Wep::new("ep2")
        .labels(&[("id", "ep2"), ("shared", "yes")])
        .ips(&["10.0.0.2/32", "10.0.0.3/32"])
        .profiles(&["prof-1"])
}

fn ep_remote() -> Wep {
    Wep::new("remote")
        .node("node2")
        .labels(&[("id", "remote"), ("shared", "yes")])
        .ips(&["10.0.9.1/32"])
        .profiles(&["prof-1"])
}

fn prof1() -> String {
    yaml::profile("prof-1", &[], &["{action: Allow}"], &["{action: Allow}"])
}

fn pol1() -> Pol {
    Pol::global("pol-1")
        .selector("shared == 'yes'")
        .order(10.0)
        .ingress("{action: Allow, source: {selector: \"id == 'ep1'\"}}")
        .egress("{action: Allow, destination: {selector: \"has(shared)\"}}")
}

fn wep_default(ips: &[&str], policies: &[&str]) -> WepExp {
    let tiers = if policies.is_empty() {
        vec![]
    } else {
        vec![TierExp::both("default", "", policies)]
    };
    WepExp::new(&["prof-1"], ips, tiers)
}

const EP1_IPS: &[&str] = &["10.0.0.1/32", "10.0.0.2/32"];

/// `prof-1` then `ep1`: the base most single-endpoint states start from.
fn ep1_base(name: &str) -> State {
    State::new(name).yaml(&prof1()).yaml(&ep1().yaml())
}

/// `ep1_base` plus one policy.
fn ep1_with(name: &str, pol: &Pol) -> State {
    ep1_base(name).yaml(&pol.yaml())
}

/// `ep1` with `pols` in the default tier, ingress only.
fn ep1_ingress(pols: &[&str]) -> WepExp {
    WepExp::new(
        &["prof-1"],
        EP1_IPS,
        vec![TierExp::new("default", "", pols, &[])],
    )
}

/// `prof-1` and `ep1`, with `pols` active and applied to `ep1` (ingress).
fn ep1_expect(pols: &[&str]) -> Expect {
    Expect::new()
        .profiles(&["prof-1"])
        .policies(pols)
        .wep(&ep1().id(), ep1_ingress(pols))
}

/// `prof-1` and `ep1`, no policies.
fn ep1_no_policy() -> Expect {
    Expect::new()
        .profiles(&["prof-1"])
        .wep(&ep1().id(), wep_default(EP1_IPS, &[]))
}

/// `ep1` with policy `pol` (named `pol_name`) whose rule selects
/// `has(<label>)`; one network set per `sets` entry, labelled
/// `<label>: "1"`; that selector's set expected to hold `members`.
fn netsets_state(
    name: &str,
    pol: &Pol,
    pol_name: &str,
    label: &str,
    sets: &[(&str, &[&str])],
    members: &[&str],
) -> State {
    let mut s = ep1_with(name, pol);
    for (n, nets) in sets {
        s = s.yaml(&yaml::netset(None, n, &[(label, "1")], nets));
    }
    s.expect(ep1_expect(&[pol_name]).sel_set(&format!("has({label})"), members))
}

fn eps_state(name: &str, eps: &[Wep], remote: bool) -> State {
    let mut s = State::new(name).yaml(&prof1()).yaml(&pol1().yaml());
    for e in eps {
        s = s.yaml(&e.yaml());
    }
    if remote {
        s = s.yaml(&ep_remote().yaml());
    }
    let mut ep1_members: Vec<&str> = Vec::new();
    let mut shared: Vec<&str> = Vec::new();
    let mut e = Expect::new().policies(&["pol-1"]).profiles(&["prof-1"]);
    for w in eps {
        if w.id() == ep1().id() {
            ep1_members.extend(["10.0.0.1/32", "10.0.0.2/32"]);
            shared.extend(["10.0.0.1/32", "10.0.0.2/32"]);
            e = e.wep(
                &w.id(),
                wep_default(&["10.0.0.1/32", "10.0.0.2/32"], &["pol-1"]),
            );
        } else {
            shared.extend(["10.0.0.2/32", "10.0.0.3/32"]);
            e = e.wep(
                &w.id(),
                wep_default(&["10.0.0.2/32", "10.0.0.3/32"], &["pol-1"]),
            );
        }
    }
    if remote {
        shared.push("10.0.9.1/32");
    }
    shared.sort();
    shared.dedup();
    e = e
        .sel_set("id == 'ep1'", &ep1_members)
        .sel_set("has(shared)", &shared)
        .policy_rules(
            "pol-1",
            vec![json!({"action": "allow", "srcIpSetIds": [sid("id == 'ep1'")]})],
            vec![json!({"action": "allow", "dstIpSetIds": [sid("has(shared)")]})],
        );
    s.expect(e)
}

fn case_shared_ips() -> Test {
    // {ep1} -> {ep1, ep2, remote} -> {ep2, remote}: ep1 is deleted while ep2
    // still holds the shared 10.0.0.2, which must stay in the IP set.
    Test::new(
        "shared IPs between local endpoints, one deleted",
        vec![
            eps_state("ep1", &[ep1()], false),
            eps_state("ep1+ep2+remote", &[ep1(), ep2()], true),
            eps_state("ep2+remote", &[ep2()], true),
        ],
    )
}

fn case_endpoint_moves_node() -> Test {
    // The same endpoint key is local, then (with a different key, because
    // the node is part of it) remote only: the local-endpoint filter must
    // drop it from the dataplane, and the policy with it.
    let remote_only = State::new("ep1 remote only")
        .yaml(&prof1())
        .yaml(&pol1().yaml())
        .yaml(&ep1().node("node2").yaml())
        .expect(Expect::new());
    Test::new(
        "local-endpoint filter by hostname",
        vec![eps_state("ep1 local", &[ep1()], false), remote_only],
    )
}

fn case_endpoint_ip_update() -> Test {
    let moved = ep1().ips(&["10.0.0.7/32"]);
    let s = State::new("ep1 new IP")
        .yaml(&prof1())
        .yaml(&pol1().yaml())
        .yaml(&moved.yaml())
        .expect(
            Expect::new()
                .policies(&["pol-1"])
                .profiles(&["prof-1"])
                .sel_set("id == 'ep1'", &["10.0.0.7/32"])
                .sel_set("has(shared)", &["10.0.0.7/32"])
                .wep(&moved.id(), wep_default(&["10.0.0.7/32"], &["pol-1"])),
        );
    Test::new(
        "endpoint IP update",
        vec![eps_state("ep1", &[ep1()], false), s],
    )
}

fn case_dual_stack_endpoint() -> Test {
    let w = Wep::new("v6")
        .labels(&[("shared", "yes")])
        .ips(&["10.0.0.5/32", "fd00::5/128"])
        .profiles(&["prof-1"]);
    let s = State::new("dual stack")
        .yaml(&prof1())
        .yaml(&pol1().yaml())
        .yaml(&w.yaml())
        .expect(
            Expect::new()
                .policies(&["pol-1"])
                .profiles(&["prof-1"])
                .sel_set("id == 'ep1'", &[])
                .sel_set("has(shared)", &["10.0.0.5/32", "fd00::5/128"])
                .wep(
                    &w.id(),
                    wep_default(&["10.0.0.5/32"], &["pol-1"]).ipv6(&["fd00::5/128"]),
                ),
        );
    Test::new("dual-stack endpoint", vec![s])
}

// ---------------------------------------------------------------------------
// Profiles: activation, label inheritance, missing-profile deny-all.
// ---------------------------------------------------------------------------

fn team_ep(own: &[(&str, &str)]) -> Wep {
    let mut labels = vec![("id", "tm")];
    labels.extend_from_slice(own);
    Wep::new("tm")
        .labels(&labels)
        .ips(&["10.0.4.1/32"])
        .profiles(&["prof-team"])
}

fn db_remote() -> Wep {
    Wep::new("db")
        .node("node2")
        .labels(&[("role", "db")])
        .ips(&["10.0.4.9/32"])
}

fn prof_team(team: &str) -> String {
    yaml::profile(
        "prof-team",
        &[("team", team)],
        &["{action: Allow, protocol: TCP, source: {selector: \"role == 'db'\"}}"],
        &["{action: Allow}"],
    )
}

fn pol_team() -> String {
    Pol::global("pol-team")
        .selector("team == 'blue'")
        .ingress("{action: Allow, source: {selector: \"team == 'blue'\"}}")
        .yaml()
}

fn profile_state(name: &str, team: Option<&str>, own: &[(&str, &str)]) -> State {
    let ep = team_ep(own);
    let mut s = State::new(name)
        .yaml(&ep.yaml())
        .yaml(&db_remote().yaml())
        .yaml(&pol_team());
    let effective_team = own
        .iter()
        .find(|(k, _)| *k == "team")
        .map(|(_, v)| *v)
        .or(team);
    let mut e = Expect::new().profiles(&["prof-team"]);
    let matches = effective_team == Some("blue");
    let tiers = if matches {
        e = e
            .policies(&["pol-team"])
            .sel_set("team == 'blue'", &["10.0.4.1/32"]);
        vec![TierExp::new("default", "", &["pol-team"], &[])]
    } else {
        vec![]
    };
    e = e.wep(
        &ep.id(),
        WepExp::new(&["prof-team"], &["10.0.4.1/32"], tiers),
    );
    match team {
        Some(t) => {
            s = s.yaml(&prof_team(t));
            e = e.sel_set("role == 'db'", &["10.0.4.9/32"]).profile_rules(
                "prof-team",
                vec![json!({"action": "allow", "protocol": {"name": "tcp"}, "srcIpSetIds": [sid("role == 'db'")]})],
                vec![json!({"action": "allow", "srcIpSetIds": [], "dstIpSetIds": []})],
            );
        }
        None => {
            // The profile is missing: deny-all stand-in.
            e = e.profile_rules(
                "prof-team",
                vec![json!({"action": "deny", "srcIpSetIds": []})],
                vec![json!({"action": "deny", "dstIpSetIds": []})],
            );
        }
    }
    s.expect(e)
}

fn case_profiles() -> Test {
    Test::new(
        "profile label inheritance, override, missing profile",
        vec![
            profile_state("blue", Some("blue"), &[]),
            profile_state("red", Some("red"), &[]),
            profile_state(
                "blue overridden by own label",
                Some("blue"),
                &[("team", "green")],
            ),
            profile_state(
                "own label blue, profile red",
                Some("red"),
                &[("team", "blue")],
            ),
        ],
    )
}

fn case_profile_deleted_under_endpoint() -> Test {
    // Asymmetric: the profile goes while the endpoint keeps using it
    // (consistent -> inconsistent), then comes back.
    Test::new(
        "profile deleted while its endpoint stays",
        vec![
            profile_state("blue", Some("blue"), &[]),
            profile_state("profile missing", None, &[]),
            profile_state("red", Some("red"), &[]),
            profile_state("profile missing again", None, &[("team", "blue")]),
        ],
    )
}

fn case_profile_list_change() -> Test {
    let ep_a = ep1().profiles(&["prof-1", "prof-2"]);
    let prof2 = yaml::profile(
        "prof-2",
        &[],
        &["{action: Deny, source: {nets: [\"10.99.0.0/16\"]}}"],
        &[],
    );
    let both = State::new("two profiles")
        .yaml(&prof1())
        .yaml(&prof2)
        .yaml(&ep_a.yaml())
        .expect(
            Expect::new()
                .profiles(&["prof-1", "prof-2"])
                .wep(
                    &ep_a.id(),
                    WepExp::new(
                        &["prof-1", "prof-2"],
                        &["10.0.0.1/32", "10.0.0.2/32"],
                        vec![],
                    ),
                )
                .profile_rules(
                    "prof-2",
                    vec![json!({"action": "deny", "srcNet": ["10.99.0.0/16"]})],
                    vec![],
                ),
        );
    let one = State::new("one profile, other still exists")
        .yaml(&prof1())
        .yaml(&prof2)
        .yaml(&ep1().yaml())
        .expect(ep1_no_policy());
    Test::new("endpoint profile list change", vec![both, one])
}

// ---------------------------------------------------------------------------
// Policy resolver / sorter: orders, tiers, types.
// ---------------------------------------------------------------------------

fn order_ep() -> Wep {
    Wep::new("ord")
        .labels(&[("app", "ord")])
        .ips(&["10.0.5.1/32"])
        .profiles(&["prof-1"])
}

/// `prof-1` then `order_ep`.
fn ord_base(name: &str) -> State {
    State::new(name).yaml(&prof1()).yaml(&order_ep().yaml())
}

/// `prof-1` and `order_ep` with `pols` active and `tiers` applied to it.
fn ord_expect(pols: &[&str], tiers: Vec<TierExp>) -> Expect {
    Expect::new().profiles(&["prof-1"]).policies(pols).wep(
        &order_ep().id(),
        WepExp::new(&["prof-1"], &["10.0.5.1/32"], tiers),
    )
}

fn ordered_state(name: &str, pols: &[(&str, Option<f64>)], expected: &[&str]) -> State {
    let mut s = ord_base(name);
    for (p, o) in pols {
        let mut pol = Pol::global(p)
            .selector("app == 'ord'")
            .ingress("{action: Allow}")
            .egress("{action: Allow}");
        if let Some(o) = o {
            pol = pol.order(*o);
        }
        s = s.yaml(&pol.yaml());
    }
    s.expect(ord_expect(
        &pols.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        vec![TierExp::both("default", "", expected)],
    ))
}

fn case_policy_order() -> Test {
    Test::new(
        "policy order within a tier",
        vec![
            ordered_state(
                "123",
                &[("pa", Some(1.0)), ("pb", Some(2.0)), ("pc", Some(3.0))],
                &["pa", "pb", "pc"],
            ),
            ordered_state(
                "321",
                &[("pa", Some(3.0)), ("pb", Some(2.0)), ("pc", Some(1.0))],
                &["pc", "pb", "pa"],
            ),
            ordered_state(
                "ties by name",
                &[("pc", Some(5.0)), ("pa", Some(5.0)), ("pb", Some(5.0))],
                &["pa", "pb", "pc"],
            ),
            ordered_state(
                "unset order last",
                &[("pa", None), ("pb", Some(100.0)), ("pc", Some(0.5))],
                &["pc", "pb", "pa"],
            ),
        ],
    )
}

fn tier_pol(tier: &str, name: &str, order: Option<f64>) -> String {
    let mut p = Pol::global(&format!("{tier}.{name}"))
        .tier(tier)
        .selector("app == 'ord'")
        .ingress("{action: Allow}")
        .egress("{action: Allow}");
    if let Some(o) = order {
        p = p.order(o);
    }
    p.yaml()
}

/// A tier of a state: name, its resource (order, default action) or
/// `None` when absent, and the names of its policies.
type TierSpec<'a> = (
    &'a str,
    Option<(Option<f64>, Option<&'a str>)>,
    &'a [&'a str],
);

/// tiers: (name, resource (order, default action) or absent, policies).
fn tiered_state(name: &str, tiers: &[TierSpec], expected: Vec<TierExp>) -> State {
    let mut s = ord_base(name);
    let mut names = Vec::new();
    for (t, res, pols) in tiers {
        if let Some((order, action)) = res {
            s = s.yaml(&yaml::tier(t, *order, *action));
        }
        for p in pols.iter() {
            s = s.yaml(&tier_pol(t, p, None));
            names.push(format!("{t}.{p}"));
        }
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    s.expect(ord_expect(&names, expected))
}

fn case_tier_order() -> Test {
    let t = |n: &str, a: &str, p: &[&str]| TierExp::both(n, a, p);
    Test::new(
        "tier order, default action, tier deleted under its policies",
        vec![
            tiered_state(
                "tiers 1,2,3",
                &[
                    ("tier-a", Some((Some(1.0), None)), &["x"]),
                    ("tier-b", Some((Some(2.0), Some("Pass"))), &["y", "x"]),
                    ("tier-c", Some((Some(3.0), None)), &["z"]),
                ],
                vec![
                    t("tier-a", "Deny", &["tier-a.x"]),
                    t("tier-b", "Pass", &["tier-b.x", "tier-b.y"]),
                    t("tier-c", "Deny", &["tier-c.z"]),
                ],
            ),
            tiered_state(
                "tiers 3,2,1",
                &[
                    ("tier-a", Some((Some(3.0), None)), &["x"]),
                    ("tier-b", Some((Some(2.0), Some("Pass"))), &["y", "x"]),
                    ("tier-c", Some((Some(1.0), None)), &["z"]),
                ],
                vec![
                    t("tier-c", "Deny", &["tier-c.z"]),
                    t("tier-b", "Pass", &["tier-b.x", "tier-b.y"]),
                    t("tier-a", "Deny", &["tier-a.x"]),
                ],
            ),
            tiered_state(
                "tier-c deleted, its policy stays",
                &[
                    ("tier-a", Some((Some(3.0), None)), &["x"]),
                    ("tier-b", Some((Some(2.0), Some("Pass"))), &["y", "x"]),
                    ("tier-c", None, &["z"]),
                ],
                vec![
                    t("tier-b", "Pass", &["tier-b.x", "tier-b.y"]),
                    t("tier-a", "Deny", &["tier-a.x"]),
                    t("tier-c", "", &["tier-c.z"]),
                ],
            ),
            tiered_state(
                "equal tier orders by name, unordered last",
                &[
                    ("tier-b", Some((Some(5.0), None)), &["x"]),
                    ("tier-a", Some((Some(5.0), None)), &["x"]),
                    ("tier-c", Some((None, None)), &["x"]),
                ],
                vec![
                    t("tier-a", "Deny", &["tier-a.x"]),
                    t("tier-b", "Deny", &["tier-b.x"]),
                    t("tier-c", "Deny", &["tier-c.x"]),
                ],
            ),
        ],
    )
}

fn case_policy_moves_tier() -> Test {
    let in_tier = |tier: &str| {
        let mut s = ord_base(&format!("in {tier}"))
            .yaml(&yaml::tier("t1", Some(10.0), None))
            .yaml(&yaml::tier("t2", Some(20.0), None));
        s = s.yaml(
            &Pol::global("mover")
                .tier(tier)
                .selector("app == 'ord'")
                .ingress("{action: Allow}")
                .yaml(),
        );
        s.expect(ord_expect(
            &["mover"],
            vec![TierExp::new(tier, "Deny", &["mover"], &[])],
        ))
    };
    Test::new(
        "policy moves between tiers",
        vec![in_tier("t1"), in_tier("t2"), in_tier("t1")],
    )
}

fn case_policy_types() -> Test {
    let typed = |name: &str, types: &[&str], ing: &[&str], eg: &[&str]| {
        let p = Pol::global("typed")
            .selector("app == 'ord'")
            .types(types)
            .ingress("{action: Allow}")
            .egress("{action: Allow}");
        ord_base(name).yaml(&p.yaml()).expect(ord_expect(
            &["typed"],
            vec![TierExp::new("default", "", ing, eg)],
        ))
    };
    Test::new(
        "ingress / egress policy types",
        vec![
            typed("ingress only", &["Ingress"], &["typed"], &[]),
            typed("egress only", &["Egress"], &[], &["typed"]),
            typed("both", &["Ingress", "Egress"], &["typed"], &["typed"]),
        ],
    )
}

fn case_assume_needed() -> Test {
    let p = Pol::global("everywhere")
        .selector("app == 'nothing-has-this'")
        .field("performanceHints: [AssumeNeededOnEveryNode]")
        .ingress("{action: Allow, source: {selector: \"app == 'src'\"}}");
    let s = State::new("forced policy")
        .yaml(&p.yaml())
        .yaml(
            &Wep::new("src")
                .node("node2")
                .labels(&[("app", "src")])
                .ips(&["10.0.6.1/32"])
                .yaml(),
        )
        .expect(
            Expect::new()
                .policies(&["everywhere"])
                .sel_set("app == 'src'", &["10.0.6.1/32"]),
        );
    Test::new(
        "AssumeNeededOnEveryNode policy active without endpoints",
        vec![s],
    )
}

// ---------------------------------------------------------------------------
// Host endpoints: untracked / pre-DNAT / forward tiers, expected IPs.
// ---------------------------------------------------------------------------

fn hep1() -> String {
    yaml::hep(
        "hep1",
        "node1",
        "eth0",
        &["192.168.0.1"],
        &[("hep", "h1")],
        &[],
    )
}

fn hep_remote() -> String {
    yaml::hep(
        "hep9",
        "node2",
        "eth0",
        &["192.168.0.9"],
        &[("hep", "h9")],
        &[],
    )
}

fn hpol(name: &str, order: f64, extra: &[&str], egress: bool) -> String {
    let mut p = Pol::global(name)
        .selector("has(hep)")
        .order(order)
        .ingress("{action: Allow, source: {selector: \"has(hep)\"}}");
    for f in extra {
        p = p.field(f);
    }
    if egress {
        p = p.egress("{action: Allow}");
    }
    p.yaml()
}

fn hep_state(name: &str, with_default_tier: bool, pols: &[&str]) -> State {
    let mut s = State::new(name).yaml(&hep1()).yaml(&hep_remote());
    let action = if with_default_tier { "Deny" } else { "" };
    if with_default_tier {
        s = s.yaml(&yaml::tier("default", Some(1_000_000.0), None));
    }
    let (mut normal, mut untracked, mut prednat, mut fwd) = (vec![], vec![], vec![], vec![]);
    for p in pols {
        match *p {
            "normal" => {
                s = s.yaml(&hpol("h-normal", 10.0, &[], true));
                normal.push("h-normal");
            }
            "untracked" => {
                s = s.yaml(&hpol(
                    "h-untracked",
                    20.0,
                    &["doNotTrack: true", "applyOnForward: true"],
                    true,
                ));
                untracked.push("h-untracked");
            }
            "prednat" => {
                s = s.yaml(&hpol(
                    "h-prednat",
                    30.0,
                    &["preDNAT: true", "applyOnForward: true"],
                    false,
                ));
                prednat.push("h-prednat");
            }
            "forward" => {
                s = s.yaml(&hpol("h-forward", 40.0, &["applyOnForward: true"], true));
                normal.push("h-forward");
                fwd.push("h-forward");
            }
            other => panic!("unknown host policy {other}"),
        }
    }
    let tiers = |pols: &[&str], action: &str, egress: bool| {
        if pols.is_empty() {
            vec![]
        } else {
            let eg: &[&str] = if egress { pols } else { &[] };
            vec![TierExp::new("default", action, pols, eg)]
        }
    };
    let mut all: Vec<&str> = Vec::new();
    all.extend(&normal);
    all.extend(&untracked);
    all.extend(&prednat);
    all.sort();
    all.dedup();
    let mut e = Expect::new().policies(&all).hep(
        "hep1",
        HepExp::new("eth0", &[], &["192.168.0.1"])
            .tiers(tiers(&normal, action, true))
            .untracked(tiers(&untracked, "Pass", true))
            .pre_dnat(tiers(&prednat, "Pass", false))
            .forward(tiers(&fwd, action, true)),
    );
    if !all.is_empty() {
        e = e.sel_set("has(hep)", &["192.168.0.1/32", "192.168.0.9/32"]);
    }
    s.expect(e)
}

fn case_host_endpoints() -> Test {
    Test::new(
        "host endpoint tiers: normal, untracked, pre-DNAT, forward",
        vec![
            hep_state("normal", false, &["normal"]),
            hep_state(
                "all kinds, default tier resource",
                true,
                &["normal", "untracked", "prednat", "forward"],
            ),
            hep_state("untracked only", false, &["untracked"]),
            hep_state("prednat + forward", true, &["prednat", "forward"]),
            hep_state("no policy", false, &[]),
        ],
    )
}

fn case_host_endpoint_ip_change() -> Test {
    let with_ips = |name: &str, ips: &[&str], members: &[&str]| {
        State::new(name)
            .yaml(&yaml::hep(
                "hep1",
                "node1",
                "eth0",
                ips,
                &[("hep", "h1")],
                &[],
            ))
            .yaml(&hpol("h-normal", 10.0, &[], true))
            .expect(
                Expect::new()
                    .policies(&["h-normal"])
                    .sel_set("has(hep)", members)
                    .hep(
                        "hep1",
                        HepExp {
                            ipv6: ips
                                .iter()
                                .filter(|i| i.contains(':'))
                                .map(|s| s.to_string())
                                .collect(),
                            ..HepExp::new(
                                "eth0",
                                &[],
                                &ips.iter()
                                    .copied()
                                    .filter(|i| !i.contains(':'))
                                    .collect::<Vec<_>>(),
                            )
                        }
                        .tiers(vec![TierExp::both(
                            "default",
                            "",
                            &["h-normal"],
                        )]),
                    ),
            )
    };
    Test::new(
        "host endpoint expected IPs",
        vec![
            with_ips("one v4", &["192.168.0.1"], &["192.168.0.1/32"]),
            with_ips(
                "v4 + v6",
                &["192.168.0.2", "fd00::2"],
                &["192.168.0.2/32", "fd00::2/128"],
            ),
        ],
    )
}

// ---------------------------------------------------------------------------
// Network sets.
// ---------------------------------------------------------------------------

fn netset_state(
    name: &str,
    nets: Option<&[&str]>,
    remote_same_ip: bool,
    members: &[&str],
) -> State {
    let pol = Pol::global("ns-pol")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, source: {selector: \"netset == 'a'\"}}");
    let mut s = ep1_with(name, &pol);
    if let Some(nets) = nets {
        s = s.yaml(&yaml::netset(None, "netset-1", &[("netset", "a")], nets));
    }
    if remote_same_ip {
        s = s.yaml(
            &Wep::new("nsmember")
                .node("node2")
                .labels(&[("netset", "a")])
                .ips(&["10.0.0.1/32"])
                .yaml(),
        );
    }
    s.expect(ep1_expect(&["ns-pol"]).sel_set("netset == 'a'", members))
}

fn case_network_sets() -> Test {
    Test::new(
        "network sets: CIDRs, shared member, deleted under policy, /0 split",
        vec![
            netset_state("policy only", None, false, &[]),
            netset_state(
                "netset",
                Some(&["10.1.0.0/16", "10.0.0.1/32"]),
                false,
                &["10.0.0.1/32", "10.1.0.0/16"],
            ),
            netset_state(
                "netset + endpoint with same IP",
                Some(&["10.1.0.0/16", "10.0.0.1/32"]),
                true,
                &["10.0.0.1/32", "10.1.0.0/16"],
            ),
            netset_state(
                "netset deleted, endpoint keeps IP",
                None,
                true,
                &["10.0.0.1/32"],
            ),
            netset_state(
                "/0 split",
                Some(&["0.0.0.0/0", "::/0"]),
                false,
                &["0.0.0.0/1", "128.0.0.0/1", "::/1", "8000::/1"],
            ),
        ],
    )
}

fn case_netset_deleted_under_policy() -> Test {
    Test::new(
        "network set deleted while the policy selecting it stays",
        vec![
            netset_state("netset", Some(&["10.1.0.0/16"]), false, &["10.1.0.0/16"]),
            netset_state("netset gone", None, false, &[]),
        ],
    )
}

fn case_netset_overlaps() -> Test {
    // Two network sets share a CIDR and nest others (iptables semantics:
    // nested CIDRs are all members); deleting one set keeps the shared
    // CIDR, which the other still contributes.
    let pol = Pol::global("ov-pol")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, source: {selector: \"has(ov)\"}}");
    let mk = |name: &str, sets: &[(&str, &[&str])], members: &[&str]| {
        netsets_state(name, &pol, "ov-pol", "ov", sets, members)
    };
    Test::new(
        "overlapping and nested network-set CIDRs",
        vec![
            mk(
                "two sets",
                &[
                    ("ov-a", &["10.65.0.0/16", "10.66.0.0/16"]),
                    ("ov-b", &["10.65.0.0/16", "10.65.1.0/24", "10.65.1.7/32"]),
                ],
                &[
                    "10.65.0.0/16",
                    "10.65.1.0/24",
                    "10.65.1.7/32",
                    "10.66.0.0/16",
                ],
            ),
            mk(
                "ov-a gone",
                &[("ov-b", &["10.65.0.0/16", "10.65.1.0/24", "10.65.1.7/32"])],
                &["10.65.0.0/16", "10.65.1.0/24", "10.65.1.7/32"],
            ),
            mk(
                "ov-b middle removed",
                &[("ov-b", &["10.65.0.0/16", "10.65.1.7/32"])],
                &["10.65.0.0/16", "10.65.1.7/32"],
            ),
        ],
    )
}

fn case_policy_namespace_selector() -> Test {
    // A global policy selecting endpoints by their namespace's labels.
    let pol = Pol::global("by-ns")
        .field("namespaceSelector: \"env == 'prod'\"")
        .ingress("{action: Allow}");
    let w = Wep::new("w")
        .ns("ns1")
        .ips(&["10.0.7.1/32"])
        .profiles(&["kns.ns1"]);
    let mk = |name: &str, env: &str| {
        let tiers = if env == "prod" {
            vec![TierExp::new("default", "", &["by-ns"], &[])]
        } else {
            vec![]
        };
        let mut e = Expect::new()
            .profiles(&["kns.ns1"])
            .namespace("ns1", &[("env", env), ("projectcalico.org/name", "ns1")])
            .wep(&w.id(), WepExp::new(&["kns.ns1"], &["10.0.7.1/32"], tiers));
        if env == "prod" {
            e = e.policies(&["by-ns"]);
        }
        State::new(name)
            .yaml(&pol.yaml())
            .yaml(&w.yaml())
            .yaml(&yaml::namespace("ns1", &[("env", env)]))
            .expect(e)
    };
    Test::new(
        "policy namespaceSelector follows namespace labels",
        vec![
            mk("prod", "prod"),
            mk("dev", "dev"),
            mk("prod again", "prod"),
        ],
    )
}

fn case_namespaced_netset() -> Test {
    // A namespaced network set inherits its namespace's labels through the
    // kns profile, so a namespace selector reaches it.
    let pol = Pol::global("nsel")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, source: {namespaceSelector: \"env == 'prod'\", selector: \"kind == 'ext'\"}}");
    let sel = rule_selector(&pol.yaml(), true, 0, true);
    let mk = |name: &str, env: &str, members: &[&str]| {
        ep1_with(name, &pol)
            .yaml(&yaml::namespace("ns1", &[("env", env)]))
            .yaml(&yaml::netset(
                Some("ns1"),
                "ext",
                &[("kind", "ext")],
                &["172.16.0.0/12"],
            ))
            .expect(
                ep1_expect(&["nsel"])
                    .namespace("ns1", &[("env", env), ("projectcalico.org/name", "ns1")])
                    .sel_set(&sel, members),
            )
    };
    Test::new(
        "namespaced network set via namespace selector",
        vec![
            mk("prod", "prod", &["172.16.0.0/12"]),
            mk("dev", "dev", &[]),
        ],
    )
}

// ---------------------------------------------------------------------------
// Named ports.
// ---------------------------------------------------------------------------

fn np_a() -> Wep {
    Wep::new("np-a")
        .labels(&[("np", "yes")])
        .ips(&["10.0.2.1/32"])
        .port("http", "TCP", 80)
        .port("dns", "UDP", 53)
        .port("sctpp", "SCTP", 9000)
}

fn np_b(port_name: &str) -> Wep {
    Wep::new("np-b")
        .node("node2")
        .labels(&[("np", "yes")])
        .ips(&["10.0.2.2/32"])
        .port(port_name, "TCP", 8080)
        .port("dns", "UDP", 5353)
}

fn np_c() -> Wep {
    // "http" but over UDP: must not join the TCP set.
    Wep::new("np-c")
        .node("node2")
        .labels(&[("np", "yes")])
        .ips(&["10.0.2.3/32"])
        .port("http", "UDP", 80)
}

fn np_pol() -> String {
    Pol::global("np-pol")
        .selector("has(np)")
        .ingress("{action: Allow, protocol: TCP, destination: {selector: \"has(np)\", ports: [http]}}")
        .ingress("{action: Allow, protocol: UDP, destination: {ports: [dns]}}")
        .ingress("{action: Allow, protocol: SCTP, source: {selector: \"has(np)\", ports: [sctpp]}}")
        .ingress("{action: Allow, protocol: TCP, destination: {selector: \"has(np)\", ports: [80, http]}}")
        .ingress("{action: Deny, protocol: TCP, destination: {selector: \"has(np)\", notPorts: [http]}}")
        .yaml()
}

fn np_state(name: &str, b_port: &str) -> State {
    let a = np_a();
    let tcp_http: Vec<&str> = if b_port == "http" {
        vec!["10.0.2.1,tcp:80", "10.0.2.2,tcp:8080"]
    } else {
        vec!["10.0.2.1,tcp:80"]
    };
    let np_tcp = nid("has(np)", "tcp", "http");
    let e = Expect::new()
        .policies(&["np-pol"])
        .wep(
            &a.id(),
            WepExp {
                profiles: vec![],
                ipv4: vec!["10.0.2.1/32".into()],
                ipv6: vec![],
                tiers: vec![TierExp::new("default", "", &["np-pol"], &[])],
                ..Default::default()
            },
        )
        .np_set("has(np)", "tcp", "http", &tcp_http)
        .np_set("all()", "udp", "dns", &["10.0.2.1,udp:53", "10.0.2.2,udp:5353"])
        .np_set("has(np)", "sctp", "sctpp", &["10.0.2.1,sctp:9000"])
        .sel_set("has(np)", &["10.0.2.1/32", "10.0.2.2/32", "10.0.2.3/32"])
        .policy_rules(
            "np-pol",
            vec![
                json!({"action": "allow", "dstNamedPortIpSetIds": [np_tcp], "dstIpSetIds": [], "dstPorts": []}),
                json!({"action": "allow", "protocol": {"name": "udp"}, "dstNamedPortIpSetIds": [nid("all()", "udp", "dns")], "dstIpSetIds": []}),
                json!({"action": "allow", "protocol": {"name": "sctp"}, "srcNamedPortIpSetIds": [nid("has(np)", "sctp", "sctpp")], "srcIpSetIds": []}),
                json!({"action": "allow", "dstNamedPortIpSetIds": [np_tcp], "dstIpSetIds": [sid("has(np)")], "dstPorts": [{"first": 80, "last": 80}]}),
                json!({"action": "deny", "notDstNamedPortIpSetIds": [np_tcp], "dstIpSetIds": [sid("has(np)")]}),
            ],
            vec![],
        );
    State::new(name)
        .yaml(&a.yaml())
        .yaml(&np_b(b_port).yaml())
        .yaml(&np_c().yaml())
        .yaml(&np_pol())
        .expect(e)
}

fn case_named_ports() -> Test {
    let no_local = State::new("local endpoint gone")
        .yaml(&np_b("http").yaml())
        .yaml(&np_c().yaml())
        .yaml(&np_pol())
        .expect(Expect::new());
    Test::new(
        "named ports: TCP/UDP/SCTP, no selector, numeric+named, negated",
        vec![
            np_state("all", "http"),
            np_state("remote port renamed", "web"),
            no_local,
        ],
    )
}

// ---------------------------------------------------------------------------
// Namespaces, service accounts, namespaced policy.
// ---------------------------------------------------------------------------

fn k8s_np() -> String {
    Pol::namespaced("ns1", "np-web")
        .selector("app == 'web'")
        .ingress("{action: Allow, source: {namespaceSelector: \"env == 'prod'\", serviceAccounts: {selector: \"role == 'web'\"}}}")
        .ingress("{action: Allow, source: {selector: \"app == 'web'\"}}")
        .yaml()
}

fn web_ep() -> Wep {
    Wep::new("web")
        .ns("ns1")
        .labels(&[("app", "web")])
        .ips(&["10.0.3.1/32"])
        .profiles(&["kns.ns1", "ksa.ns1.sa1"])
        .sa("sa1")
}

fn k8s_state(name: &str, env: &str, sa: bool) -> State {
    k8s_state_ns(name, Some(env), sa)
}

fn k8s_state_ns(name: &str, env: Option<&str>, sa: bool) -> State {
    let sel = rule_selector(&k8s_np(), true, 0, true);
    let same_ns = rule_selector(&k8s_np(), true, 1, true);
    assert!(same_ns.contains("projectcalico.org/namespace"), "{same_ns}");
    let mut s = State::new(name).yaml(&yaml::namespace("ns2", &[("env", "prod")]));
    if let Some(env) = env {
        s = s.yaml(&yaml::namespace("ns1", &[("env", env)]));
    }
    s = s
        .yaml(&web_ep().yaml())
        .yaml(
            &Wep::new("other")
                .ns("ns2")
                .node("node2")
                .labels(&[("app", "web")])
                .ips(&["10.0.3.2/32"])
                .profiles(&["kns.ns2"])
                .yaml(),
        )
        .yaml(&k8s_np());
    let mut e = Expect::new()
        .namespace("ns2", &[("env", "prod"), ("projectcalico.org/name", "ns2")])
        .profiles(&["kns.ns1", "ksa.ns1.sa1"])
        .policies(&["ns1/np-web"])
        .wep(
            &web_ep().id(),
            WepExp::new(
                &["kns.ns1", "ksa.ns1.sa1"],
                &["10.0.3.1/32"],
                vec![TierExp::new("default", "", &["ns1/np-web"], &[])],
            ),
        );
    e = match env {
        Some(env) => e
            .namespace("ns1", &[("env", env), ("projectcalico.org/name", "ns1")])
            .profile_rules(
                "kns.ns1",
                vec![json!({"action": "allow"})],
                vec![json!({"action": "allow"})],
            ),
        // Namespace gone while its pod stays: deny-all stand-in.
        None => e.profile_rules(
            "kns.ns1",
            vec![json!({"action": "deny"})],
            vec![json!({"action": "deny"})],
        ),
    };
    let member: &[&str] = if env == Some("prod") && sa {
        &["10.0.3.1/32"]
    } else {
        &[]
    };
    e = e.sel_set(&sel, member).policy_rules(
        "ns1/np-web",
        vec![
            json!({
                "action": "allow",
                "srcIpSetIds": [sid(&sel)],
                "originalSrcNamespaceSelector": "env == 'prod'",
                "srcServiceAccountMatch": {"selector": "role == 'web'"},
            }),
            json!({
                "action": "allow",
                "srcIpSetIds": [sid(&same_ns)],
                "originalSrcSelector": "app == 'web'",
            }),
        ],
        vec![],
    );
    // A namespaced policy's rule selector only sees its own namespace:
    // the ns2 endpoint with the same label is not a member.
    e = e.sel_set(&same_ns, &["10.0.3.1/32"]);
    if sa {
        s = s.yaml(&yaml::service_account("ns1", "sa1", &[("role", "web")]));
        e = e
            .service_account(
                "ns1",
                "sa1",
                &[("role", "web"), ("projectcalico.org/name", "sa1")],
            )
            .profile_rules("ksa.ns1.sa1", vec![], vec![]);
    } else {
        e = e.profile_rules(
            "ksa.ns1.sa1",
            vec![json!({"action": "deny"})],
            vec![json!({"action": "deny"})],
        );
    }
    s.expect(e)
}

fn case_namespaces() -> Test {
    Test::new(
        "namespaces and service accounts: selectors, pass-through, SA deleted under endpoint",
        vec![
            k8s_state("prod", "prod", true),
            k8s_state("namespace relabelled", "staging", true),
            k8s_state("service account deleted", "prod", false),
            k8s_state("back", "prod", true),
            k8s_state_ns("namespace deleted under its pod", None, true),
            k8s_state_ns("namespace and service account deleted", None, false),
        ],
    )
}

// ---------------------------------------------------------------------------
// Rule conversion.
// ---------------------------------------------------------------------------

fn case_rule_conversion() -> Test {
    let p = Pol::global("rules")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, protocol: TCP, source: {nets: [\"10.1.0.0/16\", \"10.2.0.0/16\"], notNets: [\"10.1.1.0/24\"], ports: [\"1000:2000\"], notPorts: [1500]}, destination: {ports: [80, 443], notNets: [\"10.3.0.0/16\"]}}")
        .ingress("{action: Deny, protocol: ICMP, icmp: {type: 8, code: 0}, notICMP: {type: 3}}")
        .ingress("{action: Log, protocol: 132, notProtocol: UDP, ipVersion: 4}")
        .ingress("{action: Pass, source: {selector: \"has(a)\", notSelector: \"has(b)\"}}")
        .ingress("{action: Allow, destination: {notSelector: \"has(c)\"}}")
        .ingress("{action: Allow, http: {methods: [GET, PUT], paths: [{exact: /a}, {prefix: /b}]}, source: {serviceAccounts: {names: [sa-x]}}}")
        .egress("{action: Allow, protocol: ICMPv6, icmp: {type: 128}}")
        .egress("{action: Allow, destination: {nets: [\"fd00::/8\"]}}")
        .egress("{action: Allow, destination: {services: {name: kube-dns, namespace: kube-system}}}");
    let svc = felix::calc::ids::make_unique_id("svc", "kube-system/kube-dns");
    let and_not = "(has(a)) && (!(has(b)))";
    let sa_sel = rule_selector(&p.yaml(), true, 5, true);
    let s = ep1_with("every rule field", &p)
        .expect(
            Expect::new()
                .profiles(&["prof-1"])
                .policies(&["rules"])
                .wep(&ep1().id(), wep_default(&["10.0.0.1/32", "10.0.0.2/32"], &["rules"]))
                .sel_set(and_not, &[])
                .sel_set("has(c)", &[])
                .sel_set(&sa_sel, &[])
                .raw_set(&svc, "service kube-system/kube-dns", "IP_AND_PORT", &[])
                .policy_rules(
                    "rules",
                    vec![
                        json!({
                            "action": "allow", "protocol": {"name": "tcp"},
                            "srcNet": ["10.1.0.0/16", "10.2.0.0/16"], "notSrcNet": ["10.1.1.0/24"],
                            "srcPorts": [{"first": 1000, "last": 2000}], "notSrcPorts": [{"first": 1500, "last": 1500}],
                            "dstPorts": [{"first": 80, "last": 80}, {"first": 443, "last": 443}],
                            "notDstNet": ["10.3.0.0/16"],
                        }),
                        json!({
                            "action": "deny", "protocol": {"name": "icmp"}, "ipVersion": "IPV4",
                            "icmpTypeCode": {"type": 8, "code": 0}, "notIcmpType": 3,
                        }),
                        json!({"action": "log", "protocol": {"number": 132}, "notProtocol": {"name": "udp"}, "ipVersion": "IPV4"}),
                        json!({"action": "next-tier", "srcIpSetIds": [sid(and_not)], "notSrcIpSetIds": []}),
                        json!({"action": "allow", "notDstIpSetIds": [sid("has(c)")], "dstIpSetIds": []}),
                        json!({
                            "action": "allow", "srcIpSetIds": [sid(&sa_sel)],
                            "httpMatch": {"methods": ["GET", "PUT"], "paths": [{"exact": "/a"}, {"prefix": "/b"}]},
                            "srcServiceAccountMatch": {"names": ["sa-x"]},
                        }),
                    ],
                    vec![
                        json!({"action": "allow", "protocol": {"name": "icmpv6"}, "ipVersion": "IPV6", "icmpType": 128}),
                        json!({"action": "allow", "dstNet": ["fd00::/8"]}),
                        json!({
                            "action": "allow", "dstIpPortSetIds": [svc],
                            "originalDstService": "kube-dns", "originalDstServiceNamespace": "kube-system",
                        }),
                    ],
                ),
        );
    Test::new("rule conversion: every field", vec![s])
}

fn case_rule_ids_stable() -> Test {
    // The same rules in two policies get the same IP sets; rule IDs are
    // non-empty and differ between rules.
    let mk = |n: &str| {
        Pol::global(n)
            .selector("id == 'ep1'")
            .ingress("{action: Allow, source: {selector: \"has(x)\"}}")
            .ingress("{action: Deny}")
            .yaml()
    };
    let s = ep1_base("two policies, same rules")
        .yaml(&mk("r1"))
        .yaml(&mk("r2"))
        .expect(ep1_expect(&["r1", "r2"]).sel_set("has(x)", &[]));
    let one = ep1_base("one policy left")
        .yaml(&mk("r2"))
        .expect(ep1_expect(&["r2"]).sel_set("has(x)", &[]));
    Test::new("IP set shared by two policies, one deleted", vec![s, one])
}

// ---------------------------------------------------------------------------
// Validation filter.
// ---------------------------------------------------------------------------

fn case_validation() -> Test {
    use felix::model::{Key, Policy, PolicyKey, Rule, Tier, Value};
    use std::sync::Arc;
    let key = Key::Policy(PolicyKey {
        name: "pol-1".into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    });
    let bad_selector = Value::Policy(Arc::new(Policy {
        selector: "has(".into(),
        ..Default::default()
    }));
    let bad_rule = Value::Policy(Arc::new(Policy {
        selector: "shared == 'yes'".into(),
        inbound_rules: vec![Rule {
            src_selector: "a ==".into(),
            ..Default::default()
        }],
        ..Default::default()
    }));
    let mismatched = Value::Tier(Arc::new(Tier::default()));
    let base = || ep1_base("x");
    let no_policy = |name: &str, v: Value| {
        base()
            .kv(key.clone(), v)
            .named(name)
            .expect(ep1_no_policy())
    };
    let prof_mismatch = State::new("profile key with a tier value")
        .yaml(&ep1().yaml())
        .kv(
            Key::Profile("prof-1".into()),
            Value::Tier(Arc::new(Tier::default())),
        )
        .expect(
            Expect::new()
                .profiles(&["prof-1"])
                .profile_rules(
                    "prof-1",
                    vec![json!({"action": "deny"})],
                    vec![json!({"action": "deny"})],
                )
                .wep(
                    &ep1().id(),
                    wep_default(&["10.0.0.1/32", "10.0.0.2/32"], &[]),
                ),
        );
    let invalid_resource = ep1_base("invalid v3 resource is absent")
        .invalid_yaml(
            &Pol::global("bad")
                .selector("id == 'ep1'")
                .ingress("{action: Allow, source: {nets: [\"10.0.0.300/8\"]}}")
                .yaml(),
        )
        .expect(ep1_no_policy());
    Test::new(
        "validation filter: invalid values treated as absent",
        vec![
            eps_state("valid", &[ep1()], false),
            no_policy("unparseable policy selector", bad_selector),
            eps_state("valid again", &[ep1()], false),
            no_policy("unparseable rule selector", bad_rule),
            no_policy("policy key with a tier value", mismatched),
            prof_mismatch,
            invalid_resource,
        ],
    )
}

// ---------------------------------------------------------------------------
// Pass-through: host metadata, pools, encapsulation, config.
// ---------------------------------------------------------------------------

fn case_passthru() -> Test {
    let s1 = State::new("nodes, IPIP pool, config")
        .yaml(&yaml::node(
            "node1",
            "192.168.1.1/24",
            Some(64512),
            &[("rack", "r1")],
        ))
        .yaml(&yaml::node("node2", "192.168.1.2/24", None, &[]))
        .yaml(&yaml::ippool("p1", "10.10.0.0/16", "Always", "Never", true))
        .yaml(&yaml::felix_config(
            "default",
            &[("logSeverityScreen", "Debug"), ("interfacePrefix", "cali")],
        ))
        .yaml(&yaml::felix_config(
            "node.node1",
            &[("logSeverityScreen", "Info")],
        ))
        .yaml(&yaml::felix_config(
            "node.node2",
            &[("logSeverityScreen", "Warning")],
        ))
        .expect(
            Expect::new()
                .host("node1", "192.168.1.1/24", "", "64512", &[("rack", "r1")])
                .host("node2", "192.168.1.2/24", "", "", &[])
                .pool("10.10.0.0/16", true, "always", "")
                .encap(true, false, false, false)
                .config(&[("LogSeverityScreen", "Info"), ("InterfacePrefix", "cali")]),
        );
    let s2 = State::new("node2 gone, VXLAN pools")
        .yaml(&yaml::node(
            "node1",
            "192.168.1.1/24",
            Some(64512),
            &[("rack", "r2")],
        ))
        .yaml(&yaml::ippool(
            "p2",
            "10.20.0.0/16",
            "Never",
            "CrossSubnet",
            false,
        ))
        .yaml(&yaml::ippool("p6", "fd10::/112", "Never", "Always", false))
        .yaml(&yaml::felix_config(
            "default",
            &[("logSeverityScreen", "Debug")],
        ))
        .expect(
            Expect::new()
                .host("node1", "192.168.1.1/24", "", "64512", &[("rack", "r2")])
                .pool("10.20.0.0/16", false, "", "cross-subnet")
                .pool("fd10::/112", false, "", "always")
                .encap(false, true, true, false)
                .config(&[("LogSeverityScreen", "Debug")]),
        );
    let s3 = State::new("plain pool, other node's config only")
        .yaml(&yaml::ippool("p3", "10.30.0.0/16", "Never", "Never", false))
        .yaml(&yaml::felix_config(
            "node.node2",
            &[("logSeverityScreen", "Warning")],
        ))
        .expect(
            Expect::new()
                .pool("10.30.0.0/16", false, "", "")
                .encap(false, false, false, true),
        );
    Test::new(
        "pass-through: host metadata, IP pools, encapsulation, config batching",
        vec![s1, s2, s3],
    )
}

// ---------------------------------------------------------------------------
// A long mixed sequence.
// ---------------------------------------------------------------------------

fn case_mixed() -> Test {
    Test::new(
        "mixed sequence across nodes",
        vec![
            eps_state("ep1", &[ep1()], false),
            profile_state("blue", Some("blue"), &[]),
            netset_state(
                "netset",
                Some(&["10.1.0.0/16"]),
                true,
                &["10.0.0.1/32", "10.1.0.0/16"],
            ),
            hep_state(
                "hep all",
                true,
                &["normal", "untracked", "prednat", "forward"],
            ),
            k8s_state("k8s", "prod", true),
            np_state("np", "http"),
            eps_state("both", &[ep1(), ep2()], true),
        ],
    )
}

// ---------------------------------------------------------------------------
// Refcount edge cases.
// ---------------------------------------------------------------------------

fn case_empty() -> Test {
    Test::new("empty datastore", vec![State::empty()])
}

/// A local endpoint of the duplicate-member states: pod name, IPs and
/// TCP named ports (name, number).
type DupEp<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, u16)]);

fn dup_state(name: &str, eps: &[DupEp], members: &[&str], np_members: &[&str]) -> State {
    // Local endpoints "d-*" with the given IPs and TCP named ports; a policy
    // selecting all of them whose rules use a selector set and a named-port
    // set over the same endpoints.
    let pol = Pol::global("dup-pol")
        .selector("has(dup)")
        .ingress("{action: Allow, source: {selector: \"has(dup)\"}}")
        .ingress(
            "{action: Allow, protocol: TCP, destination: {selector: \"has(dup)\", ports: [web]}}",
        );
    let mut s = State::new(name).yaml(&pol.yaml());
    let mut e = Expect::new();
    for (n, ips, ports) in eps {
        let mut w = Wep::new(n).labels(&[("dup", "1")]).ips(ips);
        for (pn, num) in ports.iter() {
            w = w.port(pn, "TCP", *num);
        }
        s = s.yaml(&w.yaml());
        let v4: Vec<&str> = ips.iter().copied().filter(|i| !i.contains(':')).collect();
        let v6: Vec<&str> = ips.iter().copied().filter(|i| i.contains(':')).collect();
        e = e.wep(
            &w.id(),
            WepExp::new(
                &[],
                &v4,
                vec![TierExp::new("default", "", &["dup-pol"], &[])],
            )
            .ipv6(&v6),
        );
    }
    if !eps.is_empty() {
        e = e
            .policies(&["dup-pol"])
            .sel_set("has(dup)", members)
            .np_set("has(dup)", "tcp", "web", np_members);
    }
    s.expect(e)
}

fn case_duplicate_members() -> Test {
    // Two endpoints with the same IP and the same named port: the members
    // are deduplicated and survive the deletion of either endpoint.
    Test::new(
        "same IP and named port on two endpoints, one deleted",
        vec![
            dup_state(
                "d-a",
                &[("d-a", &["10.0.8.1/32"], &[("web", 80)])],
                &["10.0.8.1/32"],
                &["10.0.8.1,tcp:80"],
            ),
            dup_state(
                "d-a + d-b same IP and port",
                &[
                    ("d-a", &["10.0.8.1/32"], &[("web", 80)]),
                    ("d-b", &["10.0.8.1/32", "fd00::8:2/128"], &[("web", 80)]),
                ],
                &["10.0.8.1/32", "fd00::8:2/128"],
                &["10.0.8.1,tcp:80", "fd00::8:2,tcp:80"],
            ),
            dup_state(
                "d-b only",
                &[("d-b", &["10.0.8.1/32", "fd00::8:2/128"], &[("web", 80)])],
                &["10.0.8.1/32", "fd00::8:2/128"],
                &["10.0.8.1,tcp:80", "fd00::8:2,tcp:80"],
            ),
            dup_state(
                "d-b port renumbered",
                &[("d-b", &["10.0.8.1/32"], &[("web", 8080)])],
                &["10.0.8.1/32"],
                &["10.0.8.1,tcp:8080"],
            ),
        ],
    )
}

fn case_policy_rule_change() -> Test {
    // A policy's rule selector changes while it stays active: the new set
    // must exist before the policy names it, the old one must outlive it.
    let mk = |name: &str, sel: &str| {
        let p = Pol::global("chg").selector("id == 'ep1'").ingress(&format!(
            "{{action: Allow, source: {{selector: \"{sel}\"}}}}"
        ));
        ep1_base(name).yaml(&ep2().yaml()).yaml(&p.yaml()).expect(
            ep1_expect(&["chg"])
                .wep(
                    &ep2().id(),
                    wep_default(&["10.0.0.2/32", "10.0.0.3/32"], &[]),
                )
                .sel_set(
                    sel,
                    if sel.contains("ep2") {
                        &["10.0.0.2/32", "10.0.0.3/32"]
                    } else {
                        &["10.0.0.1/32", "10.0.0.2/32"]
                    },
                )
                .policy_rules("chg", vec![json!({"srcIpSetIds": [sid(sel)]})], vec![]),
        )
    };
    Test::new(
        "policy rule selector changes under an active policy",
        vec![
            mk("selects ep2", "id == 'ep2'"),
            mk("selects ep1", "id == 'ep1'"),
        ],
    )
}

fn case_profile_switch() -> Test {
    // An endpoint switches between two profiles with different labels; a
    // policy matches through the inherited label only.
    let pr = |n: &str, team: &str| yaml::profile(n, &[("team", team)], &["{action: Allow}"], &[]);
    let mk = |name: &str, which: &str| {
        let w = Wep::new("sw")
            .labels(&[("id", "sw")])
            .ips(&["10.0.4.5/32"])
            .profiles(&[which]);
        let blue = which == "p-blue";
        let tiers = if blue {
            vec![TierExp::new("default", "", &["pol-team"], &[])]
        } else {
            vec![]
        };
        let mut e = Expect::new()
            .profiles(&[which])
            .wep(&w.id(), WepExp::new(&[which], &["10.0.4.5/32"], tiers));
        if blue {
            e = e
                .policies(&["pol-team"])
                .sel_set("team == 'blue'", &["10.0.4.5/32"]);
        }
        State::new(name)
            .yaml(&pr("p-blue", "blue"))
            .yaml(&pr("p-red", "red"))
            .yaml(&pol_team())
            .yaml(&w.yaml())
            .expect(e)
    };
    Test::new(
        "endpoint switches profile",
        vec![mk("blue", "p-blue"), mk("red", "p-red")],
    )
}

fn case_zero_prefix_overlap() -> Test {
    // A /0 is programmed as two /1s; another set contributing one of those
    // /1s must share the member, whichever of the two goes first.
    let pol = Pol::global("zero-pol")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, source: {selector: \"has(z)\"}}");
    let mk = |name: &str, sets: &[(&str, &[&str])], members: &[&str]| {
        netsets_state(name, &pol, "zero-pol", "z", sets, members)
    };
    let zero: &[&str] = &["0.0.0.0/0"];
    let half: &[&str] = &["0.0.0.0/1"];
    Test::new(
        "/0 split overlapping an explicit /1",
        vec![
            mk("zero", &[("z-all", zero)], &["0.0.0.0/1", "128.0.0.0/1"]),
            mk(
                "zero + half",
                &[("z-all", zero), ("z-half", half)],
                &["0.0.0.0/1", "128.0.0.0/1"],
            ),
            mk("half only", &[("z-half", half)], &["0.0.0.0/1"]),
        ],
    )
}

fn case_duplicate_ip_in_endpoint() -> Test {
    // An endpoint (or network set) listing the same address twice.
    let pol = Pol::global("di-pol")
        .selector("id == 'ep1'")
        .ingress("{action: Allow, source: {selector: \"has(di)\"}}");
    let mk = |name: &str, nets: &[&str], members: &[&str]| {
        netsets_state(name, &pol, "di-pol", "di", &[("di", nets)], members)
    };
    Test::new(
        "the same CIDR twice in one network set",
        vec![
            mk(
                "twice",
                &["10.7.0.0/16", "10.7.0.0/16", "10.8.0.1"],
                &["10.7.0.0/16", "10.8.0.1/32"],
            ),
            mk("once", &["10.7.0.0/16"], &["10.7.0.0/16"]),
        ],
    )
}

fn case_host_endpoint_named_ports() -> Test {
    // Host endpoints' named ports join IP+port sets with their expected
    // IPs; an all-interfaces host endpoint without IPs contributes nothing.
    let pol = Pol::global("ssh-pol").selector("has(hep)").ingress(
        "{action: Allow, protocol: TCP, destination: {selector: \"has(hep)\", ports: [ssh]}}",
    );
    let mk = |name: &str, port: u16, star: bool| {
        let mut s = State::new(name)
            .yaml(&pol.yaml())
            .yaml(&yaml::hep_with_ports(
                "hep1",
                "node1",
                "eth0",
                &["192.168.0.1"],
                &[("hep", "h1")],
                &[("ssh", "TCP", port)],
            ))
            .yaml(&yaml::hep_with_ports(
                "hep9",
                "node2",
                "eth0",
                &["192.168.0.9", "fd00::9"],
                &[("hep", "h9")],
                &[("ssh", "TCP", 22)],
            ));
        let mut e = Expect::new()
            .policies(&["ssh-pol"])
            .np_set(
                "has(hep)",
                "tcp",
                "ssh",
                &[
                    &format!("192.168.0.1,tcp:{port}"),
                    "192.168.0.9,tcp:22",
                    "fd00::9,tcp:22",
                ],
            )
            .hep(
                "hep1",
                HepExp::new("eth0", &[], &["192.168.0.1"]).tiers(vec![TierExp::new(
                    "default",
                    "",
                    &["ssh-pol"],
                    &[],
                )]),
            );
        if star {
            s = s.yaml(&yaml::hep_with_ports(
                "hep-all",
                "node1",
                "*",
                &[],
                &[("hep", "all")],
                &[("ssh", "TCP", 2222)],
            ));
            e = e.hep(
                "hep-all",
                HepExp::new("*", &[], &[]).tiers(vec![TierExp::new(
                    "default",
                    "",
                    &["ssh-pol"],
                    &[],
                )]),
            );
        }
        s.expect(e)
    };
    Test::new(
        "host endpoint named ports",
        vec![
            mk("ssh 22", 22, false),
            mk("ssh 2200 + all-interfaces hep", 2200, true),
        ],
    )
}

// ---------------------------------------------------------------------------
// Istio ambient calculator (all-istio-weps IP set, is_istio_ambient marks).
// ---------------------------------------------------------------------------

const ISTIO_MODE: &str = "istio.io/dataplane-mode";

fn istio_opts() -> GraphOptions {
    GraphOptions {
        istio_ambient: true,
        ..GraphOptions::default()
    }
}

/// One Istio state: whether namespace `mesh` is labelled ambient, and pod
/// `c`'s own mode label (`plain` namespace).  Pod `a` is in `mesh`, pod `b`
/// in `mesh` opts out with `none`, `r` is a remote pod in `mesh`, and a
/// network set in `mesh` must never be a member.
fn istio_state(name: &str, ns_ambient: bool, c_mode: &str) -> State {
    let a = Wep::new("a")
        .ns("mesh")
        .ips(&["10.0.5.1/32"])
        .profiles(&["kns.mesh"]);
    let b = Wep::new("b")
        .ns("mesh")
        .labels(&[(ISTIO_MODE, "none")])
        .ips(&["10.0.5.2/32"])
        .profiles(&["kns.mesh"]);
    let c = Wep::new("c")
        .ns("plain")
        .labels(&[(ISTIO_MODE, c_mode)])
        .ips(&["10.0.5.3/32"])
        .profiles(&["kns.plain"]);
    let r = Wep::new("r")
        .ns("mesh")
        .node("node2")
        .ips(&["10.0.5.9/32"])
        .profiles(&["kns.mesh"]);
    let ns_labels: &[(&str, &str)] = if ns_ambient {
        &[(ISTIO_MODE, "ambient")]
    } else {
        &[]
    };
    let mut ns_expect = vec![("projectcalico.org/name", "mesh")];
    ns_expect.extend_from_slice(ns_labels);
    let mut members = Vec::new();
    if ns_ambient {
        members.extend(["10.0.5.1/32", "10.0.5.9/32"]);
    }
    if c_mode == "ambient" {
        members.push("10.0.5.3/32");
    }
    let mark = |w: WepExp, on: bool| if on { w.istio() } else { w };
    let e = Expect::new()
        .raw_set("all-istio-weps", "all-istio-weps", "IP", &members)
        .profiles(&["kns.mesh", "kns.plain"])
        .namespace("mesh", &ns_expect)
        .namespace("plain", &[("projectcalico.org/name", "plain")])
        .wep(
            &a.id(),
            mark(
                WepExp::new(&["kns.mesh"], &["10.0.5.1/32"], vec![]),
                ns_ambient,
            ),
        )
        .wep(
            &b.id(),
            WepExp::new(&["kns.mesh"], &["10.0.5.2/32"], vec![]),
        )
        .wep(
            &c.id(),
            mark(
                WepExp::new(&["kns.plain"], &["10.0.5.3/32"], vec![]),
                c_mode == "ambient",
            ),
        );
    State::new(name)
        .yaml(&yaml::namespace("mesh", ns_labels))
        .yaml(&yaml::namespace("plain", &[]))
        .yaml(&a.yaml())
        .yaml(&b.yaml())
        .yaml(&c.yaml())
        .yaml(&r.yaml())
        .yaml(&yaml::netset(
            Some("mesh"),
            "ext",
            &[],
            &["192.168.50.0/24"],
        ))
        .expect(e)
}

fn case_istio_ambient() -> Test {
    // Add, namespace label removed (inherited match stops), pod label
    // changed, everything back; the expanders add the inconsistent orders
    // (endpoint before its namespace, namespace deleted under endpoints).
    Test::new(
        "Istio ambient: namespace and pod mode labels",
        vec![
            istio_state("ns ambient, c ambient", true, "ambient"),
            istio_state("ns plain, c ambient", false, "ambient"),
            istio_state("ns plain, c none", false, "none"),
            istio_state("ns ambient again, c none", true, "none"),
            istio_state("ns ambient, c ambient again", true, "ambient"),
        ],
    )
    .with_options(istio_opts())
}

fn case_istio_disabled() -> Test {
    // The same datastore without the mode: no set, no marks.
    let mut st = istio_state("disabled", true, "ambient");
    let mut e = Expect::new()
        .profiles(&["kns.mesh", "kns.plain"])
        .namespace(
            "mesh",
            &[("projectcalico.org/name", "mesh"), (ISTIO_MODE, "ambient")],
        )
        .namespace("plain", &[("projectcalico.org/name", "plain")]);
    for (id, mut w) in st.expect.digest.weps.clone() {
        w.istio_ambient = false;
        e = e.wep(&id, w);
    }
    st.expect = e;
    Test::new("Istio ambient mode disabled", vec![st])
}

// ---------------------------------------------------------------------------
// Live-migration calculator (live_migration_role / live_migration_uid).
// Migrations have no v3 YAML decoding: they are fed as model KVs.
// ---------------------------------------------------------------------------

fn lm_kv(
    name: &str,
    uid: &str,
    source: Option<LiveMigrationSource>,
    target: Option<LiveMigrationTarget>,
) -> (Key, Value) {
    (
        Key::LiveMigration(LiveMigrationKey {
            namespace: "vms".into(),
            name: name.into(),
        }),
        Value::LiveMigration(Arc::new(LiveMigration {
            uid: uid.into(),
            source,
            target,
        })),
    )
}

/// A k8s endpoint identifier, with a hostname the calculator must ignore.
fn lm_ep(pod: &str) -> WorkloadEndpointIdentifier {
    WorkloadEndpointIdentifier {
        hostname: "elsewhere".into(),
        orchestrator_id: "k8s".into(),
        workload_id: format!("vms/{pod}"),
        endpoint_id: "eth0".into(),
    }
}

fn lm_src_ep(pod: &str) -> Option<LiveMigrationSource> {
    Some(LiveMigrationSource {
        workload: None,
        workload_endpoint: Some(lm_ep(pod)),
    })
}

fn lm_src_workload(pod: &str) -> Option<LiveMigrationSource> {
    Some(LiveMigrationSource {
        workload: Some(WorkloadIdentifier {
            hostname: String::new(),
            orchestrator_id: "k8s".into(),
            workload_id: format!("vms/{pod}"),
        }),
        workload_endpoint: None,
    })
}

fn lm_tgt_ep(pod: &str) -> Option<LiveMigrationTarget> {
    Some(LiveMigrationTarget {
        selector: None,
        workload_endpoint: Some(lm_ep(pod)),
    })
}

fn lm_tgt_sel(sel: &str) -> Option<LiveMigrationTarget> {
    Some(LiveMigrationTarget {
        selector: Some(sel.into()),
        workload_endpoint: None,
    })
}

fn lm_wep(pod: &str, ip: &str, vm: &str) -> Wep {
    let w = Wep::new(pod).ns("vms").ips(&[ip]);
    if vm.is_empty() {
        w
    } else {
        w.labels(&[("vm", vm)])
    }
}

/// A state with the given pods (pod, IP, `vm` label, expected role, UID)
/// and migrations.
fn lm_state(name: &str, pods: &[(&str, &str, &str, &str, &str)], lms: Vec<(Key, Value)>) -> State {
    let mut st = State::new(name);
    let mut e = Expect::new();
    for (pod, ip, vm, role, uid) in pods {
        let w = lm_wep(pod, ip, vm);
        st = st.yaml(&w.yaml());
        let mut x = WepExp::new(&[], &[ip], vec![]);
        if !role.is_empty() {
            x = x.live_migration(role, uid);
        }
        e = e.wep(&w.id(), x);
    }
    // A remote pod matching every selector: never given a role.
    st = st.yaml(&lm_wep("remote", "10.0.6.99/32", "vm1").node("node2").yaml());
    for (k, v) in lms {
        st = st.kv(k, v);
    }
    st.expect(e)
}

fn case_live_migration_direct() -> Test {
    // OpenStack-style endpoint references and a KubeVirt-style workload
    // source: migration before/after its endpoints (expanders), endpoint
    // deleted under a migration, migration deleted under endpoints, UID
    // change under the same role.
    let m1 = || lm_kv("m1", "u1", lm_src_ep("p1"), lm_tgt_ep("p2"));
    Test::new(
        "live migration: direct endpoint and workload references",
        vec![
            lm_state(
                "no migration",
                &[
                    ("p1", "10.0.6.1/32", "", "", ""),
                    ("p2", "10.0.6.2/32", "", "", ""),
                ],
                vec![],
            ),
            lm_state(
                "p1 -> p2",
                &[
                    ("p1", "10.0.6.1/32", "", "SOURCE", "u1"),
                    ("p2", "10.0.6.2/32", "", "TARGET", "u1"),
                ],
                vec![m1()],
            ),
            lm_state(
                "source endpoint gone",
                &[("p2", "10.0.6.2/32", "", "TARGET", "u1")],
                vec![m1()],
            ),
            lm_state(
                "m1 gone, p2 is a workload source",
                &[
                    ("p1", "10.0.6.1/32", "", "", ""),
                    ("p2", "10.0.6.2/32", "", "SOURCE", "u2"),
                ],
                vec![lm_kv("m2", "u2", lm_src_workload("p2"), None)],
            ),
            lm_state(
                "m2 new UID",
                &[
                    ("p1", "10.0.6.1/32", "", "", ""),
                    ("p2", "10.0.6.2/32", "", "SOURCE", "u3"),
                ],
                vec![lm_kv("m2", "u3", lm_src_workload("p2"), None)],
            ),
            lm_state(
                "overlap: greatest UID wins",
                &[
                    ("p1", "10.0.6.1/32", "", "TARGET", "u9"),
                    ("p2", "10.0.6.2/32", "", "SOURCE", "u9"),
                ],
                vec![
                    lm_kv("m2", "u3", lm_src_workload("p2"), lm_tgt_ep("p1")),
                    lm_kv("m3", "u9", lm_src_ep("p2"), lm_tgt_ep("p1")),
                ],
            ),
        ],
    )
}

fn case_live_migration_selector() -> Test {
    // KubeVirt-style target selector: follows endpoint labels and the
    // migration's selector; a selector match wins over a source reference.
    let lm = |uid: &str, sel: &str| lm_kv("m", uid, lm_src_workload("a"), lm_tgt_sel(sel));
    Test::new(
        "live migration: target selector",
        vec![
            lm_state(
                "a -> b (vm1)",
                &[
                    ("a", "10.0.6.1/32", "", "SOURCE", "k1"),
                    ("b", "10.0.6.2/32", "vm1", "TARGET", "k1"),
                ],
                vec![lm("k1", "vm == 'vm1'")],
            ),
            lm_state(
                "b relabelled",
                &[
                    ("a", "10.0.6.1/32", "", "SOURCE", "k1"),
                    ("b", "10.0.6.2/32", "vm2", "", ""),
                ],
                vec![lm("k1", "vm == 'vm1'")],
            ),
            lm_state(
                "a and b match: target wins",
                &[
                    ("a", "10.0.6.1/32", "vm1", "TARGET", "k1"),
                    ("b", "10.0.6.2/32", "vm1", "TARGET", "k1"),
                ],
                vec![lm("k1", "vm == 'vm1'")],
            ),
            lm_state(
                "selector and UID changed",
                &[
                    ("a", "10.0.6.1/32", "vm1", "SOURCE", "k2"),
                    ("b", "10.0.6.2/32", "vm1", "", ""),
                ],
                vec![lm("k2", "vm == 'vm2'")],
            ),
            lm_state(
                "migration gone",
                &[
                    ("a", "10.0.6.1/32", "vm1", "", ""),
                    ("b", "10.0.6.2/32", "vm1", "", ""),
                ],
                vec![],
            ),
        ],
    )
}

fn case_computed_data_both_kinds() -> Test {
    // Istio and live-migration data on one endpoint are independent: each
    // comes and goes without disturbing the other.  A host endpoint that
    // carries the mesh selector's labels is a member of all-istio-weps (the
    // selector is evaluated by the shared IP-set index, as upstream) but
    // its computed match is dropped (host endpoints have no mark).
    let w = |ambient: bool| {
        let mut l = vec![("vm", "vm1")];
        if ambient {
            l.push((ISTIO_MODE, "ambient"));
        }
        Wep::new("a").ns("vms").labels(&l).ips(&["10.0.6.1/32"])
    };
    let hep = yaml::hep(
        "hep1",
        "node1",
        "eth0",
        &["10.0.6.50"],
        &[
            ("projectcalico.org/orchestrator", "k8s"),
            (ISTIO_MODE, "ambient"),
        ],
        &[],
    );
    let mk = |name: &str, ambient: bool, lm: bool| {
        let mut st = State::new(name).yaml(&w(ambient).yaml()).yaml(&hep);
        let mut x = WepExp::new(&[], &["10.0.6.1/32"], vec![]);
        if ambient {
            x = x.istio();
        }
        if lm {
            let (k, v) = lm_kv("m", "u1", None, lm_tgt_sel("vm == 'vm1'"));
            st = st.kv(k, v);
            x = x.live_migration("TARGET", "u1");
        }
        let members: &[&str] = if ambient {
            &["10.0.6.1/32", "10.0.6.50/32"]
        } else {
            &["10.0.6.50/32"]
        };
        st.expect(
            Expect::new()
                .raw_set("all-istio-weps", "all-istio-weps", "IP", members)
                .wep(&w(ambient).id(), x)
                .hep("hep1", HepExp::new("eth0", &[], &["10.0.6.50"])),
        )
    };
    Test::new(
        "computed data: Istio and live migration on one endpoint",
        vec![
            mk("both", true, true),
            mk("istio only", true, false),
            mk("both again", true, true),
            mk("migration only", false, true),
        ],
    )
    .with_options(istio_opts())
}

fn all_cases() -> Vec<Test> {
    vec![
        case_empty(),
        case_istio_ambient(),
        case_istio_disabled(),
        case_live_migration_direct(),
        case_live_migration_selector(),
        case_computed_data_both_kinds(),
        case_host_endpoint_named_ports(),
        case_zero_prefix_overlap(),
        case_duplicate_ip_in_endpoint(),
        case_duplicate_members(),
        case_policy_rule_change(),
        case_profile_switch(),
        case_shared_ips(),
        case_endpoint_moves_node(),
        case_endpoint_ip_update(),
        case_dual_stack_endpoint(),
        case_profiles(),
        case_profile_deleted_under_endpoint(),
        case_profile_list_change(),
        case_policy_order(),
        case_tier_order(),
        case_policy_moves_tier(),
        case_policy_types(),
        case_assume_needed(),
        case_host_endpoints(),
        case_host_endpoint_ip_change(),
        case_network_sets(),
        case_netset_deleted_under_policy(),
        case_namespaced_netset(),
        case_netset_overlaps(),
        case_policy_namespace_selector(),
        case_named_ports(),
        case_namespaces(),
        case_rule_conversion(),
        case_rule_ids_stable(),
        case_validation(),
        case_passthru(),
        case_mixed(),
    ]
}

macro_rules! fv_tests {
    ($($name:ident => $case:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let r = assert_passes(&$case());
                eprintln!("{}: {} runs, {} messages", stringify!($name), r.runs, r.messages);
            }
        )*
    };
}

fv_tests! {
    istio_ambient => case_istio_ambient,
    istio_disabled => case_istio_disabled,
    live_migration_direct => case_live_migration_direct,
    live_migration_selector => case_live_migration_selector,
    computed_data_both_kinds => case_computed_data_both_kinds,
    host_endpoint_named_ports => case_host_endpoint_named_ports,
    zero_prefix_overlap => case_zero_prefix_overlap,
    duplicate_ip_in_endpoint => case_duplicate_ip_in_endpoint,
    empty => case_empty,
    duplicate_members => case_duplicate_members,
    policy_rule_change => case_policy_rule_change,
    profile_switch => case_profile_switch,
    shared_ips => case_shared_ips,
    endpoint_moves_node => case_endpoint_moves_node,
    endpoint_ip_update => case_endpoint_ip_update,
    dual_stack_endpoint => case_dual_stack_endpoint,
    profiles => case_profiles,
    profile_deleted_under_endpoint => case_profile_deleted_under_endpoint,
    profile_list_change => case_profile_list_change,
    policy_order => case_policy_order,
    tier_order => case_tier_order,
    policy_moves_tier => case_policy_moves_tier,
    policy_types => case_policy_types,
    assume_needed => case_assume_needed,
    host_endpoints => case_host_endpoints,
    host_endpoint_ip_change => case_host_endpoint_ip_change,
    network_sets => case_network_sets,
    netset_deleted_under_policy => case_netset_deleted_under_policy,
    namespaced_netset => case_namespaced_netset,
    netset_overlaps => case_netset_overlaps,
    policy_namespace_selector => case_policy_namespace_selector,
    named_ports => case_named_ports,
    namespaces => case_namespaces,
    rule_conversion => case_rule_conversion,
    rule_ids_stable => case_rule_ids_stable,
    validation => case_validation,
    passthru => case_passthru,
    mixed => case_mixed,
}

/// `felix calc --stream` semantics (via the library) on every FV state:
/// each test's states, then one stream through every state of every test
/// in turn.  The view checks the ordering contract on every message; each
/// state's expectation must hold as well.
#[test]
fn calc_stream_on_every_fv_state() {
    let cases = all_cases();
    let mut everything = Vec::new();
    for t in &cases {
        calc_stream(&t.states).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        everything.extend(t.states.iter().cloned());
    }
    everything.push(State::empty());
    let lines = calc_stream(&everything).unwrap_or_else(|e| panic!("all states: {e}"));
    assert_eq!(lines.len(), everything.len());
    // The last state is empty: nothing may be left behind.
    let last = &lines[lines.len() - 1];
    for field in [
        "ipSets",
        "policies",
        "profiles",
        "workloadEndpoints",
        "hostEndpoints",
    ] {
        assert!(
            last[field]
                .as_array()
                .map(|a| a.is_empty())
                .unwrap_or_else(|| last[field].as_object().is_some_and(|o| o.is_empty())),
            "leaked {field}: {}",
            last[field]
        );
    }
}

/// Rule IDs: present, distinct within a policy.
#[test]
fn rule_ids_present_and_distinct() {
    let t = case_rule_conversion();
    let lines = calc_stream(&t.states).unwrap();
    let pol = &lines[0]["policies"][0]["policy"];
    let ids: Vec<&str> = pol["inboundRules"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pol["outboundRules"].as_array().unwrap())
        .map(|r| r["ruleId"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids.len(), 9);
    let distinct: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "rule IDs not distinct: {ids:?}");
    assert!(ids.iter().all(|i| i.len() == 16), "rule IDs: {ids:?}");
}
