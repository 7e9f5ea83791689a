//! The `--config` file: INI as upstream's `felix.cfg`.
//!
//! Format (the subset of the Go `ini` package that Felix relies on):
//! - `[global]` section header (upstream reads keys from every section, and
//!   so do we; keys before any header are read too);
//! - `Name = value` or `Name: value` (first `=` or `:` splits);
//! - `#` or `;` starts a comment line, and also ends an unquoted value
//!   (inline comment); wrap the value in `"..."` or `` `...` `` to keep
//!   those characters;
//! - a repeated key: the last one wins (with a warning).
//!
//! Any other line is a syntax error naming its 1-based line number.

use crate::error::ConfigFileError;
use std::collections::BTreeMap;
use std::path::Path;

/// Parses config-file text into `name -> value` pairs.
pub fn parse_config_file(text: &str) -> Result<BTreeMap<String, String>, ConfigFileError> {
    let mut out = BTreeMap::new();
    for (idx, raw_line) in text.lines().enumerate() {
        let line_no = idx + 1;
        let line = raw_line.trim();
        let syntax = |reason| ConfigFileError::Syntax {
            line: line_no,
            content: line.to_string(),
            reason,
        };
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let close = rest
                .rfind(']')
                .ok_or_else(|| syntax("unclosed section header"))?;
            if rest[..close].trim().is_empty() {
                return Err(syntax("empty section name"));
            }
            continue;
        }
        let split = line
            .find(['=', ':'])
            .ok_or_else(|| syntax("expected `Name = value`"))?;
        let key = line[..split].trim();
        if key.is_empty() {
            return Err(syntax("missing parameter name before `=`"));
        }
        let value = parse_value(line[split + 1..].trim())
            .ok_or_else(|| syntax("unterminated quoted value"))?;
        if out.insert(key.to_string(), value).is_some() {
            tracing::warn!(
                line = line_no,
                key,
                "config file sets a parameter twice; the last value wins"
            );
        }
    }
    Ok(out)
}

/// Strips quotes, or an inline comment from an unquoted value.
fn parse_value(v: &str) -> Option<String> {
    for q in ['"', '`'] {
        if let Some(rest) = v.strip_prefix(q) {
            let end = rest.find(q)?;
            return Some(rest[..end].to_string());
        }
    }
    let cut = v.find(['#', ';']).unwrap_or(v.len());
    Some(v[..cut].trim().to_string())
}

/// Reads and parses a config file. Errors name the file. Upstream treats
/// an absent file as empty; callers that want that check
/// [`ConfigFileError::is_not_found`].
pub fn load_config_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_config_file(&text).map_err(|e| ConfigFileError::InFile {
        path: path.to_path_buf(),
        inner: Box::new(e),
    })
}

impl ConfigFileError {
    /// The file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ConfigFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}
