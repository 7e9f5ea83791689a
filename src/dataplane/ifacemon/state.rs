//! [`InterfaceState`]: the interface monitor's picture of the kernel's links
//! and their addresses, and the subscriptions through which drivers and
//! managers learn which interfaces changed.
//!
//! Invariants:
//! - links are keyed by interface index (a rename keeps the index; a delete
//!   and re-create gets a new one), addresses by the index they were seen on;
//! - every change that is visible by name (a link appearing, disappearing,
//!   being renamed, going up or down, gaining or losing an address) adds the
//!   affected names to every live subscription, deduplicated; a consumer
//!   takes its pending names when it next runs, so a burst of events
//!   between two applies costs one pass per interface;
//! - excluded interfaces (`InterfaceExclude`) are never recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// One link as the monitor knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// Kernel interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Operationally up (`IFF_RUNNING`), as upstream judges it: only then
    /// can routes and settings be programmed usefully.
    pub up: bool,
}

/// An interface with its addresses, as returned by [`InterfaceState::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceView {
    /// The link.
    pub link: LinkInfo,
    /// Its addresses (both families).
    pub addrs: BTreeSet<IpAddr>,
}

/// One kernel notification, already decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfaceEvent {
    /// A link was created or changed.
    Link(LinkInfo),
    /// The link with this index was deleted.
    LinkGone {
        /// Interface index.
        index: u32,
    },
    /// An address was added to (`added`) or removed from a link.
    Addr {
        /// Interface index.
        index: u32,
        /// The address.
        addr: IpAddr,
        /// True for a new address, false for a removed one.
        added: bool,
    },
}

/// A full listing of links and addresses (the monitor's resync).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every link.
    pub links: Vec<LinkInfo>,
    /// Every (interface index, address).
    pub addrs: Vec<(u32, IpAddr)>,
}

type Filter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    links: BTreeMap<u32, LinkInfo>,
    addrs: BTreeMap<u32, BTreeSet<IpAddr>>,
    subs: Vec<Weak<Mutex<BTreeSet<String>>>>,
    events: u64,
}

impl Inner {
    fn notify(&mut self, names: &BTreeSet<String>) {
        if names.is_empty() {
            return;
        }
        self.subs.retain(|w| match w.upgrade() {
            Some(s) => {
                s.lock().extend(names.iter().cloned());
                true
            }
            None => false,
        });
    }

    fn name_of(&self, index: u32) -> Option<String> {
        self.links.get(&index).map(|l| l.name.clone())
    }
}

/// See the module docs. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct InterfaceState {
    inner: Arc<Mutex<Inner>>,
    excluded: Filter,
}

impl std::fmt::Debug for InterfaceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.inner.lock();
        f.debug_struct("InterfaceState")
            .field("links", &i.links.len())
            .field("subscriptions", &i.subs.len())
            .finish_non_exhaustive()
    }
}

impl Default for InterfaceState {
    fn default() -> Self {
        Self::new(|_| false)
    }
}

/// The names one consumer has not looked at yet. Dropping it unsubscribes.
#[derive(Debug, Clone)]
pub struct IfaceSubscription {
    pending: Arc<Mutex<BTreeSet<String>>>,
}

impl IfaceSubscription {
    /// True if some interface changed since the last [`Self::take`].
    pub fn has_pending(&self) -> bool {
        !self.pending.lock().is_empty()
    }

    /// The names of interfaces that changed since the last call.
    pub fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.pending.lock())
    }
}

impl InterfaceState {
    /// An empty state that ignores interfaces for which `excluded` is true.
    pub fn new(excluded: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        InterfaceState {
            inner: Arc::new(Mutex::new(Inner::default())),
            excluded: Arc::new(excluded),
        }
    }

    /// A new subscription; it starts with nothing pending (a new consumer
    /// reads everything anyway).
    pub fn subscribe(&self) -> IfaceSubscription {
        let pending = Arc::new(Mutex::new(BTreeSet::new()));
        self.inner.lock().subs.push(Arc::downgrade(&pending));
        IfaceSubscription { pending }
    }

    /// Number of events and resyncs that changed something.
    pub fn changes(&self) -> u64 {
        self.inner.lock().events
    }

    /// The interface called `name`, if the monitor has seen it.
    pub fn get(&self, name: &str) -> Option<IfaceView> {
        let i = self.inner.lock();
        let link = i.links.values().find(|l| l.name == name)?.clone();
        let addrs = i.addrs.get(&link.index).cloned().unwrap_or_default();
        Some(IfaceView { link, addrs })
    }

    /// Every known interface with its addresses, by name.
    pub fn all(&self) -> BTreeMap<String, IfaceView> {
        let i = self.inner.lock();
        i.links
            .values()
            .map(|l| {
                let addrs = i.addrs.get(&l.index).cloned().unwrap_or_default();
                (
                    l.name.clone(),
                    IfaceView {
                        link: l.clone(),
                        addrs,
                    },
                )
            })
            .collect()
    }

