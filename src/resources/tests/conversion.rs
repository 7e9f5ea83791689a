use super::super::prefix_selector_labels;
use super::{entries, policy};
use crate::model::{Action, EncapMode, Key, Port, Protocol, Value};

fn np(ns: &str, spec: &str) -> String {
    format!("apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: {ns}}}\nspec:\n{spec}")
}

fn gnp(spec: &str) -> String {
    format!("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: p}}\nspec:\n{spec}")
}

fn canon(s: &str) -> String {
    crate::selector::normalize(s).unwrap()
}

#[test]
fn prefixing_rewrites_every_label_and_nothing_else() {
    assert_eq!(
        prefix_selector_labels("a == 'x'", "pcns.").unwrap(),
        "pcns.a == \"x\""
    );
    assert_eq!(
        prefix_selector_labels("!has(key) || (has(key) && !key in {'value'})", "pcns.").unwrap(),
        "(!has(pcns.key) || (has(pcns.key) && !pcns.key in {\"value\"}))"
    );
    assert_eq!(
        prefix_selector_labels(
            "a not in {'x y', \"it's\"} && b contains 'has(' && all()",
            "p."
        )
        .unwrap(),
        canon("p.a not in {'x y', \"it's\"} && p.b contains 'has(' && all()")
    );
    assert_eq!(
        prefix_selector_labels("c starts with 'a' || d ends with \"b\"", "q/").unwrap(),
        canon("q/c starts with 'a' || q/d ends with 'b'")
    );
}

#[test]
fn namespaced_policy_selector_is_anded_with_its_namespace() {
    let p = policy(&np("ns1", "  selector: app == 'web'\n"));
    assert_eq!(
        p.selector,
        "(app == 'web') && projectcalico.org/namespace == 'ns1'"
    );
    assert_eq!(p.namespace, "ns1");
    assert_eq!(p.tier, "default");
    let p = policy(&np(
        "ns1",
        "  selector: \"\"\n  serviceAccountSelector: role == 'development'\n",
    ));
    assert_eq!(
        p.selector,
        "(projectcalico.org/namespace == 'ns1') && pcsa.role == \"development\""
    );
}

#[test]
fn global_policy_selectors_follow_upstream_composition() {
    let sel = "  selector: mylabel == 'selectme'\n";
    let cases = [
        ("  serviceAccountSelector: role == 'development'\n", "(mylabel == 'selectme') && pcsa.role == \"development\""),
        ("  serviceAccountSelector: all()\n", "(mylabel == 'selectme') && has(projectcalico.org/serviceaccount)"),
        ("  namespaceSelector: name == 'testing'\n", "(mylabel == 'selectme') && pcns.name == \"testing\""),
        ("  namespaceSelector: all()\n", "(mylabel == 'selectme') && has(projectcalico.org/namespace)"),
        (
            "  namespaceSelector: name == 'testing'\n  serviceAccountSelector: role == 'development'\n",
            "((mylabel == 'selectme') && pcns.name == \"testing\") && pcsa.role == \"development\"",
        ),
    ];
    for (extra, want) in cases {
        assert_eq!(
            policy(&gnp(&format!("{sel}{extra}"))).selector,
            want,
            "{extra}"
        );
    }
}

#[test]
fn rule_selectors_in_a_namespaced_policy_are_scoped_to_the_namespace() {
    let p = policy(&np(
        "namespace2",
        "  ingress:\n  - action: Allow\n    source: {selector: \"mylabel == 'value1'\", notSelector: has(label1)}\n    destination: {notSelector: has(label2)}\n",
    ));
    let r = &p.inbound_rules[0];
    assert_eq!(
        r.src_selector,
        "(projectcalico.org/namespace == 'namespace2') && (mylabel == 'value1')"
    );
    assert_eq!(
        r.dst_selector,
        "projectcalico.org/namespace == 'namespace2'"
    );
    assert_eq!(r.not_src_selector, "has(label1)");
    assert_eq!(r.not_dst_selector, "has(label2)");
    assert_eq!(r.original_src_selector, "mylabel == 'value1'");
    assert_eq!(r.original_not_dst_selector, "has(label2)");
}

