//! Actor runtime.
