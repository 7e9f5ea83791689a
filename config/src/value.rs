//! Parameter kinds (the type and validation rule of each parameter) and
//! the typed values they parse into.
//!
//! Each [`Kind`] mirrors one of upstream Felix's parameter types, with the
//! same accepted spellings and the same validation, except where the module
//! docs of [`crate::duration`] say otherwise (durations also accept Go
//! duration strings; negative durations are rejected).

use crate::duration::{format_duration, parse_duration, Unit};
use crate::types::{IfacePattern, IndexRange, Pattern, PortRange, ProtoPort};
use ipnet::IpNet;
use regex::Regex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// Extra character-level check for string parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrCheck {
    /// Any single-line string.
    Any,
    /// `host:port` (no scheme, no path).
    Authority,
    /// Letters, digits, `_`, `.`, `-`.
    Hostname,
    /// 1-64 of letters, digits, `:`, `.`, `_`, `+`, `-` (a name or an IP).
    HostAddress,
    /// 1-15 of letters, digits, `:`, `.`, `_`, `+`, `-` (an interface name,
    /// `+` acting as a wildcard suffix).
    IfaceParam,
    /// Empty, or `N/unit` with N in 1..=9999 and unit one of `second`,
    /// `minute`, `hour`, `day`.
    LogRate,
}

/// The type of a parameter: how its text is parsed and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`1`/`yes`/`y`/`t` or `false`/`0`/`no`/`n`/`f`, any case.
    Bool,
    /// Like `Bool`, but "unset" is a distinct third state (the default).
    OptBool,
    /// Integer (Go syntax: decimal, `0x` hex, `0o`/leading-0 octal, `0b`
    /// binary) within `min..=max`.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// Duration; a bare number is seconds.
    Seconds,
    /// Duration; a bare number is milliseconds.
    Millis,
    /// String with a character rule.
    Str(StrCheck),
    /// One of a fixed set, matched case-insensitively and stored in the
    /// canonical spelling listed here.
    OneOf(&'static [&'static str]),
    /// Comma-separated list of interface-name prefixes.
    IfaceList,
    /// Comma-separated list of interface names and `/regex/` patterns.
    IfaceRegexList,
    /// A regular expression; empty means "unset".
    Regex,
    /// A file path; `must_exist` requires the file to exist when set.
    File {
        /// Whether a set path must name an existing file.
        must_exist: bool,
    },
    /// An IPv4 address; empty means unset.
    Ipv4,
    /// An IPv6 address; empty means unset.
    Ipv6,
    /// Comma-separated `scheme://host:port` URLs, all with one scheme.
    EndpointList,
    /// Comma-separated `[proto:][net:]port` entries.
    PortList,
    /// `n` or `n:m`; empty means unset.
    PortRange,
    /// Comma-separated port ranges.
    PortRangeList,
    /// 32-bit mark mask with at least two bits set.
    MarkBitmask,
    /// Comma-separated CIDRs or IPs.
    CidrList,
    /// One routing-table range `n-m` within 1-250 (deprecated form).
    RouteTableRange,
    /// List of routing-table ranges `n-m`.
    RouteTableRanges,
    /// Comma-separated `key=value` pairs.
    KeyValueList,
    /// Comma-separated `key=<Go duration>` pairs.
    KeyDurationList,
    /// Comma-separated interface names, `+` as wildcard suffix.
    IfaceFilterList,
}

/// Minimum number of bits a mark mask must have set.
pub const MIN_MARK_BITS: u32 = 2;
/// Upper bound on the total number of routing tables across all ranges.
pub const MAX_ROUTE_TABLES: u64 = 0xffff;

