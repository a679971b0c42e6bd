//! What stays writable in a writable path. At its top every dot-entry is read-only unless it is
//! on [`writable_dotfiles`] (data: `writable_dotfiles.txt`, one name per line with the reason),
//! and so are the names without a dot that tools act on when they merely start in the directory
//! ([`top_autorun`]). In every directory below the top, the names of [`host_tool_files`] that
//! tools execute or obey (data: `host_tools.txt`, each with the tool, how it finds the file and
//! why) are read-only. The launcher enforces it; this module only holds the lists and checks
//! names from configuration files.

use std::sync::OnceLock;

/// The built-in allowlist, one `name  # why` per line.
const WRITABLE_DOTFILES: &str = include_str!("writable_dotfiles.txt");
/// The files host tools execute or obey, one `name kind tool discovery  # why` per line.
const HOST_TOOLS: &str = include_str!("host_tools.txt");

/// Names (or `*` patterns) of a list file: the first word of every line that is not a comment.
fn names(text: &'static str) -> Vec<&'static str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Dot-entries at the top of a writable path that stay writable by default (build output and
/// caches that no tool runs anything from when it merely starts there).
pub fn writable_dotfiles() -> Vec<&'static str> {
    names(WRITABLE_DOTFILES)
}

/// Names without a leading dot at the top of a writable path that stay read-only (toolchain
/// selectors and tool configs acted on when a tool merely starts in the directory): the
/// `protect` entries of [`host_tool_files`] without a dot (dot-entries are protected there
/// anyway).
pub fn top_autorun() -> Vec<&'static str> {
    names_of(ToolFileKind::Protect).into_iter().filter(|n| !n.starts_with('.')).collect()
}

/// The names of [`host_tool_files`] of one kind, in file order.
pub fn names_of(kind: ToolFileKind) -> Vec<&'static str> {
    host_tool_files().iter().filter(|f| f.kind == kind).map(|f| f.name).collect()
}

/// What a name of [`host_tool_files`] is to the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFileKind {
    /// A tool runs code from it, or lets it choose what runs, merely by starting in the
    /// directory: read-only in every directory of a writable path, a new one taken away.
    Protect,
    /// The project's own build code, run when the user builds on purpose: writable, named at
    /// the end of a launch that changed it.
    Review,
    /// Build output the launch's scan does not enter.
    Skip,
}

/// How a tool finds the file: why every directory below a writable path counts, not just its
/// top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    /// Read in the directory the tool starts in and in each parent (cargo, rustup, direnv).
    WalkUp,
    /// Read at the top of a git repository, which any directory may be (pre-commit, lefthook).
    Repository,
    /// Read by an editor or agent opened on that folder (VS Code, Claude Code).
    Opened,
    /// Written by builds; no tool starts there (the kind is [`ToolFileKind::Skip`]).
    Output,
}

/// One entry of the host tools' data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostToolFile {
    /// One path component; `*` may start or end it, or stand once inside it.
    pub name: &'static str,
    /// What the launcher does with it.
    pub kind: ToolFileKind,
    /// The tool that reads it.
    pub tool: &'static str,
    /// How the tool finds it.
    pub discovery: Discovery,
    /// What the tool does with it.
    pub why: &'static str,
}

/// A line of the data file that is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidToolLine {
    /// The line.
    pub line: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl TryFrom<&'static str> for HostToolFile {
    type Error = InvalidToolLine;

    fn try_from(line: &'static str) -> Result<HostToolFile, InvalidToolLine> {
        let bad = |reason| InvalidToolLine { line, reason };
        let (fields, why) = line.split_once('#').ok_or_else(|| bad("no `# why`"))?;
        let why = why.trim();
        let words: Vec<&'static str> = fields.split_whitespace().collect();
        let [name, kind, tool, discovery] = words[..] else {
            return Err(bad("not four words before the `#`: name kind tool discovery"));
        };
        let kind = match kind {
            "protect" => ToolFileKind::Protect,
            "review" => ToolFileKind::Review,
            "skip" => ToolFileKind::Skip,
            _ => return Err(bad("kind is not protect, review or skip")),
        };
        let discovery = match discovery {
            "walk-up" => Discovery::WalkUp,
            "repository" => Discovery::Repository,
            "opened" => Discovery::Opened,
            "output" => Discovery::Output,
            _ => return Err(bad("discovery is not walk-up, repository, opened or output")),
        };
        if (kind == ToolFileKind::Skip) != (discovery == Discovery::Output) {
            return Err(bad("skip entries, and only they, are build output"));
        }
        if why.len() < 8 {
            return Err(bad("the reason is missing"));
        }
        let inner = name.trim_start_matches('*').trim_end_matches('*');
        let stars = name.matches('*').count();
        if inner.is_empty() || name.contains('/') || inner.matches('*').count() > 1 || stars > 2 {
            return Err(bad("the name is not one path component with at most two `*`"));
        }
        Ok(HostToolFile { name, kind, tool, discovery, why })
    }
}

