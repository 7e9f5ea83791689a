//! Rule hashing, identical in construction to upstream Felix: SHA-224 seeded
//! with the chain name, each rule's digest chained from the previous one,
//! URL-safe unpadded base64, first 16 characters.

use base64::Engine;
use sha2::{Digest, Sha224};

use super::Rule;

/// Characters of hash kept in the comment (96 bits of entropy).
pub const HASH_LENGTH: usize = 16;

/// Prefix of every hash comment; a rule carrying it is ours.
pub const RULE_HASH_PREFIX: &str = "cali:";

/// Hashes of `rules` as they appear in `chain`, in order.
///
/// `render` must produce a string that determines the rule's kernel form
/// (the iptables driver renders `-A <chain> HASH <match> <action>`, as
/// upstream). Invariant: equal inputs give equal hashes across restarts and
/// processes, so a restarted driver recognises unchanged rules.
pub fn rule_hashes(
    chain: &str,
    rules: &[Rule],
    render: impl Fn(&Rule, &str) -> String,
) -> Vec<String> {
    let mut prev: Vec<u8> = Sha224::digest(chain.as_bytes()).to_vec();
    let mut out = Vec::with_capacity(rules.len());
    for rule in rules {
        let mut h = Sha224::new();
        h.update(&prev);
        h.update(render(rule, chain).as_bytes());
        prev = h.finalize().to_vec();
        let mut enc = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&prev);
        enc.truncate(HASH_LENGTH);
        out.push(enc);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::generictables::{Action, MatchCriteria};

    fn r(a: Action) -> Rule {
        Rule::new(MatchCriteria::new(), a)
    }
    fn render(rule: &Rule, chain: &str) -> String {
        format!("-A {chain} HASH {:?}", rule.action)
    }

    #[test]
    fn hashes_depend_on_chain_position_and_predecessors() {
        let rules = vec![r(Action::Accept), r(Action::Drop)];
        let a = rule_hashes("cali-a", &rules, render);
        let b = rule_hashes("cali-b", &rules, render);
        assert_eq!(a.len(), 2);
        assert!(a.iter().all(|h| h.len() == HASH_LENGTH));
        assert_ne!(a, b);
        assert_eq!(a, rule_hashes("cali-a", &rules, render));
        // Changing the first rule changes every later hash; changing the
        // last leaves earlier ones alone.
        let first_changed = rule_hashes("cali-a", &[r(Action::Return), r(Action::Drop)], render);
        assert_ne!(first_changed[1], a[1]);
        let last_changed = rule_hashes("cali-a", &[r(Action::Accept), r(Action::Return)], render);
        assert_eq!(last_changed[0], a[0]);
        assert_ne!(last_changed[1], a[1]);
    }

    #[test]
    fn hash_uses_url_safe_alphabet() {
        let rules: Vec<Rule> = (0..50)
            .map(|i| r(Action::Jump(format!("cali-{i}"))))
            .collect();
        for h in rule_hashes("x", &rules, render) {
            assert!(
                h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{h}"
            );
        }
    }
}