/// A parsed, validated parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Parsed `Bool`.
    Bool(bool),
    /// Parsed `OptBool`; `None` is unset.
    OptBool(Option<bool>),
    /// Parsed `Int`.
    Int(i64),
    /// Parsed `Seconds` or `Millis`.
    Duration(Duration),
    /// Parsed string kinds (`Str`, `OneOf`, `File`).
    Str(String),
    /// Parsed list kinds of plain strings (interface prefixes, endpoints, filters).
    StrList(Vec<String>),
    /// Parsed `IfaceRegexList`.
    IfacePatterns(Vec<IfacePattern>),
    /// Parsed `Regex`; `None` is unset.
    Regex(Option<Pattern>),
    /// Parsed `Ipv4`; `None` is unset.
    Ipv4(Option<Ipv4Addr>),
    /// Parsed `Ipv6`; `None` is unset.
    Ipv6(Option<Ipv6Addr>),
    /// Parsed `PortList`.
    Ports(Vec<ProtoPort>),
    /// Parsed `PortRange`; `None` is unset.
    PortRange(Option<PortRange>),
    /// Parsed `PortRangeList`.
    PortRanges(Vec<PortRange>),
    /// Parsed `MarkBitmask`.
    Mark(u32),
    /// Parsed `CidrList`.
    Cidrs(Vec<IpNet>),
    /// Parsed `RouteTableRange`; `None` is unset.
    RouteTableRange(Option<IndexRange>),
    /// Parsed `RouteTableRanges`.
    RouteTableRanges(Vec<IndexRange>),
    /// Parsed `KeyValueList`.
    KeyValues(BTreeMap<String, String>),
    /// Parsed `KeyDurationList`.
    KeyDurations(BTreeMap<String, Duration>),
}

/// The variant family a kind parses into (used to check accessors against
/// the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// [`Value::Bool`].
    Bool,
    /// [`Value::OptBool`].
    OptBool,
    /// [`Value::Int`].
    Int,
    /// [`Value::Duration`].
    Duration,
    /// [`Value::Str`].
    Str,
    /// [`Value::StrList`].
    StrList,
    /// [`Value::IfacePatterns`].
    IfacePatterns,
    /// [`Value::Regex`].
    Regex,
    /// [`Value::Ipv4`].
    Ipv4,
    /// [`Value::Ipv6`].
    Ipv6,
    /// [`Value::Ports`].
    Ports,
    /// [`Value::PortRange`].
    PortRange,
    /// [`Value::PortRanges`].
    PortRanges,
    /// [`Value::Mark`].
    Mark,
    /// [`Value::Cidrs`].
    Cidrs,
    /// [`Value::RouteTableRange`].
    RouteTableRange,
    /// [`Value::RouteTableRanges`].
    RouteTableRanges,
    /// [`Value::KeyValues`].
    KeyValues,
    /// [`Value::KeyDurations`].
    KeyDurations,
}

impl Value {
    /// The variant family of this value.
    pub fn shape(&self) -> Shape {
        match self {
            Value::Bool(_) => Shape::Bool,
            Value::OptBool(_) => Shape::OptBool,
            Value::Int(_) => Shape::Int,
            Value::Duration(_) => Shape::Duration,
            Value::Str(_) => Shape::Str,
            Value::StrList(_) => Shape::StrList,
            Value::IfacePatterns(_) => Shape::IfacePatterns,
            Value::Regex(_) => Shape::Regex,
            Value::Ipv4(_) => Shape::Ipv4,
            Value::Ipv6(_) => Shape::Ipv6,
            Value::Ports(_) => Shape::Ports,
            Value::PortRange(_) => Shape::PortRange,
            Value::PortRanges(_) => Shape::PortRanges,
            Value::Mark(_) => Shape::Mark,
            Value::Cidrs(_) => Shape::Cidrs,
            Value::RouteTableRange(_) => Shape::RouteTableRange,
            Value::RouteTableRanges(_) => Shape::RouteTableRanges,
            Value::KeyValues(_) => Shape::KeyValues,
            Value::KeyDurations(_) => Shape::KeyDurations,
        }
    }

