//! The git metadata wall: what of the git repositories around a writable path must stay
//! read-only so that nothing written inside runs later in the host's `git status`/`git commit`.
//!
//! It is derived from what git itself reads, not from a list of cases:
//!
//! - **repositories**: the one at each writable path and every repository *above* it (a launch
//!   in a subdirectory of a superproject), then, recursively, every gitlink (index entry of mode
//!   160000) of each of them, read from the git index with `gix-index`, plus the `path` values
//!   of `.gitmodules` (so a gitlink git would see after `git submodule` commands counts too);
//! - **git directories** inside a writable path: read-only (or, with `[filesystem]
//!   git_writable`, their `hooks`, `config`, `config.worktree`, `commondir` and those of every
//!   submodule and linked worktree below them);
//! - **gitlink checkouts**: the `.git` of every gitlink path (a `gitdir:` pointer or a
//!   directory) read-only; an uninitialised submodule's directory read-only (`git init sub`
//!   there would make a repository whose config the host's `git status` reads); a missing one a
//!   placeholder (the launcher's mechanism for missing protected paths);
//! - **configuration values that name files** git reads or runs, in the repositories' config
//!   (`config`, `config.worktree`, `include.path`/`includeIf.*.path` targets, followed), the
//!   user's and system's config and `GIT_CONFIG_COUNT` variables, parsed with `gix-config` (case-insensitive keys, quoting,
//!   comments): `core.hooksPath`, `core.fsmonitor` and include targets are protected wherever they
//!   point inside a writable path (a placeholder when missing), and so are
//!   `core.attributesFile` and `init.templateDir`; for commands (`core.sshCommand`,
//!   `core.editor`, `core.pager`, `filter.*.clean|smudge|process`, `diff.*.textconv`, aliases,
//!   ...) the program named by a path is, and every existing file named by a word (or by a
//!   component-wise suffix of one: `$(git rev-parse --show-toplevel)/x.sh`), read from the work
//!   tree and from a `cd D` before it; any other value naming an existing file, or a directory
//!   below the work tree, inside a writable path makes it read-only. `GIT_CONFIG_PARAMETERS`
//!   counts like `GIT_CONFIG_COUNT`; `GIT_DIR`-like variables make the launch refuse;
//! - **repositories already inside** a writable path that no gitlink names, found by the
//!   launch's one scan of the writable trees ([`crate::tree`], bounded): a `.git` entry as the
//!   repositories above (one git cannot use today protected as it is), and a directory with
//!   git's own shape (`HEAD` with `objects` and `refs`, or with `commondir`) whatever its name
//!   (`fixtures/mirror.git`: the host's `git push ./fixtures/mirror.git` runs its hooks) as a
//!   git directory of its own: read-only, or its hooks, config and `commondir`;
//! - an index that cannot be read (a split index without its shared index) makes the launch
//!   refuse: its gitlinks are unknown.
//!
//! The pure parts ([`gitlinks`], [`submodule_paths`], [`config_refs`], [`command_words`]) work on
//! bytes; [`protect_git`] is the I/O edge that walks the disk. What this does not cover is in the
//! docs/threat-model/git-metadata.md.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use crate::tree::Repository;

/// Deepest nesting of submodules (and of config includes) followed; git's own include limit is 10.
const MAX_DEPTH: usize = 16;

/// What the git wall protects for one launch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GitWall {
    /// Paths to keep read-only (absolute; missing ones become placeholders in the launcher).
    pub read_only: Vec<PathBuf>,
    /// What could not be read (an index or config git itself may not read either), for a warning.
    pub notes: Vec<String>,
    /// Symbolic links inside a writable path on the way to a protected path (`.husky -> ...`,
    /// `.git -> ...`): a mount protects what a link points to, not the link, so the command could
    /// replace the link with a directory of its own. The launch must refuse.
    pub links: Vec<PathBuf>,
    /// Why the wall cannot be drawn (an index git reads that this cannot, `GIT_DIR` and the like
    /// in the launch's environment pointing git elsewhere): the launch must refuse.
    pub refuse: Vec<String>,
}

/// How a configuration value names a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// The value is a path git reads or runs (`core.hooksPath`, `core.fsmonitor`), relative to
    /// the working tree: protected even when missing.
    Path,
    /// The value is another configuration file (`include.path`, `includeIf.*.path`), relative to
    /// the including file: protected even when missing, and read in turn.
    Include,
    /// The value is a command run through the shell: a program named with a `/` is protected even
    /// when missing, other words naming existing files are protected.
    Command,
    /// Any other value: words naming existing files inside a writable path are protected.
    Other,
}

/// One value of a git configuration file that may name a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRef {
    /// `section[.subsection].key`, section and key lower-cased.
    pub key: String,
    /// How the value names a file.
    pub kind: RefKind,
    /// The value, unquoted.
    pub value: String,
}

