//! Tests of the nftables table and the iptables-nft cleanup: scripted-seam
//! unit tests and kernel tests in throwaway namespaces.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::dataplane::generictables::{
    Action, Chain, MatchCriteria, PortRange, Rule, Table, TableError,
};
use crate::dataplane::kernel::RetryPolicy;
use crate::dataplane::kernel::{
    CommandOutput, CommandRequest, CommandRunner, Commands, FakeResponse, KernelError,
    ScriptedCommands, SystemCommands,
};
use crate::dataplane::IpVersion;

fn rule(proto: &str, a: Action) -> Rule {
    Rule::new(MatchCriteria::new().protocol(proto), a)
}

fn quiet_opts() -> NftablesOptions {
    NftablesOptions {
        retry: RetryPolicy::without_sleeping(),
        ..NftablesOptions::default()
    }
}

fn no_table_fake() -> Arc<ScriptedCommands> {
    ScriptedCommands::new(|req: &CommandRequest| {
        if req.args.iter().any(|a| a == "list") {
            FakeResponse::Fail(
                1,
                "Error: No such file or directory\nlist table ip calico".into(),
            )
        } else {
            FakeResponse::Ok(String::new())
        }
    })
}

fn scripts(fake: &ScriptedCommands) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| c.args.first().map(String::as_str) == Some("-f"))
        .map(|c| String::from_utf8(c.stdin.unwrap_or_default()).unwrap())
        .collect()
}

fn desired(t: &mut NftablesTable, last: Action) {
    t.set_ip_set(
        "cali40s:web",
        NftSetKind::Ip,
        vec!["10.0.0.1".to_string(), "10.0.0.2".into()],
    );
    t.set_chain(Chain::new(
        "cali-a",
        vec![
            Rule::new(
                MatchCriteria::new().source_ip_set("cali40s:web"),
                Action::Accept,
            ),
            rule("udp", last),
        ],
    ));
    t.set_chain(Chain::new("cali-b", vec![rule("tcp", Action::Accept)]));
    t.set_insert_rules(
        "filter-INPUT",
        vec![Rule::new(
            MatchCriteria::new(),
            Action::Jump("cali-a".into()),
        )],
    );
}

#[test]
fn first_apply_is_one_ordered_transaction_and_second_is_empty() {
    let fake = no_table_fake();
    let mut t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::Program,
        Commands::standalone(fake.clone(), "nft"),
        quiet_opts(),
    );
    desired(&mut t, Action::Drop);
    let s = t.apply().unwrap();
    assert_eq!((s.transactions, s.read_backs, s.chains_created), (1, 1, 3));
    let sc = scripts(&fake);
    assert_eq!(sc.len(), 1);
    let lines: Vec<&str> = sc[0].lines().collect();
    assert_eq!(lines[0], "add table ip calico");
    let pos = |p: &str| lines.iter().position(|l| l.starts_with(p)).unwrap();
    assert!(lines
        .iter()
        .any(|l| l.contains("filter-INPUT { type filter hook input priority 0; policy accept; }")));
    assert!(pos("add set ip calico cali40s-web") < pos("add rule ip calico cali-a"));
    assert!(pos("add chain ip calico cali-a") < pos("add rule ip calico filter-INPUT"));
    assert!(sc[0].contains(
        "add set ip calico cali40s-web { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.2 }; }"
    ));
    assert!(!sc[0].contains("add element"));
    assert!(sc[0].contains("comment \"cali:"));

    fake.clear_calls();
    desired(&mut t, Action::Drop);
    assert!(!t.is_dirty());
    assert!(t.apply().unwrap().no_writes());
    assert!(fake.calls().is_empty());

    // One chain changes: only it is flushed and re-added; a set delta is
    // an element delta.
    desired(&mut t, Action::Return);
    t.set_ip_set(
        "cali40s:web",
        NftSetKind::Ip,
        vec!["10.0.0.2".to_string(), "10.0.0.3".into()],
    );
    t.apply().unwrap();
    let sc = scripts(&fake);
    assert!(sc[0].contains("flush chain ip calico cali-a\n"));
    assert!(!sc[0].contains("cali-b"));
    assert!(!sc[0].contains("filter-INPUT"));
    assert!(sc[0].contains("delete element ip calico cali40s-web { 10.0.0.1 }"));
    assert!(sc[0].contains("add element ip calico cali40s-web { 10.0.0.3 }"));
    assert!(!sc[0].contains("delete table"));

    // The element delta updated our picture of the set in place: nothing
    // more to write, and the next delta is computed against {2, 3}.
    fake.clear_calls();
    assert!(t.apply().unwrap().no_writes());
    t.set_ip_set("cali40s:web", NftSetKind::Ip, vec!["10.0.0.3".to_string()]);
    t.apply().unwrap();
    let sc = scripts(&fake);
    assert_eq!(
        sc[0], "add table ip calico\ndelete element ip calico cali40s-web { 10.0.0.2 }\n",
        "only the removed member"
    );
}

