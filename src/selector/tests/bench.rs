//! Micro-benchmark: prints evaluations per second for a three-term
//! selector. Ignored by default; run with
//! `cargo test -p felix --lib selector::tests::bench -- --ignored --nocapture`
//! (add `--release` for representative figures). Prints, never asserts.

use std::hint::black_box;

use super::super::{parse, WithParents};
use super::labels;

#[test]
#[ignore = "micro-benchmark; prints figures"]
fn bench_evaluate_three_term_selector() {
    let sel = parse("app == 'web' && tier in {'fe', 'be', 'db'} && !has(quarantine)").unwrap();
    let own = labels(&[
        ("app", "web"),
        ("tier", "be"),
        ("projectcalico.org/namespace", "default"),
        ("projectcalico.org/orchestrator", "k8s"),
        ("pod-template-hash", "5d8f9c7b6"),
        ("version", "v1"),
    ]);
    let profile = labels(&[("env", "prod"), ("team", "payments")]);
    let parents = [&profile];
    let view = WithParents {
        own: &own,
        parents: &parents,
    };
    const N: u32 = 2_000_000;

    let start = felix_actors::clock::real_now();
    let mut hits = 0u32;
    for _ in 0..N {
        hits += u32::from(sel.evaluate(black_box(&own)));
    }
    let map_rate = f64::from(N) / start.elapsed().as_secs_f64();

    let start = felix_actors::clock::real_now();
    for _ in 0..N {
        hits += u32::from(sel.evaluate(black_box(&view)));
    }
    let view_rate = f64::from(N) / start.elapsed().as_secs_f64();

    // Baseline on the same machine: the three map lookups alone.
    let start = felix_actors::clock::real_now();
    for _ in 0..N {
        let m = black_box(&own);
        hits += u32::from(
            m.get("app").is_some() && m.get("tier").is_some() && m.get("quarantine").is_none(),
        );
    }
    let baseline_rate = f64::from(N) / start.elapsed().as_secs_f64();

    let start = felix_actors::clock::real_now();
    let parses = 100_000u32;
    for _ in 0..parses {
        black_box(parse(black_box(sel.canonical())).ok());
    }
    let parse_rate = f64::from(parses) / start.elapsed().as_secs_f64();

    println!(
        "selector bench: {:.1} M evals/s (BTreeMap), {:.1} M evals/s (WithParents), \
         {:.1} M/s baseline (3 bare lookups), {:.0} k parses/s; hits={hits}",
        map_rate / 1e6,
        view_rate / 1e6,
        baseline_rate / 1e6,
        parse_rate / 1e3
    );
}
