//! Compact storage for the policies the active-rules calculator holds.
//!
//! The calculator must keep every policy in the cluster (any of them may
//! start matching a local endpoint later), but only the few that are active
//! are ever looked at.  A model [`Rule`] has some thirty fields, almost all
//! empty in practice, and is about 0.8 KiB in place; a [`CompactRule`]
//! keeps only the fields that differ from their default, one small tagged
//! entry each.  On the isolated-customers benchmark (100,000 policies of
//! three rules) this is most of the graph's memory.
//!
//! Within one policy, equal selector texts are stored once and shared (an
//! isolation policy repeats its own selector in its rules); the default
//! tier and the usual policy types are flags rather than strings.
//!
//! Invariant: [`CompactPolicy::expand`] returns a policy equal (`==`) to
//! the one [`CompactPolicy::new`] was given, and two compact policies are
//! equal exactly when the policies they came from are equal (every
//! representation choice depends only on the values, so equal policies get
//! equal forms).  Both directions destructure the model types completely,
//! so a field added to [`Rule`] or [`Policy`] fails to compile here until
//! it is stored.

use std::sync::Arc;

use ipnet::IpNet;

use crate::model::{Action, HttpMatch, Policy, Port, Protocol, Rule, ServiceMatch};

/// Which string (selector) field of a rule an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StrField {
    Src,
    Dst,
    NotSrc,
    NotDst,
    OriginalSrc,
    OriginalSrcNamespace,
    OriginalDst,
    OriginalDstNamespace,
    OriginalNotSrc,
    OriginalNotDst,
    OriginalSrcServiceAccount,
    OriginalDstServiceAccount,
}

/// Which list-of-CIDRs field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NetsField {
    Src,
    Dst,
    NotSrc,
    NotDst,
}

/// Which list-of-ports field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PortsField {
    Src,
    Dst,
    NotSrc,
    NotDst,
}

/// Which one-byte field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ByteField {
    IpVersion,
    IcmpType,
    IcmpCode,
    NotIcmpType,
    NotIcmpCode,
}

/// One non-default field of a rule (24 bytes).
#[derive(Clone, Debug, PartialEq)]
enum Field {
    Byte(ByteField, u8),
    Protocol(Box<Protocol>),
    NotProtocol(Box<Protocol>),
    /// Shared with equal texts of the same policy.
    Str(StrField, Arc<str>),
    Nets(NetsField, Box<[IpNet]>),
    Ports(PortsField, Box<[Port]>),
    SrcService(Box<ServiceMatch>),
    DstService(Box<ServiceMatch>),
    SrcServiceAccountNames(Box<[String]>),
    DstServiceAccountNames(Box<[String]>),
    Http(Box<HttpMatch>),
    /// `Some(map)`, as sorted pairs (present even when empty).
    Metadata(Box<[(String, String)]>),
}

/// A rule stored as its action plus its non-default fields, in field
/// order.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactRule {
    action: Action,
    fields: Box<[Field]>,
}

/// Texts already stored for the policy being compacted, for sharing.
#[derive(Default)]
struct Texts(Vec<Arc<str>>);

impl Texts {
    /// A shared copy of `s`: an earlier equal text of the policy, or a new
    /// one (a policy has a handful of texts, so a scan is cheapest).
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(t) = self.0.iter().find(|t| &***t == s) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(s);
        self.0.push(t.clone());
        t
    }
}

impl CompactRule {
    pub fn new(r: &Rule) -> CompactRule {
        CompactRule::new_sharing(r, &mut Texts::default())
    }

