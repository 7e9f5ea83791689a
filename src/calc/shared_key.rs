//! Keys the graph's nodes hold many copies of: shared, with their hash
//! computed once.
//!
//! A local endpoint or an active policy is named once per (policy,
//! endpoint) match in several maps (the active-rules calculator, the
//! policy resolver, the rule scanner), and each insert or lookup hashed
//! the key's strings again: on the 250,000-endpoint benchmark, about a
//! million hashes of policy keys alone.  A [`Shared`] key is cloned by
//! reference count and hashed by writing one precomputed word.
//!
//! Invariants:
//! * equal values have equal stored hashes (the hash is a deterministic
//!   function of the value, with a fixed seed), so `Hash` agrees with
//!   `Eq`;
//! * equality, ordering and `Debug` are the value's: a `Shared` key
//!   behaves as the key it holds, only cheaper to clone and hash.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

struct Inner<T> {
    hash: u64,
    value: T,
}

/// See the module docs.
pub struct Shared<T>(Arc<Inner<T>>);

impl<T: Hash> Shared<T> {
    /// Wraps `value`, hashing it once.
    pub fn new(value: T) -> Shared<T> {
        let hash = foldhash::fast::FixedState::with_seed(0x5eed_f311_c5a1_0001).hash_one(&value);
        Shared(Arc::new(Inner { hash, value }))
    }
}

impl<T> Shared<T> {
    /// Whether `a` and `b` are the same allocation (equal, and cheaper
    /// to tell than by value).
    pub fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.value
    }
}

impl<T> Hash for Shared<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash && self.0.value == other.0.value)
    }
}

impl<T: Eq> Eq for Shared<T> {}

impl<T: Ord> PartialOrd for Shared<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Ord> Ord for Shared<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        self.0.value.cmp(&other.0.value)
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.value.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PolicyKey;
    use std::collections::HashSet;

    fn key(name: &str) -> PolicyKey {
        PolicyKey {
            name: name.to_string(),
            namespace: "ns".to_string(),
            kind: String::new(),
        }
    }

    /// Separately built equal keys are one key to a hash set and compare
    /// equal; different keys stay apart, and order is the value's.
    #[test]
    fn behaves_as_the_value() {
        let (a1, a2, b) = (
            Shared::new(key("a")),
            Shared::new(key("a")),
            Shared::new(key("b")),
        );
        assert!(!Shared::ptr_eq(&a1, &a2));
        assert_eq!(a1, a2);
        assert_ne!(a1, b);
        let set: HashSet<Shared<PolicyKey>> = [a1.clone(), a2, b.clone()].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(&Shared::new(key("b"))));
        assert_eq!(a1.cmp(&b), key("a").cmp(&key("b")));
        assert_eq!(b.cmp(&a1), Ordering::Greater);
        assert_eq!(a1.name, "a");
        assert_eq!(format!("{a1:?}"), format!("{:?}", key("a")));
    }
}
