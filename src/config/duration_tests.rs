use super::*;
use std::time::Duration;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const MIN: u64 = 60 * S;
const H: u64 = 60 * MIN;

/// Go's `parseDurationTests` that are not negative, with weir's own forms, and the
/// exact result in nanoseconds.
const ACCEPTED: &[(&str, u64)] = &[
    ("0", 0),
    ("+0", 0),
    ("-0", 0),
    ("0s", 0),
    ("-0s", 0),
    ("5s", 5 * S),
    ("30s", 30 * S),
    ("1478s", 1478 * S),
    ("+5s", 5 * S),
    ("5.0s", 5 * S),
    ("5.6s", 5 * S + 600 * MS),
    ("5.s", 5 * S),
    (".5s", 500 * MS),
    ("1.0s", S),
    ("1.00s", S),
    ("1.004s", S + 4 * MS),
    ("1.0040s", S + 4 * MS),
    ("100.00100s", 100 * S + MS),
    ("10ns", 10),
    ("11us", 11 * US),
    ("12\u{b5}s", 12 * US),
    ("12\u{3bc}s", 12 * US),
    ("13ms", 13 * MS),
    ("14s", 14 * S),
    ("15m", 15 * MIN),
    ("16h", 16 * H),
    ("300ms", 300 * MS),
    ("1.5h", 90 * MIN),
    ("1m30s", 90 * S),
    ("2h45m", 2 * H + 45 * MIN),
    ("3h30m", 3 * H + 30 * MIN),
    ("10.5s4m", 4 * MIN + 10 * S + 500 * MS),
    ("1m.5s", MIN + 500 * MS),
    ("1s1s", 2 * S),
    ("1h2m3s4ms5us6ns", H + 2 * MIN + 3 * S + 4 * MS + 5 * US + 6),
    ("39h9m14.425s", 39 * H + 9 * MIN + 14 * S + 425 * MS),
    ("52763797000ns", 52_763_797_000),
    ("0.3333333333333333333h", 20 * MIN),
    ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", (1 << 63) - 1),
    ("9223372036854775.807us", (1 << 63) - 1),
    ("9223372036s854ms775us807ns", (1 << 63) - 1),
    ("2562047h47m16.854775807s", (1 << 63) - 1),
    ("0.100000000000000000000h", 6 * MIN),
    ("0.830103483285477580700h", 49 * MIN + 48 * S + 372_539_827),
];

#[test]
fn go_durations_parse_to_the_exact_nanosecond() {
    for (input, nanos) in ACCEPTED {
        assert_eq!(
            parse_duration(input),
            Ok(Duration::from_nanos(*nanos)),
            "{input:?}"
        );
    }
}

/// Every refusal, and a word its message must carry; each message also quotes the
/// input and lists the accepted forms.
const REFUSED: &[(&str, &str)] = &[
    ("", "invalid duration"),
    ("3", "missing unit"),
    ("10", "missing unit"),
    ("00", "missing unit"),
    ("1m30", "missing unit"),
    ("-", "invalid duration"),
    ("+", "invalid duration"),
    ("s", "invalid duration"),
    (".", "invalid duration"),
    ("-.", "invalid duration"),
    (".s", "invalid duration"),
    ("+.s", "invalid duration"),
    ("1..5s", "missing unit"),
    ("--1s", "invalid duration"),
    ("+-1s", "invalid duration"),
    ("1s-1s", "unknown unit \"s-\""),
    (" 1s", "invalid duration"),
    ("\u{fffd}", "invalid duration"),
    ("ten", "invalid duration"),
    ("1d", "unknown unit \"d\""),
    ("1M", "unknown unit \"M\""),
    ("1S", "unknown unit \"S\""),
    ("1 minute", "unknown unit \" minute\""),
    ("1s ", "unknown unit \"s \""),
    ("10 parsecs", "unknown unit \" parsecs\""),
    ("1sec", "unknown unit \"sec\""),
    ("1min", "unknown unit \"min\""),
    ("9223372036854775810ns", "out of range"),
    ("9223372036854775808ns", "out of range"),
    ("9223372036854776us", "out of range"),
    ("3000000h", "out of range"),
    ("9223372036854775.808us", "out of range"),
    ("9223372036854ms775us808ns", "out of range"),
    ("9223372036854775808ns9223372036854775808ns", "out of range"),
    ("-9223372036854775809ns", "out of range"),
    ("-5s", "negative"),
    ("-1ns", "negative"),
    ("-2m3.4s", "negative"),
    ("-9223372036854775808ns", "negative"),
    ("-2562047h47m16.854775808s", "negative"),
];

#[test]
fn everything_else_is_refused_with_the_reason_and_the_accepted_forms() {
    for (input, word) in REFUSED {
        let e = parse_duration(input).expect_err(input);
        assert!(e.contains(word), "{input:?}: {e}");
        assert!(e.contains(&format!("{input:?}")), "{input:?}: {e}");
        for form in ["300ms", "1.5h", "1m30s", "ns", "us", "ms", "h"] {
            assert!(e.contains(form), "{input:?}: {form} missing from: {e}");
        }
    }
}

#[test]
fn the_go_parser_keeps_the_sign_and_the_kind_of_error() {
    let ok: &[(&str, i64)] = &[
        ("-5s", -5_000_000_000),
        ("-2m3.4s", -123_400_000_000),
        ("-1.5h", -5_400_000_000_000),
        ("-0", 0),
        ("+1m30s", 90_000_000_000),
        ("-9223372036854775808ns", i64::MIN),
        ("-9223372036854775.808us", i64::MIN),
        ("-9223372036s854ms775us808ns", i64::MIN),
        ("-2562047h47m16.854775808s", i64::MIN),
        ("9223372036854775807ns", i64::MAX),
    ];
    for (input, nanos) in ok {
        assert_eq!(parse_go_duration(input), Ok(*nanos), "{input:?}");
    }
    let refused: &[(&str, GoDurationError)] = &[
        ("", GoDurationError::Invalid),
        ("-", GoDurationError::Invalid),
        (".s", GoDurationError::Invalid),
        ("3", GoDurationError::MissingUnit),
        ("1M", GoDurationError::UnknownUnit("M".into())),
        ("1 minute", GoDurationError::UnknownUnit(" minute".into())),
        ("-9223372036854775809ns", GoDurationError::Overflow),
        ("9223372036854775808ns", GoDurationError::Overflow),
        ("3000000h", GoDurationError::Overflow),
    ];
    for (input, err) in refused {
        assert_eq!(parse_go_duration(input).as_ref(), Err(err), "{input:?}");
    }
}

/// What weir prints for a duration (Rust's `{:?}` in messages, `fmt_duration` in
/// events) reads back as a duration.
#[test]
fn printed_durations_parse_again() {
    for nanos in [
        1,
        999,
        1_000,
        1_500,
        250 * MS,
        S,
        1_500 * MS,
        90 * S,
        S + 1,
        2 * H,
    ] {
        let d = Duration::from_nanos(nanos);
        assert_eq!(parse_duration(&format!("{d:?}")), Ok(d), "{d:?}");
        let shown = crate::rollout::http::fmt_duration(d);
        assert!(parse_duration(&shown).is_ok(), "{d:?} shown as {shown:?}");
    }
}
