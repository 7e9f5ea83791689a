use super::yaml;

fn gnp(spec: &str) -> String {
    format!("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: p}}\nspec:\n{spec}")
}

fn res(kind: &str, meta: &str, spec: &str) -> String {
    format!("apiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {meta}\nspec: {spec}\n")
}

/// Each invalid resource must fail with an error naming this field.
#[test]
fn invalid_resources_name_the_field_at_fault() {
    let ing = |rule: &str| gnp(&format!("  ingress:\n  - {rule}\n"));
    let wep = |extra: &str| {
        res("WorkloadEndpoint", "{name: w, namespace: n}", &format!("{{node: n1, orchestrator: k8s, pod: p, endpoint: eth0, interfaceName: cali1, ipNetworks: [10.65.0.1/32]{extra}}}"))
    };
    let cases: Vec<(String, &str)> = vec![
        (ing("{action: Allow, source: {nets: [10.0.0.0/8, 10.0.0.1/8]}}"), "spec.ingress[0].source.nets[1]"),
        (ing("{action: Allow, source: {nets: [nonsense]}}"), "spec.ingress[0].source.nets[0]"),
        (ing("{action: Allow, source: {nets: [10.0.0.0/8], notNets: ['fd00::/64']}}"), "spec.ingress[0].source.notNets"),
        (ing("{action: Allow, destination: {notNets: [0.0.0.0/0]}}"), "spec.ingress[0].destination.notNets[0]"),
        (ing("{action: Allow, ipVersion: 6, source: {nets: [10.0.0.0/8]}}"), "spec.ingress[0].source.nets"),
        (ing("{action: Accept}"), "spec.ingress[0].action"),
        (ing("{}"), "spec.ingress[0].action"),
        (ing("{action: Allow, ipVersion: 5}"), "spec.ingress[0].ipVersion"),
        (ing("{action: Allow, protocol: tcp}"), "spec.ingress[0].protocol"),
        (ing("{action: Allow, protocol: 0}"), "spec.ingress[0].protocol"),
        (ing("{action: Allow, notProtocol: 256}"), "spec.ingress[0].notProtocol"),
        (ing("{action: Allow, protocol: ICMP, destination: {ports: [80]}}"), "spec.ingress[0].destination.ports"),
        (ing("{action: Allow, protocol: UDPLite, destination: {ports: [80]}}"), "spec.ingress[0].destination.ports"),
        (ing("{action: Allow, destination: {ports: [80]}}"), "spec.ingress[0].destination.ports"),
        (ing("{action: Allow, protocol: TCP, destination: {ports: ['2000:1000']}}"), "spec.ingress[0].destination.ports[0]"),
        (ing("{action: Allow, protocol: TCP, destination: {ports: [0]}}"), "spec.ingress[0].destination.ports[0]"),
        (ing("{action: Allow, protocol: TCP, source: {notPorts: [70000]}}"), "spec.ingress[0].source.notPorts[0]"),
        (ing("{action: Allow, protocol: TCP, destination: {ports: [Bad_Name]}}"), "spec.ingress[0].destination.ports[0]"),
        (ing("{action: Allow, protocol: ICMP, icmp: {type: 255}}"), "spec.ingress[0].icmp.type"),
        (ing("{action: Allow, protocol: ICMP, icmp: {code: 1}}"), "spec.ingress[0].icmp.code"),
        (ing("{action: Allow, protocol: TCP, icmp: {type: 8}}"), "spec.ingress[0].icmp"),
        (ing("{action: Allow, protocol: ICMP, ipVersion: 6}"), "spec.ingress[0].protocol"),
        (ing("{action: Allow, notICMP: {code: 3}}"), "spec.ingress[0].notICMP.code"),
        (ing("{action: Allow, source: {selector: 'a ==='}}"), "spec.ingress[0].source.selector"),
        (ing("{action: Allow, source: {selector: 'global()'}}"), "spec.ingress[0].source.selector"),
        (ing("{action: Allow, source: {namespaceSelector: 'global() && a == \"b\"'}}"), "spec.ingress[0].source.namespaceSelector"),
        (ing("{action: Allow, source: {serviceAccounts: {selector: 'x =='}}}"), "spec.ingress[0].source.serviceAccounts.selector"),
        (ing("{action: Deny, http: {methods: [GET]}}"), "spec.ingress[0].http"),
        (ing("{action: Allow, http: {methods: [GET, GET]}}"), "spec.ingress[0].http.methods"),
        (ing("{action: Allow, http: {paths: [{exact: nope}]}}"), "spec.ingress[0].http.paths[0]"),
        (ing("{action: Allow, source: {services: {name: svc, namespace: n}, selector: a == 'b'}}"), "spec.ingress[0].source.services"),
        (ing("{action: Allow, destination: {services: {name: svc, namespace: n}}}"), "spec.ingress[0].destination.services"),
        (ing("{action: Allow, metadata: {annotations: {'bad key!': x}}}"), "spec.ingress[0].metadata.annotations[bad key!]"),
        (gnp("  egress:\n  - {action: Allow, http: {methods: [GET]}}\n"), "spec.egress[0].http"),
        (gnp("  selector: 'has('\n"), "spec.selector"),
        (gnp("  serviceAccountSelector: 'global()'\n"), "spec.serviceAccountSelector"),
        (gnp("  types: [Ingress, Ingress]\n"), "spec.types"),
        (gnp("  types: [Forward]\n"), "spec.types[0]"),
        (gnp("  preDNAT: true\n  applyOnForward: true\n  egress: [{action: Allow}]\n"), "spec.egress"),
        (gnp("  doNotTrack: true\n"), "spec.applyOnForward"),
        (gnp("  performanceHints: [Fast]\n"), "spec.performanceHints[0]"),
        (res("GlobalNetworkPolicy", "{name: a.b.c}", "{}"), "metadata.name"),
        (res("GlobalNetworkPolicy", "{name: Upper}", "{}"), "metadata.name"),
        (res("NetworkPolicy", "{name: p, namespace: Bad_NS}", "{}"), "metadata.namespace"),
        (res("Tier", "{name: a.b}", "{}"), "metadata.name"),
        (res("Tier", "{name: t}", "{defaultAction: Allow}"), "spec.defaultAction"),
        (res("Tier", "{name: default}", "{order: 5}"), "spec.order"),
        (res("Tier", "{name: t, labels: {'a/b/c': x}}", "{}"), "metadata.labels[a/b/c]"),
        (res("Profile", "{name: p}", "{labelsToApply: {k: 'bad value!'}}"), "spec.labelsToApply[k]"),
        (wep(", mac: 'zz:00:00:00:00:00'"), "spec.mac"),
        (wep(", ports: [{name: http, protocol: ICMP, port: 80}]"), "spec.ports[0].protocol"),
        (wep(", ports: [{name: http, protocol: TCP, port: 0}]"), "spec.ports[0].port"),
        (wep(", ports: [{protocol: TCP, port: 80}]"), "spec.ports[0].name"),
        (wep(", ipv4Gateway: 'fd00::1'"), "spec.ipv4Gateway"),
        (wep(", ipNATs: [{internalIP: 10.65.9.9, externalIP: 192.0.2.1}]"), "spec.ipNATs[0].internalIP"),
        (wep(", profiles: ['Bad Profile']"), "spec.profiles[0]"),
        (res("WorkloadEndpoint", "{name: w, namespace: n}", "{node: n1, interfaceName: cali1, ipNetworks: [10.65.0.0/24]}"), "spec.ipNetworks[0]"),
        (res("WorkloadEndpoint", "{name: w, namespace: n}", "{node: n1, interfaceName: cali-name-too-long, ipNetworks: [10.65.0.1/32]}"), "spec.interfaceName"),
        (res("WorkloadEndpoint", "{name: w, namespace: n}", "{interfaceName: cali1, ipNetworks: [10.65.0.1/32]}"), "spec.node"),
        (res("HostEndpoint", "{name: h}", "{node: n1, interfaceName: eth0, expectedIPs: [1.2.3]}"), "spec.expectedIPs[0]"),
        (res("HostEndpoint", "{name: h}", "{node: n1}"), "spec"),
        (res("GlobalNetworkSet", "{name: s}", "{nets: [10.0.0.0/33]}"), "spec.nets[0]"),
        (res("GlobalNetworkSet", "{name: s, labels: {projectcalico.org/namespace: x}}", "{}"), "metadata.labels[projectcalico.org/namespace]"),
        (res("IPPool", "{name: p}", "{cidr: 10.65.0.1/16}"), "spec.cidr"),
        (res("IPPool", "{name: p}", "{cidr: 10.65.0.0/16, ipipMode: Always, vxlanMode: Always}"), "spec.ipipMode"),
        (res("IPPool", "{name: p}", "{cidr: 10.65.0.0/16, vxlanMode: Sometimes}"), "spec.vxlanMode"),
        (res("IPPool", "{name: p}", "{cidr: 10.65.0.0/16, blockSize: 8}"), "spec.blockSize"),
        (res("IPPool", "{name: p}", "{cidr: 10.65.0.0/16, allowedUses: [Everything]}"), "spec.allowedUses[0]"),
        (res("Node", "{name: n}", "{bgp: {}}"), "spec.bgp"),
        (res("Node", "{name: n}", "{bgp: {ipv4Address: 'fd00::1/64'}}"), "spec.bgp.ipv4Address"),
        (res("Node", "{name: n}", "{ipv4VXLANTunnelAddr: 300.1.1.1}"), "spec.ipv4VXLANTunnelAddr"),
        (res("FelixConfiguration", "{name: default}", "{logSeverityScren: Info}"), "spec.logSeverityScren"),
        (res("FelixConfiguration", "{name: default}", "{bpfEnabled: yes-please}"), "spec.bpfEnabled"),
        (res("FelixConfiguration", "{name: default}", "{iptablesRefreshInterval: 10 parsecs}"), "spec.iptablesRefreshInterval"),
        (res("IPAMBlock", "{name: b}", "{cidr: nope}"), "spec.cidr"),
        ("apiVersion: v1\nkind: Namespace\nmetadata: {name: Bad.NS}\n".to_owned(), "metadata.name"),
    ];
    let mut failures = Vec::new();
    for (text, field) in &cases {
        let docs = yaml(text);
        assert_eq!(docs.len(), 1, "{text}");
        match &docs[0].result {
            Ok(_) => failures.push(format!("accepted, expected error at {field}:\n{text}")),
            Err(e) if e.field != *field => failures.push(format!(
                "error at {:?} ({}), expected {field}:\n{text}",
                e.field, e.reason
            )),
            Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Valid edge cases that upstream accepts.
#[test]
fn valid_edge_cases_are_accepted() {
    let ok = [
        gnp("  ingress:\n  - {action: Allow, protocol: TCP, destination: {ports: [80, '1000:2000', http]}}\n"),
        gnp("  ingress:\n  - {action: Allow, destination: {ports: [http]}}\n"),
        gnp("  ingress:\n  - {action: Allow, protocol: 6, destination: {ports: [22]}}\n"),
        gnp("  ingress:\n  - {action: Allow, protocol: '17', destination: {ports: [53]}}\n"),
        gnp("  ingress:\n  - {action: Allow, protocol: ICMPv6, ipVersion: 6, icmp: {type: 128, code: 0}}\n"),
        gnp("  ingress:\n  - {action: Pass, source: {namespaceSelector: global()}}\n"),
        gnp("  ingress:\n  - {action: Log, source: {nets: ['fd00:65::/64']}}\n"),
        gnp("  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny}]\n"),
        res("NetworkPolicy", "{name: knp.default.some.name, namespace: n}", "{}"),
        res("NetworkPolicy", "{name: tier1.pol, namespace: n}", "{tier: tier1}"),
        res("Tier", "{name: default}", "{order: 1000000, defaultAction: Deny}"),
        res("GlobalNetworkSet", "{name: s}", "{nets: [10.0.0.1, '10.1.2.3/8', 'fd00::1']}"),
    ];
    for text in ok {
        let docs = yaml(&text);
        if let Err(e) = &docs[0].result {
            panic!("rejected: {e}\n{text}");
        }
    }
}
