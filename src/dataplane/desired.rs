//! Declarative desired state shared between managers (writers) and drivers
//! (readers), held in `felix_actors::DesiredInput` cells.
//!
//! Every entry carries the name of the manager that wrote it and a
//! generation number. Invariants:
//! - A generation changes only when the entry's value changes, so a driver
//!   that remembers the generation it last pushed can find the changed and
//!   removed entries without comparing values (the diff costs one integer
//!   comparison per entry).
//! - Several managers can share one map (the filter table holds static,
//!   policy and endpoint chains); [`OwnedMap::replace_owned`] (a manager's
//!   full rewrite after a restart) only replaces that manager's entries.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use ipnet::IpNet;

use crate::dataplane::generictables::{Chain, Rule};
use crate::dataplane::ipsets::IpSetType;
use crate::hash::FastMap;

/// One entry of an [`OwnedMap`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// Name of the manager that wrote the entry.
    pub owner: String,
    /// Generation, unique within the map; changes whenever the value does.
    pub generation: u64,
    /// The value.
    pub value: T,
}

/// A map whose entries are owned by managers and versioned by generation.
#[derive(Debug, Clone)]
pub struct OwnedMap<K: Ord, T> {
    entries: BTreeMap<K, Versioned<T>>,
    next_generation: u64,
}

impl<K: Ord, T> Default for OwnedMap<K, T> {
    fn default() -> Self {
        OwnedMap {
            entries: BTreeMap::new(),
            next_generation: 1,
        }
    }
}

impl<K: Ord + Clone, T: PartialEq> OwnedMap<K, T> {
    /// Sets `key` to `value` on behalf of `owner`. Returns true if anything
    /// changed (an equal value with the same owner keeps its generation).
    pub fn set(&mut self, owner: &str, key: K, value: T) -> bool {
        if let Some(e) = self.entries.get(&key) {
            if e.value == value && e.owner == owner {
                return false;
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        self.entries.insert(
            key,
            Versioned {
                owner: owner.to_string(),
                generation,
                value,
            },
        );
        true
    }

    /// Removes `key`; returns true if it was present.
    pub fn remove(&mut self, key: &K) -> bool {
        self.entries.remove(key).is_some()
    }

    /// Replaces every entry owned by `owner` with `entries` (entries of other
    /// owners are kept; an unchanged entry keeps its generation).
    pub fn replace_owned(&mut self, owner: &str, entries: impl IntoIterator<Item = (K, T)>) {
        let mut keep = BTreeSet::new();
        for (k, v) in entries {
            keep.insert(k.clone());
            self.set(owner, k, v);
        }
        self.entries
            .retain(|k, e| e.owner != owner || keep.contains(k));
    }

    /// The value under `key`.
    pub fn get(&self, key: &K) -> Option<&T> {
        self.entries.get(key).map(|e| &e.value)
    }

    /// The owner of the entry under `key`.
    pub fn owner_of(&self, key: &K) -> Option<&str> {
        self.entries.get(key).map(|e| e.owner.as_str())
    }

    /// Every entry in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Versioned<T>)> {
        self.entries.iter()
    }

    /// Keys owned by `owner`.
    pub fn keys_owned_by<'a>(&'a self, owner: &'a str) -> impl Iterator<Item = &'a K> + 'a {
        self.entries
            .iter()
            .filter(move |(_, e)| e.owner == owner)
            .map(|(k, _)| k)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What changed in an [`OwnedMap`] since a driver last pushed it.
#[derive(Debug)]
pub struct MapDiff<'a, K, T> {
    /// New or changed entries.
    pub changed: Vec<(&'a K, &'a T)>,
    /// Keys that were pushed before and are no longer desired.
    pub removed: Vec<K>,
}

/// The generations a driver has pushed into its kernel-facing object.
#[derive(Debug, Clone)]
pub struct Pushed<K> {
    generations: FastMap<K, u64>,
}

impl<K> Default for Pushed<K> {
    fn default() -> Self {
        Pushed {
            generations: FastMap::default(),
        }
    }
}

impl<K: Ord + Hash + Clone> Pushed<K> {
    /// Compares `desired` with what was pushed.
    pub fn diff<'a, T>(&self, desired: &'a OwnedMap<K, T>) -> MapDiff<'a, K, T> {
        // Pushed keys still desired; if that is all of them, nothing was
        // removed and the pushed keys need no lookup in the (ordered)
        // desired map.
        let mut still_desired = 0usize;
        let changed = desired
            .entries
            .iter()
            .filter(|(k, e)| match self.generations.get(*k) {
                Some(g) => {
                    still_desired += 1;
                    *g != e.generation
                }
                None => true,
            })
            .map(|(k, e)| (k, &e.value))
            .collect();
        let removed = if still_desired == self.generations.len() {
            Vec::new()
        } else {
            self.generations
                .keys()
                .filter(|k| !desired.entries.contains_key(*k))
                .cloned()
                .collect()
        };
        MapDiff { changed, removed }
    }

    /// Records that the current `desired` has been pushed. Updates in
    /// place: only changed keys are cloned, so a delta costs no
    /// allocation per unchanged entry.
    pub fn mark_pushed<T>(&mut self, desired: &OwnedMap<K, T>) {
        for (k, e) in &desired.entries {
            match self.generations.get_mut(k) {
                Some(g) => *g = e.generation,
                None => {
                    self.generations.insert(k.clone(), e.generation);
                }
            }
        }
        // Every desired key is now present: anything more is stale.
        if self.generations.len() > desired.entries.len() {
            self.generations
                .retain(|k, _| desired.entries.contains_key(k));
        }
    }

    /// Forgets one key (the next diff reports it as changed if desired).
    pub fn forget(&mut self, key: &K) {
        self.generations.remove(key);
    }

    /// Forgets everything (the next diff reports every entry as changed).
    pub fn clear(&mut self) {
        self.generations.clear();
    }
}

