//! `manager/endpoints-v4` / `-v6`: owns everything per local endpoint:
//!
//! - the workload endpoint chains (`cali-tw-*`, `cali-fw-*`, filter) and the
//!   host endpoint chains (per table);
//! - the dispatch chains, which jump from the top-level chains to the
//!   endpoint chains by interface name and end in a drop for unknown
//!   workload interfaces (fail closed: a new `cali*` interface passes
//!   nothing until its endpoint is programmed);
//! - the routes to local workloads (`/32` or `/128` per address via the
//!   workload's interface), for endpoints in state `active`;
//! - the host-side interface settings of workload interfaces (proxy ARP,
//!   forwarding, ...; see `iproute::IfaceSettingsTable`);
//! - `cali-rpf-skip` (raw table), rendered with the dispatch chains: the
//!   source prefixes each owned workload interface may send from besides
//!   its own addresses (`allowSpoofedSourcePrefixes`, which the calc graph
//!   passes only with `WorkloadSourceSpoofing=Any`), exempt from the
//!   anti-spoofing RPF check.
//!
//! Dirty tracking: per endpoint, plus one flag for the dispatch chains
//! (set only when the set of interface names changes).
//!
//! Shadowed workload endpoints (as upstream): several workload endpoints
//! may claim one interface name for a while, e.g. a pod re-created under a
//! new identity whose new endpoint arrives before the old one is deleted.
//! The newest claim is the interface's *owner*: only it renders chains,
//! routes and interface settings; the others are *shadowed* and render
//! nothing. Removing the owner hands the interface to the newest surviving
//! claim within the same programming pass, so the interface's chains,
//! routes and settings are rewritten in place (never removed and re-added);
//! removing a shadowed endpoint changes nothing.
//!
//! Host endpoints are resolved to interfaces as upstream does: one with an
//! interface name applies to that interface; one without (matched by
//! `expectedIPs`) applies to every non-workload interface that carries one
//! of its expected addresses and is not claimed by a named host endpoint
//! (lowest endpoint ID wins a contested interface). Addresses come from the
//! interface monitor's state ([`EndpointManager::with_interfaces`]); its
//! reports re-resolve at the next programming pass. Without that state
//! such host endpoints match nothing. `interfaceName: "*"` is not
//! supported.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use felix_actors::{ApplyCtx, ApplyError, DesiredInput, Manager};
use felix_proto::{HostEndpoint, WorkloadEndpoint};
use ipnet::IpNet;

use crate::dataplane::generictables::Chain;
use crate::dataplane::ifacemon::{IfaceSubscription, InterfaceState};
use crate::dataplane::rules::TableName;
use crate::dataplane::IpVersion;

use super::chains::{OwnedChains, TablePlan};
use super::render::ChainSource;
use super::targets::TableInputs;
use super::Payload;
use crate::dataplane::desired::{
    IfaceSettings, IfacesDesired, RouteKey, RouteTarget, RoutesDesired,
};

/// Identity of an endpoint (or of the dispatch chains, which are one object).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Workload {
        orchestrator: String,
        workload: String,
        endpoint: String,
    },
    Host(String),
    Dispatch,
}

/// The endpoint manager's outputs for one IP version.
#[derive(Debug, Clone)]
pub struct EndpointOutputs {
    /// Table inputs (endpoint and dispatch chains); `None` in eBPF mode, where the programs
    /// on the interfaces apply policy: no chain is rendered, routes and interface settings
    /// are written as in the other modes.
    pub tables: Option<TableInputs>,
    /// The route driver's input.
    pub routes: DesiredInput<RoutesDesired>,
    /// The interface-settings driver's input.
    pub ifaces: DesiredInput<IfacesDesired>,
}