    fn new_sharing(r: &Rule, texts: &mut Texts) -> CompactRule {
        let Rule {
            action,
            ip_version,
            protocol,
            not_protocol,
            icmp_type,
            icmp_code,
            not_icmp_type,
            not_icmp_code,
            src_nets,
            src_selector,
            src_ports,
            src_service,
            dst_nets,
            dst_selector,
            dst_ports,
            dst_service,
            not_src_nets,
            not_src_selector,
            not_src_ports,
            not_dst_nets,
            not_dst_selector,
            not_dst_ports,
            original_src_selector,
            original_src_namespace_selector,
            original_dst_selector,
            original_dst_namespace_selector,
            original_not_src_selector,
            original_not_dst_selector,
            original_src_service_account_names,
            original_src_service_account_selector,
            original_dst_service_account_names,
            original_dst_service_account_selector,
            http_match,
            metadata,
        } = r;
        let mut f = Vec::new();
        let bytes = [
            (ByteField::IpVersion, ip_version),
            (ByteField::IcmpType, icmp_type),
            (ByteField::IcmpCode, icmp_code),
            (ByteField::NotIcmpType, not_icmp_type),
            (ByteField::NotIcmpCode, not_icmp_code),
        ];
        for (which, v) in bytes {
            if let Some(v) = v {
                f.push(Field::Byte(which, *v));
            }
        }
        if let Some(p) = protocol {
            f.push(Field::Protocol(Box::new(p.clone())));
        }
        if let Some(p) = not_protocol {
            f.push(Field::NotProtocol(Box::new(p.clone())));
        }
        let strs = [
            (StrField::Src, src_selector),
            (StrField::Dst, dst_selector),
            (StrField::NotSrc, not_src_selector),
            (StrField::NotDst, not_dst_selector),
            (StrField::OriginalSrc, original_src_selector),
            (
                StrField::OriginalSrcNamespace,
                original_src_namespace_selector,
            ),
            (StrField::OriginalDst, original_dst_selector),
            (
                StrField::OriginalDstNamespace,
                original_dst_namespace_selector,
            ),
            (StrField::OriginalNotSrc, original_not_src_selector),
            (StrField::OriginalNotDst, original_not_dst_selector),
            (
                StrField::OriginalSrcServiceAccount,
                original_src_service_account_selector,
            ),
            (
                StrField::OriginalDstServiceAccount,
                original_dst_service_account_selector,
            ),
        ];
        for (which, s) in strs {
            if !s.is_empty() {
                f.push(Field::Str(which, texts.get(s)));
            }
        }
        let nets = [
            (NetsField::Src, src_nets),
            (NetsField::Dst, dst_nets),
            (NetsField::NotSrc, not_src_nets),
            (NetsField::NotDst, not_dst_nets),
        ];
        for (which, n) in nets {
            if !n.is_empty() {
                f.push(Field::Nets(which, n.as_slice().into()));
            }
        }
        let ports = [
            (PortsField::Src, src_ports),
            (PortsField::Dst, dst_ports),
            (PortsField::NotSrc, not_src_ports),
            (PortsField::NotDst, not_dst_ports),
        ];
        for (which, p) in ports {
            if !p.is_empty() {
                f.push(Field::Ports(which, p.as_slice().into()));
            }
        }
        if let Some(s) = src_service {
            f.push(Field::SrcService(Box::new(s.clone())));
        }
        if let Some(s) = dst_service {
            f.push(Field::DstService(Box::new(s.clone())));
        }
        if !original_src_service_account_names.is_empty() {
            f.push(Field::SrcServiceAccountNames(
                original_src_service_account_names.as_slice().into(),
            ));
        }
        if !original_dst_service_account_names.is_empty() {
            f.push(Field::DstServiceAccountNames(
                original_dst_service_account_names.as_slice().into(),
            ));
        }
        if let Some(h) = http_match {
            f.push(Field::Http(Box::new(h.clone())));
        }
        if let Some(m) = metadata {
            f.push(Field::Metadata(
                m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ));
        }
        CompactRule {
            action: *action,
            fields: f.into_boxed_slice(),
        }
    }