/// nft 1.0.x fetches the kernel's rules (for a 36,000-rule table the
/// slowest part of a small transaction) only for commands that address a
/// rule by handle, index or position, or list/reset rules; plain
/// `add rule`, `flush chain`, chain and set commands need just the table,
/// chain and set cache. Every delta script must stay within those.
fn assert_no_rule_cache_commands(script: &str) {
    const ALLOWED: &[&str] = &[
        "add table ",
        "delete table ",
        "add chain ",
        "flush chain ",
        "delete chain ",
        "add rule ",
        "add set ",
        "delete set ",
        "flush set ",
        "add element ",
        "delete element ",
    ];
    for line in script.lines() {
        assert!(
            ALLOWED.iter().any(|p| line.starts_with(p)),
            "unexpected command: {line}"
        );
        // Rule bodies never use these keywords outside a quoted comment.
        let before_comment = line.split(" comment \"").next().unwrap_or(line);
        for w in [
            "handle", "position", "index", "insert", "replace", "reset", "list",
        ] {
            assert!(
                !before_comment.split_whitespace().any(|x| x == w),
                "rule-cache keyword `{w}` in: {line}"
            );
        }
    }
}

#[test]
fn delta_transactions_need_no_rule_cache() {
    let fake = no_table_fake();
    let mut t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::Program,
        Commands::standalone(fake.clone(), "nft"),
        quiet_opts(),
    );
    desired(&mut t, Action::Drop);
    t.apply().unwrap();
    assert_no_rule_cache_commands(&scripts(&fake)[0]);
    // A changed chain, a new chain, a removed chain, a changed insert and
    // a set delta, all in one transaction.
    fake.clear_calls();
    desired(&mut t, Action::Return);
    t.set_chain(Chain::new("cali-c", vec![rule("udp", Action::Drop)]));
    t.remove_chain("cali-b");
    t.set_insert_rules(
        "filter-INPUT",
        vec![
            Rule::new(MatchCriteria::new(), Action::Jump("cali-c".into())),
            Rule::new(MatchCriteria::new(), Action::Jump("cali-a".into())),
        ],
    );
    t.set_ip_set("cali40s:web", NftSetKind::Ip, vec!["10.0.0.9".to_string()]);
    t.apply().unwrap();
    let sc = scripts(&fake);
    assert_eq!(sc.len(), 1);
    assert!(
        sc[0].contains("flush chain ip calico cali-a\n"),
        "{}",
        sc[0]
    );
    assert!(
        sc[0].contains("delete chain ip calico cali-b\n"),
        "{}",
        sc[0]
    );
    assert!(sc[0].contains("add chain ip calico cali-c\n"), "{}", sc[0]);
    assert_no_rule_cache_commands(&sc[0]);
}

#[test]
fn rebuilds_in_one_transaction_after_repeated_failures() {
    let fake = no_table_fake();
    let mut t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::Program,
        Commands::standalone(fake.clone(), "nft"),
        quiet_opts(),
    );
    desired(&mut t, Action::Drop);
    // Every `nft` call fails 5 times (list and -f alike).
    fake.fail_next(5, Some("nft"));
    let s = t.apply().unwrap();
    assert_eq!(s.retries, 5);
    let sc = scripts(&fake);
    let last = sc.last().unwrap();
    let lines: Vec<&str> = last.lines().collect();
    assert_eq!(
        &lines[..3],
        &[
            "add table ip calico",
            "delete table ip calico",
            "add table ip calico"
        ]
    );
    assert!(last.contains("add set ip calico cali40s-web"));
    assert!(last.contains("add rule ip calico filter-INPUT"));
    assert_eq!(t.consecutive_failures(), 0);
    // Earlier attempts never deleted the table.
    assert!(sc[..sc.len() - 1]
        .iter()
        .all(|s| !s.contains("delete table")));
}

