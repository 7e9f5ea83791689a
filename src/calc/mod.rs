//! The calculation graph: turns the datastore's eventually-consistent
//! update stream into this node's desired dataplane state, as
//! `felixbackend.proto` messages.
//!
//! # Shape
//!
//! ```text
//! Update ──► validation ──► dispatch (by key kind, in registration order)
//!   local WEPs ──► live-migration calculator (first; see below)
//!   local endpoints ──► active-rules calculator ──► rule scanner ──► IP-set index
//!                    │     └─► computed selectors ──► Istio / live-migration calculators
//!                    └─► policy resolver (tiers/order per endpoint, computed data)
//!   live migrations ──► live-migration calculator ──► policy resolver
//!   all endpoints, network sets, profile labels ──► IP-set index (members)
//!   policies, profiles, tiers ──► active-rules calculator / policy resolver
//!   nodes, pools, blocks ──► pass-through, encapsulation, routes, VTEPs
//!   config, ready flag ──► config batcher
//!                                 all ──► event sequencer ──► flush()
//! ```
//!
//! # Contract
//!
//! * Synchronous and single-threaded: an update propagates through direct
//!   calls; no node spawns work or takes a lock.
//! * Output is a function of the current state only (no hysteresis).
//! * Registration order is load-bearing: the live-migration calculator
//!   hears a local workload endpoint *before* the active-rules calculator
//!   (upstream registers it first on the local-endpoint dispatcher), so the
//!   endpoint is known to it when the active-rules calculator reports a
//!   target-selector match for it; a match for an endpoint it does not
//!   know is dropped, so reversing the two would lose target roles (the
//!   test `live_migration_hears_endpoint_before_arc` pins this).  On
//!   deletion it forgets the endpoint first and ignores the later
//!   match-stopped; the resolver drops the endpoint's computed data.
//! * The active-rules
//!   calculator hears a local endpoint before the policy resolver, so
//!   "policy matches endpoint" events may reach the resolver before the
//!   endpoint itself; the resolver only marks endpoints dirty and resolves
//!   at flush, so it never needs the endpoint earlier.
//! * In-sync is forwarded (an `InSync` message after the first flush that
//!   follows the datastore's in-sync), never fabricated or withheld.

pub mod active_rules;
pub mod compact;
pub mod computed;
pub mod config_batcher;
pub mod event_sequencer;
pub mod ids;
pub mod istio;
pub mod labelindex;
pub mod live_migration;
pub mod passthru;
pub mod policy_resolver;
pub mod routes;
pub mod rule_scanner;
pub mod shared_key;
pub mod validation;
pub mod view;

use std::collections::BTreeMap;
use std::sync::Arc;

use felix_proto as pb;
use pb::to_dataplane::Payload;

use crate::model::{
    HostEndpoint, HostEndpointKey, Key, SyncStatus, Update, Value, WorkloadEndpoint,
    WorkloadEndpointKey,
};
use active_rules::{ActiveRulesCalculator, ArcEvent, ComputedListener};
use config_batcher::ConfigBatcher;
use event_sequencer::{EventSequencer, FlushSource};
use labelindex::{IpSetIndex, LabelledKey, LabelledValue, Member, MemberSink};
use live_migration::{LiveMigrationCalculator, LmAction};
use passthru::Passthru;
use policy_resolver::PolicyResolver;
use rule_scanner::{RuleScanner, ScanEvent};
use shared_key::Shared;

/// A local endpoint's identity.  Shared and pre-hashed (`shared_key.rs`):
/// the graph's nodes keep one entry per (policy, endpoint) match in several
/// maps, and a clone must not copy the key's four strings nor an insert
/// hash them (comparison and ordering are by value).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndpointKey {
    /// A local workload endpoint.
    Workload(Shared<WorkloadEndpointKey>),
    /// A local host endpoint.
    Host(Shared<HostEndpointKey>),
}

/// A local endpoint's value.
#[derive(Clone, Debug, PartialEq)]
pub enum EndpointValue {
    /// A workload endpoint's value.
    Workload(Arc<WorkloadEndpoint>),
    /// A host endpoint's value.
    Host(Arc<HostEndpoint>),
}

/// The IP-set index holds every profile's labels, so a flush reads a
/// namespace's or service account's labels from it rather than the
/// sequencer keeping a copy of each.
impl FlushSource for IpSetIndex {
    fn current_members(&self, id: &str) -> Vec<Member> {
        IpSetIndex::current_members(self, id)
    }

    fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        let labels = self.parent_labels(&passthru::namespace_profile(name));
        passthru::strip_label_prefix(
            passthru::NAMESPACE_LABEL_PREFIX,
            labels.into_iter().flatten(),
        )
    }

    fn service_account_labels(&self, namespace: &str, name: &str) -> BTreeMap<String, String> {
        let labels = self.parent_labels(&passthru::service_account_profile(namespace, name));
        passthru::strip_label_prefix(
            passthru::SERVICE_ACCOUNT_LABEL_PREFIX,
            labels.into_iter().flatten(),
        )
    }
}

impl MemberSink for EventSequencer {
    fn member_added(&mut self, set_id: &str, member: Member) {
        self.on_member_added(set_id, member);
    }
    fn member_removed(&mut self, set_id: &str, member: Member) {
        self.on_member_removed(set_id, member);
    }
    fn wants_initial_members(&self, set_id: &str) -> bool {
        !self.is_pending_full_update(set_id)
    }
}

/// Counters for metrics and introspection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Datastore updates fed into the graph.
    pub updates_processed: u64,
    /// Messages emitted to the dataplane.
    pub output_events: u64,
    /// Local endpoints known to the policy resolver.
    pub active_local_endpoints: usize,
    /// Policies matching at least one local endpoint.
    pub active_local_policies: usize,
    /// Active IP sets (from the rule scanner).
    pub active_local_selectors: usize,
    /// Labelled objects in the IP-set index (endpoints and network sets, all nodes).
    pub cluster_endpoints: usize,
    /// Policies known, cluster-wide.
    pub cluster_policies: usize,
    /// Profiles known, cluster-wide.
    pub cluster_profiles: usize,
    /// Tiers known, cluster-wide.
    pub cluster_tiers: usize,
}

/// Construction-time choices (upstream decides these from config when the
/// graph is built, and a change restarts Felix).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphOptions {
    /// `IstioAmbientMode: Enabled`: build the Istio ambient calculator.
    pub istio_ambient: bool,
    /// The route resolver's configuration.
    pub routes: routes::RouteConfig,
    /// `WorkloadSourceSpoofing: Any`: workload endpoints may carry
    /// `allowSpoofedSourcePrefixes`; otherwise one that does is treated as
    /// absent (upstream's validation filter).
    pub workload_source_spoofing: bool,
}

impl GraphOptions {
    /// The options a Felix configuration calls for: `IstioAmbientMode`, and the route
    /// resolver's `RouteSource`, `ProgramClusterRoutes`, `BPFEnabled` and `WireguardEnabled`.
    pub fn from_config(cfg: &felix_config::Config) -> GraphOptions {
        let text = |name: &str| cfg.get(name).map(|v| v.render()).unwrap_or_default();
        let pcr = cfg.program_cluster_routes();
        GraphOptions {
            istio_ambient: cfg.istio_ambient_mode().eq_ignore_ascii_case("enabled"),
            workload_source_spoofing: cfg.workload_source_spoofing() == "Any",
            routes: routes::RouteConfig {
                route_source: routes::RouteSource::from_param(cfg.route_source()),
                bpf_enabled: cfg.bpf_enabled(),
                wireguard_enabled: text("WireguardEnabled").eq_ignore_ascii_case("true"),
                program_ipip_cluster_routes: pcr == "Enabled" || pcr == "EnabledIPIPOnly",
                program_no_encap_cluster_routes: pcr == "Enabled" || pcr == "EnabledNoEncapOnly",
                pinned: {
                    let raw = cfg.raw();
                    routes::Pinned {
                        program_cluster_routes: raw.contains_key("ProgramClusterRoutes"),
                        bpf_enabled: raw.contains_key("BPFEnabled"),
                        wireguard_enabled: raw.contains_key("WireguardEnabled"),
                    }
                },
            },
        }
    }
}

/// The assembled graph.  See the module docs.
pub struct CalcGraph {
    hostname: String,
    /// [`GraphOptions::workload_source_spoofing`].
    spoofing_allowed: bool,
    arc: ActiveRulesCalculator,
    scanner: RuleScanner,
    ipsets: IpSetIndex,
    resolver: PolicyResolver,
    lmc: LiveMigrationCalculator,
    seq: EventSequencer,
    passthru: Passthru,
    routes: routes::RouteNodes,
    config: ConfigBatcher,
    tiers: std::collections::HashSet<String>,
    in_sync: bool,
    need_in_sync_msg: bool,
    stats: GraphStats,
}

