//! Unit tests of the writer over a fake store, and the differential test of the compiled
//! records (evaluated by a Rust model of the interpreter) against the reference semantics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use felix_bpf::attach::Mechanism;
use felix_bpf::ops::BpfError;
use felix_bpf::policy::*;
use felix_proto::{
    IpSetDeltaUpdate, IpSetRemove, IpSetUpdate, Policy, PolicyId, Profile, Rule, TierInfo,
    WorkloadEndpoint,
};

use super::members::addr16;
use super::reference::*;
use super::*;

/// The maps in memory, with a log of every write.
#[derive(Debug, Default)]
pub struct FakeStore {
    pub records: BTreeMap<u32, Op>,
    pub idx: BTreeMap<u32, PolicyIndex>,
    pub eps: BTreeMap<(Mechanism, EndpointKey), EndpointList>,
    pub members: BTreeSet<IpSetKey>,
    pub writes: Vec<String>,
    pub fail_next: bool,
}

impl FakeStore {
    fn check(&mut self, what: String) -> Result<(), BpfError> {
        if std::mem::take(&mut self.fail_next) {
            return Err(BpfError::Unexpected {
                op: "map_update",
                what,
                reason: "fake failure".into(),
            });
        }
        self.writes.push(what);
        Ok(())
    }
}

impl PolicyStore for FakeStore {
    fn write_records(&mut self, base: u32, records: &[Op]) -> Result<(), BpfError> {
        self.check(format!("records {base}+{}", records.len()))?;
        for (i, r) in records.iter().enumerate() {
            self.records.insert(base + i as u32, *r);
        }
        Ok(())
    }
    fn set_policy(&mut self, handle: u32, idx: &PolicyIndex) -> Result<(), BpfError> {
        self.check(format!("index {handle}"))?;
        self.idx.insert(handle, *idx);
        Ok(())
    }
    fn delete_policy(&mut self, handle: u32) -> Result<(), BpfError> {
        self.check(format!("delete index {handle}"))?;
        self.idx.remove(&handle);
        Ok(())
    }
    fn set_endpoint(
        &mut self,
        mech: Mechanism,
        key: EndpointKey,
        list: &EndpointList,
    ) -> Result<(), BpfError> {
        self.check(format!("endpoint {}", key.slot))?;
        self.eps.insert((mech, key), *list);
        Ok(())
    }
    fn delete_endpoint(&mut self, mech: Mechanism, key: EndpointKey) -> Result<(), BpfError> {
        self.check(format!("delete endpoint {}", key.slot))?;
        self.eps.remove(&(mech, key));
        Ok(())
    }
    fn add_member(&mut self, key: &IpSetKey) -> Result<(), BpfError> {
        self.check("add member".into())?;
        self.members.insert(*key);
        Ok(())
    }
    fn delete_member(&mut self, key: &IpSetKey) -> Result<(), BpfError> {
        self.check("delete member".into())?;
        self.members.remove(key);
        Ok(())
    }
}

pub fn state_of(p: &RefPkt) -> PacketState {
    let (src, _) = addr16(p.src);
    let (dst, _) = addr16(p.dst);
    let v6 = p.v6();
    let mut flags = 0;
    if matches!(p.proto, 6 | 17 | 132) {
        flags |= PacketState::PORTS;
    }
    if p.proto == if v6 { 58 } else { 1 } {
        flags |= PacketState::ICMP;
    }
    PacketState {
        src,
        dst,
        sport: if flags & PacketState::PORTS != 0 {
            p.sport
        } else {
            0
        },
        dport: if flags & PacketState::PORTS != 0 {
            p.dport
        } else {
            0
        },
        ip_ver: if v6 { 6 } else { 4 },
        proto: p.proto,
        icmp_type: if flags & PacketState::ICMP != 0 {
            p.icmp.0
        } else {
            0
        },
        icmp_code: if flags & PacketState::ICMP != 0 {
            p.icmp.1
        } else {
            0
        },
        flags,
    }
}

