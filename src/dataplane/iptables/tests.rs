//! Tests of the iptables table: scripted-seam unit tests for the diff,
//! retry and cleanup logic, and kernel tests in throwaway namespaces.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::dataplane::generictables::{Action, Chain, MatchCriteria, Rule, Table, TableError};
use crate::dataplane::kernel::RetryPolicy;
use crate::dataplane::kernel::{CommandRequest, Commands, FakeResponse, ScriptedCommands};
use crate::dataplane::IpVersion;

const EMPTY_FILTER: &str =
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";

fn rule(proto: &str, a: Action) -> Rule {
    Rule::new(MatchCriteria::new().protocol(proto), a)
}

fn test_opts(sleeps: Arc<Mutex<Vec<Duration>>>) -> IptablesOptions {
    IptablesOptions {
        retry: RetryPolicy {
            sleep: Arc::new(move |d| sleeps.lock().push(d)),
            ..RetryPolicy::default()
        },
        ..IptablesOptions::default()
    }
}

fn fake_with_save(save: &'static str) -> Arc<ScriptedCommands> {
    ScriptedCommands::new(move |req: &CommandRequest| {
        if req.program.contains("save") {
            FakeResponse::Ok(save.into())
        } else {
            FakeResponse::Ok(String::new())
        }
    })
}

fn fake_table(fake: &Arc<ScriptedCommands>, sleeps: Arc<Mutex<Vec<Duration>>>) -> IptablesTable {
    IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Nft,
        IptablesMode::Program,
        Commands::standalone(fake.clone(), "iptables-filter-v4"),
        test_opts(sleeps),
    )
}

fn restores(fake: &ScriptedCommands) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| c.program.contains("restore"))
        .map(|c| String::from_utf8(c.stdin.unwrap_or_default()).unwrap())
        .collect()
}

fn desired(t: &mut IptablesTable, last: Action) {
    t.set_chain(Chain::new(
        "cali-a",
        vec![rule("tcp", Action::Accept), rule("udp", last)],
    ));
    t.set_insert_rules(
        "INPUT",
        vec![Rule::new(
            MatchCriteria::new(),
            Action::Jump("cali-a".into()),
        )],
    );
}

#[test]
fn first_apply_writes_once_and_second_apply_writes_nothing() {
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = fake_table(&fake, Default::default());
    desired(&mut t, Action::Drop);
    assert!(t.is_dirty());
    let s = t.apply().unwrap();
    assert_eq!(
        (
            s.transactions,
            s.read_backs,
            s.chains_created,
            s.rules_written
        ),
        (1, 1, 1, 3)
    );
    let scripts = restores(&fake);
    assert_eq!(scripts.len(), 1);
    let lines: Vec<&str> = scripts[0].lines().collect();
    assert_eq!(lines[0], "*filter");
    assert_eq!(lines[1], ":cali-a - -");
    assert!(lines[2].starts_with("-A cali-a -m comment --comment \"cali:"));
    assert!(lines[4].starts_with("-I INPUT 1 -m comment --comment \"cali:"));
    assert_eq!(*lines.last().unwrap(), "COMMIT");
    // The restore call carried --noflush and the lock options.
    let call = fake
        .calls()
        .into_iter()
        .find(|c| c.program.contains("restore"))
        .unwrap();
    assert_eq!(call.args[0], "--noflush");
    assert!(call.args.contains(&"-w".to_string()));

    fake.clear_calls();
    assert!(!t.is_dirty());
    desired(&mut t, Action::Drop);
    assert!(
        !t.is_dirty(),
        "re-setting identical state must not dirty the table"
    );
    let s = t.apply().unwrap();
    assert!(s.no_writes());
    assert!(fake.calls().is_empty());
}

#[test]
fn changed_last_rule_is_replaced_alone() {
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = fake_table(&fake, Default::default());
    desired(&mut t, Action::Drop);
    t.apply().unwrap();
    fake.clear_calls();
    desired(&mut t, Action::Return);
    let s = t.apply().unwrap();
    assert_eq!((s.rules_written, s.rules_deleted, s.read_backs), (1, 0, 0));
    let scripts = restores(&fake);
    let body: Vec<&str> = scripts[0].lines().filter(|l| l.starts_with('-')).collect();
    assert_eq!(body.len(), 1);
    assert!(body[0].starts_with("-R cali-a 2 "), "{body:?}");
    // Shrinking the chain deletes from the end.
    fake.clear_calls();
    t.set_chain(Chain::new("cali-a", vec![rule("tcp", Action::Accept)]));
    t.apply().unwrap();
    let scripts = restores(&fake);
    assert!(scripts[0].contains("-D cali-a 2\n"), "{}", scripts[0]);
}

