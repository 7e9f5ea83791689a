//! Candidate pre-filtering for selector matching.
//!
//! Evaluating every selector against every labelled object is the O(n x m)
//! trap the calc-graph design warns about.  Most real selectors carry a
//! *restriction*: a label that every match must have (`has(k)`), usually
//! with one of a few values (`k == 'v'`, `k in {..}`).  These two indexes
//! use one restriction per selector to narrow the work:
//!
//! * [`RestrictionIndex`] indexes *selectors* by their chosen restriction, so
//!   that an updated object only evaluates selectors that could match it
//!   (plus the unoptimisable ones, such as `all()` or `!has(x)`).
//! * [`ValueIndex`] indexes *objects* by their own label values, so that a new
//!   selector only scans the objects that could match it.
//!
//! Invariant (soundness): for every selector `s` and labels `l`,
//! `s.evaluate(l)` implies `s` is among the candidates for `l`, and `l`'s
//! owner is among the candidates for `s`.  Both follow from the selector
//! module's guarantee that every match satisfies all of the selector's
//! restrictions.

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::hash::{FastMap as HashMap, FastSet as HashSet};
use crate::selector::Selector;

/// The one restriction chosen to index a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Every match has label `key` with one of `values`.
    Values(String, Vec<String>),
    /// Every match has label `key` (any value).
    Present(String),
    /// No usable restriction: the selector must be evaluated everywhere.
    Unoptimized,
}

impl Choice {
    /// Picks the most selective restriction of `sel`: a value restriction
    /// with the fewest values, else a presence restriction; ties broken by
    /// label name so the choice is deterministic.
    pub fn for_selector(sel: &Selector) -> Choice {
        let mut best: Option<(String, Vec<String>)> = None;
        let mut present: Option<String> = None;
        for (key, r) in sel.label_restrictions() {
            match restriction_values(&r) {
                Some(vals) if !vals.is_empty() => {
                    let better = match &best {
                        None => true,
                        Some((_, b)) => vals.len() < b.len(),
                    };
                    if better {
                        best = Some((key.clone(), vals));
                    }
                }
                Some(_) => {
                    // An empty value set means nothing can match; index it
                    // under the key so it is (cheaply) never a candidate
                    // except for objects carrying the key.
                    if present.is_none() {
                        present = Some(key.clone());
                    }
                }
                None => {
                    if restriction_requires_presence(&r) && present.is_none() {
                        present = Some(key.clone());
                    }
                }
            }
        }
        match (best, present) {
            (Some((k, v)), _) => Choice::Values(k, v),
            (None, Some(k)) => Choice::Present(k),
            (None, None) => Choice::Unoptimized,
        }
    }
}

/// Values a restriction allows, if it restricts values.
fn restriction_values(r: &crate::selector::LabelRestriction) -> Option<Vec<String>> {
    r.must_have_one_of_values
        .as_ref()
        .map(|vals| vals.iter().cloned().collect())
}

/// Whether a restriction requires the label to be present.
fn restriction_requires_presence(r: &crate::selector::LabelRestriction) -> bool {
    r.must_be_present
}

/// Selectors indexed by their chosen restriction.
///
/// Memory: every policy selector in the cluster is held here, so the index
/// records nothing it can recompute: it does not remember which
/// restriction it chose for a selector (the caller passes the selector's
/// [`Choice`] again on removal; `Choice::for_selector` is a pure function
/// of the selector), and a value held by one selector (the common case:
/// one namespace per policy) holds it inline rather than in a set.
///
/// Invariant: `remove(id, c)` is only called with the `c` that `add(id, c)`
/// was called with, and `add` is not called twice for one `id` without a
/// `remove` in between.
#[derive(Debug)]
pub struct RestrictionIndex<S: Clone + Eq + Hash> {
    by_value: HashMap<Box<str>, HashMap<Box<str>, SmallSet<S>>>,
    by_present: HashMap<Box<str>, SmallSet<S>>,
    unoptimized: HashSet<S>,
    len: usize,
}