/// The interpreter, modelled in Rust over the fake maps.
pub fn model_allows(s: &FakeStore, mech: Mechanism, key: EndpointKey, st: &PacketState) -> bool {
    let member = |id: u64, addr: &[u8; 16], proto: u8, port: u16| {
        s.members.iter().any(|k| {
            k.set_id == id
                && match k.port {
                    Some((pr, po)) => k.addr == *addr && pr == proto && po == port,
                    None => mask_addr(*addr, k.addr_prefix) == mask_addr(k.addr, k.addr_prefix),
                }
        })
    };
    let Some(ep) = s.eps.get(&(mech, key)) else {
        return false;
    };
    let fam = usize::from(st.ip_ver == 6);
    let mut cur = 0u32;
    while cur < ep.len {
        let Some(op) = s.records.get(&(ep.base + cur)) else {
            return false;
        };
        match op.code {
            OP_EP_REF => {
                let Some(idx) = s.idx.get(&op.handle()) else {
                    return false;
                };
                let stream: Vec<Op> = (0..idx.len[fam])
                    .filter_map(|i| s.records.get(&(idx.base[fam] + i)).copied())
                    .collect();
                match eval_stream(&stream, st, &member).unwrap_or(T_DENY) {
                    T_ALLOW => return true,
                    T_PASS => cur = op.t,
                    T_NEXT => cur += 1,
                    _ => return false,
                }
            }
            OP_EP_TIER_END if op.arg == ACT_PASS => cur += 1,
            _ => return false,
        }
    }
    false
}

fn pid(name: &str) -> PolicyId {
    PolicyId {
        name: name.into(),
        kind: "GlobalNetworkPolicy".into(),
        ..PolicyId::default()
    }
}

fn tier(name: &str, pols: &[&str], default_action: &str) -> TierInfo {
    TierInfo {
        name: name.into(),
        ingress_policies: pols.iter().map(|p| pid(p)).collect(),
        egress_policies: pols.iter().map(|p| pid(p)).collect(),
        default_action: default_action.into(),
    }
}

fn rule(action: &str) -> Rule {
    Rule {
        action: action.into(),
        ..Rule::default()
    }
}

fn policy(ingress: Vec<Rule>) -> Policy {
    Policy {
        inbound_rules: ingress,
        ..Policy::default()
    }
}

fn pkt() -> RefPkt {
    RefPkt {
        src: IpAddr::from([10, 1, 2, 3]),
        dst: IpAddr::from([10, 2, 0, 1]),
        proto: 6,
        sport: 40000,
        dport: 80,
        icmp: (0, 0),
    }
}

const MECH: Mechanism = Mechanism::Tcx;

fn ep_key(slot: u32) -> EndpointKey {
    EndpointKey {
        slot,
        dir: POL_DIR_INGRESS,
    }
}

#[test]
fn a_policy_change_is_one_record_write_and_one_index_swap_that_every_sharing_endpoint_follows() {
    let mut w = PolicyWriter::new(FakeStore::default());
    w.apply_policy(&pid("p"), &policy(vec![rule("allow")]))
        .expect("p");
    for slot in [1, 2] {
        w.set_endpoint(
            MECH,
            slot,
            PolicyDir::Ingress,
            &[tier("t", &["p"], "Deny")],
            &[],
        )
        .expect("ep");
    }
    let st = state_of(&pkt());
    assert!(model_allows(w.store(), MECH, ep_key(1), &st));
    assert!(model_allows(w.store(), MECH, ep_key(2), &st));
    let eps_before = w.store().eps.clone();
    w.store_mut().writes.clear();
    w.apply_policy(&pid("p"), &policy(vec![rule("deny")]))
        .expect("p");
    let h = w.handle("gnp/p", PolicyDir::Ingress).expect("handle");
    assert_eq!(w.store().writes.len(), 2, "{:?}", w.store().writes);
    assert!(w.store().writes[0].starts_with("records"));
    assert_eq!(w.store().writes[1], format!("index {h}"));
    assert_eq!(w.store().eps, eps_before, "no endpoint list rewritten");
    assert!(!model_allows(w.store(), MECH, ep_key(1), &st));
    assert!(!model_allows(w.store(), MECH, ep_key(2), &st));
}

