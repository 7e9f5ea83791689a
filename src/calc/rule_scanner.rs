//! The rule scanner: converts the rules of active policies and profiles into
//! dataplane rules and tracks which IP sets those rules need.
//!
//! Selectors and named ports in rules become IP-set IDs; the sets' contents
//! are computed by the shared [`IpSetIndex`](super::labelindex::IpSetIndex).
//!
//! Invariants:
//! * An IP set is active while at least one active policy or profile
//!   references it: it is reported active on the first reference and
//!   inactive when the last one goes, with add/remove keyed identically
//!   (rules ID, set UID) in both directions.
//! * IP-set UIDs equal upstream's: a selector set's UID is the selector's
//!   unique ID; a named-port set's is `n:` + hash of
//!   `<selector ID>,<protocol>,<port name>`; service sets use `svc:` /
//!   `svcnoport:`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use felix_proto as pb;

use super::active_rules::PolicyRef;
use super::ids::make_unique_id;
use super::labelindex::{IpSetDef, NpProtocol};
use crate::hash::{FastMap as HashMap, FastSet as HashSet};
use crate::model::{self, Port, Protocol, Rule};
use crate::selector::{self, Selector};

/// Identity of a rules owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RulesId {
    /// Shared: each of a policy's IP sets names it as a user.
    Policy(PolicyRef),
    /// A profile, by name.
    Profile(String),
}

/// The kind of an IP set, as the proto `IPSetType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetType {
    /// `IP`: single addresses.
    Ip,
    /// `IP_AND_PORT`: (address, protocol, port) entries of a named port.
    IpAndPort,
    /// `NET`: addresses and CIDRs (selector and service sets).
    Net,
}

/// An IP set a rule needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSetData {
    /// The set's unique ID (derived from its definition).
    pub uid: String,
    /// Kind of entries the set holds.
    pub set_type: SetType,
    /// `None` for a service set (its members come from the service index,
    /// which this project does not have yet: such sets stay empty).
    pub def: Option<IpSetDef>,
}

/// What the scanner asks of its downstream when IP sets change.
#[derive(Clone, Debug, PartialEq)]
pub enum ScanEvent {
    /// A rule started needing the set.
    SetActive(IpSetData),
    /// No rule needs the set any more.
    SetInactive(IpSetData),
}

/// See the module docs.
#[derive(Default)]
pub struct RuleScanner {
    sets_by_uid: HashMap<String, IpSetData>,
    uids_by_rules: HashMap<RulesId, BTreeSet<String>>,
    /// Users of each active set; only emptiness is read, so unordered (an
    /// ordered set cost a walk of key comparisons per insert, with
    /// thousands of policies sharing one set).
    rules_by_uid: HashMap<String, HashSet<RulesId>>,
    selectors: SelectorCache,
}

/// Most rules share their selector texts with many others (in the
/// upstream benchmark's first workload, 50,000 rules have 29 texts).
const SELECTOR_CACHE_MAX: usize = 4096;

/// Parsed selectors by source text.  A hit skips the parse and, since the
/// parsed [`Selector`] is shared, the SHA-224 of its unique ID as well.
///
/// Invariant: the cache changes no output: parsing is a pure function of
/// the text, so a hit returns what a parse would.  It is bounded: when it
/// holds [`SELECTOR_CACHE_MAX`] texts it is emptied and refilled.
#[derive(Default)]
struct SelectorCache {
    parsed: HashMap<Box<str>, Selector>,
}

impl SelectorCache {
    /// The selector `text` parses to; `None` if it does not parse (only
    /// successes are cached).
    fn parsed(&mut self, text: &str) -> Option<Selector> {
        if let Some(sel) = self.parsed.get(text) {
            return Some(sel.clone());
        }
        let sel = selector::parse(text).ok()?;
        if self.parsed.len() >= SELECTOR_CACHE_MAX {
            self.parsed.clear();
        }
        self.parsed.insert(text.into(), sel.clone());
        Some(sel)
    }

