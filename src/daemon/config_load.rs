//! Configuration for `felix run`: the local layers (config file and
//! environment), read once at start, merged with the datastore layers that
//! arrive in the calc graph's `ConfigUpdate`.
//!
//! Precedence (lowest first, INTERFACES.md §1): built-in default <
//! `FelixConfiguration` `default` < `FelixConfiguration` `node.<NODE>` <
//! `--config` file < `FELIX_<NAME>` environment. The merge itself is
//! [`felix_config::Config::build`]; this module only assembles the layers
//! and makes sure every rejected value is logged exactly once: errors of the
//! local layers when they are read ([`LocalConfig::build`]), errors of the
//! datastore layers when they first appear ([`ConfigTracker`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use felix_config::{
    load_config_file, process_env_overrides, Config, ConfigError, Layer, Param, Source,
};
use felix_proto as pb;

use crate::calc::config_batcher::{SOURCE_DATASTORE_GLOBAL, SOURCE_DATASTORE_PER_HOST};

/// Config file read when `--config` is not given (if it exists), as
/// upstream's default `felix.cfg`.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/calico/felix.cfg";

/// The local layers, read once at start.
#[derive(Debug, Clone, Default)]
pub struct LocalConfig {
    /// The config file that was read, if any.
    pub file_path: Option<PathBuf>,
    /// Its `[global]` parameters.
    pub file: BTreeMap<String, String>,
    /// `FELIX_*` environment overrides.
    pub env: BTreeMap<String, String>,
}

