//! One rule against one flow, evaluated on the rule as the dataplane compiles
//! it: the rule goes through the eBPF policy compiler (`compile_one`, which
//! carries the `*tables` renderer's semantics: nets of the other version,
//! negations, protocol and ICMP combinations, unrenderable rules as deny) and
//! the resulting record stream is run by the interpreter's Rust twin
//! (`felix_bpf::policy::eval_stream`), with IP-set membership answered from
//! the calc graph's sets. Nothing here re-reads the datastore.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use felix_bpf::policy::{
    assemble_policy, eval_stream, mask_addr, IpSetKey, PacketState, RuleAction, T_ALLOW,
};
use felix_proto::Rule;

use crate::dataplane::bpf::policy::members::{addr16, member_key};
use crate::dataplane::bpf::policy::{compile_one, SetIdAllocator};
use crate::dataplane::IpVersion;

use super::flow::{has_ports, Flow};

/// What one rule does to the flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOutcome {
    /// The rule is not rendered for the flow's IP version.
    Absent,
    /// Rendered, and the flow does not match it.
    NoMatch,
    /// The flow matches; the rule's action.
    Match(RuleAction),
    /// The rule cannot be rendered: the dataplane denies in its place.
    Unrenderable(String),
}

/// The calc graph's IP sets, keyed the way compiled rules name them.
#[derive(Debug, Default)]
pub struct Sets {
    ids: SetIdAllocator,
    members: HashMap<u64, Vec<IpSetKey>>,
}

impl Sets {
    /// Indexes the view's sets (ID -> (type, members)). Malformed members are
    /// left out, as the dataplane leaves them out.
    pub fn new(sets: &BTreeMap<String, (i32, BTreeSet<String>)>) -> Sets {
        let mut ids = SetIdAllocator::new();
        let mut members = HashMap::new();
        for (name, (_, ms)) in sets {
            let id = ids.get_or_alloc(name);
            let keys: Vec<IpSetKey> = ms.iter().filter_map(|m| member_key(id, m)).collect();
            members.insert(id, keys);
        }
        Sets { ids, members }
    }

    fn contains(&self, id: u64, addr: &[u8; 16], proto: u8, port: u16) -> bool {
        self.members.get(&id).is_some_and(|keys| {
            keys.iter().any(|k| match k.port {
                Some(pp) => k.addr == *addr && pp == (proto, port),
                None => mask_addr(*addr, k.addr_prefix) == mask_addr(k.addr, k.addr_prefix),
            })
        })
    }
}

/// The interpreter's packet facts for a flow.
pub fn packet_state(f: &Flow) -> PacketState {
    let mut flags = 0;
    if has_ports(f.proto) {
        flags |= PacketState::PORTS;
    }
    if f.icmp.is_some() {
        flags |= PacketState::ICMP;
    }
    let (icmp_type, icmp_code) = f.icmp.unwrap_or((0, 0));
    PacketState {
        src: addr16(f.src).0,
        dst: addr16(f.dst).0,
        sport: f.src_port,
        dport: f.dst_port,
        ip_ver: if f.src.is_ipv6() { 6 } else { 4 },
        proto: f.proto,
        icmp_type,
        icmp_code,
        flags,
    }
}

/// Evaluates `rule` for `flow` (see the module doc).
pub fn eval_rule(rule: &Rule, flow: &Flow, sets: &mut Sets) -> RuleOutcome {
    let ipv = if flow.src.is_ipv6() {
        IpVersion::V6
    } else {
        IpVersion::V4
    };
    let mut ir = match compile_one(rule, ipv, &mut sets.ids) {
        Ok(None) => return RuleOutcome::Absent,
        Ok(Some(ir)) => ir,
        Err(reason) => return RuleOutcome::Unrenderable(reason),
    };
    let action = ir.action;
    // Whether it matches: the same rule with a terminal action, run alone.
    ir.action = RuleAction::Allow;
    let Ok(ops) = assemble_policy(std::slice::from_ref(&ir)) else {
        return RuleOutcome::Unrenderable("rule too long for the interpreter".into());
    };
    let st = packet_state(flow);
    let member = |id: u64, a: &[u8; 16], p: u8, port: u16| sets.contains(id, a, p, port);
    match eval_stream(&ops, &st, &member) {
        Ok(T_ALLOW) => RuleOutcome::Match(action),
        Ok(_) => RuleOutcome::NoMatch,
        Err(e) => RuleOutcome::Unrenderable(e.to_string()),
    }
}