    /// A rule's selector: `None` for an empty text.  Validation upstream
    /// of the graph guarantees it parses; a failure here would be a bug,
    /// so it falls back to a selector that matches nothing rather than one
    /// that matches everything (fail closed).
    fn rule_selector(&mut self, text: &str) -> Option<Selector> {
        if text.is_empty() {
            return None;
        }
        Some(self.parsed(text).unwrap_or_else(|| {
            tracing::error!(selector = text, "unparseable selector reached the calc graph");
            selector::parse(
                "has(projectcalico.org/invalid-selector) && !has(projectcalico.org/invalid-selector)",
            )
            .unwrap_or_else(|_| Selector::all())
        }))
    }
}

impl RuleScanner {
    /// A scanner with no rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of active IP sets.
    pub fn num_active_sets(&self) -> usize {
        self.sets_by_uid.len()
    }

    /// A policy became active (or changed while active).  Returns it
    /// converted for the dataplane, without rule IDs (the sequencer fills
    /// them in at flush).
    pub fn policy_active(
        &mut self,
        key: &PolicyRef,
        policy: &model::Policy,
        events: &mut Vec<ScanEvent>,
    ) -> pb::Policy {
        // The canonical form, as `selector::normalize` gives it.
        let original_selector = match self.selectors.parsed(policy.selector.trim()) {
            Some(sel) => sel.canonical().to_owned(),
            None => policy.selector.clone(),
        };
        self.update_rules(
            RulesId::Policy(key.clone()),
            &policy.inbound_rules,
            &policy.outbound_rules,
            pb::Policy {
                namespace: policy.namespace.clone(),
                tier: policy.tier.clone(),
                untracked: policy.do_not_track,
                pre_dnat: policy.pre_dnat,
                original_selector,
                perf_hints: policy.performance_hints.clone(),
                ..Default::default()
            },
            events,
        )
    }

    /// A policy became inactive.
    pub fn policy_inactive(&mut self, key: &PolicyRef, events: &mut Vec<ScanEvent>) {
        self.update_rules(
            RulesId::Policy(key.clone()),
            &[],
            &[],
            pb::Policy::default(),
            events,
        );
    }

    /// A profile became active (or changed while active).  Returns its
    /// rules converted, as a policy's (the other fields left empty).
    pub fn profile_active(
        &mut self,
        name: &str,
        inbound: &[Rule],
        outbound: &[Rule],
        events: &mut Vec<ScanEvent>,
    ) -> pb::Policy {
        self.update_rules(
            RulesId::Profile(name.to_string()),
            inbound,
            outbound,
            pb::Policy::default(),
            events,
        )
    }

    /// A profile became inactive.
    pub fn profile_inactive(&mut self, name: &str, events: &mut Vec<ScanEvent>) {
        self.update_rules(
            RulesId::Profile(name.to_string()),
            &[],
            &[],
            pb::Policy::default(),
            events,
        );
    }

    fn update_rules(
        &mut self,
        id: RulesId,
        inbound: &[Rule],
        outbound: &[Rule],
        mut parsed: pb::Policy,
        events: &mut Vec<ScanEvent>,
    ) -> pb::Policy {
        let mut current: BTreeMap<String, IpSetData> = BTreeMap::new();
        parsed.inbound_rules = inbound
            .iter()
            .map(|r| convert_rule(r, &mut current, &mut self.selectors))
            .collect();
        parsed.outbound_rules = outbound
            .iter()
            .map(|r| convert_rule(r, &mut current, &mut self.selectors))
            .collect();

        let old: BTreeSet<String> = self.uids_by_rules.remove(&id).unwrap_or_default();
        // Newly referenced sets first, so a set moving between rules of the
        // same owner never goes inactive in between.
        for (uid, data) in &current {
            if old.contains(uid) {
                continue;
            }
            let users = self.rules_by_uid.entry(uid.clone()).or_default();
            if users.is_empty() {
                self.sets_by_uid.insert(uid.clone(), data.clone());
                events.push(ScanEvent::SetActive(data.clone()));
            }
            users.insert(id.clone());
        }
        for uid in &old {
            if current.contains_key(uid) {
                continue;
            }
            let now_unused = match self.rules_by_uid.get_mut(uid) {
                Some(users) => {
                    users.remove(&id);
                    users.is_empty()
                }
                None => false,
            };
            if now_unused {
                self.rules_by_uid.remove(uid);
                if let Some(data) = self.sets_by_uid.remove(uid) {
                    events.push(ScanEvent::SetInactive(data));
                }
            }
        }
        if !current.is_empty() {
            self.uids_by_rules.insert(id, current.into_keys().collect());
        }
        parsed
    }
}