#[test]
fn gives_up_with_typed_error_naming_the_command() {
    let fake = no_table_fake();
    let opts = NftablesOptions {
        retry: RetryPolicy {
            max_retries: 2,
            ..RetryPolicy::without_sleeping()
        },
        ..quiet_opts()
    };
    let mut t = NftablesTable::new(
        IpVersion::V6,
        NftablesMode::Program,
        Commands::standalone(fake.clone(), "nft"),
        opts,
    );
    t.set_chain(Chain::new("cali-a", vec![rule("tcp", Action::Accept)]));
    fake.fail_next(100, Some("nft"));
    match t.apply() {
        Err(TableError::ReadBack {
            source: KernelError::Failed { command, .. },
            ..
        }) => {
            assert!(
                command.starts_with("nft -j list table ip6 calico"),
                "{command}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(t.is_dirty());
}

/// Item 3 (nftables): one refused policy chain is programmed as a drop of
/// everything, the rest of the transaction is programmed, the refusal is
/// reported, and the chain is retried only when its content changes.
#[test]
fn refused_policy_chain_fails_closed_alone_and_everything_else_is_programmed() {
    let fake = ScriptedCommands::new(|req: &CommandRequest| {
        if req.args.iter().any(|a| a == "list") {
            return FakeResponse::Fail(1, "Error: No such file or directory".into());
        }
        let script = String::from_utf8(req.stdin.clone().unwrap_or_default()).unwrap();
        if script.contains("sctp") {
            FakeResponse::Fail(
                1,
                "Error: Could not process rule: Operation not supported".into(),
            )
        } else {
            FakeResponse::Ok(String::new())
        }
    });
    let mut t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::Program,
        Commands::standalone(fake.clone(), "nftables-v4"),
        quiet_opts(),
    );
    t.set_chain(Chain::new(
        "filter-cali-pi-bad",
        vec![rule("sctp", Action::Accept)],
    ));
    t.set_chain(Chain::new(
        "filter-cali-pi-good",
        vec![rule("tcp", Action::Accept)],
    ));
    t.set_chain(Chain::new(
        "filter-cali-tw-cali1",
        vec![
            Rule::new(
                MatchCriteria::new(),
                Action::Jump("filter-cali-pi-bad".into()),
            ),
            Rule::new(
                MatchCriteria::new(),
                Action::Jump("filter-cali-pi-good".into()),
            ),
        ],
    ));
    t.apply().expect("the rest is programmed");
    let rejected = t.rejected_chains();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].chain, "filter-cali-pi-bad");
    assert!(rejected[0].message.contains("Operation not supported"));
    let written = scripts(&fake).pop().unwrap();
    assert!(written.contains("filter-cali-pi-good"), "{written}");
    assert!(written.contains("filter-cali-tw-cali1"), "{written}");
    let bad: Vec<&str> = written
        .lines()
        .filter(|l| l.starts_with("add rule ip calico filter-cali-pi-bad"))
        .collect();
    assert_eq!(bad.len(), 1, "{written}");
    assert!(bad[0].contains("drop"), "{written}");
    assert!(fake
        .calls()
        .iter()
        .any(|c| c.args.first().map(String::as_str) == Some("-c")));

    fake.clear_calls();
    t.set_chain(Chain::new(
        "filter-cali-pi-bad",
        vec![rule("sctp", Action::Accept)],
    ));
    assert!(!t.is_dirty(), "unchanged content is not retried");
    t.set_chain(Chain::new(
        "filter-cali-pi-bad",
        vec![rule("udp", Action::Accept)],
    ));
    t.apply().unwrap();
    assert!(t.rejected_chains().is_empty());
    assert!(scripts(&fake).pop().unwrap().contains("udp"));
}

#[test]
fn cleanup_mode_deletes_our_table_only_when_present() {
    let present = Arc::new(AtomicBool::new(true));
    let p = present.clone();
    let fake = ScriptedCommands::new(move |req: &CommandRequest| {
        if req.args.iter().any(|a| a == "list") {
            if p.load(Ordering::SeqCst) {
                FakeResponse::Ok("table ip calico {\n}\n".into())
            } else {
                FakeResponse::Fail(1, "Error: No such file or directory\n".into())
            }
        } else {
            FakeResponse::Ok(String::new())
        }
    });
    let opts = NftablesOptions {
        refresh_interval: Duration::ZERO,
        ..quiet_opts()
    };
    let mut t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::CleanupOnly,
        Commands::standalone(fake.clone(), "nft"),
        opts,
    );
    let s = t.apply().unwrap();
    assert_eq!(s.chains_deleted, 1);
    let calls = fake.calls();
    // Only our table is listed: `list tables` makes nft 1.0.6 fetch every rule.
    assert_eq!(calls[0].args, vec!["-j", "list", "table", "ip", "calico"]);
    let deletes: Vec<_> = calls
        .iter()
        .filter(|c| c.args.first().map(String::as_str) == Some("delete"))
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].args, vec!["delete", "table", "ip", "calico"]);
    // Gone: the next sweep lists it, finds nothing and deletes nothing.
    present.store(false, Ordering::SeqCst);
    fake.clear_calls();
    let s = t.apply().unwrap();
    assert_eq!((s.read_backs, s.chains_deleted), (1, 0));
    assert_eq!(fake.calls().len(), 1);
}

/// A cleanup-only table whose every `nft` call fails with `stderr`.
fn cleanup_failing_with(stderr: &'static str) -> (NftablesTable, Arc<ScriptedCommands>) {
    let fake =
        ScriptedCommands::new(move |_: &CommandRequest| FakeResponse::Fail(1, stderr.into()));
    let t = NftablesTable::new(
        IpVersion::V4,
        NftablesMode::CleanupOnly,
        Commands::standalone(fake.clone(), "nft"),
        quiet_opts(),
    );
    (t, fake)
}

#[test]
fn cleanup_sweeps_are_paced_by_the_refresh_interval() {
    let (mut t, fake) = cleanup_failing_with("Error: No such file or directory\n");
    t.apply().unwrap();
    assert_eq!(fake.calls().len(), 1);
    // Paced: an immediate second apply does nothing.
    fake.clear_calls();
    t.apply().unwrap();
    assert!(fake.calls().is_empty());
}

#[test]
fn cleanup_reports_a_listing_that_fails_for_another_reason() {
    let (mut t, _) = cleanup_failing_with("Error: Operation not permitted\n");
    let e = t.apply().unwrap_err();
    assert!(e.to_string().contains("Operation not permitted"), "{e}");
}

// ---- kernel tests -------------------------------------------------------

/// Delegates to the real system but fails the first N `nft -f` calls.
struct FailFirstApplies {
    inner: SystemCommands,
    remaining: Mutex<usize>,
    scripts: Mutex<Vec<String>>,
}

