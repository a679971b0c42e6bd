//! The README and the book in `docs/` kept true by plain file checks (no sandbox, no daemon):
//!
//! - every relative link and `#anchor` in `README.md` and `docs/**/*.md` resolves, anchors made
//!   the way GitHub and mdBook make them (lower case, spaces to `-`, punctuation dropped, a
//!   repeated heading gets `-1`, `-2`, …);
//! - every configuration key the parser takes (the fields of the `Raw*` structs behind
//!   `deny_unknown_fields` in `config/src/file.rs` and the sections' modules) is in the
//!   configuration reference's TOML examples, every key written there is one the parser takes,
//!   and every TOML block of the README and the book parses with the real parser;
//! - every subcommand of the CLI (the `Command` enum in `src/main.rs` and the subcommand enums
//!   its argument structs hold) has a heading in the command reference;
//! - the README's quick start runs what `suite::quick_start` runs, and its test command is the
//!   one `.ci/run` runs.
//!
//! Each check is a pure function over text; the `*_catches_*` tests are their controls: the same
//! checks fed a page, key or command that is missing must fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `README.md` and every `.md` file under `docs/`, as (path, text).
fn pages() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut paths = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut paths);
    paths.sort();
    paths.into_iter().map(|p| (p.clone(), read(&p))).collect()
}

/// The text outside fenced code blocks, line by line (fence lines and code become empty lines,
/// so line numbers stay right).
fn prose(text: &str) -> Vec<&str> {
    let mut fence = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fence = !fence;
                ""
            } else if fence {
                ""
            } else {
                line
            }
        })
        .collect()
}

/// The fenced code blocks whose info string is `lang`, as (first line number, text).
fn code_blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match &mut open {
            None if t.starts_with("```") => {
                open = Some((i + 2, t[3..].trim() == lang, String::new()))
            }
            None => {}
            Some(_) if t.starts_with("```") => {
                let (at, wanted, body) = open.take().unwrap();
                if wanted {
                    out.push((at, body));
                }
            }
            Some((_, _, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

/// The anchor GitHub and mdBook make for a heading: lower case, punctuation dropped (letters,
/// digits, `-`, `_` and spaces kept), each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a page: its headings' slugs, a repeated one numbered as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let n = seen.entry(base.clone()).or_default();
            out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
            *n += 1;
        }
    }
    out
}

