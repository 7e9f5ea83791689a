//! Parsing of `nft -j` output: our table's chains (rule hashes), sets
//! (kind and members), and the chain/rule listings the cleanup reads.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::sets::{canonical_member, NftSetKind};
use crate::dataplane::IpVersion;

/// A set as read back. `members` is `None` if some element could not be
/// understood (the set is then rewritten wholesale when compared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActualSet {
    pub kind: Option<NftSetKind>,
    pub members: Option<BTreeSet<String>>,
}

/// Our table as read back (or as we last wrote it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NftState {
    /// Chain name to the hash of each rule (`None`: no hash comment).
    pub chains: BTreeMap<String, Vec<Option<String>>>,
    /// Sets by (legal) name.
    pub sets: BTreeMap<String, ActualSet>,
}

fn objects(v: &Value) -> impl Iterator<Item = (&str, &Value)> {
    v.get("nftables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_object()?.iter().next().map(|(k, v)| (k.as_str(), v)))
}

fn set_kind(set: &Value) -> Option<NftSetKind> {
    let interval = set
        .get("flags")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == "interval"));
    match set.get("type")? {
        Value::String(_) if interval => Some(NftSetKind::Net),
        Value::String(_) => Some(NftSetKind::Ip),
        Value::Array(parts) if parts.len() == 3 => Some(NftSetKind::IpPort),
        _ => None,
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn member(kind: NftSetKind, ipv: IpVersion, elem: &Value) -> Option<String> {
    // Elements with per-element data are wrapped as {"elem": {"val": ...}}.
    let elem = elem.get("elem").and_then(|e| e.get("val")).unwrap_or(elem);
    let raw = match elem {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            if let Some(p) = o.get("prefix") {
                format!("{}/{}", scalar(p.get("addr")?)?, scalar(p.get("len")?)?)
            } else if let Some(Value::Array(parts)) = o.get("concat") {
                if parts.len() != 3 {
                    return None;
                }
                format!(
                    "{},{}:{}",
                    scalar(&parts[0])?,
                    scalar(&parts[1])?,
                    scalar(&parts[2])?
                )
            } else {
                return None;
            }
        }
        _ => return None,
    };
    canonical_member(kind, ipv, &raw)
}

/// Parses `nft -j list table <family> <table>`.
pub(crate) fn parse_table(
    text: &str,
    ipv: IpVersion,
    hash_prefix: &str,
) -> Result<NftState, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut st = NftState::default();
    for (kind, obj) in objects(&v) {
        match kind {
            "chain" => {
                if let Some(n) = obj.get("name").and_then(Value::as_str) {
                    st.chains.entry(n.to_string()).or_default();
                }
            }
            "rule" => {
                let Some(chain) = obj.get("chain").and_then(Value::as_str) else {
                    continue;
                };
                let hash = obj
                    .get("comment")
                    .and_then(Value::as_str)
                    .and_then(|c| c.strip_prefix(hash_prefix))
                    .map(|rest| {
                        rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                            .next()
                            .unwrap_or("")
                            .to_string()
                    })
                    .filter(|h| !h.is_empty());
                st.chains.entry(chain.to_string()).or_default().push(hash);
            }
            "set" => {
                let Some(name) = obj.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let mut k = set_kind(obj);
                // A range in a CIDR set is the mark of an `auto-merge`
                // declaration (ours never writes ranges, and nft 1.0.6
                // does not show the flag in JSON): an unknown kind gets
                // the set recreated with our declaration, after which
                // single-member deletes stop failing.
                let merged = |e: &Value| e.get("range").is_some();
                if k == Some(NftSetKind::Net)
                    && obj
                        .get("elem")
                        .and_then(Value::as_array)
                        .is_some_and(|es| es.iter().any(merged))
                {
                    k = None;
                }
                let members = match (k, obj.get("elem")) {
                    (Some(k), Some(Value::Array(elems))) => {
                        elems.iter().map(|e| member(k, ipv, e)).collect()
                    }
                    (Some(_), None) => Some(BTreeSet::new()),
                    _ => None,
                };
                st.sets
                    .insert(name.to_string(), ActualSet { kind: k, members });
            }
            _ => {}
        }
    }
    Ok(st)
}

/// A chain in a family-wide chain listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedChain {
    pub table: String,
    pub name: String,
    pub base: bool,
}