impl CalcGraph {
    /// A graph computing the dataplane of node `hostname`.
    pub fn new(hostname: &str) -> CalcGraph {
        CalcGraph::with_options(hostname, GraphOptions::default())
    }

    /// A graph for `hostname` built with `options`.
    pub fn with_options(hostname: &str, options: GraphOptions) -> CalcGraph {
        let mut g = CalcGraph {
            hostname: hostname.to_string(),
            spoofing_allowed: options.workload_source_spoofing,
            arc: ActiveRulesCalculator::new(),
            scanner: RuleScanner::new(),
            ipsets: IpSetIndex::new(),
            resolver: PolicyResolver::new(),
            lmc: LiveMigrationCalculator::new(),
            seq: EventSequencer::new(),
            passthru: Passthru::new(),
            routes: routes::RouteNodes::new(hostname, options.routes),
            config: ConfigBatcher::new(hostname),
            tiers: Default::default(),
            in_sync: false,
            need_in_sync_msg: false,
            stats: GraphStats::default(),
        };
        if options.istio_ambient {
            g.build_istio();
        }
        g
    }

    /// The Istio ambient calculator: its all-endpoints IP set (local and
    /// remote members, through the shared IP-set index) and its computed
    /// selector on the active-rules calculator (local marks).
    fn build_istio(&mut self) {
        self.seq
            .on_ipset_added(istio::ALL_ISTIO_WEPS, rule_scanner::SetType::Ip);
        match crate::selector::parse(istio::ISTIO_SELECTOR) {
            Ok(sel) => self.ipsets.update_ipset(
                istio::ALL_ISTIO_WEPS,
                labelindex::IpSetDef {
                    selector: sel,
                    np_protocol: labelindex::NpProtocol::None,
                    np_name: String::new(),
                },
                &mut self.seq,
            ),
            Err(e) => tracing::error!(error = %e, "Istio selector does not parse"),
        }
        let mut ev = Vec::new();
        self.arc
            .add_computed_selector(istio::ISTIO_SELECTOR, ComputedListener::Istio, &mut ev);
        self.route_arc(ev);
    }

    /// The node this graph computes for.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// Whether the datastore has reported in-sync.
    pub fn in_sync(&self) -> bool {
        self.in_sync
    }

    /// Current counters.
    pub fn stats(&self) -> GraphStats {
        let (tiers, policies, profiles) = self.arc.counts();
        GraphStats {
            active_local_endpoints: self.resolver.num_endpoints(),
            active_local_policies: self.arc.num_active_policies(),
            active_local_selectors: self.scanner.num_active_sets(),
            cluster_endpoints: self.ipsets.num_endpoints(),
            cluster_policies: policies,
            cluster_profiles: profiles,
            cluster_tiers: tiers,
            ..self.stats
        }
    }

    /// The encapsulation the IP pools currently call for.
    pub fn encapsulation(&self) -> passthru::Encap {
        self.passthru.encap()
    }

    /// Whether the datastore said "not ready" since the last call (the
    /// daemon then waits for it, as upstream).
    pub fn take_datastore_not_ready(&mut self) -> bool {
        self.config.take_not_ready()
    }

    /// Feeds a batch of updates.
    pub fn on_updates(&mut self, updates: impl IntoIterator<Item = Update>) {
        for u in updates {
            self.on_update(u);
        }
    }

