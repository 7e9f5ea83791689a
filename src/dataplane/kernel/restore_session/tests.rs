use super::*;
use crate::dataplane::kernel::testns::TestNetns;
use crate::dataplane::kernel::{CommandRunner, SystemCommands};

fn req(program: &str, args: &[&str], script: &str) -> CommandRequest {
    CommandRequest {
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        stdin: Some(script.as_bytes().to_vec()),
    }
}

const DELTA: &str = "*filter\n-A cali-x -j ACCEPT\nCOMMIT\n";

#[test]
fn only_nft_backend_noflush_deltas_are_passable() {
    let ok = |p: &str, a: &[&str], s: &str| passable(&req(p, a, s)).map(|(_, t)| t.to_string());
    assert_eq!(
        ok("iptables-nft-restore", &["--noflush"], DELTA).as_deref(),
        Some("filter")
    );
    assert_eq!(
        ok(
            "/usr/sbin/ip6tables-nft-restore",
            &["--noflush", "-w", "5"],
            DELTA
        )
        .as_deref(),
        Some("filter")
    );
    // The last block's table is the one acknowledged.
    let two = "*raw\n-A cali-r -j ACCEPT\nCOMMIT\n*mangle\n-A cali-m -j ACCEPT\nCOMMIT\n";
    assert_eq!(
        ok("iptables-nft-restore", &["--noflush"], two).as_deref(),
        Some("mangle")
    );
    // Legacy holds the xtables lock while it runs; never kept alive.
    assert_eq!(ok("iptables-legacy-restore", &["--noflush"], DELTA), None);
    assert_eq!(ok("iptables-restore", &["--noflush"], DELTA), None);
    // Without --noflush every block would flush its table.
    assert_eq!(ok("iptables-nft-restore", &[], DELTA), None);
    // Any listing (its output would pass for the acknowledgement), and
    // unbalanced blocks.
    for listing in ["-S", "-S OUTPUT", "-L INPUT", "--list-rules cali-x"] {
        let script = format!("*filter\n{listing}\n-A cali-x -j ACCEPT\nCOMMIT\n");
        assert_eq!(
            ok("iptables-nft-restore", &["--noflush"], &script),
            None,
            "{listing}"
        );
    }
    for bad in [
        "*filter\n-A c -j ACCEPT\n",
        "-A c -j ACCEPT\nCOMMIT\n",
        "*filter\n*nat\nCOMMIT\n",
        "*filter\nCOMMIT",
        "*security\n-A c -j ACCEPT\nCOMMIT\n",
    ] {
        assert_eq!(
            ok("iptables-nft-restore", &["--noflush"], bad),
            None,
            "{bad:?}"
        );
    }
    let big = format!("*filter\n{}COMMIT\n", "#\n".repeat(MAX_SESSION_SCRIPT));
    assert_eq!(ok("iptables-nft-restore", &["--noflush"], &big), None);
    let mut none = req("iptables-nft-restore", &["--noflush"], "");
    none.stdin = None;
    assert!(passable(&none).is_none());
}

#[test]
fn error_lines_are_renumbered_into_the_script() {
    let msg = "iptables-nft-restore: line 15 failed: Index of replacement too big.\n";
    assert_eq!(failed_line(msg), Some(15));
    assert_eq!(
        renumber(msg, 15, 2),
        "iptables-nft-restore: line 2 failed: Index of replacement too big.\n"
    );
    assert_eq!(failed_line("iptables-nft-restore: line x failed"), None);
    assert_eq!(failed_line("a line 3 was fine"), None);
    assert_eq!(failed_line(""), None);
}

fn restore(sys: &SystemCommands, script: &str) -> CommandOutput {
    sys.exec(&req("iptables-nft-restore", &["--noflush"], script))
        .unwrap()
}

/// What the session tests need besides root and `ip`.
const TOOLS: [&str; 3] = ["iptables-nft-restore", "iptables-nft-save", "stdbuf"];

/// A throwaway namespace and a seam running commands in it.  Bind as
/// `(ns, sys)`: the seam (and its sessions) is dropped before the
/// namespace.
fn session_netns(tag: &str) -> (TestNetns, SystemCommands) {
    let ns = TestNetns::create_tagged(tag);
    let sys = SystemCommands::in_netns(&ns.name);
    (ns, sys)
}

fn rules(ns: &TestNetns, chain: &str) -> Vec<String> {
    ns.sh("iptables-nft-save", &["-t", "filter"])
        .lines()
        .filter(|l| l.starts_with(&format!("-A {chain} ")))
        .map(str::to_string)
        .collect()
}

