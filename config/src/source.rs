//! Where a configuration value came from, ordered by precedence.

use std::fmt;

/// A configuration source. The derived ordering is the precedence order:
/// a value from a later variant overrides one from an earlier variant.
///
/// Invariant: `Default < DatastoreGlobal < DatastorePerHost < ConfigFile <
/// Environment`, exactly as the external contract (INTERFACES.md §1) says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The built-in default of the parameter table.
    Default,
    /// Datastore `FelixConfiguration` named `default`.
    DatastoreGlobal,
    /// Datastore `FelixConfiguration` named `node.<NODE>` (and per-host
    /// values derived from this node's `Node` resource).
    DatastorePerHost,
    /// The `--config` INI file.
    ConfigFile,
    /// `FELIX_<NAME>` environment variables.
    Environment,
}

impl Source {
    /// All sources, lowest precedence first.
    pub const ALL: [Source; 5] = [
        Source::Default,
        Source::DatastoreGlobal,
        Source::DatastorePerHost,
        Source::ConfigFile,
        Source::Environment,
    ];

    /// Local sources are the ones read on this host at start-up. Parameters
    /// flagged "local only" (datastore connection settings, the node name)
    /// may only come from these, never from the datastore itself.
    pub fn is_local(self) -> bool {
        matches!(
            self,
            Source::Default | Source::ConfigFile | Source::Environment
        )
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Default => "built-in default",
            Source::DatastoreGlobal => "datastore (FelixConfiguration default)",
            Source::DatastorePerHost => "datastore (per-host FelixConfiguration)",
            Source::ConfigFile => "config file",
            Source::Environment => "environment",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_order_matches_contract() {
        let mut sorted = Source::ALL;
        sorted.sort();
        assert_eq!(sorted, Source::ALL);
        assert!(Source::Environment > Source::ConfigFile);
        assert!(Source::ConfigFile > Source::DatastorePerHost);
        assert!(Source::DatastorePerHost > Source::DatastoreGlobal);
        assert!(Source::DatastoreGlobal > Source::Default);
    }

    #[test]
    fn only_host_sources_are_local() {
        let local: Vec<_> = Source::ALL.into_iter().filter(|s| s.is_local()).collect();
        assert_eq!(
            local,
            vec![Source::Default, Source::ConfigFile, Source::Environment]
        );
    }
}
