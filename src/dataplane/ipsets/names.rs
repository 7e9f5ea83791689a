//! IP set naming, identical to upstream's `IPVersionConfig`: main sets are
//! `cali4` / `cali6` + `0` + the calc-graph set ID, truncated to 31
//! characters; temporary sets are `cali4t<n>` / `cali6t<n>`. Any set whose
//! name starts with `cali4` / `cali6` (or a configured historic prefix) is
//! ours for mark-and-sweep.

use crate::dataplane::nftables::NftSetKind;
use crate::dataplane::IpVersion;

/// Longest name the kernel accepts for an IP set.
pub const MAX_IPSET_NAME_LENGTH: usize = 31;

/// Kernel IP set types we program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpSetType {
    /// `hash:ip`
    HashIp,
    /// `hash:net`
    HashNet,
    /// `hash:ip,port`
    HashIpPort,
}

impl IpSetType {
    /// The ipset type name.
    pub fn as_str(self) -> &'static str {
        match self {
            IpSetType::HashIp => "hash:ip",
            IpSetType::HashNet => "hash:net",
            IpSetType::HashIpPort => "hash:ip,port",
        }
    }

    /// Parses an ipset type name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "hash:ip" => IpSetType::HashIp,
            "hash:net" => IpSetType::HashNet,
            "hash:ip,port" => IpSetType::HashIpPort,
            _ => return None,
        })
    }

    /// The equivalent nftables set kind (same member canonical form).
    pub fn nft_kind(self) -> NftSetKind {
        match self {
            IpSetType::HashIp => NftSetKind::Ip,
            IpSetType::HashNet => NftSetKind::Net,
            IpSetType::HashIpPort => NftSetKind::IpPort,
        }
    }
}

/// Naming and ownership of IP sets for one IP version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpVersionConfig {
    ipv: IpVersion,
    main_prefix: String,
    temp_prefix: String,
    owned_prefixes: Vec<String>,
}

impl IpVersionConfig {
    /// Upstream's default naming (`cali` prefix).
    pub fn new(ipv: IpVersion) -> Self {
        Self::with_prefixes(ipv, "cali", &[])
    }

    /// Naming with `prefix` and extra historic prefixes also treated as ours.
    pub fn with_prefixes(ipv: IpVersion, prefix: &str, historic: &[&str]) -> Self {
        let v = ipv.number();
        let versioned = format!("{prefix}{v}");
        let mut owned = vec![versioned.clone()];
        owned.extend(historic.iter().map(|h| format!("{h}{v}")));
        IpVersionConfig {
            ipv,
            main_prefix: format!("{versioned}0"),
            temp_prefix: format!("{versioned}t"),
            owned_prefixes: owned,
        }
    }

    /// The IP version.
    pub fn ip_version(&self) -> IpVersion {
        self.ipv
    }

    /// `inet` or `inet6`, as ipset spells the family.
    pub fn family(&self) -> &'static str {
        match self.ipv {
            IpVersion::V4 => "inet",
            IpVersion::V6 => "inet6",
        }
    }

    /// The kernel name of the main set for a calc-graph IP set ID.
    pub fn name_for_main_ipset(&self, set_id: &str) -> String {
        let mut s = format!("{}{set_id}", self.main_prefix);
        if s.len() > MAX_IPSET_NAME_LENGTH {
            let mut cut = MAX_IPSET_NAME_LENGTH;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    }

    /// The kernel name of temporary set number `n`.
    pub fn name_for_temp_ipset(&self, n: u32) -> String {
        format!("{}{n}", self.temp_prefix)
    }

    /// True if the set is ours (to sweep when not desired).
    pub fn owns_ipset(&self, name: &str) -> bool {
        self.owned_prefixes
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    }

    /// True if the set is one of our temporary sets.
    pub fn is_temp_ipset(&self, name: &str) -> bool {
        name.starts_with(&self.temp_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_upstream() {
        let v4 = IpVersionConfig::new(IpVersion::V4);
        let v6 = IpVersionConfig::new(IpVersion::V6);
        // Upstream's documented example: ID truncated to fit 31 characters.
        assert_eq!(
            v6.name_for_main_ipset("s:qMt7iLlGDhvLnCjM0l9nzxbabcd"),
            "cali60s:qMt7iLlGDhvLnCjM0l9nzxb"
        );
        assert_eq!(v4.name_for_main_ipset("s:abc"), "cali40s:abc");
        assert_eq!(v4.name_for_temp_ipset(3), "cali4t3");
        assert!(
            v4.owns_ipset("cali40s:abc") && v4.owns_ipset("cali4t0") && v4.owns_ipset("cali4-old")
        );
        assert!(!v4.owns_ipset("cali60s:abc") && !v4.owns_ipset("kube-x"));
        assert!(v4.is_temp_ipset("cali4t0") && !v4.is_temp_ipset("cali40s:t"));
        let hist = IpVersionConfig::with_prefixes(IpVersion::V4, "cali", &["felix-"]);
        assert!(hist.owns_ipset("felix-4foo"));
        assert_eq!(v6.family(), "inet6");
    }
}
