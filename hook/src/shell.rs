//! Shell command lines: is the whole line inside sandgate wrappers?
//!
//! Not a shell parser: a conservative tokenizer that accepts a small, safe subset of POSIX shell
//! (bash, zsh, dash agree on it) and refuses everything else. Accepted: words separated by blanks,
//! single and double quotes (no `$`, backquote, backslash or `!` inside double quotes), pipes
//! (`|`) between stages, and the redirections `2>&1`, `>/dev/null`, `1>/dev/null`,
//! `2>/dev/null`, `</dev/null` as whole words (not `&>/dev/null`: dash reads it as `&` then
//! `>/dev/null`, running the stage in the background and the rest of the line as a new command).
//! Refused anywhere outside single quotes: `;` `&` (other than in `2>&1`) `||` `|&` `<` `>` `(` `)` `$` backquote
//! `\` `#` `!`, and control characters (newline, CR, NUL, ...) even inside quotes. Glob, brace
//! and tilde characters (`* ? [ ] { } ~ ^ =` at a word's start) are accepted only after the
//! command word, where whatever they expand to is an argument of the sandboxed command.

use std::path::Path;

use crate::fs::Filesystem;

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
    #[error("{0:?} does not resolve to the sandgate binary through PATH")]
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
}

/// Splits a command line into pipeline stages, refusing anything outside the accepted subset.
pub fn split_command(line: &str) -> Result<Vec<Stage>, CommandRefusal> {
    let syntax = |what: &str| CommandRefusal::Syntax(what.to_owned());
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
            ';' | '(' | ')' | '$' | '`' | '\\' | '#' | '!' => {
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
        return Err(syntax(if stages.is_empty() {
            "an empty command"
        } else {
            "an empty pipeline stage"
        }));
    }
    stages.push(stage);
    Ok(stages)
}

/// Checks that every stage of `line` runs inside a sandgate wrapper with narrowing options only,
/// and returns the tier of each stage.
pub fn check_command(line: &str, fs: &dyn Filesystem) -> Result<Vec<String>, CommandRefusal> {
    split_command(line)?.iter().map(|s| check_stage(s, fs)).collect()
}

fn check_stage(stage: &Stage, fs: &dyn Filesystem) -> Result<String, CommandRefusal> {
    let mut words = stage.words.iter();
    let first = words.next().ok_or(CommandRefusal::NoCommand)?;
    if first.expands {
        return Err(CommandRefusal::Expands(first.text.clone()));
    }
    let name = first.text.as_str();
    let base = if name.contains('/') {
        // An absolute path must be one of our names and the sandgate binary itself; a relative
        // one (`./sandbox-run`) names whatever the agent's directory holds.
        let path = Path::new(name);
        let base = path.file_name().and_then(|b| b.to_str()).unwrap_or("");
        if !path.is_absolute() || !is_our_name(base) {
            return Err(CommandRefusal::NotWrapped(name.into()));
        }
        if !fs.is_sandgate(path) {
            return Err(CommandRefusal::NotOurs(name.into()));
        }
        base
    } else {
        if !is_our_name(name) {
            return Err(CommandRefusal::NotWrapped(name.into()));
        }
        match fs.lookup_command(name) {
            Some(p) if fs.is_sandgate(&p) => {}
            _ => return Err(CommandRefusal::NotOurs(name.into())),
        }
        name
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
    use super::*;

    #[test]
    fn words_and_quotes() {
        let s = split_command(r#"sandbox-run  ls -la 'a b' "c d" ''"#).unwrap();
        assert_eq!(s.len(), 1);
        let texts: Vec<&str> = s[0].words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["sandbox-run", "ls", "-la", "a b", "c d", ""]);
        let s = split_command("sandbox-run cargo test 2>&1 | sandbox-run tail -n 5").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].redirections, ["2>&1"]);
    }

    #[test]
    fn refused_syntax() {
        for bad in [
            "a; b",
            "a && b",
            "a || b",
            "a & b",
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
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
    }
}