#[test]
fn read_back_sweeps_orphans_and_keeps_foreign_rules() {
    const SAVE: &str = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
:cali-old - [0:0]\n:KEEP - [0:0]\n\
-A INPUT -s 1.2.3.4/32 -j ACCEPT\n-A INPUT -m comment --comment \"cali:stalehashstale\" -j cali-old\n\
-A FORWARD -j cali-old\n-A cali-old -j DROP\n-A KEEP -j ACCEPT\nCOMMIT\n";
    let fake = fake_with_save(SAVE);
    let mut t = fake_table(&fake, Default::default());
    t.set_chain(Chain::new("cali-new", vec![rule("tcp", Action::Accept)]));
    let s = t.apply().unwrap();
    assert_eq!((s.chains_created, s.chains_deleted), (1, 1));
    let script = &restores(&fake)[0];
    let lines: Vec<&str> = script.lines().collect();
    assert!(lines.contains(&"-D INPUT 2"));
    assert!(lines.contains(&"-D FORWARD 1"));
    assert!(lines.contains(&"-F cali-old"));
    assert!(lines.contains(&"-X cali-old"));
    assert!(!script.contains("KEEP"));
    assert!(!script.contains("-D INPUT 1\n"));
    // Deletions of chains come after everything that referenced them.
    let pos = |s: &str| lines.iter().position(|l| *l == s).unwrap();
    assert!(pos("-D INPUT 2") < pos("-F cali-old") && pos("-F cali-old") < pos("-X cali-old"));
}

// ---- ChainInsertMode ----------------------------------------------------

fn saved(hash: Option<&str>) -> SavedRule {
    SavedRule {
        hash: hash.map(str::to_string),
        jumps_to_ours: false,
    }
}

#[test]
fn hooks_in_place_checks_the_mode_end() {
    let h = vec!["h1".to_string(), "h2".to_string()];
    let foreign = saved(None);
    let top = vec![saved(Some("h1")), saved(Some("h2")), foreign.clone()];
    let bottom = vec![foreign.clone(), saved(Some("h1")), saved(Some("h2"))];
    let split = vec![saved(Some("h1")), foreign.clone(), saved(Some("h2"))];
    let swapped = vec![saved(Some("h2")), saved(Some("h1")), foreign.clone()];
    use ChainInsertMode::{Append, Insert};
    assert!(Insert.hooks_in_place(&top, &h));
    assert!(!Insert.hooks_in_place(&bottom, &h));
    assert!(Append.hooks_in_place(&bottom, &h));
    assert!(!Append.hooks_in_place(&top, &h));
    for m in [Insert, Append] {
        assert!(!m.hooks_in_place(&split, &h), "{m:?}");
        assert!(!m.hooks_in_place(&swapped, &h), "{m:?}");
        // A stray extra rule of ours (hash-less jump to a cali- chain).
        let mut extra = if m == Insert {
            top.clone()
        } else {
            bottom.clone()
        };
        extra.push(SavedRule {
            hash: None,
            jumps_to_ours: true,
        });
        if m == Append {
            extra.rotate_right(1);
        }
        assert!(!m.hooks_in_place(&extra, &h), "{m:?}");
        // Nothing desired: in place only without rules of ours.
        assert!(m.hooks_in_place(std::slice::from_ref(&foreign), &[]));
        assert!(!m.hooks_in_place(&top, &[]));
        assert!(!m.hooks_in_place(&[], &h));
    }
    assert_eq!(Insert.hook_op("INPUT", 2), "-I INPUT 3");
    assert_eq!(Append.hook_op("INPUT", 2), "-A INPUT");
}

fn hook_rules() -> Vec<Rule> {
    vec![
        Rule::new(MatchCriteria::new(), Action::Jump("cali-a".into())),
        rule("udp", Action::Jump("cali-b".into())),
    ]
}

fn mode_table(fake: &Arc<ScriptedCommands>, mode: ChainInsertMode) -> IptablesTable {
    IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Nft,
        IptablesMode::Program,
        Commands::standalone(fake.clone(), "iptables-filter-v4"),
        IptablesOptions {
            insert_mode: mode,
            retry: RetryPolicy::without_sleeping(),
            ..IptablesOptions::default()
        },
    )
}

/// Save output with INPUT holding a foreign rule and our two hooks, ours
/// above (`ours_on_top`) or below the foreign rule.
fn save_with_hooks(ours_on_top: bool) -> String {
    let h = IptablesRenderer::default().hashes("INPUT", &hook_rules());
    let ours = format!(
        "-A INPUT -m comment --comment \"cali:{}\" -j cali-a\n\
         -A INPUT -p udp -m comment --comment \"cali:{}\" -j cali-b\n",
        h[0], h[1]
    );
    let foreign = "-A INPUT -s 1.2.3.4/32 -j ACCEPT\n";
    let body = if ours_on_top {
        format!("{ours}{foreign}")
    } else {
        format!("{foreign}{ours}")
    };
    format!(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n{body}COMMIT\n"
    )
}