/// Combines a positive and a negated selector into one where that is
/// valid (a positive selector limits the rule to known endpoints anyway),
/// as upstream does to keep IP sets fewer and smaller.
fn combine<'a>(positive: &'a str, negated: &'a str) -> (Cow<'a, str>, Cow<'a, str>) {
    if positive.is_empty() || negated.is_empty() {
        return (Cow::Borrowed(positive), Cow::Borrowed(negated));
    }
    (
        Cow::Owned(format!("({positive}) && (!({negated}))")),
        Cow::Borrowed(""),
    )
}

fn selector_set(sel: &Selector) -> IpSetData {
    IpSetData {
        uid: sel.unique_id().to_string(),
        set_type: SetType::Net,
        def: Some(IpSetDef {
            selector: sel.clone(),
            np_protocol: NpProtocol::None,
            np_name: String::new(),
        }),
    }
}

fn named_port_set(sel: &Selector, proto: NpProtocol, name: &str) -> IpSetData {
    let content = format!("{},{},{}", sel.unique_id(), proto.as_str(), name);
    IpSetData {
        uid: make_unique_id("n", &content),
        set_type: SetType::IpAndPort,
        def: Some(IpSetDef {
            selector: sel.clone(),
            np_protocol: proto,
            np_name: name.to_string(),
        }),
    }
}

fn service_set(ns: &str, name: &str, include_ports: bool) -> IpSetData {
    let svc = format!("{ns}/{name}");
    let (prefix, set_type) = if include_ports {
        ("svc", SetType::IpAndPort)
    } else {
        ("svcnoport", SetType::Net)
    };
    IpSetData {
        uid: make_unique_id(prefix, &svc),
        set_type,
        def: None,
    }
}

fn split_ports(ports: &[Port]) -> (Vec<pb::PortRange>, Vec<&str>) {
    let mut numeric = Vec::new();
    let mut named = Vec::new();
    for p in ports {
        match p {
            Port::Number(n) => numeric.push(pb::PortRange {
                first: i32::from(*n),
                last: i32::from(*n),
            }),
            Port::Range { first, last } => numeric.push(pb::PortRange {
                first: i32::from(*first),
                last: i32::from(*last),
            }),
            Port::Named(n) => named.push(n.as_str()),
        }
    }
    (numeric, named)
}

/// The ids of `sets`, recording each set in `current` (moved there: the
/// first rule naming a set provides its definition).
fn collect(sets: Vec<IpSetData>, current: &mut BTreeMap<String, IpSetData>) -> Vec<String> {
    sets.into_iter()
        .map(|s| {
            let uid = s.uid.clone();
            current.entry(uid.clone()).or_insert(s);
            uid
        })
        .collect()
}