/// Keys whose value is a shell command (`*` is any subsection).
const COMMAND_KEYS: &[(&str, &str)] = &[
    ("core", "sshcommand"),
    ("core", "editor"),
    ("core", "pager"),
    ("core", "askpass"),
    ("core", "gitproxy"),
    ("core", "alternaterefscommand"),
    ("submodule.*", "update"),
    ("gpg.*", "defaultkeycommand"),
    ("sendemail", "sendmailcmd"),
    ("sendemail.*", "sendmailcmd"),
    ("sendemail.*", "tocmd"),
    ("sendemail.*", "cccmd"),
    ("tar.*", "command"),
    ("man.*", "cmd"),
    ("man.*", "path"),
    ("guitool.*", "cmd"),
    ("sequence", "editor"),
    ("pager", "*"),
    ("alias", "*"),
    ("diff", "external"),
    ("diff.*", "textconv"),
    ("diff.*", "command"),
    ("filter.*", "clean"),
    ("filter.*", "smudge"),
    ("filter.*", "process"),
    ("merge.*", "driver"),
    ("credential", "helper"),
    ("credential.*", "helper"),
    ("gpg", "program"),
    ("gpg.*", "program"),
    ("uploadpack", "packobjectshook"),
    ("remote.*", "uploadpack"),
    ("remote.*", "receivepack"),
    ("difftool.*", "cmd"),
    ("difftool.*", "path"),
    ("mergetool.*", "cmd"),
    ("mergetool.*", "path"),
    ("trailer.*", "cmd"),
    ("trailer.*", "command"),
    ("sendemail", "tocmd"),
    ("sendemail", "cccmd"),
    ("sendemail", "smtpserver"),
    ("web", "browser"),
    ("browser.*", "cmd"),
    ("browser.*", "path"),
    ("interactive", "difffilter"),
];

fn kind_of(section: &str, subsection: bool, key: &str) -> RefKind {
    match (section, subsection, key) {
        ("core", false, "hookspath" | "fsmonitor" | "attributesfile")
        | ("init", false, "templatedir") => RefKind::Path,
        ("include", false, "path") | ("includeif", true, "path") => RefKind::Include,
        _ => {
            let command = COMMAND_KEYS.iter().any(|(s, k)| {
                let (name, sub) = s.split_once('.').map_or((*s, false), |(n, _)| (n, true));
                name == section && (sub == subsection || *k == "*") && (*k == "*" || *k == key)
            });
            if command { RefKind::Command } else { RefKind::Other }
        }
    }
}

/// The values of a git configuration file that may name files, in file order. Parsed like git
/// parses it (gix-config): keys case-insensitive, quotes and escapes resolved, comments dropped.
pub fn config_refs(text: &[u8]) -> Result<Vec<ConfigRef>, String> {
    match plain_config_refs(text) {
        Some(refs) => Ok(refs),
        None => parsed_config_refs(text),
    }
}

/// Whether `core.fsmonitor = value` is git's builtin daemon or nothing (a boolean), not a
/// program. gix-config reads a number behind `0b` as binary; git reads numbers with the C
/// library's `strtoimax`, which reads no `0b` here (glibc before 2.38, or not built for C23),
/// so git runs `0b1` as a program found on `PATH` (red team of issue 31): such a value is a
/// program to the wall too (protecting what it may name costs nothing where git reads a
/// boolean).
fn fsmonitor_off_or_builtin(value: &str) -> bool {
    let digits = value.trim_start_matches(['+', '-']).as_bytes();
    let binary = digits.len() > 1 && digits[0] == b'0' && matches!(digits[1], b'b' | b'B');
    !binary && gix_config::Boolean::try_from(value).is_ok()
}