#[test]
fn rule_namespace_selectors_map_to_pcns_labels() {
    let rule = |er: &str| {
        let p = policy(&np(
            "namespace",
            &format!("  ingress:\n  - action: Allow\n    source: {er}\n"),
        ));
        p.inbound_rules[0].src_selector.clone()
    };
    assert_eq!(
        rule("{namespaceSelector: \"namespacelabel1 == 'value1'\"}"),
        "pcns.namespacelabel1 == \"value1\""
    );
    assert_eq!(
        rule("{selector: \"projectcalico.org/orchestrator == 'k8s'\", namespaceSelector: \"key == 'value'\"}"),
        "(pcns.key == \"value\") && (projectcalico.org/orchestrator == 'k8s')"
    );
    assert_eq!(
        rule("{namespaceSelector: \"!has(key) || (has(key) && !key in {'value'})\"}"),
        "(!has(pcns.key) || (has(pcns.key) && !pcns.key in {\"value\"}))"
    );
    assert_eq!(
        rule("{namespaceSelector: all()}"),
        "has(projectcalico.org/namespace)"
    );
    assert_eq!(
        rule("{namespaceSelector: global()}"),
        "!has(projectcalico.org/namespace)"
    );
}

#[test]
fn rule_service_account_matches_map_to_pcsa_labels() {
    let p = policy(&np(
        "namespace",
        "  ingress:\n  - action: Allow\n    source:\n      serviceAccounts: {names: [sa1, sa2], selector: \"key == 'value1'\"}\n    destination:\n      namespaceSelector: \"nskey == 'nsvalue'\"\n      serviceAccounts: {names: [sa3], selector: \"key == 'value2'\"}\n",
    ));
    let r = &p.inbound_rules[0];
    assert_eq!(
        r.src_selector,
        "(projectcalico.org/namespace == 'namespace') && ((pcsa.key == \"value1\") && (projectcalico.org/serviceaccount in {\"sa1\", \"sa2\"}))"
    );
    assert_eq!(
        r.dst_selector,
        "(pcns.nskey == \"nsvalue\") && ((pcsa.key == \"value2\") && (projectcalico.org/serviceaccount in {\"sa3\"}))"
    );
    assert_eq!(r.original_src_service_account_names, ["sa1", "sa2"]);
    assert_eq!(r.original_dst_service_account_selector, "key == 'value2'");
    // In a global policy (no namespace) only the service-account part remains.
    let p = policy(&gnp("  ingress:\n  - action: Allow\n    source:\n      serviceAccounts: {names: [sa1, sa2], selector: \"key == 'value1'\"}\n"));
    assert_eq!(
        p.inbound_rules[0].src_selector,
        "(pcsa.key == \"value1\") && (projectcalico.org/serviceaccount in {\"sa1\", \"sa2\"})"
    );
}

#[test]
fn profile_and_global_rules_keep_plain_selectors() {
    let p = policy(&gnp(
        "  ingress:\n  - action: Allow\n    source: {selector: has(foo)}\n",
    ));
    assert_eq!(p.inbound_rules[0].src_selector, "has(foo)");
    assert_eq!(p.inbound_rules[0].dst_selector, "");
}

#[test]
fn policy_types_default_from_the_rules_present() {
    let t = |spec: &str| policy(&gnp(spec)).types.clone();
    assert_eq!(t("  selector: all()\n"), ["ingress"]);
    assert_eq!(t("  ingress: [{action: Allow}]\n"), ["ingress"]);
    assert_eq!(t("  egress: [{action: Allow}]\n"), ["egress"]);
    assert_eq!(
        t("  ingress: [{action: Allow}]\n  egress: [{action: Allow}]\n"),
        ["ingress", "egress"]
    );
    assert_eq!(t("  types: [Egress]\n"), ["egress"]);
}

