//! Fuzz target: the fast YAML reader (`src/resources/fastyaml.rs`) against `serde_yaml_ng`.
//! Whatever one YAML document it accepts and deserializes, `serde_yaml_ng` must accept and
//! deserialize to the same value (schemaless, and as JSON), and a reader whose buffers hold
//! a previous document must read it the same (the file decoder reuses one reader across a
//! file's documents).
//!
//! Input: the document, then optionally a NUL and the previous document.

#![no_main]

use felix::resources::fuzzing::fast_reader_agrees;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, previous) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (Ok(text), Ok(previous)) = (std::str::from_utf8(text), std::str::from_utf8(previous))
    else {
        return;
    };
    if let Err(e) = fast_reader_agrees(text, previous) {
        panic!("{e}\ntext: {text:?}\nprevious: {previous:?}");
    }
});
