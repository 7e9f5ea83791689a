//! The config batcher: collects Felix configuration from the datastore
//! (`FelixConfiguration` `default` and `node.<this node>`) and the
//! datastore-ready flag, and hands the dataplane one `ConfigUpdate` once in
//! sync and again whenever the effective configuration changes.
//!
//! Invariants:
//! * Nothing is sent before in-sync; the first flush after in-sync always
//!   carries the complete configuration.
//! * Per-host parameters of other nodes are ignored.
//! * A datastore that reports not-ready is reported to the owner (which
//!   waits, as upstream), never silently ignored.

use std::collections::BTreeMap;

use felix_proto as pb;

/// See the module docs.
#[derive(Default)]
pub struct ConfigBatcher {
    hostname: String,
    global: BTreeMap<String, String>,
    host: BTreeMap<String, String>,
    dirty: bool,
    in_sync: bool,
    ready: bool,
    not_ready_pending: bool,
}

/// Config source numbers used in `ConfigUpdate.source_to_raw_config`,
/// matching upstream's source enumeration.
pub const SOURCE_DATASTORE_GLOBAL: u32 = 2;
/// See [`SOURCE_DATASTORE_GLOBAL`].
pub const SOURCE_DATASTORE_PER_HOST: u32 = 4;

impl ConfigBatcher {
    /// A batcher for node `hostname`, with nothing known yet.
    pub fn new(hostname: &str) -> Self {
        ConfigBatcher {
            hostname: hostname.to_string(),
            dirty: true,
            ready: true,
            ..Default::default()
        }
    }

    /// Global config parameter `name` was set, or (with `None`) removed.
    pub fn on_global(&mut self, name: &str, value: Option<&str>) {
        if set(&mut self.global, name, value) {
            self.dirty = true;
        }
    }

    /// Per-host config parameter `name` of `host` was set or removed; other hosts are ignored.
    pub fn on_host(&mut self, host: &str, name: &str, value: Option<&str>) {
        if host != self.hostname {
            return;
        }
        if set(&mut self.host, name, value) {
            self.dirty = true;
        }
    }

    /// The `ClusterInformation` ready flag; an absent flag counts as ready.
    pub fn on_ready(&mut self, ready: Option<bool>) {
        let ready = ready.unwrap_or(true);
        if !ready && self.ready {
            self.not_ready_pending = true;
        }
        self.ready = ready;
    }

    /// The datastore is in sync.
    pub fn on_in_sync(&mut self) {
        self.in_sync = true;
    }

    /// Whether the datastore said it is not ready since the last call.
    pub fn take_not_ready(&mut self) -> bool {
        std::mem::take(&mut self.not_ready_pending)
    }

    /// Whether the datastore is currently ready.
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// The merged datastore configuration (host overrides global).
    pub fn merged(&self) -> BTreeMap<String, String> {
        let mut m = self.global.clone();
        m.extend(self.host.iter().map(|(k, v)| (k.clone(), v.clone())));
        m
    }

    /// The update to send, if one is due.
    pub fn take_update(&mut self) -> Option<pb::ConfigUpdate> {
        if !self.in_sync || !self.dirty {
            return None;
        }
        self.dirty = false;
        let mut sources = BTreeMap::new();
        sources.insert(
            SOURCE_DATASTORE_GLOBAL,
            pb::RawConfig {
                source: "DatastoreGlobal".to_string(),
                config: self.global.clone().into_iter().collect(),
            },
        );
        sources.insert(
            SOURCE_DATASTORE_PER_HOST,
            pb::RawConfig {
                source: "DatastorePerHost".to_string(),
                config: self.host.clone().into_iter().collect(),
            },
        );
        Some(pb::ConfigUpdate {
            message: String::new(),
            config: self.merged().into_iter().collect(),
            source_to_raw_config: sources,
        })
    }
}

fn set(map: &mut BTreeMap<String, String>, name: &str, value: Option<&str>) -> bool {
    match value {
        Some(v) => {
            if map.get(name).map(String::as_str) == Some(v) {
                return false;
            }
            map.insert(name.to_string(), v.to_string());
            true
        }
        None => map.remove(name).is_some(),
    }
}