impl CommandRunner for FailFirstApplies {
    fn exec(&self, req: &CommandRequest) -> std::io::Result<CommandOutput> {
        if req.args.first().map(String::as_str) == Some("-f") {
            self.scripts.lock().push(
                String::from_utf8_lossy(req.stdin.as_deref().unwrap_or_default()).into_owned(),
            );
            let mut r = self.remaining.lock();
            if *r > 0 {
                *r -= 1;
                return Ok(CommandOutput {
                    status: Some(1),
                    stdout: String::new(),
                    stderr: "injected".into(),
                });
            }
        }
        self.inner.exec(req)
    }
    fn program_exists(&self, p: &str) -> bool {
        self.inner.program_exists(p)
    }
}

mod kernel {
    use super::*;
    use crate::dataplane::iptables::{
        IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
    };
    use crate::dataplane::kernel::testns::TestNetns;

    fn table(ns: &TestNetns) -> NftablesTable {
        NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            ns.commands("nft"),
            NftablesOptions::default(),
        )
    }

    fn add_foreign(ns: &TestNetns) {
        ns.sh(
            "nft",
            &["add table ip other; add chain ip other keep; add rule ip other keep counter accept comment \"cali:notours\""],
        );
    }

    fn foreign_intact(ns: &TestNetns) {
        let o = ns.sh("nft", &["list", "table", "ip", "other"]);
        assert!(o.contains("chain keep") && o.contains("accept"), "{o}");
    }

    /// Packet counter of the first rule of `chain` in our table.
    fn first_counter(ns: &TestNetns, chain: &str) -> u64 {
        let o = ns.sh("nft", &["list", "chain", "ip", "calico", chain]);
        o.split("counter packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter in {o}"))
    }

    fn program(t: &mut NftablesTable, last_proto: &str) {
        t.set_ip_set(
            "cali40s:lo",
            NftSetKind::Net,
            vec!["127.0.0.0/8".to_string()],
        );
        t.set_ip_set(
            "cali40s:svc",
            NftSetKind::IpPort,
            vec!["127.0.0.1,tcp:80".to_string()],
        );
        t.set_chain(Chain::new(
            "cali-count",
            vec![Rule::new(
                MatchCriteria::new()
                    .protocol("icmp")
                    .source_ip_set("cali40s:lo"),
                Action::Return,
            )],
        ));
        t.set_chain(Chain::new(
            "cali-in",
            vec![
                Rule::new(
                    MatchCriteria::new().with(
                        crate::dataplane::generictables::Match::DestIpPortSet {
                            set: "cali40s:svc".into(),
                            negate: false,
                        },
                    ),
                    Action::Accept,
                ),
                Rule::new(
                    MatchCriteria::new()
                        .protocol(last_proto)
                        .dest_ports(vec![PortRange::range(9000, 9100)]),
                    Action::Drop,
                ),
            ],
        ));
        t.set_insert_rules(
            "filter-INPUT",
            vec![
                Rule::new(MatchCriteria::new(), Action::Jump("cali-count".into())),
                Rule::new(MatchCriteria::new(), Action::Jump("cali-in".into())),
            ],
        );
    }

    #[test]
    fn kernel_nftables_program_counters_and_sweep() {
        felix_netns::require!(netns ["nft", "ping"]);
        let ns = TestNetns::create();
        add_foreign(&ns);
        let mut t = table(&ns);
        program(&mut t, "udp");
        let s = t.apply().unwrap();
        assert_eq!(s.transactions, 1);
        let listed = ns.sh("nft", &["list", "table", "ip", "calico"]);
        assert!(
            listed.contains("chain filter-INPUT") && listed.contains("hook input"),
            "{listed}"
        );
        assert!(
            listed.contains("set cali40s-svc") && listed.contains("127.0.0.1 . tcp . 80"),
            "{listed}"
        );
        assert!(t.apply().unwrap().no_writes());
        t.queue_resync();
        let s = t.apply().unwrap();
        assert_eq!(s.read_backs, 1);
        assert!(
            s.no_writes(),
            "resync of an unchanged table must write nothing: {s:?}"
        );

        ns.sh("ping", &["-c", "3", "-i", "0.2", "-W", "1", "127.0.0.1"]);
        let before = first_counter(&ns, "cali-count");
        assert!(before >= 3, "{before}");
        program(&mut t, "tcp");
        let s = t.apply().unwrap();
        assert_eq!(s.rules_written, 2, "only cali-in is rewritten: {s:?}");
        assert_eq!(first_counter(&ns, "cali-count"), before);

        // A fresh driver with a different desired state sweeps our table.
        let mut fresh = table(&ns);
        fresh.set_chain(Chain::new("cali-new", vec![rule("tcp", Action::Accept)]));
        let s = fresh.apply().unwrap();
        assert_eq!(s.chains_deleted, 3, "{s:?}");
        let listed = ns.sh("nft", &["list", "table", "ip", "calico"]);
        assert!(listed.contains("chain cali-new"));
        assert!(
            !listed.contains("cali-in") && !listed.contains("set cali40s"),
            "{listed}"
        );
        foreign_intact(&ns);
    }

    /// An ICMP type+code match (and its negation) loads in nft for both
    /// families; it used to fail the whole transaction.
    #[test]
    fn kernel_icmp_type_and_code_matches_load_in_nft() {
        use crate::dataplane::generictables::Match;
        felix_netns::require!(netns["nft"]);
        let ns = TestNetns::create();
        for ipv in [IpVersion::V4, IpVersion::V6] {
            let m = |icmp_type, code, negate| match ipv {
                IpVersion::V4 => Match::IcmpType {
                    icmp_type,
                    code,
                    negate,
                },
                IpVersion::V6 => Match::Icmpv6Type {
                    icmp_type,
                    code,
                    negate,
                },
            };
            let mut t =
                NftablesTable::new(ipv, NftablesMode::Program, ns.commands("nft"), quiet_opts());
            let rules = [
                (8, Some(0), false),
                (8, Some(1), true),
                (8, None, true),
                (3, None, false),
            ]
            .into_iter()
            .map(|(ty, code, neg)| {
                Rule::new(MatchCriteria::new().with(m(ty, code, neg)), Action::Accept)
            })
            .collect();
            t.set_chain(Chain::new("cali-icmp", rules));
            let s = t.apply().unwrap_or_else(|e| panic!("{ipv:?}: {e}"));
            assert_eq!(s.retries, 0, "{ipv:?}: {s:?}");
            let fam = if ipv == IpVersion::V4 { "ip" } else { "ip6" };
            let listed = ns.sh("nft", &["list", "chain", fam, "calico", "cali-icmp"]);
            assert!(
                listed.contains(" . "),
                "the negated pair stays a pair: {listed}"
            );
        }
    }

    /// Single-member adds and deletes in a CIDR set of thousands of
    /// adjacent and nested members never fail a transaction and never make
    /// the driver re-read the table. (With `auto-merge` nft merged
    /// adjacent members into ranges and deleting one failed; without it nft
    /// refuses overlapping members, so nested ones must be kept out.)
    /// `FELIX_CHURN_OPS` (default 150) sets the number of random changes,
    /// `FELIX_CHURN_SEED` the seed; the failure count is printed.
    #[test]
    fn kernel_single_member_set_changes_never_fail_at_scale() {
        use crate::dataplane::kernel::testns::{env_count, SeededRng};
        felix_netns::require!(netns["nft"]);
        let ns = TestNetns::create();
        let ops = env_count("FELIX_CHURN_OPS", 150);
        let mut rng = SeededRng::from_env("FELIX_CHURN_SEED", 4);
        let host = |i: usize| format!("10.65.{}.{}", i / 256, i % 256);
        // 2,000 adjacent hosts, CIDRs covering some of them (nested in
        // each other, one covering the whole block) and a disjoint one.
        let mut pool: Vec<String> = (0..2000).map(host).collect();
        let cidrs = [
            "10.65.0.0/24",
            "10.65.1.0/25",
            "10.65.1.0/26",
            "10.65.1.64/26",
            "10.65.2.4/30",
            "10.65.3.0/31",
            "10.65.0.0/16",
            "10.66.0.0/24",
        ];
        pool.extend(cidrs.iter().map(|c| c.to_string()));
        let mut members: BTreeSet<String> = (0..2000).map(host).collect();
        members.insert("10.65.1.0/26".into());
        members.insert("10.66.0.0/24".into());
        let set = "cali40s:churn";
        let mut t = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            ns.commands("nft"),
            quiet_opts(),
        );
        t.set_ip_set(set, NftSetKind::Net, members.clone());
        t.set_chain(Chain::new(
            "cali-churn",
            vec![Rule::new(
                MatchCriteria::new().source_ip_set(set),
                Action::Accept,
            )],
        ));
        t.apply().unwrap();
        let (mut failed, mut read_backs) = (0, 0);
        let started = felix_actors::clock::real_now();
        for _ in 0..ops {
            // Mostly hosts (workload churn); one change in eight is a CIDR.
            let m = if rng.one_in(8) {
                rng.pick(&pool[2000..]).clone()
            } else {
                rng.pick(&pool[..2000]).clone()
            };
            if members.remove(&m) {
                t.remove_ip_set_members(set, [m]);
            } else {
                members.insert(m.clone());
                t.add_ip_set_members(set, [m]);
            }
            match t.apply() {
                Ok(s) => {
                    failed += s.retries;
                    read_backs += s.read_backs;
                }
                Err(e) => panic!("apply gave up: {e}"),
            }
        }
        eprintln!(
            "churn: {ops} single-member changes in {:?}: {failed} failed nft transactions, {read_backs} read-backs",
            started.elapsed()
        );
        assert_eq!(failed, 0, "failed nft transactions during churn");
        assert_eq!(read_backs, 0, "delta applies re-read the table");
        // The kernel holds exactly the uncovered members.
        t.queue_resync();
        let s = t.apply().unwrap();
        assert!(s.no_writes(), "kernel differs from the desired set: {s:?}");
        let listed = ns.sh(
            "nft",
            &["-j", "list", "set", "ip", "calico", "cali40s-churn"],
        );
        assert!(!listed.contains("range"), "{listed}");
    }

    /// Overlapping members (which nft refuses in a set without
    /// `auto-merge`): a covering CIDR keeps what it covers out of the
    /// kernel and puts it back when it goes, each change one transaction
    /// that succeeds first time.
    #[test]
    fn kernel_covering_cidr_hides_and_restores_covered_members() {
        felix_netns::require!(netns["nft"]);
        let ns = TestNetns::create();
        for ipv in [IpVersion::V4, IpVersion::V6] {
            let (set, fam, cover, nested, host, other, outside) = match ipv {
                IpVersion::V4 => (
                    "cali40s:ov",
                    "ip",
                    "10.0.0.0/8",
                    "10.1.0.0/16",
                    "10.1.2.3",
                    "10.2.0.1",
                    "11.0.0.1",
                ),
                IpVersion::V6 => (
                    "cali60s:ov",
                    "ip6",
                    "fd00::/16",
                    "fd00:1::/32",
                    "fd00:1::5",
                    "fd00:2::1",
                    "fd01::1",
                ),
            };
            let listed = || {
                let l = ns.sh(
                    "nft",
                    &["list", "set", fam, "calico", &set.replace(':', "-")],
                );
                let has = |m: &str| l.contains(&format!(" {m},")) || l.contains(&format!(" {m} "));
                [cover, nested, host, other, outside].map(has)
            };
            let mut t =
                NftablesTable::new(ipv, NftablesMode::Program, ns.commands("nft"), quiet_opts());
            let apply = |t: &mut NftablesTable| {
                let s = t.apply().unwrap_or_else(|e| panic!("{ipv:?}: {e}"));
                assert_eq!((s.retries, s.read_backs), (0, 0), "{ipv:?}: {s:?}");
            };
            t.set_ip_set(
                set,
                NftSetKind::Net,
                [nested, host, other, outside].map(String::from),
            );
            t.set_chain(Chain::new(
                "cali-ov",
                vec![Rule::new(
                    MatchCriteria::new().source_ip_set(set),
                    Action::Accept,
                )],
            ));
            let s = t.apply().unwrap_or_else(|e| panic!("{ipv:?}: {e}"));
            assert_eq!(s.retries, 0, "{ipv:?}: {s:?}");
            // The host inside the nested CIDR is covered from the start.
            assert_eq!(listed(), [false, true, false, true, true], "{ipv:?}");
            t.add_ip_set_members(set, [cover.to_string()]);
            apply(&mut t);
            assert_eq!(listed(), [true, false, false, false, true], "{ipv:?}");
            // A covered member leaves without touching the kernel's set.
            t.remove_ip_set_members(set, [nested.to_string()]);
            apply(&mut t);
            t.remove_ip_set_members(set, [cover.to_string()]);
            apply(&mut t);
            assert_eq!(listed(), [false, false, true, true, true], "{ipv:?}");
            t.queue_resync();
            let s = t.apply().unwrap();
            assert!(s.no_writes(), "{ipv:?}: {s:?}");
        }
    }

    /// A set left with `auto-merge` by an older version (its members merged
    /// into ranges) is recreated with our declaration, after which
    /// single-member deletes succeed.
    #[test]
    fn kernel_auto_merged_set_is_recreated_and_then_deletes_succeed() {
        felix_netns::require!(netns["nft"]);
        let ns = TestNetns::create();
        let members: Vec<String> = (10..20).map(|i| format!("10.65.0.{i}")).collect();
        ns.sh(
            "nft",
            &[&format!(
                "add table ip calico; add set ip calico cali40s-old {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {} }}; }}",
                members.join(", ")
            )],
        );
        let mut t = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            ns.commands("nft"),
            quiet_opts(),
        );
        t.set_ip_set("cali40s:old", NftSetKind::Net, members.clone());
        t.set_chain(Chain::new(
            "cali-old",
            vec![Rule::new(
                MatchCriteria::new().dest_ip_set("cali40s:old"),
                Action::Drop,
            )],
        ));
        let s = t.apply().unwrap();
        assert_eq!(s.retries, 0, "{s:?}");
        let listed = ns.sh("nft", &["list", "set", "ip", "calico", "cali40s-old"]);
        assert!(
            !listed.contains("auto-merge") && !listed.contains("-10.65"),
            "{listed}"
        );
        for m in &members[3..6] {
            t.remove_ip_set_members("cali40s:old", [m.clone()]);
            let s = t.apply().unwrap();
            assert_eq!((s.retries, s.read_backs), (0, 0), "{s:?}");
        }
    }

    #[test]
    fn kernel_nftables_atomic_rebuild_after_failures() {
        felix_netns::require!(netns["nft"]);
        let ns = TestNetns::create();
        add_foreign(&ns);
        let mut t = table(&ns);
        program(&mut t, "udp");
        t.apply().unwrap();
        let seam = Arc::new(FailFirstApplies {
            inner: SystemCommands::in_netns(&ns.name),
            remaining: Mutex::new(5),
            scripts: Mutex::new(Vec::new()),
        });
        let mut t2 = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            Commands::standalone(seam.clone(), "nft"),
            NftablesOptions {
                retry: RetryPolicy::without_sleeping(),
                ..NftablesOptions::default()
            },
        );
        program(&mut t2, "sctp");
        let s = t2.apply().unwrap();
        assert_eq!(s.retries, 5);
        let sc = seam.scripts.lock().clone();
        assert!(sc.last().unwrap().contains("delete table ip calico"));
        let listed = ns.sh("nft", &["list", "table", "ip", "calico"]);
        assert!(
            listed.contains("sctp") && listed.contains("chain cali-count"),
            "{listed}"
        );
        foreign_intact(&ns);
        // The rebuilt table is recognised as up to date after a resync.
        t2.queue_resync();
        assert!(t2.apply().unwrap().no_writes());
    }

    #[test]
    fn kernel_switch_between_iptables_and_nftables_leaves_nothing_behind() {
        felix_netns::require!(netns [
            "nft",
            "iptables-nft-save",
            "iptables-nft-restore",
            "iptables-legacy-save",
            "iptables-legacy-restore",
        ]);
        let ns = TestNetns::create();
        let ipt = |b, mode| {
            IptablesTable::new(
                "filter",
                IpVersion::V4,
                b,
                mode,
                ns.commands("ipt"),
                IptablesOptions::default(),
            )
        };
        // iptables-nft and iptables-legacy Felix state, plus a foreign rule.
        for b in [ResolvedBackend::Nft, ResolvedBackend::Legacy] {
            let mut t = ipt(b, IptablesMode::Program);
            t.set_chain(Chain::new("cali-x", vec![rule("tcp", Action::Accept)]));
            t.set_insert_rules(
                "INPUT",
                vec![
                    Rule::new(MatchCriteria::new(), Action::Jump("cali-x".into())),
                    // Ours by comment only (no jump to a cali- chain).
                    rule("udp", Action::Accept),
                ],
            );
            t.apply().unwrap();
        }
        ns.sh(
            "iptables-nft",
            &["-A", "INPUT", "-s", "1.2.3.4", "-j", "ACCEPT"],
        );

        // Switch to nftables mode.
        let mut nft = table(&ns);
        program(&mut nft, "udp");
        nft.apply().unwrap();
        let mut sweep = IptablesNftCleanup::new(
            IpVersion::V4,
            ns.commands("cleanup"),
            Duration::from_secs(60),
        );
        let (next, res) = sweep.clean_up();
        let s = res.unwrap();
        assert_eq!(next, Duration::from_secs(60));
        assert_eq!((s.rules_deleted >= 2, s.chains_deleted), (true, 1), "{s:?}");
        let mut legacy = ipt(ResolvedBackend::Legacy, IptablesMode::CleanupOnly);
        legacy.apply().unwrap();
        let nft_copy = ns.sh("iptables-nft-save", &["-t", "filter"]);
        assert!(!nft_copy.contains("cali"), "{nft_copy}");
        assert!(
            nft_copy.contains("-A INPUT -s 1.2.3.4/32 -j ACCEPT"),
            "{nft_copy}"
        );
        assert!(!ns
            .sh("iptables-legacy-save", &["-t", "filter"])
            .contains("cali"));
        // A second sweep is paced: nothing runs until the interval passes.
        let (next, res) = sweep.clean_up();
        assert!(next <= Duration::from_secs(60) && res.unwrap().read_backs == 0);

        // And back to iptables: our nftables table goes away.
        let mut t = ipt(ResolvedBackend::Nft, IptablesMode::Program);
        t.set_chain(Chain::new("cali-x", vec![rule("tcp", Action::Accept)]));
        t.apply().unwrap();
        let mut gone = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::CleanupOnly,
            ns.commands("nft"),
            NftablesOptions::default(),
        );
        assert_eq!(gone.apply().unwrap().chains_deleted, 1);
        let tables = ns.sh("nft", &["list", "tables", "ip"]);
        assert!(!tables.contains("calico"), "{tables}");
        assert!(ns
            .sh("iptables-nft-save", &["-t", "filter"])
            .contains("cali-x"));
    }
}

