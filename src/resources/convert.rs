//! Per-kind validation and conversion of a decoded resource into model
//! entries, following upstream's update processors (and, for the
//! Kubernetes kinds, its Kubernetes-datastore conversion).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::document::Spec;
use super::rules::{convert_rules, Direction};
use super::selectors::{
    global_policy_selector, network_policy_selector, LABEL_NAME, LABEL_NAMESPACE,
    LABEL_ORCHESTRATOR, LABEL_SERVICE_ACCOUNT, NAMESPACE_LABEL_PREFIX,
    SERVICE_ACCOUNT_LABEL_PREFIX,
};
use super::types::{self, IntOrString, Metadata};
use super::validate::{
    check_annotations, check_labels, check_name, check_selector_no_global, err, is_dns1123_label,
    is_interface_name, is_valid_port_name, matches_label_fmt, matches_subdomain_fmt,
    parse_cidr_or_ip, parse_ip, parse_ipv4, parse_ipv6, parse_loose_net, parse_mac, parse_protocol,
    parse_strict_net, supports_ports, Indexed, Sub, VResult,
};
use super::{felixconfig, Kind, ResourceId};
use crate::model::{
    self, EncapMode, EndpointPort, HostEndpointKey, IpNat, Key, Labels, NetworkSetKey, PolicyKey,
    Value, WorkloadEndpointKey,
};

type Entries = Vec<(Key, Value)>;

/// Name of the tier policies belong to when `spec.tier` is empty.
const DEFAULT_TIER: &str = "default";

/// Validates and converts one resource.
pub(crate) fn convert(id: &ResourceId, meta: Metadata, spec: Spec) -> VResult<Entries> {
    check_metadata(id, &meta)?;
    let ns = id.namespace.as_deref().unwrap_or("");
    match spec {
        Spec::GlobalNetworkPolicy(s) => global_network_policy(id, &meta, s),
        Spec::NetworkPolicy(s) => network_policy(id, ns, &meta, s),
        Spec::Tier(s) => tier(id, s),
        Spec::Profile(s) => profile(id, s),
        Spec::WorkloadEndpoint(s) => workload_endpoint(ns, meta, s),
        Spec::HostEndpoint(s) => host_endpoint(id, meta, s),
        Spec::NetworkSet(s) => network_set(id, ns, meta, s),
        Spec::IpPool(s) => ip_pool(s),
        Spec::Node(s) => node(id, meta, s),
        Spec::FelixConfiguration(fields) => felix_configuration(id, &meta, &fields),
        Spec::ClusterInformation(s) => cluster_information(id, s),
        Spec::IpamBlock(s) => ipam_block(s),
        Spec::Ignored => match id.kind {
            Kind::Namespace => Ok(namespace(&id.name, meta.labels)),
            _ => Ok(service_account(ns, &id.name, meta.labels)),
        },
    }
}