/// [`config_refs`] by gix-config, whatever the file's form.
fn parsed_config_refs(text: &[u8]) -> Result<Vec<ConfigRef>, String> {
    let file = gix_config::File::from_bytes_no_includes(
        text,
        gix_config::file::Metadata::api(),
        gix_config::file::init::Options::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for section in file.sections() {
        let header = section.header();
        let name = lossy(header.name()).to_ascii_lowercase();
        let sub = header.subsection_name().map(|s| lossy(s));
        let mut seen = BTreeSet::new();
        for key in section.value_names() {
            let key = key.to_ascii_lowercase();
            if !seen.insert(key.clone()) {
                continue;
            }
            let kind = kind_of(&name, sub.is_some(), &key);
            for value in section.values(&key) {
                let value = lossy(&value);
                if key == "fsmonitor" && fsmonitor_off_or_builtin(&value) {
                    continue;
                }
                let full = match &sub {
                    Some(s) => format!("{name}.{s}.{key}"),
                    None => format!("{name}.{key}"),
                };
                out.push(ConfigRef { key: full, kind, value });
            }
        }
    }
    Ok(out)
}

/// [`config_refs`] of a file in the plain form git writes itself (`git init`, `git clone`,
/// `git config KEY WORD`, `git config user.name "First Last"`): `[name]` and `[name "sub"]`
/// lines, and `key = value` lines whose value is printable characters (spaces and tabs inside
/// it kept as written) without quotes, escapes or comments; `None` for anything else, which
/// gix-config parses. Hand-written because the parser's set-up cost
/// ~0.1 ms of every `build` launch (it reads each repository's `config`), and this form is
/// what nearly every repository holds: on it, the two give the same values in the same order
/// (`the_plain_form_reads_as_gix_config_reads_it` compares them on generated files).
fn plain_config_refs(text: &[u8]) -> Option<Vec<ConfigRef>> {
    let text = std::str::from_utf8(text).ok()?;
    if text.contains('\r') {
        return None;
    }
    let word = |w: &str, more: &dyn Fn(u8) -> bool| {
        !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || more(b))
    };
    // (Each section: its name lower-cased, its subsection, its keys lower-cased with values.)
    type Section<'t> = (String, Option<&'t str>, Vec<(String, &'t str)>);
    let mut sections: Vec<Section<'_>> = Vec::new();
    for line in text.split('\n') {
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() {
            continue;
        }
        if let Some(inner) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (name, sub) = match inner.split_once(' ') {
                None => (inner, None),
                Some((name, sub)) => {
                    let sub = sub.strip_prefix('"')?.strip_suffix('"')?;
                    let printable = |b: u8| b.is_ascii_graphic() && b != b'"' && b != b'\\';
                    (name, Some(sub).filter(|s| word(s, &printable))?.into())
                }
            };
            if !word(name, &|b| b == b'-') {
                return None;
            }
            sections.push((name.to_ascii_lowercase(), sub, Vec::new()));
            continue;
        }
        let (key, value) = line.split_once('=')?;
        let (key, value) =
            (key.trim_end_matches([' ', '\t']), value.trim_start_matches([' ', '\t']));
        let plain = |b: u8| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b';' | b'#');
        if !word(key, &|b| b == b'-') || !key.as_bytes()[0].is_ascii_alphabetic() {
            return None;
        }
        // Inside a value, spaces and tabs are kept as written (the line's ends are trimmed
        // already): `name = First Last`, in nearly every person's ~/.gitconfig.
        if !word(value, &|b| plain(b) || b == b' ' || b == b'\t') {
            return None;
        }
        sections.last_mut()?.2.push((key.to_ascii_lowercase(), value));
    }
    let mut out = Vec::new();
    for (name, sub, entries) in &sections {
        let mut seen = BTreeSet::new();
        for (key, _) in entries {
            if !seen.insert(key) {
                continue;
            }
            let kind = kind_of(name, sub.is_some(), key);
            for (_, value) in entries.iter().filter(|(k, _)| k == key) {
                if key == "fsmonitor" && fsmonitor_off_or_builtin(value) {
                    continue;
                }
                let full = match sub {
                    Some(s) => format!("{name}.{s}.{key}"),
                    None => format!("{name}.{key}"),
                };
                out.push(ConfigRef { key: full, kind, value: (*value).to_owned() });
            }
        }
    }
    Some(out)
}

/// The last value of `key` (`section.key`, lower case) in a git configuration file, as
/// gix-config's `string` reads it; `None` when absent. A file in git's plain form is read by
/// hand (see [`plain_config_refs`]), any other by gix-config.
fn config_value(text: &[u8], key: &str) -> Option<String> {
    match plain_config_refs(text) {
        Some(refs) => refs.into_iter().rev().find(|r| r.key == key).map(|r| r.value),
        None => gix_config::File::from_bytes_no_includes(
            text,
            gix_config::file::Metadata::api(),
            Default::default(),
        )
        .ok()?
        .string(key)
        .map(|v| lossy(&v)),
    }
}

/// Whether a git configuration file turns `extensions.worktreeConfig` on (git's last value
/// wins; a value that is no boolean is off). A file in git's plain form is read by hand (see
/// [`plain_config_refs`]), any other by gix-config.
fn worktree_config_on(text: &[u8]) -> bool {
    let on = |v: &str| gix_config::Boolean::try_from(v).is_ok_and(|b| b.0);
    match plain_config_refs(text) {
        Some(refs) => refs
            .iter()
            .rev()
            .find(|r| r.key == "extensions.worktreeconfig")
            .is_some_and(|r| on(&r.value)),
        None => gix_config::File::from_bytes_no_includes(
            text,
            gix_config::file::Metadata::api(),
            Default::default(),
        )
        .ok()
        .and_then(|f| f.boolean("extensions.worktreeconfig").ok().flatten())
        .unwrap_or(false),
    }
}

