//! IP-set driver tests: invariants with a scripted seam, and kernel tests
//! in throwaway namespaces.

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::dataplane::kernel::RetryPolicy;
use crate::dataplane::kernel::{CommandRequest, Commands, FakeResponse, ScriptedCommands};
use crate::dataplane::IpVersion;

fn meta(id: &str, t: IpSetType, max: u32) -> IpSetMetadata {
    IpSetMetadata {
        set_id: id.into(),
        set_type: t,
        max_size: max,
    }
}

fn quiet() -> IpSetsOptions {
    IpSetsOptions {
        retry: RetryPolicy {
            max_retries: 9,
            ..RetryPolicy::without_sleeping()
        },
        ..IpSetsOptions::default()
    }
}

fn list_out(name: &str, t: &str, max: u32, members: &[&str]) -> String {
    format!(
        "Name: {name}\nType: {t}\nRevision: 6\nHeader: family inet hashsize 1024 maxelem {max}\n\
Size in memory: 1\nReferences: 0\nNumber of entries: {}\nMembers:\n{}\n",
        members.len(),
        members.join("\n")
    )
}

/// A fake kernel with a name listing and per-set listings.
fn fake(
    names: Arc<Mutex<String>>,
    sets: Arc<Mutex<Vec<(String, String)>>>,
) -> Arc<ScriptedCommands> {
    ScriptedCommands::new(move |req: &CommandRequest| {
        let a: Vec<&str> = req.args.iter().map(String::as_str).collect();
        match a.as_slice() {
            ["list", "-n"] => FakeResponse::Ok(names.lock().clone()),
            ["list", n] => match sets.lock().iter().find(|(k, _)| k == n) {
                Some((_, v)) => FakeResponse::Ok(v.clone()),
                None => FakeResponse::Fail(
                    1,
                    format!("ipset v7: The set with the given name does not exist ({n})"),
                ),
            },
            _ => FakeResponse::Ok(String::new()),
        }
    })
}

fn ops(f: &ScriptedCommands) -> Vec<String> {
    f.calls().into_iter().map(|c| c.args.join(" ")).collect()
}

fn restore_scripts(f: &ScriptedCommands) -> Vec<String> {
    f.calls()
        .into_iter()
        .filter(|c| c.args == ["restore"])
        .map(|c| String::from_utf8(c.stdin.unwrap_or_default()).unwrap())
        .collect()
}

#[test]
fn start_of_day_resync_completes_before_first_write() {
    let names = Arc::new(Mutex::new(
        "cali40s:a\nkube-thing\ncali40s:stale\ncali40s:stale2\n".to_string(),
    ));
    let sets = Arc::new(Mutex::new(vec![
        (
            "cali40s:a".to_string(),
            list_out("cali40s:a", "hash:ip", 1000, &["10.0.0.1", "10.0.0.9"]),
        ),
        (
            "cali40s:stale".to_string(),
            list_out("cali40s:stale", "hash:ip", 1000, &[]),
        ),
        (
            "cali40s:stale2".to_string(),
            list_out("cali40s:stale2", "hash:ip", 1000, &[]),
        ),
    ]));
    let f = fake(names, sets.clone());
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    s.add_or_replace_ip_set(
        meta("s:a", IpSetType::HashIp, 1000),
        vec!["10.0.0.1".into(), "10.0.0.2".into(), "fd00::1".into()],
    );
    // The listing of one set fails once: no write may happen before it is read.
    f.fail_next(2, Some("ipset"));
    let st = s.apply_updates().unwrap();
    let o = ops(&f);
    let first_restore = o.iter().position(|x| x == "restore").unwrap();
    let last_list = o
        .iter()
        .rposition(|x| x.starts_with("list cali40s:a"))
        .unwrap();
    assert!(last_list < first_restore, "{o:?}");
    assert!(o.iter().any(|x| x == "list cali40s:stale"));
    assert!(!o.iter().any(|x| x.contains("kube-thing")));
    assert_eq!(st.restores, 1);
    let sc = &restore_scripts(&f)[0];
    // Only the delta; the IPv6 member was filtered out.
    assert_eq!(sc, "add cali40s:a 10.0.0.2\nCOMMIT\n");
    // Deletions (of members and sets) are not done by apply_updates; set deletions are
    // rate-limited.
    assert!(s.has_pending_deletions());
    f.clear_calls();
    assert!(
        s.apply_deletions().unwrap(),
        "one deletion per call, more pending"
    );
    assert_eq!(ops(&f), vec!["restore", "destroy cali40s:stale"]);
    assert_eq!(
        restore_scripts(&f),
        vec!["del cali40s:a 10.0.0.9 --exist\nCOMMIT\n"]
    );
    f.clear_calls();
    assert!(!s.apply_deletions().unwrap());
    assert_eq!(ops(&f), vec!["destroy cali40s:stale2"]);
}

