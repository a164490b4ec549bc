//! Durations as Flagger writes them: Go's `time.ParseDuration` grammar, exactly, so an
//! `analysis:` block pasted from a Flagger Canary means the same thing here (`1m` is a
//! minute, `1M` is refused, not a month).
//!
//! A duration is an optional sign and one or more decimal numbers, each with an optional
//! fraction and a unit: `300ms`, `1.5h`, `1m30s`, `.5s`, `5.s`; `0` alone needs no unit.
//! Units: `ns`, `us` (or `µs` U+00B5, `μs` U+03BC), `ms`, `s`, `m`, `h`. No spaces, no
//! other units, at most `2562047h47m16.854775807s` (what fits in Go's int64 of
//! nanoseconds). weir refuses negative durations on top of that.

use std::time::Duration;

/// Appended to every refusal, so a user sees what would have been accepted.
pub const ACCEPTED_FORMS: &str = "a duration is decimal numbers, each with an optional \
     fraction and a unit (ns, us or µs, ms, s, m, h), e.g. 300ms, 1.5h, 1m30s, or 0";

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoDurationError {
    /// Not the grammar: empty, no digits, a stray sign or character.
    Invalid,
    /// A number without a unit.
    MissingUnit,
    /// A unit Go does not know.
    UnknownUnit(String),
    /// Beyond Go's int64 of nanoseconds.
    Overflow,
}

const MAX_MAGNITUDE: u64 = 1 << 63;

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Leading `[0-9]*` of `s` and the rest; `None` beyond 2^63 (Go's `leadingInt`).
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > MAX_MAGNITUDE / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > MAX_MAGNITUDE {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Leading `[0-9]*` of a fraction as `digits / scale`; digits past what fits are
/// dropped, not an error (Go's `leadingFraction`).
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (MAX_MAGNITUDE - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > MAX_MAGNITUDE {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

/// Go's `time.ParseDuration`: signed nanoseconds, the same results and the same
/// refusals. One deliberate difference: where Go's sum of the parts wraps around
/// (`9223372036854775808ns9223372036854775808ns` gives 0 in Go), this refuses it.
pub fn parse_go_duration(input: &str) -> Result<i64, GoDurationError> {
    let mut s = input.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first() {
        if c == b'-' || c == b'+' {
            neg = c == b'-';
            s = &s[1..];
        }
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(GoDurationError::Invalid);
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(GoDurationError::Invalid);
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or(GoDurationError::Overflow)?;
        s = rest;
        let pre = before != s.len();
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            (f, scale, s) = leading_fraction(s);
            post = before != s.len();
        }
        if !pre && !post {
            return Err(GoDurationError::Invalid);
        }
        let end = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if end == 0 {
            return Err(GoDurationError::MissingUnit);
        }
        // The unit ends at an ASCII byte or at the end, so it is whole UTF-8.
        let unit = String::from_utf8_lossy(&s[..end]).into_owned();
        s = &s[end..];
        let unit_ns = unit_nanos(&unit).ok_or(GoDurationError::UnknownUnit(unit))?;
        if v > MAX_MAGNITUDE / unit_ns {
            return Err(GoDurationError::Overflow);
        }
        v *= unit_ns;
        if f > 0 {
            // As Go: a float64 keeps a fraction of an hour exact to the nanosecond, and
            // the product is at most 3.6e12, so the cast cannot saturate.
            v += (f as f64 * (unit_ns as f64 / scale)) as u64;
            if v > MAX_MAGNITUDE {
                return Err(GoDurationError::Overflow);
            }
        }
        total = total
            .checked_add(v)
            .filter(|&t| t <= MAX_MAGNITUDE)
            .ok_or(GoDurationError::Overflow)?;
    }
    if neg {
        // 2^63 is i64::MIN itself; anything smaller negates without overflow.
        return Ok(0i64.wrapping_sub(total as i64));
    }
    i64::try_from(total).map_err(|_| GoDurationError::Overflow)
}

/// A duration as weir accepts it anywhere (config, control API, command line): a Go
/// duration that is not negative. The message quotes the input, says what is wrong and
/// lists the accepted forms; the caller names the field.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let why = match parse_go_duration(s) {
        Ok(n) if n >= 0 => return Ok(Duration::from_nanos(n.unsigned_abs())),
        Ok(_) => format!("duration {s:?} is out of range: it must not be negative"),
        Err(GoDurationError::Invalid) => format!("invalid duration {s:?}"),
        Err(GoDurationError::MissingUnit) => format!("missing unit in duration {s:?}"),
        Err(GoDurationError::UnknownUnit(u)) => {
            format!("unknown unit {u:?} in duration {s:?}")
        }
        Err(GoDurationError::Overflow) => {
            format!("duration {s:?} is out of range (at most 2562047h47m16.854775807s)")
        }
    };
    Err(format!("{why}; {ACCEPTED_FORMS}"))
}

#[cfg(test)]
#[path = "duration_tests.rs"]
mod tests;
