//! Compact storage for the policies the active-rules calculator holds.
//!
//! The calculator must keep every policy in the cluster (any of them may
//! start matching a local endpoint later), but only the few that are active
//! are ever looked at.  A model [`Rule`] has some thirty fields, almost all
//! empty in practice, and is about 0.8 KiB in place.  A [`CompactPolicy`] is
//! the policy packed into one byte string: only the fields that differ from
//! their default, each as a one-byte tag and its value, strings as a length
//! and their bytes.  A string equal to an earlier one of the same policy
//! (an isolation policy repeats its selector in its rules) is written as a
//! back-reference.  On the isolated-customers benchmark (100,000 policies
//! of three rules) a policy takes about 110 bytes instead of about 640 in
//! the field-per-allocation form this replaced.
//!
//! Invariants:
//! * [`CompactPolicy::expand`] returns a policy equal (`==`) to the one
//!   [`CompactPolicy::new`] was given;
//! * the encoding is a function of the policy's values (no addresses, no
//!   map iteration order), and it decodes unambiguously, so two compact
//!   policies are equal exactly when the policies are equal; the one
//!   exception is `order`, compared by its bits (`0.0` and `-0.0` differ,
//!   which costs at most a redundant update);
//! * decoding never panics: a short or damaged buffer yields defaults (it
//!   cannot happen, the bytes are only ever written by [`Writer`]).
//!
//! Both directions destructure the model types completely, so a field added
//! to [`Rule`] or [`Policy`] fails to compile here until it is stored.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::model::{Action, HttpMatch, HttpPath, Policy, Port, Protocol, Rule, ServiceMatch};

/// The tier every policy without one is in.
const DEFAULT_TIER: &str = "default";

/// The policy-type lists stored as a code in the flags byte (bits 3-5;
/// code `i + 1` is entry `i`, code 0 means the list follows).
const STD_TYPES: [&[&str]; 5] = [
    &[],
    &["ingress"],
    &["egress"],
    &["ingress", "egress"],
    &["egress", "ingress"],
];

/// Shift of the policy-types code in the flags byte.
const TYPES_SHIFT: u8 = 3;

/// Strings shorter than this are always written out (a reference would
/// save little), and at most [`MAX_SHARED`] strings per policy can be
/// referred back to, so the writer's scan stays short.
const MIN_SHARED_LEN: usize = 8;
const MAX_SHARED: usize = 64;

/// Rule field tags (0 ends a rule's fields).
mod tag {
    pub const END: u8 = 0;
    pub const IP_VERSION: u8 = 1;
    pub const ICMP_TYPE: u8 = 2;
    pub const ICMP_CODE: u8 = 3;
    pub const NOT_ICMP_TYPE: u8 = 4;
    pub const NOT_ICMP_CODE: u8 = 5;
    pub const PROTOCOL: u8 = 6;
    pub const NOT_PROTOCOL: u8 = 7;
    /// Twelve selector strings, `STR..STR + 12`, in [`super::Rule`] order.
    pub const STR: u8 = 10;
    /// Four CIDR lists: src, dst, not src, not dst.
    pub const NETS: u8 = 22;
    /// Four port lists, same order.
    pub const PORTS: u8 = 26;
    pub const SRC_SERVICE: u8 = 30;
    pub const DST_SERVICE: u8 = 31;
    pub const SRC_SA_NAMES: u8 = 32;
    pub const DST_SA_NAMES: u8 = 33;
    pub const HTTP: u8 = 34;
    pub const METADATA: u8 = 35;
}

/// Appends the encoding; see the module docs.
struct Writer<'a> {
    buf: Vec<u8>,
    /// Strings written out so far that later ones may refer back to.
    shared: Vec<&'a str>,
}