#[test]
fn failed_write_is_reread_at_must_priority_before_rewrite() {
    let names = Arc::new(Mutex::new(String::new()));
    let sets = Arc::new(Mutex::new(Vec::new()));
    let f = fake(names.clone(), sets.clone());
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    s.add_or_replace_ip_set(
        meta("s:a", IpSetType::HashNet, 100),
        vec!["10.0.0.0/24".into()],
    );
    s.apply_updates().unwrap();
    s.add_members("s:a", vec!["10.1.0.1/32".into()]);
    // Someone changed the set behind our back and our write fails.
    *names.lock() = "cali40s:a\n".into();
    sets.lock().push((
        "cali40s:a".into(),
        list_out("cali40s:a", "hash:net", 100, &["10.0.0.0/24", "10.1.0.1"]),
    ));
    f.clear_calls();
    f.fail_next(1, Some("ipset"));
    let st = s.apply_updates().unwrap();
    let o = ops(&f);
    assert_eq!(o[0], "restore");
    let relist = o
        .iter()
        .position(|x| x == "list cali40s:a")
        .expect("must re-read the failed set");
    assert!(
        o[relist + 1..].iter().all(|x| x != "restore"),
        "after re-read nothing is left to write: {o:?}"
    );
    assert_eq!(st.retries, 1);
    assert!(!s.is_dirty());
}

/// Members are added in the IP-set phase and removed only in the deletions step, after the
/// tables: in between a set holds old and new members (see the driver's module docs).
#[test]
fn members_leave_a_set_only_after_the_tables_phase() {
    let names = Arc::new(Mutex::new(String::new()));
    let sets = Arc::new(Mutex::new(Vec::new()));
    let f = fake(names, sets);
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    s.add_or_replace_ip_set(
        meta("s:q", IpSetType::HashIp, 100),
        vec!["10.0.0.1".into(), "10.0.0.2".into()],
    );
    s.apply_updates().unwrap();
    assert!(!s.has_pending_deletions());

    // One change removes a member and adds another.
    s.remove_members("s:q", vec!["10.0.0.1".into()]);
    s.add_members("s:q", vec!["10.0.0.3".into()]);
    assert!(s.has_pending_deletions(), "the removal is pending at once");
    f.clear_calls();
    s.apply_updates().unwrap();
    assert_eq!(
        restore_scripts(&f),
        vec!["add cali40s:q 10.0.0.3\nCOMMIT\n"]
    );
    assert!(!s.is_dirty(), "nothing more for the IP-set phase");
    assert!(s.has_pending_deletions());

    // The removal's write fails: it stays pending, and the set is re-read before any write.
    f.clear_calls();
    f.fail_next(1, Some("ipset"));
    assert!(s.apply_deletions().is_err());
    assert!(s.has_pending_deletions());
    f.clear_calls();
    s.apply_updates().unwrap();
    assert!(
        ops(&f).contains(&"list cali40s:q".to_string()),
        "{:?}",
        ops(&f)
    );

    // A removal alone (nothing to add) writes nothing in the IP-set phase.
    s.remove_members("s:q", vec!["10.0.0.2".into()]);
    f.clear_calls();
    s.apply_updates().unwrap();
    assert!(restore_scripts(&f).is_empty(), "{:?}", ops(&f));
    f.clear_calls();
    s.apply_deletions().unwrap();
    let scripts = restore_scripts(&f);
    assert_eq!(scripts.len(), 1, "{:?}", ops(&f));
    assert!(
        scripts[0].contains("del cali40s:q 10.0.0.2 --exist\n"),
        "{scripts:?}"
    );
    assert!(!s.has_pending_deletions());
}

