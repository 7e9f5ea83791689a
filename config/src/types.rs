//! Structured value types that some parameters parse into.

use ipnet::IpNet;
use regex::Regex;
use std::fmt;

/// One failsafe port: `tcp:22`, `udp:68`, `tcp:10.0.0.0/8:2379`,
/// `udp:[fd00::/8]:53`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtoPort {
    /// `tcp` or `udp`, always lower case.
    pub protocol: String,
    /// Port number.
    pub port: u16,
    /// Optional peer network the port is restricted to (truncated to its
    /// network address).
    pub net: Option<IpNet>,
}

impl fmt::Display for ProtoPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.net {
            None => write!(f, "{}:{}", self.protocol, self.port),
            Some(IpNet::V6(n)) => write!(f, "{}:[{}]:{}", self.protocol, n, self.port),
            Some(n) => write!(f, "{}:{}:{}", self.protocol, n, self.port),
        }
    }
}

/// An inclusive port range `min:max` (a single port has `min == max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port of the range.
    pub min: u16,
    /// Last port of the range (inclusive).
    pub max: u16,
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}:{}", self.min, self.max)
        }
    }
}

/// An inclusive range of Linux routing-table indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IndexRange {
    /// First table index of the range.
    pub min: u32,
    /// Last table index of the range (inclusive).
    pub max: u32,
}

impl fmt::Display for IndexRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// A compiled regular expression that compares equal by its source text
/// (so that configs can be compared for change detection).
#[derive(Clone, Debug)]
pub struct Pattern(pub Regex);

impl Pattern {
    /// Whether the regex matches anywhere in `s`.
    pub fn is_match(&self, s: &str) -> bool {
        self.0.is_match(s)
    }
    /// The regex's source text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}
impl Eq for Pattern {}

/// One `InterfaceExclude` entry: an exact interface name or a `/regex/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfacePattern {
    /// The entry as written (`kube-ipvs0`, `/^veth.*/`).
    pub text: String,
    /// Anchored matcher for exact names, the inner regex for `/.../`.
    pub pattern: Pattern,
}

impl IfacePattern {
    /// Whether `iface` is excluded by this entry.
    pub fn matches(&self, iface: &str) -> bool {
        self.pattern.is_match(iface)
    }
}
