//! Fuzz target: the external dataplane protocol's frame reader must never panic, whatever
//! the bytes (errors are values), and every message it accepts must survive a re-encode
//! unchanged.

#![no_main]

use felix::dataplane::external::frame::{decode_all, write_frame};
use felix_proto::{FromDataplane, ToDataplane};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (to, _) = decode_all::<ToDataplane>(data);
    let mut again = Vec::new();
    for m in &to {
        write_frame(&mut again, m).expect("writing to a vec cannot fail");
    }
    assert_eq!(decode_all::<ToDataplane>(&again).0, to);
    let _ = decode_all::<FromDataplane>(data);
});