impl<'a> Writer<'a> {
    fn u8(&mut self, b: u8) {
        self.buf.push(b);
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// A string: `2 * index + 1` for a back-reference, else `2 * len` and
    /// the bytes.
    fn str(&mut self, s: &'a str) {
        if s.len() >= MIN_SHARED_LEN {
            if let Some(i) = self.shared.iter().position(|t| *t == s) {
                self.varint(((i as u64) << 1) | 1);
                return;
            }
        }
        self.varint((s.len() as u64) << 1);
        self.buf.extend_from_slice(s.as_bytes());
        if s.len() >= MIN_SHARED_LEN && self.shared.len() < MAX_SHARED {
            self.shared.push(s);
        }
    }

    fn strs(&mut self, v: &'a [String]) {
        self.varint(v.len() as u64);
        for s in v {
            self.str(s);
        }
    }

    fn pairs(&mut self, m: impl ExactSizeIterator<Item = (&'a String, &'a String)>) {
        self.varint(m.len() as u64);
        for (k, v) in m {
            self.str(k);
            self.str(v);
        }
    }

    fn nets(&mut self, v: &[IpNet]) {
        self.varint(v.len() as u64);
        for n in v {
            match n.addr() {
                IpAddr::V4(a) => {
                    self.u8(4);
                    self.buf.extend_from_slice(&a.octets());
                }
                IpAddr::V6(a) => {
                    self.u8(6);
                    self.buf.extend_from_slice(&a.octets());
                }
            }
            self.u8(n.prefix_len());
        }
    }

    fn ports(&mut self, v: &'a [Port]) {
        self.varint(v.len() as u64);
        for p in v {
            match p {
                Port::Number(n) => {
                    self.u8(0);
                    self.varint(u64::from(*n));
                }
                Port::Range { first, last } => {
                    self.u8(1);
                    self.varint(u64::from(*first));
                    self.varint(u64::from(*last));
                }
                Port::Named(name) => {
                    self.u8(2);
                    self.str(name);
                }
            }
        }
    }

    fn protocol(&mut self, p: &'a Protocol) {
        match p {
            Protocol::Name(n) => {
                self.u8(0);
                self.str(n);
            }
            Protocol::Number(n) => {
                self.u8(1);
                self.u8(*n);
            }
        }
    }

    fn service(&mut self, s: &'a ServiceMatch) {
        let ServiceMatch { name, namespace } = s;
        self.str(name);
        self.str(namespace);
    }

    fn rule(&mut self, r: &'a Rule) {
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
        self.u8(match action {
            Action::Allow => 0,
            Action::Deny => 1,
            Action::Log => 2,
            Action::Pass => 3,
        });
        let bytes = [
            (tag::IP_VERSION, ip_version),
            (tag::ICMP_TYPE, icmp_type),
            (tag::ICMP_CODE, icmp_code),
            (tag::NOT_ICMP_TYPE, not_icmp_type),
            (tag::NOT_ICMP_CODE, not_icmp_code),
        ];
        for (t, v) in bytes {
            if let Some(v) = v {
                self.u8(t);
                self.u8(*v);
            }
        }
        for (t, p) in [(tag::PROTOCOL, protocol), (tag::NOT_PROTOCOL, not_protocol)] {
            if let Some(p) = p {
                self.u8(t);
                self.protocol(p);
            }
        }
        let strs = [
            src_selector,
            dst_selector,
            not_src_selector,
            not_dst_selector,
            original_src_selector,
            original_src_namespace_selector,
            original_dst_selector,
            original_dst_namespace_selector,
            original_not_src_selector,
            original_not_dst_selector,
            original_src_service_account_selector,
            original_dst_service_account_selector,
        ];
        for (i, s) in strs.into_iter().enumerate() {
            if !s.is_empty() {
                self.u8(tag::STR + i as u8);
                self.str(s);
            }
        }
        for (i, n) in [src_nets, dst_nets, not_src_nets, not_dst_nets]
            .into_iter()
            .enumerate()
        {
            if !n.is_empty() {
                self.u8(tag::NETS + i as u8);
                self.nets(n);
            }
        }
        for (i, p) in [src_ports, dst_ports, not_src_ports, not_dst_ports]
            .into_iter()
            .enumerate()
        {
            if !p.is_empty() {
                self.u8(tag::PORTS + i as u8);
                self.ports(p);
            }
        }
        for (t, s) in [
            (tag::SRC_SERVICE, src_service),
            (tag::DST_SERVICE, dst_service),
        ] {
            if let Some(s) = s {
                self.u8(t);
                self.service(s);
            }
        }
        for (t, n) in [
            (tag::SRC_SA_NAMES, original_src_service_account_names),
            (tag::DST_SA_NAMES, original_dst_service_account_names),
        ] {
            if !n.is_empty() {
                self.u8(t);
                self.strs(n);
            }
        }
        if let Some(h) = http_match {
            let HttpMatch { methods, paths } = h;
            self.u8(tag::HTTP);
            self.strs(methods);
            self.varint(paths.len() as u64);
            for p in paths {
                match p {
                    HttpPath::Exact(s) => {
                        self.u8(0);
                        self.str(s);
                    }
                    HttpPath::Prefix(s) => {
                        self.u8(1);
                        self.str(s);
                    }
                }
            }
        }
        if let Some(m) = metadata {
            self.u8(tag::METADATA);
            self.pairs(m.iter());
        }
        self.u8(tag::END);
    }

    fn rules(&mut self, v: &'a [Rule]) {
        self.varint(v.len() as u64);
        for r in v {
            self.rule(r);
        }
    }
}

/// Reads what [`Writer`] wrote, in the same order.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    shared: Vec<&'a str>,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> u8 {
        let b = self.buf.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8();
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        v
    }

    /// A count, bounded by the bytes left (each item takes at least one),
    /// so a damaged buffer cannot ask for a huge allocation.
    fn count(&mut self) -> usize {
        let n = self.varint();
        usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(self.buf.len().saturating_sub(self.pos))
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.saturating_add(n).min(self.buf.len());
        let start = self.pos.min(end);
        self.pos = self.pos.saturating_add(n);
        &self.buf[start..end]
    }

    fn str(&mut self) -> &'a str {
        let v = self.varint();
        if v & 1 == 1 {
            return usize::try_from(v >> 1)
                .ok()
                .and_then(|i| self.shared.get(i).copied())
                .unwrap_or("");
        }
        let len = usize::try_from(v >> 1).unwrap_or(usize::MAX);
        let s = std::str::from_utf8(self.bytes(len)).unwrap_or("");
        if s.len() >= MIN_SHARED_LEN && self.shared.len() < MAX_SHARED {
            self.shared.push(s);
        }
        s
    }

    fn string(&mut self) -> String {
        self.str().to_string()
    }

    fn strs(&mut self) -> Vec<String> {
        let n = self.count();
        (0..n).map(|_| self.string()).collect()
    }

    fn pairs<C: FromIterator<(String, String)>>(&mut self) -> C {
        let n = self.count();
        (0..n).map(|_| (self.string(), self.string())).collect()
    }

    fn nets(&mut self) -> Vec<IpNet> {
        let n = self.count();
        (0..n)
            .map(|_| {
                let addr = if self.u8() == 6 {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(&pad::<16>(self.bytes(16)));
                    IpAddr::V6(Ipv6Addr::from(o))
                } else {
                    IpAddr::V4(Ipv4Addr::from(pad::<4>(self.bytes(4))))
                };
                IpNet::new(addr, self.u8()).unwrap_or_else(|_| IpNet::from(addr))
            })
            .collect()
    }

    fn port16(&mut self) -> u16 {
        u16::try_from(self.varint()).unwrap_or(0)
    }

    fn ports(&mut self) -> Vec<Port> {
        let n = self.count();
        (0..n)
            .map(|_| match self.u8() {
                0 => Port::Number(self.port16()),
                1 => Port::Range {
                    first: self.port16(),
                    last: self.port16(),
                },
                _ => Port::Named(self.string()),
            })
            .collect()
    }

    fn protocol(&mut self) -> Protocol {
        match self.u8() {
            0 => Protocol::Name(self.string()),
            _ => Protocol::Number(self.u8()),
        }
    }

    fn service(&mut self) -> ServiceMatch {
        ServiceMatch {
            name: self.string(),
            namespace: self.string(),
        }
    }

    fn rule(&mut self) -> Rule {
        let mut r = Rule {
            action: match self.u8() {
                1 => Action::Deny,
                2 => Action::Log,
                3 => Action::Pass,
                _ => Action::Allow,
            },
            ..Default::default()
        };
        loop {
            let t = self.u8();
            match t {
                tag::END => break,
                tag::IP_VERSION => r.ip_version = Some(self.u8()),
                tag::ICMP_TYPE => r.icmp_type = Some(self.u8()),
                tag::ICMP_CODE => r.icmp_code = Some(self.u8()),
                tag::NOT_ICMP_TYPE => r.not_icmp_type = Some(self.u8()),
                tag::NOT_ICMP_CODE => r.not_icmp_code = Some(self.u8()),
                tag::PROTOCOL => r.protocol = Some(self.protocol()),
                tag::NOT_PROTOCOL => r.not_protocol = Some(self.protocol()),
                t if (tag::STR..tag::STR + 12).contains(&t) => {
                    let slot = match t - tag::STR {
                        0 => &mut r.src_selector,
                        1 => &mut r.dst_selector,
                        2 => &mut r.not_src_selector,
                        3 => &mut r.not_dst_selector,
                        4 => &mut r.original_src_selector,
                        5 => &mut r.original_src_namespace_selector,
                        6 => &mut r.original_dst_selector,
                        7 => &mut r.original_dst_namespace_selector,
                        8 => &mut r.original_not_src_selector,
                        9 => &mut r.original_not_dst_selector,
                        10 => &mut r.original_src_service_account_selector,
                        _ => &mut r.original_dst_service_account_selector,
                    };
                    *slot = self.string();
                }
                t if (tag::NETS..tag::NETS + 4).contains(&t) => {
                    let v = self.nets();
                    match t - tag::NETS {
                        0 => r.src_nets = v,
                        1 => r.dst_nets = v,
                        2 => r.not_src_nets = v,
                        _ => r.not_dst_nets = v,
                    }
                }
                t if (tag::PORTS..tag::PORTS + 4).contains(&t) => {
                    let v = self.ports();
                    match t - tag::PORTS {
                        0 => r.src_ports = v,
                        1 => r.dst_ports = v,
                        2 => r.not_src_ports = v,
                        _ => r.not_dst_ports = v,
                    }
                }
                tag::SRC_SERVICE => r.src_service = Some(self.service()),
                tag::DST_SERVICE => r.dst_service = Some(self.service()),
                tag::SRC_SA_NAMES => r.original_src_service_account_names = self.strs(),
                tag::DST_SA_NAMES => r.original_dst_service_account_names = self.strs(),
                tag::HTTP => {
                    let methods = self.strs();
                    let n = self.count();
                    let paths = (0..n)
                        .map(|_| match self.u8() {
                            0 => HttpPath::Exact(self.string()),
                            _ => HttpPath::Prefix(self.string()),
                        })
                        .collect();
                    r.http_match = Some(HttpMatch { methods, paths });
                }
                tag::METADATA => r.metadata = Some(self.pairs()),
                // Unknown tag: the buffer is damaged; stop reading.
                _ => break,
            }
        }
        r
    }

    fn rules(&mut self) -> Vec<Rule> {
        let n = self.count();
        (0..n).map(|_| self.rule()).collect()
    }
}

