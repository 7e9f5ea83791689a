//! Expected dataplane views.
//!
//! An [`Expect`] says what the dataplane must hold after a state, in a form
//! that does not depend on the order messages were delivered in: IP sets
//! by selector (or named-port triple) with their members, the active
//! policy and profile names, each endpoint's ordered tiers and policies,
//! pass-through state, encapsulation and configuration.  The comparable
//! part is a [`Digest`]; [`Digest::of_view`] computes the same shape from
//! a [`DataplaneView`], so a mismatch prints as a field-by-field diff.
//!
//! Rules are checked by pattern: a JSON object names only the fields a test
//! cares about (see [`json_matches`]).  Routes and VTEPs are compared only
//! when the expectation mentions them (other helpers own those nodes), but
//! an empty datastore must always yield no routes and no VTEPs.

use std::collections::{BTreeMap, BTreeSet};

use felix::calc::ids::make_unique_id;
use felix::calc::view::{to_json, DataplaneView};
use felix_proto as pb;
use serde_json::Value as Json;

/// Label map in expectations.
pub type Labels = BTreeMap<String, String>;

/// One tier as applied to an endpoint: name, default action and the
/// ordered ingress and egress policy names.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TierExp {
    /// Tier name (`default` for the default tier).
    pub name: String,
    /// What happens when no policy of the tier decides (`Deny`, `Pass`).
    pub default_action: String,
    /// Policies applied to ingress, in order: `name` or `namespace/name`.
    pub ingress: Vec<String>,
    /// Policies applied to egress, in order: `name` or `namespace/name`.
    pub egress: Vec<String>,
}

impl TierExp {
    /// A tier whose policies apply in both directions.
    pub fn both(name: &str, action: &str, policies: &[&str]) -> TierExp {
        TierExp::new(name, action, policies, policies)
    }

    /// A tier with separate ingress and egress policy lists.
    pub fn new(name: &str, action: &str, ingress: &[&str], egress: &[&str]) -> TierExp {
        TierExp {
            name: name.to_string(),
            default_action: action.to_string(),
            ingress: strings(ingress),
            egress: strings(egress),
        }
    }
}

/// A workload endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WepExp {
    /// Profile IDs, in order.
    pub profiles: Vec<String>,
    /// IPv4 networks (`10.0.0.1/32`).
    pub ipv4: Vec<String>,
    /// IPv6 networks (`fd00::1/128`).
    pub ipv6: Vec<String>,
    /// The tiers that apply to the endpoint, in order.
    pub tiers: Vec<TierExp>,
    /// `is_istio_ambient`.
    pub istio_ambient: bool,
    /// `live_migration_role` by proto name (`SOURCE`, `TARGET`) and
    /// `live_migration_uid`; `None` for `NO_ROLE` without a UID.
    pub live_migration: Option<(String, String)>,
}

impl WepExp {
    /// An endpoint with these profiles, IPv4 networks and tiers; no IPv6,
    /// not in the ambient mesh, no live migration.
    pub fn new(profiles: &[&str], ipv4: &[&str], tiers: Vec<TierExp>) -> WepExp {
        WepExp {
            profiles: strings(profiles),
            ipv4: strings(ipv4),
            ipv6: Vec::new(),
            tiers,
            istio_ambient: false,
            live_migration: None,
        }
    }

    /// Marked as in the Istio ambient mesh.
    pub fn istio(mut self) -> WepExp {
        self.istio_ambient = true;
        self
    }

    /// A live-migration role (`SOURCE` / `TARGET`) and UID.
    pub fn live_migration(mut self, role: &str, uid: &str) -> WepExp {
        self.live_migration = Some((role.to_string(), uid.to_string()));
        self
    }

    /// Sets the IPv6 networks.
    pub fn ipv6(mut self, nets: &[&str]) -> WepExp {
        self.ipv6 = strings(nets);
        self
    }
}