/// Parses `nft -j list chains <family>`.
pub(crate) fn parse_chains(text: &str) -> Result<Vec<ListedChain>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(objects(&v)
        .filter(|(k, _)| *k == "chain")
        .filter_map(|(_, c)| {
            Some(ListedChain {
                table: c.get("table")?.as_str()?.to_string(),
                name: c.get("name")?.as_str()?.to_string(),
                base: c.get("hook").is_some(),
            })
        })
        .collect())
}

/// A rule in a chain listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedRule {
    pub handle: u64,
    pub comment: Option<String>,
    pub jump_target: Option<String>,
    /// True if the rule carries an iptables comment match whose text nft
    /// cannot show.
    pub opaque_comment: bool,
}

/// Parses `nft -j list chain <family> <table> <chain>`.
pub(crate) fn parse_rules(text: &str) -> Result<Vec<ListedRule>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(objects(&v)
        .filter(|(k, _)| *k == "rule")
        .filter_map(|(_, r)| {
            let exprs = r
                .get("expr")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let jump_target = exprs.iter().find_map(|e| {
                e.get("jump")
                    .or_else(|| e.get("goto"))?
                    .get("target")?
                    .as_str()
                    .map(str::to_string)
            });
            let opaque_comment = exprs.iter().any(|e| {
                e.get("xt")
                    .and_then(|x| x.get("name"))
                    .is_some_and(|n| n == "comment")
            });
            Some(ListedRule {
                handle: r.get("handle")?.as_u64()?,
                comment: r.get("comment").and_then(Value::as_str).map(str::to_string),
                jump_target,
                opaque_comment,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table_with_sets_and_hashes() {
        let j = r#"{"nftables":[{"metainfo":{}},{"table":{"family":"ip","name":"calico"}},
        {"chain":{"family":"ip","table":"calico","name":"cali-a","handle":1}},
        {"chain":{"family":"ip","table":"calico","name":"empty","handle":2}},
        {"rule":{"chain":"cali-a","handle":3,"comment":"cali:AbC-_9; user","expr":[]}},
        {"rule":{"chain":"cali-a","handle":4,"expr":[]}},
        {"set":{"name":"s1","type":"ipv4_addr","elem":["10.0.0.1","10.0.0.2"]}},
        {"set":{"name":"s2","type":"ipv4_addr","flags":["interval"],"elem":[{"prefix":{"addr":"10.0.0.0","len":24}},"10.1.0.1"]}},
        {"set":{"name":"s3","type":["ipv4_addr","inet_proto","inet_service"],"elem":[{"concat":["10.0.0.1","tcp",80]}]}},
        {"set":{"name":"s4","type":"ipv4_addr","flags":["interval"],"elem":[{"range":["10.0.0.1","10.0.0.9"]}]}},
        {"set":{"name":"s5","type":"ipv4_addr"}}]}"#;
        let st = parse_table(j, IpVersion::V4, "cali:").unwrap();
        assert_eq!(st.chains["cali-a"], vec![Some("AbC-_9".to_string()), None]);
        assert!(st.chains["empty"].is_empty());
        let m = |n: &str| {
            st.sets[n]
                .members
                .clone()
                .map(|s| s.into_iter().collect::<Vec<_>>())
        };
        assert_eq!(m("s1"), Some(vec!["10.0.0.1".into(), "10.0.0.2".into()]));
        assert_eq!(st.sets["s2"].kind, Some(NftSetKind::Net));
        assert_eq!(m("s2"), Some(vec!["10.0.0.0/24".into(), "10.1.0.1".into()]));
        assert_eq!(m("s3"), Some(vec!["10.0.0.1,tcp:80".into()]));
        assert_eq!(m("s4"), None);
        assert_eq!(
            st.sets["s4"].kind, None,
            "a merged range marks an auto-merge set, to be recreated"
        );
        assert_eq!(m("s5"), Some(vec![]));
        assert!(parse_table("not json", IpVersion::V4, "cali:").is_err());
    }

    #[test]
    fn parses_rules_with_jumps_and_opaque_comments() {
        let j = r#"{"nftables":[{"rule":{"chain":"INPUT","handle":4,"expr":[{"xt":{"type":"match","name":"comment"}},{"jump":{"target":"cali-x"}}]}},
        {"rule":{"chain":"INPUT","handle":5,"comment":"cali:zz","expr":[{"accept":null}]}}]}"#;
        let r = parse_rules(j).unwrap();
        assert_eq!(r[0].jump_target.as_deref(), Some("cali-x"));
        assert!(r[0].opaque_comment);
        assert_eq!(r[1].comment.as_deref(), Some("cali:zz"));
    }
}
