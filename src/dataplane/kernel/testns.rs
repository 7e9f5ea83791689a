//! Throwaway network namespaces for kernel tests. The guard deletes the
//! namespace on drop; tests never touch the host's own namespace.

use std::process::Command;
use std::sync::Arc;

use super::{Commands, SystemCommands};

/// A network namespace `felix-t-<random>` that is deleted on drop.
pub(crate) struct TestNetns {
    pub name: String,
}

impl TestNetns {
    /// Creates the namespace, or returns `None` (with a printed reason) if
    /// `ip` or any of `tools` is missing.
    pub fn create(tools: &[&str]) -> Option<TestNetns> {
        Self::create_named(&format!("felix-t-{:016x}", rand_u64()), tools)
    }

    /// [`TestNetns::create`] with a name `felix-t-<tag>-<pid>-<random>`, so
    /// concurrent test runs of different branches can tell theirs apart.
    pub fn create_tagged(tag: &str, tools: &[&str]) -> Option<TestNetns> {
        let name = format!(
            "felix-t-{tag}-{}-{:08x}",
            std::process::id(),
            rand_u64() as u32
        );
        Self::create_named(&name, tools)
    }

    fn create_named(name: &str, tools: &[&str]) -> Option<TestNetns> {
        let sys = SystemCommands::new();
        use super::CommandSeam;
        for t in std::iter::once(&"ip").chain(tools.iter()) {
            if !sys.program_exists(t) {
                eprintln!("skipping: `{t}` is not installed");
                return None;
            }
        }
        let name = name.to_string();
        let st = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(
            matches!(st, Ok(s) if s.success()),
            "ip netns add {name} failed"
        );
        let _ = Command::new("ip")
            .args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"])
            .status();
        Some(TestNetns { name })
    }

    /// A command handle running inside this namespace.
    pub fn commands(&self, actor: &str) -> Commands {
        Commands::unhooked(Arc::new(SystemCommands::in_netns(&self.name)), actor)
    }

    /// Runs a command inside the namespace, returning stdout; panics on failure.
    pub fn sh(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
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