/// Desired state of one `*tables` table (`filter`, `nat`, `mangle`, `raw`)
/// for one IP version.
#[derive(Debug, Clone, Default)]
pub struct TableDesired {
    /// Chains we own, by name.
    pub chains: OwnedMap<String, Chain>,
    /// Our rules at the top of kernel chains (`INPUT`, `FORWARD`, ...).
    pub inserts: OwnedMap<String, Vec<Rule>>,
}

/// Desired content of one IP set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSpec {
    /// Kernel set type.
    pub set_type: IpSetType,
    /// Members as the calc graph sends them (drivers canonicalise and drop
    /// members of the other IP version).
    pub members: BTreeSet<String>,
}

/// Desired IP sets of one IP version, keyed by calc-graph set ID.
pub type IpSetsDesired = OwnedMap<String, SetSpec>;

/// Desired state of our nftables table for one family: the four layers
/// (`filter`, `nat`, `mangle`, `raw`) and the IP sets.
#[derive(Debug, Clone, Default)]
pub struct NftDesired {
    /// Per-layer chains and base-chain rules.
    pub tables: BTreeMap<String, TableDesired>,
    /// Native sets.
    pub sets: IpSetsDesired,
}

/// Who produces a group of routes: upstream's route classes. When two classes want the same
/// destination in the same table, the lower one (declaration order) wins, deterministically;
/// the loser's route is not deleted, it is simply not programmed while the winner wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteClass {
    /// Routes to this node's workloads, down their `cali*` interfaces (endpoint manager).
    LocalWorkload,
    /// Remote blocks reached directly over the underlay: `CrossSubnet` VXLAN pools within the
    /// node's subnet (VXLAN manager).
    VxlanSameSubnet,
    /// Remote blocks reached through a VTEP over the VXLAN device (VXLAN manager).
    VxlanTunnel,
    /// Remote blocks of unencapsulated pools, per `ProgramClusterRoutes` (cluster-route manager).
    NoEncap,
    /// This node's own blocks: blackholes, so unallocated addresses are never sent back out.
    LocalBlock,
}

/// The key of a group of desired routes: `(class, interface or none)`. Two producers never
/// share a key, so neither can silently delete the other's routes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteKey {
    /// Producer.
    pub class: RouteClass,
    /// Output interface of every route in the group (`None`: device-less routes).
    pub iface: Option<String>,
}

impl RouteKey {
    /// The routes to one local workload interface.
    pub fn workload(iface: impl Into<String>) -> RouteKey {
        RouteKey {
            class: RouteClass::LocalWorkload,
            iface: Some(iface.into()),
        }
    }
}

/// One desired route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteTarget {
    /// Destination (host bits clear).
    pub dst: IpNet,
    /// Unicast, blackhole, unreachable or throw.
    pub kind: crate::dataplane::netlink::RouteKind,
    /// Next hop, if any.
    pub gateway: Option<std::net::IpAddr>,
    /// The next hop is on the link (`onlink`).
    pub onlink: bool,
    /// Preferred source address.
    pub src: Option<std::net::IpAddr>,
    /// Routing table (`None`: main).
    pub table: Option<u32>,
    /// Route protocol (`None`: the configured device route protocol).
    pub protocol: Option<u8>,
}

impl RouteTarget {
    /// A direct route to `dst` down the group's interface (scope link).
    pub fn device(dst: IpNet) -> RouteTarget {
        RouteTarget {
            dst: dst.trunc(),
            kind: crate::dataplane::netlink::RouteKind::Unicast,
            gateway: None,
            onlink: false,
            src: None,
            table: None,
            protocol: None,
        }
    }
}

/// Desired routes of one IP version, by `(class, interface)`; each producer replaces only its
/// own groups.
pub type RoutesDesired = OwnedMap<RouteKey, BTreeSet<RouteTarget>>;

/// The VXLAN device felix owns for one IP version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanDevice {
    /// `vxlan.calico` / `vxlan-v6.calico`.
    pub name: String,
    /// VNI (`VXLANVNI`).
    pub vni: u32,
    /// UDP port (`VXLANPort`).
    pub port: u16,
    /// This node's underlay address (the tunnel's local address).
    pub local: std::net::IpAddr,
    /// MTU (`VXLANMTU`/`VXLANMTUV6`); `None`: the MTU of the interface carrying `local`
    /// (the tunnel's parent) minus the encapsulation overhead.
    pub mtu: Option<u32>,
    /// Hardware address.
    pub mac: [u8; 6],
    /// This node's tunnel address, put on the device as a host address.
    pub tunnel_addr: Option<std::net::IpAddr>,
}

