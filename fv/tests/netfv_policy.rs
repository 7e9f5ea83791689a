//! Dataplane FV, policy on real traffic: `felix run` in a node namespace
//! with CNI-wired workloads (see `felix_fv::netfv`), for iptables and
//! nftables. One daemon start per backend walks through: profile allow and
//! default deny, a namespaced policy with a selector and a named port,
//! a global policy with a network set and a numeric port, tiers with Pass,
//! an egress policy with a namespace selector, replies of allowed
//! connections through a deny-all ingress, a label change that flips
//! reachability (both ways), IPv6 throughout.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{anyhow, Result};
use felix_fv::netfv::topology::wep;
use felix_fv::netfv::traffic::{probe_all, Server};
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Fv, TOOLS};

const SETTLE: Duration = Duration::from_secs(20);

fn v4(f: &str, t: &str, p: u16, ok: bool) -> Check {
    Check::v4(f, t, p, ok)
}
fn v6(f: &str, t: &str, p: u16, ok: bool) -> Check {
    Check::v6(f, t, p, ok)
}

const CLOSED_PROFILE: &str =
    "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata:\n  name: closed\nspec: {}\n";

const BACKEND_INGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: backend-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'backend'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'frontend'
    destination:\n      ports: [api]\n";

const DB_FROM_MONITORING: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet
metadata:\n  name: monitoring-nets\n  labels:\n    role: monitoring
spec:\n  nets: [10.65.0.13/32, 'fd00:65::13/128']
---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy
metadata:\n  name: db-from-monitoring
spec:\n  order: 100\n  selector: app == 'db'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: role == 'monitoring'
    destination:\n      ports: [9090]\n";

const SECURITY_TIER: &str = "apiVersion: projectcalico.org/v3\nkind: Tier
metadata:\n  name: security\nspec:\n  order: 100
---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy
metadata:\n  name: security.guard-prom
spec:\n  tier: security\n  order: 10\n  selector: app == 'prom'\n  types: [Ingress]
  ingress:\n  - action: Deny\n    protocol: TCP\n    source:\n      selector: app == 'frontend'
  - action: Pass\n";

const DB_EGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: db-egress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'db'\n  types: [Egress]
  egress:\n  - action: Allow\n    protocol: TCP\n    destination:
      namespaceSelector: env == 'infra'\n      selector: app == 'prom'\n";

const PROM_ISOLATE: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: prom-isolate\n  namespace: ops
spec:\n  order: 100\n  selector: app == 'prom'\n  types: [Ingress]\n";