fn fake_with_owned_save(save: String) -> Arc<ScriptedCommands> {
    ScriptedCommands::new(move |req: &CommandRequest| {
        if req.program.contains("save") {
            FakeResponse::Ok(save.clone())
        } else {
            FakeResponse::Ok(String::new())
        }
    })
}

fn body_lines(script: &str) -> Vec<&str> {
    script.lines().filter(|l| l.starts_with('-')).collect()
}

#[test]
fn append_mode_renders_hooks_with_append() {
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = mode_table(&fake, ChainInsertMode::Append);
    t.set_insert_rules("INPUT", hook_rules());
    let s = t.apply().unwrap();
    assert_eq!((s.rules_written, s.rules_deleted), (2, 0));
    let scripts = restores(&fake);
    let body = body_lines(&scripts[0]);
    assert_eq!(body.len(), 2, "{body:?}");
    assert!(body[0].starts_with("-A INPUT -m comment --comment \"cali:"));
    assert!(body[0].ends_with("--jump cali-a"), "{body:?}");
    assert!(body[1].starts_with("-A INPUT -m comment --comment \"cali:"));
    assert!(body[1].ends_with("--jump cali-b"), "{body:?}");
}

#[test]
fn hooks_at_the_mode_end_are_left_alone() {
    for (mode, on_top) in [
        (ChainInsertMode::Insert, true),
        (ChainInsertMode::Append, false),
    ] {
        let fake = fake_with_owned_save(save_with_hooks(on_top));
        let mut t = mode_table(&fake, mode);
        t.set_insert_rules("INPUT", hook_rules());
        let s = t.apply().unwrap();
        assert_eq!(s.read_backs, 1);
        assert!(s.no_writes(), "{mode:?}: {s:?}");
        assert!(restores(&fake).is_empty(), "{mode:?}");
    }
}

#[test]
fn hooks_at_the_wrong_end_are_moved_and_foreign_rules_kept() {
    // Top -> bottom (switch to append): delete ours bottom-up, then append.
    let fake = fake_with_owned_save(save_with_hooks(true));
    let mut t = mode_table(&fake, ChainInsertMode::Append);
    t.set_insert_rules("INPUT", hook_rules());
    let s = t.apply().unwrap();
    assert_eq!((s.rules_written, s.rules_deleted), (2, 2));
    let scripts = restores(&fake);
    let body = body_lines(&scripts[0]);
    assert_eq!(body[..2], ["-D INPUT 2", "-D INPUT 1"], "{body:?}");
    assert!(body[2].starts_with("-A INPUT ") && body[2].ends_with("cali-a"));
    assert!(body[3].starts_with("-A INPUT ") && body[3].ends_with("cali-b"));
    assert!(!scripts[0].contains("1.2.3.4"), "foreign rule touched");
    // Our picture now has ours at the bottom: nothing more to do.
    assert_eq!(
        t.actual_hashes("INPUT").unwrap(),
        std::iter::once(None)
            .chain(
                IptablesRenderer::default()
                    .hashes("INPUT", &hook_rules())
                    .into_iter()
                    .map(Some)
            )
            .collect::<Vec<_>>()
    );
    fake.clear_calls();
    assert!(t.apply().unwrap().no_writes());

    // Bottom -> top (switch to insert).
    let fake = fake_with_owned_save(save_with_hooks(false));
    let mut t = mode_table(&fake, ChainInsertMode::Insert);
    t.set_insert_rules("INPUT", hook_rules());
    let s = t.apply().unwrap();
    assert_eq!((s.rules_written, s.rules_deleted), (2, 2));
    let scripts = restores(&fake);
    let body = body_lines(&scripts[0]);
    assert_eq!(body[..2], ["-D INPUT 3", "-D INPUT 2"], "{body:?}");
    assert!(body[2].starts_with("-I INPUT 1 ") && body[2].ends_with("cali-a"));
    assert!(body[3].starts_with("-I INPUT 2 ") && body[3].ends_with("cali-b"));
    assert!(!scripts[0].contains("1.2.3.4"), "foreign rule touched");
}

#[test]
fn retries_with_doubling_backoff_and_rereads_after_failure() {
    let fake = fake_with_save(EMPTY_FILTER);
    let sleeps = Arc::new(Mutex::new(Vec::new()));
    let mut t = fake_table(&fake, sleeps.clone());
    desired(&mut t, Action::Drop);
    fake.fail_next(3, Some("iptables-nft-restore"));
    let s = t.apply().unwrap();
    assert_eq!(s.retries, 3);
    assert_eq!(s.read_backs, 4, "each failure forces a re-read");
    assert_eq!(s.transactions, 1);
    assert_eq!(
        *sleeps.lock(),
        vec![
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::from_millis(4)
        ]
    );
    assert!(!t.is_dirty());
}