impl<S: Clone + Eq + Hash> Default for RestrictionIndex<S> {
    fn default() -> Self {
        RestrictionIndex {
            by_value: HashMap::default(),
            by_present: HashMap::default(),
            unoptimized: HashSet::default(),
            len: 0,
        }
    }
}

/// Adds `id` to the set under `key` (creating it).
fn add_owner<S: Clone + Eq + Hash>(map: &mut HashMap<Box<str>, SmallSet<S>>, key: &str, id: &S) {
    match map.get_mut(key) {
        Some(set) => set.insert(id.clone()),
        None => {
            map.insert(key.into(), SmallSet::One(id.clone()));
        }
    }
}

/// Removes `id` from the set under `key`, dropping an emptied set.
fn remove_owner<S: Clone + Eq + Hash>(map: &mut HashMap<Box<str>, SmallSet<S>>, key: &str, id: &S) {
    if let Some(set) = map.get_mut(key) {
        if set.remove(id) {
            map.remove(key);
        }
    }
}

impl<S: Clone + Eq + Hash> RestrictionIndex<S> {
    /// Indexes selector `id` under `choice` (see the type's invariant).
    pub fn add(&mut self, id: &S, choice: &Choice) {
        match choice {
            Choice::Values(k, vals) => {
                let per_key = match self.by_value.get_mut(k.as_str()) {
                    Some(m) => m,
                    None => self.by_value.entry(k.as_str().into()).or_default(),
                };
                for v in vals {
                    add_owner(per_key, v, id);
                }
            }
            Choice::Present(k) => add_owner(&mut self.by_present, k, id),
            Choice::Unoptimized => {
                self.unoptimized.insert(id.clone());
            }
        }
        self.len += 1;
    }

    /// Removes selector `id`, indexed under `choice` (see the type's
    /// invariant).
    pub fn remove(&mut self, id: &S, choice: &Choice) {
        match choice {
            Choice::Values(k, vals) => {
                if let Some(per_key) = self.by_value.get_mut(k.as_str()) {
                    for v in vals {
                        remove_owner(per_key, v, id);
                    }
                    if per_key.is_empty() {
                        self.by_value.remove(k.as_str());
                    }
                }
            }
            Choice::Present(k) => remove_owner(&mut self.by_present, k, id),
            Choice::Unoptimized => {
                self.unoptimized.remove(id);
            }
        }
        self.len = self.len.saturating_sub(1);
    }

    /// Number of indexed selectors.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no selector is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f` once for every selector that could match an object whose
    /// effective labels are `labels` (each key once: own labels shadow
    /// inherited ones before they get here).
    pub fn for_each_candidate<'a>(
        &self,
        labels: impl Iterator<Item = (&'a str, &'a str)>,
        mut f: impl FnMut(&S),
    ) {
        for id in &self.unoptimized {
            f(id);
        }
        if self.by_value.is_empty() && self.by_present.is_empty() {
            return;
        }
        for (k, v) in labels {
            if let Some(per_key) = self.by_value.get(k) {
                if let Some(set) = per_key.get(v) {
                    set.for_each_ref(&mut f);
                }
            }
            if let Some(set) = self.by_present.get(k) {
                set.for_each_ref(&mut f);
            }
        }
    }
}

/// Objects indexed by their own label values.
#[derive(Debug)]
pub struct ValueIndex<I: Copy + Eq + Hash> {
    by_kv: HashMap<String, HashMap<String, SmallSet<I>>>,
}

impl<I: Copy + Eq + Hash> Default for ValueIndex<I> {
    fn default() -> Self {
        ValueIndex {
            by_kv: HashMap::default(),
        }
    }
}

impl<I: Copy + Eq + Hash> ValueIndex<I> {
    /// Records that `id` carries `labels`.  Must be paired with exactly one
    /// [`ValueIndex::remove`] with the same labels.
    pub fn add(&mut self, id: I, labels: &BTreeMap<String, String>) {
        for (k, v) in labels {
            let per_key = match self.by_kv.get_mut(k.as_str()) {
                Some(m) => m,
                None => self.by_kv.entry(k.clone()).or_default(),
            };
            match per_key.get_mut(v.as_str()) {
                Some(set) => set.insert(id),
                None => {
                    per_key.insert(v.clone(), SmallSet::One(id));
                }
            }
        }
    }

