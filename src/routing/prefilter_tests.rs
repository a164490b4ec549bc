//! The prefilter never changes a result: differential tests against the plain
//! regex, plus what the analysis extracts from the patterns users write.

use super::RegexMatcher;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use regex::Regex;

fn m(p: &str) -> RegexMatcher {
    RegexMatcher::compile(p, 1 << 20).expect("pattern compiles")
}

#[test]
fn flagger_cookie_idiom_is_prefiltered_on_the_cookie_item() {
    let r = m("^(.*?;)?(canary=always)(;.*)?$");
    assert_eq!(r.prefilter_len(), 1);
    assert!(r.is_match(b"canary=always"));
    assert!(r.is_match(b"a=b;canary=always;c=d"));
    assert!(!r.is_match(b"a=b; canary=never"));
    assert!(!r.is_match(b"session=3b1f0c9e77aa; theme=dark"));
    // The literal is there but the regex says no: the regex decides.
    assert!(!r.is_match(b"a=b; canary=always"));
}

#[test]
fn case_insensitive_literals_are_scanned_caselessly() {
    let r = m("(?i)android.*mobile");
    assert_eq!(r.prefilter_len(), 2);
    assert!(r.is_match(b"Mozilla/5.0 (Linux; ANDROID 14) Mobile Safari"));
    assert!(r.is_match(b"xx AnDrOiD yy mObIlE"));
    assert!(!r.is_match(b"Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"));
    assert!(!r.is_match(b"android only"));
}

#[test]
fn nothing_certain_means_no_prefilter() {
    for p in [
        "abc|abd",
        "(foo)?ba?",
        "[a-z]+",
        "(?i)kiosk",
        "x*",
        "ab",
        "^$",
        ".*",
    ] {
        assert_eq!(m(p).prefilter_len(), 0, "{p}");
    }
    // Optional parts are skipped, what surrounds them is still required.
    assert_eq!(m("(foo)?barx?").prefilter_len(), 1);
}

#[test]
fn kelvin_sign_and_long_s_still_match_case_insensitive_k_and_s() {
    // (?i)k also matches U+212A and (?i)s U+017F: the analysis must not
    // require an ASCII k or s.
    for (p, h) in [
        ("(?i)kiosk-mode", "\u{212A}io\u{17F}\u{212A}-mode"),
        ("(?i)mask-on", "ma\u{17F}\u{212A}-on"),
    ] {
        assert!(Regex::new(p).unwrap().is_match(h), "{p} on {h}");
        assert!(m(p).is_match(h.as_bytes()), "{p} on {h}");
    }
}

/// Random haystacks from an alphabet close to each pattern's literals, with
/// the characters case folding plays tricks with.
#[test]
fn differential_against_the_plain_regex() {
    let patterns = [
        "^(.*?;)?(canary=always)(;.*)?$",
        "^(.*?;)?(user=test)(;.*)?$",
        "(?i)android.*mobile",
        "(?i)Canary",
        "abc(def)+ghi",
        "(?i)ab(cd)+Ef",
        "x(?i:yz)W",
        "^/api/v[0-9]+/items$",
        "foo\\bbar",
        "\\bword\\b",
        "(?-u:(?i)abc)",
        "a.c",
        "(?m)^line$",
        "caf\u{e9}",
        "(?i)caf\u{c9}s",
        "ab{2,3}c",
        "(abc){0,2}xyz",
    ];
    let alphabet: Vec<char> =
        "acenrylwsxtu=;. /ABCDEFGHIKLMNOSWXYZbdfgikmo123\u{212A}\u{17F}\u{e9}\u{c9}\n"
            .chars()
            .collect();
    let words = [
        "canary=always",
        "user=test",
        "android",
        "ANDROID",
        "mobile",
        "MoBiLe",
        "canary",
        "CANARY",
        "abc",
        "def",
        "ghi",
        "cd",
        "CD",
        "ef",
        "yz",
        "YZ",
        "/api/v1/items",
        "foo",
        "bar",
        "word",
        "caf\u{e9}",
        "CAF\u{c9}S",
        "line",
        "xyz",
        ";",
    ];
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let matchers: Vec<(Regex, RegexMatcher)> = patterns
        .iter()
        .map(|p| (Regex::new(p).unwrap(), m(p)))
        .collect();
    let mut hits = 0;
    for _ in 0..20_000 {
        let mut h = String::new();
        for _ in 0..rng.random_range(0..8) {
            if rng.random_bool(0.5) {
                h.push_str(words[rng.random_range(0..words.len())]);
            } else {
                for _ in 0..rng.random_range(1..4) {
                    h.push(alphabet[rng.random_range(0..alphabet.len())]);
                }
            }
        }
        for (re, pm) in &matchers {
            let want = re.is_match(&h);
            hits += usize::from(want);
            assert_eq!(pm.is_match(h.as_bytes()), want, "{} on {h:?}", re.as_str());
        }
    }
    // The haystacks do exercise the match side, not only rejections.
    assert!(hits > 1_000, "only {hits} matches");
}

/// A value full of the needle's rarest byte: the scan gives up after a few
/// false starts and the regex decides, so the answer is still the regex's
/// (and the work stays linear in the value).
#[test]
fn many_false_starts_still_answer_as_the_regex() {
    for p in [
        "canary=always",
        "(?i)android.*mobile",
        "^(.*?;)?(canary=always)(;.*)?$",
    ] {
        let re = Regex::new(p).unwrap();
        let pm = m(p);
        for fill in ["y", "Y", "d", "D", "=", "canary=alway", "ANDROI", "androi"] {
            for tail in ["", "canary=always", "Android Mobile", "; canary=always"] {
                for reps in [1, 9, 10, 200] {
                    let h = format!("{}{tail}", fill.repeat(reps));
                    assert_eq!(
                        pm.is_match(h.as_bytes()),
                        re.is_match(&h),
                        "{p} on {fill} x {reps} + {tail}"
                    );
                }
            }
        }
    }
}
