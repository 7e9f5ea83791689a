//! The expanders: each turns a base sequence of states into companion
//! runs that the graph must pass as well, which tests invariants for free:
//!
//! * `reverse-kv-order`: each state's KVs delivered in reverse (output
//!   must not depend on delivery order within a state);
//! * `reverse-state-order`: the states in reverse (build-up becomes
//!   teardown and vice versa);
//! * `insert-empties`: an empty state between each pair (create, tear
//!   down, re-create);
//! * `split-states`: each state alone, from empty;
//! * `squash-states`: the whole sequence, deletions included, as one step
//!   that must land in the last state.
//!
//! Setting `DISABLE_TEST_EXPANSION=true` keeps only the identity run.

use felix::model::Update;

use super::state::State;

/// One step of a run: the updates to feed and the state they must reach.
#[derive(Clone, Debug)]
pub struct Step {
    /// The updates fed to the graph, in order.
    pub updates: Vec<Update>,
    /// The state the updates lead to, whose expectation is checked after them.
    pub state: State,
}

/// One expanded run: a name and its steps.
#[derive(Clone, Debug)]
pub struct Expansion {
    /// `identity`, the expander's name, or `split-states[i]` (for failure messages).
    pub name: String,
    /// The steps, run in order on one fresh graph.
    pub steps: Vec<Step>,
}

/// Steps that walk `states` in order from an empty datastore.
pub fn steps_of(states: &[State]) -> Vec<Step> {
    let mut prev = State::empty();
    let mut out = Vec::with_capacity(states.len());
    for s in states {
        out.push(Step {
            updates: s.deltas_from(&prev),
            state: s.clone(),
        });
        prev = s.clone();
    }
    out
}

/// Whether `DISABLE_TEST_EXPANSION=true`.
pub fn expansion_disabled() -> bool {
    std::env::var("DISABLE_TEST_EXPANSION").is_ok_and(|v| v == "true")
}

/// The identity run plus (unless disabled) every expander's runs.
pub fn expansions(states: &[State]) -> Vec<Expansion> {
    let mut out = vec![Expansion {
        name: "identity".into(),
        steps: steps_of(states),
    }];
    if expansion_disabled() {
        return out;
    }
    let reversed_kvs: Vec<State> = states
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.kvs.reverse();
            s
        })
        .collect();
    out.push(Expansion {
        name: "reverse-kv-order".into(),
        steps: steps_of(&reversed_kvs),
    });
    let mut reversed: Vec<State> = states.to_vec();
    reversed.reverse();
    out.push(Expansion {
        name: "reverse-state-order".into(),
        steps: steps_of(&reversed),
    });
    let mut with_empties = Vec::new();
    for (i, s) in states.iter().enumerate() {
        if i > 0 {
            with_empties.push(State::empty());
        }
        with_empties.push(s.clone());
    }
    out.push(Expansion {
        name: "insert-empties".into(),
        steps: steps_of(&with_empties),
    });
    for (i, s) in states.iter().enumerate() {
        out.push(Expansion {
            name: format!("split-states[{i}]"),
            steps: steps_of(std::slice::from_ref(s)),
        });
    }
    if let Some(last) = states.last() {
        let updates = steps_of(states)
            .into_iter()
            .flat_map(|s| s.updates)
            .collect();
        out.push(Expansion {
            name: "squash-states".into(),
            steps: vec![Step {
                updates,
                state: last.clone(),
            }],
        });
    }
    out
}