/// A remote VTEP: ARP/NDP entry `ip -> mac` and FDB entry `mac -> underlay` on the device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Vtep {
    /// The remote tunnel address.
    pub tunnel_ip: std::net::IpAddr,
    /// The remote device's MAC.
    pub mac: [u8; 6],
    /// The remote node's underlay address.
    pub underlay: std::net::IpAddr,
}

/// Desired VXLAN state of one IP version: the device (`None`: no pool needs it, remove it)
/// and the remote VTEPs by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VxlanDesired {
    /// The device.
    pub device: Option<VxlanDevice>,
    /// Remote VTEPs, by node.
    pub vteps: BTreeMap<String, Vtep>,
    /// IP pools of this family whose encapsulation this node's kernel lacks (IPIP without
    /// the module): reported by the driver in `/status`, never programmed.
    pub unsupported: Vec<String>,
}

/// Per-interface kernel settings the endpoint manager wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceSettings {
    /// Reverse-path filter value for IPv4 (`1` strict; `0` when the
    /// endpoint may spoof its source).
    pub rp_filter: u8,
}

/// Desired interface settings of one IP version, by interface name.
pub type IfacesDesired = OwnedMap<String, IfaceSettings>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_value_keeps_its_generation_so_drivers_skip_it() {
        let mut m: OwnedMap<String, u32> = OwnedMap::default();
        let mut pushed = Pushed::default();
        m.set("a", "x".into(), 1);
        m.set("a", "y".into(), 2);
        assert_eq!(pushed.diff(&m).changed.len(), 2);
        pushed.mark_pushed(&m);
        assert!(!m.set("a", "x".into(), 1));
        assert!(pushed.diff(&m).changed.is_empty());
        assert!(m.set("a", "x".into(), 3));
        let d = pushed.diff(&m);
        assert_eq!(d.changed, vec![(&"x".to_string(), &3)]);
        assert!(d.removed.is_empty());
        m.remove(&"y".to_string());
        assert_eq!(pushed.diff(&m).removed, vec!["y".to_string()]);
        // Marking in place records the change and forgets the removal.
        pushed.mark_pushed(&m);
        let d = pushed.diff(&m);
        assert!(d.changed.is_empty() && d.removed.is_empty());
        m.set("a", "y".into(), 2);
        assert_eq!(pushed.diff(&m).changed, vec![(&"y".to_string(), &2)]);
    }

    #[test]
    fn full_rewrite_replaces_only_the_owners_entries() {
        let mut m: OwnedMap<String, u32> = OwnedMap::default();
        m.set("static", "s".into(), 1);
        m.set("policy", "p1".into(), 1);
        m.set("policy", "p2".into(), 2);
        m.replace_owned("policy", [("p2".to_string(), 2), ("p3".to_string(), 3)]);
        let keys: Vec<_> = m.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, vec!["p2", "p3", "s"]);
        assert_eq!(m.keys_owned_by("static").count(), 1);
    }

    proptest::proptest! {
        /// The diff covers a value comparison with what was last pushed,
        /// whatever mix of sets and removals came in between (a removal
        /// and an addition in one round keep the key count unchanged).
        #[test]
        fn diff_matches_a_model(rounds in proptest::collection::vec(
            proptest::collection::vec((0u8..12, proptest::option::of(0u8..3)), 0..10),
            1..8,
        )) {
            let mut m: OwnedMap<u8, u8> = OwnedMap::default();
            let mut pushed = Pushed::default();
            let mut model: BTreeMap<u8, u8> = BTreeMap::new();
            for ops in rounds {
                for (k, v) in ops {
                    match v {
                        Some(v) => { m.set("o", k, v); }
                        None => { m.remove(&k); }
                    }
                }
                let now: BTreeMap<u8, u8> = m.iter().map(|(k, e)| (*k, e.value)).collect();
                let d = pushed.diff(&m);
                let changed: BTreeMap<u8, u8> = d.changed.iter().map(|(k, v)| (**k, **v)).collect();
                let want: BTreeMap<u8, u8> = now
                    .iter()
                    .filter(|(k, v)| model.get(*k) != Some(*v))
                    .map(|(k, v)| (*k, *v))
                    .collect();
                // Every value change is reported; a key removed and set
                // again in between may be reported with an equal value.
                for (k, v) in &want {
                    proptest::prop_assert_eq!(changed.get(k), Some(v));
                }
                for (k, v) in &changed {
                    proptest::prop_assert_eq!(now.get(k), Some(v));
                }
                let mut removed = d.removed.clone();
                removed.sort();
                let want_removed: Vec<u8> =
                    model.keys().filter(|k| !now.contains_key(*k)).copied().collect();
                proptest::prop_assert_eq!(removed, want_removed);
                pushed.mark_pushed(&m);
                model = now;
            }
        }
    }
}
