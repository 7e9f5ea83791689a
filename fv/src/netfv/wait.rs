//! Polling with deadlines: every wait in the dataplane FV goes through here,
//! nothing sleeps blindly.

use std::time::Duration;

use anyhow::{bail, Result};

/// Polls `f` every 100 ms until it returns `Some`, or fails after `deadline`.
pub fn poll<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let start = felix_actors::clock::real_now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            bail!("condition not met within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