/// Converts one model rule into a dataplane rule (without rule ID),
/// recording the IP sets it needs in `current`.
fn convert_rule(
    rule: &Rule,
    current: &mut BTreeMap<String, IpSetData>,
    selectors: &mut SelectorCache,
) -> pb::Rule {
    let (src_raw, not_src_raw) = combine(&rule.src_selector, &rule.not_src_selector);
    let (dst_raw, not_dst_raw) = combine(&rule.dst_selector, &rule.not_dst_selector);
    let src_sel = selectors.rule_selector(&src_raw);
    let dst_sel = selectors.rule_selector(&dst_raw);
    let not_src_sel = selectors.rule_selector(&not_src_raw);
    let not_dst_sel = selectors.rule_selector(&not_dst_raw);

    let (src_num, src_named) = split_ports(&rule.src_ports);
    let (dst_num, dst_named) = split_ports(&rule.dst_ports);
    let (not_src_num, not_src_named) = split_ports(&rule.not_src_ports);
    let (not_dst_num, not_dst_named) = split_ports(&rule.not_dst_ports);

    let np_proto = NpProtocol::from_rule_protocol(rule.protocol.as_ref());
    let all = Selector::all();
    let np_sets = |names: &[&str], positive: &Option<Selector>| -> Vec<IpSetData> {
        let sel = positive.as_ref().unwrap_or(&all);
        names
            .iter()
            .map(|n| named_port_set(sel, np_proto, n))
            .collect()
    };
    let src_np = np_sets(&src_named, &src_sel);
    let dst_np = np_sets(&dst_named, &dst_sel);
    let not_src_np = np_sets(&not_src_named, &src_sel);
    let not_dst_np = np_sets(&not_dst_named, &dst_sel);

    // The positive selector is already folded into the named-port sets
    // when the rule has named ports and no numeric ones.
    let mut src_sets: Vec<IpSetData> = Vec::new();
    if !src_num.is_empty() || src_named.is_empty() {
        src_sets.extend(src_sel.iter().map(selector_set));
    }
    let mut dst_sets: Vec<IpSetData> = Vec::new();
    if !dst_num.is_empty() || dst_named.is_empty() {
        dst_sets.extend(dst_sel.iter().map(selector_set));
    }
    let not_src_sets: Vec<IpSetData> = not_src_sel.iter().map(selector_set).collect();
    let not_dst_sets: Vec<IpSetData> = not_dst_sel.iter().map(selector_set).collect();

    let mut dst_ip_port_sets = Vec::new();
    if let Some(svc) = &rule.dst_service {
        dst_ip_port_sets.push(service_set(&svc.namespace, &svc.name, true));
    }
    if let Some(svc) = &rule.src_service {
        src_sets.push(service_set(&svc.namespace, &svc.name, false));
    }

    let mut out = pb::Rule {
        action: rule.action.as_proto_str().to_string(),
        ip_version: ip_version(rule.ip_version, rule.protocol.as_ref()) as i32,
        protocol: rule.protocol.as_ref().map(proto_protocol),
        src_net: nets(&rule.src_nets),
        src_ports: src_num,
        src_named_port_ip_set_ids: collect(src_np, current),
        dst_net: nets(&rule.dst_nets),
        dst_ports: dst_num,
        dst_named_port_ip_set_ids: collect(dst_np, current),
        src_ip_set_ids: collect(src_sets, current),
        dst_ip_set_ids: collect(dst_sets, current),
        dst_ip_port_set_ids: collect(dst_ip_port_sets, current),
        not_protocol: rule.not_protocol.as_ref().map(proto_protocol),
        not_src_net: nets(&rule.not_src_nets),
        not_src_ports: not_src_num,
        not_dst_net: nets(&rule.not_dst_nets),
        not_dst_ports: not_dst_num,
        not_src_ip_set_ids: collect(not_src_sets, current),
        not_dst_ip_set_ids: collect(not_dst_sets, current),
        not_src_named_port_ip_set_ids: collect(not_src_np, current),
        not_dst_named_port_ip_set_ids: collect(not_dst_np, current),
        original_src_selector: rule.original_src_selector.clone(),
        original_dst_selector: rule.original_dst_selector.clone(),
        original_src_namespace_selector: rule.original_src_namespace_selector.clone(),
        original_dst_namespace_selector: rule.original_dst_namespace_selector.clone(),
        original_not_src_selector: rule.original_not_src_selector.clone(),
        original_not_dst_selector: rule.original_not_dst_selector.clone(),
        original_src_service: rule
            .src_service
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        original_src_service_namespace: rule
            .src_service
            .as_ref()
            .map(|s| s.namespace.clone())
            .unwrap_or_default(),
        original_dst_service: rule
            .dst_service
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        original_dst_service_namespace: rule
            .dst_service
            .as_ref()
            .map(|s| s.namespace.clone())
            .unwrap_or_default(),
        ..Default::default()
    };
    if !rule.original_src_service_account_names.is_empty()
        || !rule.original_src_service_account_selector.is_empty()
    {
        out.src_service_account_match = Some(pb::ServiceAccountMatch {
            selector: rule.original_src_service_account_selector.clone(),
            names: rule.original_src_service_account_names.clone(),
        });
    }
    if !rule.original_dst_service_account_names.is_empty()
        || !rule.original_dst_service_account_selector.is_empty()
    {
        out.dst_service_account_match = Some(pb::ServiceAccountMatch {
            selector: rule.original_dst_service_account_selector.clone(),
            names: rule.original_dst_service_account_names.clone(),
        });
    }
    if let Some(h) = &rule.http_match {
        let paths = h
            .paths
            .iter()
            .map(|p| pb::http_match::PathMatch {
                path_match: Some(match p {
                    model::HttpPath::Exact(s) => {
                        pb::http_match::path_match::PathMatch::Exact(s.clone())
                    }
                    model::HttpPath::Prefix(s) => {
                        pb::http_match::path_match::PathMatch::Prefix(s.clone())
                    }
                }),
            })
            .collect();
        out.http_match = Some(pb::HttpMatch {
            methods: h.methods.clone(),
            paths,
        });
    }
    if let Some(md) = &rule.metadata {
        out.metadata = Some(pb::RuleMetadata {
            annotations: md.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        });
    }
    if let Some(t) = rule.icmp_type {
        out.icmp = Some(match rule.icmp_code {
            Some(c) => pb::rule::Icmp::IcmpTypeCode(pb::IcmpTypeAndCode {
                r#type: i32::from(t),
                code: i32::from(c),
            }),
            None => pb::rule::Icmp::IcmpType(i32::from(t)),
        });
    }
    if let Some(t) = rule.not_icmp_type {
        out.not_icmp = Some(match rule.not_icmp_code {
            Some(c) => pb::rule::NotIcmp::NotIcmpTypeCode(pb::IcmpTypeAndCode {
                r#type: i32::from(t),
                code: i32::from(c),
            }),
            None => pb::rule::NotIcmp::NotIcmpType(i32::from(t)),
        });
    }
    out
}

