//! Validation and conversion of policy / profile rules.
//!
//! One pass per rule: every field is checked with upstream's rules (the Go
//! validator plus the CRD schema rules it delegates to) and the model rule
//! is built with upstream's selector composition (see [`super::selectors`]).

use std::collections::HashSet;
use std::fmt;

use ipnet::IpNet;

use super::selectors::{endpoint_selector, service_account_selector};
use super::types::{self, EntityRule, IcmpFields, IntOrString};
use super::validate::{
    check_annotations, check_selector, check_selector_no_global, err, is_icmp, is_icmpv6,
    matches_subdomain_fmt, parse_port, parse_protocol, supports_ports, Indexed, Sub, VResult,
};
use crate::model::{self, Action, HttpMatch, HttpPath, Port, Protocol, ServiceMatch};

/// Rule-list limit (CRD schema).
const MAX_RULES: usize = 1024;
/// Limit on `nets` / `notNets` entries.
const MAX_NETS: usize = 256;
/// Limit on `ports` / `notPorts` entries.
const MAX_PORTS: usize = 50;
/// Limit on HTTP methods / paths.
const MAX_HTTP_ITEMS: usize = 20;

/// Which list of a policy a rule is in: upstream forbids some fields per
/// direction in policies (profiles pass `None`: no such checks).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Ingress,
    Egress,
}

/// Validates and converts a rule list.  `base` is the field path of the
/// list (e.g. `spec.ingress`); `ns` the policy's namespace ("" if global).
pub(crate) fn convert_rules(
    rules: &[types::Rule],
    ns: &str,
    base: impl fmt::Display + Copy,
    dir: Option<Direction>,
) -> VResult<Vec<model::Rule>> {
    if rules.len() > MAX_RULES {
        return err(
            base,
            format!("too many rules ({} > {MAX_RULES})", rules.len()),
        );
    }
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| convert_rule(r, ns, Indexed(base, i), dir))
        .collect()
}

fn parse_action(path: impl fmt::Display + Copy, s: &str) -> VResult<Action> {
    match s {
        "Allow" => Ok(Action::Allow),
        "Deny" => Ok(Action::Deny),
        "Log" => Ok(Action::Log),
        "Pass" => Ok(Action::Pass),
        "" => err(
            format!("{path}.action"),
            "is required (Allow, Deny, Log or Pass)",
        ),
        other => err(
            format!("{path}.action"),
            format!("{other:?} is invalid: must be Allow, Deny, Log or Pass"),
        ),
    }
}

fn check_icmp(
    field: impl fmt::Display + Copy,
    icmp: &IcmpFields,
) -> VResult<(Option<u8>, Option<u8>)> {
    let icmp_type = match icmp.icmp_type {
        None => None,
        Some(t @ 0..=254) => Some(t as u8),
        Some(t) => {
            return err(
                format!("{field}.type"),
                format!("ICMP type {t} is invalid (must be 0-254)"),
            )
        }
    };
    let code = match icmp.code {
        None => None,
        Some(c @ 0..=255) => Some(c as u8),
        Some(c) => {
            return err(
                format!("{field}.code"),
                format!("ICMP code {c} is invalid (must be 0-255)"),
            )
        }
    };
    if code.is_some() && icmp_type.is_none() {
        return err(
            format!("{field}.code"),
            "ICMP code specified without an ICMP type",
        );
    }
    Ok((icmp_type, code))
}

fn parse_opt_protocol(
    field: impl fmt::Display + Copy,
    p: &Option<IntOrString>,
) -> VResult<Option<Protocol>> {
    p.as_ref().map(|p| parse_protocol(field, p)).transpose()
}

/// Checks a protocol against the rule's IP version.
fn check_protocol_version(
    field: impl fmt::Display + Copy,
    p: Option<&Protocol>,
    ip_version: Option<u8>,
) -> VResult<()> {
    match (p, ip_version) {
        (Some(p), Some(6)) if is_icmp(p) => err(field, "protocol ICMP requires ipVersion 4"),
        (Some(p), Some(4)) if is_icmpv6(p) => err(field, "protocol ICMPv6 requires ipVersion 6"),
        _ => Ok(()),
    }
}

/// The nets of one field, with the running v4/v6 consistency check
/// (upstream's `scanNets`).
struct NetScan {
    ip_version: Option<u8>,
    seen_v4: bool,
    seen_v6: bool,
}