#[test]
fn rule_fields_convert() {
    let p = policy(&gnp(
        "  order: 10\n  tier: security\n  ingress:\n  - action: Pass\n    protocol: TCP\n    source: {nets: [10.65.0.0/16], notPorts: ['1000:2000']}\n    destination: {ports: [80, http, '8080:8080']}\n  - {action: Deny, protocol: ICMP, icmp: {type: 8, code: 0}, notProtocol: 17}\n",
    ));
    assert_eq!(p.order, Some(10.0));
    assert_eq!(p.tier, "security");
    let r = &p.inbound_rules[0];
    assert_eq!(r.action, Action::Pass);
    assert_eq!(r.protocol, Some(Protocol::Name("TCP".into())));
    assert_eq!(
        r.src_nets,
        ["10.65.0.0/16".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(
        r.not_src_ports,
        [Port::Range {
            first: 1000,
            last: 2000
        }]
    );
    assert_eq!(
        r.dst_ports,
        [
            Port::Number(80),
            Port::Named("http".into()),
            Port::Number(8080)
        ]
    );
    let r = &p.inbound_rules[1];
    assert_eq!((r.icmp_type, r.icmp_code), (Some(8), Some(0)));
    assert_eq!(r.not_protocol, Some(Protocol::Number(17)));
}

#[test]
fn default_tier_prefix_is_dropped_from_the_policy_key() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: default.allow}\nspec: {}\n");
    match &e[0].0 {
        Key::Policy(k) => {
            assert_eq!(k.name, "allow");
            assert_eq!(k.kind, "GlobalNetworkPolicy");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn namespace_becomes_kns_profile_and_namespace_labels() {
    let e = entries("apiVersion: v1\nkind: Namespace\nmetadata: {name: prod, labels: {team: a}}\n");
    let Value::Profile(p) = &e[0].1 else { panic!() };
    assert_eq!(e[0].0, Key::Profile("kns.prod".into()));
    assert_eq!(p.labels.get("pcns.team").map(String::as_str), Some("a"));
    assert_eq!(
        p.labels
            .get("pcns.projectcalico.org/name")
            .map(String::as_str),
        Some("prod")
    );
    assert_eq!(p.labels.len(), 2);
    assert_eq!(p.inbound_rules.len(), 1);
    assert_eq!(p.inbound_rules[0].action, Action::Allow);
    assert_eq!(p.outbound_rules.len(), 1);
    assert_eq!(e[1].0, Key::Namespace("prod".into()));
    let Value::Namespace(l) = &e[1].1 else {
        panic!()
    };
    assert_eq!(l.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        l.get("projectcalico.org/name").map(String::as_str),
        Some("prod")
    );
}

#[test]
fn service_account_becomes_ksa_profile_and_labels() {
    let e = entries("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: api, namespace: prod, labels: {role: x}}\nsecrets: []\n");
    assert_eq!(e[0].0, Key::Profile("ksa.prod.api".into()));
    let Value::Profile(p) = &e[0].1 else { panic!() };
    assert_eq!(p.labels.get("pcsa.role").map(String::as_str), Some("x"));
    assert_eq!(
        p.labels
            .get("pcsa.projectcalico.org/name")
            .map(String::as_str),
        Some("api")
    );
    assert!(p.inbound_rules.is_empty() && p.outbound_rules.is_empty());
    assert_eq!(
        e[1].0,
        Key::ServiceAccount {
            namespace: "prod".into(),
            name: "api".into()
        }
    );
}

#[test]
fn workload_endpoint_converts_with_upstream_labels_and_ids() {
    let e = entries(
        "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata:\n  name: node1-k8s-frontend-eth0\n  namespace: prod\n  labels: {app: frontend, pcns.sneaky: x}\nspec:\n  node: node1\n  orchestrator: k8s\n  pod: frontend\n  endpoint: eth0\n  serviceAccountName: web\n  interfaceName: cali12345\n  mac: 'EE:EE:EE:EE:EE:01'\n  ipNetworks: [10.65.0.5/32, 'fd00:65::5/128']\n  profiles: [kns.prod, ksa.prod.web]\n  ports:\n  - {name: http, protocol: TCP, port: 8080}\n  - {protocol: UDP, port: 53, hostPort: 53}\n",
    );
    let (Key::WorkloadEndpoint(k), Value::WorkloadEndpoint(w)) = &e[0] else {
        panic!("{e:?}")
    };
    assert_eq!(k.hostname, "node1");
    assert_eq!(k.orchestrator_id, "k8s");
    assert_eq!(k.workload_id, "prod/frontend");
    assert_eq!(k.endpoint_id, "eth0");
    assert_eq!(w.name, "cali12345");
    assert_eq!(w.mac.as_deref(), Some("ee:ee:ee:ee:ee:01"));
    assert_eq!(
        w.ipv4_nets,
        ["10.65.0.5/32".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(
        w.ipv6_nets,
        ["fd00:65::5/128".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(w.profile_ids, ["kns.prod", "ksa.prod.web"]);
    let labels: Vec<(&str, &str)> = w
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("app", "frontend"),
            ("projectcalico.org/namespace", "prod"),
            ("projectcalico.org/orchestrator", "k8s"),
            ("projectcalico.org/serviceaccount", "web"),
        ]
    );
    assert_eq!(w.ports.len(), 1, "only named ports are kept");
    assert_eq!(w.ports[0].port, 8080);
    assert_eq!(w.state, "active");
}

#[test]
fn non_k8s_workload_id_is_spec_workload_and_empty_networks_produce_nothing() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: w, namespace: ns}\nspec: {node: n1, orchestrator: openstack, workload: vm1, endpoint: tap0, interfaceName: tap0, ipNetworks: [10.65.1.1]}\n");
    let Key::WorkloadEndpoint(k) = &e[0].0 else {
        panic!()
    };
    assert_eq!(k.workload_id, "vm1");
    let e = entries("apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: w, namespace: ns}\nspec: {node: n1, orchestrator: k8s, pod: p, endpoint: eth0, interfaceName: cali1}\n");
    assert!(e.is_empty());
}

#[test]
fn network_sets_are_keyed_and_labelled_as_upstream() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata: {name: ext, namespace: prod, labels: {a: b}}\nspec: {nets: [10.1.2.3/8, 192.0.2.1]}\n");
    let (Key::NetworkSet(k), Value::NetworkSet(s)) = &e[0] else {
        panic!()
    };
    assert_eq!(k.name, "prod/ext");
    assert_eq!(
        s.labels
            .get("projectcalico.org/namespace")
            .map(String::as_str),
        Some("prod")
    );
    assert_eq!(s.profile_ids, ["kns.prod"]);
    let nets: Vec<String> = s.nets.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.0.2.1/32"]);
    let e = entries("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: ext}\nspec: {nets: [10.0.0.0/8]}\n");
    let (Key::NetworkSet(k), Value::NetworkSet(s)) = &e[0] else {
        panic!()
    };
    assert_eq!(k.name, "ext");
    assert!(s.labels.is_empty() && s.profile_ids.is_empty());
}

#[test]
fn ip_pool_node_and_block_convert() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.65.0.0/16, natOutgoing: true, vxlanMode: CrossSubnet}\n");
    let (Key::IpPool(c), Value::IpPool(p)) = &e[0] else {
        panic!()
    };
    assert_eq!(c.to_string(), "10.65.0.0/16");
    assert!(p.masquerade);
    assert_eq!(p.vxlan_mode, EncapMode::CrossSubnet);
    assert_eq!(p.ipip_mode, EncapMode::Never);
    assert_eq!(p.allowed_uses, ["Workload", "Tunnel"]);
    assert_eq!(p.assignment_mode, "Automatic");

    let e = entries("apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node1}\nspec:\n  bgp: {ipv4Address: 10.0.0.1/24, asNumber: 64512}\n  ipv4VXLANTunnelAddr: 10.65.0.1\n  vxlanTunnelMACAddr: 66:aa:bb:cc:dd:ee\n  addresses: [{address: 10.0.0.1}]\n");
    let (Key::Node(n), Value::Node(v)) = &e[0] else {
        panic!()
    };
    assert_eq!(n, "node1");
    assert_eq!(
        v.ipv4_address.map(|a| a.to_string()).as_deref(),
        Some("10.0.0.1/24")
    );
    assert_eq!(
        v.ipv4_vxlan_tunnel_addr.map(|a| a.to_string()).as_deref(),
        Some("10.65.0.1")
    );
    assert_eq!(v.vxlan_tunnel_mac.as_deref(), Some("66:aa:bb:cc:dd:ee"));
    assert_eq!(v.as_number.as_deref(), Some("64512"));
    assert_eq!(v.addresses, ["10.0.0.1"]);

    let e = entries("apiVersion: projectcalico.org/v3\nkind: IPAMBlock\nmetadata: {name: b}\nspec: {cidr: 10.65.0.64/26, affinity: 'host:node1', allocations: [0, null], unallocated: [1], attributes: []}\n");
    let (Key::IpamBlock(c), Value::IpamBlock(b)) = &e[0] else {
        panic!()
    };
    assert_eq!(c.to_string(), "10.65.0.64/26");
    assert_eq!(b.affinity_host.as_deref(), Some("node1"));
}