/// See the module docs.
pub struct EndpointManager {
    name: String,
    ipv: IpVersion,
    source: Arc<dyn ChainSource>,
    out: EndpointOutputs,
    workloads: BTreeMap<Key, WorkloadEndpoint>,
    hosts: BTreeMap<Key, HostEndpoint>,
    dirty: BTreeSet<Key>,
    dispatch_dirty: bool,
    chains: OwnedChains<Key>,
    /// Interface each workload's routes and settings were written under.
    routed_iface: BTreeMap<Key, String>,
    /// Workload claims per interface name, by claim order; the last one
    /// owns the interface (see module docs).
    claims: BTreeMap<String, BTreeMap<u64, Key>>,
    /// Each claiming workload's interface and claim number.
    claim_of: BTreeMap<Key, (String, u64)>,
    /// Next claim number.
    next_claim: u64,
    /// Interface names the dispatch chains were last rendered for.
    dispatch_for: (Vec<String>, Vec<String>),
    /// Interface addresses (for host endpoints matched by expected IPs),
    /// the subscription to their changes, and the workload prefixes.
    ifaces: Option<(InterfaceState, IfaceSubscription, Vec<String>)>,
    /// Interfaces each host endpoint currently applies to.
    host_ifaces: BTreeMap<Key, Vec<String>>,
    /// A host endpoint changed since the last resolution.
    hosts_changed: bool,
    /// Workloads with `allow_spoofed_source_prefixes`.
    spoofers: BTreeSet<Key>,
    /// What the last rendered `cali-rpf-skip` holds (interface, prefixes).
    rpf_for: Vec<(String, Vec<IpNet>)>,
}

/// True if the workload is administratively up (the only state that gets
/// routes and interface settings).
fn is_active(ep: &WorkloadEndpoint) -> bool {
    ep.state == "active"
}

impl EndpointManager {
    /// A manager writing as `name`.
    pub fn new(
        name: &str,
        ipv: IpVersion,
        source: Arc<dyn ChainSource>,
        out: EndpointOutputs,
    ) -> Self {
        EndpointManager {
            name: name.to_string(),
            ipv,
            source,
            out,
            workloads: BTreeMap::new(),
            hosts: BTreeMap::new(),
            dirty: BTreeSet::new(),
            // The dispatch chains exist (ending in the drop) even with no
            // endpoints at all.
            dispatch_dirty: true,
            chains: OwnedChains::default(),
            routed_iface: BTreeMap::new(),
            claims: BTreeMap::new(),
            claim_of: BTreeMap::new(),
            next_claim: 0,
            dispatch_for: (Vec::new(), Vec::new()),
            ifaces: None,
            host_ifaces: BTreeMap::new(),
            hosts_changed: false,
            spoofers: BTreeSet::new(),
            rpf_for: Vec::new(),
        }
    }

    /// Per owned workload interface (in name order), the spoofable source
    /// prefixes of this family; interfaces with none are left out.
    fn rpf_allowed(&self) -> Vec<(String, Vec<IpNet>)> {
        let mut out: BTreeMap<String, Vec<IpNet>> = BTreeMap::new();
        for key in &self.spoofers {
            let Some(ep) = self.workloads.get(key) else {
                continue;
            };
            if ep.name.is_empty() || !self.owns_iface(key) {
                continue;
            }
            let nets: Vec<IpNet> = ep
                .allow_spoofed_source_prefixes
                .iter()
                .filter_map(|p| match parse_net(p) {
                    Some(n) => Some(n.trunc()),
                    None => {
                        tracing::warn!(prefix = %p, iface = %ep.name, "unparseable spoofed source prefix skipped");
                        None
                    }
                })
                .filter(|n| self.family_ok(n))
                .collect();
            if !nets.is_empty() {
                out.insert(ep.name.clone(), nets);
            }
        }
        out.into_iter().collect()
    }

    fn family_ok(&self, n: &IpNet) -> bool {
        matches!(
            (n, self.ipv),
            (IpNet::V4(_), IpVersion::V4) | (IpNet::V6(_), IpVersion::V6)
        )
    }

    /// Resolves host endpoints without an interface name against the
    /// addresses in `state` (non-workload interfaces only, by the
    /// `workload_prefixes`), re-resolving whenever the monitor reports a
    /// change.
    pub fn with_interfaces(mut self, state: &InterfaceState, workload_prefixes: &[String]) -> Self {
        self.ifaces = Some((state.clone(), state.subscribe(), workload_prefixes.to_vec()));
        self
    }

