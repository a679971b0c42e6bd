//! The crates' modules do not import each other in circles. A circle is where a newcomer cannot
//! start reading: each file needs the other first. Where two modules both need a thing, the
//! module that owns it is the one that does not need the other (the section checkers' shared
//! context in `config/src/check.rs`, the proxy's per-request context in `proxy/src/ctx.rs` and
//! the state its stages keep in `proxy/src/pool.rs`, what a launch reads from the host in
//! `daemon/src/launch_env.rs`).
//!
//! An edge is a `crate::MODULE` path (in a `use` or inline) outside comments and `mod tests`,
//! between top-level modules (`src/a.rs` and everything under `src/a/` are one module `a`). The
//! circles left are listed in [`KNOWN`]: one that grows, or a new one, fails; so does one that
//! is gone and still listed (take it off the list).
//!
//! Pure functions over text; `a_circle_is_found` and `a_new_circle_fails_the_check` are the
//! controls.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules of the same crate it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crates checked (their `src` directories).
const CRATES: &[&str] =
    &["config", "daemon", "proxy", "sandbox", "store", "approvals", "firewall", "monitor", "hook"];

/// The circles left, by crate: none since issue 36 (a circle that has to stay a while is listed
/// here, with why).
const KNOWN: &[(&str, &[&str])] = &[];

/// Modules that must be in no circle at all (the circles issue 36 untied).
const UNTIED: &[(&str, &[&str])] = &[
    ("config", &["file", "intercept", "layers", "upstream", "project"]),
    ("daemon", &["launch", "launch_daemon", "network_sockets", "server", "netpool", "caches"]),
    ("proxy", &["conn", "pipeline", "socks", "transparent"]),
    // Every stage borrows the proxy's shared state (`proxy.rs`); the state the stages keep
    // there is owned below it (`pool.rs`, `interceptor.rs`, `dns_log.rs`).
    (
        "proxy",
        &[
            "attribution",
            "ctx",
            "dns",
            "dns_log",
            "forward",
            "intercept",
            "interceptor",
            "pool",
            "proxy",
            "relay",
        ],
    ),
    // The Linux backend and the tree scan share the kernel calls (`sys.rs`, below both) and the
    // word for a directory entry (`entry.rs`).
    ("sandbox", &["entry", "linux", "spec", "sys", "tree"]),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// The source of a file without its comment lines and its `mod tests`.
fn code(text: &str) -> String {
    let end = text
        .match_indices("#[cfg(test)]")
        .find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod tests"))
        .map_or(text.len(), |(i, _)| i);
    text[..end].lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The first identifier of each item of a `use` group (`a, b::c, d::{e, f}` → a, b, d).
fn group_heads(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
        .into_iter()
        .map(|item| item.trim().split("::").next().unwrap_or("").trim().to_owned())
        .filter(|head| !head.is_empty())
        .collect()
}

/// The modules `code` names as `crate::NAME` or in a `crate::{…}` group.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, m) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `sandgate_crate::`, not this crate
        }
        let rest = &code[i + m.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(j, _)| j);
            out.extend(group_heads(&group[..end]));
        } else {
            let name: String =
                rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            out.insert(name);
        }
    }
    out
}

/// The graph of `files` ((path relative to `src`, text)): edges between top-level modules only.
fn graph(files: &[(String, String)]) -> Graph {
    let module = |rel: &str| {
        let first = rel.split('/').next().unwrap_or(rel);
        first.trim_end_matches(".rs").to_owned()
    };
    let mut g = Graph::new();
    for (rel, text) in files {
        let m = module(rel);
        if m == "lib" || m == "main" {
            continue;
        }
        g.entry(m).or_default().extend(named_modules(&code(text)));
    }
    let names: BTreeSet<String> = g.keys().cloned().collect();
    for (m, deps) in g.iter_mut() {
        deps.retain(|d| names.contains(d) && d != m);
    }
    g
}

