//! Shell command lines: is the whole line inside sandgate wrappers?
//!
//! Not a shell parser: a conservative tokenizer that accepts a small, safe subset of POSIX shell
//! (bash, zsh, dash agree on it) and refuses everything else. Accepted: words separated by blanks,
//! single and double quotes (no `$`, backquote, backslash or `!` inside double quotes), pipes
//! (`|`) between stages, lists of pipelines joined by `&&` and `;`, and the redirections `2>&1`,
//! `>/dev/null`, `1>/dev/null`, `2>/dev/null`, `</dev/null` as whole words (not `&>/dev/null`:
//! dash reads it as `&` then `>/dev/null`, running the stage in the background and the rest of
//! the line as a new command). Refused anywhere outside single quotes: `&` (other than in `2>&1`
//! and `&&`) `;;` `||` `|&` `<` `>` `(` `)` `$` backquote `\` `#` `!`, and control characters
//! (newline, CR, NUL, ...) even inside quotes. Glob, brace and tilde characters (`* ? [ ] { } ~ ^
//! =` at a word's start) are accepted only after the command word, where whatever they expand to
//! is an argument of the sandboxed command.
//!
//! Every pipeline of the line is a wrapped one, or `cd DIR` with one literal directory (nothing
//! the shell would expand, no option, not `-`), and the line ends with a wrapped one. Each wrapped
//! pipeline is judged in every directory it may run in: after `cd DIR &&`, DIR; after `cd DIR;`,
//! DIR or, if that `cd` failed, the directory before. A `build` stage is approved only where the
//! launcher accepts the directory as a writable root ([`RootRule`]).

use std::path::{Component, Path, PathBuf};

use sandgate_config::{RootRefusal, RootRule};

use crate::fs::{Filesystem, Wrapper};
use crate::paths::normalise;

/// The names that start a sandbox (installed links to the sandgate binary), and their tiers.
pub const WRAPPERS: &[(&str, &str)] =
    &[("sandbox-run", "run"), ("sandbox-net", "net"), ("sandbox-build", "build")];

/// Redirections accepted as whole words: they write nowhere but the null device or stdout, and
/// every POSIX shell reads them the same way (`&>` is bash's; dash splits it at the `&`).
const SAFE_REDIRECTIONS: &[&str] =
    &["2>&1", ">/dev/null", "1>/dev/null", "2>/dev/null", "</dev/null"];

/// One word of a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The word after quote removal.
    pub text: String,
    /// It holds an unquoted character the shell may expand (glob, brace, tilde).
    pub expands: bool,
}

/// One stage of a pipeline: its words and its (safe) redirections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// The words, quotes removed.
    pub words: Vec<Word>,
    /// The accepted redirections, as written.
    pub redirections: Vec<String>,
}

/// How a pipeline follows the one before it on the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// The first pipeline of the line.
    Start,
    /// After `;`: runs whether the one before succeeded or not.
    Always,
    /// After `&&`: runs only when the one before succeeded.
    OnSuccess,
}

/// One pipeline of a command line, and how it follows the one before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    /// `;` or `&&` before it (or the start of the line).
    pub join: Join,
    /// Its stages, in order.
    pub stages: Vec<Stage>,
}

/// Why a command line gets no decision.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandRefusal {
    /// The line uses shell syntax outside the accepted subset.
    #[error("the command line uses shell syntax the hook does not accept: {0}")]
    Syntax(String),
    /// A stage does not start with a sandgate wrapper.
    #[error(
        "{0:?} is not a sandgate wrapper (sandbox-run, sandbox-net, sandbox-build, or sandgate run|net|build)"
    )]
    NotWrapped(String),
    /// A wrapper name that does not resolve to the sandgate binary.
    #[error("{0:?} does not resolve to the sandgate binary (through PATH, or as written)")]
    NotOurs(String),
    /// A wrapper option that would widen the tier (or that the hook does not know).
    #[error("the wrapper option {0:?} could widen the tier: a person must approve it")]
    Widens(String),
    /// A wrapper without a command (it would start an interactive shell).
    #[error("the wrapper has no command to run")]
    NoCommand,
    /// The command word could expand to wrapper options.
    #[error("{0:?} is expanded by the shell before the wrapper sees it")]
    Expands(String),
    /// The wrapper is the sandgate binary, in a place a sandboxed command (or another user) can
    /// change before the shell runs it.
    #[error(
        "{name:?} is the sandgate binary at {}, but {why}: something could replace it before the shell runs it",
        path.display()
    )]
    Exposed {
        /// The command word.
        name: String,
        /// Where it resolved to.
        path: PathBuf,
        /// What makes the place unsafe.
        why: String,
    },
    /// A `cd` the hook does not follow.
    #[error("`cd {arg}`: {why}")]
    Cd {
        /// Its argument as written (after quote removal).
        arg: String,
        /// Why it is not followed.
        why: String,
    },
    /// A `build` stage in a directory that may not be a writable root.
    #[error(
        "`build` would make the directory it starts in writable, and {0}; the launcher refuses \
         that unless `--allow-write` names the directory, which only a person may approve"
    )]
    BuildRoot(RootRefusal),
    /// The line ends with `cd` (or holds nothing but `cd`): nothing of it runs in a sandbox.
    #[error("the line ends with `cd`, not with a command inside a sandbox")]
    EndsWithCd,
}

