//! What a command prints, as a value: its text for a person, its `--json` document, what it
//! says on stderr in either mode, and its exit status. The binary prints a [`Report`] with one
//! helper; the commands' reports are built here from what the daemon, the store and the
//! configuration say, so that their text is tested without a terminal.

use std::fmt::Write as _;

use serde::Serialize;

use crate::client::DaemonError;

/// A command's result as it prints.
pub trait Report {
    /// Standard output for a person (each line ends in a newline).
    fn text(&self) -> String;
    /// Standard output with `--json`.
    fn json(&self) -> String;
    /// Standard error in the mode chosen (`json`): warnings and refusals.
    fn notes(&self, json: bool) -> String {
        let _ = json;
        String::new()
    }
    /// The exit status.
    fn code(&self) -> u8 {
        0
    }
}

/// A report whose forms are already rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Printed {
    /// Standard output in text mode.
    pub text: String,
    /// Standard output in JSON mode.
    pub json: String,
    /// Standard error in text mode.
    pub text_notes: String,
    /// Standard error in JSON mode.
    pub json_notes: String,
    /// The exit status.
    pub code: u8,
}

impl Printed {
    /// A report with these two forms of standard output, exit status 0.
    pub fn new(text: impl Into<String>, json: impl Into<String>) -> Printed {
        Printed { text: text.into(), json: json.into(), ..Printed::default() }
    }

    /// The same with exit status `code`.
    pub fn exit(mut self, code: u8) -> Printed {
        self.code = code;
        self
    }

    /// The same with `line` added to standard error in both modes.
    pub fn note(mut self, line: impl std::fmt::Display) -> Printed {
        let _ = writeln!(self.text_notes, "{line}");
        let _ = writeln!(self.json_notes, "{line}");
        self
    }

    /// The same with `line` added to standard error in text mode only.
    pub fn text_note(mut self, line: impl std::fmt::Display) -> Printed {
        let _ = writeln!(self.text_notes, "{line}");
        self
    }
}

impl Report for Printed {
    fn text(&self) -> String {
        self.text.clone()
    }
    fn json(&self) -> String {
        self.json.clone()
    }
    fn notes(&self, json: bool) -> String {
        if json { self.json_notes.clone() } else { self.text_notes.clone() }
    }
    fn code(&self) -> u8 {
        self.code
    }
}

/// `lines`, each followed by a newline.
pub fn lines<S: std::fmt::Display>(lines: impl IntoIterator<Item = S>) -> String {
    let mut s = String::new();
    for l in lines {
        let _ = writeln!(s, "{l}");
    }
    s
}

/// `v` as pretty JSON and a newline (the daemon commands' `--json`), its keys sorted (through
/// a `Value`, as these commands have always printed them).
pub fn pretty(v: &impl Serialize) -> String {
    let v = serde_json::to_value(v).unwrap_or_default();
    format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
}

/// `v` as one line of JSON and a newline (the policy commands' `--json`), keys sorted.
pub fn compact(v: &impl Serialize) -> String {
    format!("{}\n", serde_json::to_value(v).unwrap_or_default())
}

/// A refusal of the daemon as a report: its message on stderr (text) or `{ok: false, code,
/// message}` (JSON); exit 1 for "no such thing / already answered", 2 otherwise. Other errors
/// are returned as they are.
pub fn daemon_failure(e: anyhow::Error) -> anyhow::Result<Printed> {
    let Some(d) = e.downcast_ref::<DaemonError>() else { return Err(e) };
    let json = pretty(&serde_json::json!({ "ok": false, "code": d.code, "message": d.message }));
    let code = if matches!(d.code.as_str(), "not_found" | "conflict") { 1 } else { 2 };
    Ok(Printed { json, ..Printed::default() }
        .text_note(format!("sandgate: {}", d.message))
        .exit(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_of_the_daemon_prints_its_message_or_its_json() {
        let e =
            anyhow::Error::new(DaemonError { code: "not_found".into(), message: "no q9".into() });
        let r = daemon_failure(e).unwrap();
        assert_eq!(
            (r.text(), r.notes(false), r.notes(true), r.code()),
            ("".into(), "sandgate: no q9\n".into(), "".into(), 1)
        );
        assert_eq!(
            r.json(),
            "{\n  \"code\": \"not_found\",\n  \"message\": \"no q9\",\n  \"ok\": false\n}\n"
        );
        let e = anyhow::Error::new(DaemonError { code: "store".into(), message: "x".into() });
        assert_eq!(daemon_failure(e).unwrap().code(), 2);
        assert!(daemon_failure(anyhow::anyhow!("other")).is_err());
    }

    #[test]
    fn lines_end_in_newlines() {
        assert_eq!(lines(["a", "b"]), "a\nb\n");
        assert_eq!(lines(Vec::<String>::new()), "");
    }
}