#[test]
fn felix_configuration_maps_fields_to_upstream_parameter_names() {
    let e = entries(
        "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata:\n  name: default\n  annotations: {config.projectcalico.org/ExtraParam: '7'}\nspec:\n  logSeverityScreen: Debug\n  bpfEnabled: false\n  ipipEnabled: true\n  iptablesRefreshInterval: 1m30s\n  iptablesLockProbeInterval: 50ms\n  reportingInterval: 0.5s\n  interfacePrefix: cali\n  failsafeInboundHostPorts: [{protocol: TCP, port: 22}, {protocol: UDP, port: 68, net: 'fd00::/64'}]\n  ipv6Support: false\n  routeTableRanges: [{min: 1, max: 250}]\n  healthTimeoutOverrides: [{name: CalculationGraph, timeout: 90s}]\n  kubeNodePortRanges: ['30000:32767']\n  nftablesMode: Enabled\n",
    );
    let got: Vec<(String, String)> = e
        .iter()
        .map(|(k, v)| match (k, v) {
            (Key::GlobalConfig(n), Value::Config(s)) => (n.clone(), s.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let want = [
        ("LogSeverityScreen", "Debug"),
        ("BPFEnabled", "false"),
        ("IpInIpEnabled", "true"),
        ("IptablesRefreshInterval", "90"),
        ("IptablesLockProbeIntervalMillis", "50"),
        ("ReportingIntervalSecs", "0.5"),
        ("InterfacePrefix", "cali"),
        ("FailsafeInboundHostPorts", "tcp:22,udp:[fd00::/64]:68"),
        ("Ipv6Support", "false"),
        ("RouteTableRanges", "1-250"),
        ("HealthTimeoutOverrides", "CalculationGraph=1m30s"),
        ("KubeNodePortRanges", "[30000:32767]"),
        ("NFTablesMode", "Enabled"),
        ("ExtraParam", "7"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);

    let e = entries("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.node1}\nspec: {logSeverityScreen: Info}\n");
    assert_eq!(
        e[0].0,
        Key::HostConfig {
            host: "node1".into(),
            name: "LogSeverityScreen".into()
        }
    );
    let e = entries("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: other}\nspec: {logSeverityScreen: Info}\n");
    assert!(e.is_empty());
}

#[test]
fn cluster_information_sets_ready_only_when_given() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: ClusterInformation\nmetadata: {name: default}\nspec: {datastoreReady: false, clusterGUID: abc}\n");
    assert!(e.contains(&(Key::Ready, Value::Ready(false))));
    assert!(e.contains(&(
        Key::GlobalConfig("ClusterGUID".into()),
        Value::Config("abc".into())
    )));
    let e = entries("apiVersion: projectcalico.org/v3\nkind: ClusterInformation\nmetadata: {name: default}\nspec: {}\n");
    assert!(!e.iter().any(|(k, _)| *k == Key::Ready));
}

#[test]
fn tier_default_action_is_deny_unless_pass() {
    let e = entries("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\nspec: {order: 50, defaultAction: Pass}\n");
    let Value::Tier(t) = &e[0].1 else { panic!() };
    assert_eq!(t.default_action, Action::Pass);
    let e = entries("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\n");
    let Value::Tier(t) = &e[0].1 else { panic!() };
    assert_eq!(t.default_action, Action::Deny);
}

#[test]
fn go_durations_parse_and_format_like_go() {
    use super::super::felixconfig::{format_go_duration, parse_go_duration};
    assert_eq!(parse_go_duration("1h2m3.5s"), Some(3_723_500_000_000));
    assert_eq!(parse_go_duration("100ms"), Some(100_000_000));
    assert_eq!(parse_go_duration("0"), Some(0));
    assert_eq!(parse_go_duration("10"), None);
    assert_eq!(parse_go_duration("5 s"), None);
    assert_eq!(format_go_duration(90_000_000_000), "1m30s");
    assert_eq!(format_go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(format_go_duration(1_500_000), "1.5ms");
    assert_eq!(format_go_duration(0), "0s");
}