/// The words of a shell command line, quotes dropped and split at whitespace and operators
/// (`;|&()<>`), a leading `!` (aliases, credential helpers) dropped: more words than the shell
/// sees, never fewer.
pub fn command_words(command: &str) -> Vec<String> {
    let command = command.trim_start().strip_prefix('!').unwrap_or(command);
    command
        .split(|c: char| c.is_whitespace() || ";|&()<>`=".contains(c))
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'' || c == '$').to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The `path` values of a `.gitmodules` file with their submodule names (`(name, path)`),
/// parsed as git parses it.
pub fn submodule_paths(gitmodules: &[u8]) -> Result<Vec<(String, String)>, String> {
    let file = gix_config::File::from_bytes_no_includes(
        gitmodules,
        gix_config::file::Metadata::api(),
        gix_config::file::init::Options::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for section in file.sections_by_name("submodule").into_iter().flatten() {
        let name = section.header().subsection_name().map(|s| lossy(s));
        for path in section.values("path") {
            let name = name.clone().unwrap_or_else(|| lossy(&path));
            out.push((name, lossy(&path)));
        }
    }
    Ok(out)
}

/// The gitlink paths (entries of mode 160000) of a git index file's bytes.
pub fn gitlinks(index: &[u8], sha256: bool) -> Result<Vec<String>, String> {
    let kind = if sha256 { gix_index::hash::Kind::Sha256 } else { gix_index::hash::Kind::Sha1 };
    let (state, _) = gix_index::State::from_bytes(
        index,
        filetime::FileTime::now(),
        kind,
        gix_index::decode::Options::default(),
    )
    .map_err(|e| e.to_string())?;
    Ok(state
        .entries()
        .iter()
        .filter(|e| e.mode == gix_index::entry::Mode::COMMIT)
        .map(|e| lossy(e.path(&state)))
        .collect())
}

/// The gitlink paths of the index file at `path` as git reads it: a split index
/// (`core.splitIndex`) with its shared index (`sharedindex.<hash>` next to it), whose entries
/// the index file itself does not hold.
pub fn index_gitlinks(path: &Path, sha256: bool) -> std::io::Result<Vec<String>> {
    // (Opened first so that a missing index is `NotFound`, not a decoding error.)
    std::fs::metadata(path)?;
    let kind = if sha256 { gix_index::hash::Kind::Sha256 } else { gix_index::hash::Kind::Sha1 };
    let file = gix_index::File::at(path, kind, false, gix_index::decode::Options::default())
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    Ok(file
        .entries()
        .iter()
        .filter(|e| e.mode == gix_index::entry::Mode::COMMIT)
        .map(|e| lossy(e.path(&file)))
        .collect())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A relative path of plain components only (what an index entry or a `.gitmodules` path
/// inside the working tree must be).
fn plain_relative(p: &str) -> Option<PathBuf> {
    let path = PathBuf::from(p);
    let ok = !p.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then_some(path)
}

/// `p` with `.` and `..` resolved lexically.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `p` with symlinks of its longest existing ancestor resolved (what the kernel will open).
fn real(p: &Path) -> PathBuf {
    let p = lexical(p);
    let mut rest = Vec::new();
    let mut cur = p.as_path();
    loop {
        if let Ok(r) = cur.canonicalize() {
            let mut r = r;
            r.extend(rest.iter().rev());
            return r;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p,
        }
    }
}

/// A repository as git finds it: its working tree, its git directory and common directory.
#[derive(Debug, Clone)]
struct Repo {
    root: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
}

/// The git directory a `.git` entry at `dot_git` leads to (a directory, or a `gitdir:` file).
fn git_dir_of(dot_git: &Path) -> Option<PathBuf> {
    let meta = std::fs::metadata(dot_git).ok()?;
    if meta.is_dir() {
        return dot_git.join("HEAD").exists().then(|| dot_git.to_path_buf());
    }
    let text = std::fs::read_to_string(dot_git).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let dir = dot_git.parent()?.join(target);
    dir.join("HEAD").exists().then(|| lexical(&dir))
}

fn repo_with_git_dir(root: &Path, git_dir: PathBuf) -> Repo {
    let common_dir = std::fs::read_to_string(git_dir.join("commondir"))
        .ok()
        .map(|c| lexical(&git_dir.join(c.trim())))
        .unwrap_or_else(|| git_dir.clone());
    Repo { root: root.to_path_buf(), git_dir, common_dir }
}

/// Where the walk stands: what is writable, what was found.
struct Walk<'a> {
    writable: &'a [PathBuf],
    git_writable: bool,
    home: Option<&'a Path>,
    /// The user's, system's and environment's config (their values apply to every repository).
    outer: &'a OuterConfig,
    visited: BTreeSet<PathBuf>,
    out: BTreeSet<PathBuf>,
    notes: Vec<String>,
    links: BTreeSet<PathBuf>,
    refuse: Vec<String>,
}

impl Walk<'_> {
    fn inside(&self, p: &Path) -> bool {
        let r = real(p);
        self.writable.iter().any(|w| r.starts_with(w) || p.starts_with(w))
    }

    /// Protects `p`; a missing one by its first missing component, which is what the launcher
    /// turns into a placeholder (two paths with one placeholder must name it once).
    fn protect(&mut self, p: PathBuf) {
        if !self.inside(&p) {
            return;
        }
        let mut p = lexical(&p);
        while std::fs::symlink_metadata(&p).is_err()
            && let Some(parent) = p.parent()
            && std::fs::symlink_metadata(parent).is_err()
        {
            p = parent.to_path_buf();
        }
        if !self.inside(&p) {
            return;
        }
        // Every link between the writable path and `p` (included) could be replaced.
        if let Some(w) = self.writable.iter().find(|w| p.starts_with(w)) {
            let mut q = p.clone();
            while q.starts_with(w) && q != *w {
                if std::fs::symlink_metadata(&q).is_ok_and(|m| m.file_type().is_symlink()) {
                    self.links.insert(q.clone());
                }
                if !q.pop() {
                    break;
                }
            }
        }
        self.out.insert(p);
    }

    /// A word of a config value as a path: `~/` from HOME, relative ones from `base`.
    fn path_of(&self, word: &str, base: &Path) -> Option<PathBuf> {
        if word.contains("://") {
            return None; // a URL
        }
        let p = if let Some(rest) = word.strip_prefix("~/") {
            self.home?.join(rest)
        } else {
            base.join(word)
        };
        Some(lexical(&p))
    }

    /// Protects what the values of the config file `file` name; follows its includes.
    fn config_file(&mut self, file: &Path, root: &Path, depth: usize) {
        self.protect(file.to_path_buf());
        let Ok(text) = std::fs::read(file) else { return };
        let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        self.config_text(&text, &file.display().to_string(), &dir, root, depth);
    }

    /// Protects what the values of config `text` (from `origin`, includes relative to `dir`)
    /// name; follows its includes.
    fn config_text(&mut self, text: &[u8], origin: &str, dir: &Path, root: &Path, depth: usize) {
        let refs = match config_refs(text) {
            Ok(r) => r,
            Err(e) => {
                self.notes.push(format!("{origin}: {e}"));
                return;
            }
        };
        for r in refs {
            match r.kind {
                RefKind::Path => {
                    if let Some(p) = self.path_of(&r.value, root) {
                        self.protect(p);
                    }
                    // `core.fsmonitor` runs through the shell: its first word is the program.
                    if let Some(first) = command_words(&r.value).first()
                        && let Some(p) = self.path_of(first, root)
                    {
                        self.protect(p);
                    }
                }
                RefKind::Include => {
                    let Some(p) = self.path_of(&r.value, dir) else { continue };
                    if depth < MAX_DEPTH {
                        self.config_file(&p, root, depth + 1);
                    }
                }
                RefKind::Command => self.command(&r.value, root),
                RefKind::Other => {
                    for word in command_words(&r.value) {
                        let Some(p) = self.path_of(&word, root) else { continue };
                        if !word.contains('/') || r.key == "core.worktree" {
                            continue;
                        }
                        // A file, or a directory strictly below the working tree that holds no
                        // writable path (`init.templateDir`-like: what is in it may run).
                        let protect = std::fs::metadata(&p).is_ok_and(|m| {
                            !m.is_dir()
                                || (real(&p).starts_with(real(root))
                                    && real(&p) != real(root)
                                    && !self.writable.iter().any(|w| w.starts_with(real(&p))))
                        });
                        if protect {
                            self.protect(p);
                        }
                    }
                }
            }
        }
    }

    /// Protects what the shell command `value` (run in the working tree `root`) may run: its
    /// program when named with a `/` (even missing), and every existing file named by a word
    /// with a `/` read from `root` or from the directory of a preceding `cd D`, or named by a
    /// component-wise suffix of such a word (`$(git rev-parse --show-toplevel)/scripts/x.sh`,
    /// `"$GIT_PREFIX"scripts/x.sh`: the part this cannot evaluate is a prefix).
    fn command(&mut self, value: &str, root: &Path) {
        let words = command_words(value);
        let mut bases = vec![root.to_path_buf()];
        let mut cd = false;
        for (i, word) in words.iter().enumerate() {
            if cd {
                if let Some(d) = self.path_of(word, root) {
                    bases.push(d);
                }
                if let Some(d) = self.path_of(word, bases.last().unwrap_or(&root.to_path_buf())) {
                    bases.push(d);
                }
            }
            cd = word == "cd" || word == "pushd";
            if !word.contains('/') && bases.len() == 1 {
                continue;
            }
            let Some(p) = self.path_of(word, root) else { continue };
            if i == 0 && word.contains('/') {
                self.protect(p);
            }
            let mut tails = vec![word.clone()];
            let parts: Vec<&str> = word.split('/').collect();
            for k in 0..parts.len() {
                // The first component of a tail after what the shell would expand.
                let first = parts[k].rsplit(['"', '\'', '}', '$', ')']).next().unwrap_or("");
                let rest = parts[k + 1..].join("/");
                let tail =
                    if rest.is_empty() { first.to_owned() } else { format!("{first}/{rest}") };
                if !tail.is_empty() && !tail.starts_with('/') {
                    tails.push(tail);
                }
            }
            for tail in tails {
                if tail != *word && !word.contains('/') {
                    continue;
                }
                for base in bases.clone() {
                    if let Some(p) = self.path_of(&tail, &base)
                        && std::fs::metadata(&p).is_ok_and(|m| !m.is_dir())
                    {
                        self.protect(p);
                    }
                }
            }
        }
    }

    /// Protects the files of git directory `d` that make code run, when `d` is writable.
    fn git_dir(&mut self, d: &Path) {
        if !self.inside(d) {
            return;
        }
        if !self.git_writable {
            self.protect(d.to_path_buf());
            return;
        }
        self.git_dir_files(d, false);
        // Submodules' and linked worktrees' own git directories, gitlink or not (a stale one
        // comes back with one `git submodule` command).
        let mut todo =
            vec![(d.join("modules"), 0, false), (d.join("worktrees"), MAX_DEPTH - 1, true)];
        while let Some((dir, depth, linked)) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if path.join("HEAD").is_file() {
                    self.git_dir_files(&path, linked);
                    if depth < MAX_DEPTH {
                        todo.push((path.join("modules"), depth + 1, false));
                    }
                } else if depth < MAX_DEPTH {
                    // A submodule named with a slash (`libs/foo`) nests its git directory.
                    todo.push((path, depth + 1, linked));
                }
            }
        }
    }

    /// In a writable git directory `d`: what makes git run code. `hooks` and `config` always (a
    /// missing one a placeholder); `config.worktree` when it exists, the config turns it on, or
    /// `d` is a linked worktree's (`linked`: whether `extensions.worktreeConfig` is on is in the
    /// common directory's config, which may change; an empty placeholder is a valid config);
    /// `commondir` when it exists (an empty placeholder there would break git; creating one is
    /// what `git_writable` cannot stop: see docs/threat-model/git-metadata.md).
    fn git_dir_files(&mut self, d: &Path, linked: bool) {
        self.protect(d.join("hooks"));
        self.protect(d.join("config"));
        let worktree_config =
            std::fs::read(d.join("config")).ok().is_some_and(|t| worktree_config_on(&t));
        if linked || worktree_config || d.join("config.worktree").exists() {
            self.protect(d.join("config.worktree"));
        }
        if std::fs::symlink_metadata(d.join("commondir")).is_ok() {
            self.protect(d.join("commondir"));
        }
    }

    /// Whether anything at or below `p` can matter: it lies in a writable path, or a writable
    /// path lies in it.
    fn relevant(&self, p: &Path) -> bool {
        let r = real(p);
        self.writable
            .iter()
            .any(|w| r.starts_with(w) || w.starts_with(&r) || p.starts_with(w) || w.starts_with(p))
    }

    fn repo(&mut self, repo: &Repo, depth: usize) {
        if !self.visited.insert(real(&repo.git_dir)) {
            return;
        }
        let dot_git = repo.root.join(".git");
        if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| !m.is_dir()) {
            self.protect(dot_git); // a pointer: rewritten, git goes elsewhere
        }
        self.git_dir(&repo.git_dir.clone());
        self.git_dir(&repo.common_dir.clone());
        let mut configs = vec![repo.common_dir.join("config")];
        if repo.git_dir.join("config.worktree").exists() {
            configs.push(repo.git_dir.join("config.worktree"));
        }
        configs.extend(self.outer.files.iter().cloned());
        for c in configs {
            self.config_file(&c, &repo.root, 0);
        }
        if !self.outer.env.is_empty() {
            let env = self.outer.env.clone();
            self.config_text(&env, "GIT_CONFIG_COUNT variables", &repo.root, &repo.root, 0);
        }
        // Gitlinks: the index, then what `.gitmodules` names.
        let sha256 = std::fs::read(repo.common_dir.join("config"))
            .ok()
            .and_then(|t| config_value(&t, "extensions.objectformat"))
            .is_some_and(|v| v.eq_ignore_ascii_case("sha256"));
        let mut links: Vec<(Option<String>, String)> = Vec::new();
        let index = repo.git_dir.join("index");
        match index_gitlinks(&index, sha256) {
            Ok(l) => links.extend(l.into_iter().map(|p| (None, p))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Gitlinks this cannot see (a shared index of a split index missing, a format not
            // known) are submodule checkouts left writable: refuse rather than under-protect.
            Err(e) if self.relevant(&repo.root) => {
                self.refuse.push(format!("{}: {e}", index.display()));
            }
            Err(e) => self.notes.push(format!("{}: {e}", index.display())),
        }
        let mut names = Vec::new();
        if let Ok(bytes) = std::fs::read(repo.root.join(".gitmodules")) {
            match submodule_paths(&bytes) {
                Ok(s) => names = s,
                Err(e) => {
                    self.notes.push(format!("{}: {e}", repo.root.join(".gitmodules").display()))
                }
            }
        }
        links.extend(names.iter().map(|(n, p)| (Some(n.clone()), p.clone())));
        for (name, path) in links {
            let Some(rel) = plain_relative(&path) else { continue };
            let sub = repo.root.join(&rel);
            if !self.relevant(&sub) {
                continue;
            }
            let name = name
                .or_else(|| names.iter().find(|(_, p)| *p == path).map(|(n, _)| n.clone()))
                .unwrap_or_else(|| path.clone());
            self.gitlink(repo, &sub, &name, depth);
        }
    }

    /// A git directory found by its shape below a writable path (a bare repository, a mirror):
    /// protected like a repository's git directory, with its config's values (relative ones
    /// from the git directory, where git runs a bare repository's hooks). It has no work tree,
    /// so no index and no gitlinks.
    fn bare(&mut self, d: &Path) {
        let repo = repo_with_git_dir(d, d.to_path_buf());
        if !self.visited.insert(real(d)) {
            return;
        }
        self.git_dir(d);
        self.git_dir(&repo.common_dir.clone());
        let mut configs = vec![repo.common_dir.join("config")];
        if d.join("config.worktree").exists() {
            configs.push(d.join("config.worktree"));
        }
        configs.extend(self.outer.files.iter().cloned());
        for c in configs {
            self.config_file(&c, d, 0);
        }
        if !self.outer.env.is_empty() {
            let env = self.outer.env.clone();
            self.config_text(&env, "GIT_CONFIG_COUNT variables", d, d, 0);
        }
    }

    /// The checkout of a gitlink at `sub`, submodule `name` of `repo`.
    fn gitlink(&mut self, repo: &Repo, sub: &Path, name: &str, depth: usize) {
        let dot_git = sub.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(m) if m.is_dir() => self.git_dir(&dot_git),
            Ok(_) => self.protect(dot_git.clone()),
            // Uninitialised: no repository may be made there (its config would be the host's
            // next `git status`'s), nor may what is there be replaced by one; a missing
            // directory becomes a placeholder.
            Err(_) if std::fs::symlink_metadata(sub).is_ok() => self.protect(sub.to_path_buf()),
            Err(_) => self.protect(dot_git.clone()),
        }
        let git_dir = git_dir_of(&dot_git).or_else(|| {
            // (git refuses names that leave `modules/`; so does this.)
            let d = repo.common_dir.join("modules").join(plain_relative(name)?);
            d.join("HEAD").exists().then_some(d)
        });
        if let Some(git_dir) = git_dir
            && depth < MAX_DEPTH
        {
            self.repo(&repo_with_git_dir(sub, git_dir), depth + 1);
        }
    }
}