/// Splits a command line into its pipelines and their stages, refusing anything outside the
/// accepted subset.
pub fn split_line(line: &str) -> Result<Vec<Pipeline>, CommandRefusal> {
    let syntax = |what: &str| CommandRefusal::Syntax(what.to_owned());
    let mut pipelines: Vec<Pipeline> = Vec::new();
    let mut join = Join::Start;
    let mut stages = Vec::new();
    let mut stage = Stage { words: Vec::new(), redirections: Vec::new() };
    let mut word = String::new();
    let mut in_word = false; // a word has started (`''` is an empty word)
    let mut expands = false;
    let mut quoted = false; // the word so far holds a quote (`'2'>&1` is a word, then `>&1`)
    let mut chars = line.chars().peekable();
    let finish = |stage: &mut Stage,
                  word: &mut String,
                  in_word: &mut bool,
                  expands: &mut bool,
                  quoted: &mut bool| {
        if *in_word {
            stage.words.push(Word { text: std::mem::take(word), expands: *expands });
        }
        *in_word = false;
        *expands = false;
        *quoted = false;
    };
    while let Some(c) = chars.next() {
        if c.is_control() && c != '\t' {
            return Err(syntax("a control character (newline, NUL, ...)"));
        }
        match c {
            ' ' | '\t' => finish(&mut stage, &mut word, &mut in_word, &mut expands, &mut quoted),
            '\'' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next() {
                        None => return Err(syntax("an unterminated single quote")),
                        Some('\'') => break,
                        Some(c) if c.is_control() => {
                            return Err(syntax("a control character (newline, NUL, ...)"));
                        }
                        Some(c) => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next() {
                        None => return Err(syntax("an unterminated double quote")),
                        Some('"') => break,
                        Some(c @ ('$' | '`' | '\\' | '!')) => {
                            return Err(CommandRefusal::Syntax(format!(
                                "{c:?} inside double quotes"
                            )));
                        }
                        Some(c) if c.is_control() => {
                            return Err(syntax("a control character (newline, NUL, ...)"));
                        }
                        Some(c) => word.push(c),
                    }
                }
            }
            '|' => {
                if matches!(chars.peek(), Some('|' | '&')) {
                    return Err(syntax("`||` or `|&`"));
                }
                finish(&mut stage, &mut word, &mut in_word, &mut expands, &mut quoted);
                if stage.words.is_empty() {
                    return Err(syntax("an empty pipeline stage"));
                }
                stages.push(std::mem::replace(
                    &mut stage,
                    Stage { words: Vec::new(), redirections: Vec::new() },
                ));
            }
            ';' | '&' if c == ';' || chars.peek() == Some(&'&') => {
                let next = if c == ';' { Join::Always } else { Join::OnSuccess };
                if c == '&' {
                    chars.next();
                }
                if c == ';' && chars.peek() == Some(&';') {
                    return Err(syntax("`;;`"));
                }
                finish(&mut stage, &mut word, &mut in_word, &mut expands, &mut quoted);
                if stage.words.is_empty() {
                    return Err(syntax("an empty command before `;` or `&&`"));
                }
                stages.push(std::mem::replace(
                    &mut stage,
                    Stage { words: Vec::new(), redirections: Vec::new() },
                ));
                pipelines.push(Pipeline { join, stages: std::mem::take(&mut stages) });
                join = next;
            }
            '>' | '<' | '&' => {
                // Only a whole-word redirection from the accepted list: the digits before it
                // (unquoted) and the characters after it up to the next blank.
                let mut token = word.clone();
                if expands || quoted || (in_word && !token.chars().all(|d| d.is_ascii_digit())) {
                    return Err(syntax("a redirection or `&` inside a word"));
                }
                token.push(c);
                while let Some(&n) = chars.peek() {
                    if n == ' ' || n == '\t' {
                        break;
                    }
                    token.push(n);
                    chars.next();
                }
                if !SAFE_REDIRECTIONS.contains(&token.as_str()) {
                    return Err(CommandRefusal::Syntax(format!(
                        "the redirection or operator {token:?} (only {} are accepted)",
                        SAFE_REDIRECTIONS.join(" ")
                    )));
                }
                word.clear();
                in_word = false;
                expands = false;
                quoted = false;
                stage.redirections.push(token);
            }
            '(' | ')' | '$' | '`' | '\\' | '#' | '!' => {
                return Err(CommandRefusal::Syntax(format!("{c:?} outside single quotes")));
            }
            '*' | '?' | '[' | ']' | '{' | '}' | '~' | '^' => {
                in_word = true;
                expands = true;
                word.push(c);
            }
            '=' if !in_word => {
                // zsh expands `=cmd` to a path.
                in_word = true;
                expands = true;
                word.push(c);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    finish(&mut stage, &mut word, &mut in_word, &mut expands, &mut quoted);
    if stage.words.is_empty() {
        return Err(syntax(if !stages.is_empty() {
            "an empty pipeline stage"
        } else if !pipelines.is_empty() {
            "an empty command after `;` or `&&`"
        } else {
            "an empty command"
        }));
    }
    stages.push(stage);
    pipelines.push(Pipeline { join, stages });
    Ok(pipelines)
}

/// Checks that every pipeline of `line` runs inside sandgate wrappers with narrowing options
/// only (or is a `cd` the hook follows), when the agent's shell stands in `cwd`; returns the tier
/// of each stage. A `build` stage must start where `roots` accepts a writable root.
pub fn check_command(
    line: &str,
    cwd: &Path,
    fs: &dyn Filesystem,
    roots: &RootRule,
) -> Result<Vec<String>, CommandRefusal> {
    let list = split_line(line)?;
    if list.last().is_some_and(is_cd) {
        return Err(CommandRefusal::EndsWithCd);
    }
    let start = Cwd { logical: normalise(cwd), real: fs.canonicalize(cwd).ok() };
    let (placed, visited) = place(&list, start, fs)?;
    // A wrapper in or through any directory of the line could be replaced by a `build` stage
    // there before a later stage runs it.
    let mut tiers = Vec::new();
    for (pipeline, cwds) in placed {
        for stage in &pipeline.stages {
            tiers.push(check_stage(stage, fs, &cwds, &visited, roots)?);
        }
    }
    Ok(tiers)
}

/// Whether the built-in tier `tier` makes its working directory writable.
fn writes_cwd(tier: &str) -> bool {
    sandgate_config::builtin_tiers().iter().any(|t| t.name == tier && t.writable_cwd)
}

/// A directory a command of the line may run in: as the shell's `cd` names it (`..` taken away
/// as text, as `cd -L` does) and as the kernel resolves it (`None`: it cannot be resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cwd {
    logical: PathBuf,
    real: Option<PathBuf>,
}

/// The pipelines of a line that are not `cd`, each with every directory it may run in.
type Placed<'a> = Vec<(&'a Pipeline, Vec<Cwd>)>;