    /// Canonical text of the value, in a form that parses back to the same
    /// value (used by the docs and by `felix calc`'s config view).
    pub fn render(&self) -> String {
        fn join<T: ToString>(items: &[T]) -> String {
            items
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
        match self {
            Value::Bool(b) => b.to_string(),
            Value::OptBool(b) => b.map(|b| b.to_string()).unwrap_or_default(),
            Value::Int(i) => i.to_string(),
            Value::Duration(d) => format_duration(*d),
            Value::Str(s) => s.clone(),
            Value::StrList(l) => l.join(","),
            Value::IfacePatterns(l) => l
                .iter()
                .map(|p| p.text.clone())
                .collect::<Vec<_>>()
                .join(","),
            Value::Regex(r) => r
                .as_ref()
                .map(|r| r.as_str().to_string())
                .unwrap_or_default(),
            Value::Ipv4(a) => a.map(|a| a.to_string()).unwrap_or_default(),
            Value::Ipv6(a) => a.map(|a| a.to_string()).unwrap_or_default(),
            Value::Ports(p) => join(p),
            Value::PortRange(r) => r.map(|r| r.to_string()).unwrap_or_default(),
            Value::PortRanges(r) => join(r),
            Value::Mark(m) => format!("{m:#010x}"),
            Value::Cidrs(c) => join(c),
            Value::RouteTableRange(r) => r.map(|r| r.to_string()).unwrap_or_default(),
            Value::RouteTableRanges(r) => join(r),
            Value::KeyValues(kv) => kv
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            Value::KeyDurations(kv) => kv.iter().fold(String::new(), |mut acc, (k, v)| {
                if !acc.is_empty() {
                    acc.push(',');
                }
                let _ = write!(acc, "{k}={}", format_duration(*v));
                acc
            }),
        }
    }
}

impl Kind {
    /// The value used for an explicit `none` (and for an empty default):
    /// false, zero, empty or unset.
    pub fn zero(self) -> Value {
        match self {
            Kind::Bool => Value::Bool(false),
            Kind::OptBool => Value::OptBool(None),
            Kind::Int { .. } => Value::Int(0),
            Kind::Seconds | Kind::Millis => Value::Duration(Duration::ZERO),
            Kind::Str(_) | Kind::OneOf(_) | Kind::File { .. } => Value::Str(String::new()),
            Kind::IfaceList | Kind::EndpointList | Kind::IfaceFilterList => {
                Value::StrList(Vec::new())
            }
            Kind::IfaceRegexList => Value::IfacePatterns(Vec::new()),
            Kind::Regex => Value::Regex(None),
            Kind::Ipv4 => Value::Ipv4(None),
            Kind::Ipv6 => Value::Ipv6(None),
            Kind::PortList => Value::Ports(Vec::new()),
            Kind::PortRange => Value::PortRange(None),
            Kind::PortRangeList => Value::PortRanges(Vec::new()),
            Kind::MarkBitmask => Value::Mark(0),
            Kind::CidrList => Value::Cidrs(Vec::new()),
            Kind::RouteTableRange => Value::RouteTableRange(None),
            Kind::RouteTableRanges => Value::RouteTableRanges(Vec::new()),
            Kind::KeyValueList => Value::KeyValues(BTreeMap::new()),
            Kind::KeyDurationList => Value::KeyDurations(BTreeMap::new()),
        }
    }

    /// The variant family values of this kind parse into.
    pub fn shape(self) -> Shape {
        self.zero().shape()
    }

