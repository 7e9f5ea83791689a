//! Fuzz target: decoding datastore text (YAML through the fast reader and
//! its serde_yaml_ng fallback, and JSON) must never panic, whatever the
//! bytes; errors are values.

#![no_main]

use felix::resources::{decode_documents, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = decode_documents(text, "fuzz.yaml", Format::Yaml);
    let _ = decode_documents(text, "fuzz.json", Format::Json);
});
