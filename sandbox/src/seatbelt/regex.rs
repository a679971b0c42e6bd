//! Seatbelt regexes of paths and names, in any case: APFS and HFS+ are case-insensitive by
//! default, so `.GIT/config` opens `.git/config` and `~/.SSH` is `~/.ssh`, while a Seatbelt
//! `literal`, `subpath` or `#"..."` regex compares bytes exactly. Every letter becomes a bracket
//! of both cases; everything the regex syntax gives a meaning to is escaped, so no path or
//! configured name can widen a rule. The results reach the profile as `-D` parameters
//! (`(regex (param "KEY"))`), never as profile text.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Bytes with a meaning in Seatbelt's (POSIX extended) regexes.
const SPECIAL: &[u8] = b"\\.+*?()|[]{}^$";

/// Appends `bytes` to `out` as a regex that matches them in any ASCII case.
fn push_any_case(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b.is_ascii_alphabetic() {
            out.extend_from_slice(&[b'[', b.to_ascii_uppercase(), b.to_ascii_lowercase(), b']']);
        } else if SPECIAL.contains(&b) {
            out.extend_from_slice(&[b'\\', b]);
        } else {
            out.push(b);
        }
    }
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

/// `^ROOT` of an absolute path in any case (no trailing `/`).
pub fn root(path: &Path) -> Vec<u8> {
    let mut out = b"^".to_vec();
    let bytes = path.as_os_str().as_bytes();
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
                r"[^/]*\.[Cc][Oo][Dd][Ee]-[Ww][Oo][Rr][Kk][Ss][Pp][Aa][Cc][Ee]",
            ),
            ("mise.*.toml", false, r"mise\.[^/]*\.toml"),
            (".tmp*", false, r"\.tmp[^/]*"),
            ("a(b)|c$^[x]{1}+?\\", false, r"a\(b\)\|c\$\^\[x\]\{1\}\+\?\\"),
            ("_9-", true, "_9-"),
        ];
        for (pattern, any_case, want) in table {
            assert_eq!(s(name(pattern, any_case)), want, "{pattern}");
        }
        assert_eq!(s(names([".a", "b"], false).unwrap()), r"(\.a|b)");
        assert_eq!(names([], true), None);
    }

    #[test]
    fn paths_are_anchored_and_any_case() {
        assert_eq!(s(root(Path::new("/Users/u/p.x"))), r"^/[Uu][Ss][Ee][Rr][Ss]/[Uu]/[Pp]\.[Xx]");
        assert_eq!(s(subpath(Path::new("/a/"))), r"^/[Aa](/|$)");
        assert_eq!(s(below(Path::new("/a"), br"\.")), r"^/[Aa]/\.");
    }
}
