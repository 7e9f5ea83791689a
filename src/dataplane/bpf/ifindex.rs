//! [`IfindexCache`]: `driver/bpf`'s interface name -> ifindex cache.
//!
//! Invariant (`an_ifindex_is_probed_again_after_the_monitor_reports_its_name`): an entry is
//! dropped when the interface monitor reports its name, and every entry on a resync, after a
//! failed apply, and on every apply when there is no monitor; so a steady-state apply reads no
//! sysfs file, and an interface re-created under the same name is probed again.

use std::collections::{BTreeMap, BTreeSet};

/// See the module docs.
#[derive(Debug, Default)]
pub struct IfindexCache {
    known: BTreeMap<String, u32>,
}

impl IfindexCache {
    /// Forgets what may be stale before an apply: the names `reported` by the monitor, or
    /// everything when there is no monitor (`None`) or on a `resync`.
    pub fn invalidate(&mut self, reported: Option<BTreeSet<String>>, resync: bool) {
        match reported {
            Some(names) if !resync => {
                for n in names {
                    self.known.remove(&n);
                }
            }
            _ => self.known.clear(),
        }
    }

    /// Forgets everything (after a failed apply: it may have been a stale ifindex).
    pub fn clear(&mut self) {
        self.known.clear();
    }

    /// The ifindex of `name`: cached, or `probe`d (and cached when the interface exists).
    pub fn get<E>(
        &mut self,
        name: &str,
        probe: impl FnOnce(&str) -> Result<Option<u32>, E>,
    ) -> Result<Option<u32>, E> {
        if let Some(i) = self.known.get(name) {
            return Ok(Some(*i));
        }
        let found = probe(name)?;
        if let Some(i) = found {
            self.known.insert(name.to_string(), i);
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn an_ifindex_is_probed_again_after_the_monitor_reports_its_name() {
        let mut c = IfindexCache::default();
        let probes = Cell::new(0);
        let get = |c: &mut IfindexCache, name: &str, idx: Option<u32>| {
            c.get(name, |_| {
                probes.set(probes.get() + 1);
                Ok::<_, ()>(idx)
            })
            .expect("probe")
        };
        assert_eq!(get(&mut c, "cali1", Some(7)), Some(7));
        assert_eq!(
            get(&mut c, "cali1", Some(99)),
            Some(7),
            "cached: not probed"
        );
        assert_eq!(probes.get(), 1);
        // A missing interface is not cached: probed every time until it appears.
        assert_eq!(get(&mut c, "cali2", None), None);
        assert_eq!(get(&mut c, "cali2", Some(8)), Some(8));
        assert_eq!(probes.get(), 3);
        // The monitor reports cali1 (re-created): probed again; cali2 stays cached.
        c.invalidate(Some(BTreeSet::from(["cali1".to_string()])), false);
        assert_eq!(get(&mut c, "cali1", Some(11)), Some(11));
        assert_eq!(get(&mut c, "cali2", Some(12)), Some(8));
        assert_eq!(probes.get(), 4);
        // A resync, no monitor, or a failed apply: everything probed again.
        c.invalidate(Some(BTreeSet::new()), true);
        assert_eq!(get(&mut c, "cali2", Some(12)), Some(12));
        c.invalidate(None, false);
        assert_eq!(get(&mut c, "cali2", Some(13)), Some(13));
        c.clear();
        assert_eq!(get(&mut c, "cali2", Some(14)), Some(14));
        assert_eq!(probes.get(), 7);
    }
}
