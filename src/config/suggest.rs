//! "did you mean `stepWeight`?": the closest of the names valid at a place.
//!
//! Cargo and rustc accept a candidate within about a third of the word's
//! length in edits; weir does the same with Damerau-Levenshtein (a swapped
//! pair of letters, `stepWieght`, is one edit), after two cheaper checks that
//! catch what people really type: another case (`stepweight`) and another
//! word separator (`step_weight`, `step-weight`).

/// The candidate the user most likely meant by `word`, if any is close enough.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let candidates: Vec<&str> = candidates.into_iter().filter(|c| *c != word).collect();
    let folded = fold(word);
    if let Some(c) = candidates.iter().find(|c| fold(c) == folded) {
        return Some(c);
    }
    let lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Lower case without `_`, `-` and spaces: `step_weight` and `stepWeight` fold alike.
fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// `` `a`, `b` or `c` `` as a help line lists alternatives.
pub fn one_of(names: &[&str]) -> String {
    listed(names, "or")
}

/// `` `a`, `b` and `c` ``.
pub fn all_of(names: &[&str]) -> String {
    listed(names, "and")
}

fn listed(names: &[&str], last: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n => format!("{} {last} {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANALYSIS: &[&str] = &[
        "interval",
        "threshold",
        "maxWeight",
        "stepWeight",
        "stepWeights",
        "stepWeightPromotion",
        "iterations",
        "match",
        "mirror",
        "mirrorWeight",
        "metrics",
        "webhooks",
    ];

    #[test]
    fn typos_find_the_field_meant() {
        let cases = [
            ("stepWieght", Some("stepWeight")),
            ("stepweight", Some("stepWeight")),
            ("step_weight", Some("stepWeight")),
            ("step-weights", Some("stepWeights")),
            ("intervall", Some("interval")),
            ("treshold", Some("threshold")),
            ("webhook", Some("webhooks")),
            ("metric", Some("metrics")),
            ("mirorWeight", Some("mirrorWeight")),
            ("canary", None),
            ("x", None),
            ("analysis", None),
        ];
        for (word, want) in cases {
            assert_eq!(did_you_mean(word, ANALYSIS.iter().copied()), want, "{word}");
        }
    }

    #[test]
    fn the_exact_word_is_no_suggestion() {
        assert_eq!(did_you_mean("mirror", ["mirror"]), None);
        assert_eq!(
            did_you_mean("app-blu", ["app-blue", "app-green"]),
            Some("app-blue")
        );
    }

    #[test]
    fn lists_read_as_a_sentence() {
        assert_eq!(one_of(&[]), "");
        assert_eq!(one_of(&["a"]), "`a`");
        assert_eq!(one_of(&["a", "b", "c"]), "`a`, `b` or `c`");
        assert_eq!(all_of(&["a", "b"]), "`a` and `b`");
    }
}
