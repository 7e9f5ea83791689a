//! Policy-selector matching against *local* endpoints, with profile label
//! inheritance (upstream's `InheritIndex` as used by the active-rules
//! calculator).
//!
//! Holds only this node's endpoints (a few hundred), every policy selector
//! (thousands) and the labels of the profiles those endpoints name.
//! Reports "selector S started / stopped matching endpoint E" transitions.
//!
//! The labels of every profile in the cluster are held once, by the IP-set
//! index; this index reads a profile's labels from a
//! [`ParentLabelSource`] when a local endpoint starts to name it, and is
//! told of later changes through [`InheritIndex::update_parent_labels`].
//!
//! Invariants:
//! * `parent_labels` holds labels only for profiles some local endpoint
//!   names (its keys are a subset of `parent_to_eps`'s), and those are the
//!   profile's current labels, provided the caller reports every profile
//!   change and the source is current when an endpoint is updated.
//! * A (selector, endpoint) pair is reported started at most once before it
//!   is reported stopped, and every started pair is stopped before either
//!   side is forgotten: deleting a selector or an endpoint reports all of
//!   its stops.
//! * Output depends only on the current selectors, endpoints and profile
//!   labels (no history).

use super::restriction::{Choice, RestrictionIndex};
use crate::hash::{FastMap as HashMap, FastSet as HashSet};
use crate::model::Labels;
use crate::selector::{LabelSource, Selector};
use std::hash::Hash;

/// A match transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchEvent<S, E> {
    /// Selector `S` started matching endpoint `E`.
    Started(S, E),
    /// Selector `S` stopped matching endpoint `E`.
    Stopped(S, E),
}

struct LocalEp {
    labels: Labels,
    parents: Vec<String>,
    /// Own labels plus inherited ones (own first, then parents in order,
    /// the first to carry a key wins), as indexed in `ep_values`.
    effective: Vec<(Box<str>, Box<str>)>,
}

/// A profile's labels, sorted by key (a `BTreeMap` node is several times
/// the size of the few labels a profile has).
type ParentLabels = Box<[(Box<str>, Box<str>)]>;

/// Supplies the current labels of any profile in the cluster.
pub trait ParentLabelSource {
    /// Calls `f` with each label of profile `name`, in any order; false
    /// (and no calls) if the profile is not known.
    fn for_each_parent_label(&self, name: &str, f: &mut dyn FnMut(&str, &str)) -> bool;
}

/// A plain map is a source (tests, and callers with few profiles).
impl ParentLabelSource for std::collections::BTreeMap<String, Labels> {
    fn for_each_parent_label(&self, name: &str, f: &mut dyn FnMut(&str, &str)) -> bool {
        match self.get(name) {
            Some(l) => {
                for (k, v) in l {
                    f(k, v);
                }
                true
            }
            None => false,
        }
    }
}

/// Reads `name`'s labels from `source`, sorted by key.
fn fetch_parent(source: &dyn ParentLabelSource, name: &str) -> Option<ParentLabels> {
    let mut v: Vec<(Box<str>, Box<str>)> = Vec::new();
    if !source.for_each_parent_label(name, &mut |k, val| v.push((k.into(), val.into()))) {
        return None;
    }
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Some(v.into_boxed_slice())
}

fn parent_get<'a>(labels: &'a [(Box<str>, Box<str>)], key: &str) -> Option<&'a str> {
    labels
        .binary_search_by(|(k, _)| (**k).cmp(key))
        .ok()
        .map(|i| &*labels[i].1)
}

/// Own labels over inherited ones, parents in priority order.
struct View<'a> {
    own: &'a Labels,
    parents: &'a [&'a [(Box<str>, Box<str>)]],
}

impl LabelSource for View<'_> {
    fn get_label(&self, key: &str) -> Option<&str> {
        if let Some(v) = self.own.get(key) {
            return Some(v);
        }
        self.parents.iter().find_map(|p| parent_get(p, key))
    }
}

