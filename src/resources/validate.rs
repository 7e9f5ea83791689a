//! Field-level checks shared by every kind: names, labels, annotations,
//! addresses, ports, protocols and selectors, with upstream's rules.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::types::IntOrString;
use super::ValidationError;
use crate::model::{Port, Protocol};

/// Maximum length of a selector field (CRD schema limit).
pub(crate) const MAX_SELECTOR_LEN: usize = 1024;
/// Maximum total size of a resource's annotations (keys plus values).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

pub(crate) type VResult<T> = Result<T, ValidationError>;

/// A field path `base[index]`, rendered only when an error names it (the
/// happy path of a large load never formats a path).
#[derive(Clone, Copy)]
pub(crate) struct Indexed<B>(pub B, pub usize);

impl<B: fmt::Display> fmt::Display for Indexed<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// A field path `base.name`, rendered only when an error names it.
#[derive(Clone, Copy)]
pub(crate) struct Sub<B>(pub B, pub &'static str);

impl<B: fmt::Display> fmt::Display for Sub<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

pub(crate) fn err<T>(field: impl fmt::Display, reason: impl Into<String>) -> VResult<T> {
    Err(ValidationError::new(field.to_string(), reason))
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without a length limit.
pub(crate) fn matches_label_fmt(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// `label(\.label)*` without a length limit (upstream's `name` rule).
pub(crate) fn matches_subdomain_fmt(s: &str) -> bool {
    // One pass: `prev` is the previous byte, `.` at the start of a label.
    let mut prev = b'.';
    for &c in s.as_bytes() {
        let ok = match c {
            b'a'..=b'z' | b'0'..=b'9' => true,
            b'-' => prev != b'.',
            b'.' => prev != b'.' && prev != b'-',
            _ => false,
        };
        if !ok {
            return false;
        }
        prev = c;
    }
    prev != b'.' && prev != b'-'
}

/// DNS-1123 label: the label format, at most 63 characters.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && matches_label_fmt(s)
}

/// DNS-1123 subdomain: the subdomain format, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && matches_subdomain_fmt(s)
}

/// Checks a resource name with upstream's generic rule.
pub(crate) fn check_name(field: impl fmt::Display + Copy, s: &str) -> VResult<()> {
    if s.len() > 253 {
        return err(
            field,
            format!("name is too long by {} bytes", s.len() - 253),
        );
    }
    if !matches_subdomain_fmt(s) {
        return err(
            field,
            format!("{s:?} is invalid: must consist of lower case alphanumeric characters, '-' or '.', and start and end with an alphanumeric character"),
        );
    }
    Ok(())
}

/// The name part of a Kubernetes qualified name / label value:
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_k8s_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|&c| NAME_PART_BYTE[usize::from(c)])
}

/// Bytes allowed inside a name part: `[-A-Za-z0-9_.]` (a table: label
/// checks run for every label of every resource loaded).
static NAME_PART_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
        c += 1;
    }
    t
};

/// Kubernetes `IsQualifiedName`: `[prefix/]name`, prefix a DNS subdomain.
pub(crate) fn is_qualified_name(s: &str) -> bool {
    // A byte search: `split_once` sets up a substring searcher per call,
    // which costs more than these short keys take to scan.
    match s.bytes().position(|b| b == b'/') {
        Some(i) => is_dns1123_subdomain(&s[..i]) && is_k8s_name_part(&s[i + 1..]),
        None => is_k8s_name_part(s),
    }
}

/// Kubernetes `IsValidLabelValue`: empty, or a name part.
pub(crate) fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_k8s_name_part(s)
}

/// Kubernetes `IsValidPortName` (IANA service name): at most 15 of
/// `[-a-z0-9]`, at least one letter, no leading, trailing or double `-`.
pub(crate) fn is_valid_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}

/// Interface name: `^[a-zA-Z0-9_.-]{1,15}$`.
pub(crate) fn is_interface_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
}

pub(crate) fn check_labels(
    field: impl fmt::Display + Copy,
    labels: &crate::model::Labels,
) -> VResult<()> {
    for (k, v) in labels {
        if !is_known_qualified_name(k) {
            return err(format!("{field}[{k}]"), "invalid label key: must be a qualified name ([prefix/]name, name at most 63 alphanumeric, '-', '_' or '.' characters)");
        }
        if !is_label_value(v) {
            return err(format!("{field}[{k}]"), format!("invalid label value {v:?}: must be at most 63 alphanumeric, '-', '_' or '.' characters, starting and ending with an alphanumeric"));
        }
    }
    Ok(())
}

