//! FV harness.