#[test]
fn an_unchanged_policy_or_endpoint_writes_nothing() {
    let mut w = PolicyWriter::new(FakeStore::default());
    let p = policy(vec![rule("allow")]);
    w.apply_policy(&pid("p"), &p).expect("p");
    let tiers = [tier("t", &["p"], "Deny")];
    w.set_endpoint(MECH, 1, PolicyDir::Ingress, &tiers, &[])
        .expect("ep");
    w.store_mut().writes.clear();
    w.apply_policy(&pid("p"), &p).expect("again");
    w.set_endpoint(MECH, 1, PolicyDir::Ingress, &tiers, &[])
        .expect("again");
    assert!(w.store().writes.is_empty(), "{:?}", w.store().writes);
}

#[test]
fn an_endpoint_change_is_one_list_write_and_one_swap() {
    let mut w = PolicyWriter::new(FakeStore::default());
    w.apply_policy(&pid("a"), &policy(vec![rule("deny")]))
        .expect("a");
    w.apply_policy(&pid("b"), &policy(vec![rule("allow")]))
        .expect("b");
    w.set_endpoint(
        MECH,
        1,
        PolicyDir::Ingress,
        &[tier("t", &["a"], "Deny")],
        &[],
    )
    .expect("ep");
    let st = state_of(&pkt());
    assert!(!model_allows(w.store(), MECH, ep_key(1), &st));
    let records_before = w.free_records();
    w.store_mut().writes.clear();
    w.set_endpoint(
        MECH,
        1,
        PolicyDir::Ingress,
        &[tier("t", &["b"], "Deny")],
        &[],
    )
    .expect("ep");
    let writes = &w.store().writes;
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes[0].starts_with("records ") && writes[0].ends_with("+3"),
        "{writes:?}"
    );
    assert_eq!(writes[1], "endpoint 1");
    assert!(model_allows(w.store(), MECH, ep_key(1), &st));
    assert_eq!(
        w.free_records(),
        records_before,
        "the old list's records freed"
    );
}

#[test]
fn a_full_ip_set_update_is_written_as_member_deltas() {
    let mut w = PolicyWriter::new(FakeStore::default());
    let up = |members: &[&str]| IpSetUpdate {
        id: "s:x".into(),
        members: members.iter().map(|m| (*m).to_string()).collect(),
        r#type: 0,
    };
    w.ipset_update(&up(&["10.0.0.1", "10.0.0.2", "10.1.0.0/16"]))
        .expect("set");
    assert_eq!(w.store().members.len(), 3);
    w.store_mut().writes.clear();
    w.ipset_update(&up(&["10.0.0.1", "10.0.0.3", "10.1.0.0/16"]))
        .expect("set");
    assert_eq!(
        w.store().writes,
        vec!["add member".to_string(), "delete member".into()]
    );
    w.store_mut().writes.clear();
    w.ipset_delta(&IpSetDeltaUpdate {
        id: "s:x".into(),
        added_members: vec!["10.9.9.9,tcp:80".into()],
        removed_members: vec!["10.0.0.1".into()],
    })
    .expect("delta");
    assert_eq!(
        w.store().writes,
        vec!["add member".to_string(), "delete member".into()]
    );
    let err = w
        .ipset_delta(&IpSetDeltaUpdate {
            id: "s:x".into(),
            added_members: vec!["bogus".into()],
            removed_members: vec![],
        })
        .expect_err("malformed");
    assert!(
        err.to_string().contains("s:x") && err.to_string().contains("bogus"),
        "{err}"
    );
    let id = w.set_id("s:x").expect("id");
    assert_eq!(id, super::setid::trial_hash("s:x", 0));
    w.ipset_remove(&IpSetRemove { id: "s:x".into() })
        .expect("remove");
    assert!(w.store().members.is_empty());
    assert_eq!(w.set_id("s:x"), None);
}