/// The prose of a page with inline code spans blanked (a span opens with a run of backticks and
/// closes with a run of the same length, also across a line break).
fn without_code_spans(text: &str) -> String {
    let joined = prose(text).join("\n");
    let bytes = joined.as_bytes();
    let mut out = String::with_capacity(joined.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            let ticks = "`".repeat(run);
            if let Some(end) = joined[i + run..].find(&ticks) {
                let span = &joined[i..i + run + end + run];
                out.extend(span.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
                i += run + end + run;
                continue;
            }
        }
        let c = joined[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Every link target of a page (`[label](target)`), with the line it is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let text = without_code_spans(text);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("](") {
        let start = from + at + 2;
        let Some(len) = text[start..].find([')', ' ', '\n']) else { break };
        if text[start + len..].starts_with(')') {
            let line = text[..start].matches('\n').count() + 1;
            out.push((line, text[start..start + len].to_string()));
        }
        from = start;
    }
    out
}

/// What is wrong with the links of `pages` (paths relative to `root`): each a line naming the
/// page, the line and the target. `exists` tells whether a path is a file or directory.
fn broken_links(pages: &[(PathBuf, String)], exists: &dyn Fn(&Path) -> bool) -> Vec<String> {
    let anchors_of: BTreeMap<PathBuf, BTreeSet<String>> =
        pages.iter().map(|(p, t)| (normal(p), anchors(t))).collect();
    let mut out = Vec::new();
    for (page, text) in pages {
        for (line, target) in links(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                normal(page)
            } else {
                normal(&page.parent().unwrap().join(path))
            };
            let problem = if !path.is_empty() && !exists(&file) {
                Some("no such file")
            } else {
                match (anchor, anchors_of.get(&file)) {
                    (Some(a), Some(known)) if !known.contains(a) => Some("no such anchor"),
                    (Some(_), None) if file.extension().is_some_and(|e| e == "md") => {
                        Some("anchor in a page that is not checked")
                    }
                    _ => None,
                }
            };
            if let Some(why) = problem {
                out.push(format!("{}:{line}: {target}: {why}", page.display()));
            }
        }
    }
    out
}

/// `a/b/../c` as `a/c`, without touching the filesystem.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_the_book_resolves() {
    let pages = pages();
    assert!(pages.len() > 10, "the book is missing: {} pages", pages.len());
    let broken = broken_links(&pages, &|p: &Path| p.exists());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_catches_a_missing_page_and_a_missing_anchor() {
    let page = |path: &str, text: &str| (PathBuf::from(path), text.to_string());
    let pages = vec![
        page(
            "/r/README.md",
            "# Top\n\n## Quick start\n\nSee [a](docs/a.md), [b](docs/a.md#two-words), \
             [gone](docs/gone.md), [bad](docs/a.md#nope), [here](#quick-start), \
             [not here](#nowhere).\n```\n[in code](docs/nothing.md)\n```\n`[span](x.md)`\n",
        ),
        page("/r/docs/a.md", "# A\n\n## Two words!\n\nBack [up](../README.md#top).\n"),
    ];
    let exists = |p: &Path| pages.iter().any(|(q, _)| q == p);
    let broken = broken_links(&pages, &exists);
    assert_eq!(
        broken,
        [
            "/r/README.md:5: docs/gone.md: no such file",
            "/r/README.md:5: docs/a.md#nope: no such anchor",
            "/r/README.md:5: #nowhere: no such anchor",
        ],
    );
}

#[test]
fn anchors_are_made_as_github_and_mdbook_make_them() {
    let text = "# The proxy, DNS, SOCKS, `connect` and transparent capture\n\
                ## Guest-user fence: `sandgate firewall`\n## Tiers\n## Tiers\n```\n# not a heading\n```\n";
    assert_eq!(
        anchors(text),
        [
            "guest-user-fence-sandgate-firewall",
            "the-proxy-dns-socks-connect-and-transparent-capture",
            "tiers",
            "tiers-1",
        ]
        .map(String::from)
        .into(),
    );
}

/// The fields of each `struct NAME { … }` in Rust source, by struct name (one field a line, as
/// rustfmt writes them).
fn struct_fields(source: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Vec<(String, String)>)> = None;
    for line in source.lines() {
        if let Some(rest) = line.split("struct ").nth(1).filter(|_| line.ends_with('{')) {
            let name = rest.trim_end_matches('{').trim().to_string();
            current = Some((name, Vec::new()));
        } else if line.starts_with('}') {
            if let Some((name, fields)) = current.take() {
                out.insert(name, fields);
            }
        } else if let Some((_, fields)) = &mut current {
            let t = line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            if let Some((field, ty)) = t.split_once(": ")
                && !t.starts_with("//")
                && field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                fields.push((field.to_string(), ty.trim_end_matches(',').to_string()));
            }
        }
    }
    out
}

/// The modules of `config/src` that own a section's raw struct (`file.rs` holds the rest).
const SECTIONS: &[&str] = &["intercept.rs", "upstream.rs", "telemetry.rs"];

/// Every key the configuration parser takes, as `table.key` (`tiers.*.key` for a tier of one's
/// own), read from the raw structs of `sources` (`config/src/file.rs` and [`SECTIONS`]).
fn parser_keys(sources: &[&str]) -> BTreeSet<String> {
    let mut structs = BTreeMap::new();
    for source in sources {
        structs.extend(struct_fields(source));
    }
    let mut out = BTreeSet::new();
    for (table, ty) in &structs["RawFile"] {
        let inner = ty
            .trim_start_matches("Option<")
            .trim_start_matches("Vec<")
            .trim_start_matches("BTreeMap<String, ")
            .trim_start_matches("crate::intercept::")
            .trim_start_matches("crate::upstream::")
            .trim_end_matches('>');
        let fields =
            structs.get(inner).unwrap_or_else(|| panic!("no struct {inner} for [{table}]"));
        let prefix = if ty.starts_with("BTreeMap<") { format!("{table}.*") } else { table.clone() };
        for (key, _) in fields {
            out.insert(format!("{prefix}.{key}"));
        }
    }
    out
}

/// The keys the TOML blocks of a page write, commented-out ones included (`# token = …`), as
/// `table.key`; a `[tiers.NAME]` table counts as `tiers.*`.
fn reference_keys(page: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, block) in code_blocks(page, "toml") {
        let mut table = String::new();
        for line in block.lines() {
            let t = line.trim();
            if let Some(header) = t.strip_prefix('[') {
                let name = header.trim_start_matches('[');
                let name = &name[..name.find(']').unwrap_or(name.len())];
                table = match name.split_once('.') {
                    Some((first, _)) => format!("{first}.*"),
                    None => name.to_string(),
                };
                continue;
            }
            let t = t.trim_start_matches('#').trim_start();
            if let Some((key, _)) = t.split_once('=')
                && !key.trim().is_empty()
                && key.trim().chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                out.insert(format!("{table}.{}", key.trim()));
            }
        }
    }
    out
}

