//! [`DropNames`]: what a drop report's numbers mean. The interpreter reports a policy handle
//! and a record index (a deny rule), or an endpoint list's record (a tier's end, the list's
//! end); the writer, which chose those numbers, records here who owns each handle, where each
//! rule's records start, which tier each tier-end record closes, and which interface each
//! policy slot serves. The drop reader resolves a report with [`DropNames::resolve`].
//!
//! # Invariants
//! * A rule is named by the proto rule it was compiled from, counting every rule of the
//!   policy (also those left out of one IP version's stream), as the *tables renderer and
//!   `felix explain` count them
//!   (`a_deny_record_names_its_source_rule_in_either_ip_version_stream`).
//! * Names follow the writer: a rewrite replaces the spans of its handle, a removed policy or
//!   list is forgotten (`names_follow_rewrites_and_removals`).

use std::collections::HashMap;
use std::sync::Arc;

use felix_bpf::attach::Mechanism;
use felix_bpf::drops::{DropEvent, DropWhy};
use felix_bpf::policy::EndpointKey;
use felix_proto::PolicyId;
use parking_lot::RwLock;

use super::writer::PolicyDir;

/// Who a handle's rules belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A policy.
    Policy(PolicyId),
    /// A profile, by name.
    Profile(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HandleNames {
    owner: Owner,
    dir: PolicyDir,
    /// Per IP version: `(first record, source rule)` of each rule in the stream, in order.
    spans: [Vec<(u32, usize)>; 2],
}

/// A report, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Rule `rule` (its position among the owner's rules of `dir`) denied.
    Rule {
        /// The policy or profile.
        owner: Owner,
        /// Which of its rule lists.
        dir: PolicyDir,
        /// The rule, when the record is one this writer wrote.
        rule: Option<usize>,
    },
    /// A tier's end denied.
    TierEnd {
        /// The tier's name, when the list is one this writer wrote.
        tier: Option<String>,
    },
    /// The end of the endpoint's list (no policy or profile decided).
    ListEnd,
    /// A policy not (yet) written, or no list for the endpoint: fail closed.
    Missing {
        /// The policy or profile the list referred to, when known.
        owner: Option<Owner>,
    },
    /// A broken list or the interpreter's step budget: fail closed.
    Broken,
    /// A handle this run does not know (a previous run's records still walked).
    UnknownHandle(u32),
}

/// The interface a report came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceName {
    /// Its name.
    pub name: String,
    /// Its attach mechanism (whose endpoint lists it walks).
    pub mech: Mechanism,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct DropNames {
    handles: HashMap<u32, HandleNames>,
    /// Per endpoint list: `(record index, tier name)` of each tier-end record.
    lists: HashMap<(Mechanism, EndpointKey), Vec<(u32, String)>>,
    ifaces: HashMap<u32, IfaceName>,
}

/// [`DropNames`] shared by the writer (one driver life) and the drop reader.
#[derive(Debug, Clone, Default)]
pub struct SharedDropNames(Arc<RwLock<DropNames>>);

impl SharedDropNames {
    /// Empty names.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything (a new writer: its handle numbers start again).
    pub fn clear(&self) {
        *self.0.write() = DropNames::default();
    }

    /// Names a newly allocated `handle` (no rules written yet).
    pub fn add_handle(&self, handle: u32, owner: Owner, dir: PolicyDir) {
        self.0.write().handles.insert(
            handle,
            HandleNames {
                owner,
                dir,
                spans: [Vec::new(), Vec::new()],
            },
        );
    }

    /// Records where the rules written for `handle` start (per IP version; empty: none
    /// written).
    pub fn set_spans(&self, handle: u32, spans: [Vec<(u32, usize)>; 2]) {
        if let Some(h) = self.0.write().handles.get_mut(&handle) {
            h.spans = spans;
        }
    }

    /// Forgets `handle`.
    pub fn remove_handle(&self, handle: u32) {
        self.0.write().handles.remove(&handle);
    }

    /// Records the tier-end records of an endpoint list.
    pub fn set_list(&self, mech: Mechanism, key: EndpointKey, tier_ends: Vec<(u32, String)>) {
        self.0.write().lists.insert((mech, key), tier_ends);
    }

    /// Forgets an endpoint list.
    pub fn remove_list(&self, mech: Mechanism, key: EndpointKey) {
        self.0.write().lists.remove(&(mech, key));
    }

    /// Records the interface whose hooks run `ifindex`'s reports.
    pub fn set_iface(&self, ifindex: u32, name: &str, mech: Mechanism) {
        self.0.write().ifaces.insert(
            ifindex,
            IfaceName {
                name: name.to_string(),
                mech,
            },
        );
    }

    /// Forgets an interface.
    pub fn remove_iface(&self, ifindex: u32) {
        self.0.write().ifaces.remove(&ifindex);
    }

    /// The interface of a report and what denied it.
    pub fn resolve(&self, e: &DropEvent) -> (Option<IfaceName>, Resolved) {
        self.0.read().resolve(e)
    }
}

