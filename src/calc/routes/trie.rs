//! A map keyed by CIDR that answers the two questions route resolution
//! asks: "which stored CIDRs enclose this one?" (the path from the widest
//! enclosing prefix down to the CIDR itself) and "which stored CIDRs lie
//! inside this one?".
//!
//! Invariants:
//! * Keys are stored truncated (host bits cleared); every method truncates
//!   its argument first, so `10.0.0.1/24` and `10.0.0.0/24` name one entry.
//! * `lens` counts the stored keys per (family, prefix length), so an
//!   enclosing-path lookup probes only the prefix lengths in use: at most
//!   33 probes for IPv4 and 129 for IPv6, usually a handful.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct CidrMap<V> {
    entries: BTreeMap<IpNet, V>,
    lens_v4: [u32; 33],
    lens_v6: [u32; 129],
}

impl<V> Default for CidrMap<V> {
    fn default() -> Self {
        CidrMap {
            entries: BTreeMap::new(),
            lens_v4: [0; 33],
            lens_v6: [0; 129],
        }
    }
}

/// The CIDR covering exactly one address.
pub fn host_cidr(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}

impl<V> CidrMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn len_slot(&mut self, cidr: &IpNet) -> &mut u32 {
        let plen = usize::from(cidr.prefix_len());
        match cidr {
            IpNet::V4(_) => &mut self.lens_v4[plen],
            IpNet::V6(_) => &mut self.lens_v6[plen],
        }
    }

    fn len_in_use(&self, v6: bool, plen: u8) -> bool {
        let plen = usize::from(plen);
        if v6 {
            self.lens_v6[plen] > 0
        } else {
            self.lens_v4[plen] > 0
        }
    }

    /// Number of stored CIDRs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map holds no CIDR.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value stored under `cidr` (host bits ignored).
    pub fn get(&self, cidr: &IpNet) -> Option<&V> {
        self.entries.get(&cidr.trunc())
    }

    /// Stores `value` under `cidr`, returning the previous value.
    pub fn insert(&mut self, cidr: IpNet, value: V) -> Option<V> {
        let key = cidr.trunc();
        let old = self.entries.insert(key, value);
        if old.is_none() {
            *self.len_slot(&key) += 1;
        }
        old
    }

    /// Removes the value stored under `cidr`, returning it.
    pub fn remove(&mut self, cidr: &IpNet) -> Option<V> {
        let key = cidr.trunc();
        let old = self.entries.remove(&key);
        if old.is_some() {
            let slot = self.len_slot(&key);
            *slot = slot.saturating_sub(1);
        }
        old
    }

    /// The stored CIDRs that enclose `cidr`, widest first, ending with
    /// `cidr` itself.  Empty when `cidr` itself is not stored.
    pub fn path(&self, cidr: &IpNet) -> Vec<(IpNet, &V)> {
        let key = cidr.trunc();
        if !self.entries.contains_key(&key) {
            return Vec::new();
        }
        let v6 = matches!(key, IpNet::V6(_));
        let mut out = Vec::new();
        for plen in 0..=key.prefix_len() {
            if !self.len_in_use(v6, plen) {
                continue;
            }
            let Ok(parent) = IpNet::new(key.addr(), plen) else {
                continue;
            };
            let parent = parent.trunc();
            if let Some(v) = self.entries.get(&parent) {
                out.push((parent, v));
            }
        }
        out
    }

    /// `cidr` (if stored) and every stored CIDR inside it, in key order.
    pub fn within<'a>(&'a self, cidr: &IpNet) -> impl Iterator<Item = (&'a IpNet, &'a V)> + 'a {
        let key = cidr.trunc();
        let lo = key;
        let hi = IpNet::new(key.broadcast(), key.max_prefix_len()).unwrap_or(key);
        let plen = key.prefix_len();
        self.entries
            .range(lo..=hi)
            .filter(move |(k, _)| k.prefix_len() >= plen && key.contains(*k))
    }

    /// Every stored CIDR, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &IpNet> {
        self.entries.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn path_lists_enclosing_cidrs_widest_first_and_requires_the_cidr_itself() {
        let mut m = CidrMap::new();
        m.insert(n("10.0.0.0/16"), "pool");
        m.insert(n("10.0.1.0/26"), "block");
        m.insert(n("10.0.1.5/32"), "wep");
        m.insert(n("10.1.0.0/16"), "other");
        let path: Vec<_> = m
            .path(&n("10.0.1.5/32"))
            .into_iter()
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(path, vec!["pool", "block", "wep"]);
        assert!(m.path(&n("10.0.1.6/32")).is_empty());
        let path: Vec<_> = m
            .path(&n("10.0.1.0/26"))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(path, vec![n("10.0.0.0/16"), n("10.0.1.0/26")]);
    }

    #[test]
    fn keys_are_truncated() {
        let mut m = CidrMap::new();
        m.insert(n("10.0.0.7/24"), 1);
        assert_eq!(m.get(&n("10.0.0.0/24")), Some(&1));
        assert_eq!(m.remove(&n("10.0.0.9/24")), Some(1));
        assert!(m.is_empty());
    }

    #[test]
    fn within_lists_the_cidr_and_its_children_only() {
        let mut m = CidrMap::new();
        for s in [
            "10.0.0.0/8",
            "10.0.0.0/16",
            "10.0.1.0/26",
            "10.0.255.255/32",
            "10.1.0.0/16",
            "fd00::/64",
        ] {
            m.insert(n(s), ());
        }
        let got: Vec<_> = m.within(&n("10.0.0.0/16")).map(|(k, _)| *k).collect();
        assert_eq!(
            got,
            vec![n("10.0.0.0/16"), n("10.0.1.0/26"), n("10.0.255.255/32")]
        );
        let got: Vec<_> = m.within(&n("fd00::/48")).map(|(k, _)| *k).collect();
        assert_eq!(got, vec![n("fd00::/64")]);
    }

    #[test]
    fn ipv6_paths_use_the_v6_length_index() {
        let mut m = CidrMap::new();
        m.insert(n("feed:beef::/64"), 'p');
        m.insert(n("feed:beef::1:0:0:0/96"), 'b');
        m.insert(n("10.0.0.0/8"), 'x');
        let path: Vec<_> = m
            .path(&n("feed:beef::1:0:0:0/96"))
            .into_iter()
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(path, vec!['p', 'b']);
    }
}
