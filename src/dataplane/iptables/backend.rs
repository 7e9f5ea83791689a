//! iptables backend selection (nft vs legacy), following upstream's
//! detection: kube-proxy's marker chains in the mangle table win; otherwise
//! whichever backend holds more rules, ties going to legacy. The legacy
//! backend is never probed unless its kernel modules are already loaded,
//! since `iptables-legacy-save` would load them.

use crate::dataplane::kernel::Commands;
use crate::dataplane::IpVersion;

/// Configured backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IptablesBackend {
    /// Detect from the kernel state.
    #[default]
    Auto,
    /// iptables-nft.
    Nft,
    /// iptables-legacy.
    Legacy,
}

/// A concrete backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedBackend {
    /// iptables-nft.
    Nft,
    /// iptables-legacy.
    Legacy,
}

impl ResolvedBackend {
    /// `nft` or `legacy`, as in the binary names.
    pub fn mode(self) -> &'static str {
        match self {
            ResolvedBackend::Nft => "nft",
            ResolvedBackend::Legacy => "legacy",
        }
    }
}

fn infix(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "",
        IpVersion::V6 => "6",
    }
}

/// The best binary for the backend: `ip[6]tables-<mode>-<save|restore>`,
/// falling back to `ip[6]tables-<save|restore>`. `None` if neither exists.
pub fn find_best_binary(
    cmds: &Commands,
    ipv: IpVersion,
    backend: ResolvedBackend,
    save_or_restore: &str,
) -> Option<String> {
    let v = infix(ipv);
    [
        format!("ip{v}tables-{}-{save_or_restore}", backend.mode()),
        format!("ip{v}tables-{save_or_restore}"),
    ]
    .into_iter()
    .find(|c| cmds.program_exists(c))
}

/// True if the backend-specific save and restore binaries both exist.
pub fn backend_binaries_present(cmds: &Commands, ipv: IpVersion, backend: ResolvedBackend) -> bool {
    let v = infix(ipv);
    ["save", "restore"]
        .iter()
        .all(|s| cmds.program_exists(&format!("ip{v}tables-{}-{s}", backend.mode())))
}

/// True if the legacy xtables modules are loaded (checked by a file the
/// kernel creates, which loads nothing).
pub fn legacy_modules_loaded(cmds: &Commands, ipv: IpVersion) -> bool {
    cmds.path_exists(match ipv {
        IpVersion::V4 => "/proc/net/ip_tables_names",
        IpVersion::V6 => "/proc/net/ip6_tables_names",
    })
}

fn save(cmds: &Commands, backend: ResolvedBackend, ipv: IpVersion, args: &[&str]) -> String {
    if backend == ResolvedBackend::Legacy && !legacy_modules_loaded(cmds, ipv) {
        return String::new();
    }
    let Some(bin) = find_best_binary(cmds, ipv, backend, "save") else {
        return String::new();
    };
    // A failing probe just means "nothing there".
    cmds.run("iptables-save", &bin, args, None)
        .map(|o| o.stdout)
        .unwrap_or_default()
}

fn has_kube_chains(out: &str) -> bool {
    out.contains("KUBE-IPTABLES-HINT") || out.contains("KUBE-KUBELET-CANARY")
}

fn count_rules(out: &str) -> usize {
    out.lines().filter(|l| l.starts_with('-')).count()
}

/// Resolves the backend. A specified backend wins over detection (a
/// mismatch is logged).
pub fn detect_backend(cmds: &Commands, specified: IptablesBackend) -> ResolvedBackend {
    use IpVersion::*;
    use ResolvedBackend::*;
    let detected = if has_kube_chains(&save(cmds, Nft, V6, &["-t", "mangle"]))
        || has_kube_chains(&save(cmds, Nft, V4, &["-t", "mangle"]))
    {
        Nft
    } else if has_kube_chains(&save(cmds, Legacy, V6, &["-t", "mangle"]))
        || has_kube_chains(&save(cmds, Legacy, V4, &["-t", "mangle"]))
    {
        Legacy
    } else {
        let legacy =
            count_rules(&save(cmds, Legacy, V6, &[])) + count_rules(&save(cmds, Legacy, V4, &[]));
        let nft = count_rules(&save(cmds, Nft, V6, &[])) + count_rules(&save(cmds, Nft, V4, &[]));
        if legacy >= nft {
            Legacy
        } else {
            Nft
        }
    };
    match specified {
        IptablesBackend::Auto => detected,
        IptablesBackend::Nft | IptablesBackend::Legacy => {
            let chosen = if specified == IptablesBackend::Nft {
                Nft
            } else {
                Legacy
            };
            if chosen != detected {
                tracing::warn!(
                    ?detected,
                    ?chosen,
                    "configured iptables backend differs from the detected one"
                );
            }
            chosen
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::{FakeResponse, ScriptedCommands};
    use std::sync::Arc;

    fn cmds_with(
        nft: &'static str,
        legacy: &'static str,
        legacy_loaded: bool,
    ) -> (Commands, Arc<ScriptedCommands>) {
        let fake = ScriptedCommands::new(move |req| {
            if req.program.contains("legacy") {
                FakeResponse::Ok(legacy.into())
            } else {
                FakeResponse::Ok(nft.into())
            }
        });
        if legacy_loaded {
            fake.set_paths(&["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"]);
        }
        (Commands::standalone(fake.clone(), "test"), fake)
    }

    #[test]
    fn kube_chains_in_nft_win() {
        let (c, _) = cmds_with(":KUBE-IPTABLES-HINT - [0:0]\n", "-A X\n-A Y\n", true);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Auto),
            ResolvedBackend::Nft
        );
    }

    #[test]
    fn more_rules_wins_and_ties_go_to_legacy() {
        let (c, _) = cmds_with("-A X\n", "-A X\n-A Y\n", true);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Auto),
            ResolvedBackend::Legacy
        );
        let (c, _) = cmds_with("-A X\n-A Y\n", "-A X\n", true);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Auto),
            ResolvedBackend::Nft
        );
        let (c, _) = cmds_with("", "", true);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Auto),
            ResolvedBackend::Legacy
        );
    }

    #[test]
    fn legacy_is_not_probed_when_modules_not_loaded() {
        let (c, fake) = cmds_with("-A X\n", "-A X\n-A Y\n-A Z\n", false);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Auto),
            ResolvedBackend::Nft
        );
        assert!(fake.calls().iter().all(|r| !r.program.contains("legacy")));
    }

    #[test]
    fn specified_backend_wins() {
        let (c, _) = cmds_with(":KUBE-IPTABLES-HINT\n", "", true);
        assert_eq!(
            detect_backend(&c, IptablesBackend::Legacy),
            ResolvedBackend::Legacy
        );
    }

    #[test]
    fn binary_fallback() {
        let (c, fake) = cmds_with("", "", true);
        fake.set_programs(&["iptables-save"]);
        assert_eq!(
            find_best_binary(&c, IpVersion::V4, ResolvedBackend::Nft, "save").as_deref(),
            Some("iptables-save")
        );
        assert!(!backend_binaries_present(
            &c,
            IpVersion::V4,
            ResolvedBackend::Nft
        ));
        fake.set_programs(&[]);
        assert_eq!(
            find_best_binary(&c, IpVersion::V6, ResolvedBackend::Nft, "save"),
            None
        );
    }
}