    /// The rule this was made from.
    pub fn expand(&self) -> Rule {
        let mut r = Rule {
            action: self.action,
            ..Default::default()
        };
        for f in self.fields.iter() {
            match f {
                Field::Byte(which, v) => {
                    let slot = match which {
                        ByteField::IpVersion => &mut r.ip_version,
                        ByteField::IcmpType => &mut r.icmp_type,
                        ByteField::IcmpCode => &mut r.icmp_code,
                        ByteField::NotIcmpType => &mut r.not_icmp_type,
                        ByteField::NotIcmpCode => &mut r.not_icmp_code,
                    };
                    *slot = Some(*v);
                }
                Field::Protocol(p) => r.protocol = Some((**p).clone()),
                Field::NotProtocol(p) => r.not_protocol = Some((**p).clone()),
                Field::Str(which, s) => {
                    let slot = match which {
                        StrField::Src => &mut r.src_selector,
                        StrField::Dst => &mut r.dst_selector,
                        StrField::NotSrc => &mut r.not_src_selector,
                        StrField::NotDst => &mut r.not_dst_selector,
                        StrField::OriginalSrc => &mut r.original_src_selector,
                        StrField::OriginalSrcNamespace => &mut r.original_src_namespace_selector,
                        StrField::OriginalDst => &mut r.original_dst_selector,
                        StrField::OriginalDstNamespace => &mut r.original_dst_namespace_selector,
                        StrField::OriginalNotSrc => &mut r.original_not_src_selector,
                        StrField::OriginalNotDst => &mut r.original_not_dst_selector,
                        StrField::OriginalSrcServiceAccount => {
                            &mut r.original_src_service_account_selector
                        }
                        StrField::OriginalDstServiceAccount => {
                            &mut r.original_dst_service_account_selector
                        }
                    };
                    *slot = s.to_string();
                }
                Field::Nets(which, n) => {
                    let slot = match which {
                        NetsField::Src => &mut r.src_nets,
                        NetsField::Dst => &mut r.dst_nets,
                        NetsField::NotSrc => &mut r.not_src_nets,
                        NetsField::NotDst => &mut r.not_dst_nets,
                    };
                    *slot = n.to_vec();
                }
                Field::Ports(which, p) => {
                    let slot = match which {
                        PortsField::Src => &mut r.src_ports,
                        PortsField::Dst => &mut r.dst_ports,
                        PortsField::NotSrc => &mut r.not_src_ports,
                        PortsField::NotDst => &mut r.not_dst_ports,
                    };
                    *slot = p.to_vec();
                }
                Field::SrcService(s) => r.src_service = Some((**s).clone()),
                Field::DstService(s) => r.dst_service = Some((**s).clone()),
                Field::SrcServiceAccountNames(n) => {
                    r.original_src_service_account_names = n.to_vec()
                }
                Field::DstServiceAccountNames(n) => {
                    r.original_dst_service_account_names = n.to_vec()
                }
                Field::Http(h) => r.http_match = Some((**h).clone()),
                Field::Metadata(m) => r.metadata = Some(m.iter().cloned().collect()),
            }
        }
        r
    }
}

/// The tier every policy without one is in.
const DEFAULT_TIER: &str = "default";

/// The policy-type lists stored as a code in [`CompactPolicy::flags`]
/// (bits 3-5; code `i + 1` is entry `i`, code 0 means the list is in
/// `types`).
const STD_TYPES: [&[&str]; 5] = [
    &[],
    &["ingress"],
    &["egress"],
    &["ingress", "egress"],
    &["egress", "ingress"],
];

/// Shift of the policy-types code in [`CompactPolicy::flags`].
const TYPES_SHIFT: u8 = 3;

/// A policy in compact form; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactPolicy {
    namespace: Box<str>,
    /// `None` for [`DEFAULT_TIER`].
    tier: Option<Box<str>>,
    order: Option<f64>,
    selector: Arc<str>,
    /// `do_not_track`, `pre_dnat`, `apply_on_forward` (bits 0, 1, 2), the
    /// policy-types code (bits 3-5, see [`STD_TYPES`]).
    flags: u8,
    /// Empty unless the types are not one of [`STD_TYPES`].
    types: Box<[String]>,
    /// Sorted pairs (a map's order).
    annotations: Box<[(String, String)]>,
    performance_hints: Box<[String]>,
    inbound: Box<[CompactRule]>,
    outbound: Box<[CompactRule]>,
}

