//! Seatbelt regexes of paths and names, in any case: APFS and HFS+ are case-insensitive by
//! default, so `.GIT/config` opens `.git/config` and `~/.SSH` is `~/.ssh`, while a Seatbelt
//! `literal`, `subpath` or `#"..."` regex compares bytes exactly. Every letter becomes a bracket
//! of both cases; everything the regex syntax gives a meaning to is escaped, so no path or
//! configured name can widen a rule. The results reach the profile as `-D` parameters
//! (`(regex (param "KEY"))`), never as profile text.
//!
//! "Any case" is APFS's: names are compared after Unicode case folding and normalisation, so
//! `s` is also `ſ` (U+017F) and `k` the Kelvin sign (U+212A), and a non-ASCII letter matches
//! composed or decomposed (NFC or NFD), lower or upper case. A path matches under its own
//! spelling and under the data volume's (`/System/Volumes/Data/Users/...`: `/Users`,
//! `/private`, `/Applications`, ... are firmlinks into it).

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use unicode_normalization::UnicodeNormalization as _;

/// Bytes with a meaning in Seatbelt's (POSIX extended) regexes.
const SPECIAL: &[u8] = b"\\.+*?()|[]{}^$";

/// ASCII letters that Unicode's simple case folding (APFS's) also reaches from a non-ASCII one.
const FOLDED_INTO: &[(u8, &str)] = &[(b's', "\u{17F}"), (b'k', "\u{212A}")];

/// Where the firmlinked directories (`/Users`, `/private`, ...) also appear.
pub const DATA_VOLUME: &str = "/System/Volumes/Data";

/// Appends `bytes` to `out` as a regex that matches them in any case, as APFS compares names
/// (bytes that are not UTF-8: in any ASCII case).
fn push_any_case(out: &mut Vec<u8>, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.nfc().for_each(|c| push_char_any_case(out, c)),
        Err(_) => bytes.iter().for_each(|&b| push_byte_any_case(out, b)),
    }
}

fn push_byte_any_case(out: &mut Vec<u8>, b: u8) {
    if b.is_ascii_alphabetic() {
        let lower = b.to_ascii_lowercase();
        let bracket = [b'[', b.to_ascii_uppercase(), lower, b']'];
        match FOLDED_INTO.iter().find(|(l, _)| *l == lower) {
            Some((_, other)) => {
                out.push(b'(');
                out.extend_from_slice(&bracket);
                out.push(b'|');
                out.extend_from_slice(other.as_bytes());
                out.push(b')');
            }
            None => out.extend_from_slice(&bracket),
        }
    } else if SPECIAL.contains(&b) {
        out.extend_from_slice(&[b'\\', b]);
    } else {
        out.push(b);
    }
}

/// One character in any case: an ASCII one as a byte; a non-ASCII one as the alternatives of
/// its composed and decomposed forms in lower and upper case.
fn push_char_any_case(out: &mut Vec<u8>, c: char) {
    if c.is_ascii() {
        push_byte_any_case(out, c as u8);
        return;
    }
    let mut forms: Vec<String> = Vec::new();
    for v in [c.to_string(), c.to_lowercase().collect(), c.to_uppercase().collect()] {
        for form in [v.nfc().collect::<String>(), v.nfd().collect()] {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    if let [one] = &forms[..] {
        push_exact(out, one.as_bytes());
        return;
    }
    out.push(b'(');
    for (i, form) in forms.iter().enumerate() {
        if i > 0 {
            out.push(b'|');
        }
        push_exact(out, form.as_bytes());
    }
    out.push(b')');
}

/// Appends `bytes` to `out` as a regex that matches them exactly.
fn push_exact(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if SPECIAL.contains(&b) {
            out.push(b'\\');
        }
        out.push(b);
    }
}

/// One name pattern (`*` for any run of characters within the name) as a regex, in any case
/// when `any_case`.
pub fn name(pattern: &str, any_case: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, part) in pattern.as_bytes().split(|&b| b == b'*').enumerate() {
        if i > 0 {
            out.extend_from_slice(b"[^/]*");
        }
        if any_case {
            push_any_case(&mut out, part);
        } else {
            push_exact(&mut out, part);
        }
    }
    out
}

/// `(p1|p2|...)` of the name patterns, any case when `any_case`; `None` when there are none.
pub fn names<'a>(patterns: impl IntoIterator<Item = &'a str>, any_case: bool) -> Option<Vec<u8>> {
    let mut out = b"(".to_vec();
    let mut n = 0;
    for p in patterns {
        if n > 0 {
            out.push(b'|');
        }
        out.extend_from_slice(&name(p, any_case));
        n += 1;
    }
    out.push(b')');
    (n > 0).then_some(out)
}

/// `^ROOT` of an absolute path in any case (no trailing `/`), also under [`DATA_VOLUME`].
pub fn root(path: &Path) -> Vec<u8> {
    let mut out = b"^(".to_vec();
    push_any_case(&mut out, DATA_VOLUME.as_bytes());
    out.extend_from_slice(b")?");
    let bytes = path.as_os_str().as_bytes();
    let bytes = bytes
        .strip_prefix(DATA_VOLUME.as_bytes())
        .filter(|rest| rest.starts_with(b"/"))
        .unwrap_or(bytes);
    push_any_case(&mut out, bytes.strip_suffix(b"/").unwrap_or(bytes));
    out
}

