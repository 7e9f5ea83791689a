//! Fuzz target: the selector parser must never panic or overflow the
//! stack, and whatever it accepts must print a canonical form that parses
//! again, with stable unique IDs.
//!
//! The canonical form is a fixed point except for upstream's kept quirk
//! where `!(!x)` prints as `!!x` (reparsed as `x`); so the check is that the
//! second canonical form is a fixed point, and that the first one already
//! is whenever it has no `!!`.

#![no_main]

use felix::selector::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = parse(text) else {
        return;
    };
    let again = match parse(sel.canonical()) {
        Ok(s) => s,
        Err(e) => panic!("canonical {:?} of {text:?} does not parse: {e}", sel.canonical()),
    };
    if !sel.canonical().contains("!!") {
        assert_eq!(again.canonical(), sel.canonical(), "input {text:?}");
        assert_eq!(again.unique_id(), sel.unique_id(), "input {text:?}");
    }
    let third = match parse(again.canonical()) {
        Ok(s) => s,
        Err(e) => panic!("canonical {:?} does not parse: {e}", again.canonical()),
    };
    assert_eq!(third.canonical(), again.canonical(), "input {text:?}");
    assert_eq!(third.unique_id(), again.unique_id(), "input {text:?}");
    // The ID is cached: repeated calls and clones agree.
    assert_eq!(sel.clone().unique_id(), sel.unique_id());
    // Restrictions never panic and are consistent with a trivial check.
    for (key, r) in sel.label_restrictions() {
        assert!(!key.is_empty());
        let _ = r.possible_to_satisfy();
    }
});
