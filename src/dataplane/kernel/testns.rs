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
        use super::CommandRunner;
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
        Commands::standalone(Arc::new(SystemCommands::in_netns(&self.name)), actor)
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
