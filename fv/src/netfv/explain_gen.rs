//! The seeded generator of the `felix explain` differential test: a fixed set
//! of workloads (three namespaces, dual stack) and, per seed, a random policy
//! world (namespace and workload labels, named ports, profiles, tiers with
//! Deny or Pass default actions, global and namespaced policies with ordered
//! ingress and egress rules using every match the rule model has that the
//! test can exercise with real traffic) and random flows between the
//! workloads (TCP, UDP, ICMP echo; IPv4 and IPv6).
//!
//! Invariants: everything a seed produces is a function of the seed alone,
//! except the flows' source ports and ICMP identifiers, which a [`TupleAlloc`]
//! shared by a whole run hands out so that no flow repeats the conntrack tuple
//! of an earlier one (an earlier allowed flow's conntrack entry would let a
//! later, denied, one through). Every workload serves TCP and UDP on every one
//! of [`SERVER_PORTS`], so a flow only fails when the dataplane drops it.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

use super::datastore::NODE;
use super::topology::{ip4, ip6};

/// The namespaces the workloads live in.
pub const NAMESPACES: [&str; 3] = ["red", "green", "blue"];

/// The ports every workload serves, over TCP and UDP alike.
pub const SERVER_PORTS: [u16; 6] = [80, 443, 1000, 5000, 8080, 9090];

/// One workload of the differential test.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadDef {
    /// Pod name (and server identity).
    pub pod: &'static str,
    /// Kubernetes namespace.
    pub ns: &'static str,
    /// Host-side interface name.
    pub iface: &'static str,
    /// Host part of its addresses: 10.65.0.`host` and fd00:65::`host`.
    pub host: u8,
}

impl WorkloadDef {
    /// The workload's IPv4 address.
    pub fn ip4(&self) -> Ipv4Addr {
        ip4(self.host)
    }

    /// The workload's IPv6 address.
    pub fn ip6(&self) -> Ipv6Addr {
        ip6(self.host)
    }

    /// Its address in the given family.
    pub fn ip(&self, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.ip6())
        } else {
            IpAddr::V4(self.ip4())
        }
    }
}

/// The workloads: three in `red`, two in `green`, two in `blue`.
pub const WORKLOADS: [WorkloadDef; 7] = [
    wl("w0", "red", "caliexp0", 20),
    wl("w1", "red", "caliexp1", 21),
    wl("w2", "red", "caliexp2", 22),
    wl("w3", "green", "caliexp3", 23),
    wl("w4", "green", "caliexp4", 24),
    wl("w5", "blue", "caliexp5", 25),
    wl("w6", "blue", "caliexp6", 26),
];

const fn wl(pod: &'static str, ns: &'static str, iface: &'static str, host: u8) -> WorkloadDef {
    WorkloadDef {
        pod,
        ns,
        iface,
        host,
    }
}

/// A flow's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// A TCP connection, a line each way.
    Tcp,
    /// A UDP datagram and its answer.
    Udp,
    /// An ICMP (ICMPv6 for IPv6) echo request and its reply.
    Icmp,
}

/// One flow between two of [`WORKLOADS`].
#[derive(Clone, Debug)]
pub struct Flow {
    /// Index of the client in [`WORKLOADS`].
    pub src: usize,
    /// Index of the server in [`WORKLOADS`].
    pub dst: usize,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// The protocol.
    pub proto: Proto,
    /// TCP/UDP source port the client binds (0 for ICMP).
    pub src_port: u16,
    /// TCP/UDP destination port (0 for ICMP).
    pub dst_port: u16,
    /// ICMP echo identifier (0 for TCP/UDP).
    pub icmp_id: u16,
}

