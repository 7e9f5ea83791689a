//! Typed errors of this crate. Every `Display` is a single line.

use crate::source::Source;
use std::path::PathBuf;

/// One problem found while merging configuration layers. The offending
/// value is always dropped and the value from a lower-precedence source (or
/// the built-in default) stays in force.
///
/// Invariant: the `Display` form is one line (values are printed with
/// escapes, so embedded newlines cannot split it) and names the parameter,
/// the source and, where there is one, the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The value does not parse or fails validation.
    #[error("invalid value {value:?} for config parameter {param} from {origin}: {reason}; keeping the value from {kept}")]
    InvalidValue {
        /// Canonical name of the parameter.
        param: &'static str,
        /// Source that gave the rejected value.
        origin: Source,
        /// The rejected value, as given.
        value: String,
        /// Why the value was rejected.
        reason: String,
        /// Source of the value that stays in force.
        kept: Source,
    },
    /// The name matches no parameter, upstream's or ours.
    #[error("unknown config parameter {name:?} from {origin}; ignored")]
    UnknownParam {
        /// The name as given.
        name: String,
        /// Source that gave it.
        origin: Source,
    },
    /// An upstream Felix parameter that this implementation does not have.
    #[error("config parameter {name} from {origin} is an upstream Felix parameter that felix-rs does not implement; ignored")]
    Unsupported {
        /// The upstream parameter's name.
        name: String,
        /// Source that gave it.
        origin: Source,
    },
    /// A v3 `FelixConfiguration` spec field whose JSON shape cannot be
    /// turned into parameter text.
    #[error("invalid FelixConfiguration field {field} ({param}) from {origin}: {value}: {reason}; ignored, the lower-precedence value stays")]
    BadField {
        /// The v3 spec field name, as given.
        field: String,
        /// Canonical name of the parameter the field maps to.
        param: &'static str,
        /// Source that gave the field.
        origin: Source,
        /// The field's JSON value, as text.
        value: String,
        /// Why the JSON cannot be used.
        reason: String,
    },
    /// A host-local parameter (for example the datastore connection) was
    /// given by the datastore; only the config file or environment may set it.
    #[error("config parameter {param} from {origin} can only be set by the config file or environment; ignoring value {value:?}")]
    LocalOnly {
        /// Canonical name of the host-local parameter.
        param: &'static str,
        /// The datastore source that tried to set it.
        origin: Source,
        /// The ignored value.
        value: String,
    },
}

impl ConfigError {
    /// The canonical (or, for unknown names, the given) parameter name.
    pub fn param(&self) -> &str {
        match self {
            ConfigError::InvalidValue { param, .. }
            | ConfigError::LocalOnly { param, .. }
            | ConfigError::BadField { param, .. } => param,
            ConfigError::UnknownParam { name, .. } | ConfigError::Unsupported { name, .. } => name,
        }
    }

    /// The source whose value was rejected.
    pub fn origin(&self) -> Source {
        match self {
            ConfigError::InvalidValue { origin, .. }
            | ConfigError::UnknownParam { origin, .. }
            | ConfigError::Unsupported { origin, .. }
            | ConfigError::BadField { origin, .. }
            | ConfigError::LocalOnly { origin, .. } => *origin,
        }
    }
}

/// A config file that cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// A line that is neither a comment, a section header nor `Name = value`.
    #[error("line {line}: {reason}: {content:?}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// The offending line, trimmed.
        content: String,
        /// What is wrong with the line.
        reason: &'static str,
    },
    /// The file exists but could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        #[source]
        /// The I/O error from reading it.
        source: std::io::Error,
    },
    /// A syntax error, with the file it was found in.
    #[error("{}: {inner}", path.display())]
    InFile {
        /// The config file containing the error.
        path: PathBuf,
        #[source]
        /// The syntax error itself.
        inner: Box<ConfigFileError>,
    },
}

impl ConfigFileError {
    /// The 1-based line of a syntax error, if this is one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigFileError::Syntax { line, .. } => Some(*line),
            ConfigFileError::InFile { inner, .. } => inner.line(),
            ConfigFileError::Io { .. } => None,
        }
    }
}