impl CompactPolicy {
    pub fn new(p: &Policy) -> CompactPolicy {
        let Policy {
            namespace,
            tier,
            order,
            inbound_rules,
            outbound_rules,
            selector,
            do_not_track,
            pre_dnat,
            apply_on_forward,
            types,
            annotations,
            performance_hints,
        } = p;
        let mut texts = Texts::default();
        let std_types = STD_TYPES
            .iter()
            .position(|t| t.len() == types.len() && t.iter().zip(types).all(|(a, b)| *a == b));
        let types_code = std_types.map_or(0, |i| i as u8 + 1);
        CompactPolicy {
            namespace: namespace.as_str().into(),
            tier: (tier != DEFAULT_TIER).then(|| tier.as_str().into()),
            order: *order,
            selector: texts.get(selector),
            flags: u8::from(*do_not_track)
                | (u8::from(*pre_dnat) << 1)
                | (u8::from(*apply_on_forward) << 2)
                | (types_code << TYPES_SHIFT),
            types: if std_types.is_some() {
                Box::default()
            } else {
                types.as_slice().into()
            },
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            performance_hints: performance_hints.as_slice().into(),
            inbound: inbound_rules
                .iter()
                .map(|r| CompactRule::new_sharing(r, &mut texts))
                .collect(),
            outbound: outbound_rules
                .iter()
                .map(|r| CompactRule::new_sharing(r, &mut texts))
                .collect(),
        }
    }

    /// The policy this was made from.
    pub fn expand(&self) -> Policy {
        Policy {
            namespace: self.namespace.to_string(),
            tier: self.tier.as_deref().unwrap_or(DEFAULT_TIER).to_string(),
            order: self.order,
            inbound_rules: self.inbound.iter().map(CompactRule::expand).collect(),
            outbound_rules: self.outbound.iter().map(CompactRule::expand).collect(),
            selector: self.selector.to_string(),
            do_not_track: self.flags & 1 != 0,
            pre_dnat: self.flags & 2 != 0,
            apply_on_forward: self.flags & 4 != 0,
            types: match (self.flags >> TYPES_SHIFT) as usize {
                0 => self.types.to_vec(),
                code => STD_TYPES
                    .get(code - 1)
                    .map(|t| t.iter().map(|s| s.to_string()).collect())
                    .unwrap_or_default(),
            },
            annotations: self.annotations.iter().cloned().collect(),
            performance_hints: self.performance_hints.to_vec(),
        }
    }