    /// Applies one event; returns true if it changed anything visible.
    pub fn apply(&self, ev: IfaceEvent) -> bool {
        let mut i = self.inner.lock();
        let mut changed = BTreeSet::new();
        match ev {
            IfaceEvent::Link(link) => {
                if (self.excluded)(&link.name) {
                    // A rename into an excluded name ends our interest.
                    i.addrs.remove(&link.index);
                    if let Some(old) = i.links.remove(&link.index) {
                        changed.insert(old.name);
                    }
                } else {
                    match i.links.get(&link.index) {
                        Some(old) if *old == link => {}
                        Some(old) => {
                            changed.insert(old.name.clone());
                            changed.insert(link.name.clone());
                        }
                        None => {
                            changed.insert(link.name.clone());
                        }
                    }
                    i.links.insert(link.index, link);
                }
            }
            IfaceEvent::LinkGone { index } => {
                if let Some(old) = i.links.remove(&index) {
                    changed.insert(old.name);
                }
                i.addrs.remove(&index);
            }
            IfaceEvent::Addr { index, addr, added } => {
                let known = i.name_of(index);
                if known.as_deref().is_some_and(|n| (self.excluded)(n)) {
                    return false;
                }
                let set = i.addrs.entry(index).or_default();
                let did = if added {
                    set.insert(addr)
                } else {
                    set.remove(&addr)
                };
                if set.is_empty() {
                    i.addrs.remove(&index);
                }
                if did {
                    if let Some(n) = known {
                        changed.insert(n);
                    }
                }
            }
        }
        let any = !changed.is_empty();
        if any {
            i.events += 1;
        }
        i.notify(&changed);
        any
    }

    /// Replaces everything with a full listing; notifies the names whose
    /// state differs. Returns true if anything did.
    pub fn resync(&self, snap: Snapshot) -> bool {
        let mut i = self.inner.lock();
        let links: BTreeMap<u32, LinkInfo> = snap
            .links
            .into_iter()
            .filter(|l| !(self.excluded)(&l.name))
            .map(|l| (l.index, l))
            .collect();
        let mut addrs: BTreeMap<u32, BTreeSet<IpAddr>> = BTreeMap::new();
        for (idx, a) in snap.addrs {
            if links.contains_key(&idx) {
                addrs.entry(idx).or_default().insert(a);
            }
        }
        let mut changed = BTreeSet::new();
        for (idx, l) in &links {
            let same = i.links.get(idx) == Some(l) && i.addrs.get(idx) == addrs.get(idx);
            if !same {
                changed.insert(l.name.clone());
                if let Some(old) = i.links.get(idx) {
                    changed.insert(old.name.clone());
                }
            }
        }
        for (idx, old) in &i.links {
            if !links.contains_key(idx) {
                changed.insert(old.name.clone());
            }
        }
        i.links = links;
        i.addrs = addrs;
        let any = !changed.is_empty();
        if any {
            i.events += 1;
        }
        i.notify(&changed);
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, name: &str, up: bool) -> IfaceEvent {
        IfaceEvent::Link(LinkInfo {
            index,
            name: name.into(),
            up,
        })
    }

    #[test]
    fn subscribers_see_each_changed_name_once_and_unchanged_events_are_silent() {
        let st = InterfaceState::default();
        let a = st.subscribe();
        let b = st.subscribe();
        assert!(st.apply(link(7, "cali1", false)));
        assert!(st.apply(link(7, "cali1", true)));
        assert!(!st.apply(link(7, "cali1", true)));
        assert_eq!(a.take(), BTreeSet::from(["cali1".to_string()]));
        assert!(!a.has_pending());
        assert!(b.has_pending());
        assert!(st.apply(IfaceEvent::Addr {
            index: 7,
            addr: "10.0.0.1".parse().unwrap(),
            added: true
        }));
        assert_eq!(
            st.get("cali1").unwrap().addrs,
            BTreeSet::from(["10.0.0.1".parse::<IpAddr>().unwrap()])
        );
        assert!(st.apply(IfaceEvent::LinkGone { index: 7 }));
        assert!(st.get("cali1").is_none());
        assert_eq!(a.take().len(), 1);
        drop(b);
        st.apply(link(8, "cali2", true));
        assert_eq!(st.inner.lock().subs.len(), 1, "dropped subscription pruned");
    }

    #[test]
    fn rename_notifies_both_names_and_excluded_interfaces_are_ignored() {
        let st = InterfaceState::new(|n| n == "kube-ipvs0");
        let s = st.subscribe();
        st.apply(link(3, "tmp123", true));
        s.take();
        st.apply(link(3, "cali9", true));
        assert_eq!(
            s.take(),
            BTreeSet::from(["cali9".to_string(), "tmp123".to_string()])
        );
        assert!(!st.apply(link(4, "kube-ipvs0", true)));
        assert!(!st.apply(IfaceEvent::Addr {
            index: 4,
            addr: "10.96.0.1".parse().unwrap(),
            added: true
        }));
        assert!(st.get("kube-ipvs0").is_none());
        assert!(!st.all().contains_key("kube-ipvs0"));
        assert!(!s.has_pending());
    }

    #[test]
    fn resync_reports_only_differences() {
        let st = InterfaceState::default();
        let s = st.subscribe();
        let l = |i, n: &str, up| LinkInfo {
            index: i,
            name: n.into(),
            up,
        };
        st.resync(Snapshot {
            links: vec![l(1, "lo", true), l(5, "cali1", true), l(6, "cali2", true)],
            addrs: vec![(1, "127.0.0.1".parse().unwrap())],
        });
        assert_eq!(s.take().len(), 3);
        // cali1 went down, cali2 vanished, cali3 appeared, lo unchanged.
        assert!(st.resync(Snapshot {
            links: vec![l(1, "lo", true), l(5, "cali1", false), l(9, "cali3", true)],
            addrs: vec![(1, "127.0.0.1".parse().unwrap())],
        }));
        assert_eq!(
            s.take(),
            BTreeSet::from(["cali1".into(), "cali2".into(), "cali3".into()])
        );
        assert!(!st.resync(Snapshot {
            links: vec![l(1, "lo", true), l(5, "cali1", false), l(9, "cali3", true)],
            addrs: vec![(1, "127.0.0.1".parse().unwrap())],
        }));
        assert!(!s.has_pending());
    }
}