    /// Which interfaces each host endpoint applies to (see module docs).
    fn resolve_hosts(&self) -> BTreeMap<Key, Vec<String>> {
        resolve_host_endpoints(
            &self.hosts,
            self.ifaces.as_ref().map(|(st, _, p)| (st, p.as_slice())),
        )
    }

    /// Re-resolves host endpoints; marks the ones whose interfaces changed.
    fn refresh_host_ifaces(&mut self) {
        let reported = self
            .ifaces
            .as_ref()
            .is_some_and(|(_, sub, _)| !sub.take().is_empty());
        if !reported && !self.hosts_changed {
            return;
        }
        self.hosts_changed = false;
        let new = self.resolve_hosts();
        if new == self.host_ifaces {
            return;
        }
        let keys: BTreeSet<Key> = new.keys().chain(self.host_ifaces.keys()).cloned().collect();
        for k in keys {
            if new.get(&k) != self.host_ifaces.get(&k) {
                self.dirty.insert(k);
            }
        }
        self.host_ifaces = new;
        self.dispatch_dirty = true;
    }

    /// The workload that owns interface `iface` (the newest claim).
    fn owner_of(&self, iface: &str) -> Option<&Key> {
        self.claims.get(iface)?.values().next_back()
    }

    /// True if `key` is a workload that owns its interface (not shadowed).
    fn owns_iface(&self, key: &Key) -> bool {
        self.claim_of
            .get(key)
            .is_some_and(|(iface, _)| self.owner_of(iface) == Some(key))
    }

    /// Records that workload `key` now claims `iface` (`None`: no
    /// interface, or the endpoint is gone). A workload that keeps its
    /// interface keeps its claim (and so its place). Marks dirty every
    /// workload whose ownership of an interface changed.
    fn set_claim(&mut self, key: &Key, iface: Option<&str>) {
        let old = self.claim_of.get(key).map(|(i, _)| i.clone());
        if old.as_deref() == iface {
            return;
        }
        let touched: Vec<String> = old.iter().cloned().chain(iface.map(String::from)).collect();
        let before: Vec<Option<Key>> = touched.iter().map(|i| self.owner_of(i).cloned()).collect();
        if let Some((i, n)) = self.claim_of.remove(key) {
            if let Some(c) = self.claims.get_mut(&i) {
                c.remove(&n);
                if c.is_empty() {
                    self.claims.remove(&i);
                }
            }
        }
        if let Some(i) = iface {
            let n = self.next_claim;
            self.next_claim += 1;
            self.claims
                .entry(i.to_string())
                .or_default()
                .insert(n, key.clone());
            self.claim_of.insert(key.clone(), (i.to_string(), n));
        }
        for (i, was) in touched.iter().zip(before) {
            let now = self.owner_of(i).cloned();
            if now != was {
                if let Some(k) = &now {
                    if k != key {
                        tracing::info!(iface = %i, endpoint = ?k, "workload endpoint owns its interface again (the other claim went away)");
                    }
                }
                if let Some(k) = was.filter(|k| k != key) {
                    tracing::info!(iface = %i, endpoint = ?k, by = ?key, "workload endpoint shadowed by a newer endpoint on its interface");
                    self.dirty.insert(k);
                }
                self.dirty.extend(now);
            }
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::WorkloadEndpointUpdate(_)
                | Payload::WorkloadEndpointRemove(_)
                | Payload::HostEndpointUpdate(_)
                | Payload::HostEndpointRemove(_)
        )
    }

    fn iface_names(&self) -> (Vec<String>, Vec<String>) {
        let wl: BTreeSet<String> = self
            .workloads
            .values()
            .filter(|e| !e.name.is_empty())
            .map(|e| e.name.clone())
            .collect();
        let host: BTreeSet<String> = self.host_ifaces.values().flatten().cloned().collect();
        (wl.into_iter().collect(), host.into_iter().collect())
    }