/// The strongly connected components of `g` with more than one module (Tarjan), each sorted.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        for w in &t.g[v] {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                t.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                t.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let at = t.stack.iter().rposition(|x| *x == v).expect("on the stack");
            let mut comp: Vec<String> = t.stack.drain(at..).map(str::to_owned).collect();
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t =
        T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

/// What is wrong with `crate`'s circles against `known` and `untied` ([`KNOWN`] and [`UNTIED`]):
/// one line each.
fn problems(
    krate: &str,
    g: &Graph,
    found: &[Vec<String>],
    known: &[(&str, &[&str])],
    untied: &[(&str, &[&str])],
) -> Vec<String> {
    let known: Vec<Vec<String>> = known
        .iter()
        .filter(|(c, _)| *c == krate)
        .map(|(_, m)| m.iter().map(|s| s.to_string()).collect())
        .collect();
    let mut out = Vec::new();
    for circle in found.iter().filter(|c| !known.contains(c)) {
        let edges: Vec<String> = circle
            .iter()
            .flat_map(|a| {
                g[a].iter().filter(|b| circle.contains(b)).map(move |b| format!("{a}→{b}"))
            })
            .collect();
        out.push(format!(
            "{krate}: modules import each other in a circle: {circle:?} ({}); move what two of \
             them share into the one that does not need the other (or a module below both)",
            edges.join(", ")
        ));
    }
    for circle in known.iter().filter(|c| !found.contains(c)) {
        out.push(format!("{krate}: the known circle {circle:?} is gone or changed: update KNOWN"));
    }
    for (_, modules) in untied.iter().filter(|(c, _)| *c == krate) {
        for m in *modules {
            if found.iter().any(|c| c.iter().any(|x| x == m)) {
                out.push(format!("{krate}: {m} is in a circle again"));
            }
        }
    }
    out
}

/// Every `.rs` file under `dir`, as (path relative to `dir`, text).
fn sources(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn the_crates_modules_import_each_other_in_no_new_circle() {
    let mut all = Vec::new();
    for krate in CRATES {
        let g = graph(&sources(&root().join(krate).join("src")));
        assert!(g.len() > 1, "{krate}: no modules found");
        let found = circles(&g);
        println!("{krate}: {} modules, circles: {found:?}", g.len());
        all.extend(problems(krate, &g, &found, KNOWN, UNTIED));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
}

/// Control: the same reading finds a circle through a `use` group, an inline path and a
/// directory module, and ignores comments, `mod tests` and other crates' paths.
#[test]
fn a_circle_is_found() {
    let g = graph(&files(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::{b::{X, Y}, d};\n"),
        ("b/mod.rs", "fn f() { crate::c::g() }\n"),
        ("b/x.rs", "// crate::a in a comment\n"),
        (
            "c.rs",
            "use sandgate_crate::a;\nuse crate::a::Z;\n#[cfg(test)]\nmod tests { use crate::b; }\n",
        ),
        ("d.rs", "/// [`crate::a`]\nuse crate::e;\n"),
    ]));
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    let untied =
        graph(&files(&[("a.rs", "use crate::b;"), ("b.rs", "use crate::c;"), ("c.rs", "")]));
    assert!(circles(&untied).is_empty());
}

/// Control: a circle among modules that issue 36 untied fails the check, with the edges named.
#[test]
fn a_new_circle_fails_the_check() {
    let g = graph(&files(&[
        ("conn.rs", "use crate::pipeline::Ctx;"),
        ("pipeline.rs", "use crate::conn::Opened;"),
    ]));
    let found = circles(&g);
    let known: &[(&str, &[&str])] = &[("proxy", &["forward", "proxy"])];
    let p = problems("proxy", &g, &found, known, UNTIED);
    assert!(p.iter().any(|l| l.contains("conn→pipeline") && l.contains("pipeline→conn")), "{p:?}");
    assert!(p.iter().any(|l| l.contains("conn is in a circle again")), "{p:?}");
    assert!(p.iter().any(|l| l.contains("is gone or changed")), "{p:?}");
}
