//! Typed Felix configuration: upstream parameter names, types, defaults and
//! validation, merged from five sources in the contract's precedence order.
//!
//! Flow: each source produces a raw `name -> text` layer
//! ([`parse_config_file`], [`env_overrides`], [`felix_configuration_to_raw`]
//! for datastore resources); [`Config::build`] validates and merges the
//! layers over the built-in defaults of the parameter table ([`PARAMS`]),
//! returning the typed [`Config`] plus one [`ConfigError`] per rejected
//! entry. [`restart_required`] tells `felix run` whether a new config needs
//! a restart, and [`render_markdown`] produces `docs/config.md`.
//!
//! Module map: [`params`] (the table), [`value`] (kinds and parsing),
//! [`duration`], [`config`] (merge), [`accessors`] and [`derived`] (typed
//! getters), [`file`], [`env`], [`v3`], [`restart`], [`docs`].

#![forbid(unsafe_code)]

pub mod accessors;
pub mod config;
pub mod derived;
pub mod docs;
pub mod duration;
pub mod env;
pub mod error;
pub mod file;
pub mod inert;
pub mod params;
pub mod restart;
pub mod source;
pub mod spec;
pub mod types;
pub mod v3;
pub mod value;

pub use config::{Config, Layer};
pub use derived::{
    BpfAttachType, ChainInsertMode, DataplaneMode, EndpointToHostAction, IptablesBackend, LogLevel,
    NftablesMode,
};
pub use docs::render_markdown;
pub use env::{env_overrides, process_env_overrides};
pub use error::{ConfigError, ConfigFileError};
pub use file::{load_config_file, parse_config_file};
pub use inert::{has_no_effect, set_without_effect, NO_EFFECT};
pub use params::{lookup, Param, PARAMS};
pub use restart::{changed_params, restart_required};
pub use source::Source;
pub use spec::{Group, ParamSpec};
pub use types::{IfacePattern, IndexRange, Pattern, PortRange, ProtoPort};
pub use v3::{
    annotation_overrides, felix_configuration_scope, felix_configuration_to_raw,
    param_name_from_v3_field, v3_spec_to_raw,
};
pub use value::{Kind, Value};
