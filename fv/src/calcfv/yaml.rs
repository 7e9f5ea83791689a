//! Builders of v3 YAML documents, so that states read as "an endpoint with
//! these labels, a policy with this selector" rather than pages of YAML.
//!
//! Each builder's `yaml()` returns one document (with a leading `---`), so
//! documents can be concatenated.  Rules are given in YAML flow style,
//! e.g. `{action: Allow, source: {selector: "a == 'b'"}}`.

fn labels_block(indent: &str, labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return format!("{indent}labels: {{}}\n");
    }
    let mut s = format!("{indent}labels:\n");
    for (k, v) in labels {
        s.push_str(&format!("{indent}  {k}: \"{v}\"\n"));
    }
    s
}

fn owned(l: &[(&str, &str)]) -> Vec<(String, String)> {
    l.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

fn rules_block(key: &str, rules: &[String]) -> String {
    if rules.is_empty() {
        return String::new();
    }
    let mut s = format!("  {key}:\n");
    for r in rules {
        s.push_str(&format!("  - {r}\n"));
    }
    s
}

/// A Kubernetes-orchestrated workload endpoint (`eth0` of a pod).
#[derive(Clone, Debug)]
pub struct Wep {
    pod: String,
    namespace: String,
    node: String,
    labels: Vec<(String, String)>,
    ips: Vec<String>,
    profiles: Vec<String>,
    ports: Vec<(String, String, u16)>,
    service_account: String,
}

impl Wep {
    /// Pod `pod` in namespace `default` on the local node, no addresses.
    pub fn new(pod: &str) -> Wep {
        Wep {
            pod: pod.to_string(),
            namespace: "default".into(),
            node: super::run::LOCAL_HOST.into(),
            labels: Vec::new(),
            ips: Vec::new(),
            profiles: Vec::new(),
            ports: Vec::new(),
            service_account: String::new(),
        }
    }
    /// Sets the namespace.
    pub fn ns(mut self, ns: &str) -> Wep {
        self.namespace = ns.into();
        self
    }
    /// Puts the endpoint on `node` (a remote node unless it is
    /// [`LOCAL_HOST`](super::run::LOCAL_HOST)).
    pub fn node(mut self, node: &str) -> Wep {
        self.node = node.into();
        self
    }
    /// Replaces the labels.
    pub fn labels(mut self, l: &[(&str, &str)]) -> Wep {
        self.labels = owned(l);
        self
    }
    /// Replaces `ipNetworks` (CIDRs, e.g. `10.0.0.1/32`).
    pub fn ips(mut self, ips: &[&str]) -> Wep {
        self.ips = ips.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Replaces the profiles.
    pub fn profiles(mut self, p: &[&str]) -> Wep {
        self.profiles = p.iter().map(|s| s.to_string()).collect();
        self
    }
    /// A named port: (name, protocol as in v3, number).
    pub fn port(mut self, name: &str, proto: &str, port: u16) -> Wep {
        self.ports.push((name.into(), proto.into(), port));
        self
    }
    /// Sets `serviceAccountName`.
    pub fn sa(mut self, sa: &str) -> Wep {
        self.service_account = sa.into();
        self
    }
    /// The key the expectations use: `namespace/pod/eth0`.
    pub fn id(&self) -> String {
        format!("{}/{}/eth0", self.namespace, self.pod)
    }
    /// The `WorkloadEndpoint` document.
    pub fn yaml(&self) -> String {
        let mut s = format!(
            "---\napiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata:\n  name: {}-k8s-{}-eth0\n  namespace: {}\n",
            self.node, self.pod, self.namespace
        );
        s.push_str(&labels_block("  ", &self.labels));
        s.push_str(&format!(
            "spec:\n  node: {}\n  orchestrator: k8s\n  pod: {}\n  endpoint: eth0\n  interfaceName: cali{}\n  ipNetworks: {}\n  profiles: {}\n",
            self.node,
            self.pod,
            self.pod,
            list(&self.ips),
            list(&self.profiles)
        ));
        if !self.service_account.is_empty() {
            s.push_str(&format!("  serviceAccountName: {}\n", self.service_account));
        }
        if !self.ports.is_empty() {
            s.push_str("  ports:\n");
            for (n, p, num) in &self.ports {
                s.push_str(&format!("  - {{name: {n}, protocol: {p}, port: {num}}}\n"));
            }
        }
        s
    }
}

/// A `GlobalNetworkPolicy` or `NetworkPolicy`.
#[derive(Clone, Debug)]
pub struct Pol {
    name: String,
    namespace: Option<String>,
    fields: Vec<String>,
    ingress: Vec<String>,
    egress: Vec<String>,
}

impl Pol {
    /// A global policy.
    pub fn global(name: &str) -> Pol {
        Pol {
            name: name.into(),
            namespace: None,
            fields: Vec::new(),
            ingress: Vec::new(),
            egress: Vec::new(),
        }
    }
    /// A namespaced policy.
    pub fn namespaced(ns: &str, name: &str) -> Pol {
        Pol {
            namespace: Some(ns.into()),
            ..Pol::global(name)
        }
    }
    /// Adds a raw `spec` field line, e.g. `order: 10`.
    pub fn field(mut self, f: &str) -> Pol {
        self.fields.push(f.to_string());
        self
    }
    /// Adds `selector: "<s>"` to the spec.
    pub fn selector(self, s: &str) -> Pol {
        self.field(&format!("selector: \"{s}\""))
    }
    /// Adds `order: <o>` to the spec.
    pub fn order(self, o: f64) -> Pol {
        self.field(&format!("order: {o}"))
    }
    /// Adds `tier: <t>` to the spec (without it the policy is in the
    /// `default` tier).
    pub fn tier(self, t: &str) -> Pol {
        self.field(&format!("tier: {t}"))
    }
    /// Adds the `types` field (`Ingress`, `Egress`).
    pub fn types(self, t: &[&str]) -> Pol {
        let t: Vec<String> = t.iter().map(|s| s.to_string()).collect();
        self.field(&format!("types: {}", list(&t)))
    }
    /// Appends an ingress rule (YAML flow style).
    pub fn ingress(mut self, rule: &str) -> Pol {
        self.ingress.push(rule.to_string());
        self
    }
    /// Appends an egress rule (YAML flow style).
    pub fn egress(mut self, rule: &str) -> Pol {
        self.egress.push(rule.to_string());
        self
    }
    /// The policy document.
    pub fn yaml(&self) -> String {
        let kind = if self.namespace.is_some() {
            "NetworkPolicy"
        } else {
            "GlobalNetworkPolicy"
        };
        let mut s = format!(
            "---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata:\n  name: {}\n",
            self.name
        );
        if let Some(ns) = &self.namespace {
            s.push_str(&format!("  namespace: {ns}\n"));
        }
        s.push_str("spec:\n");
        for f in &self.fields {
            s.push_str(&format!("  {f}\n"));
        }
        s.push_str(&rules_block("ingress", &self.ingress));
        s.push_str(&rules_block("egress", &self.egress));
        s
    }
}

/// A `Profile`.
pub fn profile(name: &str, labels: &[(&str, &str)], ingress: &[&str], egress: &[&str]) -> String {
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: Profile\nmetadata:\n  name: {name}\nspec:\n"
    );
    if labels.is_empty() {
        s.push_str("  labelsToApply: {}\n");
    } else {
        s.push_str("  labelsToApply:\n");
        for (k, v) in labels {
            s.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    let own = |r: &[&str]| r.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    s.push_str(&rules_block("ingress", &own(ingress)));
    s.push_str(&rules_block("egress", &own(egress)));
    s
}

/// A `Tier`; `order` and `default_action` optional.
pub fn tier(name: &str, order: Option<f64>, default_action: Option<&str>) -> String {
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n"
    );
    if let Some(o) = order {
        s.push_str(&format!("  order: {o}\n"));
    }
    if let Some(a) = default_action {
        s.push_str(&format!("  defaultAction: {a}\n"));
    }
    if order.is_none() && default_action.is_none() {
        s.push_str("  {}\n");
        s = s.replace("spec:\n  {}\n", "spec: {}\n");
    }
    s
}

/// A `HostEndpoint`.
pub fn hep(
    name: &str,
    node: &str,
    iface: &str,
    expected_ips: &[&str],
    labels: &[(&str, &str)],
    profiles: &[&str],
) -> String {
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: {name}\n"
    );
    s.push_str(&labels_block("  ", &owned(labels)));
    let ips: Vec<String> = expected_ips.iter().map(|x| x.to_string()).collect();
    let profs: Vec<String> = profiles.iter().map(|x| x.to_string()).collect();
    s.push_str(&format!(
        "spec:\n  node: {node}\n  interfaceName: \"{iface}\"\n  expectedIPs: {}\n  profiles: {}\n",
        list(&ips),
        list(&profs)
    ));
    s
}

/// A `GlobalNetworkSet` (`namespace: None`) or `NetworkSet`.
pub fn netset(
    namespace: Option<&str>,
    name: &str,
    labels: &[(&str, &str)],
    nets: &[&str],
) -> String {
    let kind = if namespace.is_some() {
        "NetworkSet"
    } else {
        "GlobalNetworkSet"
    };
    let mut s =
        format!("---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata:\n  name: {name}\n");
    if let Some(ns) = namespace {
        s.push_str(&format!("  namespace: {ns}\n"));
    }
    s.push_str(&labels_block("  ", &owned(labels)));
    let nets: Vec<String> = nets.iter().map(|x| x.to_string()).collect();
    s.push_str(&format!("spec:\n  nets: {}\n", list(&nets)));
    s
}

/// A Kubernetes `Namespace`.
pub fn namespace(name: &str, labels: &[(&str, &str)]) -> String {
    let mut s = format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n");
    s.push_str(&labels_block("  ", &owned(labels)));
    s
}

/// A Kubernetes `ServiceAccount`.
pub fn service_account(ns: &str, name: &str, labels: &[(&str, &str)]) -> String {
    let mut s = format!(
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
    );
    s.push_str(&labels_block("  ", &owned(labels)));
    s
}

/// An `IPPool`; `ipip` / `vxlan` are v3 modes (`Never`, `Always`,
/// `CrossSubnet`).
pub fn ippool(name: &str, cidr: &str, ipip: &str, vxlan: &str, nat: bool) -> String {
    format!(
        "---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: {name}\nspec:\n  cidr: {cidr}\n  ipipMode: {ipip}\n  vxlanMode: {vxlan}\n  natOutgoing: {nat}\n"
    )
}

/// A Calico `Node` with a BGP IPv4 address (CIDR form) and optional AS
/// number.
pub fn node(name: &str, ipv4: &str, asn: Option<u32>, labels: &[(&str, &str)]) -> String {
    let mut s =
        format!("---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: {name}\n");
    s.push_str(&labels_block("  ", &owned(labels)));
    s.push_str(&format!("spec:\n  bgp:\n    ipv4Address: {ipv4}\n"));
    if let Some(a) = asn {
        s.push_str(&format!("    asNumber: {a}\n"));
    }
    s
}

/// A `FelixConfiguration` (`default` or `node.<name>`) with raw spec
/// fields, e.g. `("logSeverityScreen", "Debug")`.
pub fn felix_config(name: &str, fields: &[(&str, &str)]) -> String {
    let mut s = format!(
        "---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata:\n  name: {name}\nspec:\n"
    );
    for (k, v) in fields {
        s.push_str(&format!("  {k}: {v}\n"));
    }
    s
}

/// A `HostEndpoint` with named ports: (name, protocol as in v3, number).
pub fn hep_with_ports(
    name: &str,
    node: &str,
    iface: &str,
    expected_ips: &[&str],
    labels: &[(&str, &str)],
    ports: &[(&str, &str, u16)],
) -> String {
    let mut s = hep(name, node, iface, expected_ips, labels, &[]);
    if !ports.is_empty() {
        s.push_str("  ports:\n");
        for (n, p, num) in ports {
            s.push_str(&format!("  - {{name: {n}, protocol: {p}, port: {num}}}\n"));
        }
    }
    s
}
