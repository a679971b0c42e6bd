//! A small evaluator of the profiles' file rules, enough to ask "may OP reach PATH?" the way
//! Seatbelt answers (the last matching rule wins, `(deny default)` first): `literal`,
//! `subpath`, `regex` (of a `-D` parameter or a `#"..."` text), `require-all`, `require-not`,
//! several filters meaning any of them. Filters it does not know (`vnode-type`, `extension`,
//! `ioctl-command`, ...) never match: an allowance that depends on one is not granted here, and
//! a denial that depends on one is not applied, so a row that passes does not lean on them.

use std::os::unix::ffi::OsStrExt as _;

use regex::bytes::Regex;
use sandgate_sandbox::seatbelt::Profile;

#[derive(Debug, Clone)]
enum Sx {
    Atom(String),
    Str(String),
    List(Vec<Sx>),
}

fn parse(text: &str) -> Vec<Sx> {
    let b = text.as_bytes();
    let mut stack: Vec<Vec<Sx>> = vec![Vec::new()];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b';' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => stack.push(Vec::new()),
            b')' => {
                let l = stack.pop().unwrap();
                stack.last_mut().unwrap().push(Sx::List(l));
            }
            b'#' if b.get(i + 1) == Some(&b'"') => {
                // #"..." takes the text as written (no escapes).
                let end = text[i + 2..].find('"').unwrap() + i + 2;
                stack.last_mut().unwrap().push(Sx::Str(text[i + 2..end].to_owned()));
                i = end;
            }
            b'"' => {
                let mut s = String::new();
                i += 1;
                while b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    s.push(b[i] as char);
                    i += 1;
                }
                stack.last_mut().unwrap().push(Sx::Str(s));
            }
            c if c.is_ascii_whitespace() => {}
            _ => {
                let start = i;
                while i < b.len() && !b" \n\t()".contains(&b[i]) {
                    i += 1;
                }
                stack.last_mut().unwrap().push(Sx::Atom(text[start..i].to_owned()));
                continue;
            }
        }
        i += 1;
    }
    stack.pop().unwrap()
}

/// What Seatbelt would decide for `op` (`file-read-data`, `file-write-create`, ...) on `path`.
pub fn allows(p: &Profile, op: &str, path: &str) -> bool {
    let mut allowed = false;
    for rule in parse(&p.text) {
        let Sx::List(items) = rule else { continue };
        let Some(Sx::Atom(verb)) = items.first() else { continue };
        if verb != "allow" && verb != "deny" {
            continue;
        }
        let ops: Vec<&str> = items[1..]
            .iter()
            .take_while(|x| matches!(x, Sx::Atom(_)))
            .map(|x| if let Sx::Atom(a) = x { a.as_str() } else { unreachable!() })
            .collect();
        let op_matches = ops.iter().any(|o| {
            *o == "default"
                || *o == op
                || o.strip_suffix('*').is_some_and(|pre| op.starts_with(pre))
        });
        if !op_matches {
            continue;
        }
        let filters: Vec<&Sx> = items[1 + ops.len()..]
            .iter()
            .filter(|f| !matches!(f, Sx::List(l) if matches!(l.first(), Some(Sx::Atom(a)) if a == "with")))
            .collect();
        if filters.is_empty() || filters.iter().any(|f| matches(p, f, path)) {
            allowed = verb == "allow";
        }
    }
    allowed
}

fn value(p: &Profile, x: &Sx) -> Option<Vec<u8>> {
    match x {
        Sx::Str(s) => Some(s.as_bytes().to_vec()),
        Sx::List(l) => match &l[..] {
            [Sx::Atom(a), Sx::Str(k)] if a == "param" => p
                .params
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_os_str().as_bytes().to_vec()),
            _ => None,
        },
        Sx::Atom(_) => None,
    }
}

fn matches(p: &Profile, f: &Sx, path: &str) -> bool {
    let Sx::List(l) = f else { return false };
    let Some(Sx::Atom(kind)) = l.first() else { return false };
    let arg = || l.get(1).and_then(|x| value(p, x));
    let path_b = path.as_bytes();
    match kind.as_str() {
        "literal" | "path" => arg().is_some_and(|v| v == path_b),
        "subpath" => arg().is_some_and(|v| {
            path_b == v.as_slice() || (path_b.starts_with(&v) && path_b.get(v.len()) == Some(&b'/'))
        }),
        "regex" => arg().is_some_and(|v| {
            Regex::new(std::str::from_utf8(&v).unwrap()).unwrap().is_match(path_b)
        }),
        "require-all" => l[1..].iter().all(|x| matches(p, x, path)),
        "require-any" => l[1..].iter().any(|x| matches(p, x, path)),
        "require-not" => !matches(p, &l[1], path),
        _ => false,
    }
}
