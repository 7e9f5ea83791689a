//! The step every table driver actor shares: push what changed in its desired-state cell into
//! its [`Table`], and report the chains the table quarantined.
//!
//! Only referenced chains are pushed (as upstream's tables program them): a desired chain is
//! written to the kernel while some desired chain or inserted rule jumps or goes to it. The
//! references are counted without transitivity: a chain referenced only by an unreferenced
//! chain is still written (it costs nothing on the packet path and keeps the count cheap).
//! Policy chains are the usual beneficiaries: the outbound chains of every policy go into the
//! mangle table for host endpoints, and without host endpoints nothing there jumps to them.

use felix_actors::ActorSeam;

use crate::dataplane::desired::{Pushed, TableDesired};
use crate::dataplane::generictables::{Chain, Rule, Table};
use crate::hash::{FastMap, FastSet};

/// Reports the chains `table` programs as drop-everything because the
/// kernel refused them (`/status`, `felix_dataplane_rejected_chains`).
pub(crate) fn report_rejected(table: &dyn Table, seam: &ActorSeam) {
    seam.report_rejected_chains(
        table
            .rejected_chains()
            .into_iter()
            .map(|r| felix_actors::RejectedChain {
                chain: r.chain,
                kernel_error: r.message,
            })
            .collect(),
    );
}

/// What a driver has pushed of one table's desired state: the generations of its chains and
/// inserted rules, and which desired chains are referenced and so written.
///
/// References are counted on the names the table sees (after the driver's renaming: the
/// nftables driver puts every name in its layer, and a desired chain or a jump target may or
/// may not carry the layer already).
///
/// Invariants:
/// * **Only referenced chains are written**: after [`push_table`], the table holds exactly the
///   desired chains that some desired chain or inserted rule jumps or goes to.
/// * **References follow every change**: a chain that gains its first reference is written
///   in the same push as the rule that references it, and one that loses its last is removed
///   in the same push, whatever order the changes arrived in.
#[derive(Debug, Default)]
pub(crate) struct PushedTable {
    chains: Pushed<String>,
    inserts: Pushed<String>,
    refs: References,
    /// The desired chain (its desired name) behind each table name.
    desired_name: FastMap<String, String>,
    /// Chains (table names) the table was last told to hold.
    written: FastSet<String>,
}

/// Jumps and gotos per target chain (table names), from desired chains and inserted rules.
#[derive(Debug, Default)]
struct References {
    /// Per desired chain, the distinct chains its rules reference.
    from_chain: FastMap<String, Vec<String>>,
    /// Per kernel chain with inserted rules, the distinct chains those rules reference.
    from_insert: FastMap<String, Vec<String>>,
    /// Referencing chains (and kernel chains with inserts) per target.
    count: FastMap<String, usize>,
}