    /// Feeds one update.
    pub fn on_update(&mut self, update: Update) {
        self.stats.updates_processed += 1;
        let Update { key, value, .. } = validation::filter(update, self.spoofing_allowed);
        match key {
            Key::WorkloadEndpoint(k) => {
                let v = match value {
                    Some(Value::WorkloadEndpoint(w)) => Some(w),
                    _ => None,
                };
                self.routes.on_workload(&k, v.as_deref());
                if k.hostname == self.hostname {
                    // Load-bearing order: the live-migration calculator
                    // before the active-rules calculator (module docs).
                    let mut la = Vec::new();
                    self.lmc.on_endpoint(&k, v.is_some(), &mut la);
                    self.route_lm(la);
                    let ek = EndpointKey::Workload(Shared::new(k.clone()));
                    let mut ev = Vec::new();
                    self.arc.on_endpoint(
                        &ek,
                        v.as_deref().map(|w| (&w.labels, w.profile_ids.as_slice())),
                        &self.ipsets,
                        &mut ev,
                    );
                    self.route_arc(ev);
                    self.resolver
                        .on_endpoint(&ek, v.clone().map(EndpointValue::Workload));
                }
                let lk = LabelledKey::Workload(k);
                match v {
                    Some(w) => {
                        self.ipsets
                            .update_endpoint(lk, LabelledValue::Workload(w), &mut self.seq)
                    }
                    None => self.ipsets.delete_endpoint(&lk, &mut self.seq),
                }
            }
            Key::HostEndpoint(k) => {
                let v = match value {
                    Some(Value::HostEndpoint(h)) => Some(h),
                    _ => None,
                };
                if k.hostname == self.hostname {
                    let ek = EndpointKey::Host(Shared::new(k.clone()));
                    let mut ev = Vec::new();
                    self.arc.on_endpoint(
                        &ek,
                        v.as_deref().map(|h| (&h.labels, h.profile_ids.as_slice())),
                        &self.ipsets,
                        &mut ev,
                    );
                    self.route_arc(ev);
                    self.resolver
                        .on_endpoint(&ek, v.clone().map(EndpointValue::Host));
                }
                let lk = LabelledKey::Host(k);
                match v {
                    Some(h) => {
                        self.ipsets
                            .update_endpoint(lk, LabelledValue::Host(h), &mut self.seq)
                    }
                    None => self.ipsets.delete_endpoint(&lk, &mut self.seq),
                }
            }
            Key::NetworkSet(k) => {
                let lk = LabelledKey::NetworkSet(k);
                match value {
                    Some(Value::NetworkSet(n)) => {
                        self.ipsets
                            .update_endpoint(lk, LabelledValue::NetworkSet(n), &mut self.seq)
                    }
                    _ => self.ipsets.delete_endpoint(&lk, &mut self.seq),
                }
            }
            Key::Profile(name) => {
                let p = match value {
                    Some(Value::Profile(p)) => Some(p),
                    _ => None,
                };
                let mut ev = Vec::new();
                self.arc.on_profile(&name, p.as_deref(), &mut ev);
                self.route_arc(ev);
                self.passthru.on_profile(&name, p.is_some(), &mut self.seq);
                self.ipsets.update_parent_labels(
                    &name,
                    p.as_deref().map(|p| &p.labels),
                    &mut self.seq,
                );
            }
            Key::Policy(k) => {
                let p = match value {
                    Some(Value::Policy(p)) => Some(p),
                    _ => None,
                };
                let mut ev = Vec::new();
                let k = Shared::new(k);
                self.arc.on_policy(&k, p.clone(), &mut ev);
                self.route_arc(ev);
                self.resolver.on_policy(&k, p.as_deref());
            }
            Key::Tier(name) => {
                let t = match value {
                    Some(Value::Tier(t)) => Some(t),
                    _ => None,
                };
                let was = self.tiers.contains(&name);
                if t.is_some() {
                    self.tiers.insert(name.clone());
                } else {
                    self.tiers.remove(&name);
                }
                self.arc.on_tier(t.is_some(), was);
                self.resolver.on_tier(&name, t.as_deref());
            }
            Key::IpPool(cidr) => {
                let p = match value {
                    Some(Value::IpPool(p)) => Some(p),
                    _ => None,
                };
                self.routes.on_pool(&cidr, p.as_deref());
                self.passthru.on_pool(&cidr, p.as_deref(), &mut self.seq);
            }
            Key::IpamBlock(cidr) => {
                let b = match value {
                    Some(Value::IpamBlock(b)) => Some(b),
                    _ => None,
                };
                self.routes.on_block(&cidr, b.as_deref());
            }
            Key::Node(name) => {
                let n = match value {
                    Some(Value::Node(n)) => Some(n),
                    _ => None,
                };
                self.routes.on_node(&name, n.as_deref());
                self.passthru.on_node(&name, n.as_deref(), &mut self.seq);
            }
            Key::Namespace(_) | Key::ServiceAccount { .. } => {
                // Namespaces and service accounts reach the dataplane through
                // their `kns.` / `ksa.` profiles (see `Passthru::on_profile`),
                // as upstream's profile decoder does; the raw keys carry
                // nothing more.
            }
            Key::GlobalConfig(name) => {
                let v = match &value {
                    Some(Value::Config(s)) => Some(s.as_str()),
                    _ => None,
                };
                self.config.on_global(&name, v);
            }
            Key::HostConfig { host, name } => {
                let v = match &value {
                    Some(Value::Config(s)) => Some(s.as_str()),
                    _ => None,
                };
                self.config.on_host(&host, &name, v);
            }
            Key::Ready => {
                let v = match value {
                    Some(Value::Ready(b)) => Some(b),
                    _ => None,
                };
                self.config.on_ready(v);
            }
            Key::LiveMigration(k) => {
                let v = match value {
                    Some(Value::LiveMigration(lm)) => Some(lm),
                    _ => None,
                };
                let mut la = Vec::new();
                self.lmc.on_migration(&k, v, &mut la);
                self.route_lm(la);
            }
        }
    }

