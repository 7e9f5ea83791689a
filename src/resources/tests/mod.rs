//! Tests of decoding, validation and conversion.

mod conversion;
mod decoding;
mod throughput;
mod validation;

use super::{decode_documents, Decoded, Format};
use crate::model::{Key, Value};

/// Decodes YAML text that must parse, returning its documents.
pub(super) fn yaml(text: &str) -> Vec<Decoded> {
    decode_documents(text, "test.yaml", Format::Yaml).unwrap()
}

/// Decodes one valid YAML resource and returns its model entries.
pub(super) fn entries(text: &str) -> Vec<(Key, Value)> {
    let docs = yaml(text);
    assert_eq!(docs.len(), 1, "expected one document");
    match &docs[0].result {
        Ok(e) => e.clone(),
        Err(e) => panic!("unexpected validation error: {e}"),
    }
}

/// The single policy a resource converts to.
pub(super) fn policy(text: &str) -> std::sync::Arc<crate::model::Policy> {
    match entries(text).into_iter().next() {
        Some((Key::Policy(_), Value::Policy(p))) => p,
        other => panic!("expected a policy, got {other:?}"),
    }
}