/// The entries of the built-in data file (`host_tools.txt`), in file order. A line that does
/// not parse is left out (the unit tests hold the file to none).
pub fn host_tool_files() -> &'static [HostToolFile] {
    static PARSED: OnceLock<Vec<HostToolFile>> = OnceLock::new();
    PARSED.get_or_init(|| entries().filter_map(Result::ok).collect())
}

/// Every line of the data file that is not a comment, parsed.
fn entries() -> impl Iterator<Item = Result<HostToolFile, InvalidToolLine>> {
    HOST_TOOLS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(HostToolFile::try_from)
}

/// Why a name cannot be a top-level entry pattern, or `None` when it can: one path component,
/// not `.`/`..`, `*` only as its first or last character, and never `.git` (git metadata has
/// rules of its own: `[filesystem] git_writable`).
pub fn invalid_entry_name(name: &str) -> Option<&'static str> {
    let inner = name.strip_prefix('*').unwrap_or(name);
    let inner = inner.strip_suffix('*').unwrap_or(inner);
    if inner.is_empty() || name == "." || name == ".." {
        Some("an entry name must name something")
    } else if name.contains('/') || name.contains('\0') {
        Some("an entry name is one name at the top of the writable path, without '/'")
    } else if inner.contains('*') {
        Some("'*' may only start or end a name")
    } else if name == ".git" || name.starts_with(".git*") {
        Some(".git is decided by [filesystem] git_writable")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> impl Iterator<Item = &str> {
        text.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    }

    #[test]
    fn every_listed_name_is_valid_and_has_its_reason() {
        for line in lines(WRITABLE_DOTFILES) {
            let (name, why) = line.split_once('#').expect("a comment");
            assert!(why.trim().len() > 8, "writable_dotfiles: {name} needs a reason");
            assert_eq!(invalid_entry_name(name.trim()), None, "writable_dotfiles: {line}");
        }
        let bad: Vec<InvalidToolLine> = entries().filter_map(Result::err).collect();
        assert!(bad.is_empty(), "host_tools.txt: {bad:?}");
        let dots = writable_dotfiles();
        assert!(dots.iter().all(|n| n.starts_with('.')), "only dot-entries: {dots:?}");
        let autorun = top_autorun();
        assert!(autorun.iter().all(|n| !n.starts_with('.')), "dot-entries are covered anyway");
        let mut sorted = dots.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), dots.len(), "no duplicates");
        let mut tools: Vec<&str> = host_tool_files().iter().map(|f| f.name).collect();
        let listed = tools.len();
        tools.sort_by_key(|n| n.to_ascii_lowercase());
        tools.dedup_by_key(|n| n.to_ascii_lowercase());
        assert_eq!(tools.len(), listed, "host_tools.txt: no name twice (in any case)");
        // Every name a config file could also name (but .git, decided by git_writable, and the
        // names with a `*` inside, which only the data file may use).
        let inner_star = |n: &str| n.trim_matches('*').contains('*');
        for f in host_tool_files().iter().filter(|f| f.name != ".git" && !inner_star(f.name)) {
            assert_eq!(invalid_entry_name(f.name), None, "host_tools.txt: {}", f.name);
        }
    }

    #[test]
    fn tool_lines_are_parsed_or_refused_with_the_reason() {
        let ok: HostToolFile =
            ".cargo protect cargo walk-up # config.toml runs".try_into().expect("parses");
        assert_eq!(
            (ok.name, ok.kind, ok.tool, ok.discovery, ok.why),
            (".cargo", ToolFileKind::Protect, "cargo", Discovery::WalkUp, "config.toml runs")
        );
        let table: &[(&'static str, &str)] = &[
            (".cargo protect cargo walk-up", "no `# why`"),
            (".cargo protect cargo # runs code", "not four words"),
            (".cargo keep cargo walk-up # runs code", "kind is not"),
            (".cargo protect cargo upward # runs code", "discovery is not"),
            ("target skip cargo walk-up # build output", "skip entries"),
            (".cargo protect cargo output # runs code", "skip entries"),
            (".cargo protect cargo walk-up # x", "reason is missing"),
            ("a/b protect cargo walk-up # runs code", "one path component"),
            ("a*b*c protect cargo walk-up # runs code", "one path component"),
            ("* protect cargo walk-up # runs code", "one path component"),
            ("*a*b* protect cargo walk-up # runs code", "one path component"),
        ];
        for (line, why) in table {
            let err = HostToolFile::try_from(*line).expect_err(line);
            assert!(err.reason.contains(why), "{line}: {}", err.reason);
        }
        // `*` at either end or both, or once inside: at most two in all.
        for line in [
            "*rc* protect x walk-up # runs code",
            "*.toml protect x walk-up # runs code",
            "mise.*.toml protect mise walk-up # runs code",
        ] {
            assert!(HostToolFile::try_from(line).is_ok(), "{line}");
        }
    }

    #[test]
    fn every_tool_the_issue_names_is_listed_with_its_rule() {
        let find = |n: &str| host_tool_files().iter().find(|f| f.name == n).expect(n).clone();
        for (name, kind, discovery) in [
            (".cargo", ToolFileKind::Protect, Discovery::WalkUp),
            ("rust-toolchain.toml", ToolFileKind::Protect, Discovery::WalkUp),
            (".envrc", ToolFileKind::Protect, Discovery::WalkUp),
            ("mise.toml", ToolFileKind::Protect, Discovery::WalkUp),
            (".mise.toml", ToolFileKind::Protect, Discovery::WalkUp),
            (".tool-versions", ToolFileKind::Protect, Discovery::WalkUp),
            (".npmrc", ToolFileKind::Protect, Discovery::WalkUp),
            (".pre-commit-config.yaml", ToolFileKind::Protect, Discovery::Repository),
            ("opencode.json", ToolFileKind::Protect, Discovery::WalkUp),
            (".aider.conf.yml", ToolFileKind::Protect, Discovery::Repository),
            (".git", ToolFileKind::Protect, Discovery::Repository),
            ("build.rs", ToolFileKind::Review, Discovery::WalkUp),
            ("node_modules", ToolFileKind::Skip, Discovery::Output),
            ("target", ToolFileKind::Skip, Discovery::Output),
        ] {
            let f = find(name);
            assert_eq!((f.kind, f.discovery), (kind, discovery), "{name}");
        }
        // What the top-level rule had before the data file, still protected at the top.
        for name in [
            "rust-toolchain",
            "rust-toolchain.toml",
            "lean-toolchain",
            "global.json",
            "mise.toml",
            "mise.local.toml",
            "opencode.json",
            "opencode.jsonc",
            "lefthook.yml",
            "lefthook-local.yaml",
            "gradle.properties",
            "Vagrantfile",
            "pylintrc",
            "bunfig.toml",
            "*.code-workspace",
        ] {
            assert!(top_autorun().contains(&name), "{name}");
        }
        // Build output is never protected, nor what a build writes at the top.
        let protected = names_of(ToolFileKind::Protect);
        for name in writable_dotfiles().into_iter().chain(names_of(ToolFileKind::Skip)) {
            assert!(!protected.contains(&name), "{name} is build output");
        }
    }

    #[test]
    fn the_lists_hold_what_builds_write_and_not_what_tools_run() {
        let dots = writable_dotfiles();
        for must in [".venv", ".tox", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".next"] {
            assert!(dots.contains(&must), "{must}");
        }
        for must in [".nuxt", ".turbo", ".gradle", ".cache", ".parcel-cache", ".svelte-kit"] {
            assert!(dots.contains(&must), "{must}");
        }
        assert!(dots.contains(&".dart_tool"));
        // Each of these makes a tool run code when it merely starts in the directory.
        for never in [
            ".cargo",
            ".envrc",
            ".vscode",
            ".idea",
            ".cursor",
            ".claude",
            ".gemini",
            ".zed",
            ".continue",
            ".codex",
            ".devcontainer",
            ".pre-commit-config.yaml",
            ".husky",
            ".mcp.json",
            ".npmrc",
            ".yarnrc.yml",
            ".yarn",
            ".mvn",
            ".bsp",
            ".direnv",
            ".git",
            ".gitmodules",
            ".pylintrc",
            ".pnp.cjs",
            ".bundle",
            ".terraform",
            ".vercel",
        ] {
            assert!(!dots.contains(&never), "{never} must not be writable");
        }
        let autorun = top_autorun();
        for must in ["rust-toolchain", "rust-toolchain.toml", "opencode.json", "global.json"] {
            assert!(autorun.contains(&must), "{must}");
        }
    }

    #[test]
    fn names_from_config_are_checked() {
        for good in [".venv", ".out*", "*.code-workspace", "Makefile.local", ".gitignore"] {
            assert_eq!(invalid_entry_name(good), None, "{good}");
        }
        for bad in ["", "*", ".", "..", "a/b", ".git", ".git*", "a*b", "**"] {
            assert!(invalid_entry_name(bad).is_some(), "{bad:?}");
        }
    }
}