    /// Parses and validates `raw`. The error is a short reason (no
    /// parameter name; the caller adds context).
    pub fn parse(self, raw: &str) -> Result<Value, String> {
        match self {
            Kind::Bool => parse_bool(raw).map(Value::Bool),
            Kind::OptBool => parse_bool(raw).map(|b| Value::OptBool(Some(b))),
            Kind::Int { min, max } => {
                let v = parse_go_int(raw).ok_or_else(|| "invalid integer".to_string())?;
                if v < min {
                    Err(format!("value must be at least {min}"))
                } else if v > max {
                    Err(format!("value must be at most {max}"))
                } else {
                    Ok(Value::Int(v))
                }
            }
            Kind::Seconds => parse_duration(raw, Unit::Seconds).map(Value::Duration),
            Kind::Millis => parse_duration(raw, Unit::Millis).map(Value::Duration),
            Kind::Str(check) => check_str(check, raw).map(|()| Value::Str(raw.to_string())),
            Kind::OneOf(options) => options
                .iter()
                .find(|o| o.eq_ignore_ascii_case(raw.trim()))
                .map(|o| Value::Str((*o).to_string()))
                .ok_or_else(|| format!("must be one of {}", options.join(", "))),
            Kind::IfaceList => parse_iface_list(raw).map(Value::StrList),
            Kind::IfaceRegexList => parse_iface_regex_list(raw).map(Value::IfacePatterns),
            Kind::Regex => {
                if raw.is_empty() {
                    Ok(Value::Regex(None))
                } else {
                    Regex::new(raw)
                        .map(|r| Value::Regex(Some(Pattern(r))))
                        .map_err(|_| "invalid regular expression".to_string())
                }
            }
            Kind::File { must_exist } => {
                if raw.contains('\n') || raw.contains('\0') {
                    return Err("invalid path".to_string());
                }
                if must_exist && !raw.is_empty() && !std::path::Path::new(raw).exists() {
                    return Err("file does not exist".to_string());
                }
                Ok(Value::Str(raw.to_string()))
            }
            Kind::Ipv4 => parse_ip(raw)
                .and_then(|ip| match ip {
                    IpAddr::V4(a) => Some(a),
                    IpAddr::V6(a) => a.to_ipv4_mapped(),
                })
                .map(|a| Value::Ipv4(Some(a)))
                .ok_or_else(|| "not an IPv4 address".to_string()),
            Kind::Ipv6 => match parse_ip(raw) {
                Some(IpAddr::V6(a)) if a.to_ipv4_mapped().is_none() => Ok(Value::Ipv6(Some(a))),
                _ => Err("not an IPv6 address".to_string()),
            },
            Kind::EndpointList => parse_endpoint_list(raw).map(Value::StrList),
            Kind::PortList => parse_port_list(raw).map(Value::Ports),
            Kind::PortRange => parse_port_range(raw.trim()).map(|r| Value::PortRange(Some(r))),
            Kind::PortRangeList => raw
                .split(',')
                .map(|p| parse_port_range(p.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::PortRanges),
            Kind::MarkBitmask => {
                let v = parse_go_int(raw)
                    .filter(|_| !raw.trim_start().starts_with(['-', '+']))
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| {
                        "invalid mark: should be a 32-bit unsigned integer".to_string()
                    })?;
                if v.count_ones() < MIN_MARK_BITS {
                    return Err(format!(
                        "invalid mark: needs at least {MIN_MARK_BITS} bits set"
                    ));
                }
                Ok(Value::Mark(v))
            }
            Kind::CidrList => raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| parse_cidr_or_ip(s).ok_or_else(|| format!("invalid CIDR or IP {s:?}")))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Cidrs),
            Kind::RouteTableRange => {
                parse_route_table_range(raw).map(|r| Value::RouteTableRange(Some(r)))
            }
            Kind::RouteTableRanges => parse_route_table_ranges(raw).map(Value::RouteTableRanges),
            Kind::KeyValueList => parse_key_values(raw).map(Value::KeyValues),
            Kind::KeyDurationList => {
                let kvs = parse_key_values(raw)?;
                let mut out = BTreeMap::new();
                for (k, v) in kvs {
                    let d = crate::duration::parse_go_duration(&v)
                        .map_err(|e| format!("key {k:?}: {e}"))?;
                    out.insert(k, d);
                }
                Ok(Value::KeyDurations(out))
            }
            Kind::IfaceFilterList => raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    check_str(StrCheck::IfaceParam, s)
                        .map(|()| s.to_string())
                        .map_err(|_| format!("invalid interface name {s:?}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Value::StrList),
        }
    }

