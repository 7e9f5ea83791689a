//! Property tests over generated selectors and arbitrary input.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::{parse, validate};

const KEYS: &[&str] = &["a", "b", "c", "k8s.io/x-y_z"];
const VALUES: &[&str] = &["", "x", "y", "xy", "it's", "say \"hi\"", "caf\u{e9}"];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(str::to_owned)
}

fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", " ", "  ", "\t", " \t"][..])
}

/// A quoted literal for one of `VALUES`, in a random valid quote style.
fn literal() -> impl Strategy<Value = String> {
    (prop::sample::select(VALUES), any::<bool>()).prop_map(|(v, single)| {
        let single = if v.contains('"') {
            true
        } else if v.contains('\'') {
            false
        } else {
            single
        };
        let q = if single { '\'' } else { '"' };
        format!("{q}{v}{q}")
    })
}

/// A single operation, written with random spacing and operator spellings.
fn leaf() -> BoxedStrategy<String> {
    let compare = (
        key(),
        prop::sample::select(
            &[
                "==",
                "!=",
                " contains",
                " starts with",
                " startswith",
                " ends  with",
                " endswith",
            ][..],
        ),
        space(),
        literal(),
    )
        .prop_map(|(k, op, sp, lit)| format!("{k}{op}{sp}{lit}"));
    let set = (
        key(),
        prop::sample::select(&[" in", " not in", " notin"][..]),
        prop::collection::vec(literal(), 0..4),
        any::<bool>(),
        space(),
    )
        .prop_map(|(k, op, lits, trailing_comma, sp)| {
            let mut body = lits.join(&format!(",{sp}"));
            if trailing_comma && !lits.is_empty() {
                body.push(',');
            }
            format!("{k}{op}{sp}{{{sp}{body}{sp}}}")
        });
    let has = (key(), space()).prop_map(|(k, sp)| format!("has({sp}{k}{sp})"));
    let fixed = prop::sample::select(&["all()", "global()", "all( )"][..]).prop_map(str::to_owned);
    prop_oneof![3 => compare, 2 => set, 2 => has, 1 => fixed].boxed()
}

/// Selector text built from leaves with `!`, `&&`, `||` and parentheses.
fn selector_text() -> impl Strategy<Value = String> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            (
                prop::sample::select(&["!", "! ", "!!", "!!!"][..]),
                inner.clone()
            )
                .prop_map(|(bang, s)| format!("{bang}{s}")),
            (inner.clone(), space()).prop_map(|(s, sp)| format!("({sp}{s}{sp})")),
            (prop::collection::vec(inner.clone(), 2..4), space())
                .prop_map(|(v, sp)| v.join(&format!("{sp}&&{sp}"))),
            (prop::collection::vec(inner, 2..4), space())
                .prop_map(|(v, sp)| v.join(&format!("{sp}||{sp}"))),
        ]
    })
}

fn label_set() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        key(),
        prop::sample::select(VALUES).prop_map(str::to_owned),
        0..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The canonical form reparses to itself, except for upstream's
    /// double-negation quirk (`!(!x)` prints as `!!x`, which reparses as
    /// `x`); even then the second canonical form is a fixed point.
    #[test]
    fn canonical_form_is_a_fixed_point(text in selector_text()) {
        let sel = parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let again = parse(sel.canonical())
            .map_err(|e| TestCaseError::fail(format!("canonical {:?}: {e}", sel.canonical())))?;
        if !sel.canonical().contains("!!") {
            prop_assert_eq!(again.canonical(), sel.canonical());
            prop_assert_eq!(again.unique_id(), sel.unique_id());
            prop_assert_eq!(&again, &sel);
        }
        let third = parse(again.canonical()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(third.canonical(), again.canonical());
        prop_assert_eq!(third.unique_id(), again.unique_id());
    }

    #[test]
    fn canonical_form_evaluates_like_the_original(
        text in selector_text(),
        sets in prop::collection::vec(label_set(), 1..8),
    ) {
        let sel = parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let again = parse(sel.canonical()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for labels in &sets {
            prop_assert_eq!(sel.evaluate(labels), again.evaluate(labels), "{:?} on {:?}", text, labels);
        }
    }

    #[test]
    fn matching_labels_satisfy_every_restriction(
        text in selector_text(),
        sets in prop::collection::vec(label_set(), 1..16),
    ) {
        let sel = parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let restrictions = sel.label_restrictions();
        for labels in sets.iter().filter(|l| sel.evaluate(*l)) {
            for (key, r) in &restrictions {
                prop_assert!(
                    r.is_satisfied_by(key, labels),
                    "{} matches {:?} but restriction {:?} on {} fails",
                    sel.canonical(), labels, r, key
                );
                prop_assert!(r.possible_to_satisfy());
            }
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".*") {
        let _ = parse(&text);
    }

    #[test]
    fn near_miss_text_never_panics_and_round_trips_when_valid(
        text in "[ab() !=&|'\"{},\t.\u{e9}\n]{0,40}|((has\\(|all\\(|global\\(| in | not in | contains |a|b|\\(|\\)|!|==|!=|&&|\\|\\||'x'|\"y\"|\\{|\\}|,| ){0,16})"
    ) {
        if let Ok(sel) = parse(&text) {
            let again = parse(sel.canonical())
                .map_err(|e| TestCaseError::fail(format!("canonical {:?}: {e}", sel.canonical())))?;
            prop_assert_eq!(again.canonical(), sel.canonical());
        } else if let Err(e) = parse(&text) {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn validate_accepts_exactly_what_parse_accepts(
        text in "[ab() !=&|'\"{},\t.\u{e9}\n]{0,40}|((has\\(|all\\(| in | not in |a|b|\\(|\\)|!|==|&&|\\|\\||'x'|\\{|\\}|,| ){0,16})"
    ) {
        prop_assert_eq!(validate(&text), parse(&text).map(|_| ()));
    }
}
