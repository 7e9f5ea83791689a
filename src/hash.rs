//! Hash maps with a fast, non-cryptographic hasher for the hot internal
//! indexes (datastore merge, calculation graph).
//!
//! std's SipHash showed up at several percent of the datastore-load and
//! calc-graph profiles.  foldhash is seeded per process (`RandomState`), so
//! iteration order is still not something code may rely on, exactly as with
//! std's maps.

/// A `HashMap` using foldhash.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` using foldhash.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