#[test]
fn missing_set_is_repaired_in_the_same_apply_as_the_listing() {
    let names = Arc::new(Mutex::new(String::new()));
    let sets = Arc::new(Mutex::new(Vec::new()));
    let f = fake(names.clone(), sets);
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    s.add_or_replace_ip_set(meta("s:a", IpSetType::HashIp, 100), vec!["10.0.0.1".into()]);
    s.apply_updates().unwrap();
    f.clear_calls();
    assert!(s.apply_updates().unwrap().restores == 0);
    // Periodic refresh: the set vanished from the kernel.
    s.queue_resync();
    f.clear_calls();
    let st = s.apply_updates().unwrap();
    assert_eq!((st.name_listings, st.sets_created, st.restores), (1, 1, 1));
    assert!(restore_scripts(&f)[0]
        .starts_with("create cali40s:a hash:ip family inet hashsize 1024 maxelem 100\n"));
}

#[test]
fn hash_size_fits_the_membership() {
    assert_eq!(hash_size_for(0), 1024);
    assert_eq!(hash_size_for(3 * 1024), 1024);
    assert_eq!(hash_size_for(3 * 1024 + 1), 2048);
    // What the kernel grows a 10,000-member set to (`ipset save` says 4096).
    assert_eq!(hash_size_for(10_000), 4096);
    for n in [1usize, 5_000, 100_000, 1 << 20] {
        let h = hash_size_for(n);
        assert!(h.is_power_of_two() && h * 3 >= n, "{n} -> {h}");
    }
}

#[test]
fn a_new_set_is_created_with_a_hash_size_fitted_to_its_members() {
    let names = Arc::new(Mutex::new(String::new()));
    let f = fake(names, Arc::new(Mutex::new(Vec::new())));
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    let members: Vec<String> = (0..10_000u32)
        .map(|i| std::net::Ipv4Addr::from(0x0a00_0000 + 2 * i).to_string())
        .collect();
    s.add_or_replace_ip_set(meta("s:big", IpSetType::HashNet, 1 << 20), members);
    s.apply_updates().unwrap();
    let script = &restore_scripts(&f)[0];
    assert!(
        script
            .starts_with("create cali40s:big hash:net family inet hashsize 4096 maxelem 1048576\n"),
        "{}",
        &script[..120]
    );
}

#[test]
fn metadata_change_goes_through_temp_set_and_swap() {
    let names = Arc::new(Mutex::new("cali40s:a\n".to_string()));
    let sets = Arc::new(Mutex::new(vec![(
        "cali40s:a".to_string(),
        list_out("cali40s:a", "hash:ip", 100, &["10.0.0.1"]),
    )]));
    let f = fake(names, sets);
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V4),
        Commands::standalone(f.clone(), "ipsets-v4"),
        quiet(),
    );
    s.add_or_replace_ip_set(meta("s:a", IpSetType::HashIp, 200), vec!["10.0.0.1".into()]);
    let st = s.apply_updates().unwrap();
    assert_eq!(st.sets_swapped, 1);
    assert_eq!(
        restore_scripts(&f)[0],
        "create cali4t0 hash:ip family inet hashsize 1024 maxelem 200\nadd cali4t0 10.0.0.1\nswap cali40s:a cali4t0\nCOMMIT\n"
    );
    // The temp set (now holding the old contents) is destroyed next time.
    f.clear_calls();
    s.apply_updates().unwrap();
    assert_eq!(ops(&f), vec!["destroy cali4t0"]);
}