    fn render(&self, key: &Key) -> Option<Vec<(TableName, Chain)>> {
        match key {
            Key::Workload { .. } => {
                let ep = self.workloads.get(key)?;
                if ep.name.is_empty() || !self.owns_iface(key) {
                    return None;
                }
                Some(
                    self.source
                        .workload_endpoint_chains(&ep.name, ep)
                        .into_iter()
                        .map(|c| (TableName::Filter, c))
                        .collect(),
                )
            }
            Key::Host(id) => {
                let ep = self.hosts.get(key)?;
                let ifaces = self.host_ifaces.get(key).filter(|v| !v.is_empty());
                let Some(ifaces) = ifaces else {
                    tracing::debug!(id = %id, "host endpoint matches no interface (yet)");
                    return None;
                };
                Some(
                    ifaces
                        .iter()
                        .flat_map(|i| self.source.host_endpoint_chains(i, ep))
                        .collect(),
                )
            }
            Key::Dispatch => {
                let (wl, host) = self.iface_names();
                let mut chains = self.source.dispatch_chains(&wl, &host);
                chains.push((TableName::Raw, self.source.rpf_skip_chain(&self.rpf_for)));
                Some(chains)
            }
        }
    }

    /// The routed destinations of a workload for this IP version.
    fn routes_of(&self, ep: &WorkloadEndpoint) -> BTreeSet<RouteTarget> {
        let nets = match self.ipv {
            IpVersion::V4 => &ep.ipv4_nets,
            IpVersion::V6 => &ep.ipv6_nets,
        };
        nets.iter()
            .filter_map(|s| match parse_net(s) {
                Some(n) => Some(n),
                None => {
                    tracing::warn!(net = %s, iface = %ep.name, "unparseable endpoint address skipped");
                    None
                }
            })
            .filter(|n| self.family_ok(n))
            .map(RouteTarget::device)
            .collect()
    }

    /// Routes and interface settings for the dirty workloads (or all).
    ///
    /// One operation per interface: when an interface changes hands within
    /// the pass (its owner removed or shadowed, another claim now owning
    /// it), the new owner's write replaces the old one's removal whatever
    /// order the keys come in, so the routes stay in place.
    fn write_routes(&mut self, ctx: &mut ApplyCtx, keys: &[Key], full: bool) {
        let mut route_ops: BTreeMap<String, Option<BTreeSet<RouteTarget>>> = BTreeMap::new();
        let mut iface_ops: BTreeMap<String, Option<IfaceSettings>> = BTreeMap::new();
        for key in keys {
            if !matches!(key, Key::Workload { .. }) {
                continue;
            }
            let old = self.routed_iface.remove(key);
            let owns = self.owns_iface(key);
            let want = self
                .workloads
                .get(key)
                .filter(|ep| !ep.name.is_empty() && owns && is_active(ep))
                .map(|ep| {
                    let settings = IfaceSettings {
                        rp_filter: if ep.allow_spoofed_source_prefixes.is_empty() {
                            1
                        } else {
                            0
                        },
                    };
                    (ep.name.clone(), self.routes_of(ep), settings)
                });
            if let Some(old) = old {
                if want.as_ref().is_none_or(|(n, _, _)| *n != old) {
                    route_ops.entry(old.clone()).or_insert(None);
                    iface_ops.entry(old).or_insert(None);
                }
            }
            if let Some((iface, routes, settings)) = want {
                route_ops.insert(iface.clone(), Some(routes));
                iface_ops.insert(iface.clone(), Some(settings));
                self.routed_iface.insert(key.clone(), iface);
            }
        }
        let owner = self.name.as_str();
        ctx.write(&self.out.routes, |d| {
            if full {
                let all: Vec<_> = route_ops
                    .into_iter()
                    .filter_map(|(i, r)| r.map(|r| (RouteKey::workload(i), r)))
                    .collect();
                d.replace_owned(owner, all);
            } else {
                for (iface, r) in route_ops {
                    match r {
                        Some(r) => {
                            d.set(owner, RouteKey::workload(iface), r);
                        }
                        None => {
                            d.remove(&RouteKey::workload(iface));
                        }
                    }
                }
            }
        });
        ctx.write(&self.out.ifaces, |d| {
            if full {
                let all: Vec<_> = iface_ops
                    .into_iter()
                    .filter_map(|(i, s)| s.map(|s| (i, s)))
                    .collect();
                d.replace_owned(owner, all);
            } else {
                for (iface, s) in iface_ops {
                    match s {
                        Some(s) => {
                            d.set(owner, iface, s);
                        }
                        None => {
                            d.remove(&iface);
                        }
                    }
                }
            }
        });
    }
}

