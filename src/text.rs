//! PURE. Text that came from outside weir — a backend's revision, a receiver's
//! answer, a member name read from etcd, a container label — made safe for the
//! place it is shown, and secret addresses kept out of what is shown. Every layer
//! may use it; it uses nothing of weir.
//!
//! - A terminal ([`for_terminal`], [`for_terminal_block`]): no control character
//!   reaches it raw (an `ESC ] 52` would write the clipboard, an `ESC [2J` clear the
//!   screen); each is shown as `\u001b` (a JSON escape, so `--json` output stays
//!   JSON), as are the bidirectional overrides that reorder what a line shows.
//! - A secret address ([`redact_url`], [`scrub_url`]): a webhook URL carries its
//!   credential in the path or the query; it is shown as `scheme://host/…`, and cut
//!   out of any text that quotes it (a receiver's error answer often does).
//! - A chat message ([`chat`]): markup that would mention people (`<!channel>`,
//!   `@everyone`, `<users/all>`) or disguise a link (`<https://evil|Approve>`,
//!   `[Approve](https://evil)`) is made inert, in each service's own terms.

/// Shown instead of a secret's path, query and credentials.
pub const ELIDED: &str = "…";

/// A part of a secret URL shorter than this is not looked for on its own in
/// quoted text (a one-letter path segment would cut every such letter).
const MIN_SECRET_PART: usize = 6;

/// Characters a terminal must not receive raw: the C0 and C1 controls, DEL, and the
/// Unicode bidirectional controls (which reorder the text after them).
fn unsafe_for_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

fn push_escaped(out: &mut String, c: char) {
    // Every such character is in the Basic Multilingual Plane: four hex digits.
    out.push_str(&format!("\\u{:04x}", u32::from(c)));
}