    /// One-line description of the accepted syntax, for the docs.
    pub fn describe(self) -> String {
        match self {
            Kind::Bool => "boolean (`true`/`false`, also `1`/`0`, `yes`/`no`, `y`/`n`, `t`/`f`)".into(),
            Kind::OptBool => "optional boolean (unset by default)".into(),
            Kind::Int { min, max } if min == i64::MIN && max == i64::MAX => "integer".into(),
            Kind::Int { min, max } => format!("integer in [{min}, {max}]"),
            Kind::Seconds => "duration: seconds (may be fractional) or Go duration (`90s`, `1m30s`)".into(),
            Kind::Millis => "duration: milliseconds (may be fractional) or Go duration (`50ms`)".into(),
            Kind::Str(StrCheck::Any) => "string".into(),
            Kind::Str(StrCheck::Authority) => "`host:port`".into(),
            Kind::Str(StrCheck::Hostname) => "host name (letters, digits, `_`, `.`, `-`)".into(),
            Kind::Str(StrCheck::HostAddress) => "host name or IP address (at most 64 characters)".into(),
            Kind::Str(StrCheck::IfaceParam) => "interface name (at most 15 characters, `+` as wildcard suffix)".into(),
            Kind::Str(StrCheck::LogRate) => "rate `N/unit`, N in 1-9999, unit `second`, `minute`, `hour` or `day`".into(),
            Kind::OneOf(options) => format!(
                "one of {}",
                options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ")
            ),
            Kind::IfaceList => "comma-separated interface name prefixes".into(),
            Kind::IfaceRegexList => "comma-separated interface names or `/regex/` patterns".into(),
            Kind::Regex => "regular expression".into(),
            Kind::File { must_exist: true } => "path of an existing file".into(),
            Kind::File { must_exist: false } => "file path".into(),
            Kind::Ipv4 => "IPv4 address".into(),
            Kind::Ipv6 => "IPv6 address".into(),
            Kind::EndpointList => "comma-separated `http(s)://host:port` URLs".into(),
            Kind::PortList => "comma-separated `proto:port`, `proto:net:port` or `port` (IPv6 nets in `[...]`)".into(),
            Kind::PortRange => "port `n` or range `n:m`".into(),
            Kind::PortRangeList => "comma-separated ports `n` or ranges `n:m`".into(),
            Kind::MarkBitmask => format!("32-bit mask, hex or decimal, at least {MIN_MARK_BITS} bits set"),
            Kind::CidrList => "comma-separated CIDRs or IP addresses".into(),
            Kind::RouteTableRange => "routing-table range `n-m` within 1-250".into(),
            Kind::RouteTableRanges => format!("comma-separated routing-table ranges `n-m`, at most {MAX_ROUTE_TABLES} tables in all"),
            Kind::KeyValueList => "comma-separated `key=value` pairs".into(),
            Kind::KeyDurationList => "comma-separated `key=duration` pairs (Go durations)".into(),
            Kind::IfaceFilterList => "comma-separated interface names (`+` as wildcard suffix)".into(),
        }
    }
}

fn parse_bool(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "t" => Ok(true),
        "false" | "0" | "no" | "n" | "f" => Ok(false),
        _ => Err("invalid boolean".to_string()),
    }
}

/// Integer in Go's base-prefix syntax (`strconv.ParseInt(s, 0, 64)`).
pub(crate) fn parse_go_int(raw: &str) -> Option<i64> {
    let s = raw.trim();
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = i128::from_str_radix(body, radix).ok()?;
    let v = if neg { -magnitude } else { magnitude };
    i64::try_from(v).ok()
}

fn check_str(check: StrCheck, raw: &str) -> Result<(), String> {
    fn all_chars(s: &str, extra: &str) -> bool {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
    }
    let ok = match check {
        StrCheck::Any => !raw.contains('\n'),
        StrCheck::Authority => match raw.rsplit_once(':') {
            Some((host, port)) => {
                !host.is_empty()
                    && !host.contains([':', '/'])
                    && !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit())
            }
            None => false,
        },
        StrCheck::Hostname => !raw.is_empty() && all_chars(raw, "_.-"),
        StrCheck::HostAddress => (1..=64).contains(&raw.len()) && all_chars(raw, ":._+-"),
        StrCheck::IfaceParam => (1..=15).contains(&raw.len()) && all_chars(raw, ":._+-"),
        StrCheck::LogRate => raw.is_empty() || is_log_rate(raw),
    };
    if ok {
        Ok(())
    } else {
        Err(match check {
            StrCheck::Any => "string must be a single line",
            StrCheck::Authority => "invalid host:port",
            StrCheck::Hostname => "invalid hostname",
            StrCheck::HostAddress => "invalid host address",
            StrCheck::IfaceParam => "invalid interface name",
            StrCheck::LogRate => {
                "invalid log rate limit (expected N/second, N/minute, N/hour or N/day)"
            }
        }
        .to_string())
    }
}