impl Manager<Payload> for EndpointManager {
    fn on_update(&mut self, msg: &Payload) {
        let key = match msg {
            Payload::WorkloadEndpointUpdate(u) => {
                let Some(id) = &u.id else { return };
                let key = Key::Workload {
                    orchestrator: id.orchestrator_id.clone(),
                    workload: id.workload_id.clone(),
                    endpoint: id.endpoint_id.clone(),
                };
                let ep = u.endpoint.clone().unwrap_or_default();
                let iface = (!ep.name.is_empty()).then(|| ep.name.clone());
                if ep.allow_spoofed_source_prefixes.is_empty() {
                    self.spoofers.remove(&key);
                } else {
                    self.spoofers.insert(key.clone());
                }
                let old_name = self.workloads.insert(key.clone(), ep).map(|e| e.name);
                if old_name.as_deref() != self.workloads.get(&key).map(|e| e.name.as_str()) {
                    self.dispatch_dirty = true;
                }
                self.set_claim(&key, iface.as_deref());
                key
            }
            Payload::WorkloadEndpointRemove(r) => {
                let Some(id) = &r.id else { return };
                let key = Key::Workload {
                    orchestrator: id.orchestrator_id.clone(),
                    workload: id.workload_id.clone(),
                    endpoint: id.endpoint_id.clone(),
                };
                if self.workloads.remove(&key).is_some() {
                    self.dispatch_dirty = true;
                }
                self.spoofers.remove(&key);
                self.set_claim(&key, None);
                key
            }
            Payload::HostEndpointUpdate(u) => {
                let Some(id) = &u.id else { return };
                let key = Key::Host(id.endpoint_id.clone());
                self.hosts_changed = true;
                let ep = u.endpoint.clone().unwrap_or_default();
                let old_name = self.hosts.insert(key.clone(), ep).map(|e| e.name);
                if old_name.as_deref() != self.hosts.get(&key).map(|e| e.name.as_str()) {
                    self.dispatch_dirty = true;
                }
                key
            }
            Payload::HostEndpointRemove(r) => {
                let Some(id) = &r.id else { return };
                let key = Key::Host(id.endpoint_id.clone());
                self.hosts_changed = true;
                if self.hosts.remove(&key).is_some() {
                    self.dispatch_dirty = true;
                }
                key
            }
            _ => return,
        };
        self.dirty.insert(key);
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if ctx.full_rewrite() {
            self.hosts_changed = true;
        }
        self.refresh_host_ifaces();
        let Some(tables) = self.out.tables.clone() else {
            self.routes_only(ctx);
            return Ok(());
        };
        if ctx.full_rewrite() {
            let mut keys: Vec<Key> = self.workloads.keys().cloned().collect();
            keys.extend(self.hosts.keys().cloned());
            let mut all: Vec<(Key, Vec<(TableName, Chain)>)> = keys
                .iter()
                .filter_map(|k| self.render(k).map(|c| (k.clone(), c)))
                .collect();
            self.rpf_for = self.rpf_allowed();
            if let Some(d) = self.render(&Key::Dispatch) {
                all.push((Key::Dispatch, d));
            }
            self.dispatch_for = self.iface_names();
            let mut chains = std::mem::take(&mut self.chains);
            chains.rewrite_all(&tables, ctx, &self.name, all);
            self.chains = chains;
            self.routed_iface.clear();
            self.write_routes(ctx, &keys, true);
            self.dirty.clear();
            self.dispatch_dirty = false;
            return Ok(());
        }
        let names = if self.dispatch_dirty {
            Some(self.iface_names())
        } else {
            None
        };
        let dispatch_changed = names.as_ref().is_some_and(|n| *n != self.dispatch_for);
        if self.dirty.is_empty() && !dispatch_changed {
            self.dispatch_dirty = false;
            return Ok(());
        }
        let keys: Vec<Key> = std::mem::take(&mut self.dirty).into_iter().collect();
        let mut plan = TablePlan::default();
        for key in &keys {
            let rendered = self.render(key);
            self.chains.update(&mut plan, key, rendered);
        }
        let rpf = self.rpf_allowed();
        let rpf_changed = rpf != self.rpf_for;
        self.rpf_for = rpf;
        if dispatch_changed || rpf_changed || !self.chains_has_dispatch() {
            let d = self.render(&Key::Dispatch);
            self.chains.update(&mut plan, &Key::Dispatch, d);
            if let Some(n) = names {
                self.dispatch_for = n;
            }
        }
        plan.flush(&tables, ctx, &self.name);
        self.write_routes(ctx, &keys, false);
        self.dispatch_dirty = false;
        Ok(())
    }
}