    /// A datastore status change.  `InSync` is latched: later resyncs do
    /// not make the graph "unsynced" again.
    pub fn on_status(&mut self, status: SyncStatus) {
        if status == SyncStatus::InSync && !self.in_sync {
            self.in_sync = true;
            self.need_in_sync_msg = true;
            self.arc.on_in_sync();
            self.resolver.on_in_sync();
            self.config.on_in_sync();
            self.passthru.on_in_sync(&mut self.seq);
        }
    }

    /// Flushes pending output, in dependency order, followed by `InSync`
    /// after the first flush that follows the datastore's in-sync.
    pub fn flush(&mut self) -> Vec<Payload> {
        let mut out = Vec::new();
        self.flush_with(|p| out.push(p));
        out
    }

    /// [`CalcGraph::flush`], handing each message to `emit` as it is built
    /// instead of collecting them (upstream's event-sequencer callback):
    /// the pending state is freed as the messages go out.
    pub fn flush_with(&mut self, mut emit: impl FnMut(Payload)) {
        for ep in self.resolver.flush() {
            self.seq.on_endpoint_tiers(ep);
        }
        if let Some(c) = self.config.take_update() {
            self.routes.on_config(&c.config);
            self.seq.on_config_update(c);
        }
        self.routes.flush(self.passthru.encap(), &mut self.seq);
        let mut n = 0u64;
        let mut counted = |p: Payload| {
            n += 1;
            emit(p);
        };
        self.seq.flush(&self.ipsets, &mut counted);
        if self.need_in_sync_msg {
            self.need_in_sync_msg = false;
            counted(Payload::InSync(pb::InSync {}));
        }
        self.stats.output_events += n;
    }

    /// Number of objects buffered for the next flush.
    pub fn pending_len(&self) -> usize {
        self.seq.pending_len()
    }

    fn route_arc(&mut self, events: Vec<ArcEvent>) {
        for ev in events {
            match ev {
                ArcEvent::PolicyActive(k, p) => {
                    let mut se = Vec::new();
                    let parsed = self.scanner.policy_active(&k, &p, &mut se);
                    self.route_scan(se);
                    self.seq.on_policy_active(&k, parsed);
                }
                ArcEvent::PolicyInactive(k) => {
                    let mut se = Vec::new();
                    self.scanner.policy_inactive(&k, &mut se);
                    self.route_scan(se);
                    self.seq.on_policy_inactive(&k);
                }
                ArcEvent::ProfileActive(name, rules) => {
                    let mut se = Vec::new();
                    let parsed = self.scanner.profile_active(
                        &name,
                        &rules.inbound,
                        &rules.outbound,
                        &mut se,
                    );
                    self.route_scan(se);
                    self.seq.on_profile_active(&name, parsed);
                }
                ArcEvent::ProfileInactive(name) => {
                    let mut se = Vec::new();
                    self.scanner.profile_inactive(&name, &mut se);
                    self.route_scan(se);
                    self.seq.on_profile_inactive(&name);
                }
                ArcEvent::MatchStarted(pk, ek) => self.resolver.on_match_started(&pk, &ek),
                ArcEvent::MatchStopped(pk, ek) => self.resolver.on_match_stopped(&pk, &ek),
                ArcEvent::ComputedMatchStarted(l, sel, ek) => {
                    self.on_computed_match(l, &sel, &ek, true)
                }
                ArcEvent::ComputedMatchStopped(l, sel, ek) => {
                    self.on_computed_match(l, &sel, &ek, false)
                }
            }
        }
    }

