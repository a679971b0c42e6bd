//! Making text that came from a sandbox safe to show to a person.
//!
//! A request method or path, a command line, a sandbox name or a chat user's name can carry bytes
//! that act on whatever displays them: C0/C1 controls and escape sequences move the cursor, set
//! the window title or paste into the shell (CSI is one byte in C1: U+009B); bidirectional
//! overrides and isolates reorder what is shown so that `evil.com` reads as another name; zero-width
//! and other invisible characters hide text; line and paragraph separators start fake lines. Every
//! string from a sandbox goes through [`sanitize`] before it reaches a terminal, a chat message or a
//! desktop notification; this is the one place that decides what is shown.

use std::borrow::Cow;

/// Most characters [`sanitize`] keeps of one string; longer ones end in `…`.
pub const MAX_SHOWN: usize = 512;

/// Whether `c` must not be shown as such: a control character (C0, DEL, C1), a line or paragraph
/// separator, or a Unicode format character (bidi controls, zero-width characters, invisible
/// operators, the BOM, interlinear annotation and tag characters) — the whole Cf category, plus
/// the Hangul fillers, which render as blanks.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{115F}'..='\u{1160}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// `s` as it may be shown to a person: every character [`is_unsafe_char`] finds replaced with `?`
/// (so an escape sequence shows as `?[2J`, visibly tampered with, instead of acting), and at most
/// [`MAX_SHOWN`] characters. Borrowed when nothing had to change.
pub fn sanitize(s: &str) -> Cow<'_, str> {
    let mut chars = 0usize;
    let clean = s.chars().all(|c| {
        chars += 1;
        chars <= MAX_SHOWN && !is_unsafe_char(c)
    });
    if clean {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(MAX_SHOWN * 4));
    for (i, c) in s.chars().enumerate() {
        if i == MAX_SHOWN - 1 && s.chars().nth(MAX_SHOWN).is_some() {
            out.push('…');
            break;
        }
        out.push(if is_unsafe_char(c) { '?' } else { c });
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_strings_are_shown_inert() {
        let rows: &[(&str, &str)] = &[
            ("GET", "GET"),
            ("/päth/ünïcode/日本", "/päth/ünïcode/日本"),
            ("a\0b", "a?b"),
            ("tab\there", "tab?here"),
            ("line\r\nfake: approved", "line??fake: approved"),
            ("bell\x07", "bell?"),
            ("del\x7f", "del?"),
            ("\x1b[2J\x1b[H", "?[2J?[H"),
            ("\x1b]0;title\x07", "?]0;title?"),
            ("\x1b]52;c;cm0gLXJmIH4=\x07", "?]52;c;cm0gLXJmIH4=?"),
            ("csi\u{9b}31m", "csi?31m"),
            ("nel\u{85}x", "nel?x"),
            ("osc\u{9d}0;x\u{9c}", "osc?0;x?"),
            ("evil\u{202E}moc.elgoog", "evil?moc.elgoog"),
            ("\u{202A}\u{202B}\u{202C}\u{202D}\u{202E}", "?????"),
            ("\u{2066}\u{2067}\u{2068}\u{2069}", "????"),
            ("\u{200E}\u{200F}\u{061C}", "???"),
            ("zero\u{200B}width\u{200C}\u{200D}\u{2060}\u{FEFF}", "zero?width????"),
            ("soft\u{AD}hyphen", "soft?hyphen"),
            ("line\u{2028}para\u{2029}", "line?para?"),
            ("tag\u{E0041}\u{E007F}", "tag??"),
            ("blank\u{3164}\u{115F}", "blank??"),
        ];
        for (input, want) in rows {
            assert_eq!(sanitize(input), *want, "{input:?}");
            assert!(!sanitize(input).chars().any(is_unsafe_char));
        }
        assert!(matches!(sanitize("crates.io"), Cow::Borrowed(_)));
    }

    #[test]
    fn overlong_strings_are_cut() {
        let long = "a".repeat(10_000);
        let shown = sanitize(&long);
        assert_eq!(shown.chars().count(), MAX_SHOWN);
        assert!(shown.ends_with('…'));
        let exact = "b".repeat(MAX_SHOWN);
        assert_eq!(sanitize(&exact), exact);
        let hostile = "\u{202E}".repeat(MAX_SHOWN + 1);
        let shown = sanitize(&hostile);
        assert_eq!(shown.chars().count(), MAX_SHOWN);
        assert!(!shown.chars().any(is_unsafe_char));
    }
}