/// See the module docs.  `S` identifies selectors, `E` endpoints.
pub struct InheritIndex<S: Clone + Eq + Hash + Ord, E: Clone + Eq + Hash + Ord> {
    selectors: HashMap<S, Selector>,
    restrictions: RestrictionIndex<S>,
    endpoints: HashMap<E, LocalEp>,
    /// Local endpoints by effective label key and value: a new selector
    /// is evaluated only against the endpoints its restriction admits, so
    /// start of day is not every policy times every local endpoint.
    ep_values: HashMap<Box<str>, HashMap<Box<str>, HashSet<E>>>,
    parent_labels: HashMap<String, ParentLabels>,
    parent_to_eps: HashMap<String, HashSet<E>>,
    /// Current matches, both ways.  Unordered (these take one insert per
    /// match, and ordered sets of string keys cost a walk of comparisons
    /// each); events are still emitted in sorted order, see
    /// [`sorted_changes`].
    sel_to_eps: HashMap<S, HashSet<E>>,
    ep_to_sels: HashMap<E, HashSet<S>>,
}

/// Sorts `v` and removes duplicates (a candidate can be offered more than
/// once: several of its labels may admit it).
fn sort_dedup<T: Ord>(v: &mut Vec<T>) {
    v.sort_unstable();
    v.dedup();
}

/// The members of `now` (sorted, without duplicates) not in `before`, and
/// those of `before` not in `now`, each sorted (so the events built from
/// them come in a deterministic order whatever the hash order of
/// `before`).
fn sorted_changes<T: Ord + Hash + Clone>(
    now: &[T],
    before: Option<&HashSet<T>>,
) -> (Vec<T>, Vec<T>) {
    let Some(before) = before else {
        return (now.to_vec(), Vec::new());
    };
    let started = now
        .iter()
        .filter(|x| !before.contains(*x))
        .cloned()
        .collect();
    let mut stopped: Vec<T> = before
        .iter()
        .filter(|x| now.binary_search(x).is_err())
        .cloned()
        .collect();
    stopped.sort_unstable();
    (started, stopped)
}

/// All of `set`, sorted.
fn sorted<T: Ord + Clone>(set: Option<&HashSet<T>>) -> Vec<T> {
    let mut v: Vec<T> = set.into_iter().flatten().cloned().collect();
    v.sort_unstable();
    v
}

impl<S: Clone + Eq + Hash + Ord, E: Clone + Eq + Hash + Ord> Default for InheritIndex<S, E> {
    fn default() -> Self {
        InheritIndex {
            selectors: HashMap::default(),
            restrictions: RestrictionIndex::default(),
            endpoints: HashMap::default(),
            ep_values: HashMap::default(),
            parent_labels: HashMap::default(),
            parent_to_eps: HashMap::default(),
            sel_to_eps: HashMap::default(),
            ep_to_sels: HashMap::default(),
        }
    }
}

