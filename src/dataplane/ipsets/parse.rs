//! Parsing of `ipset list -n` and `ipset list <name>` output.

use std::collections::BTreeSet;

use super::names::IpSetType;
use crate::dataplane::nftables::canonical_member;
use crate::dataplane::IpVersion;

/// One set as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSet {
    /// Set type, `None` if not one we program.
    pub set_type: Option<IpSetType>,
    /// `inet` / `inet6`.
    pub family: String,
    /// `maxelem` from the header.
    pub max_elem: Option<u32>,
    /// Canonical members; `None` if any member did not parse.
    pub members: Option<BTreeSet<String>>,
}

/// Set names from `ipset list -n`.
pub fn parse_names(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Parses `ipset list <name>` for one set.
pub fn parse_list(out: &str) -> Result<ListedSet, String> {
    let mut set_type = None;
    let mut type_seen = false;
    let mut family = String::new();
    let mut max_elem = None;
    let mut raw_members = Vec::new();
    let mut in_members = false;
    for line in out.lines() {
        let line = line.trim();
        if in_members {
            if !line.is_empty() {
                raw_members.push(line.to_string());
            }
            continue;
        }
        if let Some(t) = line.strip_prefix("Type:") {
            set_type = IpSetType::parse(t.trim());
            type_seen = true;
        } else if let Some(h) = line.strip_prefix("Header:") {
            let words: Vec<&str> = h.split_whitespace().collect();
            for w in words.windows(2) {
                match w[0] {
                    "family" => family = w[1].to_string(),
                    "maxelem" => max_elem = w[1].parse().ok(),
                    _ => {}
                }
            }
        } else if line == "Members:" {
            in_members = true;
        }
    }
    if !type_seen || !in_members {
        return Err("missing Type or Members section".into());
    }
    let ipv = if family == "inet6" {
        IpVersion::V6
    } else {
        IpVersion::V4
    };
    let members = set_type.and_then(|t| {
        raw_members
            .iter()
            .map(|m| {
                // Members may carry extensions (timeout, counters, ...).
                let m = m.split_whitespace().next().unwrap_or("");
                canonical_member(t.nft_kind(), ipv, m)
            })
            .collect()
    });
    Ok(ListedSet {
        set_type,
        family,
        max_elem,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_list_output() {
        let out = "Name: cali40p\nType: hash:ip,port\nRevision: 7\n\
Header: family inet hashsize 1024 maxelem 100 bucketsize 12 initval 0x792403f9\n\
Size in memory: 360\nReferences: 0\nNumber of entries: 2\nMembers:\n10.0.0.2,udp:53\n10.0.0.1,tcp:80\n";
        let l = parse_list(out).unwrap();
        assert_eq!(l.set_type, Some(IpSetType::HashIpPort));
        assert_eq!(l.family, "inet");
        assert_eq!(l.max_elem, Some(100));
        let m: Vec<String> = l.members.unwrap().into_iter().collect();
        assert_eq!(
            m,
            vec!["10.0.0.1,tcp:80".to_string(), "10.0.0.2,udp:53".into()]
        );
        let bad = out.replace("10.0.0.1,tcp:80", "garbage");
        assert_eq!(parse_list(&bad).unwrap().members, None);
        assert!(parse_list("nonsense").is_err());
        let other = out.replace("hash:ip,port", "bitmap:port");
        assert_eq!(parse_list(&other).unwrap().set_type, None);
        assert_eq!(parse_names("a\n\nb\n"), vec!["a", "b"]);
    }
}
