//! Throwaway network namespaces for the library's kernel tests: a
//! [`felix_netns::Netns`] guard (deleted on drop, also on panic) plus a
//! [`Commands`] handle bound to it.  Tests never touch the host's own
//! namespace.  Each kernel test passes `felix_netns::require!` first, which
//! checks root and the tools (and skips, or fails under CI).

use std::sync::Arc;

use felix_netns::Netns;

use super::{Commands, SystemCommands};

/// A network namespace `felix-t-<pid>-<unique>` that is deleted on drop.
pub(crate) struct TestNetns {
    pub name: String,
    ns: Netns,
}

impl TestNetns {
    /// Creates the namespace; panics if it cannot (the test's
    /// `felix_netns::require!` has checked root and `ip`).
    pub fn create() -> TestNetns {
        Self::from(Netns::unique("felix-t-"))
    }

    /// [`TestNetns::create`] with a name `felix-t-<tag>-<pid>-<unique>`,
    /// so concurrent test runs of different branches can tell theirs apart.
    pub fn create_tagged(tag: &str) -> TestNetns {
        Self::from(Netns::unique(&format!("felix-t-{tag}-")))
    }

    fn from(ns: Result<Netns, felix_netns::Error>) -> TestNetns {
        let ns = ns.unwrap_or_else(|e| panic!("creating a test namespace: {e}"));
        TestNetns {
            name: ns.name().to_string(),
            ns,
        }
    }

    /// A command handle running inside this namespace.
    pub fn commands(&self, actor: &str) -> Commands {
        Commands::standalone(Arc::new(SystemCommands::in_netns(&self.name)), actor)
    }

    /// Runs a command inside the namespace, returning stdout; panics on failure.
    pub fn sh(&self, program: &str, args: &[&str]) -> String {
        self.ns
            .exec(program, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}