impl<S: Clone + Eq + Hash + Ord, E: Clone + Eq + Hash + Ord> InheritIndex<S, E> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces selector `id`, emitting the resulting transitions.
    pub fn update_selector(&mut self, id: S, sel: Selector, out: &mut Vec<MatchEvent<S, E>>) {
        if self.selectors.get(&id) == Some(&sel) {
            return;
        }
        if let Some(old) = self.selectors.get(&id) {
            self.restrictions.remove(&id, &Choice::for_selector(old));
        }
        let choice = Choice::for_selector(&sel);
        self.restrictions.add(&id, &choice);
        let mut now: Vec<E> = Vec::new();
        let exact = sel.presence_only().is_some() && matches!(choice, Choice::Present(_));
        self.for_each_candidate(&choice, |ek, ep| {
            if exact || self.eval(&sel, ep) {
                now.push(ek.clone());
            }
        });
        sort_dedup(&mut now);
        self.selectors.insert(id.clone(), sel);
        let (started, stopped) = sorted_changes(&now, self.sel_to_eps.get(&id));
        self.record_for_selector(&id, &started, &stopped, out);
    }

    /// Removes selector `id`, emitting a stop for each of its matches.
    pub fn delete_selector(&mut self, id: &S, out: &mut Vec<MatchEvent<S, E>>) {
        let Some(old) = self.selectors.remove(id) else {
            return;
        };
        self.restrictions.remove(id, &Choice::for_selector(&old));
        let stopped = sorted(self.sel_to_eps.get(id));
        self.record_for_selector(id, &[], &stopped, out);
    }

    /// Adds or replaces a local endpoint.  A profile it is the first local
    /// endpoint to name has its labels read from `source`.
    pub fn update_endpoint(
        &mut self,
        id: E,
        labels: &Labels,
        parents: &[String],
        source: &dyn ParentLabelSource,
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
        if let Some(old) = self.endpoints.get(&id) {
            if &old.labels == labels && old.parents == parents {
                return;
            }
            let old_parents = old.parents.clone();
            for p in old_parents {
                self.drop_parent_ref(&p, &id);
            }
        }
        for p in parents {
            let users = self.parent_to_eps.entry(p.clone()).or_default();
            if users.is_empty() {
                if let Some(l) = fetch_parent(source, p) {
                    self.parent_labels.insert(p.clone(), l);
                }
            }
            users.insert(id.clone());
        }
        // The old effective labels stay until `reindex` replaces them.
        let effective = self
            .endpoints
            .remove(&id)
            .map(|e| e.effective)
            .unwrap_or_default();
        self.endpoints.insert(
            id.clone(),
            LocalEp {
                labels: labels.clone(),
                parents: parents.to_vec(),
                effective,
            },
        );
        self.reindex(&id);
        self.rematch(&id, out);
    }

    /// Removes a local endpoint, emitting a stop for each of its matches.
    pub fn delete_endpoint(&mut self, id: &E, out: &mut Vec<MatchEvent<S, E>>) {
        let Some(old) = self.endpoints.remove(id) else {
            return;
        };
        self.unindex(id, &old.effective);
        for p in &old.parents {
            self.drop_parent_ref(p, id);
        }
        let stopped = sorted(self.ep_to_sels.get(id));
        self.record_for_endpoint(id, &[], &stopped, out);
    }

    /// Endpoint `id` no longer names profile `p`; the profile's labels are
    /// forgotten with its last local endpoint.
    fn drop_parent_ref(&mut self, p: &str, id: &E) {
        if let Some(set) = self.parent_to_eps.get_mut(p) {
            set.remove(id);
            if set.is_empty() {
                self.parent_to_eps.remove(p);
                self.parent_labels.remove(p);
            }
        }
    }

    /// Sets (`Some`) or clears (`None`) a profile's labels.  Only profiles
    /// named by a local endpoint are kept (module docs).
    pub fn update_parent_labels(
        &mut self,
        name: &str,
        labels: Option<&Labels>,
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
        let Some(users) = self.parent_to_eps.get(name) else {
            return;
        };
        let mut eps: Vec<E> = users.iter().cloned().collect();
        // A BTreeMap iterates in key order, so the pairs come out sorted.
        let labels: Option<ParentLabels> = labels.map(|l| {
            l.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect()
        });
        let changed = match &labels {
            Some(l) => self.parent_labels.get(name) != Some(l),
            None => self.parent_labels.contains_key(name),
        };
        if !changed {
            return;
        }
        match labels {
            Some(l) => {
                self.parent_labels.insert(name.to_string(), l);
            }
            None => {
                self.parent_labels.remove(name);
            }
        }
        eps.sort();
        for e in eps {
            self.reindex(&e);
            self.rematch(&e, out);
        }
    }

    /// Calls `f` with each local endpoint that `choice` admits (all of
    /// them for an unoptimised selector).
    fn for_each_candidate(&self, choice: &Choice, mut f: impl FnMut(&E, &LocalEp)) {
        let mut visit = |set: &HashSet<E>| {
            for ek in set {
                if let Some(ep) = self.endpoints.get(ek) {
                    f(ek, ep);
                }
            }
        };
        match choice {
            Choice::Values(k, vals) => {
                if let Some(per_key) = self.ep_values.get(k.as_str()) {
                    for v in vals {
                        if let Some(set) = per_key.get(v.as_str()) {
                            visit(set);
                        }
                    }
                }
            }
            Choice::Present(k) => {
                if let Some(per_key) = self.ep_values.get(k.as_str()) {
                    per_key.values().for_each(visit);
                }
            }
            Choice::Unoptimized => {
                for (ek, ep) in &self.endpoints {
                    f(ek, ep);
                }
            }
        }
    }

    /// Recomputes endpoint `id`'s effective labels from its own and its
    /// parents' current labels, replacing its old ones in `ep_values`.
    fn reindex(&mut self, id: &E) {
        let Some(old) = self
            .endpoints
            .get_mut(id)
            .map(|ep| std::mem::take(&mut ep.effective))
        else {
            return;
        };
        self.unindex(id, &old);
        let Some(ep) = self.endpoints.get(id) else {
            return;
        };
        let mut effective: Vec<(Box<str>, Box<str>)> = ep
            .labels
            .iter()
            .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
            .collect();
        for p in &ep.parents {
            for (k, v) in self.parent_labels.get(p).into_iter().flat_map(|l| l.iter()) {
                if !effective.iter().any(|(ek, _)| ek == k) {
                    effective.push((k.clone(), v.clone()));
                }
            }
        }
        for (k, v) in &effective {
            self.ep_values
                .entry(k.clone())
                .or_default()
                .entry(v.clone())
                .or_default()
                .insert(id.clone());
        }
        if let Some(ep) = self.endpoints.get_mut(id) {
            ep.effective = effective;
        }
    }

    /// Removes endpoint `id`'s `effective` labels from `ep_values`.
    fn unindex(&mut self, id: &E, effective: &[(Box<str>, Box<str>)]) {
        for (k, v) in effective {
            if let Some(per_key) = self.ep_values.get_mut(k) {
                if let Some(set) = per_key.get_mut(v) {
                    set.remove(id);
                    if set.is_empty() {
                        per_key.remove(v);
                    }
                }
                if per_key.is_empty() {
                    self.ep_values.remove(k);
                }
            }
        }
    }

    /// Number of profiles whose labels are held (those local endpoints
    /// name).
    pub fn num_parents_held(&self) -> usize {
        self.parent_labels.len()
    }

    /// Endpoints currently matched by selector `id`, in no particular order.
    pub fn matches_of(&self, id: &S) -> impl Iterator<Item = &E> {
        self.sel_to_eps.get(id).into_iter().flatten()
    }

    fn eval(&self, sel: &Selector, ep: &LocalEp) -> bool {
        let parents: Vec<&[(Box<str>, Box<str>)]> = ep
            .parents
            .iter()
            .filter_map(|p| self.parent_labels.get(p).map(|l| l.as_ref()))
            .collect();
        sel.evaluate(&View {
            own: &ep.labels,
            parents: &parents,
        })
    }

    fn rematch(&mut self, id: &E, out: &mut Vec<MatchEvent<S, E>>) {
        let Some(ep) = self.endpoints.get(id) else {
            return;
        };
        let parents: Vec<&[(Box<str>, Box<str>)]> = ep
            .parents
            .iter()
            .filter_map(|p| self.parent_labels.get(p).map(|l| l.as_ref()))
            .collect();
        let lookup = View {
            own: &ep.labels,
            parents: &parents,
        };
        let mut now: Vec<S> = Vec::new();
        self.restrictions
            .for_each_candidate(ep.effective.iter().map(|(k, v)| (&**k, &**v)), |s| {
                if let Some(sel) = self.selectors.get(s) {
                    // A `has(k)` selector is indexed under the presence of
                    // `k` alone, so it is offered exactly when the
                    // effective labels carry `k`: it matches.
                    if sel.presence_only().is_some() || sel.evaluate(&lookup) {
                        now.push(s.clone());
                    }
                }
            });
        sort_dedup(&mut now);
        let (started, stopped) = sorted_changes(&now, self.ep_to_sels.get(id));
        self.record_for_endpoint(id, &started, &stopped, out);
    }

    /// Records selector `s` starting to match each of `started` and
    /// stopping to match each of `stopped`, emitting the events in that
    /// order.  The selector's own set is looked up once, not per match.
    fn record_for_selector(
        &mut self,
        s: &S,
        started: &[E],
        stopped: &[E],
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
        record_one_side(
            &mut self.sel_to_eps,
            &mut self.ep_to_sels,
            s,
            started,
            stopped,
            |start, e| out.push(MatchEvent::new(start, s.clone(), e.clone())),
        );
    }

    /// [`InheritIndex::record_for_selector`] seen from endpoint `e`: its
    /// own set is looked up once.
    fn record_for_endpoint(
        &mut self,
        e: &E,
        started: &[S],
        stopped: &[S],
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
        record_one_side(
            &mut self.ep_to_sels,
            &mut self.sel_to_eps,
            e,
            started,
            stopped,
            |start, s| out.push(MatchEvent::new(start, s.clone(), e.clone())),
        );
    }
}