/// Keys the parser takes that the reference does not name, and keys the reference names that
/// the parser does not take.
fn key_mismatch(
    parser: &BTreeSet<String>,
    reference: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    (
        parser.difference(reference).cloned().collect(),
        reference.difference(parser).cloned().collect(),
    )
}

#[test]
fn every_configuration_key_is_in_the_reference_and_every_key_there_is_taken() {
    let sources: Vec<String> = ["file.rs"]
        .iter()
        .chain(SECTIONS)
        .map(|f| read(&root().join("config/src").join(f)))
        .collect();
    let parser = parser_keys(&sources.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(parser.len() > 40, "the parser's keys were not found: {parser:?}");
    let reference = reference_keys(&read(&root().join("docs/configuration.md")));
    let (undocumented, unknown) = key_mismatch(&parser, &reference);
    assert!(undocumented.is_empty(), "keys the reference does not name: {undocumented:?}");
    assert!(unknown.is_empty(), "keys in the reference the parser refuses: {unknown:?}");
}

#[test]
fn the_key_check_catches_a_missing_key_and_a_misspelt_one() {
    let file_rs = "struct RawFile {\n    network: RawNetwork,\n    tiers: BTreeMap<String, RawTier>,\n}\n\
                   struct RawNetwork {\n    allow: Vec<Spanned<String>>,\n    pub(crate) deny: Vec<String>,\n}\n\
                   struct RawTier {\n    base: Spanned<String>,\n}\n";
    let parser = parser_keys(&[file_rs]);
    assert_eq!(parser, ["network.allow", "network.deny", "tiers.*.base"].map(String::from).into(),);
    let page = "```toml\n[network]\nallow = []\n# denny = []   # a typo\n[tiers.mine]\nbase = \"run\"\n```\n";
    let (undocumented, unknown) = key_mismatch(&parser, &reference_keys(page));
    assert_eq!(undocumented, ["network.deny"]);
    assert_eq!(unknown, ["network.denny"]);
}

#[test]
fn every_toml_block_of_the_readme_and_the_book_parses() {
    let home = Path::new("/home/me");
    let mut failures = Vec::new();
    let mut blocks = 0;
    for (page, text) in pages() {
        for (line, block) in code_blocks(&text, "toml") {
            blocks += 1;
            let name = PathBuf::from(format!("{}:{line}", page.display()));
            if let Err(e) = sandgate_config::parse_config(&name, &block, Some(home)) {
                failures.push(format!("{e}"));
            }
        }
    }
    assert!(blocks >= 4, "only {blocks} TOML blocks found");
    assert!(failures.is_empty(), "examples that do not parse:\n{}", failures.join("\n"));
}

/// `ListPaths` as `list-paths`.
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The variants of `enum NAME { … }` in Rust source: the lines indented by four spaces that
/// start with a capital (a variant's doc comments and attributes are skipped).
fn enum_variants(source: &str, name: &str) -> Vec<(String, Option<String>)> {
    let Some(start) = source.find(&format!("enum {name} {{")) else { return Vec::new() };
    let body = &source[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .skip(1)
        .filter(|l| {
            l.starts_with("    ") && l.as_bytes().get(4).is_some_and(u8::is_ascii_uppercase)
        })
        .map(|l| {
            let l = l.trim();
            let end = l.find(['(', ' ', ',', '{']).unwrap_or(l.len());
            let ty = l[end..].strip_prefix('(').map(|t| t.trim_end_matches([')', ',']).to_string());
            (l[..end].to_string(), ty)
        })
        .collect()
}

/// Every subcommand, as the words after `sandgate` (`config add-path`); a command with
/// subcommands of its own (`config`) is listed by those alone. `module` gives the source of a
/// module of `src/` by name.
fn subcommands(main_rs: &str, module: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut out = Vec::new();
    for (variant, ty) in enum_variants(main_rs, "Command") {
        let name = kebab(&variant);
        let children = ty
            .as_deref()
            .and_then(|t| t.split_once("::"))
            .map(|(m, args)| nested(&module(m), args))
            .unwrap_or_default();
        if children.is_empty() {
            out.push(name);
        } else {
            out.extend(children.into_iter().map(|c| format!("{name} {c}")));
        }
    }
    out
}

/// The subcommands of the argument struct `args` in a module's source: the variants of the enum
/// its `#[command(subcommand)]` field holds (none when it has no such field).
fn nested(source: &str, args: &str) -> Vec<String> {
    let Some(fields) = struct_fields(source).remove(args) else { return Vec::new() };
    let Some(at) = source.find(&format!("struct {args} {{")) else { return Vec::new() };
    let body = &source[at..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    let Some(sub) = body.split("#[command(subcommand)]").nth(1) else { return Vec::new() };
    let field = sub.trim_start().split(':').next().unwrap_or_default().trim();
    let Some((_, inner)) = fields.iter().find(|(f, _)| f == field) else { return Vec::new() };
    enum_variants(source, inner).into_iter().map(|(v, _)| kebab(&v)).collect()
}

/// The subcommands that have no heading of their own in the command reference: a heading
/// naming `` `sandgate WORDS` ``.
fn missing_commands(commands: &[String], reference: &str) -> Vec<String> {
    let headings: Vec<&str> = prose(reference).into_iter().filter(|l| l.starts_with('#')).collect();
    commands
        .iter()
        .filter(|c| !headings.iter().any(|h| h.contains(&format!("`sandgate {c}`"))))
        .cloned()
        .collect()
}

#[test]
fn every_subcommand_has_an_entry_in_the_command_reference() {
    let src = root().join("src");
    let commands =
        subcommands(&read(&src.join("main.rs")), &|m| read(&src.join(format!("{m}.rs"))));
    for expected in ["run", "check", "config add-path", "firewall gc", "hook claude", "cache ls"] {
        assert!(commands.iter().any(|c| c == expected), "{expected} not found in {commands:?}");
    }
    let missing = missing_commands(&commands, &read(&root().join("docs/commands.md")));
    assert!(missing.is_empty(), "subcommands without an entry in docs/commands.md: {missing:?}");
}

#[test]
fn the_command_check_catches_a_missing_command() {
    let main_rs = "enum Command {\n    /// Run.\n    Run(launch::LaunchArgs),\n    \
                   #[command(after_help = \"x\")]\n    Config(policy_cmd::ConfigArgs),\n    Stop,\n}\n";
    let policy = "pub struct ConfigArgs {\n    #[command(subcommand)]\n    command: ConfigCommand,\n}\n\
                  enum ConfigCommand {\n    /// Show.\n    ListPaths {\n        json: bool,\n    },\n    Check,\n}\n";
    let commands =
        subcommands(main_rs, &|m| if m == "policy_cmd" { policy.into() } else { String::new() });
    assert_eq!(commands, ["run", "config list-paths", "config check", "stop"]);
    let reference = "# Commands\n## `sandgate run`, `sandgate config`\n### `sandgate config check`\n\
                     `sandgate stop` in prose is not an entry\n";
    assert_eq!(missing_commands(&commands, reference), ["config list-paths", "stop"]);
}

/// The README's quick start: the tier command after `cargo run --release --`, and the test
/// command, each the only line of its block.
fn quick_start(readme: &str) -> (Vec<String>, String) {
    let start = readme.find("## Quick start").expect("the README has a quick start");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let blocks = code_blocks(section, "sh");
    assert_eq!(blocks.len(), 2, "the quick start has two commands: {blocks:?}");
    let run = blocks[0].1.trim();
    let (_, tier) = run.split_once("cargo run --release -- ").expect("cargo run --release -- …");
    (tier.split_whitespace().map(String::from).collect(), blocks[1].1.trim().to_string())
}

#[test]
fn the_quick_start_runs_what_the_quick_start_test_and_ci_run() {
    let (tier, test) = quick_start(&read(&root().join("README.md")));
    let args: Vec<String> = tier.iter().map(|a| format!("{a:?}")).collect();
    let args = format!("&[{}]", args.join(", "));
    let suite = read(&root().join("tests/tests/suite/quick_start.rs"));
    assert!(suite.contains(&args), "suite::quick_start does not run `sandgate {args}`");
    assert!(tier.iter().any(|a| a.contains("example.com")), "{tier:?}");
    let ci = read(&root().join(".ci/run"));
    assert!(ci.lines().any(|l| l.trim() == test), ".ci/run does not run `{test}`");
    assert_eq!(test, "cargo test --workspace --locked");
}