impl Flow {
    /// The source workload.
    pub fn src_wl(&self) -> &'static WorkloadDef {
        &WORKLOADS[self.src]
    }

    /// The destination workload.
    pub fn dst_wl(&self) -> &'static WorkloadDef {
        &WORKLOADS[self.dst]
    }

    /// The source address.
    pub fn src_ip(&self) -> IpAddr {
        self.src_wl().ip(self.v6)
    }

    /// The destination address.
    pub fn dst_ip(&self) -> IpAddr {
        self.dst_wl().ip(self.v6)
    }

    /// The FLOW arguments of `felix explain` for this flow.
    pub fn explain_args(&self) -> Vec<String> {
        let mut a = vec![
            "--src".to_string(),
            self.src_ip().to_string(),
            "--dst".to_string(),
            self.dst_ip().to_string(),
        ];
        match self.proto {
            Proto::Tcp | Proto::Udp => {
                let p = if self.proto == Proto::Tcp {
                    "tcp"
                } else {
                    "udp"
                };
                a.extend([
                    "--protocol".to_string(),
                    p.to_string(),
                    "--src-port".to_string(),
                    self.src_port.to_string(),
                    "--dst-port".to_string(),
                    self.dst_port.to_string(),
                ]);
            }
            Proto::Icmp => {
                let (p, t) = if self.v6 {
                    ("icmpv6", "128")
                } else {
                    ("icmp", "8")
                };
                a.extend([
                    "--protocol".to_string(),
                    p.to_string(),
                    "--icmp-type".to_string(),
                    t.to_string(),
                    "--icmp-code".to_string(),
                    "0".to_string(),
                ]);
            }
        }
        a
    }
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, d) = (self.src_wl(), self.dst_wl());
        let (sip, dip) = (self.src_ip(), self.dst_ip());
        match self.proto {
            Proto::Tcp | Proto::Udp => {
                let p = if self.proto == Proto::Tcp {
                    "tcp"
                } else {
                    "udp"
                };
                let (sa, da) = if self.v6 {
                    (format!("[{sip}]"), format!("[{dip}]"))
                } else {
                    (sip.to_string(), dip.to_string())
                };
                write!(
                    f,
                    "{p} {}/{} {sa}:{} -> {}/{} {da}:{}",
                    s.ns, s.pod, self.src_port, d.ns, d.pod, self.dst_port
                )
            }
            Proto::Icmp => write!(
                f,
                "{} echo {}/{} {sip} -> {}/{} {dip} (id {})",
                if self.v6 { "icmpv6" } else { "icmp" },
                s.ns,
                s.pod,
                d.ns,
                d.pod,
                self.icmp_id
            ),
        }
    }
}

/// Hands out source ports and ICMP identifiers so that no two flows of a run
/// share a conntrack tuple.
#[derive(Debug, Default)]
pub struct TupleAlloc {
    used: HashSet<(Proto, usize, usize, bool, u16, u16)>,
    next_port: u32,
    next_id: u16,
}

/// The range fresh source ports come from.
const FRESH_PORTS: std::ops::Range<u32> = 20_000..61_000;

impl TupleAlloc {
    /// An allocator with nothing used yet.
    pub fn new() -> TupleAlloc {
        TupleAlloc::default()
    }

    /// Starts a seed: fresh ports and identifiers continue from a point
    /// derived from the seed (so one seed's flows mostly look alike whatever
    /// ran before it), skipping tuples already used.
    fn start_seed(&mut self, seed: u64) {
        let span = u64::from(FRESH_PORTS.end - FRESH_PORTS.start);
        self.next_port = FRESH_PORTS.start + (seed.wrapping_mul(7919) % span) as u32;
        self.next_id = (seed.wrapping_mul(104_729) % 60_000) as u16 + 1;
    }

    /// Claims `port` as the source port of `flow`'s tuple if unused.
    fn claim(&mut self, flow: &Flow, port: u16) -> bool {
        self.used
            .insert((flow.proto, flow.src, flow.dst, flow.v6, port, flow.dst_port))
    }