impl<S, E> MatchEvent<S, E> {
    fn new(started: bool, s: S, e: E) -> Self {
        if started {
            MatchEvent::Started(s, e)
        } else {
            MatchEvent::Stopped(s, e)
        }
    }
}

/// Records `a`'s matches with each of `started` beginning and with each of
/// `stopped` ending, in both match maps (`mine` keyed by `a`'s side,
/// `theirs` by the other), and calls `event` for each, started first.
/// `a`'s own set is looked up once.
fn record_one_side<A, B>(
    mine: &mut HashMap<A, HashSet<B>>,
    theirs: &mut HashMap<B, HashSet<A>>,
    a: &A,
    started: &[B],
    stopped: &[B],
    mut event: impl FnMut(bool, &B),
) where
    A: Clone + Eq + Hash,
    B: Clone + Eq + Hash,
{
    if started.is_empty() && stopped.is_empty() {
        return;
    }
    let own = mine.entry(a.clone()).or_default();
    own.reserve(started.len());
    for b in started {
        own.insert(b.clone());
    }
    for b in stopped {
        own.remove(b);
    }
    if own.is_empty() {
        mine.remove(a);
    }
    for (start, list) in [(true, started), (false, stopped)] {
        for b in list {
            link(theirs, b, a, start);
            event(start, b);
        }
    }
}