    fn on_computed_match(
        &mut self,
        listener: ComputedListener,
        selector: &str,
        ep: &EndpointKey,
        matched: bool,
    ) {
        match listener {
            ComputedListener::Istio => {
                if let Some((k, u)) = istio::on_match(ep, matched) {
                    self.resolver.on_computed(k, &u);
                }
            }
            ComputedListener::LiveMigration => {
                if let EndpointKey::Workload(k) = ep {
                    let mut la = Vec::new();
                    self.lmc.on_selector_match(selector, k, matched, &mut la);
                    self.route_lm(la);
                }
            }
        }
    }

    fn route_lm(&mut self, actions: Vec<LmAction>) {
        for a in actions {
            match a {
                LmAction::Computed(k, u) => self.resolver.on_computed(&k, &u),
                LmAction::AddSelector(sel) => {
                    let mut ev = Vec::new();
                    self.arc
                        .add_computed_selector(&sel, ComputedListener::LiveMigration, &mut ev);
                    self.route_arc(ev);
                }
                LmAction::RemoveSelector(sel) => {
                    let mut ev = Vec::new();
                    self.arc.remove_computed_selector(
                        &sel,
                        ComputedListener::LiveMigration,
                        &mut ev,
                    );
                    self.route_arc(ev);
                }
            }
        }
    }

