//! The calculation graph.
