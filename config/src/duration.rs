//! Duration parsing for parameters measured in seconds or milliseconds.
//!
//! Two spellings are accepted everywhere a duration is expected:
//! - a plain decimal number in the parameter's unit (`90`, `1.5`), the form
//!   upstream's config file and environment use, and
//! - a Go duration string (`90s`, `1m30s`, `250ms`, `1.5h`), the form the v3
//!   `FelixConfiguration` API uses.
//!
//! Negative and non-finite durations are rejected: `std::time::Duration`
//! cannot hold them and no Felix parameter gives them a meaning.

use std::time::Duration;

/// Unit that a bare number stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A bare number is seconds.
    Seconds,
    /// A bare number is milliseconds.
    Millis,
}

/// Parses `raw` as a duration, reading a bare number in `unit`.
pub fn parse_duration(raw: &str, unit: Unit) -> Result<Duration, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("empty duration".to_string());
    }
    if let Some(n) = parse_plain_number(s) {
        let secs = match unit {
            Unit::Seconds => n,
            Unit::Millis => n / 1000.0,
        };
        return secs_to_duration(secs);
    }
    parse_go_duration(s)
}

/// A plain decimal number (optional sign, digits, optional fraction and
/// exponent). Returns `None` if `s` has any other character, so that a Go
/// duration such as `90s` falls through to [`parse_go_duration`].
fn parse_plain_number(s: &str) -> Option<f64> {
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'));
    if !ok || !s.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<f64>().ok()
}

fn secs_to_duration(secs: f64) -> Result<Duration, String> {
    if !secs.is_finite() {
        return Err("duration is not a finite number".to_string());
    }
    if secs < 0.0 {
        return Err("duration must not be negative".to_string());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| "duration is too large".to_string())
}

/// Parses a Go `time.ParseDuration` string: a sequence of decimal numbers,
/// each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`). `0` alone is
/// allowed without a unit.
pub fn parse_go_duration(raw: &str) -> Result<Duration, String> {
    let s = raw.trim();
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("invalid duration {raw:?}"));
    }
    let mut total_secs = 0.0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(format!("invalid duration {raw:?}"));
        }
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {raw:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in duration {raw:?}")),
            _ => return Err(format!("unknown unit {unit:?} in duration {raw:?}")),
        };
        total_secs += value * scale;
        rest = &rest[unit_len..];
    }
    if negative && total_secs > 0.0 {
        return Err("duration must not be negative".to_string());
    }
    secs_to_duration(total_secs)
}

/// Formats a duration the way the docs and `raw()` callers expect: whole
/// seconds as `Ns`, otherwise fractional seconds.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_use_the_parameter_unit() {
        assert_eq!(
            parse_duration("90", Unit::Seconds),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("1.5", Unit::Seconds),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_duration("50", Unit::Millis),
            Ok(Duration::from_millis(50))
        );
        assert_eq!(parse_duration("0", Unit::Seconds), Ok(Duration::ZERO));
    }

    #[test]
    fn go_duration_strings_are_accepted() {
        assert_eq!(
            parse_duration("90s", Unit::Seconds),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("1m30s", Unit::Seconds),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("1h", Unit::Seconds),
            Ok(Duration::from_secs(3600))
        );
        assert_eq!(
            parse_duration("1.5h", Unit::Seconds),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_duration("250ms", Unit::Seconds),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(
            parse_duration("10us", Unit::Millis),
            Ok(Duration::from_micros(10))
        );
        assert_eq!(
            parse_duration("2h45m", Unit::Seconds),
            Ok(Duration::from_secs(9900))
        );
    }

    #[test]
    fn bad_durations_are_rejected() {
        for bad in [
            "", "abc", "10x", "s", "1..5s", "-5", "-1s", "NaN", "inf", "1e400", "5 s",
        ] {
            assert!(
                parse_duration(bad, Unit::Seconds).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn format_round_trips_whole_and_fractional_seconds() {
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        for d in [Duration::from_secs(7), Duration::from_millis(2250)] {
            assert_eq!(parse_duration(&format_duration(d), Unit::Seconds), Ok(d));
        }
    }
}