impl NetScan {
    fn scan(
        &mut self,
        field: impl fmt::Display + Copy,
        nets: &[String],
        negated: bool,
    ) -> VResult<Vec<IpNet>> {
        if nets.len() > MAX_NETS {
            return err(
                field,
                format!("too many entries ({} > {MAX_NETS})", nets.len()),
            );
        }
        let mut out = Vec::with_capacity(nets.len());
        let (mut v4, mut v6) = (false, false);
        for (i, s) in nets.iter().enumerate() {
            let f = Indexed(field, i);
            // Rule nets must be CIDRs (an address needs its /32 or /128)
            // with the host bits clear.
            let Some((ip, net)) = super::validate::parse_cidr(s) else {
                return err(f, format!("{s:?} is not a valid CIDR"));
            };
            if ip != net.addr() {
                return err(
                    f,
                    format!("{s:?} is not strictly masked (host bits set; network is {net})"),
                );
            }
            if negated && net.prefix_len() == 0 {
                return err(
                    f,
                    "catch-all CIDR in negation creates logical contradiction (matches no traffic)",
                );
            }
            match net {
                IpNet::V4(_) => v4 = true,
                IpNet::V6(_) => v6 = true,
            }
            out.push(net);
        }
        if let Some(v) = self.ip_version {
            if (v4 && v != 4) || (v6 && v != 6) {
                return err(field, "rule IP version doesn't match CIDR version");
            }
        }
        if (v4 && self.seen_v6) || (v6 && self.seen_v4) || (v4 && v6) {
            return err(field, "rule contains both IPv4 and IPv6 CIDRs");
        }
        self.seen_v4 |= v4;
        self.seen_v6 |= v6;
        Ok(out)
    }
}

fn parse_ports(field: impl fmt::Display + Copy, ports: &[IntOrString]) -> VResult<Vec<Port>> {
    if ports.len() > MAX_PORTS {
        return err(
            field,
            format!("too many entries ({} > {MAX_PORTS})", ports.len()),
        );
    }
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| parse_port(Indexed(field, i), p))
        .collect()
}

/// Checks the port lists of one side against the rule's protocol.
fn check_ports_vs_protocol(
    field: impl fmt::Display + Copy,
    ports: &[Port],
    protocol: Option<&Protocol>,
) -> VResult<()> {
    if ports.is_empty() {
        return Ok(());
    }
    match protocol {
        None if ports.iter().any(|p| !matches!(p, Port::Named(_))) => err(
            field,
            "rules with numeric port or port range must set protocol to TCP or UDP or SCTP",
        ),
        Some(p) if !supports_ports(p) => err(
            field,
            "rules that specify ports must set protocol to TCP or UDP or SCTP",
        ),
        _ => Ok(()),
    }
}

/// Checked parts of one side of a rule.
struct Side {
    nets: Vec<IpNet>,
    not_nets: Vec<IpNet>,
    ports: Vec<Port>,
    not_ports: Vec<Port>,
    selector: String,
    service: Option<ServiceMatch>,
}