/// Name, namespace, labels and annotations, with each kind's name rule.
fn check_metadata(id: &ResourceId, meta: &Metadata) -> VResult<()> {
    let name = &id.name;
    const F: &str = "metadata.name";
    match id.kind {
        Kind::Tier => {
            if name.len() > 63 {
                return err(F, format!("name is too long by {} bytes", name.len() - 63));
            }
            if !matches_label_fmt(name) {
                return err(F, format!("{name:?} is invalid: tier names must consist of lower case alphanumeric characters or '-'"));
            }
        }
        Kind::Namespace => {
            if !is_dns1123_label(name) {
                return err(
                    F,
                    format!("{name:?} is not a valid namespace name (DNS-1123 label)"),
                );
            }
        }
        Kind::GlobalNetworkPolicy => {
            check_name(F, name)?;
            let ok = match name.split_once('.') {
                None => matches_label_fmt(name),
                Some((a, b)) => matches_label_fmt(a) && matches_label_fmt(b),
            };
            if !ok {
                return err(F, format!("{name:?} is invalid: policy names must be a DNS label, optionally with one '.'"));
            }
        }
        Kind::NetworkPolicy => {
            check_name(F, name)?;
            let ok = match name.split_once('.') {
                None => matches_label_fmt(name),
                Some((a, b)) if matches_label_fmt(a) && matches_label_fmt(b) => true,
                Some(_) => ["knp.default.", "ossg.default."]
                    .iter()
                    .any(|p| name.strip_prefix(p).is_some_and(matches_subdomain_fmt)),
            };
            if !ok {
                return err(F, format!("{name:?} is invalid: policy names must be a DNS label, optionally with one '.'"));
            }
        }
        _ => check_name(F, name)?,
    }
    if let Some(ns) = &id.namespace {
        if !is_dns1123_label(ns) {
            return err(
                "metadata.namespace",
                format!("{ns:?} is not a valid namespace name (DNS-1123 label)"),
            );
        }
    }
    check_labels("metadata.labels", &meta.labels)?;
    check_annotations("metadata.annotations", &meta.annotations)?;
    if matches!(id.kind, Kind::GlobalNetworkSet | Kind::NetworkSet)
        && meta.labels.contains_key(LABEL_NAMESPACE)
    {
        return err(
            format!("metadata.labels[{LABEL_NAMESPACE}]"),
            "projectcalico.org/namespace is not a valid label name",
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Policies and tiers
// ---------------------------------------------------------------------------

/// Upstream's policy `types` defaulting: ingress unless there are only
/// egress rules; both when there are both.
fn policy_types(types: &[String], has_ingress: bool, has_egress: bool) -> VResult<Vec<String>> {
    if types.is_empty() {
        return Ok(if !has_egress {
            vec!["ingress".to_owned()]
        } else if !has_ingress {
            vec!["egress".to_owned()]
        } else {
            vec!["ingress".to_owned(), "egress".to_owned()]
        });
    }
    if types.len() > 2 {
        return err("spec.types", "at most 2 types may be given");
    }
    let mut out: Vec<String> = Vec::with_capacity(types.len());
    for (i, t) in types.iter().enumerate() {
        let lower = match t.as_str() {
            "Ingress" => "ingress",
            "Egress" => "egress",
            other => {
                return err(
                    format!("spec.types[{i}]"),
                    format!("{other:?} is invalid: must be Ingress or Egress"),
                )
            }
        };
        if out.iter().any(|x| x == lower) {
            return err("spec.types", format!("'{t}' type specified more than once"));
        }
        out.push(lower.to_owned());
    }
    Ok(out)
}

fn check_performance_hints(hints: &[String]) -> VResult<()> {
    for (i, h) in hints.iter().enumerate() {
        if h != "AssumeNeededOnEveryNode" {
            return err(
                format!("spec.performanceHints[{i}]"),
                format!("{h:?} is invalid: must be AssumeNeededOnEveryNode"),
            );
        }
        if hints[..i].contains(h) {
            return err(format!("spec.performanceHints[{i}]"), "duplicate hint");
        }
    }
    Ok(())
}

fn check_tier_ref(tier: &str) -> VResult<String> {
    if tier.is_empty() {
        return Ok(DEFAULT_TIER.to_owned());
    }
    if !matches_subdomain_fmt(tier) || tier.len() > 253 {
        return err("spec.tier", format!("{tier:?} is not a valid tier name"));
    }
    Ok(tier.to_owned())
}

/// Policy name in the model key: the default tier's legacy `default.`
/// prefix is dropped, as upstream's backend does.
fn policy_key_name(name: &str, tier: &str) -> String {
    if tier == DEFAULT_TIER {
        name.strip_prefix("default.").unwrap_or(name).to_owned()
    } else {
        name.to_owned()
    }
}

fn global_network_policy(
    id: &ResourceId,
    meta: &Metadata,
    s: types::GlobalNetworkPolicySpec,
) -> VResult<Entries> {
    let tier = check_tier_ref(&s.tier)?;
    check_selector_no_global("spec.selector", &s.selector)?;
    check_selector_no_global("spec.namespaceSelector", &s.namespace_selector)?;
    check_selector_no_global("spec.serviceAccountSelector", &s.service_account_selector)?;
    check_performance_hints(&s.performance_hints)?;
    if s.do_not_track && s.pre_dnat {
        return err("spec.preDNAT", "preDNAT and doNotTrack cannot both be true");
    }
    if s.pre_dnat && !s.egress.is_empty() {
        return err("spec.egress", "preDNAT policy cannot have any egress rules");
    }
    if s.pre_dnat && s.types.iter().any(|t| t == "Egress") {
        return err("spec.types", "preDNAT policy cannot have 'Egress' type");
    }
    if (s.do_not_track || s.pre_dnat) && !s.apply_on_forward {
        return err(
            "spec.applyOnForward",
            "applyOnForward must be true if either preDNAT or doNotTrack is true",
        );
    }
    let inbound = convert_rules(&s.ingress, "", "spec.ingress", Some(Direction::Ingress))?;
    let outbound = convert_rules(&s.egress, "", "spec.egress", Some(Direction::Egress))?;
    for (i, r) in inbound.iter().enumerate() {
        if r.src_service
            .as_ref()
            .is_some_and(|svc| svc.namespace.is_empty())
        {
            return err(
                format!("spec.ingress[{i}].source.services.namespace"),
                "must specify a namespace",
            );
        }
    }
    for (i, r) in outbound.iter().enumerate() {
        if r.dst_service
            .as_ref()
            .is_some_and(|svc| svc.namespace.is_empty())
        {
            return err(
                format!("spec.egress[{i}].destination.services.namespace"),
                "must specify a namespace",
            );
        }
    }
    let types = policy_types(&s.types, !s.ingress.is_empty(), !s.egress.is_empty())?;
    let policy = model::Policy {
        namespace: String::new(),
        tier: tier.clone(),
        order: s.order,
        inbound_rules: inbound,
        outbound_rules: outbound,
        selector: global_policy_selector(
            &s.selector,
            &s.namespace_selector,
            &s.service_account_selector,
        ),
        do_not_track: s.do_not_track,
        pre_dnat: s.pre_dnat,
        apply_on_forward: s.apply_on_forward,
        types,
        annotations: meta.annotations.clone(),
        performance_hints: s.performance_hints,
    };
    let key = PolicyKey {
        name: policy_key_name(&id.name, &tier),
        namespace: String::new(),
        kind: Kind::GlobalNetworkPolicy.as_str().to_owned(),
    };
    Ok(vec![(Key::Policy(key), Value::Policy(Arc::new(policy)))])
}

fn network_policy(
    id: &ResourceId,
    ns: &str,
    meta: &Metadata,
    s: types::NetworkPolicySpec,
) -> VResult<Entries> {
    let tier = check_tier_ref(&s.tier)?;
    check_selector_no_global("spec.selector", &s.selector)?;
    check_selector_no_global("spec.serviceAccountSelector", &s.service_account_selector)?;
    check_performance_hints(&s.performance_hints)?;
    let inbound = convert_rules(&s.ingress, ns, "spec.ingress", Some(Direction::Ingress))?;
    let outbound = convert_rules(&s.egress, ns, "spec.egress", Some(Direction::Egress))?;
    let types = policy_types(&s.types, !s.ingress.is_empty(), !s.egress.is_empty())?;
    let policy = model::Policy {
        namespace: ns.to_owned(),
        tier: tier.clone(),
        order: s.order,
        inbound_rules: inbound,
        outbound_rules: outbound,
        selector: network_policy_selector(&s.selector, ns, &s.service_account_selector),
        do_not_track: false,
        pre_dnat: false,
        apply_on_forward: false,
        types,
        annotations: meta.annotations.clone(),
        performance_hints: s.performance_hints,
    };
    let key = PolicyKey {
        name: policy_key_name(&id.name, &tier),
        namespace: ns.to_owned(),
        kind: Kind::NetworkPolicy.as_str().to_owned(),
    };
    Ok(vec![(Key::Policy(key), Value::Policy(Arc::new(policy)))])
}

fn tier(id: &ResourceId, s: types::TierSpec) -> VResult<Entries> {
    let default_action = match s.default_action.as_deref() {
        None | Some("Deny") => model::Action::Deny,
        Some("Pass") => model::Action::Pass,
        Some(other) => {
            return err(
                "spec.defaultAction",
                format!("{other:?} is invalid: must be Deny or Pass"),
            )
        }
    };
    // Upstream pins the order and default action of its built-in tiers.
    let pinned = match id.name.as_str() {
        "default" => Some((1_000_000.0, model::Action::Deny)),
        "kube-admin" => Some((1_000.0, model::Action::Pass)),
        "kube-baseline" => Some((10_000_000.0, model::Action::Pass)),
        _ => None,
    };
    if let Some((order, action)) = pinned {
        if s.order != Some(order) {
            return err(
                "spec.order",
                format!("{} tier order must be {order}", id.name),
            );
        }
        if s.default_action.is_some() && default_action != action {
            return err(
                "spec.defaultAction",
                format!("the {:?} tier must have default action {action:?}", id.name),
            );
        }
    }
    let t = model::Tier {
        order: s.order,
        default_action,
    };
    Ok(vec![(Key::Tier(id.name.clone()), Value::Tier(Arc::new(t)))])
}

fn profile(id: &ResourceId, s: types::ProfileSpec) -> VResult<Entries> {
    check_labels("spec.labelsToApply", &s.labels_to_apply)?;
    let p = model::Profile {
        inbound_rules: convert_rules(&s.ingress, "", "spec.ingress", None)?,
        outbound_rules: convert_rules(&s.egress, "", "spec.egress", None)?,
        labels: s.labels_to_apply,
    };
    Ok(vec![(
        Key::Profile(id.name.clone()),
        Value::Profile(Arc::new(p)),
    )])
}

// ---------------------------------------------------------------------------
// Kubernetes namespaces and service accounts
// ---------------------------------------------------------------------------

fn prefixed_labels(prefix: &str, labels: &Labels, name: &str) -> Labels {
    let mut out: Labels = labels
        .iter()
        .map(|(k, v)| (format!("{prefix}{k}"), v.clone()))
        .collect();
    out.insert(format!("{prefix}{LABEL_NAME}"), name.to_owned());
    out
}

/// A namespace: the `kns.<ns>` profile (allow-all rules, labels in the
/// `pcns.` space) plus the namespace's own labels for `NamespaceUpdate`.
fn namespace(name: &str, labels: Labels) -> Entries {
    let allow = || {
        vec![model::Rule {
            action: model::Action::Allow,
            ..Default::default()
        }]
    };
    let profile = model::Profile {
        inbound_rules: allow(),
        outbound_rules: allow(),
        labels: prefixed_labels(NAMESPACE_LABEL_PREFIX, &labels, name),
    };
    let mut ns_labels = labels;
    ns_labels.insert(LABEL_NAME.to_owned(), name.to_owned());
    vec![
        (
            Key::Profile(format!("kns.{name}")),
            Value::Profile(Arc::new(profile)),
        ),
        (
            Key::Namespace(name.to_owned()),
            Value::Namespace(Arc::new(ns_labels)),
        ),
    ]
}

/// A service account: the `ksa.<ns>.<sa>` profile (labels only, in the
/// `pcsa.` space) plus its labels for `ServiceAccountUpdate`.
fn service_account(ns: &str, name: &str, labels: Labels) -> Entries {
    let profile = model::Profile {
        inbound_rules: Vec::new(),
        outbound_rules: Vec::new(),
        labels: prefixed_labels(SERVICE_ACCOUNT_LABEL_PREFIX, &labels, name),
    };
    let mut sa_labels = labels;
    sa_labels.insert(LABEL_NAME.to_owned(), name.to_owned());
    vec![
        (
            Key::Profile(format!("ksa.{ns}.{name}")),
            Value::Profile(Arc::new(profile)),
        ),
        (
            Key::ServiceAccount {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            },
            Value::ServiceAccount(Arc::new(sa_labels)),
        ),
    ]
}

// ---------------------------------------------------------------------------
// Endpoints and network sets
// ---------------------------------------------------------------------------

fn opt_name(field: impl fmt::Display + Copy, s: &str) -> VResult<()> {
    if !s.is_empty() && !matches_subdomain_fmt(s) {
        return err(
            field,
            format!(
                "{s:?} is invalid: must consist of lower case alphanumeric characters, '-' or '.'"
            ),
        );
    }
    Ok(())
}

fn check_profiles(profiles: &[String]) -> VResult<()> {
    for (i, p) in profiles.iter().enumerate() {
        if !matches_subdomain_fmt(p) {
            return err(
                format!("spec.profiles[{i}]"),
                format!("{p:?} is not a valid profile name"),
            );
        }
    }
    Ok(())
}

fn endpoint_port(
    field: impl fmt::Display + Copy,
    name: &str,
    protocol: &IntOrString,
    port: i64,
    name_required: bool,
) -> VResult<EndpointPort> {
    if (name_required || !name.is_empty()) && !is_valid_port_name(name) {
        return err(
            format!("{field}.name"),
            format!("{name:?} is not a valid port name"),
        );
    }
    let protocol = parse_protocol(Sub(field, "protocol"), protocol)?;
    if !supports_ports(&protocol) {
        return err(
            format!("{field}.protocol"),
            "protocol does not support ports (must be TCP, UDP or SCTP)",
        );
    }
    if !(1..=65535).contains(&port) {
        return err(
            format!("{field}.port"),
            format!("port {port} is invalid: must be between 1 and 65535"),
        );
    }
    Ok(EndpointPort {
        name: name.to_owned(),
        protocol,
        port: port as u16,
    })
}

/// Sets label `key` to `value`, allocating only what changes (resources
/// written by Calico's tooling usually carry these labels already).
fn set_label(labels: &mut Labels, key: &str, value: &str) {
    match labels.get_mut(key) {
        Some(v) if v == value => {}
        Some(v) => value.clone_into(v),
        None => {
            labels.insert(key.to_owned(), value.to_owned());
        }
    }
}

fn workload_endpoint(ns: &str, meta: Metadata, s: types::WorkloadEndpointSpec) -> VResult<Entries> {
    opt_name("spec.orchestrator", &s.orchestrator)?;
    opt_name("spec.workload", &s.workload)?;
    opt_name("spec.node", &s.node)?;
    opt_name("spec.pod", &s.pod)?;
    opt_name("spec.endpoint", &s.endpoint)?;
    opt_name("spec.serviceAccountName", &s.service_account_name)?;
    if s.node.is_empty() {
        return err("spec.node", "is required");
    }
    let container_id_ok = s
        .container_id
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-')
        && !s.container_id.starts_with('-')
        && !s.container_id.ends_with('-');
    if !s.container_id.is_empty() && !container_id_ok {
        return err(
            "spec.containerID",
            format!("{:?} is not a valid container ID", s.container_id),
        );
    }
    if !is_interface_name(&s.interface_name) {
        return err(
            "spec.interfaceName",
            format!(
                "{:?} is invalid: must be 1-15 characters of [a-zA-Z0-9_.-]",
                s.interface_name
            ),
        );
    }
    check_profiles(&s.profiles)?;

    let mut ipv4_nets = Vec::new();
    let mut ipv6_nets = Vec::new();
    let mut nets = Vec::with_capacity(s.ip_networks.len());
    for (i, n) in s.ip_networks.iter().enumerate() {
        let f = Indexed("spec.ipNetworks", i);
        let net = parse_strict_net(f, n)?;
        if net.prefix_len() != net.max_prefix_len() {
            return err(f, "IP network contains multiple addresses");
        }
        nets.push(net);
        match net {
            IpNet::V4(_) => ipv4_nets.push(net),
            IpNet::V6(_) => ipv6_nets.push(net),
        }
    }
    let ipv4_gateway = match s.ipv4_gateway.as_str() {
        "" => None,
        g => Some(parse_ipv4("spec.ipv4Gateway", g)?),
    };
    let ipv6_gateway = match s.ipv6_gateway.as_str() {
        "" => None,
        g => Some(parse_ipv6("spec.ipv6Gateway", g)?),
    };
    let mut ipv4_nat = Vec::new();
    let mut ipv6_nat = Vec::new();
    for (i, nat) in s.ip_nats.iter().enumerate() {
        let f = Indexed("spec.ipNATs", i);
        let int_ip = parse_ip(Sub(f, "internalIP"), &nat.internal_ip)?;
        let ext_ip = parse_ip(Sub(f, "externalIP"), &nat.external_ip)?;
        if int_ip.is_ipv4() != ext_ip.is_ipv4() {
            return err(format!("{f}.externalIP"), "mismatched IP versions");
        }
        if !nets.iter().any(|n| n.contains(&int_ip)) {
            return err(
                format!("{f}.internalIP"),
                "NAT is not in the endpoint networks",
            );
        }
        let entry = IpNat { int_ip, ext_ip };
        if int_ip.is_ipv4() {
            ipv4_nat.push(entry);
        } else {
            ipv6_nat.push(entry);
        }
    }
    let mac = match s.mac.as_str() {
        "" => None,
        m => Some(parse_mac("spec.mac", m)?),
    };
    let mut ports = Vec::new();
    for (i, p) in s.ports.iter().enumerate() {
        let f = Indexed("spec.ports", i);
        if p.name.is_empty() && p.host_port == 0 {
            return err(
                format!("{f}.name"),
                "name must not be empty if no hostPort is specified",
            );
        }
        if !(0..=65535).contains(&p.host_port) {
            return err(format!("{f}.hostPort"), "must be between 0 and 65535");
        }
        if !p.host_ip.is_empty() {
            parse_strict_net(Sub(f, "hostIP"), &p.host_ip)?;
        }
        let port = endpoint_port(f, &p.name, &p.protocol, p.port, false)?;
        if !p.name.is_empty() {
            ports.push(port);
        }
    }
    let mut allow_spoofed = Vec::with_capacity(s.allow_spoofed_source_prefixes.len());
    for (i, p) in s.allow_spoofed_source_prefixes.iter().enumerate() {
        allow_spoofed.push(parse_loose_net(
            Indexed("spec.allowSpoofedSourcePrefixes", i),
            p,
        )?);
    }

    // Upstream skips endpoints that have no addresses yet.
    if s.ip_networks.is_empty() {
        return Ok(Vec::new());
    }

    let mut labels: Labels = meta.labels;
    labels.retain(|k, _| {
        !k.starts_with(NAMESPACE_LABEL_PREFIX) && !k.starts_with(SERVICE_ACCOUNT_LABEL_PREFIX)
    });
    set_label(&mut labels, LABEL_NAMESPACE, ns);
    set_label(&mut labels, LABEL_ORCHESTRATOR, &s.orchestrator);
    if !s.service_account_name.is_empty() {
        set_label(&mut labels, LABEL_SERVICE_ACCOUNT, &s.service_account_name);
    }

    let workload_id = if s.orchestrator == "k8s" {
        // `format!` costs more than the rest of this conversion's string
        // handling together.
        let mut id = String::with_capacity(ns.len() + 1 + s.pod.len());
        id.push_str(ns);
        id.push('/');
        id.push_str(&s.pod);
        id
    } else {
        s.workload.clone()
    };
    let key = WorkloadEndpointKey {
        hostname: s.node,
        orchestrator_id: s.orchestrator,
        workload_id,
        endpoint_id: s.endpoint,
    };
    let wep = model::WorkloadEndpoint {
        state: "active".to_owned(),
        name: s.interface_name,
        mac,
        profile_ids: s.profiles,
        ipv4_nets,
        ipv6_nets,
        ipv4_nat,
        ipv6_nat,
        labels,
        ipv4_gateway,
        ipv6_gateway,
        ports,
        generate_name: meta.generate_name,
        allow_spoofed_source_prefixes: allow_spoofed,
        annotations: meta.annotations,
    };
    Ok(vec![(
        Key::WorkloadEndpoint(key),
        Value::WorkloadEndpoint(Arc::new(wep)),
    )])
}

fn host_endpoint(id: &ResourceId, meta: Metadata, s: types::HostEndpointSpec) -> VResult<Entries> {
    if s.node.is_empty() {
        return err("spec.node", "is required");
    }
    opt_name("spec.node", &s.node)?;
    if !s.interface_name.is_empty()
        && s.interface_name != "*"
        && !is_interface_name(&s.interface_name)
    {
        return err(
            "spec.interfaceName",
            format!(
                "{:?} is invalid: must be 1-15 characters of [a-zA-Z0-9_.-] or \"*\"",
                s.interface_name
            ),
        );
    }
    if s.interface_name.is_empty() && s.expected_ips.is_empty() {
        return err("spec", "either interfaceName or expectedIPs must be set");
    }
    check_profiles(&s.profiles)?;
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (i, ip) in s.expected_ips.iter().enumerate() {
        match parse_ip(Indexed("spec.expectedIPs", i), ip)? {
            a @ IpAddr::V4(_) => v4.push(a),
            a @ IpAddr::V6(_) => v6.push(a),
        }
    }
    let mut ports = Vec::with_capacity(s.ports.len());
    for (i, p) in s.ports.iter().enumerate() {
        ports.push(endpoint_port(
            Indexed("spec.ports", i),
            &p.name,
            &p.protocol,
            p.port,
            true,
        )?);
    }
    let hep = model::HostEndpoint {
        name: s.interface_name,
        expected_ipv4_addrs: v4,
        expected_ipv6_addrs: v6,
        labels: meta.labels,
        profile_ids: s.profiles,
        ports,
    };
    let key = HostEndpointKey {
        hostname: s.node,
        endpoint_id: id.name.clone(),
    };
    Ok(vec![(
        Key::HostEndpoint(key),
        Value::HostEndpoint(Arc::new(hep)),
    )])
}

fn network_set(
    id: &ResourceId,
    ns: &str,
    meta: Metadata,
    s: types::NetworkSetSpec,
) -> VResult<Entries> {
    let nets = s
        .nets
        .iter()
        .enumerate()
        .map(|(i, n)| parse_loose_net(Indexed("spec.nets", i), n))
        .collect::<VResult<Vec<_>>>()?;
    let mut labels = meta.labels;
    let (name, profile_ids) = if id.kind == Kind::NetworkSet {
        set_label(&mut labels, LABEL_NAMESPACE, ns);
        (format!("{ns}/{}", id.name), vec![format!("kns.{ns}")])
    } else {
        (id.name.clone(), Vec::new())
    };
    let set = model::NetworkSet {
        nets,
        labels,
        profile_ids,
    };
    Ok(vec![(
        Key::NetworkSet(NetworkSetKey { name }),
        Value::NetworkSet(Arc::new(set)),
    )])
}

// ---------------------------------------------------------------------------
// IPAM, nodes, configuration
// ---------------------------------------------------------------------------

fn encap_mode(field: impl fmt::Display + Copy, s: &str) -> VResult<EncapMode> {
    match s {
        "" | "Never" => Ok(EncapMode::Never),
        "Always" => Ok(EncapMode::Always),
        "CrossSubnet" => Ok(EncapMode::CrossSubnet),
        other => err(
            field,
            format!("{other:?} is invalid: must be Never, Always or CrossSubnet"),
        ),
    }
}

fn ip_pool(s: types::IpPoolSpec) -> VResult<Entries> {
    if s.cidr.is_empty() {
        return err("spec.cidr", "IPPool CIDR must be specified");
    }
    let Some((ip, cidr)) = parse_cidr_or_ip(&s.cidr) else {
        return err("spec.cidr", format!("{:?} is not a valid subnet", s.cidr));
    };
    if ip != cidr.addr() {
        return err("spec.cidr", "IP pool CIDR is not strictly masked");
    }
    let link_local: IpNet = match cidr {
        IpNet::V4(_) => {
            IpNet::V4(ipnet::Ipv4Net::new([169, 254, 0, 0].into(), 16).unwrap_or_default())
        }
        IpNet::V6(_) => IpNet::V6(
            ipnet::Ipv6Net::new([0xfe80, 0, 0, 0, 0, 0, 0, 0].into(), 10).unwrap_or_default(),
        ),
    };
    if link_local.contains(&cidr.addr()) || cidr.contains(&link_local.addr()) {
        return err(
            "spec.cidr",
            "IPPool CIDR overlaps with the link local range",
        );
    }
    let vxlan_mode = encap_mode("spec.vxlanMode", &s.vxlan_mode)?;
    let ipip_mode = encap_mode("spec.ipipMode", &s.ipip_mode)?;
    if vxlan_mode != EncapMode::Never && ipip_mode != EncapMode::Never {
        return err(
            "spec.ipipMode",
            "ipipMode and vxlanMode cannot both be enabled",
        );
    }
    let v6 = matches!(cidr, IpNet::V6(_));
    if v6 && ipip_mode != EncapMode::Never {
        return err("spec.ipipMode", "IPIP is not supported on IPv6 pools");
    }
    if s.block_size != 0 {
        let ok = if v6 {
            (116..=128).contains(&s.block_size)
        } else {
            (20..=32).contains(&s.block_size)
        };
        if !ok {
            return err("spec.blockSize", "blockSize must be between 20 and 32 for IPv4 pools, and between 116 and 128 for IPv6 pools");
        }
    }
    let block_size = if s.block_size != 0 {
        s.block_size
    } else if v6 {
        122
    } else {
        26
    };
    if !s.disabled && i64::from(cidr.prefix_len()) > block_size {
        return err("spec.cidr", "IP pool size is too small for use with Calico IPAM; it must be equal to or greater than the block size");
    }
    for (f, sel) in [
        ("spec.nodeSelector", &s.node_selector),
        ("spec.namespaceSelector", &s.namespace_selector),
    ] {
        if !sel.is_empty() {
            check_selector_no_global(f, sel)?;
        }
    }
    let mut allowed_uses = s.allowed_uses.clone();
    for (i, u) in allowed_uses.iter().enumerate() {
        if !matches!(u.as_str(), "Workload" | "Tunnel" | "LoadBalancer") {
            return err(
                format!("spec.allowedUses[{i}]"),
                format!("unknown use: {u}"),
            );
        }
    }
    let lb = allowed_uses.iter().any(|u| u == "LoadBalancer");
    if lb {
        if allowed_uses.iter().any(|u| u != "LoadBalancer") {
            return err(
                "spec.allowedUses",
                "LoadBalancer cannot be combined with Workload or Tunnel allowed uses",
            );
        }
        if vxlan_mode != EncapMode::Never || ipip_mode != EncapMode::Never {
            return err(
                "spec.allowedUses",
                "LoadBalancer IP pool cannot have IPIP or VXLAN enabled",
            );
        }
        if s.disable_bgp_export {
            return err(
                "spec.disableBGPExport",
                "LoadBalancer IP pools cannot disable BGP export",
            );
        }
    }
    if allowed_uses.iter().any(|u| u == "Tunnel") && !s.namespace_selector.is_empty() {
        return err(
            "spec.namespaceSelector",
            "IP Pool with AllowedUse Tunnel cannot have namespaceSelector",
        );
    }
    if allowed_uses.is_empty() {
        allowed_uses = vec!["Workload".to_owned(), "Tunnel".to_owned()];
    }
    let assignment_mode = match s.assignment_mode.as_deref() {
        None | Some("Automatic") => "Automatic",
        Some("Manual") => "Manual",
        Some(other) => {
            return err(
                "spec.assignmentMode",
                format!("{other:?} is invalid: must be Automatic or Manual"),
            )
        }
    };
    let pool = model::IpPool {
        cidr: Some(cidr),
        ipip_mode,
        vxlan_mode,
        masquerade: s.nat_outgoing,
        disabled: s.disabled,
        disable_bgp_export: s.disable_bgp_export,
        allowed_uses,
        assignment_mode: assignment_mode.to_owned(),
    };
    Ok(vec![(Key::IpPool(cidr), Value::IpPool(Arc::new(pool)))])
}

/// A node address with its prefix length kept (host bits are meaningful).
fn node_address(field: impl fmt::Display + Copy, s: &str, want_v4: bool) -> VResult<IpNet> {
    let net: Option<IpNet> = if s.contains('/') {
        s.parse().ok()
    } else {
        s.parse::<IpAddr>().ok().map(IpNet::from)
    };
    match net {
        Some(n) if matches!(n, IpNet::V4(_)) == want_v4 => Ok(n),
        _ => err(
            field,
            format!(
                "{s:?} is not a valid IPv{} address or CIDR",
                if want_v4 { 4 } else { 6 }
            ),
        ),
    }
}

fn as_number(raw: &IntOrString) -> Option<u32> {
    match raw {
        IntOrString::Int(n) => u32::try_from(*n).ok(),
        IntOrString::Str(s) => s.parse::<u32>().ok().or_else(|| {
            let (a, b) = s.split_once('.')?;
            Some((u32::from(a.parse::<u16>().ok()?) << 16) + u32::from(b.parse::<u16>().ok()?))
        }),
    }
}

fn node(id: &ResourceId, meta: Metadata, s: types::NodeSpec) -> VResult<Entries> {
    let mut n = model::Node {
        labels: meta.labels,
        ..Default::default()
    };
    if let Some(bgp) = &s.bgp {
        if bgp.as_number.is_none()
            && bgp.ipv4_address.is_empty()
            && bgp.ipv6_address.is_empty()
            && bgp.ipv4_ipip_tunnel_addr.is_empty()
            && bgp.route_reflector_cluster_id.is_empty()
        {
            return err("spec.bgp", "spec.bgp should not be empty");
        }
        if !bgp.ipv4_address.is_empty() {
            n.ipv4_address = Some(node_address(
                "spec.bgp.ipv4Address",
                &bgp.ipv4_address,
                true,
            )?);
        }
        if !bgp.ipv6_address.is_empty() {
            n.ipv6_address = Some(node_address(
                "spec.bgp.ipv6Address",
                &bgp.ipv6_address,
                false,
            )?);
        }
        if !bgp.ipv4_ipip_tunnel_addr.is_empty() {
            n.ipv4_ipip_tunnel_addr = Some(parse_ipv4(
                "spec.bgp.ipv4IPIPTunnelAddr",
                &bgp.ipv4_ipip_tunnel_addr,
            )?);
        }
        if !bgp.route_reflector_cluster_id.is_empty() {
            parse_ipv4(
                "spec.bgp.routeReflectorClusterID",
                &bgp.route_reflector_cluster_id,
            )?;
        }
        if let Some(asn) = &bgp.as_number {
            match as_number(asn) {
                Some(v) => n.as_number = Some(v.to_string()),
                None => return err("spec.bgp.asNumber", format!("invalid AS number {asn}")),
            }
        }
    }
    if let Some(wg) = &s.wireguard {
        if !wg.interface_ipv4_address.is_empty() {
            n.wireguard_v4 = Some(parse_ipv4(
                "spec.wireguard.interfaceIPv4Address",
                &wg.interface_ipv4_address,
            )?);
        }
        if !wg.interface_ipv6_address.is_empty() {
            n.wireguard_v6 = Some(parse_ipv6(
                "spec.wireguard.interfaceIPv6Address",
                &wg.interface_ipv6_address,
            )?);
        }
    }
    if !s.ipv4_vxlan_tunnel_addr.is_empty() {
        n.ipv4_vxlan_tunnel_addr = Some(parse_ipv4(
            "spec.ipv4VXLANTunnelAddr",
            &s.ipv4_vxlan_tunnel_addr,
        )?);
    }
    if !s.ipv6_vxlan_tunnel_addr.is_empty() {
        n.ipv6_vxlan_tunnel_addr = Some(parse_ipv6(
            "spec.ipv6VXLANTunnelAddr",
            &s.ipv6_vxlan_tunnel_addr,
        )?);
    }
    if !s.vxlan_tunnel_mac_addr.is_empty() {
        n.vxlan_tunnel_mac = Some(parse_mac(
            "spec.vxlanTunnelMACAddr",
            &s.vxlan_tunnel_mac_addr,
        )?);
    }
    if !s.vxlan_tunnel_mac_addr_v6.is_empty() {
        n.vxlan_tunnel_mac_v6 = Some(parse_mac(
            "spec.vxlanTunnelMACAddrV6",
            &s.vxlan_tunnel_mac_addr_v6,
        )?);
    }
    for (i, a) in s.addresses.iter().enumerate() {
        let f = Indexed("spec.addresses", i);
        parse_strict_net(Sub(f, "address"), &a.address)?;
        if !matches!(
            a.addr_type.as_str(),
            "" | "CalicoNodeIP" | "InternalIP" | "ExternalIP"
        ) {
            return err(
                format!("{f}.type"),
                format!(
                    "{:?} is invalid: must be CalicoNodeIP, InternalIP or ExternalIP",
                    a.addr_type
                ),
            );
        }
        n.addresses.push(a.address.clone());
    }
    Ok(vec![(Key::Node(id.name.clone()), Value::Node(Arc::new(n)))])
}

fn ipam_block(s: types::IpamBlockSpec) -> VResult<Entries> {
    let Some((_, cidr)) = super::validate::parse_cidr(&s.cidr) else {
        return err("spec.cidr", format!("{:?} is not a valid CIDR", s.cidr));
    };
    let affinity_host = s
        .affinity
        .as_deref()
        .and_then(|a| a.strip_prefix("host:"))
        .filter(|h| !h.is_empty())
        .map(str::to_owned);
    let block = model::IpamBlock {
        cidr: Some(cidr),
        affinity_host,
    };
    Ok(vec![(
        Key::IpamBlock(cidr),
        Value::IpamBlock(Arc::new(block)),
    )])
}

/// `default` -> global parameters, `node.<host>` -> per-host parameters,
/// any other name -> nothing (upstream leaves those to other consumers).
fn config_scope(name: &str) -> Option<Option<&str>> {
    if name == "default" {
        Some(None)
    } else {
        name.strip_prefix("node.")
            .filter(|h| !h.is_empty())
            .map(Some)
    }
}

fn config_key(host: Option<&str>, param: String) -> Key {
    match host {
        None => Key::GlobalConfig(param),
        Some(h) => Key::HostConfig {
            host: h.to_owned(),
            name: param,
        },
    }
}

fn felix_configuration(
    id: &ResourceId,
    meta: &Metadata,
    fields: &[(String, types::Dyn)],
) -> VResult<Entries> {
    // Validate even when the name gives no parameters.
    let params = felixconfig::convert_params(fields, &meta.annotations)?;
    let Some(host) = config_scope(&id.name) else {
        return Ok(Vec::new());
    };
    Ok(params
        .into_iter()
        .map(|(p, v)| (config_key(host, p), Value::Config(v)))
        .collect())
}

fn cluster_information(id: &ResourceId, s: types::ClusterInformationSpec) -> VResult<Entries> {
    let Some(host) = config_scope(&id.name) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (param, value) in [
        ("ClusterGUID", &s.cluster_guid),
        ("ClusterType", &s.cluster_type),
        ("CalicoVersion", &s.calico_version),
        ("Variant", &s.variant),
    ] {
        if !value.is_empty() {
            out.push((
                config_key(host, param.to_owned()),
                Value::Config(value.clone()),
            ));
        }
    }
    // Only the cluster-wide resource carries the ready flag.
    if let (None, Some(ready)) = (host, s.datastore_ready) {
        out.push((Key::Ready, Value::Ready(ready)));
    }
    Ok(out)
}
