//! Policy-selector matching against *local* endpoints, with profile label
//! inheritance (upstream's `InheritIndex` as used by the active-rules
//! calculator).
//!
//! Holds only this node's endpoints (a few hundred), every policy selector
//! (thousands) and the labels of every profile.  Reports "selector S started
//! / stopped matching endpoint E" transitions.
//!
//! Invariants:
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
use std::collections::BTreeSet;
use std::hash::Hash;

/// A match transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchEvent<S, E> {
    Started(S, E),
    Stopped(S, E),
}

struct LocalEp {
    labels: Labels,
    parents: Vec<String>,
}

/// A profile's labels, sorted by key.  Every profile in the cluster is
/// held (a local endpoint may name any of them), and a `BTreeMap` node is
/// several times the size of the few labels a profile has.
type ParentLabels = Box<[(Box<str>, Box<str>)]>;

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
    parent_labels: HashMap<String, ParentLabels>,
    parent_to_eps: HashMap<String, HashSet<E>>,
    sel_to_eps: HashMap<S, BTreeSet<E>>,
    ep_to_sels: HashMap<E, BTreeSet<S>>,
}

impl<S: Clone + Eq + Hash + Ord, E: Clone + Eq + Hash + Ord> Default for InheritIndex<S, E> {
    fn default() -> Self {
        InheritIndex {
            selectors: HashMap::default(),
            restrictions: RestrictionIndex::default(),
            endpoints: HashMap::default(),
            parent_labels: HashMap::default(),
            parent_to_eps: HashMap::default(),
            sel_to_eps: HashMap::default(),
            ep_to_sels: HashMap::default(),
        }
    }
}

impl<S: Clone + Eq + Hash + Ord, E: Clone + Eq + Hash + Ord> InheritIndex<S, E> {
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
        self.restrictions.add(&id, &Choice::for_selector(&sel));
        // Scan the (few) local endpoints.
        let mut now: BTreeSet<E> = BTreeSet::new();
        for (ek, ep) in &self.endpoints {
            if self.eval(&sel, ep) {
                now.insert(ek.clone());
            }
        }
        self.selectors.insert(id.clone(), sel);
        let before = self.sel_to_eps.get(&id).cloned().unwrap_or_default();
        for e in now.difference(&before) {
            self.record(&id, e, true, out);
        }
        for e in before.difference(&now) {
            self.record(&id, e, false, out);
        }
    }

    /// Removes selector `id`, emitting a stop for each of its matches.
    pub fn delete_selector(&mut self, id: &S, out: &mut Vec<MatchEvent<S, E>>) {
        let Some(old) = self.selectors.remove(id) else {
            return;
        };
        self.restrictions.remove(id, &Choice::for_selector(&old));
        let before = self.sel_to_eps.get(id).cloned().unwrap_or_default();
        for e in &before {
            self.record(id, e, false, out);
        }
    }

    /// Adds or replaces a local endpoint.
    pub fn update_endpoint(
        &mut self,
        id: E,
        labels: &Labels,
        parents: &[String],
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
        if let Some(old) = self.endpoints.get(&id) {
            if &old.labels == labels && old.parents == parents {
                return;
            }
            let old_parents = old.parents.clone();
            for p in old_parents {
                if let Some(set) = self.parent_to_eps.get_mut(&p) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.parent_to_eps.remove(&p);
                    }
                }
            }
        }
        for p in parents {
            self.parent_to_eps
                .entry(p.clone())
                .or_default()
                .insert(id.clone());
        }
        self.endpoints.insert(
            id.clone(),
            LocalEp {
                labels: labels.clone(),
                parents: parents.to_vec(),
            },
        );
        self.rematch(&id, out);
    }

    /// Removes a local endpoint, emitting a stop for each of its matches.
    pub fn delete_endpoint(&mut self, id: &E, out: &mut Vec<MatchEvent<S, E>>) {
        let Some(old) = self.endpoints.remove(id) else {
            return;
        };
        for p in &old.parents {
            if let Some(set) = self.parent_to_eps.get_mut(p) {
                set.remove(id);
                if set.is_empty() {
                    self.parent_to_eps.remove(p);
                }
            }
        }
        let before = self.ep_to_sels.get(id).cloned().unwrap_or_default();
        for s in &before {
            self.record(s, id, false, out);
        }
    }

    /// Sets (`Some`) or clears (`None`) a profile's labels.
    pub fn update_parent_labels(
        &mut self,
        name: &str,
        labels: Option<&Labels>,
        out: &mut Vec<MatchEvent<S, E>>,
    ) {
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
        let mut eps: Vec<E> = self
            .parent_to_eps
            .get(name)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        eps.sort();
        for e in eps {
            self.rematch(&e, out);
        }
    }

    /// Endpoints currently matched by selector `id`.
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
        let mut pairs: Vec<(&str, &str)> = ep
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        for (i, p) in parents.iter().enumerate() {
            for (k, v) in p.iter() {
                if ep.labels.contains_key(&**k)
                    || parents[..i].iter().any(|q| parent_get(q, k).is_some())
                {
                    continue;
                }
                pairs.push((&**k, &**v));
            }
        }
        let lookup = View {
            own: &ep.labels,
            parents: &parents,
        };
        let mut now: BTreeSet<S> = BTreeSet::new();
        self.restrictions
            .for_each_candidate(pairs.iter().copied(), |s| {
                if let Some(sel) = self.selectors.get(s) {
                    if sel.evaluate(&lookup) {
                        now.insert(s.clone());
                    }
                }
            });
        let before = self.ep_to_sels.get(id).cloned().unwrap_or_default();
        for s in now.difference(&before) {
            self.record(s, id, true, out);
        }
        for s in before.difference(&now) {
            self.record(s, id, false, out);
        }
    }

    fn record(&mut self, s: &S, e: &E, started: bool, out: &mut Vec<MatchEvent<S, E>>) {
        if started {
            self.sel_to_eps
                .entry(s.clone())
                .or_default()
                .insert(e.clone());
            self.ep_to_sels
                .entry(e.clone())
                .or_default()
                .insert(s.clone());
            out.push(MatchEvent::Started(s.clone(), e.clone()));
        } else {
            if let Some(set) = self.sel_to_eps.get_mut(s) {
                set.remove(e);
                if set.is_empty() {
                    self.sel_to_eps.remove(s);
                }
            }
            if let Some(set) = self.ep_to_sels.get_mut(e) {
                set.remove(s);
                if set.is_empty() {
                    self.ep_to_sels.remove(e);
                }
            }
            out.push(MatchEvent::Stopped(s.clone(), e.clone()));
        }
    }
}