fn convert_side(
    er: &EntityRule,
    field: impl fmt::Display + Copy,
    ns: &str,
    scan: &mut NetScan,
    protocol: Option<&Protocol>,
) -> VResult<Side> {
    check_selector_no_global(Sub(field, "selector"), &er.selector)?;
    check_selector_no_global(Sub(field, "notSelector"), &er.not_selector)?;
    if !er.namespace_selector.is_empty() {
        let f = Sub(field, "namespaceSelector");
        check_selector(f, &er.namespace_selector)?;
        if er.namespace_selector.contains("global(")
            && crate::selector::normalize(&er.namespace_selector)
                .ok()
                .as_deref()
                != Some("global()")
        {
            return err(f, "global() cannot be combined with other selectors");
        }
    }
    if let Some(sa) = &er.service_accounts {
        check_selector_no_global(Sub(field, "serviceAccounts.selector"), &sa.selector)?;
        for (i, n) in sa.names.iter().enumerate() {
            if n.is_empty() || n.contains(['\'', '"']) {
                return err(
                    format!("{field}.serviceAccounts.names[{i}]"),
                    format!("{n:?} is not a valid service account name"),
                );
            }
        }
    }
    let service = match &er.services {
        None => None,
        Some(svc) => {
            let f = Sub(field, "services");
            if svc.name.is_empty() {
                return err(format!("{f}.name"), "services must specify a service name");
            }
            if !matches_subdomain_fmt(&svc.name) || svc.name.len() > 253 {
                return err(
                    format!("{f}.name"),
                    format!("{:?} is not a valid service name", svc.name),
                );
            }
            if !svc.namespace.is_empty()
                && (!matches_subdomain_fmt(&svc.namespace) || svc.namespace.len() > 253)
            {
                return err(
                    format!("{f}.namespace"),
                    format!("{:?} is not a valid namespace", svc.namespace),
                );
            }
            if !er.namespace_selector.is_empty() {
                return err(
                    f,
                    "cannot specify NamespaceSelector and Services on the same rule",
                );
            }
            if er.service_accounts.is_some() {
                return err(
                    f,
                    "cannot specify ServiceAccounts and Services on the same rule",
                );
            }
            if !er.selector.is_empty() || !er.not_selector.is_empty() {
                return err(
                    f,
                    "cannot specify Selector/NotSelector and Services on the same rule",
                );
            }
            if !er.nets.is_empty() || !er.not_nets.is_empty() {
                return err(
                    f,
                    "cannot specify Nets/NotNets and Services on the same rule",
                );
            }
            Some(ServiceMatch {
                name: svc.name.clone(),
                namespace: svc.namespace.clone(),
            })
        }
    };
    let nets = scan.scan(Sub(field, "nets"), &er.nets, false)?;
    let not_nets = scan.scan(Sub(field, "notNets"), &er.not_nets, true)?;
    let ports = parse_ports(Sub(field, "ports"), &er.ports)?;
    let not_ports = parse_ports(Sub(field, "notPorts"), &er.not_ports)?;
    check_ports_vs_protocol(Sub(field, "ports"), &ports, protocol)?;
    check_ports_vs_protocol(Sub(field, "notPorts"), &not_ports, protocol)?;

    let sa_selector = er
        .service_accounts
        .as_ref()
        .map(|sa| service_account_selector(&sa.names, &sa.selector))
        .unwrap_or_default();
    let selector = endpoint_selector(
        &er.namespace_selector,
        &er.selector,
        &sa_selector,
        &er.not_selector,
        ns,
    );
    Ok(Side {
        nets,
        not_nets,
        ports,
        not_ports,
        selector,
        service,
    })
}

fn convert_http(path: impl fmt::Display + Copy, http: &types::HttpMatch) -> VResult<HttpMatch> {
    let f = Sub(path, "http");
    if http.methods.len() > MAX_HTTP_ITEMS {
        return err(
            format!("{f}.methods"),
            format!("too many entries (max {MAX_HTTP_ITEMS})"),
        );
    }
    if http.paths.len() > MAX_HTTP_ITEMS {
        return err(
            format!("{f}.paths"),
            format!("too many entries (max {MAX_HTTP_ITEMS})"),
        );
    }
    let mut seen = HashSet::new();
    for m in &http.methods {
        if !seen.insert(m.as_str()) {
            return err(
                format!("{f}.methods"),
                format!("invalid methods (duplicate {m:?})"),
            );
        }
    }
    let mut paths = Vec::with_capacity(http.paths.len());
    for (i, p) in http.paths.iter().enumerate() {
        let pf = format!("{f}.paths[{i}]");
        let (value, exact) = match (p.exact.is_empty(), p.prefix.is_empty()) {
            (false, false) => {
                return err(pf, "invalid path match: both 'exact' and 'prefix' are set")
            }
            (true, true) => {
                return err(
                    pf,
                    "invalid path match: either 'exact' or 'prefix' must be set",
                )
            }
            (false, true) => (&p.exact, true),
            (true, false) => (&p.prefix, false),
        };
        if value.len() > 1024 || !value.starts_with('/') || value.contains(['?', ' ', '#']) {
            return err(
                pf,
                format!(
                    "invalid path {value:?} (must start with '/' and not contain '?', ' ' or '#')"
                ),
            );
        }
        paths.push(if exact {
            HttpPath::Exact(value.clone())
        } else {
            HttpPath::Prefix(value.clone())
        });
    }
    Ok(HttpMatch {
        methods: http.methods.clone(),
        paths,
    })
}