    /// A source port for `flow` that no earlier flow with the same
    /// endpoints, protocol and destination port used.
    fn fresh_port(&mut self, flow: &Flow) -> u16 {
        loop {
            let p = self.next_port;
            self.next_port += 1;
            if self.next_port >= FRESH_PORTS.end {
                self.next_port = FRESH_PORTS.start;
            }
            let port = u16::try_from(p).unwrap_or(20_000);
            if self.claim(flow, port) {
                return port;
            }
        }
    }

    /// A fresh ICMP echo identifier.
    fn fresh_id(&mut self, flow: &Flow) -> u16 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if self
                .used
                .insert((flow.proto, flow.src, flow.dst, flow.v6, id, 0))
            {
                return id;
            }
        }
    }
}

/// One seed's policy world.
#[derive(Debug)]
pub struct World {
    /// The seed.
    pub seed: u64,
    /// Every resource of the world (namespaces, profiles, tiers, policies,
    /// workload endpoints), as the JSON array written to the datastore.
    pub resources: Vec<Value>,
    /// The value of the [`MARKER_LABEL`] every namespace of this world
    /// carries (no selector uses the key, so it changes no verdict): the
    /// daemon's view showing it on every namespace shows that the world has
    /// been read.
    pub marker: String,
    /// Single source ports rules name (flows sometimes bind them).
    pub src_ports: Vec<u16>,
    /// Number of policies (global and namespaced).
    pub policies: usize,
}

impl World {
    /// The datastore file's text (a JSON array of the resources).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.resources).unwrap_or_default()
    }

    /// The open world: the namespace profiles (which allow everything) and
    /// no policy; every flow must pass.
    pub fn open() -> World {
        let mut resources = Vec::new();
        let marker = "open".to_string();
        for ns in NAMESPACES {
            let mut labels = Map::new();
            labels.insert(MARKER_LABEL.into(), json!(marker));
            resources.push(namespace(ns, &labels));
        }
        for w in &WORKLOADS {
            resources.push(wep(w, &Map::new(), &[format!("kns.{}", w.ns)], &[]));
        }
        World {
            seed: 0,
            resources,
            marker,
            src_ports: Vec::new(),
            policies: 0,
        }
    }

    /// The random world of `seed`.
    pub fn generate(seed: u64) -> World {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            src_ports: Vec::new(),
        }
        .world(seed)
    }

    /// `n` random flows for this world: random pairs of distinct workloads,
    /// 40 % IPv6, TCP 45 % / UDP 35 % / ICMP echo 20 %, destination ports
    /// among [`SERVER_PORTS`], and source ports fresh from `alloc` (or, for
    /// a fifth of them when rules name single source ports, one of those).
    pub fn flows(&self, n: usize, alloc: &mut TupleAlloc) -> Vec<Flow> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed_f10f);
        alloc.start_seed(self.seed);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let src = rng.random_range(0..WORKLOADS.len());
            let mut dst = rng.random_range(0..WORKLOADS.len() - 1);
            if dst >= src {
                dst += 1;
            }
            let v6 = rng.random_bool(0.4);
            let proto = match rng.random_range(0..100) {
                0..45 => Proto::Tcp,
                45..80 => Proto::Udp,
                _ => Proto::Icmp,
            };
            let mut flow = Flow {
                src,
                dst,
                v6,
                proto,
                src_port: 0,
                dst_port: 0,
                icmp_id: 0,
            };
            if proto == Proto::Icmp {
                flow.icmp_id = alloc.fresh_id(&flow);
            } else {
                flow.dst_port = *pick(&mut rng, &SERVER_PORTS);
                let named = if !self.src_ports.is_empty() && rng.random_bool(0.2) {
                    Some(*pick(&mut rng, &self.src_ports))
                } else {
                    None
                };
                flow.src_port = match named {
                    Some(p) if alloc.claim(&flow, p) => p,
                    _ => alloc.fresh_port(&flow),
                };
            }
            out.push(flow);
        }
        out
    }

    /// Every ordered pair of workloads with TCP, UDP and ICMP over both
    /// families (the open world's check that the harness works).
    pub fn all_pairs(alloc: &mut TupleAlloc) -> Vec<Flow> {
        alloc.start_seed(0);
        let mut out = Vec::new();
        for src in 0..WORKLOADS.len() {
            for dst in 0..WORKLOADS.len() {
                if src == dst {
                    continue;
                }
                for v6 in [false, true] {
                    for (i, proto) in [Proto::Tcp, Proto::Udp, Proto::Icmp]
                        .into_iter()
                        .enumerate()
                    {
                        let mut flow = Flow {
                            src,
                            dst,
                            v6,
                            proto,
                            src_port: 0,
                            dst_port: 0,
                            icmp_id: 0,
                        };
                        if proto == Proto::Icmp {
                            flow.icmp_id = alloc.fresh_id(&flow);
                        } else {
                            flow.dst_port = SERVER_PORTS[(src + dst + i) % SERVER_PORTS.len()];
                            flow.src_port = alloc.fresh_port(&flow);
                        }
                        out.push(flow);
                    }
                }
            }
        }
        out
    }
}