/// `b` as an array, zero-padded if short.
fn pad<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = b.len().min(N);
    a[..n].copy_from_slice(&b[..n]);
    a
}

/// A policy in compact form; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactPolicy {
    bytes: Box<[u8]>,
}

impl CompactPolicy {
    /// Packs `p`.
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
        let mut w = Writer {
            buf: Vec::with_capacity(128),
            shared: Vec::new(),
        };
        // Hints first: `performance_hints` reads only them.
        w.strs(performance_hints);
        w.str(namespace);
        if tier == DEFAULT_TIER {
            w.u8(0);
        } else {
            w.u8(1);
            w.str(tier);
        }
        match order {
            None => w.u8(0),
            Some(o) => {
                w.u8(1);
                w.buf.extend_from_slice(&o.to_bits().to_le_bytes());
            }
        }
        w.str(selector);
        let std_types = STD_TYPES
            .iter()
            .position(|t| t.len() == types.len() && t.iter().zip(types).all(|(a, b)| *a == b));
        let types_code = std_types.map_or(0, |i| i as u8 + 1);
        w.u8(u8::from(*do_not_track)
            | (u8::from(*pre_dnat) << 1)
            | (u8::from(*apply_on_forward) << 2)
            | (types_code << TYPES_SHIFT));
        if std_types.is_none() {
            w.strs(types);
        }
        w.pairs(annotations.iter());
        w.rules(inbound_rules);
        w.rules(outbound_rules);
        CompactPolicy {
            bytes: w.buf.into_boxed_slice(),
        }
    }

    fn reader(&self) -> Reader<'_> {
        Reader {
            buf: &self.bytes,
            pos: 0,
            shared: Vec::new(),
        }
    }

    /// The policy this was made from.
    pub fn expand(&self) -> Policy {
        let mut r = self.reader();
        let performance_hints = r.strs();
        let namespace = r.string();
        let tier = match r.u8() {
            0 => DEFAULT_TIER.to_string(),
            _ => r.string(),
        };
        let order = match r.u8() {
            0 => None,
            _ => Some(f64::from_bits(u64::from_le_bytes(pad::<8>(r.bytes(8))))),
        };
        let selector = r.string();
        let flags = r.u8();
        let types = match (flags >> TYPES_SHIFT) as usize {
            0 => r.strs(),
            code => STD_TYPES
                .get(code - 1)
                .map(|t| t.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default(),
        };
        let annotations = r.pairs();
        let inbound_rules = r.rules();
        let outbound_rules = r.rules();
        Policy {
            namespace,
            tier,
            order,
            inbound_rules,
            outbound_rules,
            selector,
            do_not_track: flags & 1 != 0,
            pre_dnat: flags & 2 != 0,
            apply_on_forward: flags & 4 != 0,
            types,
            annotations,
            performance_hints,
        }
    }

    /// The policy's performance hints.
    pub fn performance_hints(&self) -> Vec<String> {
        self.reader().strs()
    }

    /// Bytes of the packed form (tests and sizing).
    pub fn packed_len(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

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
            dst_ports: vec![Port::Range {
                first: 1,
                last: 65535,
            }],
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
                paths: vec![HttpPath::Prefix("/x".into()), HttpPath::Exact("/y".into())],
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

    fn round_trip(p: &Policy) {
        assert_eq!(&CompactPolicy::new(p).expand(), p);
    }

    #[test]
    fn full_and_default_rules_round_trip() {
        for r in [full_rule(), Rule::default()] {
            round_trip(&Policy {
                inbound_rules: vec![r],
                ..Default::default()
            });
        }
        // A default rule is its action and the end tag.
        let one = CompactPolicy::new(&Policy {
            inbound_rules: vec![Rule::default()],
            ..Default::default()
        });
        let none = CompactPolicy::new(&Policy::default());
        assert_eq!(one.packed_len() - none.packed_len(), 2);
    }

    #[test]
    fn each_single_field_round_trips() {
        // Every field alone (the others default): a field stored under the
        // wrong tag would land in another field and fail here.
        let full = full_rule();
        let mut singles = Vec::new();
        macro_rules! single {
            ($($f:ident),*) => {$(
                singles.push(Rule { $f: full.$f.clone(), ..Default::default() });
            )*};
        }
        single!(
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
            metadata
        );
        assert_eq!(singles.len(), 34);
        let mut seen: Vec<CompactPolicy> = Vec::new();
        for r in singles {
            let p = Policy {
                outbound_rules: vec![r],
                ..Default::default()
            };
            round_trip(&p);
            let c = CompactPolicy::new(&p);
            assert!(!seen.contains(&c), "two fields share an encoding: {p:?}");
            seen.push(c);
        }
    }

    #[test]
    fn policies_round_trip_and_compare_like_the_originals() {
        let p = policy(vec![full_rule(), Rule::default()]);
        let c = CompactPolicy::new(&p);
        assert_eq!(c.expand(), p);
        assert_eq!(c.performance_hints(), p.performance_hints);
        round_trip(&Policy::default());

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
        let mut q = p.clone();
        q.order = None;
        assert_ne!(CompactPolicy::new(&q), c, "a removed order is a change");
        assert_eq!(CompactPolicy::new(&p.clone()), c);
    }

    #[test]
    fn tiers_types_and_shared_texts_round_trip() {
        let sel = "ns == 'a-long-namespace'".to_string();
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
                    inbound_rules: vec![rule(&sel), rule("other selector text")],
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
        // The selector's text is written once; its five repeats are
        // back-references.
        let c = &seen[0];
        let text = sel.as_bytes();
        let copies = c.bytes.windows(text.len()).filter(|w| *w == text).count();
        assert_eq!(copies, 1);
    }

    #[test]
    fn many_texts_beyond_the_shared_limit_round_trip() {
        let rules: Vec<Rule> = (0..200)
            .map(|i| Rule {
                src_selector: format!("selector-number-{}", i % 90),
                dst_selector: format!("selector-number-{}", (i * 7) % 90),
                metadata: Some(BTreeMap::from([(
                    format!("key-{i:08}"),
                    "value-long".into(),
                )])),
                ..Default::default()
            })
            .collect();
        round_trip(&policy(rules));
    }

    #[test]
    fn damaged_bytes_decode_without_panicking() {
        let c = CompactPolicy::new(&policy(vec![full_rule()]));
        for cut in 0..c.bytes.len() {
            let d = CompactPolicy {
                bytes: c.bytes[..cut].into(),
            };
            let _ = d.expand();
            let _ = d.performance_hints();
        }
        let noise = CompactPolicy {
            bytes: (0..=255u8).cycle().take(2000).collect(),
        };
        let _ = noise.expand();
    }

    proptest::proptest! {
        /// Equal policies pack equally and every packing round-trips (a
        /// generated mix of the fields most policies use).
        #[test]
        fn packing_round_trips(
            ns in "[a-z]{0,12}",
            tier in proptest::sample::select(vec!["default", "", "t1"]),
            order in proptest::option::of(-1.0e6f64..1.0e6),
            sels in proptest::collection::vec("[a-z =']{0,20}", 0..6),
            ports in proptest::collection::vec(0u16..=65535, 0..4),
            proto in proptest::option::of(0u8..=255),
        ) {
            let rules: Vec<Rule> = sels
                .iter()
                .enumerate()
                .map(|(i, s)| Rule {
                    action: [Action::Allow, Action::Deny, Action::Log, Action::Pass][i % 4],
                    src_selector: s.clone(),
                    dst_selector: sels[(i + 1) % sels.len()].clone(),
                    dst_ports: ports.iter().map(|p| Port::Number(*p)).collect(),
                    protocol: proto.map(Protocol::Number),
                    ..Default::default()
                })
                .collect();
            let p = Policy {
                namespace: ns,
                tier: tier.to_string(),
                order,
                selector: sels.first().cloned().unwrap_or_default(),
                inbound_rules: rules.clone(),
                outbound_rules: rules,
                ..Default::default()
            };
            let c = CompactPolicy::new(&p);
            proptest::prop_assert_eq!(c.expand(), p.clone());
            proptest::prop_assert_eq!(CompactPolicy::new(&p.clone()), c);
        }
    }
}