    /// The policy's performance hints.
    pub fn performance_hints(&self) -> &[String] {
        &self.performance_hints
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{HttpPath, Port, Protocol};

    /// A rule with every field set to something other than its default.
    fn full_rule() -> Rule {
        let net = |s: &str| -> IpNet { s.parse().unwrap() };
        Rule {
            action: Action::Deny,
            ip_version: Some(4),
            protocol: Some(Protocol::Name("tcp".into())),
            not_protocol: Some(Protocol::Number(17)),
            icmp_type: Some(1),
            icmp_code: Some(2),
            not_icmp_type: Some(3),
            not_icmp_code: Some(4),
            src_nets: vec![net("10.0.0.0/8")],
            src_selector: "a == 'b'".into(),
            src_ports: vec![Port::Number(80)],
            src_service: Some(ServiceMatch {
                name: "s".into(),
                namespace: "n".into(),
            }),
            dst_nets: vec![net("10.1.0.0/16"), net("fd00::/8")],
            dst_selector: "c == 'd'".into(),
            dst_ports: vec![Port::Range { first: 1, last: 2 }],
            dst_service: Some(ServiceMatch {
                name: "t".into(),
                namespace: "m".into(),
            }),
            not_src_nets: vec![net("192.168.0.0/16")],
            not_src_selector: "has(e)".into(),
            not_src_ports: vec![Port::Named("http".into())],
            not_dst_nets: vec![net("172.16.0.0/12")],
            not_dst_selector: "has(f)".into(),
            not_dst_ports: vec![Port::Number(443)],
            original_src_selector: "o1".into(),
            original_src_namespace_selector: "o2".into(),
            original_dst_selector: "o3".into(),
            original_dst_namespace_selector: "o4".into(),
            original_not_src_selector: "o5".into(),
            original_not_dst_selector: "o6".into(),
            original_src_service_account_names: vec!["sa1".into()],
            original_src_service_account_selector: "o7".into(),
            original_dst_service_account_names: vec!["sa2".into(), "sa3".into()],
            original_dst_service_account_selector: "o8".into(),
            http_match: Some(HttpMatch {
                methods: vec!["GET".into()],
                paths: vec![HttpPath::Prefix("/x".into())],
            }),
            metadata: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        }
    }

    fn policy(rules: Vec<Rule>) -> Policy {
        Policy {
            namespace: "ns".into(),
            tier: "t1".into(),
            order: Some(10.5),
            inbound_rules: rules.clone(),
            outbound_rules: rules.into_iter().rev().collect(),
            selector: "app == 'x'".into(),
            do_not_track: true,
            pre_dnat: false,
            apply_on_forward: true,
            types: vec!["ingress".into()],
            annotations: BTreeMap::from([("a".to_string(), "1".to_string())]),
            performance_hints: vec!["AssumeNeededOnEveryNode".into()],
        }
    }

    #[test]
    fn full_and_default_rules_round_trip() {
        for r in [full_rule(), Rule::default()] {
            assert_eq!(CompactRule::new(&r).expand(), r);
        }
        // A default rule keeps no fields at all.
        assert!(CompactRule::new(&Rule::default()).fields.is_empty());
    }

    #[test]
    fn each_single_field_round_trips() {
        // Every field alone (the others default): a field stored under the
        // wrong tag would land in another field and fail here.
        let full = full_rule();
        let singles: Vec<Rule> = vec![
            Rule {
                src_selector: full.src_selector.clone(),
                ..Default::default()
            },
            Rule {
                not_dst_selector: full.not_dst_selector.clone(),
                ..Default::default()
            },
            Rule {
                original_dst_service_account_selector: "x".into(),
                ..Default::default()
            },
            Rule {
                not_src_nets: full.not_src_nets.clone(),
                ..Default::default()
            },
            Rule {
                dst_ports: full.dst_ports.clone(),
                ..Default::default()
            },
            Rule {
                not_icmp_code: Some(9),
                ..Default::default()
            },
        ];
        for r in singles {
            assert_eq!(CompactRule::new(&r).expand(), r);
        }
    }

    #[test]
    fn policies_round_trip_and_compare_like_the_originals() {
        let p = policy(vec![full_rule(), Rule::default()]);
        let c = CompactPolicy::new(&p);
        assert_eq!(c.expand(), p);
        assert_eq!(c.performance_hints(), p.performance_hints.as_slice());
        let empty = Policy::default();
        assert_eq!(CompactPolicy::new(&empty).expand(), empty);

        let mut q = p.clone();
        q.inbound_rules[0].dst_selector = "c == 'e'".into();
        assert_ne!(
            CompactPolicy::new(&q),
            c,
            "a changed rule field is a change"
        );
        let mut q = p.clone();
        q.pre_dnat = true;
        assert_ne!(CompactPolicy::new(&q), c, "a changed flag is a change");
        assert_eq!(CompactPolicy::new(&p.clone()), c);
    }

    #[test]
    fn tiers_types_and_shared_texts_round_trip() {
        let sel = "ns == 'a'".to_string();
        let rule = |s: &str| Rule {
            src_selector: s.into(),
            dst_selector: s.into(),
            ..Default::default()
        };
        let types_cases: Vec<Vec<String>> = vec![
            vec![],
            vec!["ingress".into()],
            vec!["egress".into()],
            vec!["ingress".into(), "egress".into()],
            vec!["egress".into(), "ingress".into()],
            vec!["Ingress".into()],
            vec!["ingress".into(), "ingress".into()],
            vec!["egress".into(), "ingress".into(), "egress".into()],
        ];
        let mut seen = Vec::new();
        for tier in ["default", "", "Default", "security"] {
            for types in &types_cases {
                let p = Policy {
                    tier: tier.into(),
                    selector: sel.clone(),
                    types: types.clone(),
                    inbound_rules: vec![rule(&sel), rule("other")],
                    outbound_rules: vec![rule(&sel)],
                    ..Default::default()
                };
                let c = CompactPolicy::new(&p);
                assert_eq!(c.expand(), p, "tier {tier:?} types {types:?}");
                // Distinct policies stay distinct in compact form.
                assert!(!seen.contains(&c), "tier {tier:?} types {types:?}");
                seen.push(c);
            }
        }
        // The policy's selector and its rules' equal selectors are one
        // stored text.
        let c = &seen[0];
        let Field::Str(_, first) = &c.inbound[0].fields[0] else {
            panic!("selector field expected");
        };
        assert!(Arc::ptr_eq(first, &c.selector));
        let Field::Str(_, out) = &c.outbound[0].fields[1] else {
            panic!("selector field expected");
        };
        assert!(Arc::ptr_eq(out, &c.selector));
    }
}