/// A config file that cannot be used (the message names the file and line).
#[derive(Debug, thiserror::Error)]
#[error("config file {0}")]
pub struct LocalConfigError(#[from] felix_config::ConfigFileError);

impl LocalConfig {
    /// Reads `explicit` (which must exist) or, without it, the default
    /// config file if present; then the environment.
    pub fn load(explicit: Option<&Path>) -> Result<LocalConfig, LocalConfigError> {
        let (file_path, file) = match explicit {
            Some(p) => (Some(p.to_path_buf()), load_config_file(p)?),
            None => {
                let p = Path::new(DEFAULT_CONFIG_FILE);
                match load_config_file(p) {
                    Ok(kv) => (Some(p.to_path_buf()), kv),
                    Err(e) if e.is_not_found() => (None, BTreeMap::new()),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(LocalConfig {
            file_path,
            file,
            env: process_env_overrides(),
        })
    }

    /// This node's name for `felix run`: `flag` (`--node`) if given, else
    /// `FelixHostname` from the environment or the config file (the
    /// environment wins and an invalid value is skipped, as for every
    /// parameter), else `hostname()`. `FelixHostname` is host-local: the
    /// datastore cannot set it (its per-node layer is chosen by it).
    pub fn node_name(&self, flag: Option<&str>, hostname: impl FnOnce() -> String) -> String {
        if let Some(n) = flag {
            return n.to_string();
        }
        let (cfg, _) = self.build();
        let name = cfg.felix_hostname();
        if cfg.source(Param::FelixHostname) != Source::Default && !name.is_empty() {
            return name.to_string();
        }
        hostname()
    }

    fn layers(&self) -> Vec<Layer> {
        vec![
            (Source::ConfigFile, self.file.clone()),
            (Source::Environment, self.env.clone()),
        ]
    }

    /// The configuration from the local layers alone (used before the
    /// datastore's configuration is known), with the local layers' errors.
    pub fn build(&self) -> (Config, Vec<ConfigError>) {
        Config::build(&self.layers())
    }

    /// The full configuration: datastore layers plus the local ones.
    pub fn build_with(&self, datastore: &DatastoreLayers) -> (Config, Vec<ConfigError>) {
        let mut layers = vec![
            (Source::DatastoreGlobal, datastore.global.clone()),
            (Source::DatastorePerHost, datastore.host.clone()),
        ];
        layers.extend(self.layers());
        Config::build(&layers)
    }
}

/// The datastore's raw configuration, as carried by a `ConfigUpdate`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatastoreLayers {
    /// From `FelixConfiguration` `default`.
    pub global: BTreeMap<String, String>,
    /// From `FelixConfiguration` `node.<NODE>`.
    pub host: BTreeMap<String, String>,
}

impl DatastoreLayers {
    /// Extracts the per-source raw maps of a `ConfigUpdate`.
    pub fn from_update(cu: &pb::ConfigUpdate) -> DatastoreLayers {
        let raw = |n: u32| -> BTreeMap<String, String> {
            cu.source_to_raw_config
                .get(&n)
                .map(|r| {
                    r.config
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        DatastoreLayers {
            global: raw(SOURCE_DATASTORE_GLOBAL),
            host: raw(SOURCE_DATASTORE_PER_HOST),
        }
    }
}

/// Keeps the effective configuration and logs datastore-layer errors once.
#[derive(Debug)]
pub struct ConfigTracker {
    local: LocalConfig,
    current: Config,
    logged: BTreeSet<String>,
}

/// What [`ConfigTracker::update`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    /// Parameters whose change needs a restart (empty: none).
    pub restart: Vec<&'static str>,
    /// Datastore-layer errors not reported before (already logged).
    pub new_errors: Vec<String>,
}

impl ConfigTracker {
    /// Builds the first full configuration; logs the datastore layers'
    /// errors (the local ones were logged when read).
    pub fn new(local: LocalConfig, datastore: &DatastoreLayers) -> (ConfigTracker, Vec<String>) {
        let (current, errs) = local.build_with(datastore);
        let mut t = ConfigTracker {
            local,
            current,
            logged: BTreeSet::new(),
        };
        let new_errors = t.note_errors(&errs);
        (t, new_errors)
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.current
    }

    /// The local layers.
    pub fn local(&self) -> &LocalConfig {
        &self.local
    }

    /// Applies a new datastore configuration; returns which changes need a
    /// restart. The new configuration becomes current either way.
    pub fn update(&mut self, datastore: &DatastoreLayers) -> ConfigChange {
        let (next, errs) = self.local.build_with(datastore);
        let new_errors = self.note_errors(&errs);
        let restart = felix_config::restart_required(&self.current, &next);
        for p in felix_config::changed_params(&self.current, &next) {
            tracing::info!(
                param = p.name(),
                old = %self.current.value(p).render(),
                new = %next.value(p).render(),
                restart = p.spec().restart,
                "configuration value changed"
            );
        }
        self.current = next;
        ConfigChange {
            restart,
            new_errors,
        }
    }

    /// Logs each datastore-layer error not logged before; forgets errors
    /// that went away (so they are logged again if they come back).
    fn note_errors(&mut self, errs: &[ConfigError]) -> Vec<String> {
        let now: BTreeSet<String> = errs
            .iter()
            .filter(|e| !e.origin().is_local())
            .map(ToString::to_string)
            .collect();
        let fresh: Vec<String> = now.difference(&self.logged).cloned().collect();
        for line in &fresh {
            tracing::error!("{line}");
        }
        self.logged = now;
        fresh
    }
}

/// Logs the local layers' errors (one line each).
pub fn log_local_errors(errs: &[ConfigError]) {
    for e in errs {
        tracing::error!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `felix run`'s node name: `--node`, else `FelixHostname` from the
    /// environment, else from the config file, else the host name.
    #[test]
    fn node_name_is_flag_then_env_then_config_file_then_hostname() {
        let host = || "kernel-host".to_string();
        let local = |file: &[(&str, &str)], env: &[(&str, &str)]| LocalConfig {
            file_path: None,
            file: kv(file),
            env: kv(env),
        };
        let both = local(
            &[("FelixHostname", "from-file")],
            &[("FELIXHOSTNAME", "from-env")],
        );
        assert_eq!(both.node_name(Some("from-flag"), host), "from-flag");
        assert_eq!(both.node_name(None, host), "from-env");
        let file_only = local(&[("FelixHostname", "from-file")], &[]);
        assert_eq!(file_only.node_name(None, host), "from-file");
        assert_eq!(local(&[], &[]).node_name(None, host), "kernel-host");
    }

    #[test]
    fn precedence_is_global_then_host_then_file_then_env() {
        let local = LocalConfig {
            file_path: None,
            file: kv(&[("InterfacePrefix", "file"), ("HealthPort", "9000")]),
            env: kv(&[("INTERFACEPREFIX", "env")]),
        };
        let ds = DatastoreLayers {
            global: kv(&[
                ("InterfacePrefix", "glob"),
                ("HealthPort", "9001"),
                ("LogSeverityScreen", "Debug"),
                ("IptablesRefreshInterval", "30"),
            ]),
            host: kv(&[("IptablesRefreshInterval", "45")]),
        };
        let (cfg, errs) = local.build_with(&ds);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(cfg.value(Param::InterfacePrefix).render(), "env");
        assert_eq!(cfg.health_port(), 9000);
        assert_eq!(
            cfg.source(Param::LogSeverityScreen),
            Source::DatastoreGlobal
        );
        assert_eq!(
            cfg.iptables_refresh_interval(),
            std::time::Duration::from_secs(45)
        );
    }

    #[test]
    fn datastore_errors_are_reported_once_and_again_after_they_clear() {
        let local = LocalConfig {
            env: kv(&[("IptablesRefreshInterval", "abc")]),
            ..Default::default()
        };
        let bad = DatastoreLayers {
            global: kv(&[("HealthPort", "notaport")]),
            host: BTreeMap::new(),
        };
        let (mut t, first) = ConfigTracker::new(local, &bad);
        assert_eq!(first.len(), 1, "only the datastore error: {first:?}");
        assert!(first[0].contains("HealthPort") && first[0].contains("notaport"));
        assert!(t.update(&bad).new_errors.is_empty(), "not repeated");
        let good = DatastoreLayers::default();
        assert!(t.update(&good).new_errors.is_empty());
        assert_eq!(t.update(&bad).new_errors.len(), 1, "reported again");
    }

    #[test]
    fn restart_is_required_for_ordinary_parameters_only() {
        let (mut t, _) = ConfigTracker::new(LocalConfig::default(), &DatastoreLayers::default());
        let c = t.update(&DatastoreLayers {
            global: kv(&[("ClusterGUID", "abc")]),
            host: BTreeMap::new(),
        });
        assert!(c.restart.is_empty(), "{c:?}");
        let c = t.update(&DatastoreLayers {
            global: kv(&[("ClusterGUID", "abc"), ("IptablesRefreshInterval", "17")]),
            host: BTreeMap::new(),
        });
        assert_eq!(c.restart, vec!["IptablesRefreshInterval"]);
    }

    #[test]
    fn config_update_layers_are_split_by_source() {
        let mut cu = pb::ConfigUpdate::default();
        cu.source_to_raw_config.insert(
            SOURCE_DATASTORE_GLOBAL,
            pb::RawConfig {
                source: "DatastoreGlobal".into(),
                config: [("A".to_string(), "1".to_string())].into_iter().collect(),
            },
        );
        cu.source_to_raw_config.insert(
            SOURCE_DATASTORE_PER_HOST,
            pb::RawConfig {
                source: "DatastorePerHost".into(),
                config: [("B".to_string(), "2".to_string())].into_iter().collect(),
            },
        );
        let l = DatastoreLayers::from_update(&cu);
        assert_eq!(l.global, kv(&[("A", "1")]));
        assert_eq!(l.host, kv(&[("B", "2")]));
    }
}