/// Prints figures (not a timed assertion); run with
/// `cargo test --lib dataplane::nftables::tests::bench -- --ignored --nocapture`.
mod bench {
    use super::*;
    use crate::dataplane::iptables::{
        IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
    };
    use crate::dataplane::kernel::testns::TestNetns;

    const CHAINS: usize = 2000;
    const RULES: usize = 5;

    fn chain(i: usize, variant: u16) -> Chain {
        let rules = (0..RULES)
            .map(|r| {
                Rule::new(
                    MatchCriteria::new()
                        .protocol("tcp")
                        .source_net(format!("10.{}.{}.0/24", i % 250, r).parse().unwrap())
                        .dest_ports(vec![PortRange::single(1000 + r as u16 + variant)]),
                    Action::Accept,
                )
            })
            .collect();
        Chain::new(&format!("cali-pi-{i:05}"), rules)
    }

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    #[test]
    #[ignore]
    fn bench_table_drivers() {
        // Ignored (run by hand), so not a kernel test CI counts: the gate's
        // function form, not `require!`.
        let tools = ["nft", "iptables-nft-restore", "iptables-nft-save"];
        if felix_netns::gate("bench_table_drivers", felix_netns::missing_netns(&tools)).is_err() {
            return;
        }
        let ns = TestNetns::create();
        // iptables-nft.
        let mut t = IptablesTable::new(
            "filter",
            IpVersion::V4,
            ResolvedBackend::Nft,
            IptablesMode::Program,
            ns.commands("bench"),
            IptablesOptions::default(),
        );
        for i in 0..CHAINS {
            t.set_chain(chain(i, 0));
        }
        let start = felix_actors::clock::real_now();
        t.apply().unwrap();
        let sod = start.elapsed();
        // Raw tool time for the same ruleset: save what we wrote, flush, restore it.
        let saved = ns.sh("iptables-nft-save", &["-t", "filter"]);
        ns.sh("iptables-nft", &["-F"]);
        ns.sh("iptables-nft", &["-X"]);
        let path = format!("/tmp/{}-ipt.txt", ns.name);
        std::fs::write(&path, &saved).unwrap();
        let start = felix_actors::clock::real_now();
        ns.sh("iptables-nft-restore", &[&path]);
        let raw = start.elapsed();
        let _ = std::fs::remove_file(&path);
        t.set_chain(chain(7, 1));
        let start = felix_actors::clock::real_now();
        let s = t.apply().unwrap();
        let one = start.elapsed();
        println!(
            "iptables-nft {} rules: start-of-day {:.1} ms (raw iptables-restore {:.1} ms); one changed chain {:.1} ms ({} rules written)",
            CHAINS * RULES, ms(sod), ms(raw), ms(one), s.rules_written
        );

        // nftables.
        let mut n = NftablesTable::new(
            IpVersion::V4,
            NftablesMode::Program,
            ns.commands("bench"),
            NftablesOptions::default(),
        );
        for i in 0..CHAINS {
            n.set_chain(chain(i, 0));
        }
        let start = felix_actors::clock::real_now();
        n.apply().unwrap();
        let sod = start.elapsed();
        let listed = ns.sh("nft", &["list", "table", "ip", "calico"]);
        ns.sh("nft", &["delete", "table", "ip", "calico"]);
        let path = format!("/tmp/{}-nft.txt", ns.name);
        std::fs::write(&path, &listed).unwrap();
        let start = felix_actors::clock::real_now();
        ns.sh("nft", &["-f", &path]);
        let raw = start.elapsed();
        let _ = std::fs::remove_file(&path);
        n.set_chain(chain(7, 1));
        let start = felix_actors::clock::real_now();
        let s = n.apply().unwrap();
        let one = start.elapsed();
        n.queue_resync();
        let start = felix_actors::clock::real_now();
        n.apply().unwrap();
        let resync = start.elapsed();
        println!(
            "nftables {} rules: start-of-day {:.1} ms (raw nft -f {:.1} ms); one changed chain {:.1} ms ({} rules written); resync read-back {:.1} ms",
            CHAINS * RULES, ms(sod), ms(raw), ms(one), s.rules_written, ms(resync)
        );
    }
}