/// Adds (`add`) or removes `to` in `from`'s set of `map`; a set that
/// becomes empty is dropped (so a key is present exactly while it has a
/// match: the invariant both match maps keep).
fn link<A, B>(map: &mut HashMap<A, HashSet<B>>, from: &A, to: &B, add: bool)
where
    A: Clone + Eq + Hash,
    B: Clone + Eq + Hash,
{
    if add {
        map.entry(from.clone()).or_default().insert(to.clone());
    } else if let Some(set) = map.get_mut(from) {
        set.remove(to);
        if set.is_empty() {
            map.remove(from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Idx = InheritIndex<&'static str, &'static str>;
    type Events = Vec<MatchEvent<&'static str, &'static str>>;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn source(profiles: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, Labels> {
        profiles
            .iter()
            .map(|(n, l)| (n.to_string(), labels(l)))
            .collect()
    }

    fn sel(s: &str) -> Selector {
        crate::selector::parse(s).expect("test selector parses")
    }

    /// A bare `has(k)` (matched without evaluation, see `rematch`) matches
    /// own and inherited keys alike, whichever side arrives first, and
    /// stops when the inherited key goes.
    #[test]
    fn presence_selectors_follow_own_and_inherited_keys() {
        let mut idx = Idx::new();
        let mut out = Events::new();
        let src = source(&[("kns.a", &[("team", "x")])]);
        idx.update_selector("s", sel("has(team)"), &mut out);
        idx.update_endpoint("own", &labels(&[("team", "y")]), &[], &src, &mut out);
        idx.update_endpoint("inh", &Labels::new(), &["kns.a".into()], &src, &mut out);
        idx.update_endpoint("none", &labels(&[("x", "1")]), &[], &src, &mut out);
        assert_eq!(
            out,
            vec![
                MatchEvent::Started("s", "own"),
                MatchEvent::Started("s", "inh")
            ]
        );
        out.clear();
        // Selector second: same answer from the other side.
        idx.update_selector("t", sel("has(team)"), &mut out);
        assert_eq!(
            out,
            vec![
                MatchEvent::Started("t", "inh"),
                MatchEvent::Started("t", "own")
            ]
        );
        out.clear();
        idx.update_parent_labels("kns.a", Some(&labels(&[("other", "z")])), &mut out);
        assert_eq!(
            out,
            vec![
                MatchEvent::Stopped("s", "inh"),
                MatchEvent::Stopped("t", "inh")
            ]
        );
    }

    /// Labels of a profile no local endpoint names are not held; the
    /// first endpoint to name it reads them from the source, later changes
    /// arrive by `update_parent_labels`, and the last endpoint to go takes
    /// them with it.
    #[test]
    fn profile_labels_held_only_while_a_local_endpoint_names_them() {
        let mut idx = Idx::new();
        let mut out = Events::new();
        idx.update_selector("s", sel("env == 'prod'"), &mut out);
        // A profile change with no local user: nothing held, nothing out.
        idx.update_parent_labels("kns.a", Some(&labels(&[("env", "dev")])), &mut out);
        assert_eq!(idx.num_parents_held(), 0);
        assert!(out.is_empty());
        // The source is what is current when the endpoint arrives.
        let src = source(&[("kns.a", &[("env", "prod")])]);
        idx.update_endpoint("e1", &Labels::new(), &["kns.a".into()], &src, &mut out);
        assert_eq!(out, vec![MatchEvent::Started("s", "e1")]);
        assert_eq!(idx.num_parents_held(), 1);
        out.clear();
        // A second endpoint on the same profile does not re-read it.
        let stale = source(&[("kns.a", &[("env", "dev")])]);
        idx.update_endpoint("e2", &Labels::new(), &["kns.a".into()], &stale, &mut out);
        assert_eq!(out, vec![MatchEvent::Started("s", "e2")]);
        out.clear();
        // A change while held rematches both endpoints.
        idx.update_parent_labels("kns.a", Some(&labels(&[("env", "dev")])), &mut out);
        assert_eq!(
            out,
            vec![
                MatchEvent::Stopped("s", "e1"),
                MatchEvent::Stopped("s", "e2")
            ]
        );
        out.clear();
        idx.delete_endpoint(&"e1", &mut out);
        assert_eq!(idx.num_parents_held(), 1);
        idx.update_endpoint("e2", &Labels::new(), &[], &src, &mut out);
        assert_eq!(idx.num_parents_held(), 0);
        assert!(out.is_empty());
    }

    /// An endpoint may name a profile before the profile exists: it
    /// inherits nothing until the profile's labels arrive, and loses them
    /// again when the profile is deleted.
    #[test]
    fn profile_created_after_its_endpoint() {
        let mut idx = Idx::new();
        let mut out = Events::new();
        idx.update_selector("s", sel("has(env)"), &mut out);
        let empty = source(&[]);
        idx.update_endpoint("e1", &Labels::new(), &["p".into()], &empty, &mut out);
        assert!(out.is_empty());
        idx.update_parent_labels("p", Some(&labels(&[("env", "x")])), &mut out);
        assert_eq!(out, vec![MatchEvent::Started("s", "e1")]);
        out.clear();
        idx.update_parent_labels("p", None, &mut out);
        assert_eq!(out, vec![MatchEvent::Stopped("s", "e1")]);
        assert_eq!(idx.num_parents_held(), 0);
    }

    /// A selector added after the endpoints finds them through the
    /// effective-label index: own labels, inherited ones (own wins, then
    /// the first parent), presence restrictions and unoptimised selectors;
    /// and the index follows endpoint and profile changes.
    #[test]
    fn new_selectors_find_endpoints_by_effective_labels() {
        let mut idx = Idx::new();
        let mut out = Events::new();
        let src = source(&[
            ("p1", &[("env", "prod"), ("team", "a")]),
            ("p2", &[("env", "dev"), ("zone", "z1")]),
        ]);
        idx.update_endpoint(
            "own",
            &labels(&[("env", "test")]),
            &["p1".into()],
            &src,
            &mut out,
        );
        idx.update_endpoint(
            "inh",
            &Labels::new(),
            &["p1".into(), "p2".into()],
            &src,
            &mut out,
        );
        idx.update_endpoint("p2only", &Labels::new(), &["p2".into()], &src, &mut out);
        assert!(out.is_empty());
        let started = |idx: &mut Idx, id: &'static str, s: &str| {
            let mut out = Events::new();
            idx.update_selector(id, sel(s), &mut out);
            let mut eps: Vec<&str> = out
                .iter()
                .filter_map(|e| match e {
                    MatchEvent::Started(_, ep) => Some(*ep),
                    MatchEvent::Stopped(..) => None,
                })
                .collect();
            eps.sort();
            eps
        };
        assert_eq!(started(&mut idx, "s1", "env == 'prod'"), vec!["inh"]);
        assert_eq!(started(&mut idx, "s2", "env == 'test'"), vec!["own"]);
        assert_eq!(started(&mut idx, "s3", "has(zone)"), vec!["inh", "p2only"]);
        assert_eq!(
            started(&mut idx, "s4", "team == 'a' && has(zone)"),
            vec!["inh"]
        );
        assert_eq!(started(&mut idx, "s5", "!has(team)"), vec!["p2only"]);
        assert_eq!(
            started(&mut idx, "s6", "all()"),
            vec!["inh", "own", "p2only"]
        );
        // A profile change moves endpoints in the index.
        idx.update_parent_labels("p2", Some(&labels(&[("env", "prod")])), &mut out);
        assert_eq!(
            started(&mut idx, "s7", "env == 'prod'"),
            vec!["inh", "p2only"]
        );
        assert_eq!(started(&mut idx, "s8", "has(zone)"), Vec::<&str>::new());
        // So does an endpoint change, and a deleted endpoint is gone.
        idx.update_endpoint("own", &labels(&[("zone", "z9")]), &[], &src, &mut out);
        assert_eq!(started(&mut idx, "s9", "has(zone)"), vec!["own"]);
        idx.delete_endpoint(&"own", &mut out);
        assert_eq!(started(&mut idx, "s10", "zone == 'z9'"), Vec::<&str>::new());
        assert!(
            !idx.ep_values.contains_key("zone"),
            "index entries released"
        );
    }
}