#[test]
fn gives_up_after_max_retries_and_stays_dirty() {
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = fake_table(&fake, Default::default());
    desired(&mut t, Action::Drop);
    fake.fail_next(100, Some("iptables-nft-restore"));
    match t.apply() {
        Err(TableError::GaveUp {
            attempts, source, ..
        }) => {
            assert_eq!(attempts, 11);
            assert!(source.to_string().contains("injected failure"));
            assert!(source.to_string().contains("iptables-nft-restore"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(t.is_dirty());
    fake.fail_next(0, None);
    let s = t.apply().unwrap();
    assert_eq!(s.transactions, 1);
}

#[test]
fn unparseable_save_is_a_typed_error() {
    let fake = fake_with_save("# Table `filter' is incompatible, use 'nft' tool.\n");
    let mut t = IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Nft,
        IptablesMode::Program,
        Commands::standalone(fake.clone(), "t"),
        IptablesOptions {
            retry: RetryPolicy {
                max_retries: 0,
                ..RetryPolicy::default()
            },
            ..IptablesOptions::default()
        },
    );
    desired(&mut t, Action::Drop);
    assert!(matches!(t.apply(), Err(TableError::Parse { .. })));
}

#[test]
fn cleanup_only_is_paced_and_latched() {
    const SAVE: &str =
        "*filter\n:INPUT ACCEPT [0:0]\n:cali-x - [0:0]\n-A INPUT -j cali-x\nCOMMIT\n";
    let fake = fake_with_save(SAVE);
    fake.set_paths(&["/proc/net/ip_tables_names"]);
    let clock = Arc::new(Mutex::new(felix_actors::clock::real_now()));
    let c2 = clock.clone();
    let opts = IptablesOptions {
        refresh_interval: Duration::from_secs(60),
        retry: RetryPolicy {
            now: Arc::new(move || *c2.lock()),
            ..RetryPolicy::default()
        },
        ..IptablesOptions::default()
    };
    let mut t = IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Legacy,
        IptablesMode::CleanupOnly,
        Commands::standalone(fake.clone(), "cleanup"),
        opts,
    );
    // Desired state is ignored in cleanup mode.
    desired(&mut t, Action::Drop);
    fake.fail_next(1, Some("iptables-legacy-restore"));
    assert!(t.apply().is_err());
    fake.clear_calls();
    // Latched: no retry before the interval.
    assert!(!t.is_dirty());
    assert!(t.apply().unwrap().no_writes());
    assert!(fake.calls().is_empty());
    *clock.lock() += Duration::from_secs(61);
    assert!(t.is_dirty());
    let s = t.apply().unwrap();
    assert_eq!((s.chains_deleted, s.rules_deleted), (1, 1));
    let script = &restores(&fake)[0];
    assert!(script.contains("-D INPUT 1") && script.contains("-X cali-x"));
    assert!(!script.contains("-A") && !script.contains("-I"));
}

#[test]
fn cleanup_only_skips_backend_without_binaries_or_modules() {
    let fake = fake_with_save(EMPTY_FILTER);
    // Legacy modules not loaded (no paths): nothing is run at all.
    let mut t = IptablesTable::new(
        "filter",
        IpVersion::V4,
        ResolvedBackend::Legacy,
        IptablesMode::CleanupOnly,
        Commands::standalone(fake.clone(), "cleanup"),
        IptablesOptions::default(),
    );
    assert!(t.apply().unwrap().no_writes());
    assert!(fake.calls().is_empty());
}

// ---- kernel tests -------------------------------------------------------

#[test]
fn whole_table_cache_only_for_big_scripts_on_nft() {
    let n = WHOLE_TABLE_CACHE_MIN_COMMANDS;
    assert!(whole_table_cache(ResolvedBackend::Nft, n, 0));
    assert!(whole_table_cache(ResolvedBackend::Nft, n, n));
    assert!(!whole_table_cache(ResolvedBackend::Nft, n - 1, 0));
    // A table bigger than the script costs more to fetch than it saves.
    assert!(!whole_table_cache(ResolvedBackend::Nft, n, n + 1));
    // iptables-legacy reads the whole table anyway.
    assert!(!whole_table_cache(ResolvedBackend::Legacy, 10 * n, 0));
}

/// A chain of `n` rules plus a hook in FORWARD.
fn big_desired(t: &mut IptablesTable, n: usize) {
    t.set_chain(Chain::new(
        "cali-big",
        (0..n).map(|_| rule("tcp", Action::Accept)).collect(),
    ));
    t.set_insert_rules(
        "FORWARD",
        vec![Rule::new(
            MatchCriteria::new(),
            Action::Jump("cali-big".into()),
        )],
    );
}

#[test]
fn big_script_on_empty_table_asks_for_whole_table_cache() {
    // iptables-nft-save shows built-in chains the kernel may not have, with
    // zero counters: the one we hook is declared so that it is created.
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = fake_table(&fake, Default::default());
    big_desired(&mut t, WHOLE_TABLE_CACHE_MIN_COMMANDS);
    t.apply().unwrap();
    let scripts = restores(&fake);
    let lines: Vec<&str> = scripts[0].lines().collect();
    assert_eq!(
        &lines[..4],
        ["*filter", "-S", ":FORWARD - [0:0]", ":cali-big - -"]
    );

    // The next, small, change names its chains as before.
    fake.clear_calls();
    big_desired(&mut t, WHOLE_TABLE_CACHE_MIN_COMMANDS - 1);
    t.apply().unwrap();
    let scripts = restores(&fake);
    assert_eq!(scripts[0].lines().nth(1), Some("-D cali-big 1000"));

    // A built-in chain that has counted packets exists: not declared, so
    // its counters are left alone.
    let fake = fake_with_save(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [3:180]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
    );
    let mut t = fake_table(&fake, Default::default());
    big_desired(&mut t, WHOLE_TABLE_CACHE_MIN_COMMANDS);
    t.apply().unwrap();
    let lines: Vec<String> = restores(&fake)[0]
        .lines()
        .take(3)
        .map(String::from)
        .collect();
    assert_eq!(lines, ["*filter", "-S", ":cali-big - -"]);

    // A small script on an empty table: no `-S`.
    let fake = fake_with_save(EMPTY_FILTER);
    let mut t = fake_table(&fake, Default::default());
    big_desired(&mut t, 10);
    t.apply().unwrap();
    assert!(!restores(&fake)[0].contains("-S"));
}

mod kernel {
    use super::*;
    use crate::dataplane::kernel::testns::TestNetns;

    fn tools(b: ResolvedBackend) -> Vec<&'static str> {
        match b {
            ResolvedBackend::Nft => vec!["iptables-nft-save", "iptables-nft-restore"],
            ResolvedBackend::Legacy => vec!["iptables-legacy-save", "iptables-legacy-restore"],
        }
    }

    fn table(ns: &TestNetns, b: ResolvedBackend, mode: IptablesMode) -> IptablesTable {
        IptablesTable::new(
            "filter",
            IpVersion::V4,
            b,
            mode,
            ns.commands("iptables"),
            IptablesOptions::default(),
        )
    }

    fn save_cmd(b: ResolvedBackend) -> &'static str {
        match b {
            ResolvedBackend::Nft => "iptables-nft-save",
            ResolvedBackend::Legacy => "iptables-legacy-save",
        }
    }

    /// (packets, line) for each rule line of `chain` in `iptables-save -c`.
    fn counters(ns: &TestNetns, b: ResolvedBackend, chain: &str) -> Vec<(u64, String)> {
        ns.sh(save_cmd(b), &["-c", "-t", "filter"])
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix('[')?;
                let (c, line) = rest.split_once("] ")?;
                if !line.starts_with(&format!("-A {chain} ")) {
                    return None;
                }
                let pkts = c.split(':').next()?.parse().ok()?;
                Some((pkts, line.to_string()))
            })
            .collect()
    }

    fn in_chain(last_proto: &str) -> Chain {
        Chain::new(
            "cali-in",
            vec![
                rule("icmp", Action::Jump("cali-count".into())),
                rule(last_proto, Action::Drop),
            ],
        )
    }

    fn program_and_check_counters(b: ResolvedBackend) {
        let ns = TestNetns::create();
        let mut t = table(&ns, b, IptablesMode::Program);
        t.set_chain(Chain::new("cali-count", vec![]));
        t.set_chain(in_chain("udp"));
        t.set_insert_rules(
            "INPUT",
            vec![Rule::new(
                MatchCriteria::new(),
                Action::Jump("cali-in".into()),
            )],
        );
        let s = t.apply().unwrap();
        assert_eq!(s.transactions, 1);
        let saved = ns.sh(save_cmd(b), &["-t", "filter"]);
        assert!(
            saved.contains(":cali-in") && saved.contains(":cali-count"),
            "{saved}"
        );
        assert!(
            saved
                .lines()
                .any(|l| l.starts_with("-A INPUT -m comment --comment \"cali:")),
            "{saved}"
        );

        // No change: nothing written, even after a forced read-back.
        assert!(t.apply().unwrap().no_writes());
        t.queue_resync();
        let s = t.apply().unwrap();
        assert_eq!(s.read_backs, 1);
        assert!(s.no_writes(), "{s:?}");

        // Traffic through the first rule.
        ns.sh("ping", &["-c", "3", "-i", "0.2", "-W", "1", "127.0.0.1"]);
        let before = counters(&ns, b, "cali-in");
        assert_eq!(before.len(), 2);
        assert!(before[0].0 >= 3, "{before:?}");

        // Change only the last rule: one rule rewritten, first keeps counters.
        t.set_chain(in_chain("tcp"));
        let s = t.apply().unwrap();
        assert_eq!(
            (s.rules_written, s.rules_deleted, s.transactions),
            (1, 0, 1)
        );
        let after = counters(&ns, b, "cali-in");
        assert_eq!(after[0], before[0], "unchanged rule must keep its counters");
        assert!(after[1].1.contains("-p tcp"));

        // A fresh driver with no memory and a different desired state.
        ns.sh(
            "sh",
            &[
                "-c",
                &format!(
                    "printf '*filter\\n:KEEP-ME - [0:0]\\n-A KEEP-ME -j ACCEPT\\n-A INPUT -s 1.2.3.4/32 -j ACCEPT\\nCOMMIT\\n' | {} --noflush",
                    save_cmd(b).replace("save", "restore")
                ),
            ],
        );
        let mut fresh = table(&ns, b, IptablesMode::Program);
        fresh.set_chain(Chain::new("cali-new", vec![rule("tcp", Action::Accept)]));
        let s = fresh.apply().unwrap();
        assert_eq!(s.chains_deleted, 2);
        let saved = ns.sh(save_cmd(b), &["-t", "filter"]);
        assert!(
            !saved.contains("cali-in") && !saved.contains("cali-count"),
            "{saved}"
        );
        assert!(saved.contains(":cali-new"));
        assert!(saved.contains("-A KEEP-ME -j ACCEPT"), "{saved}");
        assert!(
            saved.contains("-A INPUT -s 1.2.3.4/32 -j ACCEPT"),
            "{saved}"
        );
        assert!(
            !saved.contains("cali:") || !saved.contains("-A INPUT -m comment"),
            "{saved}"
        );
    }

    #[test]
    fn kernel_iptables_nft_program_counters_and_sweep() {
        felix_netns::require!(netns tools(ResolvedBackend::Nft));
        program_and_check_counters(ResolvedBackend::Nft);
    }

    #[test]
    fn kernel_iptables_legacy_program_counters_and_sweep() {
        felix_netns::require!(netns tools(ResolvedBackend::Legacy));
        program_and_check_counters(ResolvedBackend::Legacy);
    }

    #[test]
    fn kernel_iptables_backend_switch_leaves_nothing_behind() {
        let mut all = tools(ResolvedBackend::Nft);
        all.extend(tools(ResolvedBackend::Legacy));
        felix_netns::require!(netns all);
        let ns = TestNetns::create();
        let program = |t: &mut IptablesTable| {
            t.set_chain(Chain::new("cali-x", vec![rule("tcp", Action::Accept)]));
            t.set_insert_rules(
                "FORWARD",
                vec![Rule::new(
                    MatchCriteria::new(),
                    Action::Jump("cali-x".into()),
                )],
            );
            t.apply().unwrap();
        };
        for (from, to) in [
            (ResolvedBackend::Legacy, ResolvedBackend::Nft),
            (ResolvedBackend::Nft, ResolvedBackend::Legacy),
        ] {
            program(&mut table(&ns, from, IptablesMode::Program));
            assert!(ns.sh(save_cmd(from), &["-t", "filter"]).contains("cali-x"));
            // Restart on the other backend: program it and sweep the old one.
            program(&mut table(&ns, to, IptablesMode::Program));
            let mut cleanup = table(&ns, from, IptablesMode::CleanupOnly);
            let s = cleanup.apply().unwrap();
            assert_eq!(s.chains_deleted, 1, "{from:?}");
            let old = ns.sh(save_cmd(from), &["-t", "filter"]);
            assert!(!old.contains("cali"), "{old}");
            assert!(ns.sh(save_cmd(to), &["-t", "filter"]).contains("cali-x"));
            // Clear the programmed side for the next round.
            let mut c = table(&ns, to, IptablesMode::CleanupOnly);
            c.apply().unwrap();
        }
    }
    /// Rule lines of `chain` in `iptables-save -t filter` order.
    fn chain_lines(ns: &TestNetns, b: ResolvedBackend, chain: &str) -> Vec<String> {
        let prefix = format!("-A {chain} ");
        ns.sh(save_cmd(b), &["-t", "filter"])
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(str::to_string)
            .collect()
    }

    fn mode_table(ns: &TestNetns, b: ResolvedBackend, mode: ChainInsertMode) -> IptablesTable {
        IptablesTable::new(
            "filter",
            IpVersion::V4,
            b,
            IptablesMode::Program,
            ns.commands("iptables"),
            IptablesOptions {
                insert_mode: mode,
                ..IptablesOptions::default()
            },
        )
    }

    fn cim_append_then_insert(b: ResolvedBackend) {
        let ns = TestNetns::create_tagged("cim");
        ns.sh(
            "sh",
            &[
                "-c",
                &format!(
                    "printf '*filter\\n-A INPUT -s 1.2.3.4/32 -j ACCEPT\\n-A FORWARD -s 5.6.7.8/32 -j DROP\\nCOMMIT\\n' | {} --noflush",
                    save_cmd(b).replace("save", "restore")
                ),
            ],
        );
        let foreign_in = "-A INPUT -s 1.2.3.4/32 -j ACCEPT";
        let foreign_fwd = "-A FORWARD -s 5.6.7.8/32 -j DROP";
        let program = |t: &mut IptablesTable| {
            t.set_chain(Chain::new("cali-x", vec![rule("tcp", Action::Accept)]));
            for k in ["INPUT", "FORWARD"] {
                t.set_insert_rules(
                    k,
                    vec![Rule::new(
                        MatchCriteria::new(),
                        Action::Jump("cali-x".into()),
                    )],
                );
            }
            t.apply().unwrap()
        };
        let is_hook = |l: &str| l.contains("--comment \"cali:") && l.ends_with("-j cali-x");

        // Append: our hook after the foreign rule, which is untouched.
        let mut t = mode_table(&ns, b, ChainInsertMode::Append);
        program(&mut t);
        for (k, foreign) in [("INPUT", foreign_in), ("FORWARD", foreign_fwd)] {
            let lines = chain_lines(&ns, b, k);
            assert_eq!(lines.len(), 2, "{k}: {lines:?}");
            assert_eq!(lines[0], foreign, "{k}: {lines:?}");
            assert!(is_hook(&lines[1]), "{k}: {lines:?}");
        }
        // A fresh read-back finds everything in place.
        t.queue_resync();
        assert!(t.apply().unwrap().no_writes());

        // Restart in insert mode: the hook moves to the top, one copy.
        let mut t = mode_table(&ns, b, ChainInsertMode::Insert);
        let s = program(&mut t);
        assert_eq!((s.rules_deleted, s.rules_written), (2, 2), "{s:?}");
        for (k, foreign) in [("INPUT", foreign_in), ("FORWARD", foreign_fwd)] {
            let lines = chain_lines(&ns, b, k);
            assert_eq!(lines.len(), 2, "{k}: {lines:?}");
            assert!(is_hook(&lines[0]), "{k}: {lines:?}");
            assert_eq!(lines[1], foreign, "{k}: {lines:?}");
        }
        t.queue_resync();
        assert!(t.apply().unwrap().no_writes());

        // Someone inserts a rule above our hook: the next refresh puts ours
        // back on top, still one copy, the newcomer kept.
        ns.sh(
            "sh",
            &[
                "-c",
                &format!(
                    "printf '*filter\\n-I INPUT 1 -s 9.9.9.9/32 -j ACCEPT\\nCOMMIT\\n' | {} --noflush",
                    save_cmd(b).replace("save", "restore")
                ),
            ],
        );
        t.queue_resync();
        let s = t.apply().unwrap();
        assert_eq!((s.rules_deleted, s.rules_written), (1, 1), "{s:?}");
        let lines = chain_lines(&ns, b, "INPUT");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(is_hook(&lines[0]), "{lines:?}");
        assert_eq!(lines[1], "-A INPUT -s 9.9.9.9/32 -j ACCEPT");
        assert_eq!(lines[2], foreign_in);
    }

    #[test]
    fn kernel_iptables_nft_cim_append_then_insert() {
        felix_netns::require!(netns tools(ResolvedBackend::Nft));
        cim_append_then_insert(ResolvedBackend::Nft);
    }

    #[test]
    fn kernel_iptables_legacy_cim_append_then_insert() {
        felix_netns::require!(netns tools(ResolvedBackend::Legacy));
        cim_append_then_insert(ResolvedBackend::Legacy);
    }

    /// A script big enough for the whole-table cache, on a table that does
    /// not exist yet and on one with a foreign policy and rule.
    #[test]
    fn kernel_iptables_nft_big_script_creates_and_keeps_builtins() {
        let b = ResolvedBackend::Nft;
        felix_netns::require!(netns tools(b));
        let ns = TestNetns::create_tagged("big");
        let n = WHOLE_TABLE_CACHE_MIN_COMMANDS + 10;
        let mut t = table(&ns, b, IptablesMode::Program);
        big_desired(&mut t, n);
        t.apply().unwrap();
        assert_eq!(chain_lines(&ns, b, "cali-big").len(), n);
        let fwd = chain_lines(&ns, b, "FORWARD");
        assert_eq!(fwd.len(), 1, "{fwd:?}");
        assert!(fwd[0].ends_with("-j cali-big"), "{fwd:?}");

        // Start over with other software's policy and rule in place.
        let mut c = table(&ns, b, IptablesMode::CleanupOnly);
        c.apply().unwrap();
        ns.sh("iptables-nft", &["-P", "FORWARD", "DROP"]);
        ns.sh(
            "iptables-nft",
            &["-A", "FORWARD", "-s", "5.6.7.8/32", "-j", "DROP"],
        );
        let mut t = table(&ns, b, IptablesMode::Program);
        big_desired(&mut t, n);
        t.apply().unwrap();
        let saved = ns.sh(save_cmd(b), &["-t", "filter"]);
        assert!(saved.contains(":FORWARD DROP"), "{saved}");
        let fwd = chain_lines(&ns, b, "FORWARD");
        assert_eq!(fwd.len(), 2, "{fwd:?}");
        assert!(fwd[0].ends_with("-j cali-big"), "{fwd:?}");
        assert_eq!(fwd[1], "-A FORWARD -s 5.6.7.8/32 -j DROP");
        assert_eq!(chain_lines(&ns, b, "cali-big").len(), n);
    }
}