fn is_log_rate(raw: &str) -> bool {
    let Some((n, unit)) = raw.split_once('/') else {
        return false;
    };
    let n_ok =
        (1..=4).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
    n_ok && matches!(unit, "second" | "minute" | "hour" | "day")
}

fn is_iface_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn parse_iface_list(raw: &str) -> Result<Vec<String>, String> {
    let parts: Vec<&str> = raw.split(',').collect();
    if parts.iter().all(|p| is_iface_name(p)) {
        Ok(parts.into_iter().map(str::to_string).collect())
    } else {
        Err("invalid Linux interface name".to_string())
    }
}

fn parse_iface_regex_list(raw: &str) -> Result<Vec<IfacePattern>, String> {
    let err = || "list contains an invalid Linux interface name or /regex/".to_string();
    raw.split(',')
        .map(|t| {
            let re = if t.len() >= 3
                && t.starts_with('/')
                && t.ends_with('/')
                && !t.contains(char::is_whitespace)
            {
                Regex::new(&t[1..t.len() - 1]).map_err(|_| err())?
            } else if is_iface_name(t) {
                Regex::new(&format!("^{}$", regex::escape(t))).map_err(|_| err())?
            } else {
                return Err(err());
            };
            Ok(IfacePattern {
                text: t.to_string(),
                pattern: Pattern(re),
            })
        })
        .collect()
}

fn parse_ip(raw: &str) -> Option<IpAddr> {
    raw.trim().parse::<IpAddr>().ok()
}

/// A CIDR (host bits cleared) or a bare IP (as a /32 or /128).
fn parse_cidr_or_ip(s: &str) -> Option<IpNet> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Some(net.trunc());
    }
    s.parse::<IpAddr>().ok().map(IpNet::from)
}

fn parse_endpoint_list(raw: &str) -> Result<Vec<String>, String> {
    let mut scheme_seen: Option<String> = None;
    let mut out = Vec::new();
    for ep in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || format!("{ep:?} is not a valid endpoint; expected scheme://host:port only");
        let (scheme, rest) = ep.split_once("://").ok_or_else(bad)?;
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
        let host = rest.strip_suffix('/').unwrap_or(rest);
        if !scheme_ok || host.is_empty() || host.contains(['/', '?', '#', '@', ' ']) {
            return Err(bad());
        }
        let scheme = scheme.to_ascii_lowercase();
        if let Some(prev) = &scheme_seen {
            if *prev != scheme {
                return Err("all endpoints must have the same scheme".to_string());
            }
        }
        out.push(format!("{scheme}://{host}/"));
        scheme_seen = Some(scheme);
    }
    Ok(out)
}

