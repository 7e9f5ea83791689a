//! Kernel tests: the whole wiring in an actor runtime, programming a
//! throwaway node network namespace joined to workload namespaces by
//! `cali*` veths wired as Calico's CNI plugin wires them; checked with real
//! traffic. Skipped (with a message) when the tools are missing.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use felix_actors::{InSync, SupervisorBuilder, SupervisorConfig, SupervisorHandle, UpdateBatch};
use felix_config::{Config, Source};
use felix_proto as pb;

use super::Payload;
use crate::daemon::messages::state_key;
use crate::dataplane::kernel::testns::TestNetns;
use crate::dataplane::kernel::SystemCommands;
use crate::dataplane::wiring::register;

fn cfg_with(kv: &[(&str, &str)]) -> Config {
    let layer: BTreeMap<String, String> = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (cfg, errs) = Config::build(&[(Source::ConfigFile, layer)]);
    assert!(errs.is_empty(), "{errs:?}");
    cfg
}

fn ns_ok(ns: &str, prog: &str, args: &[&str]) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn ns_out(ns: &str, prog: &str, args: &[&str]) -> String {
    Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// A workload namespace plugged into `node` by veth `iface`, as the CNI
/// plugin does it: addresses on eth0, IPv4 default route via 169.254.1.1
/// (answered by proxy ARP on the host side once Felix configures it), IPv6
/// default route via the host side's fixed link-local address (its MAC is
/// ee:ee:ee:ee:ee:ee).
fn plug(node: &TestNetns, wl: &TestNetns, iface: &str, ip: &str, ip6: &str) {
    let no_dad = [
        "-qw",
        "net.ipv6.conf.all.accept_dad=0",
        "net.ipv6.conf.default.accept_dad=0",
    ];
    node.sh("sysctl", &no_dad);
    wl.sh("sysctl", &no_dad);
    let peer = [
        "link",
        "add",
        iface,
        "address",
        "ee:ee:ee:ee:ee:ee",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &wl.name,
    ];
    node.sh("ip", &peer);
    node.sh("ip", &["link", "set", iface, "up"]);
    let v4 = format!("{ip}/32");
    let v6 = format!("{ip6}/128");
    wl.sh("ip", &["addr", "add", &v4, "dev", "eth0"]);
    wl.sh("ip", &["-6", "addr", "add", &v6, "dev", "eth0", "nodad"]);
    wl.sh("ip", &["link", "set", "eth0", "up"]);
    wl.sh(
        "ip",
        &[
            "route",
            "add",
            "169.254.1.1",
            "dev",
            "eth0",
            "scope",
            "link",
        ],
    );
    wl.sh(
        "ip",
        &[
            "route",
            "add",
            "default",
            "via",
            "169.254.1.1",
            "dev",
            "eth0",
        ],
    );
    let gw6 = "fe80::ecee:eeff:feee:eeee";
    wl.sh(
        "ip",
        &["-6", "route", "add", "default", "via", gw6, "dev", "eth0"],
    );
}

/// A TCP listener on `port` in `ns` accepting forever (killed on drop).
struct Listener(Child);

impl Listener {
    fn start(ns: &str, port: u16) -> Listener {
        let code = format!(
            "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('0.0.0.0',{port}))\ns.listen(16)\nwhile True:\n  c,_=s.accept()\n  c.close()\n"
        );
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", &code])
            .spawn()
            .unwrap();
        // The interpreter can take seconds to start on a loaded machine:
        // wait until the socket listens, so a refused connection means
        // policy and not a listener that was not up yet.
        let filter = format!("sport = :{port}");
        for _ in 0..200 {
            if !ns_out(ns, "ss", &["-Hltn", &filter]).trim().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Listener(child)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tcp_ok(ns: &str, ip: &str, port: u16) -> bool {
    let code = format!(
        "import socket,sys\ns=socket.socket()\ns.settimeout(1.5)\n\
         try:\n  s.connect(('{ip}',{port}))\nexcept Exception:\n  sys.exit(1)\n"
    );
    ns_ok(ns, "python3", &["-c", &code])
}

fn ping_ok(ns: &str, ip: &str) -> bool {
    ns_ok(ns, "ping", &["-c", "1", "-W", "1", ip])
}

fn ping6_ok(ns: &str, ip: &str) -> bool {
    ns_ok(ns, "ping", &["-6", "-c", "1", "-W", "1", ip])
}

fn profile(name: &str, allow: bool) -> Payload {
    let rules = if allow {
        vec![pb::Rule {
            action: "allow".into(),
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    Payload::ActiveProfileUpdate(pb::ActiveProfileUpdate {
        id: Some(pb::ProfileId { name: name.into() }),
        profile: Some(pb::Profile {
            inbound_rules: rules.clone(),
            outbound_rules: rules,
        }),
    })
}

fn policy_id() -> pb::PolicyId {
    pb::PolicyId {
        name: "allow-8080".into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    }
}

fn port_policy() -> Payload {
    Payload::ActivePolicyUpdate(pb::ActivePolicyUpdate {
        id: Some(policy_id()),
        policy: Some(pb::Policy {
            tier: "default".into(),
            inbound_rules: vec![pb::Rule {
                action: "allow".into(),
                protocol: Some(pb::Protocol {
                    number_or_name: Some(pb::protocol::NumberOrName::Name("tcp".into())),
                }),
                dst_ports: vec![pb::PortRange {
                    first: 8080,
                    last: 8080,
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
    })
}

fn wep(id: &str, iface: &str, ip: &str, profiles: &[&str], with_policy: bool) -> Payload {
    let tiers = if with_policy {
        vec![pb::TierInfo {
            name: "default".into(),
            ingress_policies: vec![policy_id()],
            egress_policies: Vec::new(),
            default_action: "Deny".into(),
        }]
    } else {
        Vec::new()
    };
    Payload::WorkloadEndpointUpdate(pb::WorkloadEndpointUpdate {
        id: Some(pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: id.into(),
            endpoint_id: "eth0".into(),
        }),
        endpoint: Some(pb::WorkloadEndpoint {
            state: "active".into(),
            name: iface.into(),
            profile_ids: profiles.iter().map(|s| s.to_string()).collect(),
            ipv4_nets: vec![format!("{ip}/32")],
            ipv6_nets: vec![format!(
                "fd00::{}/128",
                ip.rsplit('.').next().unwrap_or("9")
            )],
            tiers,
            ..Default::default()
        }),
    })
}

fn start(cfg: &Config, node: &TestNetns) -> SupervisorHandle<Payload> {
    let sc = SupervisorConfig {
        retry_interval: Duration::from_millis(500),
        ..SupervisorConfig::default()
    };
    let builder = SupervisorBuilder::new(sc, state_key);
    let seam = Arc::new(SystemCommands::in_netns(&node.name));
    register(builder, cfg, seam).unwrap().start().unwrap()
}

/// Waits until an apply that started after this call finished cleanly and
/// nothing is dirty.
async fn settle(h: &SupervisorHandle<Payload>) {
    let before = h.status.snapshot().applies;
    for _ in 0..400 {
        actix_rt::time::sleep(Duration::from_millis(50)).await;
        let s = h.status.snapshot();
        let clean = s.actors.iter().all(|a| !a.dirty);
        if s.applies > before && s.last_apply.as_ref().is_some_and(|l| l.ok) && clean {
            return;
        }
    }
    panic!("dataplane did not settle: {:#?}", h.status.snapshot());
}

fn dump(node: &TestNetns, h: &SupervisorHandle<Payload>) {
    for (p, a) in [
        ("iptables-legacy-save", vec!["-c"]),
        ("iptables-nft-save", vec!["-c"]),
        ("nft", vec!["list", "ruleset"]),
        ("ip", vec!["route"]),
        ("ip", vec!["link"]),
        (
            "sysctl",
            vec![
                "net.ipv4.conf.cali1.proxy_arp",
                "net.ipv4.ip_forward",
                "net.ipv4.conf.cali2.proxy_arp",
            ],
        ),
    ] {
        eprintln!("==== {p} {a:?}\n{}", ns_out(&node.name, p, &a));
    }
    eprintln!("{:#?}", h.status.snapshot());
}

/// `[packets:bytes]` counters of our rules in chains starting with `prefix`.
fn counters(node: &TestNetns, prefix: &str) -> Vec<String> {
    let mut out = ns_out(&node.name, "iptables-legacy-save", &["-c", "-t", "filter"]);
    if !out.contains(prefix) {
        out = ns_out(&node.name, "iptables-nft-save", &["-c", "-t", "filter"]);
    }
    out.lines()
        .filter(|l| l.contains(&format!("-A {prefix}")))
        .map(str::to_string)
        .collect()
}

/// What the policy tests need besides root and `ip`.
const TOOLS: &[&str] = &["ping", "python3", "sysctl"];

async fn policy_on_real_traffic(cfg_kv: &[(&str, &str)], iptables: bool) {
    let node = TestNetns::create();
    let (w1, w2) = (TestNetns::create(), TestNetns::create());
    // A node has an uplink and a default route (proxy ARP answers only for
    // destinations it can route elsewhere).
    node.sh(
        "ip",
        &[
            "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
        ],
    );
    node.sh("ip", &["addr", "add", "192.168.99.1/24", "dev", "uplink0"]);
    node.sh("ip", &["link", "set", "uplink1", "up"]);
    node.sh("ip", &["link", "set", "uplink0", "up"]);
    node.sh("ip", &["route", "add", "default", "dev", "uplink0"]);
    plug(&node, &w1, "cali1", "10.65.0.2", "fd00::2");
    plug(&node, &w2, "cali2", "10.65.0.3", "fd00::3");
    let _l8080 = Listener::start(&w2.name, 8080);
    let _l9090 = Listener::start(&w2.name, 9090);
    let cfg = cfg_with(cfg_kv);

    let h = start(&cfg, &node);
    let base = vec![
        profile("open", true),
        profile("closed", false),
        port_policy(),
        wep("w1", "cali1", "10.65.0.2", &["open"], false),
        wep("w2", "cali2", "10.65.0.3", &["open"], false),
    ];
    h.addr.do_send(UpdateBatch(base));
    h.addr.do_send(InSync);
    settle(&h).await;
    if !ping_ok(&w1.name, "10.65.0.3") {
        dump(&node, &h);
        panic!("profile allow must pass");
    }
    assert!(tcp_ok(&w1.name, "10.65.0.3", 9090));
    if !ping6_ok(&w1.name, "fd00::3") {
        eprintln!(
            "{}",
            ns_out(&node.name, "nft", &["list", "table", "ip6", "calico"])
        );
        eprintln!("{}", ns_out(&node.name, "ip", &["-6", "route"]));
        eprintln!("{}", ns_out(&node.name, "ip", &["-6", "neigh"]));
        eprintln!("{}", ns_out(&w1.name, "ip", &["-6", "neigh"]));
        panic!("IPv6: profile allow must pass");
    }

    // Default deny: a profile without rules.
    h.addr.do_send(UpdateBatch(vec![wep(
        "w2",
        "cali2",
        "10.65.0.3",
        &["closed"],
        false,
    )]));
    settle(&h).await;
    assert!(!ping_ok(&w1.name, "10.65.0.3"), "default deny must block");
    assert!(
        !ping6_ok(&w1.name, "fd00::3"),
        "IPv6: default deny must block"
    );
    assert!(!tcp_ok(&w1.name, "10.65.0.3", 8080));

    // A policy allowing one port.
    h.addr.do_send(UpdateBatch(vec![wep(
        "w2",
        "cali2",
        "10.65.0.3",
        &["closed"],
        true,
    )]));
    settle(&h).await;
    assert!(tcp_ok(&w1.name, "10.65.0.3", 8080), "policy port must pass");
    assert!(
        !tcp_ok(&w1.name, "10.65.0.3", 9090),
        "other port must be denied"
    );
    assert!(!ping_ok(&w1.name, "10.65.0.3"));
    assert!(tcp_ok(&w1.name, "10.65.0.3", 8080));

    let before = if iptables {
        counters(&node, "cali-pi-")
    } else {
        Vec::new()
    };
    if iptables {
        assert!(!before.is_empty(), "policy chain rules present");
        assert!(
            before.iter().any(|l| !l.starts_with("[0:0]")),
            "policy rule counted traffic: {before:?}"
        );
    }
    drop(h);
    actix_rt::time::sleep(Duration::from_millis(200)).await;

    // A second runtime with no memory and a datastore without w1.
    let h2 = start(&cfg, &node);
    h2.addr.do_send(UpdateBatch(vec![
        profile("open", true),
        profile("closed", false),
        port_policy(),
        wep("w2", "cali2", "10.65.0.3", &["closed"], true),
    ]));
    h2.addr.do_send(InSync);
    settle(&h2).await;
    if iptables {
        let after = counters(&node, "cali-pi-");
        assert_eq!(before, after, "unchanged rules must not be rewritten");
    }
    let rules = if iptables {
        ns_out(&node.name, "iptables-legacy-save", &["-t", "filter"])
            + &ns_out(&node.name, "iptables-nft-save", &["-t", "filter"])
    } else {
        ns_out(&node.name, "nft", &["list", "table", "ip", "calico"])
    };
    assert!(
        !rules.contains("cali-tw-cali1"),
        "stale endpoint chain swept"
    );
    assert!(rules.contains("cali-tw-cali2"));
    let routes = ns_out(&node.name, "ip", &["route", "show"]);
    assert!(!routes.contains("10.65.0.2"), "stale route swept: {routes}");
    assert!(routes.contains("10.65.0.3"), "{routes}");
    let routes6 = ns_out(&node.name, "ip", &["-6", "route", "show"]);
    assert!(
        !routes6.contains("fd00::2"),
        "stale IPv6 route swept: {routes6}"
    );
    assert!(routes6.contains("fd00::3"), "{routes6}");
    // w1 is no longer a known endpoint: its interface passes nothing.
    assert!(
        !tcp_ok(&w1.name, "10.65.0.3", 8080),
        "unknown cali interface must be dropped"
    );
    drop(h2);
}

#[actix_rt::test]
async fn iptables_policy_on_real_traffic_and_non_disruptive_resync() {
    felix_netns::require!(netns TOOLS);
    policy_on_real_traffic(&[("Ipv6Support", "true")], true).await;
}

#[actix_rt::test]
async fn nftables_policy_on_real_traffic_and_resync_sweep() {
    felix_netns::require!(netns [TOOLS, &["nft"]].concat());
    policy_on_real_traffic(
        &[("Ipv6Support", "true"), ("NFTablesMode", "Enabled")],
        false,
    )
    .await;
}

fn wep_remove(id: &str) -> Payload {
    Payload::WorkloadEndpointRemove(pb::WorkloadEndpointRemove {
        id: Some(pb::WorkloadEndpointId {
            orchestrator_id: "k8s".into(),
            workload_id: id.into(),
            endpoint_id: "eth0".into(),
        }),
    })
}

/// `ip -o monitor route` in `ns` while it lives; the lines it printed.
struct RouteMonitor(Option<Child>);

impl RouteMonitor {
    fn start(ns: &str) -> RouteMonitor {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "ip", "-o", "monitor", "route"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        RouteMonitor(Some(child))
    }

    fn finish(mut self) -> String {
        let Some(mut child) = self.0.take() else {
            return String::new();
        };
        let _ = child.kill();
        child
            .wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for RouteMonitor {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn has_routes(node: &TestNetns) -> (bool, bool) {
    let v4 = ns_out(&node.name, "ip", &["route", "show", "10.65.0.10"]);
    let v6 = ns_out(&node.name, "ip", &["-6", "route", "show", "fd00::10"]);
    (v4.contains("dev caliX"), v6.contains("dev caliX"))
}

fn endpoint_chain_present(node: &TestNetns, iptables: bool) -> bool {
    let rules = if iptables {
        ns_out(&node.name, "iptables-legacy-save", &["-t", "filter"])
            + &ns_out(&node.name, "iptables-nft-save", &["-t", "filter"])
    } else {
        ns_out(&node.name, "nft", &["list", "table", "ip", "calico"])
    };
    rules.contains("cali-tw-caliX")
}

/// A workload endpoint re-created under a new identity on the same
/// interface and address: make-before-break keeps the interface's routes
/// (both families, never deleted in between), settings and chains; the
/// survivor of a removal takes over; break-before-make ends the same way.
async fn interface_survives_endpoint_identity_change(cfg_kv: &[(&str, &str)], iptables: bool) {
    let node = TestNetns::create();
    let w = TestNetns::create();
    plug(&node, &w, "caliX", "10.65.0.10", "fd00::10");
    let cfg = cfg_with(cfg_kv);
    let h = start(&cfg, &node);
    h.addr.do_send(UpdateBatch(vec![
        profile("open", true),
        wep("old-pod", "caliX", "10.65.0.10", &["open"], false),
    ]));
    h.addr.do_send(InSync);
    settle(&h).await;
    if has_routes(&node) != (true, true) {
        dump(&node, &h);
        panic!("routes programmed for the first identity");
    }

    // Make before break: the new identity, then the old one's removal.
    let monitor = RouteMonitor::start(&node.name);
    h.addr.do_send(UpdateBatch(vec![wep(
        "new-pod",
        "caliX",
        "10.65.0.10",
        &["open"],
        false,
    )]));
    settle(&h).await;
    h.addr.do_send(UpdateBatch(vec![wep_remove("old-pod")]));
    settle(&h).await;
    let events = monitor.finish();
    if has_routes(&node) != (true, true) {
        dump(&node, &h);
        panic!("route lost after the old identity's removal");
    }
    assert!(
        !events
            .lines()
            .any(|l| l.starts_with("Deleted")
                && (l.contains("10.65.0.10") || l.contains("fd00::10"))),
        "the route was deleted in between: {events}"
    );
    assert!(endpoint_chain_present(&node, iptables), "chains kept");
    let proxy_arp = ns_out(
        &node.name,
        "sysctl",
        &["-n", "net.ipv4.conf.caliX.proxy_arp"],
    );
    assert_eq!(proxy_arp.trim(), "1", "interface settings kept");

    // Break before make.
    h.addr.do_send(UpdateBatch(vec![wep_remove("new-pod")]));
    settle(&h).await;
    assert_eq!(has_routes(&node), (false, false), "routes removed");
    assert!(!endpoint_chain_present(&node, iptables));
    h.addr.do_send(UpdateBatch(vec![wep(
        "third-pod",
        "caliX",
        "10.65.0.10",
        &["open"],
        false,
    )]));
    settle(&h).await;
    assert_eq!(has_routes(&node), (true, true), "routes back");
    assert!(endpoint_chain_present(&node, iptables));
    drop(h);
}

#[actix_rt::test]
async fn iptables_workload_route_survives_endpoint_identity_change_make_before_break() {
    felix_netns::require!(netns["sysctl"]);
    interface_survives_endpoint_identity_change(&[("Ipv6Support", "true")], true).await;
}

#[actix_rt::test]
async fn nftables_workload_route_survives_endpoint_identity_change_make_before_break() {
    felix_netns::require!(netns ["sysctl", "nft"]);
    interface_survives_endpoint_identity_change(
        &[("Ipv6Support", "true"), ("NFTablesMode", "Enabled")],
        false,
    )
    .await;
}

fn bad_policy_id() -> pb::PolicyId {
    pb::PolicyId {
        name: "refused".into(),
        namespace: String::new(),
        kind: "GlobalNetworkPolicy".into(),
    }
}

/// A policy whose rule references an IP set nobody created: the kernel
/// (or the tool) refuses its chain.
fn refused_policy() -> Payload {
    Payload::ActivePolicyUpdate(pb::ActivePolicyUpdate {
        id: Some(bad_policy_id()),
        policy: Some(pb::Policy {
            tier: "default".into(),
            inbound_rules: vec![pb::Rule {
                action: "allow".into(),
                src_ip_set_ids: vec!["never-created".into()],
                ..Default::default()
            }],
            ..Default::default()
        }),
    })
}

fn wep_with_policy(id: &str, iface: &str, ip: &str, policy: pb::PolicyId) -> Payload {
    let Payload::WorkloadEndpointUpdate(mut u) = wep(id, iface, ip, &["open"], false) else {
        unreachable!()
    };
    if let Some(ep) = u.endpoint.as_mut() {
        ep.tiers = vec![pb::TierInfo {
            name: "default".into(),
            ingress_policies: vec![policy],
            egress_policies: Vec::new(),
            default_action: "Deny".into(),
        }];
    }
    Payload::WorkloadEndpointUpdate(u)
}

/// Item 3: a policy the kernel refuses is programmed as drop-everything
/// (its endpoint fails closed), every other endpoint is programmed, the
/// refusal shows in `/status` and the metric, and the supervisor keeps
/// running (no fail-closed exit) across more applies than the failure
/// limit; a corrected policy is retried and programmed.
async fn refused_policy_fails_closed_alone(cfg_kv: &[(&str, &str)], iptables: bool) {
    let node = TestNetns::create();
    let (w1, w2) = (TestNetns::create(), TestNetns::create());
    node.sh(
        "ip",
        &[
            "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
        ],
    );
    node.sh("ip", &["addr", "add", "192.168.99.1/24", "dev", "uplink0"]);
    node.sh("ip", &["link", "set", "uplink1", "up"]);
    node.sh("ip", &["link", "set", "uplink0", "up"]);
    node.sh("ip", &["route", "add", "default", "dev", "uplink0"]);
    plug(&node, &w1, "cali1", "10.65.0.2", "fd00::2");
    plug(&node, &w2, "cali2", "10.65.0.3", "fd00::3");
    let _l = Listener::start(&w1.name, 8080);
    let _l2 = Listener::start(&w2.name, 8080);
    let cfg = cfg_with(cfg_kv);
    let h = start(&cfg, &node);
    h.addr.do_send(UpdateBatch(vec![
        profile("open", true),
        refused_policy(),
        wep("w1", "cali1", "10.65.0.2", &["open"], false),
        wep_with_policy("w2", "cali2", "10.65.0.3", bad_policy_id()),
    ]));
    h.addr.do_send(InSync);
    settle(&h).await;

    // Everything else is programmed: w2 reaches w1.
    if !tcp_ok(&w2.name, "10.65.0.2", 8080) {
        dump(&node, &h);
        panic!("the other endpoint must be programmed");
    }
    // The refused policy's endpoint fails closed.
    assert!(!tcp_ok(&w1.name, "10.65.0.3", 8080), "refused policy drops");
    let rules = if iptables {
        ns_out(&node.name, "iptables-legacy-save", &["-t", "filter"])
            + &ns_out(&node.name, "iptables-nft-save", &["-t", "filter"])
    } else {
        ns_out(&node.name, "nft", &["list", "table", "ip", "calico"])
    };
    assert!(
        rules.contains("cali-tw-cali1") && rules.contains("cali-tw-cali2"),
        "{rules}"
    );
    // Reported in /status and the metric.
    let snap = h.status.snapshot();
    let reported: Vec<_> = snap
        .actors
        .iter()
        .flat_map(|a| {
            a.rejected_chains
                .iter()
                .map(move |r| (a.name.clone(), r.clone()))
        })
        .collect();
    assert!(
        reported
            .iter()
            .any(|(_, r)| r.chain.contains("cali-pi-gnp/refused")),
        "{snap:#?}"
    );
    assert!(reported.iter().all(|(_, r)| !r.kernel_error.is_empty()));
    let metrics = h.metrics.render_prometheus();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("felix_dataplane_rejected_chains{") && l.ends_with(" 1")),
        "{metrics}"
    );

    // More applies than the failure limit: the supervisor stays up.
    for i in 0..12 {
        let port = 9000 + i;
        let Payload::ActivePolicyUpdate(mut p) = port_policy() else {
            unreachable!()
        };
        if let Some(pol) = p.policy.as_mut() {
            pol.inbound_rules[0].dst_ports[0] = pb::PortRange {
                first: port,
                last: port,
            };
        }
        h.addr
            .do_send(UpdateBatch(vec![Payload::ActivePolicyUpdate(p)]));
        settle(&h).await;
    }
    assert!(h.status.snapshot().last_apply.is_some_and(|l| l.ok));

    // The policy is corrected: retried, programmed, no longer reported.
    let Payload::ActivePolicyUpdate(mut fixed) = refused_policy() else {
        unreachable!()
    };
    if let Some(p) = fixed.policy.as_mut() {
        p.inbound_rules[0].src_ip_set_ids.clear();
    }
    h.addr
        .do_send(UpdateBatch(vec![Payload::ActivePolicyUpdate(fixed)]));
    settle(&h).await;
    assert!(
        h.status
            .snapshot()
            .actors
            .iter()
            .all(|a| a.rejected_chains.is_empty()),
        "{:#?}",
        h.status.snapshot()
    );
    assert!(
        tcp_ok(&w1.name, "10.65.0.3", 8080),
        "corrected policy allows"
    );
    drop(h);
}

#[actix_rt::test]
async fn iptables_refused_policy_chain_fails_closed_alone_and_the_node_keeps_programming() {
    felix_netns::require!(netns ["python3", "sysctl", "ss"]);
    refused_policy_fails_closed_alone(&[], true).await;
}

#[actix_rt::test]
async fn nftables_refused_policy_chain_fails_closed_alone_and_the_node_keeps_programming() {
    felix_netns::require!(netns ["python3", "sysctl", "ss", "nft"]);
    refused_policy_fails_closed_alone(&[("NFTablesMode", "Enabled")], false).await;
}