/// A fake kernel that refuses any script holding an SCTP rule (test runs
/// included), standing in for a policy the kernel cannot load.
fn sctp_refusing_fake() -> Arc<ScriptedCommands> {
    ScriptedCommands::new(move |req: &CommandRequest| {
        if req.program.contains("save") {
            return FakeResponse::Ok(EMPTY_FILTER.into());
        }
        let script = String::from_utf8(req.stdin.clone().unwrap_or_default()).unwrap();
        if script.contains("-p sctp") {
            FakeResponse::Fail(2, "iptables-restore: line 3 failed\n".into())
        } else {
            FakeResponse::Ok(String::new())
        }
    })
}

/// Item 3 (iptables): one refused policy chain is programmed as a drop of
/// everything, the rest of the transaction is programmed, the refusal is
/// reported, and the chain is retried only when its content changes.
#[test]
fn refused_policy_chain_fails_closed_alone_and_everything_else_is_programmed() {
    let fake = sctp_refusing_fake();
    let mut t = fake_table(&fake, Default::default());
    t.set_chain(Chain::new(
        "cali-pi-bad",
        vec![rule("sctp", Action::Accept)],
    ));
    t.set_chain(Chain::new(
        "cali-pi-good",
        vec![rule("tcp", Action::Accept)],
    ));
    t.set_chain(Chain::new(
        "cali-tw-cali1",
        vec![
            Rule::new(MatchCriteria::new(), Action::Jump("cali-pi-bad".into())),
            Rule::new(MatchCriteria::new(), Action::Jump("cali-pi-good".into())),
        ],
    ));
    let stats = t.apply().expect("the rest is programmed");
    assert_eq!(stats.transactions, 1);
    let rejected = t.rejected_chains();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].chain, "cali-pi-bad");
    assert!(
        rejected[0].message.contains("line 3 failed"),
        "{rejected:?}"
    );
    let written = restores(&fake)
        .into_iter()
        .rfind(|s| !s.contains("sctp"))
        .unwrap();
    assert!(written.contains("-A cali-pi-good"), "{written}");
    assert!(written.contains("-A cali-tw-cali1"), "{written}");
    let bad: Vec<&str> = written
        .lines()
        .filter(|l| l.starts_with("-A cali-pi-bad"))
        .collect();
    assert_eq!(bad.len(), 1, "{written}");
    assert!(bad[0].ends_with("--jump DROP"), "{written}");
    // The bad chain was found by dry runs.
    assert!(fake
        .calls()
        .iter()
        .any(|c| c.args.iter().any(|a| a == "--test")));

    // Unchanged content is not retried.
    fake.clear_calls();
    t.set_chain(Chain::new(
        "cali-pi-bad",
        vec![rule("sctp", Action::Accept)],
    ));
    assert!(!t.is_dirty());
    t.apply().unwrap();
    assert!(restores(&fake).is_empty());

    // Changed content is retried, and the quarantine ends.
    t.set_chain(Chain::new("cali-pi-bad", vec![rule("udp", Action::Accept)]));
    t.apply().unwrap();
    assert!(t.rejected_chains().is_empty());
    let last = restores(&fake).pop().unwrap();
    assert!(last.contains("-p udp"), "{last}");
}

/// A refusal that no single policy chain explains keeps the old path:
/// retries, then the error (and so the supervisor's fail-closed exit).
#[test]
fn refusal_not_attributable_to_a_chain_still_gives_up() {
    let fake = ScriptedCommands::new(move |req: &CommandRequest| {
        if req.program.contains("save") {
            FakeResponse::Ok(EMPTY_FILTER.into())
        } else if req.args.iter().any(|a| a == "--test") {
            FakeResponse::Ok(String::new())
        } else {
            FakeResponse::Fail(4, "Resource temporarily unavailable".into())
        }
    });
    let mut t = fake_table(&fake, Default::default());
    t.set_chain(Chain::new("cali-pi-a", vec![rule("tcp", Action::Accept)]));
    assert!(matches!(
        t.apply(),
        Err(TableError::GaveUp { attempts: 11, .. })
    ));
    assert!(t.rejected_chains().is_empty());
    // One dry run (all candidates together) for the first refusal only.
    let dry = fake
        .calls()
        .iter()
        .filter(|c| c.args.iter().any(|a| a == "--test"))
        .count();
    assert_eq!(dry, 1);
}