impl DropNames {
    fn owner_of(&self, handle: u32) -> Option<&HandleNames> {
        self.handles.get(&handle)
    }

    fn resolve(&self, e: &DropEvent) -> (Option<IfaceName>, Resolved) {
        let iface = self.ifaces.get(&e.ifindex).cloned();
        let resolved = match e.why {
            DropWhy::Rule => match self.owner_of(e.handle) {
                Some(h) => {
                    let fam = usize::from(e.ip_ver == 6);
                    let rule = h.spans[fam]
                        .iter()
                        .take_while(|(start, _)| *start <= e.index)
                        .last()
                        .map(|(_, src)| *src);
                    Resolved::Rule {
                        owner: h.owner.clone(),
                        dir: h.dir,
                        rule,
                    }
                }
                None => Resolved::UnknownHandle(e.handle),
            },
            DropWhy::TierEnd => {
                let key = EndpointKey {
                    slot: e.slot,
                    dir: e.list,
                };
                let tier = iface
                    .as_ref()
                    .and_then(|i| self.lists.get(&(i.mech, key)))
                    .and_then(|ends| ends.iter().find(|(at, _)| *at == e.index))
                    .map(|(_, name)| name.clone());
                Resolved::TierEnd { tier }
            }
            DropWhy::ListEnd => Resolved::ListEnd,
            DropWhy::Missing => Resolved::Missing {
                owner: (e.handle != 0)
                    .then(|| self.owner_of(e.handle).map(|h| h.owner.clone()))
                    .flatten(),
            },
            DropWhy::Broken => Resolved::Broken,
        };
        (iface, resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(why: DropWhy, handle: u32, index: u32, ip_ver: u8) -> DropEvent {
        DropEvent {
            ts_ns: 0,
            ifindex: 7,
            hook_flags: 0,
            slot: 3,
            list: 0,
            why,
            handle,
            index,
            src: [0; 16],
            dst: [0; 16],
            sport: 0,
            dport: 0,
            ip_ver,
            proto: 6,
            icmp_type: 0,
            icmp_code: 0,
            st_flags: 0,
        }
    }

    fn pid(name: &str) -> PolicyId {
        PolicyId {
            name: name.into(),
            kind: "GlobalNetworkPolicy".into(),
            ..PolicyId::default()
        }
    }

    #[test]
    fn a_deny_record_names_its_source_rule_in_either_ip_version_stream() {
        let names = SharedDropNames::new();
        // Rule 1 is IPv6-only: the IPv4 stream has rules 0 and 2, the IPv6 stream 0, 1, 2.
        names.add_handle(5, Owner::Policy(pid("p")), PolicyDir::Ingress);
        names.set_spans(5, [vec![(0, 0), (3, 2)], vec![(0, 0), (3, 1), (4, 2)]]);
        let rule = |index, ip_ver| match names.resolve(&event(DropWhy::Rule, 5, index, ip_ver)).1 {
            Resolved::Rule { rule, .. } => rule,
            other => panic!("{other:?}"),
        };
        assert_eq!(rule(2, 4), Some(0));
        assert_eq!(rule(3, 4), Some(2));
        assert_eq!(rule(3, 6), Some(1));
        assert_eq!(rule(9, 6), Some(2));
        assert_eq!(
            names.resolve(&event(DropWhy::Rule, 6, 0, 4)).1,
            Resolved::UnknownHandle(6)
        );
    }

    #[test]
    fn names_follow_rewrites_and_removals() {
        let names = SharedDropNames::new();
        names.set_iface(7, "cali1", Mechanism::Tcx);
        let key = EndpointKey { slot: 3, dir: 0 };
        names.set_list(Mechanism::Tcx, key, vec![(2, "security".into())]);
        let tier = || match names.resolve(&event(DropWhy::TierEnd, 0, 2, 4)) {
            (Some(i), Resolved::TierEnd { tier }) if i.name == "cali1" => tier,
            other => panic!("{other:?}"),
        };
        assert_eq!(tier(), Some("security".to_string()));
        names.set_list(Mechanism::Tcx, key, vec![(2, "default".into())]);
        assert_eq!(tier(), Some("default".to_string()));
        names.remove_list(Mechanism::Tcx, key);
        assert_eq!(tier(), None);

        names.add_handle(5, Owner::Profile("kns.shop".into()), PolicyDir::Egress);
        names.set_spans(5, [vec![(0, 0)], vec![]]);
        assert_eq!(
            names.resolve(&event(DropWhy::Missing, 5, 0, 4)).1,
            Resolved::Missing {
                owner: Some(Owner::Profile("kns.shop".into()))
            }
        );
        names.remove_handle(5);
        assert_eq!(
            names.resolve(&event(DropWhy::Missing, 5, 0, 4)).1,
            Resolved::Missing { owner: None }
        );
        names.clear();
        assert_eq!(names.resolve(&event(DropWhy::ListEnd, 0, 0, 4)).0, None);
    }
}