    fn route_scan(&mut self, events: Vec<ScanEvent>) {
        for ev in events {
            match ev {
                ScanEvent::SetActive(d) => {
                    self.seq.on_ipset_added(&d.uid, d.set_type);
                    if let Some(def) = d.def {
                        self.ipsets.update_ipset(&d.uid, def, &mut self.seq);
                    }
                }
                ScanEvent::SetInactive(d) => {
                    self.ipsets.delete_ipset(&d.uid);
                    self.seq.on_ipset_removed(&d.uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LiveMigration, LiveMigrationKey, LiveMigrationTarget, Profile};

    fn wep_update(present: bool) -> Update {
        let key = Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: "node1".into(),
            orchestrator_id: "k8s".into(),
            workload_id: "ns/virt-launcher-b".into(),
            endpoint_id: "eth0".into(),
        });
        if present {
            let w = WorkloadEndpoint {
                labels: [("vm".to_string(), "a".to_string())].into(),
                ..Default::default()
            };
            Update::set(key, Value::WorkloadEndpoint(Arc::new(w)))
        } else {
            Update::delete(key)
        }
    }

    fn role_of(out: &[Payload]) -> Option<(i32, String)> {
        out.iter().rev().find_map(|p| match p {
            Payload::WorkloadEndpointUpdate(u) => u
                .endpoint
                .as_ref()
                .map(|e| (e.live_migration_role, e.live_migration_uid.clone())),
            _ => None,
        })
    }

    #[test]
    fn graph_options_from_config() {
        let cfg = |pairs: &[(&str, &str)]| {
            let env = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            felix_config::Config::build(&[(felix_config::Source::Environment, env)]).0
        };
        let d = GraphOptions::from_config(&cfg(&[]));
        assert!(!d.istio_ambient);
        assert!(!d.workload_source_spoofing);
        assert!(
            GraphOptions::from_config(&cfg(&[("WorkloadSourceSpoofing", "Any")]))
                .workload_source_spoofing
        );
        assert_eq!(
            d.routes,
            routes::RouteConfig::default(),
            "upstream's defaults"
        );
        let r = GraphOptions::from_config(&cfg(&[
            ("RouteSource", "WorkloadIPs"),
            ("ProgramClusterRoutes", "Enabled"),
        ]))
        .routes;
        assert_eq!(r.route_source, routes::RouteSource::WorkloadIps);
        assert!(r.program_ipip_cluster_routes && r.program_no_encap_cluster_routes);
        let r = GraphOptions::from_config(&cfg(&[("ProgramClusterRoutes", "Disabled")])).routes;
        assert!(!r.program_ipip_cluster_routes && !r.program_no_encap_cluster_routes);
    }

    /// The registration-order invariant (module docs): the live-migration
    /// calculator hears a local endpoint before the active-rules
    /// calculator reports the target selector matching it, so an endpoint
    /// that arrives after its migration gets the target role straight
    /// away.  With the opposite order the match would be dropped.
    #[test]
    fn live_migration_hears_endpoint_before_arc() {
        let mut g = CalcGraph::new("node1");
        g.on_status(SyncStatus::InSync);
        let lm = LiveMigration {
            uid: "uid-1".into(),
            source: None,
            target: Some(LiveMigrationTarget {
                selector: Some("vm == 'a'".into()),
                workload_endpoint: None,
            }),
        };
        g.on_update(Update::set(
            Key::LiveMigration(LiveMigrationKey {
                namespace: "ns".into(),
                name: "m".into(),
            }),
            Value::LiveMigration(Arc::new(lm)),
        ));
        g.flush();
        g.on_update(wep_update(true));
        let out = g.flush();
        assert_eq!(
            role_of(&out),
            Some((pb::LiveMigrationRole::Target as i32, "uid-1".to_string()))
        );
        // Deleting and re-adding the endpoint in one batch still ends in
        // the target role.
        g.on_update(wep_update(false));
        g.on_update(wep_update(true));
        let out = g.flush();
        assert_eq!(
            role_of(&out),
            Some((pb::LiveMigrationRole::Target as i32, "uid-1".to_string()))
        );
    }

    fn profile_update(name: &str, labels: Option<&[(&str, &str)]>) -> Update {
        let key = Key::Profile(name.to_string());
        match labels {
            Some(l) => {
                let p = Profile {
                    labels: l
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    ..Default::default()
                };
                Update::set(key, Value::Profile(Arc::new(p)))
            }
            None => Update::delete(key),
        }
    }

    fn ns_messages(out: &[Payload]) -> Vec<String> {
        out.iter()
            .filter_map(|p| match p {
                Payload::NamespaceUpdate(u) => Some(format!(
                    "ns+ {} {:?}",
                    u.id.as_ref().map(|i| i.name.as_str()).unwrap_or(""),
                    u.labels
                )),
                Payload::NamespaceRemove(r) => Some(format!(
                    "ns- {}",
                    r.id.as_ref().map(|i| i.name.as_str()).unwrap_or("")
                )),
                Payload::ServiceAccountUpdate(u) => {
                    let id = u.id.clone().unwrap_or_default();
                    Some(format!("sa+ {}/{} {:?}", id.namespace, id.name, u.labels))
                }
                Payload::ServiceAccountRemove(r) => {
                    let id = r.id.clone().unwrap_or_default();
                    Some(format!("sa- {}/{}", id.namespace, id.name))
                }
                _ => None,
            })
            .collect()
    }

    /// The sequencer keeps only the names of pending namespaces and
    /// service accounts; their labels come from the label index at flush.
    /// So changes between flushes coalesce into one message with the
    /// latest labels (prefix removed), a deletion of a never-sent object
    /// emits nothing, and a delete-then-re-add in one batch is an update.
    #[test]
    fn namespace_and_service_account_labels_are_read_at_flush() {
        let mut g = CalcGraph::new("node1");
        g.on_status(SyncStatus::InSync);
        g.on_update(profile_update("kns.a", Some(&[("pcns.env", "dev")])));
        g.on_update(profile_update(
            "kns.a",
            Some(&[("pcns.env", "prod"), ("other", "x")]),
        ));
        g.on_update(profile_update("ksa.a.sa.1", Some(&[("pcsa.role", "web")])));
        g.on_update(profile_update("kns.gone", Some(&[("pcns.k", "v")])));
        g.on_update(profile_update("kns.gone", None));
        let out = g.flush();
        assert_eq!(
            ns_messages(&out),
            vec![
                r#"sa+ a/sa.1 {"role": "web"}"#.to_string(),
                r#"ns+ a {"env": "prod", "other": "x"}"#.to_string(),
            ]
        );
        g.on_update(profile_update("kns.a", None));
        g.on_update(profile_update("kns.a", Some(&[])));
        g.on_update(profile_update("ksa.a.sa.1", None));
        let out = g.flush();
        assert_eq!(
            ns_messages(&out),
            vec!["sa- a/sa.1".to_string(), "ns+ a {}".to_string()]
        );
    }
}