/// A host endpoint and its four tier lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HepExp {
    /// The interface name (empty or `*` for all interfaces).
    pub name: String,
    /// Profile IDs, in order.
    pub profiles: Vec<String>,
    /// Expected IPv4 addresses.
    pub ipv4: Vec<String>,
    /// Expected IPv6 addresses.
    pub ipv6: Vec<String>,
    /// Tiers of normal policies.
    pub tiers: Vec<TierExp>,
    /// Tiers of untracked (`doNotTrack`) policies.
    pub untracked: Vec<TierExp>,
    /// Tiers of `preDNAT` policies.
    pub pre_dnat: Vec<TierExp>,
    /// Tiers of `applyOnForward` policies.
    pub forward: Vec<TierExp>,
}

impl HepExp {
    /// A host endpoint on interface `name` with these profiles and expected
    /// IPv4 addresses, and no tiers.
    pub fn new(name: &str, profiles: &[&str], ipv4: &[&str]) -> HepExp {
        HepExp {
            name: name.to_string(),
            profiles: strings(profiles),
            ipv4: strings(ipv4),
            ..Default::default()
        }
    }
    /// Sets the tiers of normal policies.
    pub fn tiers(mut self, t: Vec<TierExp>) -> HepExp {
        self.tiers = t;
        self
    }
    /// Sets the tiers of untracked policies.
    pub fn untracked(mut self, t: Vec<TierExp>) -> HepExp {
        self.untracked = t;
        self
    }
    /// Sets the tiers of pre-DNAT policies.
    pub fn pre_dnat(mut self, t: Vec<TierExp>) -> HepExp {
        self.pre_dnat = t;
        self
    }
    /// Sets the tiers of forward policies.
    pub fn forward(mut self, t: Vec<TierExp>) -> HepExp {
        self.forward = t;
        self
    }
}

/// Host metadata: (IPv4 address, IPv6 address, AS number, labels).
pub type HostExp = (String, String, String, Labels);

/// IPAM pool: (CIDR, masquerade, IPIP mode, VXLAN mode).
pub type PoolExp = (String, bool, String, String);

/// Encapsulation flags: (IPIP, VXLAN, VXLAN v6, no-encap).
pub type EncapExp = (bool, bool, bool, bool);

/// The order-independent, comparable shape of a dataplane view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    /// IP-set ID -> (type name, members).
    pub ip_sets: BTreeMap<String, (String, BTreeSet<String>)>,
    /// `name` for global policies, `namespace/name` for namespaced ones.
    pub policies: BTreeSet<String>,
    /// Active profile IDs.
    pub profiles: BTreeSet<String>,
    /// Keyed `workload_id/endpoint_id`.
    pub weps: BTreeMap<String, WepExp>,
    /// Keyed by host-endpoint ID.
    pub heps: BTreeMap<String, HepExp>,
    /// Namespace name -> labels.
    pub namespaces: BTreeMap<String, Labels>,
    /// Keyed `namespace/name`.
    pub service_accounts: BTreeMap<String, Labels>,
    /// Host metadata by node name.
    pub hosts: BTreeMap<String, HostExp>,
    /// Keyed by pool ID (CIDR with `-` for `/`).
    pub pools: BTreeMap<String, PoolExp>,
    /// The last encapsulation update (all off if none).
    pub encap: EncapExp,
    /// The last configuration update's name -> value map.
    pub config: Labels,
}

/// Patterns for the rules of one policy or profile (ingress, egress); the
/// rule counts must match exactly.
pub type RulesExp = (Vec<Json>, Vec<Json>);

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// Compared with the [`Digest::of_view`] of the view.
    pub digest: Digest,
    /// IP-set ID -> how the test named it (for failure messages).
    pub set_labels: BTreeMap<String, String>,
    /// `policy <name>` / `profile <name>` -> rule patterns.
    pub rules: BTreeMap<String, RulesExp>,
    /// Route destination -> proto3 JSON of the `RouteUpdate`, when checked.
    pub routes: Option<BTreeMap<String, Json>>,
    /// VTEP node -> proto3 JSON of the `VXLANTunnelEndpointUpdate`, when
    /// checked.
    pub vteps: Option<BTreeMap<String, Json>>,
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

