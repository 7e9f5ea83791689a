//! The Calico selector language (owned by the selector work; see issue 2).