/// The pipelines that are not `cd`, each with every directory it may run in, and every
/// directory the line visits (as named and as resolved).
fn place<'a>(
    list: &'a [Pipeline],
    start: Cwd,
    fs: &dyn Filesystem,
) -> Result<(Placed<'a>, Vec<PathBuf>), CommandRefusal> {
    let mut visited: Vec<PathBuf> = Vec::new();
    let mut visit = |c: &Cwd| {
        for p in std::iter::once(&c.logical).chain(&c.real) {
            if !visited.contains(p) {
                visited.push(p.clone());
            }
        }
    };
    visit(&start);
    // Where the next pipeline runs, and where the current `&&` chain may have stopped (a failed
    // pipeline ends it; `;` then starts the next one in any of those places).
    let mut reach = vec![start];
    let mut stopped: Vec<Cwd> = Vec::new();
    let mut placed = Vec::new();
    for pipeline in list {
        if pipeline.join == Join::Always {
            stopped.append(&mut reach);
            reach = dedup(std::mem::take(&mut stopped));
        }
        stopped.extend(reach.iter().cloned());
        match cd_argument(pipeline)? {
            Some(arg) => {
                let moved: Result<Vec<Cwd>, CommandRefusal> =
                    reach.iter().map(|from| follow_cd(fs, from, arg)).collect();
                reach = dedup(moved?);
                reach.iter().for_each(&mut visit);
            }
            None => placed.push((pipeline, reach.clone())),
        }
    }
    Ok((placed, visited))
}