/// The namespace label that names the world (see [`World::marker`]).
pub const MARKER_LABEL: &str = "fv-world";

const APPS: [&str; 4] = ["web", "api", "db", "cache"];
const ROLES: [&str; 2] = ["front", "back"];
const TEAMS: [&str; 2] = ["x", "y"];
const PORT_NAMES: [&str; 3] = ["web", "alt", "metrics"];
const TIERS: [&str; 2] = ["t1", "t2"];

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

fn namespace(name: &str, labels: &Map<String, Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": labels}})
}

fn profile(name: &str, ingress: Vec<Value>, egress: Vec<Value>) -> Value {
    json!({"apiVersion": "projectcalico.org/v3", "kind": "Profile",
           "metadata": {"name": name},
           "spec": {"ingress": ingress, "egress": egress}})
}

fn wep(
    w: &WorkloadDef,
    labels: &Map<String, Value>,
    profiles: &[String],
    ports: &[Value],
) -> Value {
    json!({"apiVersion": "projectcalico.org/v3", "kind": "WorkloadEndpoint",
           "metadata": {"name": format!("{NODE}-k8s-{}-eth0", w.pod), "namespace": w.ns,
                        "labels": labels},
           "spec": {"node": NODE, "orchestrator": "k8s", "pod": w.pod, "endpoint": "eth0",
                    "interfaceName": w.iface, "mac": "ee:ee:ee:ee:ee:ee",
                    "ipNetworks": [format!("{}/32", w.ip4()), format!("{}/128", w.ip6())],
                    "profiles": profiles, "ports": ports}})
}

/// The protocol a rule matches, as the generator chose it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RuleProto {
    Any,
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
    Other(u8),
}

impl RuleProto {
    fn has_ports(self) -> bool {
        matches!(self, RuleProto::Tcp | RuleProto::Udp | RuleProto::Sctp)
    }

    /// The family the protocol forces (ICMP: 4, ICMPv6: 6).
    fn family(self) -> Option<u8> {
        match self {
            RuleProto::Icmp => Some(4),
            RuleProto::Icmp6 => Some(6),
            _ => None,
        }
    }
}

struct Gen {
    rng: StdRng,
    src_ports: Vec<u16>,
}

