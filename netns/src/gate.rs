//! The one gate of tests that need the kernel (root, network namespaces) or
//! an external tool.
//!
//! Every such test starts with exactly one statement
//!
//! ```text
//! felix_netns::require!(netns ["nft", "ping"]); // root, `ip`, these tools
//! felix_netns::require!(tools ["etcd"]);        // these tools only
//! felix_netns::require!(netns ["nft"], ensure(lib_loads(), "libnftables"));
//! felix_netns::require!(cond ensure(bin.is_some(), "the felix binary"));
//! ```
//!
//! When something is missing, the test prints `skipping: <test>: needs
//! <what>` and returns, unless `CI` (any value but empty, `0` or `false`)
//! or `FELIX_REQUIRE_KERNEL_TESTS` is set: then it panics naming what is
//! missing, so a CI machine without a package is red, not green.
//!
//! A test that passes the gate appends its name to the file named by
//! `FELIX_KERNEL_TEST_LOG` (one `write(2)` with `O_APPEND` per line, so
//! tests of parallel threads and processes never interleave); `.ci/test`
//! compares the count with the gate's call sites (one per test, found by
//! `grep`), and the gate panics if one test passes it twice.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

/// The environment variable naming the file that records the tests that
/// passed the gate.
pub const LOG_VAR: &str = "FELIX_KERNEL_TEST_LOG";

/// A test was skipped locally; the reason was printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

/// The gate of one test. `$tools` is anything that borrows as `&[&str]`;
/// the optional trailing `Result<(), impl Into<String>>` is a further
/// requirement (`Err` names what is missing, see [`ensure`](crate::ensure)).
/// Returns from the enclosing function (which must return `()`) on a skip.
#[macro_export]
macro_rules! require {
    (netns $tools:expr $(, $extra:expr)? $(,)?) => {
        $crate::__require!($crate::missing_netns(&$tools) $(, $extra)?)
    };
    (tools $tools:expr $(, $extra:expr)? $(,)?) => {
        $crate::__require!($crate::missing_tools(&$tools) $(, $extra)?)
    };
    (cond $extra:expr $(,)?) => {
        $crate::__require!(::std::vec::Vec::new(), $extra)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __require {
    ($missing:expr $(, $extra:expr)?) => {{
        fn __felix_netns_here() {}
        #[allow(unused_mut, reason = "mutated only when the macro has an extra condition")]
        let mut missing: ::std::vec::Vec<::std::string::String> = $missing;
        $(
            if let ::std::result::Result::Err(e) = $extra {
                missing.push(::std::string::String::from(e));
            }
        )?
        let test = $crate::__test_name(::std::any::type_name_of_val(&__felix_netns_here));
        if $crate::gate(&test, missing).is_err() {
            return;
        }
    }};
}

/// `Ok` if `ok`, else `Err(what)`: a requirement for [`require!`](crate::require).
pub fn ensure(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what.to_string())
    }
}

/// What a namespace test lacks: root, `ip` and each of `tools`.
pub fn missing_netns(tools: &[&str]) -> Vec<String> {
    let mut missing = Vec::new();
    if !crate::is_root() {
        missing.push("root (network namespaces)".to_string());
    }
    missing.extend(missing_tools(&[&["ip"], tools].concat()));
    missing
}

/// Which of `tools` are not on `PATH`.
pub fn missing_tools(tools: &[&str]) -> Vec<String> {
    tools
        .iter()
        .filter(|t| !on_path(t))
        .map(|t| format!("`{t}` on PATH"))
        .collect()
}

fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// True when a missing requirement must fail the test: `CI` set (to
/// anything but empty, `0` or `false`) or `FELIX_REQUIRE_KERNEL_TESTS` set
/// (likewise).
pub fn enforced() -> bool {
    let on = |var: &str| {
        std::env::var(var).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
    };
    on("CI") || on("FELIX_REQUIRE_KERNEL_TESTS")
}

/// The gate itself (call it through [`require!`](crate::require), which
/// names the test): `Ok` and the test recorded when nothing is `missing`;
/// otherwise a printed skip, or a panic when [`enforced`].
pub fn gate(test: &str, missing: Vec<String>) -> Result<(), Skip> {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(test.to_string());
    assert!(
        first,
        "{test}: the kernel-test gate ran twice; call felix_netns::require! exactly once per test"
    );
    if missing.is_empty() {
        if let Some(path) = std::env::var_os(LOG_VAR).filter(|p| !p.is_empty()) {
            record(std::path::Path::new(&path), test)
                .unwrap_or_else(|e| panic!("{test}: recording to {LOG_VAR}: {e}"));
        }
        return Ok(());
    }
    let reason = missing.join(", ");
    if enforced() {
        panic!(
            "{test}: cannot run, needs {reason} (CI or FELIX_REQUIRE_KERNEL_TESTS is set: \
             a kernel test that cannot run fails)"
        );
    }
    eprintln!("skipping: {test}: needs {reason}");
    Err(Skip(reason))
}

/// Appends `test` and a newline to `path` in one `write(2)` on an
/// `O_APPEND` descriptor: atomic with respect to other appenders.
fn record(path: &std::path::Path, test: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let line = format!("{test}\n");
    let n = f.write(line.as_bytes())?;
    if n != line.len() {
        return Err(std::io::Error::other(format!(
            "short write ({n} of {})",
            line.len()
        )));
    }
    Ok(())
}

/// The test's path from the type name of a function item declared in its
/// body (`crate::mod::test::__felix_netns_here`, with `{{closure}}` parts
/// for async tests).
pub fn test_name(type_name: &str) -> String {
    let name = type_name
        .strip_suffix("::__felix_netns_here")
        .unwrap_or(type_name);
    name.split("::")
        .filter(|p| *p != "{{closure}}")
        .collect::<Vec<_>>()
        .join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_drop_the_marker_and_closures() {
        assert_eq!(
            test_name("felix::a::tests::kernel_x::__felix_netns_here"),
            "felix::a::tests::kernel_x"
        );
        assert_eq!(
            test_name("daemon_etcd::t::{{closure}}::__felix_netns_here"),
            "daemon_etcd::t"
        );
        fn __felix_netns_here() {}
        assert_eq!(
            test_name(std::any::type_name_of_val(&__felix_netns_here)),
            "felix_netns::gate::tests::test_names_drop_the_marker_and_closures"
        );
    }

    #[test]
    fn ensure_names_what_is_missing() {
        assert_eq!(ensure(true, "x"), Ok(()));
        assert_eq!(ensure(false, "x"), Err("x".to_string()));
        assert_eq!(missing_tools(&["sh"]), Vec::<String>::new());
        assert_eq!(
            missing_tools(&["felix-netns-no-such-tool"]),
            vec!["`felix-netns-no-such-tool` on PATH".to_string()]
        );
    }

    #[test]
    fn parallel_records_are_whole_lines() {
        let dir = std::env::temp_dir().join(format!("felix-netns-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = dir.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        record(
                            &path,
                            &format!("crate::mod::test_{t}_{i}_{}", "x".repeat(i)),
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        let lines: BTreeSet<&str> = text.lines().collect();
        assert_eq!(text.lines().count(), 1600);
        assert_eq!(lines.len(), 1600);
        assert!(lines.iter().all(|l| l.starts_with("crate::mod::test_")));
    }
}