    /// Reverses [`ValueIndex::add`].
    pub fn remove(&mut self, id: I, labels: &BTreeMap<String, String>) {
        for (k, v) in labels {
            if let Some(per_key) = self.by_kv.get_mut(k.as_str()) {
                if let Some(set) = per_key.get_mut(v.as_str()) {
                    if set.remove(&id) {
                        per_key.remove(v.as_str());
                    }
                }
                if per_key.is_empty() {
                    self.by_kv.remove(k.as_str());
                }
            }
        }
    }

    /// Calls `f` for every object that satisfies `choice` by its own labels.
    /// Returns `false` (and calls nothing) for [`Choice::Unoptimized`], in
    /// which case the caller must scan everything.
    pub fn for_each_matching(&self, choice: &Choice, mut f: impl FnMut(I)) -> bool {
        match choice {
            Choice::Values(k, vals) => {
                if let Some(per_key) = self.by_kv.get(k.as_str()) {
                    for v in vals {
                        if let Some(set) = per_key.get(v.as_str()) {
                            set.for_each(&mut f);
                        }
                    }
                }
                true
            }
            Choice::Present(k) => {
                if let Some(per_key) = self.by_kv.get(k.as_str()) {
                    for set in per_key.values() {
                        set.for_each(&mut f);
                    }
                }
                true
            }
            Choice::Unoptimized => false,
        }
    }
}

/// A set that stores the common single-member case inline.
#[derive(Debug)]
pub(crate) enum SmallSet<I: Clone + Eq + Hash> {
    One(I),
    Many(HashSet<I>),
}

impl<I: Clone + Eq + Hash> SmallSet<I> {
    pub(crate) fn insert(&mut self, id: I) {
        match self {
            SmallSet::One(existing) => {
                if *existing != id {
                    let mut s = HashSet::with_capacity_and_hasher(2, Default::default());
                    s.insert(existing.clone());
                    s.insert(id);
                    *self = SmallSet::Many(s);
                }
            }
            SmallSet::Many(s) => {
                s.insert(id);
            }
        }
    }

    /// Removes `id`; returns true when the set is now empty.
    pub(crate) fn remove(&mut self, id: &I) -> bool {
        match self {
            SmallSet::One(existing) => existing == id,
            SmallSet::Many(s) => {
                s.remove(id);
                if s.len() == 1 {
                    if let Some(last) = s.iter().next().cloned() {
                        *self = SmallSet::One(last);
                    }
                    false
                } else {
                    s.is_empty()
                }
            }
        }
    }

    pub(crate) fn for_each_ref(&self, f: &mut impl FnMut(&I)) {
        match self {
            SmallSet::One(id) => f(id),
            SmallSet::Many(s) => s.iter().for_each(f),
        }
    }
}

impl<I: Copy + Eq + Hash> SmallSet<I> {
    pub(crate) fn for_each(&self, f: &mut impl FnMut(I)) {
        self.for_each_ref(&mut |id| f(*id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &str) -> Selector {
        crate::selector::parse(s).expect("test selector parses")
    }

    /// The label indexes skip evaluating a bare `has(k)` on the
    /// candidates of its restriction; that is sound only because such a
    /// selector is indexed under the presence of `k` and nothing else.
    #[test]
    fn a_bare_presence_selector_is_indexed_under_its_key_alone() {
        for key in ["a", "calico/FizzBuzz", "x.y/z-w"] {
            let s = sel(&format!("has({key})"));
            assert_eq!(s.presence_only(), Some(key));
            assert_eq!(Choice::for_selector(&s), Choice::Present(key.to_string()));
        }
        for other in [
            "has(a) && has(b)",
            "!has(a)",
            "a == 'x'",
            "all()",
            "has(a) || has(b)",
        ] {
            assert_eq!(sel(other).presence_only(), None, "{other}");
        }
    }
}