fn parse_port_list(raw: &str) -> Result<Vec<ProtoPort>, String> {
    let mut out = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut rest = entry.to_string();
        let mut net_str: Option<String> = None;
        // An IPv6 network is written in brackets: proto:[net]:port.
        if let (Some(open), Some(close)) = (rest.find('['), rest.find("]:")) {
            if open < close {
                net_str = Some(rest[open + 1..close].to_string());
                rest = format!("{}{}", &rest[..open], &rest[close + 2..]);
            } else {
                return Err(format!("malformed entry {entry:?}"));
            }
        }
        let parts: Vec<&str> = rest.split(':').collect();
        let (proto, port_str) =
            match parts.as_slice() {
                [port] => ("tcp".to_string(), *port),
                [proto, port] => (proto.to_ascii_lowercase(), *port),
                [proto, net, port] => {
                    net_str = Some((*net).to_string());
                    (proto.to_ascii_lowercase(), *port)
                }
                _ => return Err(
                    "ports should be <protocol>:<net>:<number>, <protocol>:<number> or <number>"
                        .to_string(),
                ),
            };
        if proto != "tcp" && proto != "udp" {
            return Err(format!("unknown protocol {proto:?}"));
        }
        let port: i64 = port_str
            .parse()
            .map_err(|_| format!("port {port_str:?} is not an integer"))?;
        let port = u16::try_from(port).map_err(|_| "ports must be in range 0-65535".to_string())?;
        let net = match net_str {
            Some(n) => {
                Some(parse_cidr_or_ip(&n).ok_or_else(|| format!("invalid CIDR or IP {n:?}"))?)
            }
            None => None,
        };
        out.push(ProtoPort {
            protocol: proto,
            port,
            net,
        });
    }
    Ok(out)
}

fn parse_port_range(s: &str) -> Result<PortRange, String> {
    let bad = || format!("{s:?} is not a valid port or port range");
    let num = |t: &str| -> Result<u16, String> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<u16>().map_err(|_| bad())
    };
    let (min, max) = match s.split_once(':') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let p = num(s)?;
            (p, p)
        }
    };
    if min > max {
        return Err(format!("{s:?}: range start is greater than its end"));
    }
    Ok(PortRange { min, max })
}

fn parse_route_table_range(raw: &str) -> Result<IndexRange, String> {
    let err = || "must be a range of route table indices within 1-250".to_string();
    let (a, b) = raw.split_once('-').ok_or_else(err)?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return Err(err());
    }
    let min: u32 = a.parse().map_err(|_| err())?;
    let max: u32 = b.parse().map_err(|_| err())?;
    if min >= 1 && max >= min && max <= 250 {
        Ok(IndexRange { min, max })
    } else {
        Err(err())
    }
}

/// Finds every `digits-digits` run in `raw` (any separators between them),
/// as upstream does, and checks each range and the total size.
fn parse_route_table_ranges(raw: &str) -> Result<Vec<IndexRange>, String> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    let mut ranges = Vec::new();
    let mut total: u64 = 0;
    let digit_run = |from: usize| {
        let mut j = from;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let end_a = digit_run(i);
        if end_a + 1 < bytes.len() && bytes[end_a] == b'-' && bytes[end_a + 1].is_ascii_digit() {
            let end_b = digit_run(end_a + 1);
            let min: u64 = raw[i..end_a]
                .parse()
                .ok()
                .filter(|m| *m > 0)
                .ok_or_else(|| "min value is not a valid number".to_string())?;
            let max: u64 = raw[end_a + 1..end_b]
                .parse()
                .map_err(|_| "max value is not a valid number".to_string())?;
            if min > max {
                return Err("min value is greater than max value".to_string());
            }
            if max > u64::from(u32::MAX) {
                return Err("max value is too high".to_string());
            }
            total += max - min + 1;
            if total > MAX_ROUTE_TABLES {
                return Err("targets too many tables".to_string());
            }
            ranges.push(IndexRange {
                min: min as u32,
                max: max as u32,
            });
            i = end_b;
        } else {
            i = end_a;
        }
    }
    if ranges.is_empty() {
        return Err("must be a list of route-table ranges n-m".to_string());
    }
    Ok(ranges)
}

/// `key=value` pairs separated by commas; keys are word characters, values
/// keep their spaces; empty items are skipped.
fn parse_key_values(raw: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut invalid = Vec::new();
    for item in raw.split(',') {
        if item.trim().is_empty() {
            continue;
        }
        let item_l = item.trim_start();
        match item_l.split_once('=') {
            Some((k, v)) if !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                out.insert(k.to_string(), v.to_string());
            }
            _ => invalid.push(item.to_string()),
        }
    }
    if invalid.is_empty() {
        Ok(out)
    } else {
        Err(format!("invalid key=value items {invalid:?}"))
    }
}
