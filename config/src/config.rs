//! The merged, typed configuration and the merge itself.
//!
//! [`Config::build`] takes raw `name -> text` layers, each tagged with its
//! [`Source`], and resolves every parameter to the value from the
//! highest-precedence source that gave a *valid* value. Rules:
//!
//! - Names are matched ignoring ASCII case; the canonical name is the
//!   table's.
//! - An empty value is ignored (as upstream: "unset"); write `none` to force
//!   the zero value (false / 0 / empty / unset). `none` on a parameter that
//!   must be non-zero is an invalid value.
//! - An invalid value yields exactly one [`ConfigError`] and is dropped; the
//!   value from the next lower source that had a valid one (or the default)
//!   stays in force. Unknown names yield one error each and are ignored.
//! - Host-local parameters (datastore connection, node name) are ignored
//!   when they come from a datastore source, with one error.
//! - Nothing here panics on any input.

use crate::error::ConfigError;
use crate::params::{lookup, lookup_unsupported, Param, PARAMS};
use crate::source::Source;
use crate::value::Value;
use std::collections::BTreeMap;

/// One raw input layer: where it came from and its `name -> text` pairs.
pub type Layer = (Source, BTreeMap<String, String>);

/// The effective value of every parameter, with its source and raw text.
///
/// Invariant: `values`, `sources` and `raw` have one entry per [`Param`],
/// indexed by `Param as usize`; `values[i]` always has the shape of
/// `PARAMS[i].kind`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    values: Vec<Value>,
    sources: Vec<Source>,
    raw: Vec<Option<String>>,
}

impl Default for Config {
    /// Every parameter at its built-in default.
    fn default() -> Self {
        Config {
            values: PARAMS.iter().map(|s| s.default_value()).collect(),
            sources: vec![Source::Default; PARAMS.len()],
            raw: vec![None; PARAMS.len()],
        }
    }
}

impl Config {
    /// Merges `layers` (in any order; they are applied by [`Source`]
    /// precedence, and for equal sources in slice order) over the defaults.
    /// Returns the config and every problem found, in application order.
    /// Nothing is logged here: the caller logs each error once.
    pub fn build(layers: &[Layer]) -> (Config, Vec<ConfigError>) {
        let mut order: Vec<&Layer> = layers.iter().collect();
        order.sort_by_key(|(source, _)| *source);
        let mut cfg = Config::default();
        let mut errors = Vec::new();
        for (source, kvs) in order {
            for (name, raw) in kvs {
                if let Err(e) = cfg.apply_one(*source, name, raw) {
                    errors.push(e);
                }
            }
        }
        (cfg, errors)
    }

    fn apply_one(&mut self, source: Source, name: &str, raw: &str) -> Result<(), ConfigError> {
        let Some(param) = lookup(name) else {
            return Err(match lookup_unsupported(name) {
                Some(canon) => ConfigError::Unsupported {
                    name: canon.to_string(),
                    origin: source,
                },
                None => ConfigError::UnknownParam {
                    name: name.to_string(),
                    origin: source,
                },
            });
        };
        let spec = param.spec();
        if raw.is_empty() {
            tracing::debug!(param = spec.name, %source, "ignoring empty config value");
            return Ok(());
        }
        if spec.local && !source.is_local() {
            return Err(ConfigError::LocalOnly {
                param: spec.name,
                origin: source,
                value: raw.to_string(),
            });
        }
        let idx = param as usize;
        let invalid = |reason: String| ConfigError::InvalidValue {
            param: spec.name,
            origin: source,
            value: raw.to_string(),
            reason,
            kept: self.sources[idx],
        };
        let value = if raw.trim().eq_ignore_ascii_case("none") {
            if spec.non_zero {
                return Err(invalid("this parameter cannot be set to none".to_string()));
            }
            spec.kind.zero()
        } else {
            spec.kind.parse(raw).map_err(invalid)?
        };
        self.values[idx] = value;
        self.sources[idx] = source;
        self.raw[idx] = Some(raw.to_string());
        Ok(())
    }

    /// The effective value of `p`.
    pub fn value(&self, p: Param) -> &Value {
        &self.values[p as usize]
    }

    /// Where the effective value of `p` came from.
    pub fn source(&self, p: Param) -> Source {
        self.sources[p as usize]
    }

    /// Effective value by (case-insensitive) name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        lookup(name).map(|p| self.value(p))
    }

    /// Raw text of every parameter set by a non-default source, by
    /// canonical name. (This is the view `felix calc` prints as `config`.)
    pub fn raw(&self) -> BTreeMap<String, String> {
        Param::ALL
            .iter()
            .filter_map(|p| {
                self.raw[*p as usize]
                    .as_ref()
                    .map(|r| (p.name().to_string(), r.clone()))
            })
            .collect()
    }

    /// Raw text of every parameter whose effective value came from `source`, by canonical
    /// name: the layers that rebuild this configuration (the external driver's
    /// `ConfigUpdate`).
    pub fn raw_from(&self, source: Source) -> BTreeMap<String, String> {
        Param::ALL
            .iter()
            .filter(|p| self.sources[**p as usize] == source)
            .filter_map(|p| {
                self.raw[*p as usize]
                    .as_ref()
                    .map(|r| (p.name().to_string(), r.clone()))
            })
            .collect()
    }

    /// Canonical rendering of every effective value (defaults included).
    pub fn rendered(&self) -> BTreeMap<&'static str, String> {
        Param::ALL
            .iter()
            .map(|p| (p.name(), self.value(*p).render()))
            .collect()
    }
}