mod kernel_v6 {
    use super::*;
    use crate::dataplane::ipsets::{
        IpSetMetadata, IpSetType, IpSets, IpSetsOptions, IpVersionConfig,
    };
    use crate::dataplane::iptables::{
        IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
    };
    use crate::dataplane::kernel::testns::TestNetns;

    #[test]
    fn kernel_ipv6_drivers_program_and_resync_cleanly() {
        felix_netns::require!(netns [
            "nft",
            "ip6tables-nft-restore",
            "ip6tables-nft-save",
            "ipset",
        ]);
        let ns = TestNetns::create();
        let mut sets = IpSets::new(
            IpVersionConfig::new(IpVersion::V6),
            ns.commands("ipsets-v6"),
            IpSetsOptions::default(),
        );
        sets.add_or_replace_ip_set(
            IpSetMetadata {
                set_id: "s:v6".into(),
                set_type: IpSetType::HashNet,
                max_size: 1024,
            },
            vec![
                "fd00:0::/64".to_string(),
                "10.0.0.1".into(),
                "fd01::1/128".into(),
            ],
        );
        sets.apply_updates().unwrap();
        let listed = ns.sh("ipset", &["list", "cali60s:v6"]);
        assert!(
            listed.contains("family inet6")
                && listed.contains("fd00::/64")
                && listed.contains("fd01::1"),
            "{listed}"
        );
        assert!(!listed.contains("10.0.0.1"));

        let v6_rule = Rule::new(
            MatchCriteria::new()
                .protocol("ipv6-icmp")
                .source_net("fd00::/64".parse().unwrap())
                .source_ip_set("cali60s:v6"),
            Action::Accept,
        );
        let mut ipt = IptablesTable::new(
            "filter",
            IpVersion::V6,
            ResolvedBackend::Nft,
            IptablesMode::Program,
            ns.commands("ipt6"),
            IptablesOptions::default(),
        );
        ipt.set_chain(Chain::new("cali-v6", vec![v6_rule.clone()]));
        ipt.set_insert_rules(
            "INPUT",
            vec![Rule::new(
                MatchCriteria::new(),
                Action::Jump("cali-v6".into()),
            )],
        );
        ipt.apply().unwrap();
        ipt.queue_resync();
        assert!(ipt.apply().unwrap().no_writes());
        assert!(ns
            .sh("ip6tables-nft-save", &["-t", "filter"])
            .contains("cali60s:v6"));

        let mut nft = NftablesTable::new(
            IpVersion::V6,
            NftablesMode::Program,
            ns.commands("nft6"),
            NftablesOptions::default(),
        );
        nft.set_ip_set(
            "cali60s:v6",
            NftSetKind::Net,
            vec!["fd00::/64".to_string(), "fd01::1".into()],
        );
        nft.set_chain(Chain::new("cali-v6", vec![v6_rule]));
        nft.set_insert_rules(
            "filter-INPUT",
            vec![Rule::new(
                MatchCriteria::new(),
                Action::Jump("cali-v6".into()),
            )],
        );
        nft.apply().unwrap();
        nft.queue_resync();
        let s = nft.apply().unwrap();
        assert!(s.no_writes(), "{s:?}");
        let listed = ns.sh("nft", &["list", "table", "ip6", "calico"]);
        assert!(listed.contains("ip6 saddr @cali60s-v6"), "{listed}");
    }
}