/// The path and everything below it, in any case: what `(subpath ...)` matches, case aside.
pub fn subpath(path: &Path) -> Vec<u8> {
    let mut out = root(path);
    out.extend_from_slice(b"(/|$)");
    out
}

/// `^ROOT/` followed by `rest` (a regex).
pub fn below(path: &Path, rest: &[u8]) -> Vec<u8> {
    let mut out = root(path);
    out.push(b'/');
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn names_match_in_any_case_and_escape_the_syntax() {
        // (pattern, any case, regex)
        let table = [
            (".git", true, r"\.[Gg][Ii][Tt]"),
            ("rust-toolchain.toml", false, r"rust-toolchain\.toml"),
            (
                "*.code-workspace",
                true,
                "[^/]*\\.[Cc][Oo][Dd][Ee]-[Ww][Oo][Rr]([Kk]|\u{212A})([Ss]|\u{17F})[Pp][Aa][Cc][Ee]",
            ),
            ("mise.*.toml", false, r"mise\.[^/]*\.toml"),
            (".tmp*", false, r"\.tmp[^/]*"),
            ("a(b)|c$^[x]{1}+?\\", false, r"a\(b\)\|c\$\^\[x\]\{1\}\+\?\\"),
            ("_9-", true, "_9-"),
            // APFS folds `ſ` to `s` and the Kelvin sign to `k`
            (".ssh", true, "\\.([Ss]|\u{17F})([Ss]|\u{17F})[Hh]"),
            // composed or decomposed, either case; given decomposed, taken composed
            ("\u{e9}", true, "(\u{e9}|e\u{301}|\u{c9}|E\u{301})"),
            ("e\u{301}", true, "(\u{e9}|e\u{301}|\u{c9}|E\u{301})"),
            ("\u{65e5}", true, "\u{65e5}"),
        ];
        for (pattern, any_case, want) in table {
            assert_eq!(s(name(pattern, any_case)), want, "{pattern}");
        }
        assert_eq!(s(names([".a", "b"], false).unwrap()), r"(\.a|b)");
        assert_eq!(names([], true), None);
    }

    #[test]
    fn paths_are_anchored_any_case_and_under_the_data_volume_too() {
        let data = "^(/([Ss]|\u{17F})[Yy]([Ss]|\u{17F})[Tt][Ee][Mm]/[Vv][Oo][Ll][Uu][Mm][Ee]([Ss]|\u{17F})/[Dd][Aa][Tt][Aa])?";
        assert_eq!(
            s(root(Path::new("/Users/u/p.x"))),
            format!("{data}/[Uu]([Ss]|\u{17F})[Ee][Rr]([Ss]|\u{17F})/[Uu]/[Pp]\\.[Xx]")
        );
        assert_eq!(s(subpath(Path::new("/a/"))), format!("{data}/[Aa](/|$)"));
        assert_eq!(s(below(Path::new("/a"), br"\.")), format!("{data}/[Aa]/\\."));
        assert_eq!(s(root(Path::new("/System/Volumes/Data/a"))), format!("{data}/[Aa]"));
        // bytes that are not UTF-8: any ASCII case, the rest as they are
        let raw = std::ffi::OsStr::from_bytes(b"/a\xff");
        assert_eq!(root(Path::new(raw)), [format!("{data}/[Aa]").as_bytes(), b"\xff"].concat());
    }

    /// The regexes as Seatbelt would read them (a POSIX ERE over bytes), checked with the regex
    /// crate: every spelling APFS takes for the same name matches, others do not.
    #[test]
    fn spellings_apfs_takes_for_one_name_match() {
        let re = |p: &str| {
            regex::bytes::Regex::new(std::str::from_utf8(&subpath(Path::new(p))).unwrap()).unwrap()
        };
        // (path in the rule, path asked, matches)
        let table = [
            ("/Users/u/.ssh", "/Users/u/.ssh/id", true),
            ("/Users/u/.ssh", "/users/U/.SSH", true),
            ("/Users/u/.ssh", "/Users/u/.\u{17F}sh/id", true),
            ("/Users/u/.ssh", "/System/Volumes/Data/Users/u/.ssh/id", true),
            ("/Users/u/.ssh", "/Users/u/.sshx", false),
            ("/Users/u/.ssh", "/X/System/Volumes/Data/Users/u/.ssh", false),
            ("/Users/u/Library", "/Users/u/Library/\u{212A}eychains", true),
            ("/Users/u/.cl\u{e9}", "/Users/u/.cle\u{301}/x", true),
            ("/Users/u/.cle\u{301}", "/Users/u/.cl\u{e9}/x", true),
            ("/Users/u/.cl\u{e9}", "/Users/u/.CL\u{c9}", true),
            ("/Users/u/.cl\u{e9}", "/Users/u/.clef", false),
        ];
        for (rule, path, want) in table {
            assert_eq!(re(rule).is_match(path.as_bytes()), want, "{rule} ~ {path}");
        }
    }
}
