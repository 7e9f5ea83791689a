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

    /// A command running inside this namespace (not started).
    pub fn command_in(&self, program: &str, args: &[&str]) -> std::process::Command {
        let mut c = self.ns.command(program);
        c.args(args);
        c
    }

    /// Runs a command inside the namespace, returning stdout; panics on failure.
    pub fn sh(&self, program: &str, args: &[&str]) -> String {
        self.ns
            .exec(program, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A small seeded random number generator (SplitMix64) for kernel tests
/// that generate random work: the seed comes from the environment
/// variable `var` if set (decimal), so a failure can be replayed.
pub(crate) struct SeededRng(u64);

impl SeededRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    /// Seeded from `var` if set, otherwise from `default`; prints the seed.
    pub fn from_env(var: &str, default: u64) -> Self {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(default);
        eprintln!("{var}={seed}");
        SeededRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A random element of `items` (non-empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A count from the environment variable `var` (decimal), or `default`.
pub(crate) fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}