/// Validates and converts one rule.  `path` is its field path.
pub(crate) fn convert_rule(
    r: &types::Rule,
    ns: &str,
    path: impl fmt::Display + Copy,
    dir: Option<Direction>,
) -> VResult<model::Rule> {
    let action = parse_action(path, &r.action)?;
    let ip_version = match r.ip_version {
        None => None,
        Some(v @ (4 | 6)) => Some(v as u8),
        Some(v) => {
            return err(
                format!("{path}.ipVersion"),
                format!("{v} is invalid: must be 4 or 6"),
            )
        }
    };
    let protocol = parse_opt_protocol(Sub(path, "protocol"), &r.protocol)?;
    let not_protocol = parse_opt_protocol(Sub(path, "notProtocol"), &r.not_protocol)?;
    check_protocol_version(Sub(path, "protocol"), protocol.as_ref(), ip_version)?;
    check_protocol_version(Sub(path, "notProtocol"), not_protocol.as_ref(), ip_version)?;

    let (icmp_type, icmp_code) = match &r.icmp {
        None => (None, None),
        Some(icmp) => {
            let f = Sub(path, "icmp");
            if !protocol
                .as_ref()
                .is_some_and(|p| is_icmp(p) || is_icmpv6(p))
            {
                return err(f, "ICMP fields require protocol to be ICMP or ICMPv6");
            }
            check_icmp(f, icmp)?
        }
    };
    let (not_icmp_type, not_icmp_code) = match &r.not_icmp {
        None => (None, None),
        Some(icmp) => check_icmp(Sub(path, "notICMP"), icmp)?,
    };

    let http_match = match &r.http {
        None => None,
        Some(http) => {
            let f = Sub(path, "http");
            if dir == Some(Direction::Egress) {
                return err(f, "not allowed in egress rules");
            }
            if action != Action::Allow {
                return err(f, "HTTP match is only valid on Allow rules");
            }
            if !protocol.as_ref().is_none_or(|p| {
                matches!(p, Protocol::Number(6)) || matches!(p, Protocol::Name(s) if s == "TCP")
            }) {
                return err(f, "rules with HTTP match must have protocol TCP or unset");
            }
            Some(convert_http(path, http)?)
        }
    };

    let metadata = match &r.metadata {
        None => None,
        Some(m) => {
            check_annotations(Sub(path, "metadata.annotations"), &m.annotations)?;
            (!m.annotations.is_empty()).then(|| m.annotations.clone())
        }
    };

    if dir == Some(Direction::Egress) && r.source.services.is_some() {
        return err(
            format!("{path}.source.services"),
            "not allowed in egress rule source",
        );
    }
    if dir == Some(Direction::Ingress) && r.destination.services.is_some() {
        return err(
            format!("{path}.destination.services"),
            "not allowed in ingress rule destination",
        );
    }
    if r.destination.services.is_some()
        && (!r.destination.ports.is_empty() || !r.destination.not_ports.is_empty())
    {
        return err(
            format!("{path}.destination"),
            "ports and notPorts cannot be specified with services",
        );
    }

    let mut scan = NetScan {
        ip_version,
        seen_v4: false,
        seen_v6: false,
    };
    let src = convert_side(
        &r.source,
        Sub(path, "source"),
        ns,
        &mut scan,
        protocol.as_ref(),
    )?;
    let dst = convert_side(
        &r.destination,
        Sub(path, "destination"),
        ns,
        &mut scan,
        protocol.as_ref(),
    )?;

    let sa = |er: &EntityRule| {
        er.service_accounts
            .as_ref()
            .map(|s| (s.names.clone(), s.selector.clone()))
            .unwrap_or_default()
    };
    let (src_sa_names, src_sa_selector) = sa(&r.source);
    let (dst_sa_names, dst_sa_selector) = sa(&r.destination);

    Ok(model::Rule {
        action,
        ip_version,
        protocol,
        not_protocol,
        icmp_type,
        icmp_code,
        not_icmp_type,
        not_icmp_code,
        src_nets: src.nets,
        src_selector: src.selector,
        src_ports: src.ports,
        src_service: src.service,
        dst_nets: dst.nets,
        dst_selector: dst.selector,
        dst_ports: dst.ports,
        dst_service: dst.service,
        not_src_nets: src.not_nets,
        not_src_selector: r.source.not_selector.clone(),
        not_src_ports: src.not_ports,
        not_dst_nets: dst.not_nets,
        not_dst_selector: r.destination.not_selector.clone(),
        not_dst_ports: dst.not_ports,
        original_src_selector: r.source.selector.clone(),
        original_src_namespace_selector: r.source.namespace_selector.clone(),
        original_dst_selector: r.destination.selector.clone(),
        original_dst_namespace_selector: r.destination.namespace_selector.clone(),
        original_not_src_selector: r.source.not_selector.clone(),
        original_not_dst_selector: r.destination.not_selector.clone(),
        original_src_service_account_names: src_sa_names,
        original_src_service_account_selector: src_sa_selector,
        original_dst_service_account_names: dst_sa_names,
        original_dst_service_account_selector: dst_sa_selector,
        http_match,
        metadata,
    })
}
