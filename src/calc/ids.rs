//! Identifier derivation shared by the graph: upstream-compatible unique
//! IDs and rule IDs.

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use prost::Message;
use sha2::{Digest, Sha224};

use felix_proto as pb;

/// Length of a rule ID (96 bits of hash in URL-safe base64).
pub const RULE_ID_LEN: usize = 16;

/// `<prefix>:` + base64url(SHA-224(`<prefix>:<content>`)), as upstream's
/// `hash.MakeUniqueID`.
pub fn make_unique_id(prefix: &str, content: &str) -> String {
    let mut h = Sha224::new();
    h.update(prefix.as_bytes());
    h.update(b":");
    h.update(content.as_bytes());
    format!("{prefix}:{}", URL_SAFE_NO_PAD.encode(h.finalize()))
}

/// Fills in `rule_id` on each rule: a hash chain seeded with `seed`, so a
/// rule's ID depends on its content, its position and every rule before
/// it.  The hashed form is the rule's proto encoding (with an empty ID)
/// with top-level fields in field-number order, which is what upstream's
/// Go encoder produces.
pub fn fill_rule_ids(rules: &mut [pb::Rule], seed: &str) {
    let mut prev = Sha224::digest(seed.as_bytes());
    let mut buf = Vec::new();
    for rule in rules.iter_mut() {
        rule.rule_id.clear();
        buf.clear();
        rule.encode(&mut buf).ok();
        let mut h = Sha224::new();
        h.update(prev);
        match sort_fields_by_number(&buf) {
            Some(Cow::Owned(sorted)) => h.update(&sorted),
            _ => h.update(&buf),
        }
        prev = h.finalize();
        let mut id = String::with_capacity(RULE_ID_LEN);
        URL_SAFE_NO_PAD.encode_string(&prev[..RULE_ID_BYTES], &mut id);
        rule.rule_id = id;
    }
}

/// Hash bytes behind a rule ID: base64 turns every 3 bytes into 4
/// characters, so these give exactly the ID's characters (the same as the
/// first [`RULE_ID_LEN`] characters of the whole hash's encoding).
const RULE_ID_BYTES: usize = RULE_ID_LEN / 4 * 3;

/// Re-orders the top-level fields of an encoded message by field number
/// (stable, so repeated fields keep their order); borrowed when they are
/// in order already.  `None` if the bytes are not a well-formed message.
fn sort_fields_by_number(bytes: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut fields: Vec<(u64, &[u8])> = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let start = pos;
        let (key, n) = read_varint(&bytes[pos..])?;
        pos += n;
        match key & 7 {
            0 => {
                let (_, n) = read_varint(&bytes[pos..])?;
                pos += n;
            }
            1 => pos += 8,
            2 => {
                let (len, n) = read_varint(&bytes[pos..])?;
                pos += n + usize::try_from(len).ok()?;
            }
            5 => pos += 4,
            _ => return None,
        }
        if pos > bytes.len() {
            return None;
        }
        fields.push((key >> 3, &bytes[start..pos]));
    }
    if fields.is_sorted_by_key(|(num, _)| *num) {
        return Some(Cow::Borrowed(bytes));
    }
    fields.sort_by_key(|(num, _)| *num);
    Some(Cow::Owned(
        fields.iter().flat_map(|(_, b)| b.iter().copied()).collect(),
    ))
}

fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_id_has_prefix_and_fixed_length() {
        let id = make_unique_id("s", "has(a)");
        assert!(id.starts_with("s:"));
        // SHA-224 is 28 bytes: 38 base64 characters without padding.
        assert_eq!(id.len(), 2 + 38);
        assert_ne!(id, make_unique_id("s", "has(b)"));
    }

    #[test]
    fn rule_ids_chain_through_previous_rules() {
        let allow = pb::Rule {
            action: "allow".into(),
            ..Default::default()
        };
        let deny = pb::Rule {
            action: "deny".into(),
            ..Default::default()
        };
        let mut a = vec![allow.clone(), deny.clone()];
        let mut b = vec![deny.clone(), deny.clone()];
        fill_rule_ids(&mut a, "seed");
        fill_rule_ids(&mut b, "seed");
        assert_eq!(a[0].rule_id.len(), RULE_ID_LEN);
        // Same second rule, different predecessor: different ID.
        assert_ne!(a[1].rule_id, b[1].rule_id);
        let mut c = vec![allow];
        fill_rule_ids(&mut c, "other-seed");
        assert_ne!(a[0].rule_id, c[0].rule_id);
    }

    #[test]
    fn field_sort_orders_by_number_and_keeps_repeats() {
        // field 12 (len 1 "a"), field 4 (len 1 "b"), field 4 (len 1 "c")
        let bytes = [0x62, 1, b'a', 0x22, 1, b'b', 0x22, 1, b'c'];
        let sorted = sort_fields_by_number(&bytes).expect("well formed");
        assert_eq!(*sorted, [0x22, 1, b'b', 0x22, 1, b'c', 0x62, 1, b'a']);
        assert!(matches!(sorted, Cow::Owned(_)));
        // In order already: the same bytes, not copied.
        let again = sort_fields_by_number(&sorted).expect("well formed");
        assert!(matches!(again, Cow::Borrowed(_)));
        assert_eq!(*again, *sorted);
        assert!(sort_fields_by_number(&[0x22, 5, b'x']).is_none());
    }

    /// A rule ID is the first characters of the base64 of the whole chain
    /// hash (what upstream truncates), computed here from the hash alone.
    #[test]
    fn rule_id_is_the_truncated_encoding_of_the_chain_hash() {
        let rule = pb::Rule {
            action: "allow".into(),
            src_ip_set_ids: vec!["s:abc".into()],
            protocol: Some(pb::Protocol {
                number_or_name: Some(pb::protocol::NumberOrName::Number(6)),
            }),
            ..Default::default()
        };
        let mut rules = vec![rule.clone()];
        fill_rule_ids(&mut rules, "pol-in-default/p");
        let mut buf = Vec::new();
        rule.encode(&mut buf).ok();
        let canonical = sort_fields_by_number(&buf).expect("well formed");
        let mut h = Sha224::new();
        h.update(Sha224::digest(b"pol-in-default/p"));
        h.update(&*canonical);
        let whole = URL_SAFE_NO_PAD.encode(h.finalize());
        assert_eq!(rules[0].rule_id, whole[..RULE_ID_LEN]);
    }
}
