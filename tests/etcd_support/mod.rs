//! Shared helpers of the etcd integration tests: a consumer that applies
//! syncer events to a map, and resource builders.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the etcd support"
)]

pub mod netns;

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use felix::model::{Key, SyncStatus, SyncerEvent, Value};

pub const WAIT: Duration = Duration::from_secs(20);

/// Applies syncer events to a map and records statuses.
pub struct Consumer {
    pub rx: Receiver<SyncerEvent>,
    pub state: BTreeMap<Key, Value>,
    pub statuses: Vec<SyncStatus>,
    pub updates_seen: usize,
    pub max_batch: usize,
    /// Updates that set a key to the value it already had, or deleted an
    /// absent key (the syncer must never send them).
    pub redundant: usize,
}

impl Consumer {
    pub fn new(rx: Receiver<SyncerEvent>) -> Self {
        Consumer {
            rx,
            state: BTreeMap::new(),
            statuses: Vec::new(),
            updates_seen: 0,
            max_batch: 0,
            redundant: 0,
        }
    }

    pub fn handle(&mut self, event: SyncerEvent) {
        match event {
            SyncerEvent::Status(s) => self.statuses.push(s),
            SyncerEvent::Updates(updates) => {
                assert!(!updates.is_empty(), "empty batch sent");
                self.max_batch = self.max_batch.max(updates.len());
                for u in updates {
                    self.updates_seen += 1;
                    match u.value {
                        Some(v) => {
                            if self.state.get(&u.key) == Some(&v) {
                                self.redundant += 1;
                            }
                            self.state.insert(u.key, v);
                        }
                        None => {
                            if self.state.remove(&u.key).is_none() {
                                self.redundant += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Receives one event (waiting up to `WAIT`); false on timeout.
    pub fn step(&mut self) -> bool {
        match self.rx.recv_timeout(WAIT) {
            Ok(e) => {
                self.handle(e);
                true
            }
            Err(_) => false,
        }
    }

    /// Receives until `pred` holds; false on timeout.
    pub fn wait_until(&mut self, pred: impl Fn(&Self) -> bool) -> bool {
        let deadline = felix_actors::clock::real_now() + WAIT;
        while !pred(self) {
            let now = felix_actors::clock::real_now();
            if now >= deadline {
                return false;
            }
            match self.rx.recv_timeout(deadline - now) {
                Ok(e) => self.handle(e),
                Err(_) => return false,
            }
        }
        true
    }

    pub fn wait_in_sync(&mut self) {
        assert!(
            self.wait_until(|c| c.statuses.contains(&SyncStatus::InSync)),
            "no InSync; statuses {:?}",
            self.statuses
        );
    }

    /// Receives whatever arrives within `d`.
    pub fn drain_for(&mut self, d: Duration) {
        let deadline = felix_actors::clock::real_now() + d;
        while let Some(left) = deadline.checked_duration_since(felix_actors::clock::real_now()) {
            match self.rx.recv_timeout(left) {
                Ok(e) => self.handle(e),
                Err(_) => break,
            }
        }
    }

    pub fn in_syncs(&self) -> usize {
        self.statuses
            .iter()
            .filter(|s| **s == SyncStatus::InSync)
            .count()
    }

    pub fn tier_order(&self, name: &str) -> Option<f64> {
        match self.state.get(&Key::Tier(name.to_string())) {
            Some(Value::Tier(t)) => t.order,
            _ => None,
        }
    }

    pub fn has_tier(&self, name: &str) -> bool {
        self.state.contains_key(&Key::Tier(name.to_string()))
    }
}

pub fn tier_key(name: &str) -> String {
    format!("/calico/resources/v3/projectcalico.org/tiers/{name}")
}

/// A tier value as calicoctl stores it.
pub fn tier(name: &str, order: u32) -> String {
    format!(
        r#"{{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{{"name":"{name}","uid":"0b6e1c1e-0000-4000-8000-000000000001","creationTimestamp":"2026-01-01T00:00:00Z"}},"spec":{{"order":{order}}}}}"#
    )
}

pub fn netset_key(name: &str) -> String {
    format!("/calico/resources/v3/projectcalico.org/globalnetworksets/{name}")
}

pub fn netset(name: &str, cidr: &str) -> String {
    format!(
        r#"{{"kind":"GlobalNetworkSet","apiVersion":"projectcalico.org/v3","metadata":{{"name":"{name}"}},"spec":{{"nets":["{cidr}"]}}}}"#
    )
}

pub fn netset_model_key(name: &str) -> Key {
    Key::NetworkSet(felix::model::NetworkSetKey {
        name: name.to_string(),
    })
}
