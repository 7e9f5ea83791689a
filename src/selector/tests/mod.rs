//! Tests for the selector language.
//!
//! * `upstream_vectors`: upstream Calico's own test data (as data).
//! * `semantics`: this project's table, limits, errors and inheritance.
//! * `props`: property tests (round trip, restriction invariant, no panics).
//! * `bench`: an ignored micro-benchmark that prints evaluations/s.

use std::collections::BTreeMap;

mod bench;
mod props;
mod semantics;
mod upstream_vectors;

/// Label (key, value) pairs in test tables.
type Pairs = &'static [(&'static str, &'static str)];

/// Builds a label map from pairs.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