fn dedup(mut v: Vec<Cwd>) -> Vec<Cwd> {
    let mut out: Vec<Cwd> = Vec::with_capacity(v.len());
    for c in v.drain(..) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn is_cd(p: &Pipeline) -> bool {
    p.stages.len() == 1 && p.stages[0].words.first().is_some_and(|w| w.text == "cd" && !w.expands)
}

/// The directory of a `cd DIR` pipeline (`None` for any other pipeline); a `cd` of another shape
/// is refused: options (`-P`, `-L`, `-e`), `-` (the previous directory), zsh's `+N`/`-N` (the
/// directory stack), no argument (the home), two arguments (zsh's substitution), an empty one,
/// or one the shell would expand.
fn cd_argument(p: &Pipeline) -> Result<Option<&str>, CommandRefusal> {
    if !is_cd(p) {
        return Ok(None);
    }
    let words = &p.stages[0].words;
    let refuse = |arg: &str, why: &str| CommandRefusal::Cd { arg: arg.into(), why: why.into() };
    if words.len() == 1 {
        return Err(refuse("", "without a directory it goes to the home directory"));
    }
    let [_, arg] = &words[..] else {
        let args: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
        return Err(refuse(&args.join(" "), "the hook follows `cd` with exactly one directory"));
    };
    if arg.expands {
        return Err(refuse(&arg.text, "the shell would expand it"));
    }
    if arg.text.is_empty() || arg.text.starts_with(['-', '+']) {
        return Err(refuse(&arg.text, "an option, the previous directory, or the directory stack"));
    }
    Ok(Some(&arg.text))
}

/// Where `cd arg` from `from` leads. The shell takes `..` away as text (`cd -L`, the default)
/// and falls back to the kernel's reading; both must lead to the same existing directory. A
/// relative name not starting with `.` may be looked up in `CDPATH` instead: refused when the
/// shell may search it.
fn follow_cd(fs: &dyn Filesystem, from: &Cwd, arg: &str) -> Result<Cwd, CommandRefusal> {
    let refuse = |why: String| CommandRefusal::Cd { arg: arg.into(), why };
    let first = Path::new(arg).components().next();
    let searched = matches!(first, Some(Component::Normal(_)));
    if searched && fs.searches_cdpath() {
        return Err(refuse("CDPATH is set, so the shell may find another directory".into()));
    }
    let logical = normalise(&from.logical.join(arg));
    let physical = match (&from.real, Path::new(arg).is_absolute()) {
        (_, true) => PathBuf::from(arg),
        (Some(real), false) => real.join(arg),
        (None, false) => return Err(refuse("the directory before it cannot be resolved".into())),
    };
    let resolve =
        |p: &Path| fs.canonicalize(p).map_err(|e| refuse(format!("{}: {e}", p.display())));
    let real = resolve(&logical)?;
    if resolve(&physical)? != real {
        return Err(refuse(format!(
            "`..` after a link leads to {} as the shell reads it and elsewhere as the kernel does",
            real.display()
        )));
    }
    match fs.symlink_metadata(&real) {
        Ok(info) if info.is_dir => Ok(Cwd { logical, real: Some(real) }),
        _ => Err(refuse(format!("{} is not a directory", real.display()))),
    }
}

/// The tier of one stage, when it starts with a wrapper of ours with narrowing options only
/// and, for a tier that writes its working directory, every directory it may run in (`cwds`)
/// may be a writable root. `visited`: the directories the line visits (a wrapper in or through
/// one is exposed).
fn check_stage(
    stage: &Stage,
    fs: &dyn Filesystem,
    cwds: &[Cwd],
    visited: &[PathBuf],
    roots: &RootRule,
) -> Result<String, CommandRefusal> {
    let mut words = stage.words.iter();
    let first = words.next().ok_or(CommandRefusal::NoCommand)?;
    if first.expands {
        return Err(CommandRefusal::Expands(first.text.clone()));
    }
    let name = first.text.as_str();
    let (base, path) = if name.contains('/') {
        // An absolute path must be one of our names and the sandgate binary itself; a relative
        // one (`./sandbox-run`) names whatever the agent's directory holds.
        let path = Path::new(name);
        let base = path.file_name().and_then(|b| b.to_str()).unwrap_or("");
        if !path.is_absolute() || !is_our_name(base) {
            return Err(CommandRefusal::NotWrapped(name.into()));
        }
        (base, path.to_owned())
    } else {
        if !is_our_name(name) {
            return Err(CommandRefusal::NotWrapped(name.into()));
        }
        let path = fs.lookup_command(name).ok_or_else(|| CommandRefusal::NotOurs(name.into()))?;
        (name, path)
    };
    let tier = match WRAPPERS.iter().find(|(w, _)| *w == base) {
        Some((_, tier)) => (*tier).to_owned(),
        None => {
            // `sandgate run|net|build ...`
            let sub = words.next().ok_or(CommandRefusal::NoCommand)?;
            if sub.expands || !WRAPPERS.iter().any(|(_, t)| *t == sub.text) {
                return Err(CommandRefusal::NotWrapped(format!("{name} {}", sub.text)));
            }
            sub.text.clone()
        }
    };
    if writes_cwd(&tier) {
        for c in cwds {
            let Some(real) = &c.real else {
                return Err(CommandRefusal::Cd {
                    arg: c.logical.display().to_string(),
                    why: "the directory cannot be resolved".into(),
                });
            };
            if let Some(refusal) = roots.refusal(real) {
                return Err(CommandRefusal::BuildRoot(refusal));
            }
        }
    }
    match fs.wrapper(&path, visited) {
        Wrapper::Ours => {}
        Wrapper::Foreign => return Err(CommandRefusal::NotOurs(name.into())),
        Wrapper::Exposed(why) => {
            return Err(CommandRefusal::Exposed { name: name.into(), path, why });
        }
    }
    // Options before the command: only those that narrow the tier.
    loop {
        let w = words.next().ok_or(CommandRefusal::NoCommand)?;
        if w.expands {
            return Err(CommandRefusal::Expands(w.text.clone()));
        }
        let t = w.text.as_str();
        if !t.starts_with('-') {
            return if t.is_empty() { Err(CommandRefusal::NoCommand) } else { Ok(tier) };
        }
        match t {
            "--" => {
                let cmd = words.next().ok_or(CommandRefusal::NoCommand)?;
                if cmd.expands {
                    return Err(CommandRefusal::Expands(cmd.text.clone()));
                }
                return if cmd.text.is_empty() { Err(CommandRefusal::NoCommand) } else { Ok(tier) };
            }
            "--require-full" | "--report-blocked" | "--net=none" => {}
            "--net" | "--deny" => {
                let v = words.next().ok_or(CommandRefusal::NoCommand)?;
                let ok = match t {
                    "--net" => v.text == "none",
                    _ => !v.text.is_empty() && !v.text.starts_with('-'),
                };
                if v.expands || !ok {
                    return Err(CommandRefusal::Widens(format!("{t} {}", v.text)));
                }
            }
            _ if t.starts_with("--deny=") && t.len() > "--deny=".len() => {}
            _ => return Err(CommandRefusal::Widens(t.into())),
        }
    }
}

fn is_our_name(name: &str) -> bool {
    name == "sandgate" || WRAPPERS.iter().any(|(w, _)| *w == name)
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::fs::FileInfo;

    #[test]
    fn words_and_quotes() {
        let s = split_line(r#"sandbox-run  ls -la 'a b' "c d" ''"#).unwrap();
        assert_eq!(s.len(), 1);
        let texts: Vec<&str> = s[0].stages[0].words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["sandbox-run", "ls", "-la", "a b", "c d", ""]);
        let s = split_line("sandbox-run cargo test 2>&1 | sandbox-run tail -n 5").unwrap();
        assert_eq!(s[0].stages.len(), 2);
        assert_eq!(s[0].stages[0].redirections, ["2>&1"]);
    }

    /// Each row: a line, and its pipelines as (join, stages' first words).
    #[test]
    fn lists_split_at_semicolons_and_double_ampersands() {
        use Join::{Always as Semi, OnSuccess as And, Start};
        type Row = (&'static str, &'static [(Join, &'static [&'static str])]);
        let rows: &[Row] = &[
            ("a; b", &[(Start, &["a"]), (Semi, &["b"])]),
            ("a;b", &[(Start, &["a"]), (Semi, &["b"])]),
            ("cd x && y | z", &[(Start, &["cd"]), (And, &["y", "z"])]),
            ("a&&b;c", &[(Start, &["a"]), (And, &["b"]), (Semi, &["c"])]),
            ("a 2&&b", &[(Start, &["a"]), (And, &["b"])]),
            ("a 2>&1 && b", &[(Start, &["a"]), (And, &["b"])]),
            ("'a;b' \"c&&d\"", &[(Start, &["a;b"])]),
        ];
        for (line, want) in rows {
            let list = split_line(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            let got: Vec<(Join, Vec<&str>)> = list
                .iter()
                .map(|p| (p.join, p.stages.iter().map(|s| s.words[0].text.as_str()).collect()))
                .collect();
            let want: Vec<(Join, Vec<&str>)> = want.iter().map(|(j, w)| (*j, w.to_vec())).collect();
            assert_eq!(got, want, "{line:?}");
        }
    }

    #[test]
    fn refused_syntax() {
        for bad in [
            "a || b",
            "a & b",
            "a &",
            "a &&",
            "&& a",
            "a && && b",
            "a &&& b",
            "a & & b",
            "a ;",
            "; a",
            "a ; ; b",
            "a ;; b",
            "a;;",
            "a 2>&1&&b",
            "a |& b",
            "a > f",
            "a 2>f",
            "a >>/dev/null",
            "$(x)",
            "`x`",
            "a\nb",
            "a\\ b",
            "\"$x\"",
            "a # c",
            "'unterminated",
            "\"open",
            "a '2'>&1",
            "a \"1\">/dev/null",
            "a | ",
            "| a",
            "",
            "   ",
            "a <(b)",
            "a x>&1",
            "!a",
            "a\u{0}b",
            "a\rb",
        ] {
            assert!(split_line(bad).is_err(), "{bad:?}");
        }
    }

    /// The refusal says which construct it refused, so the person reading it can rewrite the
    /// line: an empty part is named by where it is.
    #[test]
    fn syntax_refusals_name_the_construct() {
        for (line, said) in [
            ("a ;; b", "`;;`"),
            ("a;;", "`;;`"),
            ("a || b", "`||` or `|&`"),
            ("a |", "an empty pipeline stage"),
            ("a | ; b", "an empty command before `;` or `&&`"),
            ("| a", "an empty pipeline stage"),
            ("a ;", "an empty command after `;` or `&&`"),
            ("a &&", "an empty command after `;` or `&&`"),
            ("a && b ;", "an empty command after `;` or `&&`"),
            ("; a", "an empty command before `;` or `&&`"),
            ("a ; && b", "an empty command before `;` or `&&`"),
            ("", "an empty command"),
            ("  ", "an empty command"),
        ] {
            assert_eq!(split_line(line), Err(CommandRefusal::Syntax(said.into())), "{line:?}");
        }
    }

    /// A small tree: the home `/home/u` with a project (`sub`, a file, a link `ln` into
    /// `/srv/real/inner` and `tohome` to the home), `/srv`, `/etc`, and our wrappers in
    /// `/opt/bin`, an impostor in `/fake`.
    struct Tree {
        cdpath: bool,
    }

    const DIRS: &[&str] = &[
        "/",
        "/home",
        "/home/u",
        "/home/u/proj",
        "/home/u/proj/sub",
        "/home/u/bin",
        "/srv",
        "/srv/app",
        "/srv/real",
        "/srv/real/inner",
        "/etc",
        "/opt",
        "/opt/bin",
        "/fake",
    ];
    const FILES: &[&str] = &["/home/u/proj/file.txt"];
    const LINKS: &[(&str, &str)] =
        &[("/home/u/proj/ln", "/srv/real/inner"), ("/home/u/proj/tohome", "/home/u")];

    impl Filesystem for Tree {
        fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
            let mut out = PathBuf::from("/");
            for c in p.components() {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
                if let Some((_, to)) = LINKS.iter().find(|(from, _)| out == Path::new(from)) {
                    out = PathBuf::from(to);
                }
            }
            let s = out.to_str().unwrap();
            if DIRS.contains(&s) || FILES.contains(&s) {
                Ok(out)
            } else {
                Err(io::ErrorKind::NotFound.into())
            }
        }
        fn symlink_metadata(&self, p: &Path) -> io::Result<FileInfo> {
            let s = p.to_str().unwrap();
            let is_dir = DIRS.contains(&s);
            if !is_dir && !FILES.contains(&s) {
                return Err(io::ErrorKind::NotFound.into());
            }
            Ok(FileInfo { is_symlink: false, is_dir, nlink: 1 })
        }
        fn lookup_command(&self, name: &str) -> Option<PathBuf> {
            Some(Path::new("/opt/bin").join(name))
        }
        fn wrapper(&self, p: &Path, cwds: &[PathBuf]) -> Wrapper {
            if !p.starts_with("/opt/bin") {
                Wrapper::Foreign
            } else if let Some(c) = cwds.iter().find(|c| p.starts_with(c)) {
                Wrapper::Exposed(format!("it is in {}", c.display()))
            } else {
                Wrapper::Ours
            }
        }
        fn searches_cdpath(&self) -> bool {
            self.cdpath
        }
    }

    /// Each row: the line, the agent's directory, the tiers approved or the refusal's variant,
    /// and why.
    #[test]
    fn cd_and_lists_are_judged_in_every_directory_they_may_run_in() {
        const P: &str = "/home/u/proj";
        const H: &str = "/home/u";
        let ok =
            |t: &'static [&'static str]| -> Result<&'static [&'static str], &'static str> { Ok(t) };
        let no = |v: &'static str| -> Result<&'static [&'static str], &'static str> { Err(v) };
        let rows = [
            ("sandbox-build make", P, ok(&["build"]), "a project"),
            ("sandbox-build make", H, no("BuildRoot"), "issue 31: ~/bin/ls"),
            ("sandgate build -- make", H, no("BuildRoot"), "the same through sandgate"),
            ("sandbox-build make", "/", no("BuildRoot"), "the root"),
            ("sandbox-run ls", H, ok(&["run"]), "run writes nothing"),
            ("sandbox-net curl x", "/srv", ok(&["net"]), "net writes nothing"),
            ("sandbox-net curl x", "/", no("Exposed"), "the wrappers are below the directory"),
            ("cd sub && sandbox-build make", P, ok(&["build"]), "relative to the agent's"),
            ("cd sub&&sandbox-build make", P, ok(&["build"]), "no blanks"),
            ("cd 'sub' && sandbox-build make", P, ok(&["build"]), "quotes removed"),
            ("cd /srv/app && sandbox-build make", H, ok(&["build"]), "judged in DIR"),
            ("cd /srv/app; sandbox-build make", P, ok(&["build"]), "both places fine"),
            ("cd /srv && cd app && sandbox-build m", H, ok(&["build"]), "cd A && cd B"),
            (
                "cd /srv/app && sandbox-build make && sandbox-run ls",
                H,
                ok(&["build", "run"]),
                "each part",
            ),
            ("sandbox-run a; sandbox-net b | sandbox-run c", H, ok(&["run", "net", "run"]), ""),
            ("sandbox-run a && sandbox-run b", P, ok(&["run", "run"]), "&& between wrapped"),
            ("cd /home/u && sandbox-run ls", P, ok(&["run"]), "run in the home"),
            ("cd /home/u && sandbox-build make", P, no("BuildRoot"), "DIR is the home"),
            ("cd .. && sandbox-build make", P, no("BuildRoot"), "`..` is the home"),
            ("cd tohome && sandbox-build make", P, no("BuildRoot"), "a link to the home"),
            ("cd /etc && sandbox-build make", P, no("BuildRoot"), "a system place"),
            ("cd /home/u/bin && sandbox-build m", P, no("BuildRoot"), "~/bin itself"),
            ("cd /srv/app; sandbox-build make", H, no("BuildRoot"), "a failed cd stays home"),
            (
                "cd /srv/app && sandbox-run ls; sandbox-build make",
                H,
                no("BuildRoot"),
                "after `;` the chain may have stopped before the cd",
            ),
            (
                "sandbox-run ls && cd /srv/app; sandbox-build make",
                H,
                no("BuildRoot"),
                "a failed command skips the cd",
            ),
            (
                "sandbox-build make && cd /srv/app && sandbox-build make",
                H,
                no("BuildRoot"),
                "the first part in the home",
            ),
            ("cd sub", P, no("EndsWithCd"), "nothing in a sandbox"),
            ("sandbox-run ls && cd /", P, no("EndsWithCd"), "a trailing cd"),
            ("cd && sandbox-run ls", P, no("Cd"), "cd alone goes home"),
            ("cd -- sub && sandbox-run ls", P, no("Cd"), "an option"),
            ("cd -P sub && sandbox-run ls", P, no("Cd"), "an option"),
            ("cd - && sandbox-run ls", P, no("Cd"), "the previous directory"),
            ("cd +1 && sandbox-run ls", P, no("Cd"), "zsh's directory stack"),
            ("cd -1 && sandbox-run ls", P, no("Cd"), "zsh's directory stack"),
            ("cd sub sub && sandbox-run ls", P, no("Cd"), "zsh's substitution"),
            ("cd '' && sandbox-run ls", P, no("Cd"), "empty"),
            ("cd ~ && sandbox-build make", P, no("Cd"), "tilde expands"),
            ("cd ~/proj && sandbox-build make", P, no("Cd"), "tilde expands"),
            ("cd su* && sandbox-build make", P, no("Cd"), "a glob"),
            ("cd {sub,x} && sandbox-build make", P, no("Cd"), "braces"),
            ("cd $HOME && sandbox-build make", P, no("Syntax"), "a variable"),
            ("cd missing && sandbox-run ls", P, no("Cd"), "no such directory"),
            ("cd file.txt && sandbox-run ls", P, no("Cd"), "not a directory"),
            ("cd ln/.. && sandbox-build make", P, no("Cd"), "`..` after a link: ambiguous"),
            ("cd sub || sandbox-build make", P, no("Syntax"), "runs where cd failed"),
            ("cd sub && rm -rf x", P, no("NotWrapped"), "the rest is not wrapped"),
            ("pushd sub && sandbox-build make", P, no("NotWrapped"), "pushd"),
            ("chdir sub && sandbox-build make", P, no("NotWrapped"), "zsh's chdir"),
            ("builtin cd sub && sandbox-run ls", P, no("NotWrapped"), "builtin"),
            ("cd sub | sandbox-run ls", P, no("NotWrapped"), "cd in a pipeline"),
            ("cd /opt/bin && sandbox-run ls", P, no("Exposed"), "the wrapper's directory"),
            ("cd /opt && /opt/bin/sandbox-run ls", P, no("Exposed"), "below the line's cd"),
            ("/fake/sandbox-run ls", P, no("NotOurs"), "an impostor"),
        ];
        for (line, cwd, want, why) in rows {
            let fs = Tree { cdpath: false };
            let roots = RootRule::new([PathBuf::from(H)]);
            let got = check_command(line, Path::new(cwd), &fs, &roots);
            match (&got, want) {
                (Ok(tiers), Ok(t)) => assert_eq!(tiers, t, "{line:?} in {cwd}: {why}"),
                (Err(e), Err(variant)) => {
                    let shown = format!("{e:?}");
                    assert!(shown.starts_with(variant), "{line:?} in {cwd}: {why}: {shown}");
                }
                _ => panic!("{line:?} in {cwd}: {why}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Each row: a line judged in the project, the tiers approved or the refusal's variant.
    /// Options before the command may only narrow the tier; anything else needs a person.
    #[test]
    fn wrapper_options_narrow_or_are_refused() {
        let rows: &[(&str, Result<&[&str], &str>)] = &[
            ("sandbox-run --require-full ls", Ok(&["run"])),
            ("sandbox-run --report-blocked ls", Ok(&["run"])),
            ("sandbox-net --net=none curl x", Ok(&["net"])),
            ("sandbox-net --net none curl x", Ok(&["net"])),
            ("sandbox-net --net host curl x", Err("Widens")),
            ("sandbox-net --net=host curl x", Err("Widens")),
            ("sandbox-net --net '' curl x", Err("Widens")),
            ("sandbox-net --net no* curl x", Err("Widens")), // expands
            ("sandbox-run --deny x.test ls", Ok(&["run"])),
            ("sandbox-run --deny=x.test ls", Ok(&["run"])),
            ("sandbox-run --deny= ls", Err("Widens")),
            ("sandbox-run --deny '' ls", Err("Widens")),
            ("sandbox-run --deny --allow ls", Err("Widens")),
            ("sandbox-run --deny x* ls", Err("Widens")),
            ("sandbox-run --allow x.test ls", Err("Widens")),
            ("sandbox-run --allow-write /h ls", Err("Widens")),
            ("sandbox-run -x ls", Err("Widens")),
            ("sandbox-run --deny", Err("NoCommand")),
            ("sandbox-net --net", Err("NoCommand")),
            ("sandbox-run --require-full", Err("NoCommand")),
            ("sandbox-run", Err("NoCommand")),
            ("sandbox-run ''", Err("NoCommand")),
            ("sandbox-run -- ls", Ok(&["run"])),
            ("sandbox-run -- --help", Ok(&["run"])), // after `--`, the command's own word
            ("sandbox-run --", Err("NoCommand")),
            ("sandbox-run -- ''", Err("NoCommand")),
            ("sandbox-run -- *", Err("Expands")),
            ("sandbox-run * ls", Err("Expands")),
            ("sandbox-run -* ls", Err("Expands")),
            ("sandbox-run --require-full -- ls", Ok(&["run"])),
        ];
        let fs = Tree { cdpath: false };
        let roots = RootRule::new([PathBuf::from("/home/u")]);
        for (line, want) in rows {
            let got = check_command(line, Path::new("/home/u/proj"), &fs, &roots);
            match (&got, want) {
                (Ok(tiers), Ok(t)) => assert_eq!(tiers, t, "{line:?}"),
                (Err(e), Err(variant)) => {
                    assert!(format!("{e:?}").starts_with(variant), "{line:?}: {e:?}");
                }
                _ => panic!("{line:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Only sandgate's names start a sandbox: a command whose later words look like a tier is
    /// still not wrapped, whatever `PATH` holds; `sandgate` needs one of the tiers after it.
    #[test]
    fn only_our_names_start_a_sandbox() {
        let rows: &[(&str, Result<&[&str], &str>)] = &[
            ("sandgate run ls", Ok(&["run"])),
            ("sandgate net curl x", Ok(&["net"])),
            ("sandgate build make", Ok(&["build"])),
            ("/opt/bin/sandgate run ls", Ok(&["run"])),
            ("/opt/bin/sandbox-net curl x", Ok(&["net"])),
            ("sandgate", Err("NoCommand")),
            ("sandgate exec ls", Err("NotWrapped")),
            ("sandgate ru* ls", Err("NotWrapped")),
            ("sandgate sandbox-run ls", Err("NotWrapped")),
            ("ls run x", Err("NotWrapped")),
            ("sandgatex run ls", Err("NotWrapped")),
            ("sandbox-runner ls", Err("NotWrapped")),
            ("/opt/bin/ls run x", Err("NotWrapped")),
            ("./sandbox-run ls", Err("NotWrapped")), // relative: whatever the directory holds
            ("opt/bin/sandbox-run ls", Err("NotWrapped")),
            ("sandbox-ru? ls", Err("Expands")),
            ("=sandbox-run ls", Err("Expands")), // zsh's `=cmd`
        ];
        let fs = Tree { cdpath: false };
        let roots = RootRule::new([PathBuf::from("/home/u")]);
        for (line, want) in rows {
            let got = check_command(line, Path::new("/home/u/proj"), &fs, &roots);
            match (&got, want) {
                (Ok(tiers), Ok(t)) => assert_eq!(tiers, t, "{line:?}"),
                (Err(e), Err(variant)) => {
                    assert!(format!("{e:?}").starts_with(variant), "{line:?}: {e:?}");
                }
                _ => panic!("{line:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// A control character ends a shell word or a command where the hook would not see it:
    /// refused inside single and double quotes as outside; a tab is a blank, outside quotes only.
    #[test]
    fn control_characters_are_refused_even_inside_quotes() {
        for bad in
            ["'a\nb'", "\"a\nb\"", "'a\rb'", "\"a\u{7}b\"", "a\u{1b}b", "'\u{0}'", "\"\u{85}\""]
        {
            let line = format!("sandbox-run echo {bad}");
            assert!(
                matches!(split_line(&line), Err(CommandRefusal::Syntax(_))),
                "{line:?}: {:?}",
                split_line(&line)
            );
        }
        let s = split_line("sandbox-run\techo\ta").unwrap();
        let texts: Vec<&str> = s[0].stages[0].words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["sandbox-run", "echo", "a"]);
        for bad in ["'a\tb'", "\"a\tb\""] {
            assert!(split_line(&format!("sandbox-run {bad}")).is_err(), "a tab inside {bad:?}");
        }
    }

    /// Quotes keep what is inside them from the shell: not an operator, not a glob.
    #[test]
    fn quoted_characters_neither_split_nor_expand() {
        let s = split_line("sandbox-run a '*' \"?\" b* '|' \"&&\" x=y =z").unwrap();
        let words: Vec<(&str, bool)> =
            s[0].stages[0].words.iter().map(|w| (w.text.as_str(), w.expands)).collect();
        assert_eq!(
            words,
            [
                ("sandbox-run", false),
                ("a", false),
                ("*", false),
                ("?", false),
                ("b*", true),
                ("|", false),
                ("&&", false),
                ("x=y", false),
                ("=z", true),
            ]
        );
        for refused in
            ["\"$x\"", "\"`x`\"", "\"a\\b\"", "\"!x\"", "'unterminated", "\"unterminated"]
        {
            assert!(split_line(&format!("sandbox-run {refused}")).is_err(), "{refused}");
        }
        // Redirections are words of their own, only from the safe list.
        let s = split_line("sandbox-run ls 2>&1 >/dev/null </dev/null 1>/dev/null 2>/dev/null")
            .unwrap();
        assert_eq!(
            s[0].stages[0].redirections,
            ["2>&1", ">/dev/null", "</dev/null", "1>/dev/null", "2>/dev/null"]
        );
        assert_eq!(s[0].stages[0].words.len(), 2);
        for refused in
            ["ls 2>&1x", "ls a>/dev/null", "ls b*>/dev/null", "ls 1>/dev/nul", "ls &>/dev/null"]
        {
            assert!(split_line(&format!("sandbox-run {refused}")).is_err(), "{refused}");
        }
    }

    /// With `CDPATH` set, `cd NAME` may go elsewhere; `./NAME`, `..` and absolute paths do not
    /// search it.
    #[test]
    fn cdpath_is_searched_only_for_plain_names() {
        let fs = Tree { cdpath: true };
        let roots = RootRule::new([PathBuf::from("/home/u")]);
        let check = |line: &str| check_command(line, Path::new("/home/u/proj/sub"), &fs, &roots);
        assert!(matches!(check("cd sub && sandbox-run ls"), Err(CommandRefusal::Cd { .. })));
        for line in
            ["cd ./ && sandbox-run ls", "cd .. && sandbox-build m", "cd /srv && sandbox-run ls"]
        {
            assert!(check(line).is_ok(), "{line}: {:?}", check(line));
        }
    }

    /// The refusals a person reads: the home and the fix, an exposed wrapper's place.
    #[test]
    fn refusals_say_where_and_why() {
        let fs = Tree { cdpath: false };
        let roots = RootRule::new([PathBuf::from("/home/u")]);
        let text = |line: &str, cwd: &str| {
            check_command(line, Path::new(cwd), &fs, &roots).unwrap_err().to_string()
        };
        let home = text("sandbox-build make", "/home/u");
        assert!(home.contains("/home/u is your home directory"), "{home}");
        assert!(home.contains("unless `--allow-write` names the directory"), "{home}");
        let exposed = text("cd /opt && sandbox-run ls", "/home/u/proj");
        assert!(exposed.contains("is the sandgate binary at /opt/bin/sandbox-run"), "{exposed}");
        assert!(exposed.contains("it is in /opt"), "{exposed}");
        assert!(!exposed.contains("through PATH"), "{exposed}");
    }
}
