//! The NFLOG prefixes of drop attribution: what the dataplane attaches to a
//! denied packet it reports, and the parse the daemon's drop reader does.
//! A prefix names the deny precisely, fits NFLOG's 64-byte limit and has no
//! space or quote (it is a bare word in `iptables-restore` input):
//!
//! | prefix | deny |
//! |---|---|
//! | `D,i,3,gnp/name` | rule 3 of a policy's (or profile's) inbound rules (`e`: outbound); the key is upstream's policy ID string (`gnp/name`, `np/ns/name`, `pro/name`), hashed as chain names are when too long |
//! | `T,2,cali-tw-calib` | end of the endpoint's third tier (of the tiers the chain walks) |
//! | `N,cali-tw-calib` | no policy or profile allowed: the endpoint chain's final deny |
//!
//! Invariant: [`parse`] inverts every prefix this module makes
//! (`drop_prefixes_round_trip_and_fit_nflog`).

use felix_proto::PolicyId;

use super::names::length_limited_id;
use super::policy::policy_id_string;

/// NFLOG's prefix limit, with its terminating NUL.
pub const MAX_PREFIX: usize = 63;
const MAX_KEY: usize = 48;

/// A parsed prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropPrefix {
    /// A policy's or profile's deny rule.
    Rule {
        /// Inbound rules (else outbound).
        ingress: bool,
        /// The rule's index in its direction's list.
        index: usize,
        /// [`owner_key`] of the policy or profile.
        key: String,
    },
    /// A tier's end.
    TierEnd {
        /// The tier's position in the endpoint's tiers for the chain's direction.
        tier: usize,
        /// The endpoint chain.
        chain: String,
    },
    /// The endpoint chain's final deny.
    NoMatch {
        /// The endpoint chain.
        chain: String,
    },
}

/// The key of a policy (`None`: the profile `profile`) in rule prefixes.
pub fn owner_key(policy: Option<&PolicyId>, profile: &str) -> String {
    let id = match policy {
        Some(id) => policy_id_string(id),
        None => format!("pro/{profile}"),
    };
    length_limited_id("", &id, MAX_KEY)
}

/// The prefix of rule `index` of the owner with key `key`.
pub fn rule_prefix(ingress: bool, index: usize, key: &str) -> String {
    format!("D,{},{index},{key}", if ingress { 'i' } else { 'e' })
}

/// The prefix of the end of tier number `tier` in endpoint chain `chain`.
pub fn tier_end_prefix(tier: usize, chain: &str) -> String {
    format!("T,{tier},{chain}")
}

/// The prefix of endpoint chain `chain`'s final deny.
pub fn no_match_prefix(chain: &str) -> String {
    format!("N,{chain}")
}

/// Parses a prefix; `None` for one this module never makes.
pub fn parse(prefix: &str) -> Option<DropPrefix> {
    let mut it = prefix.trim_end_matches('\0').splitn(4, ',');
    match it.next()? {
        "D" => {
            let ingress = match it.next()? {
                "i" => true,
                "e" => false,
                _ => return None,
            };
            let index = it.next()?.parse().ok()?;
            let key = it.next()?.to_string();
            Some(DropPrefix::Rule {
                ingress,
                index,
                key,
            })
        }
        "T" => {
            let tier = it.next()?.parse().ok()?;
            let chain = it.next()?.to_string();
            (it.next().is_none()).then_some(DropPrefix::TierEnd { tier, chain })
        }
        "N" => {
            let chain = it.next()?.to_string();
            (it.next().is_none()).then_some(DropPrefix::NoMatch { chain })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_prefixes_round_trip_and_fit_nflog() {
        let long = PolicyId {
            name: "x".repeat(200),
            namespace: "ns".into(),
            kind: "NetworkPolicy".into(),
        };
        let key = owner_key(Some(&long), "");
        let p = rule_prefix(false, 9999, &key);
        assert!(p.len() <= MAX_PREFIX, "{p}");
        assert_eq!(
            parse(&p),
            Some(DropPrefix::Rule {
                ingress: false,
                index: 9999,
                key: key.clone()
            })
        );
        let short = owner_key(None, "kns.shop");
        assert_eq!(short, "pro/kns.shop");
        let p = tier_end_prefix(12, "cali-tw-calib");
        assert_eq!(
            parse(&p),
            Some(DropPrefix::TierEnd {
                tier: 12,
                chain: "cali-tw-calib".into()
            })
        );
        let p = no_match_prefix("cali-fw-calia");
        assert_eq!(
            parse(&p),
            Some(DropPrefix::NoMatch {
                chain: "cali-fw-calia".into()
            })
        );
        assert_eq!(parse("calico-packet: x"), None);
        assert_eq!(parse("D,x,1,k"), None);
        for p in [
            tier_end_prefix(1, "c"),
            no_match_prefix("c"),
            rule_prefix(true, 1, &short),
        ] {
            assert!(!p.contains([' ', '"', '\'']), "{p}");
        }
    }
}
