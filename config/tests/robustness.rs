//! Arbitrary input never panics and always yields at most one error per
//! entry, with single-line messages.

use felix_config::{parse_config_file, Config, Source, PARAMS};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn any_source() -> impl Strategy<Value = Source> {
    prop::sample::select(vec![
        Source::DatastoreGlobal,
        Source::DatastorePerHost,
        Source::ConfigFile,
        Source::Environment,
    ])
}

fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            PARAMS
                .iter()
                .map(|p| p.name.to_string())
                .collect::<Vec<_>>()
        ),
        "[A-Za-z]{1,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn build_never_panics_and_reports_at_most_one_error_per_entry(
        entries in prop::collection::vec((any_source(), any_name(), "\\PC{0,24}|[0-9a-z:,./-]{0,16}"), 0..24)
    ) {
        let mut layers: BTreeMap<Source, BTreeMap<String, String>> = BTreeMap::new();
        for (s, n, v) in &entries {
            layers.entry(*s).or_default().insert(n.clone(), v.clone());
        }
        let total: usize = layers.values().map(BTreeMap::len).sum();
        let layers: Vec<_> = layers.into_iter().collect();
        let (cfg, errs) = Config::build(&layers);
        prop_assert!(errs.len() <= total);
        for e in &errs {
            prop_assert!(!e.to_string().contains('\n'));
        }
        // Every effective value still has its parameter's shape.
        for p in felix_config::Param::ALL {
            prop_assert_eq!(cfg.value(*p).shape(), p.spec().kind.shape());
        }
    }

    #[test]
    fn config_file_parser_never_panics(text in "\\PC{0,200}") {
        let _ = parse_config_file(&text);
    }
}