#[test]
fn a_failed_write_keeps_the_old_records_and_reports_the_operation() {
    let mut w = PolicyWriter::new(FakeStore::default());
    w.apply_policy(&pid("p"), &policy(vec![rule("allow")]))
        .expect("p");
    w.set_endpoint(
        MECH,
        1,
        PolicyDir::Ingress,
        &[tier("t", &["p"], "Deny")],
        &[],
    )
    .expect("ep");
    let free = w.free_records();
    w.store_mut().fail_next = true;
    let err = w
        .apply_policy(&pid("p"), &policy(vec![rule("deny")]))
        .expect_err("fails");
    assert!(
        matches!(
            err,
            PolicyWriteError::Bpf {
                op: "apply policy",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("gnp/p ingress"), "{err}");
    assert_eq!(w.free_records(), free, "the new range went back");
    assert!(model_allows(w.store(), MECH, ep_key(1), &state_of(&pkt())));
    // A retry writes it.
    w.apply_policy(&pid("p"), &policy(vec![rule("deny")]))
        .expect("retry");
    assert!(!model_allows(w.store(), MECH, ep_key(1), &state_of(&pkt())));
}

#[test]
fn the_record_space_running_out_is_a_typed_error_naming_the_policy() {
    let mut w = PolicyWriter::with_space(FakeStore::default(), 4);
    let rules: Vec<Rule> = (0..5).map(|_| rule("allow")).collect();
    let err = w
        .apply_policy(&pid("big"), &policy(rules))
        .expect_err("no room");
    assert!(
        matches!(err, PolicyWriteError::NoSpace { need: 10, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("gnp/big"), "{err}");
}

#[test]
fn handles_are_released_once_unreferenced_and_unwritten_and_staged_policies_never_written() {
    let mut w = PolicyWriter::new(FakeStore::default());
    let staged = PolicyId {
        kind: "StagedGlobalNetworkPolicy".into(),
        ..pid("s")
    };
    w.apply_policy(&staged, &policy(vec![rule("allow")]))
        .expect("staged");
    assert!(w.store().writes.is_empty());
    // Referenced before it is written: a handle without an index entry (deny until then).
    w.set_endpoint(
        MECH,
        1,
        PolicyDir::Ingress,
        &[tier("t", &["late"], "Deny")],
        &[],
    )
    .expect("ep");
    let h = w.handle("gnp/late", PolicyDir::Ingress).expect("handle");
    assert!(!model_allows(w.store(), MECH, ep_key(1), &state_of(&pkt())));
    w.apply_policy(&pid("late"), &policy(vec![rule("allow")]))
        .expect("late");
    assert!(model_allows(w.store(), MECH, ep_key(1), &state_of(&pkt())));
    w.remove_endpoint(MECH, 1, PolicyDir::Ingress)
        .expect("rm ep");
    assert!(
        w.handle("gnp/late", PolicyDir::Ingress).is_some(),
        "still written"
    );
    w.remove_policy(&pid("late")).expect("rm");
    assert_eq!(w.handle("gnp/late", PolicyDir::Ingress), None);
    assert!(!w.store().idx.contains_key(&h));
    assert_eq!(
        w.free_records(),
        u64::from(POL_OPS_SIZE),
        "every record freed"
    );
}

#[test]
fn a_workload_gets_its_egress_list_on_the_tc_ingress_slot() {
    let mut w = PolicyWriter::new(FakeStore::default());
    w.apply_policy(
        &pid("p"),
        &Policy {
            inbound_rules: vec![rule("deny")],
            outbound_rules: vec![rule("allow")],
            ..Policy::default()
        },
    )
    .expect("p");
    let wep = WorkloadEndpoint {
        tiers: vec![tier("t", &["p"], "Deny")],
        ..WorkloadEndpoint::default()
    };
    w.set_workload(MECH, 5, 6, &wep).expect("wep");
    let st = state_of(&pkt());
    let egress = EndpointKey {
        slot: 5,
        dir: POL_DIR_EGRESS,
    };
    let ingress = EndpointKey {
        slot: 6,
        dir: POL_DIR_INGRESS,
    };
    assert!(model_allows(w.store(), MECH, egress, &st));
    assert!(!model_allows(w.store(), MECH, ingress, &st));
}

/// Random tiers, policies, profiles, sets and packets: the records the writer produces,
/// evaluated as the interpreter walks them, agree with the reference semantics.
#[test]
fn compiled_records_agree_with_the_reference_semantics() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for round in 0..150 {
        let mut w = PolicyWriter::new(FakeStore::default());
        let sets = gen_sets(&mut g);
        for (id, ms) in &sets {
            w.ipset_update(&IpSetUpdate {
                id: id.clone(),
                members: ms.clone(),
                r#type: 0,
            })
            .expect("set");
        }
        let mut case = gen_case(&mut g, round);
        case.write(&mut w, 1);
        let mut sets = sets;
        for phase in 0..2 {
            for _ in 0..20 {
                let p = gen_pkt(&mut g);
                let want = case.reference(&p, &sets);
                let got = model_allows(w.store(), MECH, ep_key(1), &state_of(&p));
                assert_eq!(got, want, "round {round} phase {phase}: {p:?}\n{case:#?}");
                checked += 1;
            }
            // Incremental changes: one policy rewritten, the sets replaced (as deltas).
            sets = case.mutate(&mut g, &mut w);
        }
    }
    assert_eq!(checked, 150 * 40);
}

/// One generated endpoint: tiers over generated policies, profiles.
#[derive(Debug)]
pub struct Case {
    pub tiers: Vec<TierInfo>,
    pub profiles: Vec<String>,
    pub policies: BTreeMap<String, Vec<Rule>>,
    pub profile_rules: BTreeMap<String, Vec<Rule>>,
}

pub fn gen_case(g: &mut Gen, round: u32) -> Case {
    let mut policies = BTreeMap::new();
    let mut tiers = Vec::new();
    for t in 0..g.below(3) {
        let mut names = Vec::new();
        for i in 0..g.below(3) {
            let name = format!("r{round}t{t}p{i}");
            let rules = (0..g.below(4)).map(|_| gen_rule(g)).collect();
            policies.insert(format!("gnp/{name}"), rules);
            names.push(name);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let action = if g.chance(30) { "Pass" } else { "Deny" };
        tiers.push(tier(&format!("t{t}"), &refs, action));
    }
    let mut profile_rules = BTreeMap::new();
    let mut profiles = Vec::new();
    for i in 0..g.below(3) {
        let name = format!("kns.r{round}-{i}");
        profile_rules.insert(name.clone(), (0..g.below(3)).map(|_| gen_rule(g)).collect());
        profiles.push(name);
    }
    Case {
        tiers,
        profiles,
        policies,
        profile_rules,
    }
}

impl Case {
    pub fn write<S: PolicyStore>(&self, w: &mut PolicyWriter<S>, slot: u32) {
        for (name, rules) in &self.policies {
            let id = pid(name.trim_start_matches("gnp/"));
            w.apply_policy(&id, &policy(rules.clone())).expect("policy");
        }
        for (name, rules) in &self.profile_rules {
            let p = Profile {
                inbound_rules: rules.clone(),
                ..Profile::default()
            };
            w.apply_profile(name, &p).expect("profile");
        }
        w.set_endpoint(MECH, slot, PolicyDir::Ingress, &self.tiers, &self.profiles)
            .expect("endpoint");
    }

    /// Rewrites one policy (if any) with new random rules and replaces every set with new
    /// random members, through `w`; returns the new sets.
    pub fn mutate<S: PolicyStore>(&mut self, g: &mut Gen, w: &mut PolicyWriter<S>) -> RefSets {
        let names: Vec<String> = self.policies.keys().cloned().collect();
        if !names.is_empty() {
            let name = names[g.below(names.len() as u64) as usize].clone();
            let rules: Vec<Rule> = (0..g.below(4)).map(|_| gen_rule(g)).collect();
            let id = pid(name.trim_start_matches("gnp/"));
            w.apply_policy(&id, &policy(rules.clone()))
                .expect("rewrite");
            self.policies.insert(name, rules);
        }
        let sets = gen_sets(g);
        for (id, ms) in &sets {
            w.ipset_update(&IpSetUpdate {
                id: id.clone(),
                members: ms.clone(),
                r#type: 0,
            })
            .expect("set");
        }
        sets
    }

    pub fn reference(&self, p: &RefPkt, sets: &RefSets) -> bool {
        endpoint_allows(
            &self.tiers,
            &self.profiles,
            &self.policies,
            &self.profile_rules,
            true,
            p,
            sets,
        )
    }
}

#[test]
fn a_restarted_writer_never_writes_over_the_previous_runs_records() {
    let mut g = Gen(77);
    let case = gen_case(&mut g, 1);
    let mut a = PolicyWriter::with_space(FakeStore::default(), 4096);
    case.write(&mut a, 1);
    a.apply_policy(&pid("gone"), &policy(vec![rule("allow")]))
        .expect("gone");
    a.set_endpoint(
        MECH,
        9,
        PolicyDir::Ingress,
        &[tier("t", &["gone"], "Deny")],
        &[],
    )
    .expect("ep 9");
    let store = std::mem::take(a.store_mut());
    let existing = Existing {
        policies: store.idx.iter().map(|(h, i)| (*h, *i)).collect(),
        endpoints: store.eps.iter().map(|((m, k), l)| (*m, *k, *l)).collect(),
        members: store.members.iter().copied().collect(),
    };
    let old_records: BTreeSet<u32> = existing
        .policies
        .iter()
        .flat_map(|(_, i)| (0..2).flat_map(move |f| i.base[f]..i.base[f] + i.len[f]))
        .chain(
            existing
                .endpoints
                .iter()
                .flat_map(|(_, _, l)| l.base..l.base + l.len),
        )
        .collect();
    let mut b = PolicyWriter::with_space(store, 4096);
    b.adopt(&existing);
    b.store_mut().writes.clear();
    case.write(&mut b, 1);
    for w in &b.store().writes {
        if let Some(rest) = w.strip_prefix("records ") {
            let (base, len) = rest.split_once('+').expect("base+len");
            let base: u32 = base.parse().expect("base");
            let len: u32 = len.parse().expect("len");
            assert!(
                (base..base + len).all(|i| !old_records.contains(&i)),
                "{w} overlaps the previous run's records"
            );
        }
    }
    // The previous run's handles are not reused before the sweep.
    for (h, _) in &existing.policies {
        assert!(b.store().idx.contains_key(h));
    }
    for _ in 0..20 {
        let p = gen_pkt(&mut g);
        let want = case.reference(&p, &BTreeMap::new());
        assert_eq!(
            model_allows(b.store(), MECH, ep_key(1), &state_of(&p)),
            want
        );
    }
    b.sweep().expect("sweep");
    assert!(
        !b.store().eps.contains_key(&(MECH, ep_key(9))),
        "unclaimed endpoint removed"
    );
    let live: u64 = b
        .store()
        .idx
        .values()
        .map(|i| u64::from(i.len[0] + i.len[1]))
        .chain(b.store().eps.values().map(|l| u64::from(l.len)))
        .sum();
    assert_eq!(b.free_records() + live, 4096, "everything else freed");
}

#[test]
fn a_restarted_writer_deletes_members_removed_while_it_was_down() {
    let mut a = PolicyWriter::new(FakeStore::default());
    let up = |id: &str, members: &[&str]| IpSetUpdate {
        id: id.into(),
        members: members.iter().map(|m| (*m).to_string()).collect(),
        r#type: 0,
    };
    a.ipset_update(&up("s:kept", &["10.0.0.1", "10.0.0.2"]))
        .expect("set");
    a.ipset_update(&up("s:gone", &["10.9.0.0/16"]))
        .expect("set");
    let store = std::mem::take(a.store_mut());
    let existing = Existing {
        members: store.members.iter().copied().collect(),
        ..Existing::default()
    };
    let mut b = PolicyWriter::new(store);
    b.adopt(&existing);
    b.store_mut().writes.clear();
    b.ipset_update(&up("s:kept", &["10.0.0.1", "10.0.0.3"]))
        .expect("set");
    assert_eq!(
        b.store().writes,
        vec!["add member".to_string(), "delete member".into()],
        "only the delta against what the previous run wrote"
    );
    b.sweep().expect("sweep");
    assert_eq!(b.store().members.len(), 2, "the unsent set's member swept");
}
