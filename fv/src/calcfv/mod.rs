//! The calculation-graph FV framework (see the crate docs).
//!
//! * [`state`]: a datastore state (ordered model KVs, built from v3 YAML or
//!   directly) plus its expectation.
//! * [`expect`]: the expected dataplane view, written compactly and
//!   independent of delivery order, and the digest it is compared with.
//! * [`expand`]: the five expanders (reverse KV order, reverse state order,
//!   insert empties, split states, squash states).
//! * [`run`]: drives a [`felix::calc::CalcGraph`] through a sequence under
//!   each flush strategy, applying every message to a dataplane view.
//! * [`yaml`]: small builders of v3 YAML documents for writing states.
//!
//! The invariant that makes expansion valid: a state's expectation is a
//! function of that state alone, never of the states before it.

pub mod expand;
pub mod expect;
pub mod run;
pub mod state;
pub mod yaml;

pub use expand::{expansions, Expansion};
pub use expect::{Expect, HepExp, TierExp, WepExp};
pub use run::{assert_passes, calc_stream, run_test, FlushStrategy, RunReport, LOCAL_HOST};
pub use state::{State, Test};