fn labels(l: &[(&str, &str)]) -> Labels {
    l.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The IP-set ID of a selector.
pub fn selector_set_id(sel: &str) -> String {
    felix::selector::parse(sel)
        .unwrap_or_else(|e| panic!("bad selector {sel:?} in expectation: {e}"))
        .unique_id()
        .to_string()
}

/// The IP-set ID of a named-port set (`proto` is `tcp`, `udp`, `sctp` or
/// `any`).
pub fn named_port_set_id(sel: &str, proto: &str, port: &str) -> String {
    make_unique_id("n", &format!("{},{proto},{port}", selector_set_id(sel)))
}

impl Expect {
    /// Expects an empty dataplane; add to it with the builder methods.
    pub fn new() -> Expect {
        Expect::default()
    }

    /// A selector IP set (type NET) and its members (`10.0.0.1/32`).
    pub fn sel_set(self, sel: &str, members: &[&str]) -> Expect {
        let id = selector_set_id(sel);
        self.raw_set(&id, sel, "NET", members)
    }

    /// A named-port IP set (type IP_AND_PORT); members `10.0.0.1,tcp:80`.
    pub fn np_set(self, sel: &str, proto: &str, port: &str, members: &[&str]) -> Expect {
        let id = named_port_set_id(sel, proto, port);
        self.raw_set(
            &id,
            &format!("{sel} / {proto} / {port}"),
            "IP_AND_PORT",
            members,
        )
    }

    /// An IP set by ID.
    pub fn raw_set(mut self, id: &str, label: &str, ty: &str, members: &[&str]) -> Expect {
        self.digest.ip_sets.insert(
            id.to_string(),
            (
                ty.to_string(),
                members.iter().map(|m| m.to_string()).collect(),
            ),
        );
        self.set_labels.insert(id.to_string(), label.to_string());
        self
    }

    /// Active policies: `name` for global, `namespace/name` for namespaced.
    pub fn policies(mut self, names: &[&str]) -> Expect {
        self.digest.policies.extend(strings(names));
        self
    }

    /// Active profiles by ID.
    pub fn profiles(mut self, names: &[&str]) -> Expect {
        self.digest.profiles.extend(strings(names));
        self
    }

    /// A workload endpoint, keyed `workload_id/endpoint_id`.
    pub fn wep(mut self, id: &str, w: WepExp) -> Expect {
        self.digest.weps.insert(id.to_string(), w);
        self
    }

    /// A host endpoint, keyed by its endpoint ID.
    pub fn hep(mut self, id: &str, h: HepExp) -> Expect {
        self.digest.heps.insert(id.to_string(), h);
        self
    }

    /// A namespace and its labels.
    pub fn namespace(mut self, name: &str, l: &[(&str, &str)]) -> Expect {
        self.digest.namespaces.insert(name.to_string(), labels(l));
        self
    }

    /// A service account in namespace `ns` and its labels.
    pub fn service_account(mut self, ns: &str, name: &str, l: &[(&str, &str)]) -> Expect {
        self.digest
            .service_accounts
            .insert(format!("{ns}/{name}"), labels(l));
        self
    }

    /// Host metadata of node `name`: addresses, AS number and labels (empty
    /// strings where unset).
    pub fn host(mut self, name: &str, v4: &str, v6: &str, asn: &str, l: &[(&str, &str)]) -> Expect {
        self.digest.hosts.insert(
            name.to_string(),
            (v4.to_string(), v6.to_string(), asn.to_string(), labels(l)),
        );
        self
    }

    /// An IPAM pool with its NAT-outgoing flag and IPIP / VXLAN modes.
    pub fn pool(mut self, cidr: &str, masquerade: bool, ipip: &str, vxlan: &str) -> Expect {
        self.digest.pools.insert(
            cidr.replacen('/', "-", 1),
            (
                cidr.to_string(),
                masquerade,
                ipip.to_string(),
                vxlan.to_string(),
            ),
        );
        self
    }

    /// Expects these encapsulation flags (all `false` is the same as no
    /// encapsulation update).
    pub fn encap(mut self, ipip: bool, vxlan: bool, vxlan_v6: bool, no_encap: bool) -> Expect {
        self.digest.encap = (ipip, vxlan, vxlan_v6, no_encap);
        self
    }

    /// Entries of the configuration map sent to the dataplane.
    pub fn config(mut self, c: &[(&str, &str)]) -> Expect {
        self.digest.config.extend(labels(c));
        self
    }

    /// Rule patterns of an active policy (`name` or `namespace/name`).
    pub fn policy_rules(mut self, name: &str, ingress: Vec<Json>, egress: Vec<Json>) -> Expect {
        self.rules
            .insert(format!("policy {name}"), (ingress, egress));
        self
    }

    /// Rule patterns of an active profile.
    pub fn profile_rules(mut self, name: &str, ingress: Vec<Json>, egress: Vec<Json>) -> Expect {
        self.rules
            .insert(format!("profile {name}"), (ingress, egress));
        self
    }

    /// Expects exactly these routes (adds to any given before).
    pub fn route(mut self, dst: &str, update: Json) -> Expect {
        self.routes
            .get_or_insert_with(BTreeMap::new)
            .insert(dst.to_string(), update);
        self
    }

    /// Expects exactly these VTEPs (adds to any given before).
    pub fn vtep(mut self, node: &str, update: Json) -> Expect {
        self.vteps
            .get_or_insert_with(BTreeMap::new)
            .insert(node.to_string(), update);
        self
    }

    /// Expects no routes and no VTEPs.
    pub fn no_routes(mut self) -> Expect {
        self.routes.get_or_insert_with(BTreeMap::new);
        self.vteps.get_or_insert_with(BTreeMap::new);
        self
    }

    /// Union with another expectation (for composing states); `other`
    /// wins on conflicts, its encapsulation wins if it is not all-off.
    pub fn merge(mut self, other: &Expect) -> Expect {
        let d = &mut self.digest;
        let o = &other.digest;
        d.ip_sets.extend(o.ip_sets.clone());
        d.policies.extend(o.policies.clone());
        d.profiles.extend(o.profiles.clone());
        d.weps.extend(o.weps.clone());
        d.heps.extend(o.heps.clone());
        d.namespaces.extend(o.namespaces.clone());
        d.service_accounts.extend(o.service_accounts.clone());
        d.hosts.extend(o.hosts.clone());
        d.pools.extend(o.pools.clone());
        if o.encap != EncapExp::default() {
            d.encap = o.encap;
        }
        d.config.extend(o.config.clone());
        self.set_labels.extend(other.set_labels.clone());
        self.rules.extend(other.rules.clone());
        for (dst, r) in other.routes.iter().flatten() {
            self = self.route(dst, r.clone());
        }
        for (n, v) in other.vteps.iter().flatten() {
            self = self.vtep(n, v.clone());
        }
        self
    }

    /// Compares a view with this expectation; `Err` describes every
    /// difference.
    pub fn check(&self, view: &DataplaneView) -> Result<(), String> {
        let mut problems = Vec::new();
        let got = Digest::of_view(view);
        if got != self.digest {
            problems.push(describe_diff(&self.digest, &got, &self.set_labels));
        }
        for (what, (ingress, egress)) in &self.rules {
            if let Err(e) = check_rules(view, what, ingress, egress) {
                problems.push(e);
            }
        }
        if let Some(routes) = &self.routes {
            let got: BTreeMap<String, Json> = view
                .routes
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect();
            if &got != routes {
                problems.push(format!("routes: expected {routes:#?}\n got {got:#?}"));
            }
        }
        if let Some(vteps) = &self.vteps {
            let got: BTreeMap<String, Json> = view
                .vteps
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect();
            if &got != vteps {
                problems.push(format!("vteps: expected {vteps:#?}\n got {got:#?}"));
            }
        }
        if !view.in_sync {
            problems.push("the dataplane was never told in-sync".to_string());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}

/// Checks that a view holds nothing but `baseline`, what the graph holds
/// for an empty datastore (nothing at all, except the permanent sets of
/// optional nodes such as the Istio calculator's): the teardown check.
pub fn check_empty(view: &DataplaneView, baseline: &Digest) -> Result<(), String> {
    let got = Digest::of_view(view);
    let mut problems = Vec::new();
    if &got != baseline {
        problems.push(describe_diff(baseline, &got, &BTreeMap::new()));
    }
    if !view.routes.is_empty() || !view.vteps.is_empty() {
        problems.push(format!(
            "leaked routes {:?} / VTEPs {:?}",
            view.routes.keys().collect::<Vec<_>>(),
            view.vteps.keys().collect::<Vec<_>>()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn describe_diff(want: &Digest, got: &Digest, set_labels: &BTreeMap<String, String>) -> String {
    let mut out = String::from("dataplane differs from expectation:");
    macro_rules! field {
        ($f:ident) => {
            if want.$f != got.$f {
                out.push_str(&format!(
                    "\n  {}:\n    expected {:?}\n    got      {:?}",
                    stringify!($f),
                    want.$f,
                    got.$f
                ));
            }
        };
    }
    if want.ip_sets != got.ip_sets {
        for (id, set) in &want.ip_sets {
            let label = set_labels.get(id).map(String::as_str).unwrap_or("");
            match got.ip_sets.get(id) {
                None => out.push_str(&format!("\n  missing IP set {id} ({label}): {set:?}")),
                Some(g) if g != set => out.push_str(&format!(
                    "\n  IP set {id} ({label}): expected {set:?}, got {g:?}"
                )),
                Some(_) => {}
            }
        }
        for (id, set) in &got.ip_sets {
            if !want.ip_sets.contains_key(id) {
                out.push_str(&format!("\n  unexpected IP set {id}: {set:?}"));
            }
        }
    }
    field!(policies);
    field!(profiles);
    field!(weps);
    field!(heps);
    field!(namespaces);
    field!(service_accounts);
    field!(hosts);
    field!(pools);
    field!(encap);
    field!(config);
    out
}

fn policy_name(id: &pb::PolicyId) -> String {
    if id.namespace.is_empty() {
        id.name.clone()
    } else {
        format!("{}/{}", id.namespace, id.name)
    }
}

fn tiers(t: &[pb::TierInfo]) -> Vec<TierExp> {
    t.iter()
        .map(|t| TierExp {
            name: t.name.clone(),
            default_action: t.default_action.clone(),
            ingress: t.ingress_policies.iter().map(policy_name).collect(),
            egress: t.egress_policies.iter().map(policy_name).collect(),
        })
        .collect()
}

fn map_labels<'a>(m: impl IntoIterator<Item = (&'a String, &'a String)>) -> Labels {
    m.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn live_migration(ep: &pb::WorkloadEndpoint) -> Option<(String, String)> {
    if ep.live_migration_role == pb::LiveMigrationRole::NoRole as i32
        && ep.live_migration_uid.is_empty()
    {
        return None;
    }
    let role = pb::LiveMigrationRole::try_from(ep.live_migration_role)
        .map(|r| r.as_str_name().to_string())
        .unwrap_or_else(|_| format!("role {}", ep.live_migration_role));
    Some((role, ep.live_migration_uid.clone()))
}

impl Digest {
    /// The digest of a view.
    pub fn of_view(v: &DataplaneView) -> Digest {
        Digest {
            ip_sets: v
                .ip_sets
                .iter()
                .map(|(id, (t, members))| {
                    let ty = pb::ip_set_update::IpSetType::try_from(*t)
                        .map(|t| t.as_str_name().to_string())
                        .unwrap_or_else(|_| format!("type {t}"));
                    (id.clone(), (ty, members.clone()))
                })
                .collect(),
            policies: v
                .policies
                .keys()
                .map(|(_, ns, name)| {
                    if ns.is_empty() {
                        name.clone()
                    } else {
                        format!("{ns}/{name}")
                    }
                })
                .collect(),
            profiles: v.profiles.keys().cloned().collect(),
            weps: v
                .workload_endpoints
                .iter()
                .map(|((_, w, e), ep)| {
                    (
                        format!("{w}/{e}"),
                        WepExp {
                            profiles: ep.profile_ids.clone(),
                            ipv4: ep.ipv4_nets.clone(),
                            ipv6: ep.ipv6_nets.clone(),
                            tiers: tiers(&ep.tiers),
                            istio_ambient: ep.is_istio_ambient,
                            live_migration: live_migration(ep),
                        },
                    )
                })
                .collect(),
            heps: v
                .host_endpoints
                .iter()
                .map(|(id, ep)| {
                    (
                        id.clone(),
                        HepExp {
                            name: ep.name.clone(),
                            profiles: ep.profile_ids.clone(),
                            ipv4: ep.expected_ipv4_addrs.clone(),
                            ipv6: ep.expected_ipv6_addrs.clone(),
                            tiers: tiers(&ep.tiers),
                            untracked: tiers(&ep.untracked_tiers),
                            pre_dnat: tiers(&ep.pre_dnat_tiers),
                            forward: tiers(&ep.forward_tiers),
                        },
                    )
                })
                .collect(),
            namespaces: v
                .namespaces
                .iter()
                .map(|(n, u)| (n.clone(), map_labels(&u.labels)))
                .collect(),
            service_accounts: v
                .service_accounts
                .iter()
                .map(|((ns, n), u)| (format!("{ns}/{n}"), map_labels(&u.labels)))
                .collect(),
            hosts: v
                .host_metadata
                .iter()
                .map(|(n, h)| {
                    (
                        n.clone(),
                        (
                            h.ipv4_addr.clone(),
                            h.ipv6_addr.clone(),
                            h.asnumber.clone(),
                            map_labels(&h.labels),
                        ),
                    )
                })
                .collect(),
            pools: v
                .ipam_pools
                .iter()
                .map(|(id, p)| {
                    let pool = p.pool.clone().unwrap_or_default();
                    (
                        id.clone(),
                        (pool.cidr, pool.masquerade, pool.ipip_mode, pool.vxlan_mode),
                    )
                })
                .collect(),
            encap: v
                .encapsulation
                .map(|e| {
                    (
                        e.ipip_enabled,
                        e.vxlan_enabled,
                        e.vxlan_enabled_v6,
                        e.no_encap_enabled,
                    )
                })
                .unwrap_or_default(),
            config: v.config.clone().into_iter().collect(),
        }
    }
}

fn check_rules(
    view: &DataplaneView,
    what: &str,
    ingress: &[Json],
    egress: &[Json],
) -> Result<(), String> {
    let (kind, name) = what.split_once(' ').unwrap_or(("", what));
    let (inbound, outbound) = if kind == "policy" {
        let found = view.policies.iter().find(|((_, ns, n), _)| {
            if ns.is_empty() {
                n == name
            } else {
                format!("{ns}/{n}") == name
            }
        });
        match found {
            Some((_, p)) => (&p.inbound_rules, &p.outbound_rules),
            None => return Err(format!("{what}: not active, cannot check its rules")),
        }
    } else {
        match view.profiles.get(name) {
            Some(p) => (&p.inbound_rules, &p.outbound_rules),
            None => return Err(format!("{what}: not active, cannot check its rules")),
        }
    };
    for (dir, pats, rules) in [
        ("inbound", ingress, inbound),
        ("outbound", egress, outbound),
    ] {
        if pats.len() != rules.len() {
            return Err(format!(
                "{what}: expected {} {dir} rules, got {}: {:#}",
                pats.len(),
                rules.len(),
                Json::Array(rules.iter().map(to_json).collect())
            ));
        }
        for (i, (pat, rule)) in pats.iter().zip(rules).enumerate() {
            let got = to_json(rule);
            if !json_matches(pat, &got) {
                return Err(format!(
                    "{what}: {dir} rule {i} does not match\n  pattern {pat}\n  got     {got}"
                ));
            }
        }
    }
    Ok(())
}

/// Whether `actual` matches `pattern`: objects match when every field of
/// the pattern matches (a field absent from `actual` matches only the
/// proto3 default: null, false, 0, "", [] or {}); arrays match element by
/// element with equal lengths; anything else must be equal.
pub fn json_matches(pattern: &Json, actual: &Json) -> bool {
    match (pattern, actual) {
        (Json::Object(p), Json::Object(a)) => p.iter().all(|(k, pv)| match a.get(k) {
            Some(av) => json_matches(pv, av),
            None => is_default(pv),
        }),
        (Json::Array(p), Json::Array(a)) => {
            p.len() == a.len() && p.iter().zip(a).all(|(x, y)| json_matches(x, y))
        }
        _ => pattern == actual,
    }
}

fn is_default(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_f64() == Some(0.0),
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => o.is_empty(),
    }
}