pub(crate) fn check_annotations(
    field: impl fmt::Display + Copy,
    annotations: &BTreeMap<String, String>,
) -> VResult<()> {
    let mut total = 0usize;
    for (k, v) in annotations {
        if !is_qualified_name(&k.to_ascii_lowercase()) {
            return err(
                format!("{field}[{k}]"),
                "invalid annotation key: must be a qualified name",
            );
        }
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return err(
            field,
            format!(
                "total size of annotations is too large by {} bytes",
                total - MAX_ANNOTATIONS_BYTES
            ),
        );
    }
    Ok(())
}

/// Go's `net.ParseCIDR`: address and network (host bits masked off).
pub(crate) fn parse_cidr(s: &str) -> Option<(IpAddr, IpNet)> {
    if !has_slash(s) {
        return None;
    }
    parse_slashed(s)
}

/// [`parse_cidr`] for a text known to contain a `/`.
fn parse_slashed(s: &str) -> Option<(IpAddr, IpNet)> {
    let net: IpNet = match plain_v4_cidr(s) {
        Some(net) => net,
        None => s.parse().ok()?,
    };
    Some((net.addr(), net.trunc()))
}

fn has_slash(s: &str) -> bool {
    s.bytes().any(|b| b == b'/')
}

/// The common form `a.b.c.d/n` (decimal without leading zeros, `n <= 32`),
/// read without the general parser; `None` for anything else, which the
/// general parser then decides.  Every text accepted here means the same
/// to the general parser.
fn plain_v4_cidr(s: &str) -> Option<IpNet> {
    // A decimal number without leading zeros, at most `max`.
    fn number(part: &[u8], max: u32) -> Option<u32> {
        if part.is_empty() || part.len() > 3 || (part.len() > 1 && part[0] == b'0') {
            return None;
        }
        let mut v = 0u32;
        for &c in part {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(c - b'0');
        }
        (v <= max).then_some(v)
    }
    let slash = s.bytes().position(|b| b == b'/')?;
    let (addr, len) = (&s[..slash], &s[slash + 1..]);
    let mut octets = [0u8; 4];
    let mut parts = addr.as_bytes().split(|&b| b == b'.');
    for octet in &mut octets {
        *octet = u8::try_from(number(parts.next()?, 255)?).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    let len = u8::try_from(number(len.as_bytes(), 32)?).ok()?;
    ipnet::Ipv4Net::new(octets.into(), len).ok().map(IpNet::V4)
}

/// libcalico's `ParseCIDROrIP`: a CIDR, or a plain address taken as a
/// full-length prefix.
pub(crate) fn parse_cidr_or_ip(s: &str) -> Option<(IpAddr, IpNet)> {
    if has_slash(s) {
        return parse_slashed(s);
    }
    let ip: IpAddr = s.parse().ok()?;
    Some((ip, IpNet::from(ip)))
}

/// Upstream's `net` rule: a CIDR or address whose host bits are clear.
pub(crate) fn parse_strict_net(field: impl fmt::Display + Copy, s: &str) -> VResult<IpNet> {
    match parse_cidr_or_ip(s) {
        None => err(field, format!("{s:?} is not a valid CIDR")),
        Some((ip, net)) if ip != net.addr() => err(
            field,
            format!("{s:?} is not strictly masked (host bits set; network is {net})"),
        ),
        Some((_, net)) => Ok(net),
    }
}

/// Upstream's `cidr` rule: any CIDR or address; returned masked.
pub(crate) fn parse_loose_net(field: impl fmt::Display + Copy, s: &str) -> VResult<IpNet> {
    match parse_cidr_or_ip(s) {
        Some((_, net)) => Ok(net),
        None => err(field, format!("{s:?} is not a valid CIDR or IP address")),
    }
}

pub(crate) fn parse_ip(field: impl fmt::Display + Copy, s: &str) -> VResult<IpAddr> {
    s.parse()
        .or_else(|_| err(field, format!("{s:?} is not a valid IP address")))
}

pub(crate) fn parse_ipv4(field: impl fmt::Display + Copy, s: &str) -> VResult<IpAddr> {
    match s.parse::<IpAddr>() {
        Ok(ip @ IpAddr::V4(_)) => Ok(ip),
        _ => err(field, format!("{s:?} is not a valid IPv4 address")),
    }
}

pub(crate) fn parse_ipv6(field: impl fmt::Display + Copy, s: &str) -> VResult<IpAddr> {
    match s.parse::<IpAddr>() {
        Ok(ip @ IpAddr::V6(_)) => Ok(ip),
        _ => err(field, format!("{s:?} is not a valid IPv6 address")),
    }
}

/// Go's `net.ParseMAC` for the 6-byte forms (`:` or `-` separated pairs,
/// or `.` separated quads); returns the lower-case, colon-separated form.
/// `xx:xx:xx:xx:xx:xx` in lower-case hex: the form [`parse_mac`] returns.
fn is_canonical_mac(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 17
        && b.iter().enumerate().all(|(i, &c)| {
            if i % 3 == 2 {
                c == b':'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
}

pub(crate) fn parse_mac(field: impl fmt::Display + Copy, s: &str) -> VResult<String> {
    let bad = || {
        ValidationError::new(
            field.to_string(),
            format!("{s:?} is not a valid MAC address"),
        )
    };
    if is_canonical_mac(s) {
        // Already in the output form (what Calico's tooling writes).
        return Ok(s.to_owned());
    }
    let mut bytes = [0u8; 6];
    let mut n = 0usize;
    let mut push = |b: u8| -> Option<()> {
        *bytes.get_mut(n)? = b;
        n += 1;
        Some(())
    };
    if s.len() == 14 && s.as_bytes()[4] == b'.' {
        for quad in s.split('.') {
            if quad.len() != 4 {
                return Err(bad());
            }
            let v = u16::from_str_radix(quad, 16).map_err(|_| bad())?;
            let [hi, lo] = v.to_be_bytes();
            push(hi).ok_or_else(bad)?;
            push(lo).ok_or_else(bad)?;
        }
    } else {
        let sep = if s.contains('-') { '-' } else { ':' };
        for pair in s.split(sep) {
            if pair.len() != 2 {
                return Err(bad());
            }
            push(u8::from_str_radix(pair, 16).map_err(|_| bad())?).ok_or_else(bad)?;
        }
    }
    if n != 6 {
        return Err(bad());
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(17);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(out)
}

fn port_number(field: impl fmt::Display + Copy, n: i64) -> VResult<u16> {
    if !(1..=65535).contains(&n) {
        return err(
            field,
            format!("port {n} is invalid: port number must be between 1 and 65535"),
        );
    }
    Ok(n as u16)
}

/// A rule port: `80`, `"80"`, `"1000:2000"` or a named port.
pub(crate) fn parse_port(field: impl fmt::Display + Copy, raw: &IntOrString) -> VResult<Port> {
    match raw {
        IntOrString::Int(n) => port_number(field, *n).map(Port::Number),
        IntOrString::Str(s) => {
            let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
            if digits(s) {
                let n = s.parse::<i64>().unwrap_or(i64::MAX);
                return port_number(field, n).map(Port::Number);
            }
            if let Some((a, b)) = s.split_once(':') {
                if digits(a) && digits(b) {
                    let first = port_number(field, a.parse::<i64>().unwrap_or(i64::MAX))?;
                    let last = port_number(field, b.parse::<i64>().unwrap_or(i64::MAX))?;
                    if first > last {
                        return err(
                            field,
                            format!("port range {s:?} is invalid: minimum is greater than maximum"),
                        );
                    }
                    return Ok(if first == last {
                        Port::Number(first)
                    } else {
                        Port::Range { first, last }
                    });
                }
            }
            if is_valid_port_name(s) {
                Ok(Port::Named(s.clone()))
            } else {
                err(
                    field,
                    format!("{s:?} is not a valid port, port range or port name"),
                )
            }
        }
    }
}

/// Protocol names accepted in v3 resources (case-sensitive, as upstream).
pub(crate) const PROTOCOL_NAMES: [&str; 6] = ["TCP", "UDP", "ICMP", "ICMPv6", "SCTP", "UDPLite"];

/// A protocol: a number 1-255 (as integer or digit string) or one of
/// [`PROTOCOL_NAMES`].
pub(crate) fn parse_protocol(
    field: impl fmt::Display + Copy,
    raw: &IntOrString,
) -> VResult<Protocol> {
    let number = |n: i64| -> VResult<Protocol> {
        match u8::try_from(n) {
            Ok(0) | Err(_) => err(
                field,
                format!("protocol number {n} is invalid (must be 1-255)"),
            ),
            Ok(v) => Ok(Protocol::Number(v)),
        }
    };
    match raw {
        IntOrString::Int(n) => number(*n),
        IntOrString::Str(s) => {
            if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
                return number(s.parse::<i64>().unwrap_or(i64::MAX));
            }
            if PROTOCOL_NAMES.contains(&s.as_str()) {
                Ok(Protocol::Name(s.clone()))
            } else {
                err(field, format!("protocol {s:?} is invalid (must be one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number)"))
            }
        }
    }
}

/// Whether a protocol allows port matches (TCP, UDP, SCTP, as upstream).
pub(crate) fn supports_ports(p: &Protocol) -> bool {
    match p {
        Protocol::Number(n) => matches!(n, 6 | 17 | 132),
        Protocol::Name(s) => matches!(s.as_str(), "TCP" | "UDP" | "SCTP"),
    }
}

/// Whether a protocol is ICMP (name or number 1).
pub(crate) fn is_icmp(p: &Protocol) -> bool {
    matches!(p, Protocol::Number(1)) || matches!(p, Protocol::Name(s) if s == "ICMP")
}

/// Whether a protocol is ICMPv6 (name or number 58).
pub(crate) fn is_icmpv6(p: &Protocol) -> bool {
    matches!(p, Protocol::Number(58)) || matches!(p, Protocol::Name(s) if s == "ICMPv6")
}

/// Checks that `s` parses as a selector (and is within the length limit).
pub(crate) fn check_selector(field: impl fmt::Display + Copy, s: &str) -> VResult<()> {
    if s.len() > MAX_SELECTOR_LEN {
        return err(
            field,
            format!("selector is longer than {MAX_SELECTOR_LEN} characters"),
        );
    }
    if VALID_SELECTORS.with(|v| v.borrow().contains(s)) {
        return Ok(());
    }
    crate::selector::validate(s)
        .map(|_| remember_valid_selector(s))
        .or_else(|e| err(field, format!("invalid selector {s:?}: {e}")))
}

/// Slots of [`QUALIFIED_NAMES`].
const QUALIFIED_NAME_SLOTS: usize = 256;

thread_local! {
    /// Label keys this thread has recently found to be qualified names,
    /// direct-mapped by a cheap hash of the key (a colliding key replaces
    /// the slot's occupant).
    ///
    /// Invariant: a slot only ever holds a text for which
    /// [`is_qualified_name`] returned true, and that check is a pure
    /// function of the text, so a hit gives exactly its answer.  Label keys
    /// repeat across nearly every resource of a datastore (`app`,
    /// `projectcalico.org/namespace`, ...), and checking them was a tenth of
    /// an endpoint's validation.
    static QUALIFIED_NAMES: std::cell::RefCell<Vec<Option<Box<str>>>> =
        std::cell::RefCell::new(vec![None; QUALIFIED_NAME_SLOTS]);
}

/// [`is_qualified_name`] with [`QUALIFIED_NAMES`] in front.
fn is_known_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    let mut h = b.len();
    if let (Some(&first), Some(&last)) = (b.first(), b.last()) {
        h = h.wrapping_mul(31) ^ usize::from(first).wrapping_mul(131) ^ usize::from(last);
        h ^= b.get(b.len() / 2).map_or(0, |&m| usize::from(m) << 3);
    }
    let slot = h % QUALIFIED_NAME_SLOTS;
    QUALIFIED_NAMES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache[slot].as_deref() == Some(s) {
            return true;
        }
        let ok = is_qualified_name(s);
        if ok {
            cache[slot] = Some(Box::from(s));
        }
        ok
    })
}

/// Bound on [`VALID_SELECTORS`]; the set is emptied when it is reached.
const VALID_SELECTOR_CACHE: usize = 4096;

thread_local! {
    /// Selector texts this thread has already validated successfully.
    ///
    /// Invariant: only texts for which `selector::validate` returned `Ok` are
    /// ever inserted, and parsing is a pure function of the text, so a hit
    /// gives exactly the answer a parse would.  Real datastores repeat
    /// selector texts heavily (every rule naming the same namespace or app),
    /// and the parse is most of a policy's validation cost.  Failures are
    /// not cached: they are rare and their message is built each time.
    static VALID_SELECTORS: std::cell::RefCell<crate::hash::FastSet<Box<str>>> =
        std::cell::RefCell::new(crate::hash::FastSet::default());
}

fn remember_valid_selector(s: &str) {
    VALID_SELECTORS.with(|v| {
        let mut v = v.borrow_mut();
        if v.len() >= VALID_SELECTOR_CACHE {
            v.clear();
        }
        v.insert(Box::from(s));
    });
}

/// A selector that must not use `global()` (everything but an entity
/// rule's namespace selector).
pub(crate) fn check_selector_no_global(field: impl fmt::Display + Copy, s: &str) -> VResult<()> {
    check_selector(field, s)?;
    if s.contains("global(") {
        return err(
            field,
            "global() can only be used in an EntityRule namespaceSelector",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_checks_give_the_same_answer_cached_or_not() {
        for s in ["app == 'web'", "has(x) && !has(y)", "all()"] {
            assert!(check_selector("f", s).is_ok(), "{s}");
            assert!(check_selector("f", s).is_ok(), "{s} (cached)");
        }
        for s in ["app == ", "has(", "a == 'b' &&"] {
            for _ in 0..2 {
                let e = check_selector("spec.selector", s).unwrap_err();
                assert_eq!(e.field, "spec.selector");
                assert!(e.reason.contains("invalid selector"), "{e}");
            }
        }
        let long = format!("a == '{}'", "x".repeat(MAX_SELECTOR_LEN));
        assert!(check_selector("f", &long).is_err());
    }

    #[test]
    fn valid_selector_cache_stays_bounded() {
        for i in 0..VALID_SELECTOR_CACHE + 10 {
            check_selector("f", &format!("app == 'a{i}'")).unwrap();
        }
        VALID_SELECTORS.with(|v| assert!(v.borrow().len() <= VALID_SELECTOR_CACHE));
        assert!(check_selector("f", "app == 'a1'").is_ok());
    }

    proptest::proptest! {
        #[test]
        fn subdomain_format_matches_its_label_definition(s in "[a-z0-9.-]{0,12}|[a-zA-Z0-9._/-]{0,6}") {
            let by_labels = !s.is_empty() && s.split('.').all(matches_label_fmt);
            proptest::prop_assert_eq!(matches_subdomain_fmt(&s), by_labels);
        }

        #[test]
        fn qualified_names_split_at_the_first_slash(s in "[a-z0-9./_-]{0,10}") {
            let expected = match s.split_once('/') {
                Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_k8s_name_part(name),
                None => is_k8s_name_part(&s),
            };
            proptest::prop_assert_eq!(is_qualified_name(&s), expected);
        }

        #[test]
        fn plain_v4_cidrs_read_as_the_general_parser_reads_them(
            s in "[0-9]{1,4}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}/[0-9]{1,3}|[0-9./]{0,20}"
        ) {
            if let Some(net) = plain_v4_cidr(&s) {
                proptest::prop_assert_eq!(Some(net), s.parse::<IpNet>().ok());
            }
        }

        #[test]
        fn cached_qualified_name_checks_agree_with_the_check(
            keys in proptest::collection::vec("[a-z./_-]{0,6}|x{300}", 1..20)
        ) {
            // Twice over: the second pass hits the cache for valid keys.
            for _ in 0..2 {
                for k in &keys {
                    proptest::prop_assert_eq!(is_known_qualified_name(k), is_qualified_name(k), "{}", k);
                }
            }
        }

        #[test]
        fn name_part_table_matches_its_definition(s in "[a-zA-Z0-9._/ :é-]{0,8}") {
            let b = s.as_bytes();
            let expected = !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
            proptest::prop_assert_eq!(is_k8s_name_part(&s), expected);
        }
    }

    #[test]
    fn plain_v4_cidrs_take_the_short_path() {
        for s in [
            "10.0.0.0/32",
            "192.168.0.0/16",
            "0.0.0.0/0",
            "255.255.255.255/32",
        ] {
            assert_eq!(plain_v4_cidr(s), s.parse().ok(), "{s}");
            assert!(plain_v4_cidr(s).is_some(), "{s}");
        }
        for s in [
            "010.0.0.0/8",
            "1.2.3.4/33",
            "1.2.3/8",
            "1.2.3.4.5/8",
            "1.2.3.4/",
            "::/0",
            "1.2.3.256/32",
        ] {
            assert_eq!(plain_v4_cidr(s), None, "{s}");
        }
    }

    #[test]
    fn mac_forms_normalise_to_lower_case_colon_pairs() {
        assert!(is_canonical_mac("ee:ee:00:01:0a:ff"));
        for s in [
            "EE:ee:00:01:0a:FF",
            "ee-ee-00-01-0a-ff",
            "eeee.0001.0aff",
            "ee:ee:00:01:0a:ff",
        ] {
            assert_eq!(
                parse_mac("spec.mac", s).unwrap(),
                "ee:ee:00:01:0a:ff",
                "{s}"
            );
        }
    }

    #[test]
    fn bad_macs_name_the_field() {
        for s in [
            "",
            "ee:ee:00:01:0a",
            "ee:ee:00:01:0a:ff:00",
            "ee:ee:00:01:0a:f",
            "ee:ee:00:01:0a:gg",
            "eeee.0001.0af",
            "eeee.0001.0aff.0000",
        ] {
            let e = parse_mac(Sub(Indexed("spec.x", 2), "mac"), s).unwrap_err();
            assert_eq!(e.field, "spec.x[2].mac", "{s}");
            assert!(e.reason.contains("not a valid MAC"), "{s}: {e}");
        }
    }
}