/// The configuration git reads besides a repository's own: the user's and system's files, and
/// `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` variables.
#[derive(Debug, Default, Clone)]
pub struct OuterConfig {
    /// Config files, as git finds them.
    pub files: Vec<PathBuf>,
    /// The variables' settings as config text.
    pub env: Vec<u8>,
    /// Variables of the environment that point git at another repository, index or work tree
    /// (`GIT_DIR`, ...): what they name is not what the walk reads, so a launch refuses.
    pub redirects: Vec<String>,
}

/// Variables that point git elsewhere than discovery from the working directory does.
const REDIRECTS: &[&str] = &["GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"];

/// The `key`/`value` pairs of `GIT_CONFIG_PARAMETERS` (what `git -c` passes to the commands it
/// starts): shell-single-quoted `'key'='value'` (or the older `'key=value'`) separated by
/// spaces. `None` when it does not parse (git refuses it too; so does the launch).
pub fn config_parameters(text: &str) -> Option<Vec<(String, String)>> {
    /// One sq-quoted word at the start of `s` (`'a'\''b'` is `a'b`), and the rest.
    fn word(s: &str) -> Option<(String, &str)> {
        let mut out = String::new();
        let mut rest = s.strip_prefix('\'')?;
        loop {
            let end = rest.find('\'')?;
            out.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            match rest.strip_prefix("\\'") {
                Some(r) => {
                    out.push('\'');
                    rest = r.strip_prefix('\'')?;
                }
                None => return Some((out, rest)),
            }
        }
    }
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, r) = word(rest)?;
        rest = r;
        if let Some(r) = rest.strip_prefix('=') {
            // `'key'=` alone is a key with no value (true for a boolean).
            let (value, r) = if r.starts_with('\'') { word(r)? } else { (String::new(), r) };
            out.push((key, value));
            rest = r;
        } else {
            let (k, v) = key.split_once('=').unwrap_or((key.as_str(), ""));
            out.push((k.to_owned(), v.to_owned()));
        }
        if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
            return None;
        }
        rest = rest.trim_start();
    }
    Some(out)
}