/// `s` for one line of a terminal: every control character (newlines and tabs
/// too) and bidirectional override shown escaped (`\u001b`), never sent raw.
pub fn for_terminal(s: &str) -> String {
    if !s.chars().any(unsafe_for_terminal) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_for_terminal(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// [`for_terminal`] for a block of lines: the newline is kept, nothing else.
pub fn for_terminal_block(s: &str) -> String {
    if !s.chars().any(|c| c != '\n' && unsafe_for_terminal(c)) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c != '\n' && unsafe_for_terminal(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// The parts of `url`: scheme, user information, host (with port), and the rest
/// (path, query, fragment); `None` when it has no `scheme://`.
fn split_url(url: &str) -> Option<(&str, &str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host) = authority.rsplit_once('@').unwrap_or(("", authority));
    Some((scheme, user, host, tail))
}

/// A secret address as it may be shown: `https://hooks.slack.com/…`. The path,
/// query and any user information are never shown; something that is not a URL
/// is shown as `…`.
pub fn redact_url(url: &str) -> String {
    match split_url(url.trim()) {
        Some((scheme, _, host, _)) => {
            format!("{scheme}://{}/{ELIDED}", for_terminal(host))
        }
        None => ELIDED.to_string(),
    }
}

/// `text` (an error, a receiver's answer) with every occurrence of the secret
/// `url` replaced by [`redact_url`], and of its secret parts by `…`: the path and
/// query, each tail of the path from a `/` on (`/B0002/SECRET`, `SECRET`), each
/// query value, the user information; also as JSON writes them (`\/`).
pub fn scrub_url(text: &str, url: &str) -> String {
    let url = url.trim();
    let Some((_, user, _, tail)) = split_url(url) else {
        return if url.is_empty() {
            text.to_string()
        } else {
            text.replace(url, ELIDED)
        };
    };
    let shown = redact_url(url);
    let mut needles: Vec<(String, &str)> = vec![(url.to_string(), shown.as_str())];
    if let Some(u) = url.strip_suffix('/') {
        needles.push((u.to_string(), shown.as_str()));
    }
    if !user.is_empty() {
        needles.push((user.to_string(), ELIDED));
    }
    let tail = tail.split('#').next().unwrap_or_default();
    if tail.len() > 3 {
        needles.push((tail.to_string(), ELIDED));
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    for (i, _) in path.match_indices('/') {
        for part in [&path[i..], &path[i + 1..]] {
            let part = part.trim_end_matches('/');
            if part.len() >= MIN_SECRET_PART {
                needles.push((part.to_string(), ELIDED));
            }
        }
    }
    if query.len() >= MIN_SECRET_PART {
        needles.push((query.to_string(), ELIDED));
    }
    for pair in query.split('&') {
        if let Some((_, v)) = pair.split_once('=') {
            if v.len() >= MIN_SECRET_PART {
                needles.push((v.to_string(), ELIDED));
            }
        }
    }
    let escaped: Vec<(String, &str)> = needles
        .iter()
        .filter(|(n, _)| n.contains('/'))
        .map(|(n, w)| (n.replace('/', "\\/"), *w))
        .collect();
    needles.extend(escaped);
    // Longest first: the whole URL before its parts.
    needles.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    needles.dedup_by(|a, b| a.0 == b.0);
    let mut out = text.to_string();
    for (needle, with) in &needles {
        if !needle.is_empty() && out.contains(needle.as_str()) {
            out = out.replace(needle.as_str(), with);
        }
    }
    out
}

/// Text for chat services, made inert in each one's markup. `@` is followed by a
/// zero-width space everywhere (`@everyone`, `@here`, `@all`, `<@id>` then
/// mention no one and look the same).
pub mod chat {
    /// Zero-width space: breaks a mention or a link without changing what shows.
    const ZWSP: char = '\u{200b}';

    /// Slack and Rocket.Chat: `&`, `<` and `>` as `&amp;`, `&lt;` and `&gt;`
    /// (Slack's own rule: `<!channel>` and `<https://x|label>` then show as
    /// typed), `@` inert, a Markdown link (Rocket.Chat's) broken.
    pub fn slack(s: &str) -> String {
        inert(s, &[('&', "&amp;"), ('<', "&lt;"), ('>', "&gt;")], &['@'])
    }

    /// Discord, Microsoft Teams and Google Chat's plain text: `@` and `<` inert
    /// (`<@id>`, `<at>`, `<users/all>`, `<https://x|label>`), and a Markdown link
    /// `[label](url)` broken between its two halves.
    pub fn markdown(s: &str) -> String {
        inert(s, &[], &['@', '<'])
    }

    /// Google Chat card text (a subset of HTML): `&`, `<`, `>` and `"` as
    /// entities, `@` inert, a Markdown link broken.
    pub fn html(s: &str) -> String {
        inert(
            s,
            &[
                ('&', "&amp;"),
                ('<', "&lt;"),
                ('>', "&gt;"),
                ('"', "&quot;"),
            ],
            &['@'],
        )
    }

    /// `s` with each character of `entities` written as its entity, each of
    /// `broken` followed by a zero-width space, and a zero-width space between
    /// the `]` and `(` of a Markdown link.
    fn inert(s: &str, entities: &[(char, &str)], broken: &[char]) -> String {
        let mut out = String::with_capacity(s.len());
        let mut prev = '\0';
        for c in s.chars() {
            if c == '(' && prev == ']' {
                out.push(ZWSP);
            }
            prev = c;
            match entities.iter().find(|(e, _)| *e == c) {
                Some((_, entity)) => out.push_str(entity),
                None => out.push(c),
            }
            if broken.contains(&c) {
                out.push(ZWSP);
            }
        }
        out
    }

    /// `escaped` cut to at most `max` characters, ending in `…`, never inside an
    /// entity (`&amp;`) or between a character and the space that makes it inert.
    pub fn cut(escaped: &str, max: usize) -> String {
        if escaped.chars().count() <= max {
            return escaped.to_string();
        }
        let mut out: String = escaped.chars().take(max.saturating_sub(1)).collect();
        if let Some(amp) = out.rfind('&') {
            if !out[amp..].contains(';') {
                out.truncate(amp);
            }
        }
        if out.ends_with('@') || out.ends_with('<') {
            out.pop();
        }
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_gets_no_control_character() {
        let evil = "v2\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\r\tok\u{9b}31m\u{202e}x";
        let one = for_terminal(evil);
        assert!(!one.chars().any(unsafe_for_terminal), "{one:?}");
        assert_eq!(
            one,
            "v2\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\\u000d\\u0009ok\\u009b31m\\u202ex"
        );
        assert_eq!(for_terminal("a\nb"), "a\\u000ab");
        assert_eq!(for_terminal_block("a\nb\u{1b}c"), "a\nb\\u001bc");
        assert_eq!(for_terminal("plain ünïcode ✓"), "plain ünïcode ✓");
        // The escape is JSON's: a string of `--json` output stays valid JSON.
        let json = format!("\"{}\"", for_terminal_block("x\u{9b}y\u{7f}"));
        assert_eq!(
            serde_json::from_str::<String>(&json).unwrap(),
            "x\u{9b}y\u{7f}"
        );
    }

    #[test]
    fn a_secret_url_shows_as_scheme_and_host() {
        assert_eq!(
            redact_url("https://hooks.slack.com/services/T0001/B0002/SECRET"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(
            redact_url("http://user:pw@127.0.0.1:8080?token=x"),
            "http://127.0.0.1:8080/…"
        );
        assert_eq!(redact_url("not a url"), "…");
        assert_eq!(redact_url(" https://h "), "https://h/…");
    }

    #[test]
    fn quoted_text_loses_the_url_and_each_secret_part() {
        let url = "https://hooks.slack.com/services/T0001/B0002/SECRET";
        let answer = format!(
            "invalid_token for {url} (POST /services/T0001/B0002/SECRET): token SECRET of B0002/SECRET, json \"https:\\/\\/hooks.slack.com\\/services\\/T0001\\/B0002\\/SECRET\""
        );
        let got = scrub_url(&answer, url);
        assert!(!got.contains("SECRET"), "{got}");
        assert!(!got.contains("T0001/B0002"), "{got}");
        assert!(
            got.contains("invalid_token for https://hooks.slack.com/… (POST …)"),
            "{got}"
        );
        // Query credentials (Google Chat's key and token), user information.
        let url =
            "https://chat.googleapis.com/v1/spaces/AAAA/messages?key=KEY123456&token=TOK987654";
        let got = scrub_url(
            "bad token=TOK987654 key KEY123456 at /v1/spaces/AAAA/messages",
            url,
        );
        assert!(
            !got.contains("TOK987654") && !got.contains("KEY123456"),
            "{got}"
        );
        assert!(!got.contains("spaces/AAAA"), "{got}");
        let got = scrub_url("auth admin:hunter2 failed", "http://admin:hunter2@h/x");
        assert!(!got.contains("hunter2"), "{got}");
        // Short parts are left alone; nothing else changes.
        assert_eq!(
            scrub_url("HTTP/1.1 500: x", "http://h/x"),
            "HTTP/1.1 500: x"
        );
        assert_eq!(scrub_url("down", "http://127.0.0.1:1/fail"), "down");
    }

    #[test]
    fn chat_text_mentions_no_one_and_hides_no_link() {
        let evil =
            "<!channel> @everyone <https://evil.example|Approve> & [Approve](https://evil.example)";
        let s = chat::slack(evil);
        assert!(!s.contains('<') && !s.contains('>'), "{s}");
        assert!(
            s.starts_with(
                "&lt;!channel&gt; @\u{200b}everyone &lt;https://evil.example|Approve&gt; &amp; "
            ),
            "{s}"
        );
        let d = chat::markdown(evil);
        assert!(
            !d.contains("@everyone") && !d.contains("<!") && !d.contains("<https"),
            "{d}"
        );
        assert!(!d.contains("](") && d.contains("]\u{200b}("), "{d}");
        let h = chat::html("<a href=\"x\">@all</a>");
        assert_eq!(h, "&lt;a href=&quot;x&quot;&gt;@\u{200b}all&lt;/a&gt;");
        // Cutting never leaves half an entity or an active `@`.
        assert_eq!(chat::cut(&chat::slack("ab&cd"), 4), "ab…");
        assert_eq!(chat::cut(&chat::slack("ab@everyone"), 4), "ab…");
        assert_eq!(chat::cut("short", 10), "short");
    }
}