fn targets(rules: &[Rule], table_name: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut out: Vec<String> = rules
        .iter()
        .filter_map(|r| r.jump_target().map(table_name))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

impl References {
    fn count(&self, chain: &str) -> usize {
        self.count.get(chain).copied().unwrap_or(0)
    }

    /// Replaces the references made by `source` (a chain, or a kernel chain's inserts) with
    /// `new`; every target whose count crossed zero either way goes into `touched`.
    fn replace(
        &mut self,
        from_insert: bool,
        source: &str,
        new: Vec<String>,
        touched: &mut Vec<String>,
    ) {
        let map = if from_insert {
            &mut self.from_insert
        } else {
            &mut self.from_chain
        };
        let old = if new.is_empty() {
            map.remove(source).unwrap_or_default()
        } else {
            map.insert(source.to_string(), new.clone())
                .unwrap_or_default()
        };
        for t in &new {
            let c = self.count.entry(t.clone()).or_insert(0);
            *c += 1;
            if *c == 1 {
                touched.push(t.clone());
            }
        }
        for t in old {
            if let Some(c) = self.count.get_mut(&t) {
                *c -= 1;
                if *c == 0 {
                    self.count.remove(&t);
                    touched.push(t);
                }
            }
        }
    }
}

/// Pushes what changed in `desired` into `table` (see [`PushedTable`]).  `rename` gives the
/// table's form of a chain (name and jump targets), `rename_rules` that of inserted rules.
pub(crate) fn push_table(
    desired: &TableDesired,
    pushed: &mut PushedTable,
    table: &mut dyn Table,
    rename: &dyn Fn(&Chain) -> Chain,
    insert_target: &dyn Fn(&str) -> Option<String>,
    rename_rules: &dyn Fn(&[Rule]) -> Vec<Rule>,
) {
    let table_name = |name: &str| rename(&Chain::new(name, Vec::new())).name;
    // Chains (table names) whose written state may change: their content changed, they
    // went, or their reference count crossed zero.
    let mut touched: Vec<String> = Vec::new();
    let mut content_changed: FastSet<String> = FastSet::default();
    let d = pushed.chains.diff(&desired.chains);
    for name in d.removed {
        pushed.refs.replace(false, &name, Vec::new(), &mut touched);
        let t = table_name(&name);
        if pushed.desired_name.get(&t) == Some(&name) {
            pushed.desired_name.remove(&t);
        }
        touched.push(t);
    }
    for (name, c) in d.changed {
        let refs = targets(&c.rules, &table_name);
        pushed.refs.replace(false, name, refs, &mut touched);
        let t = table_name(name);
        pushed.desired_name.insert(t.clone(), name.clone());
        content_changed.insert(t.clone());
        touched.push(t);
    }
    pushed.chains.mark_pushed(&desired.chains);

    let d = pushed.inserts.diff(&desired.inserts);
    for kc in d.removed {
        pushed.refs.replace(true, &kc, Vec::new(), &mut touched);
        if let Some(t) = insert_target(&kc) {
            table.set_insert_rules(&t, Vec::new());
        }
    }
    for (kc, rules) in d.changed {
        let refs = targets(rules, &table_name);
        pushed.refs.replace(true, kc, refs, &mut touched);
        match insert_target(kc) {
            Some(t) => table.set_insert_rules(&t, rename_rules(rules)),
            None => tracing::warn!(chain = %kc, "no base chain for inserted rules; skipped"),
        }
    }
    pushed.inserts.mark_pushed(&desired.inserts);

    touched.sort_unstable();
    touched.dedup();
    for name in touched {
        let wanted = pushed
            .desired_name
            .get(&name)
            .and_then(|d| desired.chains.get(d))
            .filter(|_| pushed.refs.count(&name) > 0);
        match wanted {
            Some(c) => {
                if pushed.written.insert(name.clone()) || content_changed.contains(&name) {
                    table.set_chain(rename(c));
                }
            }
            None => {
                if pushed.written.remove(&name) {
                    table.remove_chain(&name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::generictables::{Action, ApplyStats, MatchCriteria, TableError};
    use crate::dataplane::IpVersion;
    use std::collections::BTreeMap;

    /// A table that records what it was told.
    #[derive(Default)]
    struct Recorder {
        chains: BTreeMap<String, Chain>,
        inserts: BTreeMap<String, Vec<Rule>>,
        sets: usize,
    }

    impl Table for Recorder {
        fn name(&self) -> String {
            "recorder".into()
        }
        fn ip_version(&self) -> IpVersion {
            IpVersion::V4
        }
        fn set_chain(&mut self, chain: Chain) {
            self.sets += 1;
            self.chains.insert(chain.name.clone(), chain);
        }
        fn remove_chain(&mut self, name: &str) {
            self.chains.remove(name);
        }
        fn set_insert_rules(&mut self, kernel_chain: &str, rules: Vec<Rule>) {
            if rules.is_empty() {
                self.inserts.remove(kernel_chain);
            } else {
                self.inserts.insert(kernel_chain.to_string(), rules);
            }
        }
        fn queue_resync(&mut self) {}
        fn apply(&mut self) -> Result<ApplyStats, TableError> {
            Ok(ApplyStats::default())
        }
        fn is_dirty(&self) -> bool {
            false
        }
    }

    fn jump(to: &str) -> Rule {
        Rule::new(MatchCriteria::default(), Action::Jump(to.into()))
    }

    fn chain(name: &str, to: &[&str]) -> Chain {
        Chain::new(name, to.iter().map(|t| jump(t)).collect())
    }

    fn push(d: &TableDesired, p: &mut PushedTable, t: &mut Recorder) {
        push_table(d, p, t, &|c| c.clone(), &|k| Some(k.to_string()), &|r| {
            r.to_vec()
        });
    }

    /// The chains `pushed` holds in its table (table names).
    fn written(pushed: &PushedTable) -> std::collections::BTreeSet<String> {
        pushed.written.iter().cloned().collect()
    }

    fn names(t: &Recorder) -> Vec<&str> {
        t.chains.keys().map(String::as_str).collect()
    }

    /// Two policies' chains and an endpoint chain jumping to the first, reached from an
    /// inserted rule; pushed once.
    fn pushed_fixture() -> (TableDesired, PushedTable, Recorder) {
        let mut d = TableDesired::default();
        d.chains
            .set("m", "cali-po-a".into(), chain("cali-po-a", &[]));
        d.chains
            .set("m", "cali-po-b".into(), chain("cali-po-b", &[]));
        d.chains
            .set("m", "cali-fw-x".into(), chain("cali-fw-x", &["cali-po-a"]));
        d.inserts
            .set("m", "FORWARD".into(), vec![jump("cali-fw-x")]);
        let (mut p, mut t) = (PushedTable::default(), Recorder::default());
        push(&d, &mut p, &mut t);
        (d, p, t)
    }

    #[test]
    fn only_referenced_chains_are_written() {
        let (mut d, mut p, mut t) = pushed_fixture();
        assert_eq!(names(&t), ["cali-fw-x", "cali-po-a"]);
        assert_eq!(
            written(&p).into_iter().collect::<Vec<_>>(),
            ["cali-fw-x", "cali-po-a"]
        );
        // The count is not transitive: a chain an unreferenced chain jumps to is written.
        d.chains.set(
            "m",
            "cali-unused".into(),
            chain("cali-unused", &["cali-po-b"]),
        );
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["cali-fw-x", "cali-po-a", "cali-po-b"]);
    }

    /// The nftables driver's renaming: every name in layer `filter`, whether or not the
    /// desired name or the jump target carries it already.
    #[test]
    fn references_are_counted_on_the_names_the_table_sees() {
        let layered = |n: &str| {
            if n.starts_with("filter-") {
                n.to_string()
            } else {
                format!("filter-{n}")
            }
        };
        let rename = |c: &Chain| {
            let rules = c
                .rules
                .iter()
                .map(|r| match &r.action {
                    Action::Jump(t) => jump(&layered(t)),
                    _ => r.clone(),
                })
                .collect();
            Chain::new(&layered(&c.name), rules)
        };
        let mut d = TableDesired::default();
        // The dispatch chain names its target in the layer; the endpoint chain's desired name
        // does not carry it (BPF mode's endpoint chains).
        d.chains
            .set("m", "cali-fw-x".into(), chain("cali-fw-x", &[]));
        d.chains.set(
            "m",
            "filter-cali-dispatch".into(),
            chain("filter-cali-dispatch", &["filter-cali-fw-x"]),
        );
        d.inserts
            .set("m", "FORWARD".into(), vec![jump("cali-dispatch")]);
        let (mut p, mut t) = (PushedTable::default(), Recorder::default());
        let push = |d: &TableDesired, p: &mut PushedTable, t: &mut Recorder| {
            push_table(d, p, t, &rename, &|k| Some(layered(k)), &|r| {
                r.iter()
                    .map(|r| match &r.action {
                        Action::Jump(x) => jump(&layered(x)),
                        _ => r.clone(),
                    })
                    .collect()
            })
        };
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["filter-cali-dispatch", "filter-cali-fw-x"]);
        d.chains.set(
            "m",
            "filter-cali-dispatch".into(),
            chain("filter-cali-dispatch", &[]),
        );
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["filter-cali-dispatch"]);
    }

    #[test]
    fn references_follow_every_change() {
        let (mut d, mut p, mut t) = pushed_fixture();
        let sets = t.sets;

        // The endpoint moves from policy a to policy b: b is written, a removed, in one push.
        d.chains
            .set("m", "cali-fw-x".into(), chain("cali-fw-x", &["cali-po-b"]));
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["cali-fw-x", "cali-po-b"]);
        assert_eq!(t.sets, sets + 2, "cali-fw-x rewritten, cali-po-b written");

        // An unreferenced chain's content change writes nothing.
        d.chains
            .set("m", "cali-po-a".into(), chain("cali-po-a", &["cali-po-b"]));
        push(&d, &mut p, &mut t);
        assert_eq!(t.sets, sets + 2);
        assert_eq!(names(&t), ["cali-fw-x", "cali-po-b"]);

        // The referenced chain goes from the desired state before its referrer changes: it
        // leaves the table, and comes back when desired again.
        d.chains.remove(&"cali-po-b".to_string());
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["cali-fw-x"]);
        d.chains
            .set("m", "cali-po-b".into(), chain("cali-po-b", &[]));
        push(&d, &mut p, &mut t);
        assert_eq!(names(&t), ["cali-fw-x", "cali-po-b"]);

        // The inserted rule goes: its target loses its only reference and leaves the table;
        // cali-po-b stays while the (desired) cali-fw-x still jumps to it.
        d.inserts.remove(&"FORWARD".to_string());
        push(&d, &mut p, &mut t);
        assert!(t.inserts.is_empty());
        assert_eq!(names(&t), ["cali-po-b"]);
        d.chains.remove(&"cali-po-a".to_string());
        d.chains.remove(&"cali-fw-x".to_string());
        push(&d, &mut p, &mut t);
        assert!(names(&t).is_empty(), "{:?}", names(&t));
        assert!(p.refs.count.values().all(|c| *c > 0));
    }
}