fn policy_walkthrough(backend: Backend) -> Result<()> {
    let mut fv = Fv::standard(backend, &[])?;
    fv.ds.write("profile-closed", CLOSED_PROFILE)?;
    fv.plug(wep("closed", "shop", "caliclosed0", 14).profiles(&["closed"]))?;
    fv.start(&[])?;
    let sb = &fv.sandbox;

    // Profiles only: kns.* allow everything, the closed profile nothing.
    let mut all = Vec::new();
    for f in ["frontend", "backend", "db", "prom"] {
        for t in ["frontend", "backend", "db", "prom"] {
            if f != t {
                all.push(v4(f, t, 8080, true));
            }
        }
    }
    all.extend([
        v6("frontend", "backend", 8080, true),
        v6("prom", "db", 9090, true),
        v4("frontend", "closed", 8080, false),
        v4("closed", "frontend", 8080, false),
        v6("closed", "backend", 8080, false),
    ]);
    sb.expect_traffic("profile allow / default deny", &all, SETTLE)?;

    // Namespaced policy: selector + named port.
    fv.apply("pol-backend", BACKEND_INGRESS)?;
    let sb = &fv.sandbox;
    sb.expect_traffic(
        "namespaced policy with named port",
        &[
            v4("frontend", "backend", 8080, true),
            v6("frontend", "backend", 8080, true),
            v4("frontend", "backend", 9090, false),
            v4("db", "backend", 8080, false),
            v6("db", "backend", 8080, false),
            v4("prom", "backend", 8080, false),
            v4("frontend", "db", 8080, true),
        ],
        SETTLE,
    )?;

    // Global policy: network set + numeric port.
    fv.apply("pol-db", DB_FROM_MONITORING)?;
    let sb = &fv.sandbox;
    sb.expect_traffic(
        "global policy with a network set",
        &[
            v4("prom", "db", 9090, true),
            v6("prom", "db", 9090, true),
            v4("prom", "db", 8080, false),
            v4("backend", "db", 9090, false),
            v4("frontend", "db", 8080, false),
            v6("frontend", "db", 9090, false),
        ],
        SETTLE,
    )?;

    // Tier with Deny and Pass: passed traffic reaches the profile.
    fv.apply("pol-security", SECURITY_TIER)?;
    let sb = &fv.sandbox;
    sb.expect_traffic(
        "tier with Pass",
        &[
            v4("frontend", "prom", 8080, false),
            v6("frontend", "prom", 8080, false),
            v4("backend", "prom", 8080, true),
            v4("db", "prom", 9090, true),
            v4("db", "frontend", 8080, true),
        ],
        SETTLE,
    )?;

    // Egress policy with a namespace selector.
    fv.apply("pol-db-egress", DB_EGRESS)?;
    let sb = &fv.sandbox;
    sb.expect_traffic(
        "egress policy",
        &[
            v4("db", "prom", 8080, true),
            v6("db", "prom", 8080, true),
            v4("db", "frontend", 8080, false),
            v6("db", "frontend", 8080, false),
            v4("db", "backend", 8080, false),
            v4("backend", "frontend", 8080, true),
        ],
        SETTLE,
    )?;

    // Replies of allowed connections pass a deny-all ingress.
    fv.apply("pol-prom-isolate", PROM_ISOLATE)?;
    let sb = &fv.sandbox;
    sb.expect_traffic(
        "replies of allowed connections",
        &[
            v4("backend", "prom", 8080, false),
            v4("db", "prom", 8080, false),
            v6("backend", "prom", 8080, false),
            v4("prom", "frontend", 8080, true),
            v6("prom", "frontend", 9090, true),
            v4("prom", "db", 9090, true),
        ],
        SETTLE,
    )?;

    // A label change flips reachability, and flips it back.
    let fe = fv.weps.iter().find(|w| w.pod == "frontend").cloned();
    let fe = fe.ok_or_else(|| anyhow::anyhow!("no frontend"))?;
    let mut relabelled = fe.clone();
    relabelled.labels = vec![("app".into(), "web".into())];
    let before = fv.d()?.applies();
    fv.write_wep(&relabelled)?;
    fv.d()?.wait_converged(before)?;
    fv.sandbox.expect_traffic(
        "label change (frontend -> web)",
        &[
            v4("frontend", "backend", 8080, false),
            v6("frontend", "backend", 8080, false),
            v4("db", "backend", 8080, false),
        ],
        SETTLE,
    )?;
    let before = fv.d()?.applies();
    fv.write_wep(&fe)?;
    fv.d()?.wait_converged(before)?;
    fv.sandbox.expect_traffic(
        "label change back",
        &[
            v4("frontend", "backend", 8080, true),
            v6("frontend", "backend", 8080, true),
        ],
        SETTLE,
    )?;
    fv.stop()
}

/// Workload -> the host itself: after the workload's egress policy (the standard profiles
/// allow everything), `DefaultEndpointToHostAction` decides, in every mode (eBPF mode through
/// the rules it keeps).
fn endpoint_to_host(backend: Backend) -> Result<()> {
    for (action, reach) in [("Drop", false), ("Accept", true)] {
        let mut fv = Fv::standard(backend, &[("defaultEndpointToHostAction", action)])?;
        let node = fv.sandbox.node.name().to_string();
        let _host = Server::start(&node, "host", &[7777])?;
        fv.start(&[])?;
        let fe = fv.sandbox.workload("frontend")?.ns.name().to_string();
        let host: IpAddr = "192.0.2.1".parse()?;
        let reached = || {
            matches!(
                probe_all(&[(fe.clone(), host, 7777)]).first(),
                Some(Ok(Some(_)))
            )
        };
        poll(SETTLE, || (reached() == reach).then_some(())).map_err(|e| {
            anyhow!(
                "{action}: workload -> host {} ({e})",
                if reach { "blocked" } else { "allowed" }
            )
        })?;
        // The workloads still reach each other.
        fv.sandbox.expect_traffic(
            "workload to workload",
            &[v4("frontend", "backend", 8080, true)],
            SETTLE,
        )?;
        fv.stop()?;
    }
    Ok(())
}

fn run_to_host(backend: Backend) {
    if let Err(e) = endpoint_to_host(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn default_endpoint_to_host_action_iptables() {
    felix_netns::require!(netns TOOLS);
    run_to_host(Backend::Iptables);
}

#[test]
fn default_endpoint_to_host_action_nftables() {
    felix_netns::require!(netns TOOLS);
    run_to_host(Backend::Nftables);
}

#[test]
fn default_endpoint_to_host_action_bpf() {
    felix_netns::require!(netns TOOLS);
    run_to_host(Backend::Bpf);
}

fn run(backend: Backend) {
    if let Err(e) = policy_walkthrough(backend) {
        panic!("{backend:?}: {e:#}");
    }
}

#[test]
fn policy_on_real_traffic_iptables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Iptables);
}

#[test]
fn policy_on_real_traffic_nftables() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Nftables);
}

#[test]
fn policy_on_real_traffic_bpf() {
    felix_netns::require!(netns TOOLS);
    run(Backend::Bpf);
}