impl EndpointManager {
    fn chains_has_dispatch(&self) -> bool {
        self.chains.contains(&Key::Dispatch)
    }

    /// eBPF mode's pass: routes of the changed endpoints (of all on a full rewrite), no chain.
    fn routes_only(&mut self, ctx: &mut ApplyCtx) {
        let full = ctx.full_rewrite();
        let keys: Vec<Key> = if full {
            self.dirty.clear();
            self.routed_iface.clear();
            let mut keys: Vec<Key> = self.workloads.keys().cloned().collect();
            keys.extend(self.hosts.keys().cloned());
            keys
        } else {
            std::mem::take(&mut self.dirty).into_iter().collect()
        };
        if full || !keys.is_empty() {
            self.write_routes(ctx, &keys, full);
        }
        self.dispatch_dirty = false;
    }
}

/// `s` as a network, a bare address as a host network; `None` if neither.
fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<std::net::IpAddr>().ok().map(IpNet::from))
}

/// Which interfaces each host endpoint applies to (see the module docs): named ones to their
/// interface; the others, by expected IPs, to the non-workload interfaces of `ifaces` (the
/// interface state and the workload prefixes) carrying one of their addresses.
pub fn resolve_host_endpoints<K: Ord + Clone>(
    hosts: &BTreeMap<K, HostEndpoint>,
    ifaces: Option<(&InterfaceState, &[String])>,
) -> BTreeMap<K, Vec<String>> {
    let mut out: BTreeMap<K, Vec<String>> = BTreeMap::new();
    let named: BTreeSet<&str> = hosts
        .values()
        .filter(|e| !e.name.is_empty())
        .map(|e| e.name.as_str())
        .collect();
    for (k, e) in hosts {
        if !e.name.is_empty() {
            out.insert(k.clone(), vec![e.name.clone()]);
        }
    }
    let Some((state, prefixes)) = ifaces else {
        return out;
    };
    let by_ip: Vec<(&K, BTreeSet<std::net::IpAddr>)> = hosts
        .iter()
        .filter(|(_, e)| e.name.is_empty())
        .map(|(k, e)| {
            let ips = e
                .expected_ipv4_addrs
                .iter()
                .chain(&e.expected_ipv6_addrs)
                .filter_map(|a| a.parse().ok())
                .collect();
            (k, ips)
        })
        .collect();
    if by_ip.is_empty() {
        return out;
    }
    for (name, view) in state.all() {
        if named.contains(name.as_str()) || prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            continue;
        }
        // `by_ip` is in key order: the lowest ID wins.
        if let Some((k, _)) = by_ip.iter().find(|(_, ips)| !ips.is_disjoint(&view.addrs)) {
            out.entry((*k).clone()).or_default().push(name);
        }
    }
    out
}