impl Gen {
    fn p(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn world(mut self, seed: u64) -> World {
        let mut resources = Vec::new();
        let marker = seed.to_string();
        for ns in NAMESPACES {
            let mut labels = Map::new();
            labels.insert(MARKER_LABEL.into(), json!(marker));
            labels.insert("env".into(), json!(pick(&mut self.rng, &["prod", "dev"])));
            if self.p(0.5) {
                labels.insert("zone".into(), json!(pick(&mut self.rng, &["a", "b"])));
            }
            resources.push(namespace(ns, &labels));
        }
        // Two custom profiles: one with random rules, one open or closed.
        let ingress = self.rules(0..=3, true);
        let egress = self.rules(0..=3, true);
        resources.push(profile("prof-a", ingress, egress));
        let open = self.p(0.5);
        let all = || vec![json!({"action": "Allow"})];
        resources.push(if open {
            profile("prof-b", all(), all())
        } else {
            profile("prof-b", Vec::new(), Vec::new())
        });

        for w in &WORKLOADS {
            let mut labels = Map::new();
            labels.insert("app".into(), json!(pick(&mut self.rng, &APPS)));
            if self.p(0.7) {
                labels.insert("role".into(), json!(pick(&mut self.rng, &ROLES)));
            }
            if self.p(0.5) {
                labels.insert("team".into(), json!(pick(&mut self.rng, &TEAMS)));
            }
            let kns = format!("kns.{}", w.ns);
            let profiles: Vec<String> = match self.rng.random_range(0..100) {
                0..70 => vec![kns],
                70..80 => vec![kns, "prof-a".into()],
                80..90 => vec!["prof-a".into(), kns],
                90..95 => vec!["prof-b".into()],
                _ => Vec::new(),
            };
            let mut ports = Vec::new();
            for name in PORT_NAMES {
                if self.p(0.4) {
                    let proto = if self.p(0.5) { "TCP" } else { "UDP" };
                    let port = *pick(&mut self.rng, &SERVER_PORTS);
                    ports.push(json!({"name": name, "protocol": proto, "port": port}));
                }
            }
            resources.push(wep(w, &labels, &profiles, &ports));
        }

        // Tiers: up to two of our own, sometimes kube-admin (pinned order
        // 1000, default Pass).
        let mut tiers = vec!["default"];
        for t in TIERS {
            if self.p(0.55) {
                let mut spec = Map::new();
                match self.rng.random_range(0..10) {
                    0 => {}
                    1..4 => {
                        spec.insert("order".into(), json!(100));
                    }
                    4..7 => {
                        spec.insert("order".into(), json!(200));
                    }
                    _ => {
                        spec.insert("order".into(), json!(150.5));
                    }
                }
                match self.rng.random_range(0..10) {
                    0..4 => {
                        spec.insert("defaultAction".into(), json!("Pass"));
                    }
                    4..8 => {
                        spec.insert("defaultAction".into(), json!("Deny"));
                    }
                    _ => {}
                }
                resources.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "Tier",
                                      "metadata": {"name": t}, "spec": spec}));
                tiers.push(t);
            }
        }
        if self.p(0.15) {
            resources.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "Tier",
                                  "metadata": {"name": "kube-admin"},
                                  "spec": {"order": 1000, "defaultAction": "Pass"}}));
            tiers.push("kube-admin");
        }

        let n = self.rng.random_range(1..=6);
        for i in 0..n {
            let tier = *pick(&mut self.rng, &tiers);
            let global = self.p(0.5);
            let ns = *pick(&mut self.rng, &NAMESPACES);
            let base = if global {
                format!("g{i}")
            } else {
                format!("n{i}")
            };
            let name = if tier == "default" {
                base
            } else {
                format!("{tier}.{base}")
            };
            let mut spec = Map::new();
            if tier != "default" || self.p(0.2) {
                spec.insert("tier".into(), json!(tier));
            }
            if self.p(0.8) {
                let order = *pick(&mut self.rng, &[1.0, 10.0, 10.0, 100.0, 100.5, 1000.0]);
                spec.insert("order".into(), json!(order));
            }
            let selector = if self.p(0.15) {
                "all()".to_string()
            } else {
                self.selector()
            };
            spec.insert("selector".into(), json!(selector));
            if global && self.p(0.15) {
                let s = self.ns_selector();
                spec.insert("namespaceSelector".into(), json!(s));
            }
            let (ing, egr, types) = match self.rng.random_range(0..20) {
                0..5 => (true, true, None),
                5..13 => (true, true, Some(vec!["Ingress", "Egress"])),
                13..17 => (true, false, Some(vec!["Ingress"])),
                _ => (false, true, Some(vec!["Egress"])),
            };
            if let Some(t) = types {
                spec.insert("types".into(), json!(t));
            }
            if ing {
                let r = self.policy_rules();
                spec.insert("ingress".into(), Value::Array(r));
            }
            if egr {
                let r = self.policy_rules();
                spec.insert("egress".into(), Value::Array(r));
            }
            let mut meta = Map::new();
            meta.insert("name".into(), json!(name));
            let kind = if global {
                "GlobalNetworkPolicy"
            } else {
                meta.insert("namespace".into(), json!(ns));
                "NetworkPolicy"
            };
            resources.push(json!({"apiVersion": "projectcalico.org/v3", "kind": kind,
                                  "metadata": meta, "spec": spec}));
        }
        let mut src_ports = self.src_ports;
        src_ports.sort_unstable();
        src_ports.dedup();
        World {
            seed,
            resources,
            marker,
            src_ports,
            policies: n,
        }
    }

    fn selector(&mut self) -> String {
        let r = &mut self.rng;
        match r.random_range(0..12) {
            0 => "all()".into(),
            1 | 2 => format!("app == '{}'", pick(r, &APPS)),
            3 => format!("app != '{}'", pick(r, &APPS)),
            4 => format!("app in {{'{}', '{}'}}", pick(r, &APPS), pick(r, &APPS)),
            5 => format!("app not in {{'{}'}}", pick(r, &APPS)),
            6 => "has(role)".into(),
            7 => "!has(team)".into(),
            8 => format!(
                "role == '{}' && team == '{}'",
                pick(r, &ROLES),
                pick(r, &TEAMS)
            ),
            9 => format!(
                "app == '{}' || role == '{}'",
                pick(r, &APPS),
                pick(r, &ROLES)
            ),
            10 => format!("team == '{}'", pick(r, &TEAMS)),
            _ => format!("role == '{}'", pick(r, &ROLES)),
        }
    }

    fn ns_selector(&mut self) -> String {
        let r = &mut self.rng;
        match r.random_range(0..7) {
            0 => "all()".into(),
            1 => "env == 'prod'".into(),
            2 => "env == 'dev'".into(),
            3 => "has(zone)".into(),
            4 => format!("zone == '{}'", pick(r, &["a", "b"])),
            5 => "env != 'prod'".into(),
            _ => format!("projectcalico.org/name == '{}'", pick(r, &NAMESPACES)),
        }
    }

    /// A policy's rules in one direction: up to four random ones, often
    /// closed by a broad one (so that not every flow is denied).
    fn policy_rules(&mut self) -> Vec<Value> {
        let mut rules = self.rules(0..=4, false);
        if self.p(0.45) {
            let action = match self.rng.random_range(0..10) {
                0..6 => "Allow",
                6..9 => "Pass",
                _ => "Deny",
            };
            let mut r = Map::new();
            r.insert("action".into(), json!(action));
            if self.p(0.3) {
                let p = *pick(&mut self.rng, &["TCP", "UDP", "ICMP"]);
                r.insert("protocol".into(), json!(p));
            }
            rules.push(Value::Object(r));
        }
        rules
    }

    fn rules(&mut self, count: std::ops::RangeInclusive<usize>, in_profile: bool) -> Vec<Value> {
        let n = self.rng.random_range(count);
        (0..n).map(|_| self.rule(in_profile)).collect()
    }

    /// One random rule (profiles get no Pass).
    fn rule(&mut self, in_profile: bool) -> Value {
        let mut r = Map::new();
        let action = match self.rng.random_range(0..100) {
            0..48 => "Allow",
            48..68 => "Deny",
            68..85 if !in_profile => "Pass",
            68..85 => "Allow",
            _ => "Log",
        };
        r.insert("action".into(), json!(action));
        let proto = match self.rng.random_range(0..100) {
            0..28 => RuleProto::Any,
            28..48 => RuleProto::Tcp,
            48..66 => RuleProto::Udp,
            66..78 => RuleProto::Icmp,
            78..88 => RuleProto::Icmp6,
            88..93 => RuleProto::Sctp,
            _ => RuleProto::Other(*pick(&mut self.rng, &[47, 50, 136])),
        };
        let numeric = self.p(0.25);
        let proto_value = match proto {
            RuleProto::Any => None,
            RuleProto::Tcp => Some(if numeric { json!(6) } else { json!("TCP") }),
            RuleProto::Udp => Some(if numeric { json!(17) } else { json!("UDP") }),
            RuleProto::Sctp => Some(if numeric { json!(132) } else { json!("SCTP") }),
            RuleProto::Icmp => Some(if numeric { json!(1) } else { json!("ICMP") }),
            RuleProto::Icmp6 => Some(if numeric { json!(58) } else { json!("ICMPv6") }),
            RuleProto::Other(n) => Some(json!(n)),
        };
        if let Some(v) = proto_value {
            r.insert("protocol".into(), v);
        }
        let mut family = proto.family();
        if self.p(0.1) {
            let v = family.unwrap_or(if self.p(0.5) { 4 } else { 6 });
            r.insert("ipVersion".into(), json!(v));
            family = Some(v);
        }
        if self.p(0.12) {
            let mut choices: Vec<Value> = vec![json!("TCP"), json!("UDP"), json!(17), json!(6)];
            if family != Some(6) {
                choices.push(json!("ICMP"));
            }
            if family != Some(4) {
                choices.push(json!("ICMPv6"));
            }
            let v = pick(&mut self.rng, &choices).clone();
            r.insert("notProtocol".into(), v);
        }
        if matches!(proto, RuleProto::Icmp | RuleProto::Icmp6) {
            let types: &[u8] = if proto == RuleProto::Icmp {
                &[8, 8, 0, 3]
            } else {
                &[128, 128, 129, 1]
            };
            if self.p(0.5) {
                let mut icmp = Map::new();
                icmp.insert("type".into(), json!(*pick(&mut self.rng, types)));
                if self.p(0.4) {
                    icmp.insert("code".into(), json!(*pick(&mut self.rng, &[0, 0, 1])));
                }
                r.insert("icmp".into(), Value::Object(icmp));
            }
            if self.p(0.12) {
                let mut icmp = Map::new();
                icmp.insert("type".into(), json!(*pick(&mut self.rng, types)));
                if self.p(0.3) {
                    icmp.insert("code".into(), json!(*pick(&mut self.rng, &[0, 1])));
                }
                r.insert("notICMP".into(), Value::Object(icmp));
            }
        }
        let src = self.side(proto, &mut family, true);
        let dst = self.side(proto, &mut family, false);
        if !src.is_empty() {
            r.insert("source".into(), Value::Object(src));
        }
        if !dst.is_empty() {
            r.insert("destination".into(), Value::Object(dst));
        }
        Value::Object(r)
    }

    /// A port list entry: a server port, another port, a range or (when
    /// `named`) a named port.
    fn port_item(&mut self, named: bool) -> Value {
        let r = &mut self.rng;
        match r.random_range(0..20) {
            0..8 => json!(*pick(r, &SERVER_PORTS)),
            8 => json!(22),
            9..15 => json!(*pick(
                r,
                &[
                    "80:443",
                    "1000:5000",
                    "8000:9000",
                    "5001:8079",
                    "444:999",
                    "443:1000"
                ]
            )),
            _ if named => json!(*pick(r, &PORT_NAMES)),
            _ => json!(*pick(r, &SERVER_PORTS)),
        }
    }

    fn port_list(&mut self, named: bool) -> Vec<Value> {
        let n = self.rng.random_range(1..=3);
        (0..n).map(|_| self.port_item(named)).collect()
    }

    /// Source ports: ranges over the fresh-port space, or a single port
    /// that flows then bind on purpose.
    fn src_port_list(&mut self) -> Vec<Value> {
        if self.p(0.5) {
            vec![json!(*pick(
                &mut self.rng,
                &["30000:39999", "20000:29999", "40000:65535", "1024:20000"]
            ))]
        } else {
            let p: u16 = self.rng.random_range(41_000..42_000);
            self.src_ports.push(p);
            vec![json!(p)]
        }
    }

    fn nets(&mut self, v6: bool, negated: bool) -> Vec<Value> {
        let w = *pick(&mut self.rng, &WORKLOADS);
        let n = self.rng.random_range(1..=2);
        (0..n)
            .map(|_| {
                let r = &mut self.rng;
                let s = if v6 {
                    match r.random_range(0..7) {
                        0 => "fd00:65::/64".to_string(),
                        1 | 2 => format!("{}/128", w.ip6()),
                        3 => "fd00:65::20/127".into(),
                        4 => "fd00:65::24/126".into(),
                        5 => "2001:db8::/32".into(),
                        _ if negated => "fd00::/8".into(),
                        _ => "::/0".into(),
                    }
                } else {
                    match r.random_range(0..7) {
                        0 => "10.65.0.0/16".to_string(),
                        1 | 2 => format!("{}/32", w.ip4()),
                        3 => "10.65.0.20/31".into(),
                        4 => "10.65.0.24/30".into(),
                        5 => "192.168.0.0/16".into(),
                        _ if negated => "10.0.0.0/8".into(),
                        _ => "0.0.0.0/0".into(),
                    }
                };
                json!(s)
            })
            .collect()
    }

    /// One side (`source` / `destination`) of a rule; `family` is the IP
    /// family the rule is tied to so far (nets fix it when unset).
    fn side(
        &mut self,
        proto: RuleProto,
        family: &mut Option<u8>,
        source: bool,
    ) -> Map<String, Value> {
        let mut s = Map::new();
        if self.p(0.3) {
            let sel = self.selector();
            s.insert("selector".into(), json!(sel));
        }
        if self.p(0.15) {
            let sel = self.ns_selector();
            s.insert("namespaceSelector".into(), json!(sel));
        }
        if self.p(0.05) {
            let sel = self.selector();
            s.insert("notSelector".into(), json!(sel));
        }
        for (key, p, negated) in [("nets", 0.15, false), ("notNets", 0.1, true)] {
            if self.p(p) {
                let v6 = match *family {
                    Some(f) => f == 6,
                    None => {
                        let v6 = self.p(0.5);
                        *family = Some(if v6 { 6 } else { 4 });
                        v6
                    }
                };
                let nets = self.nets(v6, negated);
                s.insert(key.into(), Value::Array(nets));
            }
        }
        if proto.has_ports() {
            if source {
                if self.p(0.12) {
                    let p = self.src_port_list();
                    s.insert("ports".into(), Value::Array(p));
                }
                if self.p(0.05) {
                    let p = self.src_port_list();
                    s.insert("notPorts".into(), Value::Array(p));
                }
            } else {
                if self.p(0.55) {
                    let p = self.port_list(true);
                    s.insert("ports".into(), Value::Array(p));
                }
                if self.p(0.2) {
                    let p = self.port_list(true);
                    s.insert("notPorts".into(), Value::Array(p));
                }
            }
        } else if proto == RuleProto::Any && !source && self.p(0.08) {
            // Named ports are the one kind of port a rule without a
            // protocol may name.
            let name = *pick(&mut self.rng, &PORT_NAMES);
            s.insert("ports".into(), json!([name]));
        }
        s
    }
}
