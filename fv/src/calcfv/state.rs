//! Datastore states and test cases.
//!
//! A [`State`] is a complete datastore: an ordered list of model KVs (the
//! order is the delivery order within the state, which the
//! reverse-KV-order expander flips) and the [`Expect`]ed dataplane view of
//! that datastore.  States are built from v3 YAML, decoded exactly as the
//! file datastore decodes it, or from model values where YAML cannot say
//! what a test needs (values the graph's own validation filter must
//! reject).
//!
//! Builders panic on authoring mistakes (YAML that does not decode, the
//! same key twice with different values): states are test fixtures.

use std::collections::BTreeMap;

use felix::calc::GraphOptions;
use felix::model::{Key, Update, Value};
use felix::resources::{decode_documents, Format};

use super::expect::Expect;

/// One datastore state and the view expected after reaching it.
#[derive(Clone, Debug)]
pub struct State {
    /// Used in failure messages.
    pub name: String,
    /// The datastore's KVs in delivery order, each key once.
    pub kvs: Vec<(Key, Value)>,
    /// What the dataplane must hold once this state is reached.
    pub expect: Expect,
}

/// A named sequence of states.
#[derive(Clone, Debug)]
pub struct Test {
    /// Used in failure messages.
    pub name: String,
    /// The base sequence, walked from an empty datastore; the expanders derive
    /// the other runs from it.
    pub states: Vec<State>,
    /// How the graph under test is built.
    pub options: GraphOptions,
}

impl Test {
    /// A test of `states` on a graph built with the default options.
    pub fn new(name: &str, states: Vec<State>) -> Test {
        Test {
            name: name.to_string(),
            states,
            options: GraphOptions::default(),
        }
    }

    /// Runs the test on a graph built with `options`.
    pub fn with_options(mut self, options: GraphOptions) -> Test {
        self.options = options;
        self
    }
}

impl State {
    /// An empty datastore, expected to produce an empty dataplane.
    pub fn empty() -> State {
        State::new("empty")
    }

    /// An empty state named `name`; add KVs and the expectation with the
    /// builder methods.
    pub fn new(name: &str) -> State {
        State {
            name: name.to_string(),
            kvs: Vec::new(),
            expect: Expect::default(),
        }
    }

    /// Adds every resource of a (multi-document) v3 YAML text.  Each
    /// document must decode and validate.
    pub fn yaml(mut self, text: &str) -> State {
        let docs = decode_documents(text, &self.name, Format::Yaml)
            .unwrap_or_else(|e| panic!("state {}: YAML does not decode: {e}", self.name));
        for d in docs {
            match d.result {
                Ok(entries) => {
                    for (k, v) in entries {
                        self.push(k, v);
                    }
                }
                Err(e) => panic!("state {}: {} is invalid: {e}", self.name, d.id),
            }
        }
        self
    }

    /// Asserts that every document of `text` fails validation; such a
    /// resource is absent from the datastore, so it contributes nothing
    /// (documents the state's intent).
    pub fn invalid_yaml(self, text: &str) -> State {
        let docs = decode_documents(text, &self.name, Format::Yaml)
            .unwrap_or_else(|e| panic!("state {}: YAML does not decode: {e}", self.name));
        for d in docs {
            assert!(
                d.result.is_err(),
                "state {}: {} was expected to fail validation",
                self.name,
                d.id
            );
        }
        self
    }

    /// Adds one model KV.
    pub fn kv(mut self, key: Key, value: Value) -> State {
        self.push(key, value);
        self
    }

    /// Adds every KV of `other` (not its expectation).
    pub fn with(mut self, other: &State) -> State {
        for (k, v) in &other.kvs {
            self.push(k.clone(), v.clone());
        }
        self
    }

    /// Sets the expectation.
    pub fn expect(mut self, e: Expect) -> State {
        self.expect = e;
        self
    }

    /// Renames the state (for states derived with [`State::with`]).
    pub fn named(mut self, name: &str) -> State {
        self.name = name.to_string();
        self
    }

    fn push(&mut self, key: Key, value: Value) {
        if let Some((_, old)) = self.kvs.iter().find(|(k, _)| *k == key) {
            assert!(
                *old == value,
                "state {}: key {key} given twice with different values",
                self.name
            );
            return;
        }
        self.kvs.push((key, value));
    }

    /// The datastore as a map (what `felix calc` compares states with).
    pub fn as_map(&self) -> BTreeMap<Key, Value> {
        self.kvs.iter().cloned().collect()
    }

    /// The updates that move a datastore from `prev` to this state:
    /// deletions of vanished keys (in `prev`'s order), then sets of new or
    /// changed values (in this state's order).
    pub fn deltas_from(&self, prev: &State) -> Vec<Update> {
        let now = self.as_map();
        let before = prev.as_map();
        let mut out: Vec<Update> = prev
            .kvs
            .iter()
            .filter(|(k, _)| !now.contains_key(k))
            .map(|(k, _)| Update::delete(k.clone()))
            .collect();
        out.extend(
            self.kvs
                .iter()
                .filter(|(k, v)| before.get(k) != Some(v))
                .map(|(k, v)| Update::set(k.clone(), v.clone())),
        );
        out
    }
}
