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
        param: &'static str,
        origin: Source,
        value: String,
        reason: String,
        /// Source of the value that stays in force.
        kept: Source,
    },
    /// The name matches no parameter, upstream's or ours.
    #[error("unknown config parameter {name:?} from {origin}; ignored")]
    UnknownParam { name: String, origin: Source },
    /// An upstream Felix parameter that this implementation does not have.
    #[error("config parameter {name} from {origin} is an upstream Felix parameter that felix-rs does not implement; ignored")]
    Unsupported { name: String, origin: Source },
    /// A v3 `FelixConfiguration` spec field whose JSON shape cannot be
    /// turned into parameter text.
    #[error("invalid FelixConfiguration field {field} ({param}) from {origin}: {value}: {reason}; ignored, the lower-precedence value stays")]
    BadField {
        field: String,
        param: &'static str,
        origin: Source,
        value: String,
        reason: String,
    },
    /// A host-local parameter (for example the datastore connection) was
    /// given by the datastore; only the config file or environment may set it.
    #[error("config parameter {param} from {origin} can only be set by the config file or environment; ignoring value {value:?}")]
    LocalOnly {
        param: &'static str,
        origin: Source,
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
        reason: &'static str,
    },
    /// The file exists but could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A syntax error, with the file it was found in.
    #[error("{}: {inner}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
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