/// Scripts land in the seam's namespace through one process that stays
/// up, and each script sees the table as it is now, including changes made
/// by other processes since the last one.
#[test]
fn kernel_restore_session_sees_changes_made_by_others() {
    felix_netns::require!(netns TOOLS);
    let (ns, sys) = session_netns("rsess");
    let out = restore(
        &sys,
        "*filter\n:cali-x - -\n-A cali-x -s 10.0.0.1 -j ACCEPT\n-A cali-x -s 10.0.0.2 -j ACCEPT\nCOMMIT\n",
    );
    assert!(out.success(), "{out:?}");
    let pids = sys.restore_sessions().pids();
    assert_eq!(pids.len(), 1, "the script ran in a session");
    assert_eq!(rules(&ns, "cali-x").len(), 2);

    // Another process inserts at the top; replacing rule 1 must hit that
    // rule, not the one that was first when the session last looked.
    let other = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "iptables-nft",
            "-I",
            "cali-x",
            "1",
            "-s",
            "10.9.9.9",
            "-j",
            "DROP",
        ])
        .status()
        .unwrap();
    assert!(other.success());
    let out = restore(&sys, "*filter\n-R cali-x 1 -s 10.0.0.4 -j ACCEPT\nCOMMIT\n");
    assert!(out.success(), "{out:?}");
    assert_eq!(
        rules(&ns, "cali-x"),
        [
            "-A cali-x -s 10.0.0.4/32 -j ACCEPT",
            "-A cali-x -s 10.0.0.1/32 -j ACCEPT",
            "-A cali-x -s 10.0.0.2/32 -j ACCEPT",
        ]
    );
    // Two tables in one script, then a deletion: same process throughout.
    let out = restore(
        &sys,
        "*raw\n:cali-r - -\n-A cali-r -j ACCEPT\nCOMMIT\n*filter\n-D cali-x 3\nCOMMIT\n",
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(rules(&ns, "cali-x").len(), 2);
    assert!(ns
        .sh("iptables-nft-save", &["-t", "raw"])
        .contains("-A cali-r -j ACCEPT"));
    assert_eq!(sys.restore_sessions().pids(), pids);
    let host = std::process::Command::new("iptables-nft-save")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&host.stdout).contains("10.0.0.4"));
}

/// A failing script reports the failing line of its own, applies nothing
/// (the block is one transaction), and the next script runs in a new
/// process.
#[test]
fn kernel_restore_session_failure_is_reported_and_recovered() {
    felix_netns::require!(netns TOOLS);
    let (ns, sys) = session_netns("rsessf");
    assert!(restore(&sys, "*filter\n:cali-y - -\nCOMMIT\n").success());
    let first = sys.restore_sessions().pids();
    let bad = restore(
        &sys,
        "*filter\n-A cali-y -s 10.1.0.1 -j ACCEPT\n-R cali-y 7 -s 10.1.0.2 -j ACCEPT\nCOMMIT\n",
    );
    assert_eq!(bad.status, Some(1), "{bad:?}");
    assert!(bad.stderr.contains("line 3 failed"), "{bad:?}");
    assert!(
        rules(&ns, "cali-y").is_empty(),
        "nothing of the block applied"
    );
    assert!(
        sys.restore_sessions().pids().is_empty(),
        "the failed process is gone"
    );

    let out = restore(&sys, "*filter\n-A cali-y -s 10.1.0.3 -j ACCEPT\nCOMMIT\n");
    assert!(out.success(), "{out:?}");
    assert_eq!(rules(&ns, "cali-y"), ["-A cali-y -s 10.1.0.3/32 -j ACCEPT"]);
    let second = sys.restore_sessions().pids();
    assert_eq!(second.len(), 1);
    assert_ne!(second, first);
    assert!(sys.restore_sessions_on());

    // Switched off: the same request runs a fresh process.
    let off = SystemCommands::in_netns(&ns.name).without_restore_sessions();
    assert!(restore(&off, "*filter\n-A cali-y -s 10.1.0.4 -j ACCEPT\nCOMMIT\n").success());
    assert!(off.restore_sessions().pids().is_empty());
    assert_eq!(rules(&ns, "cali-y").len(), 2);
}

/// A session process that dies between scripts fails the next request
/// (without applying it) and switches sessions off: later scripts run a
/// process each and succeed.
#[test]
fn kernel_restore_session_killed_falls_back_to_processes() {
    felix_netns::require!(netns TOOLS);
    let (ns, sys) = session_netns("rsessk");
    assert!(restore(&sys, "*filter\n:cali-z - -\nCOMMIT\n").success());
    let pids = sys.restore_sessions().pids();
    assert_eq!(pids.len(), 1);
    let killed = std::process::Command::new("kill")
        .args(["-9", &pids[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let lost = restore(&sys, "*filter\n-A cali-z -s 10.2.0.1 -j ACCEPT\nCOMMIT\n");
    assert!(!lost.success(), "{lost:?}");
    assert!(!sys.restore_sessions_on());
    assert!(rules(&ns, "cali-z").is_empty());
    let out = restore(&sys, "*filter\n-A cali-z -s 10.2.0.2 -j ACCEPT\nCOMMIT\n");
    assert!(out.success(), "{out:?}");
    assert_eq!(rules(&ns, "cali-z"), ["-A cali-z -s 10.2.0.2/32 -j ACCEPT"]);
    assert!(sys.restore_sessions().pids().is_empty());
}