#[test]
fn gives_up_with_typed_error_after_all_attempts() {
    let f = fake(
        Arc::new(Mutex::new(String::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let mut s = IpSets::new(
        IpVersionConfig::new(IpVersion::V6),
        Commands::standalone(f.clone(), "ipsets-v6"),
        quiet(),
    );
    s.add_or_replace_ip_set(meta("s:a", IpSetType::HashIp, 10), vec!["fd00::1".into()]);
    f.fail_next(1000, Some("ipset"));
    let e = s.apply_updates().unwrap_err();
    let IpSetsError::GaveUp {
        ipv,
        attempts,
        source,
    } = e;
    assert_eq!((ipv, attempts), (6, 10));
    assert!(source.to_string().contains("ipset list -n"));
}

mod kernel {
    use super::*;
    use crate::dataplane::kernel::testns::TestNetns;

    /// Calls `apply_deletions` while it asks to be called again, at most `max` times (it
    /// also asks while resync work is queued, which only `apply_updates` drains).
    fn ticks(s: &mut IpSets, max: usize) {
        for _ in 0..max {
            if !s.apply_deletions().unwrap() {
                return;
            }
        }
    }

    fn members(ns: &TestNetns, set: &str) -> Vec<String> {
        let out = ns.sh("ipset", &["list", set]);
        let mut m: Vec<String> = out
            .split("Members:\n")
            .nth(1)
            .unwrap_or("")
            .lines()
            .map(str::to_string)
            .collect();
        m.sort();
        m
    }

    #[test]
    fn kernel_ipsets_create_update_swap_delete_and_sweep() {
        felix_netns::require!(netns ["ipset", "iptables-legacy"]);
        let ns = TestNetns::create();
        // Stale state from an earlier Felix, and a foreign set.
        ns.sh("ipset", &["create", "cali40s:stale", "hash:ip"]);
        ns.sh("ipset", &["create", "cali4t7", "hash:ip"]);
        ns.sh("ipset", &["create", "keep-me", "hash:ip"]);
        let mut s = IpSets::new(
            IpVersionConfig::new(IpVersion::V4),
            ns.commands("ipsets-v4"),
            IpSetsOptions::default(),
        );
        s.add_or_replace_ip_set(
            meta("s:web", IpSetType::HashIp, 1024),
            vec!["10.0.0.1".into(), "10.0.0.2".into()],
        );
        s.add_or_replace_ip_set(
            meta("n:nets", IpSetType::HashNet, 1024),
            vec!["10.1.0.0/16".into(), "10.2.0.1/32".into()],
        );
        s.add_or_replace_ip_set(
            meta("p:svc", IpSetType::HashIpPort, 1024),
            vec!["10.0.0.1,tcp:80".into()],
        );
        let st = s.apply_updates().unwrap();
        assert_eq!((st.sets_created, st.restores), (3, 1));
        assert_eq!(members(&ns, "cali40s:web"), vec!["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            members(&ns, "cali40n:nets"),
            vec!["10.1.0.0/16", "10.2.0.1"]
        );
        assert_eq!(members(&ns, "cali40p:svc"), vec!["10.0.0.1,tcp:80"]);
        assert!(
            !ns.sh("ipset", &["list", "-n"]).contains("cali4t7"),
            "leftover temp sets go at once"
        );

        // Unchanged: nothing written, even after a full resync.
        assert_eq!(s.apply_updates().unwrap().restores, 0);
        s.queue_full_resync();
        let st = s.apply_updates().unwrap();
        assert_eq!((st.restores, st.set_listings), (0, 4), "{st:?}");

        // A rule references the set; a maxelem change swaps it in place.
        ns.sh(
            "iptables-legacy",
            &[
                "-A",
                "INPUT",
                "-m",
                "set",
                "--match-set",
                "cali40s:web",
                "src",
                "-j",
                "ACCEPT",
            ],
        );
        s.add_or_replace_ip_set(
            meta("s:web", IpSetType::HashIp, 4096),
            vec!["10.0.0.2".into(), "10.0.0.3".into()],
        );
        let st = s.apply_updates().unwrap();
        assert_eq!(st.sets_swapped, 1);
        assert!(ns
            .sh("ipset", &["list", "cali40s:web"])
            .contains("maxelem 4096"));
        assert_eq!(members(&ns, "cali40s:web"), vec!["10.0.0.2", "10.0.0.3"]);

        // Removing a referenced set: deletion fails and is retried after a
        // resync once the reference has gone.
        s.remove_ip_set("s:web");
        s.apply_updates().unwrap();
        ticks(&mut s, 3);
        assert!(ns.sh("ipset", &["list", "-n"]).contains("cali40s:web"));
        ns.sh("iptables-legacy", &["-F", "INPUT"]);
        // The kernel may drop the rule's reference to the set a moment after the flush:
        // resync and retry, as the driver's ticks do, until the set goes (bounded).
        for _ in 0..100 {
            s.queue_resync();
            s.apply_updates().unwrap();
            ticks(&mut s, 10);
            if !ns.sh("ipset", &["list", "-n"]).contains("cali40s:web") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let names = ns.sh("ipset", &["list", "-n"]);
        assert!(!names.contains("cali40s:web"), "{names}");
        assert!(
            !names.contains("cali40s:stale") && !names.contains("cali4t"),
            "{names}"
        );
        assert!(
            names.contains("keep-me") && names.contains("cali40n:nets"),
            "{names}"
        );
    }
}