fn nets(n: &[ipnet::IpNet]) -> Vec<String> {
    n.iter().map(|n| n.to_string()).collect()
}

/// The rule's IP version: explicit, else implied by an ICMP protocol.
fn ip_version(v: Option<u8>, p: Option<&Protocol>) -> pb::IpVersion {
    match v {
        Some(4) => pb::IpVersion::Ipv4,
        Some(6) => pb::IpVersion::Ipv6,
        Some(_) => pb::IpVersion::Any,
        None => match p {
            Some(Protocol::Name(n)) if n.eq_ignore_ascii_case("icmp") => pb::IpVersion::Ipv4,
            Some(Protocol::Name(n)) if n.eq_ignore_ascii_case("icmpv6") => pb::IpVersion::Ipv6,
            _ => pb::IpVersion::Any,
        },
    }
}

/// Protocol in the dataplane's (v1, lower-case) form.
fn proto_protocol(p: &Protocol) -> pb::Protocol {
    pb::Protocol {
        number_or_name: Some(match p {
            Protocol::Number(n) => pb::protocol::NumberOrName::Number(i32::from(*n)),
            Protocol::Name(n) => pb::protocol::NumberOrName::Name(n.to_ascii_lowercase()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_cache_returns_what_a_parse_gives_and_stays_bounded() {
        let mut c = SelectorCache::default();
        let a = c.parsed("has(a)").expect("parses");
        let again = c.parsed("has(a)").expect("cached");
        assert_eq!(a, again);
        assert_eq!(
            a.unique_id(),
            selector::parse("has(a)").expect("parses").unique_id()
        );
        assert!(
            c.parsed("has(").is_none(),
            "a bad text is not cached as good"
        );
        assert!(c.rule_selector("").is_none());
        // A bad rule selector matches nothing (fail closed).
        let bad = c.rule_selector("has(").expect("fallback");
        assert!(!bad.evaluate(&crate::model::Labels::new()));
        for i in 0..(SELECTOR_CACHE_MAX + 10) {
            let text = format!("k == 'v{i}'");
            let sel = c.parsed(&text).expect("parses");
            assert_eq!(
                sel.canonical(),
                selector::parse(&text).expect("parses").canonical()
            );
            assert!(c.parsed.len() <= SELECTOR_CACHE_MAX);
        }
    }
}