/// The [`OuterConfig`] git run with `env` reads (`HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_GLOBAL`,
/// `GIT_CONFIG_SYSTEM`, `GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_COUNT` ...).
pub fn outer_config(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> OuterConfig {
    let var = |k: &str| env.iter().find(|(n, v)| n == k && !v.is_empty()).map(|(_, v)| v);
    let mut files = Vec::new();
    if let Some(g) = var("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(g));
    } else {
        if let Some(x) = var("XDG_CONFIG_HOME") {
            files.push(PathBuf::from(x).join("git/config"));
        } else if let Some(h) = var("HOME") {
            files.push(PathBuf::from(h).join(".config/git/config"));
        }
        if let Some(h) = var("HOME") {
            files.push(PathBuf::from(h).join(".gitconfig"));
        }
    }
    if var("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(var("GIT_CONFIG_SYSTEM").map_or_else(|| "/etc/gitconfig".into(), PathBuf::from));
    }
    let text = |k: String| var(&k).map(|v| v.to_string_lossy().into_owned());
    let count: usize = text("GIT_CONFIG_COUNT".into()).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut pairs: Vec<(String, String)> = (0..count.min(10_000))
        .filter_map(|n| {
            Some((
                text(format!("GIT_CONFIG_KEY_{n}"))?,
                text(format!("GIT_CONFIG_VALUE_{n}")).unwrap_or_default(),
            ))
        })
        .collect();
    let mut redirects: Vec<String> =
        REDIRECTS.iter().filter(|k| var(k).is_some()).map(|k| (*k).to_owned()).collect();
    if let Some(params) = text("GIT_CONFIG_PARAMETERS".into()) {
        match config_parameters(&params) {
            Some(p) => pairs.extend(p),
            None => redirects.push("GIT_CONFIG_PARAMETERS (not parsed)".to_owned()),
        }
    }
    OuterConfig { files, env: env_config_text(pairs), redirects }
}

/// `key = value` pairs (`section[.subsection].key`, as in `git -c`) as config text.
pub fn env_config_text(pairs: impl IntoIterator<Item = (String, String)>) -> Vec<u8> {
    let quote = |s: &str| {
        let escaped: String = s
            .chars()
            .flat_map(|c| match c {
                '\\' => vec!['\\', '\\'],
                '"' => vec!['\\', '"'],
                '\n' => vec!['\\', 'n'],
                '\t' => vec!['\\', 't'],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    };
    let mut out = String::new();
    for (key, value) in pairs {
        let (Some((section, _)), Some((sub_or_none, name))) =
            (key.split_once('.'), key.rsplit_once('.'))
        else {
            continue;
        };
        let header = if sub_or_none == section {
            format!("[{section}]")
        } else {
            format!("[{section} {}]", quote(&sub_or_none[section.len() + 1..]))
        };
        out.push_str(&format!("{header}\n\t{name} = {}\n", quote(&value)));
    }
    out.into_bytes()
}

/// What of the git repositories at, above and below the `writable` paths stays read-only (see
/// the module doc). `git_writable`: `[filesystem] git_writable` (git directories writable but
/// for what runs code); `home`: for `~/` in config values; `outer`: see [`outer_config`]. It
/// scans the writable trees itself (with the built-in build output left out); a launch that
/// scans them anyway passes what its scan found to [`protect_git_found`].
pub fn protect_git(
    writable: &[PathBuf],
    git_writable: bool,
    home: Option<&Path>,
    outer: &OuterConfig,
) -> GitWall {
    let roots: Vec<PathBuf> = writable.iter().filter(|w| w.is_dir()).map(|w| real(w)).collect();
    let own = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
    let rule = crate::TopLevel {
        writable: own(sandgate_config::writable_dotfiles()),
        skip: own(sandgate_config::names_of(sandgate_config::ToolFileKind::Skip)),
        ..crate::TopLevel::default()
    };
    let scan = crate::tree::scan(&roots, &rule);
    protect_git_found(writable, git_writable, home, outer, &scan.repositories)
}

/// [`protect_git`] with the repositories below the writable paths as the launch's scan found
/// them ([`crate::tree::scan`] of the same paths).
pub fn protect_git_found(
    writable: &[PathBuf],
    git_writable: bool,
    home: Option<&Path>,
    outer: &OuterConfig,
    found: &[Repository],
) -> GitWall {
    let writable: Vec<PathBuf> = writable.iter().filter(|w| w.is_dir()).map(|w| real(w)).collect();
    let mut walk = Walk {
        writable: &writable,
        git_writable,
        home,
        outer,
        visited: BTreeSet::new(),
        out: BTreeSet::new(),
        notes: Vec::new(),
        links: BTreeSet::new(),
        refuse: Vec::new(),
    };
    if !writable.is_empty() && !outer.redirects.is_empty() {
        walk.refuse.push(format!(
            "{} set in the environment: git would read another repository, index or work tree \
             than the one found from the working directory, which is what is protected",
            outer.redirects.join(", ")
        ));
    }
    for w in &writable {
        // The repositories at and above `w`, innermost first (git's discovery order).
        for dir in w.ancestors() {
            let dot_git = dir.join(".git");
            if let Some(git_dir) = git_dir_of(&dot_git) {
                walk.repo(&repo_with_git_dir(dir, git_dir), 0);
            } else if dir == w.as_path() && std::fs::symlink_metadata(&dot_git).is_ok() {
                // Something git cannot use today: it must not become something it can.
                walk.protect(dot_git);
            }
        }
    }
    // Repositories already below a writable path that no gitlink names (a directory of
    // checkouts, a clone made earlier, a bare mirror of fixtures): git run there later, or
    // with one of them as its repository, reads their hooks and config.
    for found in found {
        match found {
            Repository::DotGit(dot_git) => {
                let Some(dir) = dot_git.parent() else { continue };
                match git_dir_of(dot_git) {
                    Some(git_dir) => walk.repo(&repo_with_git_dir(dir, git_dir), 0),
                    // Something git cannot use today: it must not become something it can.
                    None => walk.protect(dot_git.clone()),
                }
            }
            Repository::GitDir(d) => walk.bare(d),
        }
    }
    GitWall {
        read_only: outermost(walk.out),
        notes: walk.notes,
        links: walk.links.into_iter().collect(),
        refuse: walk.refuse,
    }
}

/// `paths` without those below another one: a read-only path covers what is below it, and a
/// missing one below it would get a placeholder written into what should stay untouched.
fn outermost(paths: BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    // Sorted: a parent comes right before the paths below it.
    for p in paths {
        if !out.last().is_some_and(|last| p.starts_with(last)) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod edge_tests;
