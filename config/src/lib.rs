//! Felix configuration.
