//! The process in a sandbox that opened a connection, as questions, events and the log name it:
//! "`cargo` (pid 412) wants index.crates.io:443".
//!
//! One type for the proxy (which carries it through a connection's stages), the daemon (which
//! finds it, see its `attribution` module) and the approval channels (which show it). Only the
//! text rules live here; finding the process is I/O and is the daemon's.
//!
//! What the fields are worth: `exe` is what the kernel says the process runs (`/proc/PID/exe`),
//! which the process cannot change short of running another file; `command` is its argv, which it
//! writes itself and may fake at will (`exec -a cargo`, overwriting its argv). `pid` is its pid in
//! the sandbox's own pid namespace, as the sandbox sees it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Most characters of a [`ProcessInfo::command`], the ellipsis included.
pub const MAX_COMMAND_CHARS: usize = 120;

/// The process that opened a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its pid in the sandbox's pid namespace (the last field of `NSpid` in `/proc/PID/status`).
    pub pid: u32,
    /// The executable the kernel reports (`/proc/PID/exe`), lossily as UTF-8; empty when it could
    /// not be read.
    pub exe: String,
    /// Its argv joined with spaces, shortened and escaped by [`command_line`]. Written by the
    /// process itself: it can fake it.
    pub command: String,
}

impl ProcessInfo {
    /// The short name a person reads first: the executable's file name, or the command's first
    /// word when the executable is unknown.
    pub fn name(&self) -> &str {
        let from_exe = self.exe.rsplit('/').next().filter(|n| !n.is_empty());
        // The kernel adds " (deleted)" to the link of a file removed while it runs.
        let from_exe = from_exe.map(|n| n.strip_suffix(" (deleted)").unwrap_or(n));
        from_exe.or_else(|| self.command.split(' ').next().filter(|w| !w.is_empty())).unwrap_or("?")
    }
}

/// Most characters of the name [`ProcessInfo`]'s `Display` shows.
const MAX_NAME_CHARS: usize = 32;

/// "`cargo` (pid 412)": the form every channel uses. The name is a file name the sandbox may
/// choose (a copy of an interpreter named like a host): shown sanitised, at most 32
/// characters, with no backquote of its own, so it cannot close its quotes and pose as the
/// destination or the answer keys that follow it.
impl fmt::Display for ProcessInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = crate::sanitize(self.name()).replace('`', "'");
        let mut shown: String = name.chars().take(MAX_NAME_CHARS).collect();
        if name.chars().nth(MAX_NAME_CHARS).is_some() {
            shown.pop();
            shown.push('…');
        }
        write!(f, "`{shown}` (pid {})", self.pid)
    }
}

/// A command line from a raw `/proc/PID/cmdline` (arguments ended by NUL bytes): the arguments
/// joined with spaces, every control character escaped (`\n`, `\t`, `\xNN`, `\u{NNNN}` for the
/// characters [`is_unsafe_char`](crate::is_unsafe_char) finds), bytes that are not UTF-8
/// replaced, and at most [`MAX_COMMAND_CHARS`] characters (the last one `…` when cut).
pub fn command_line(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len().min(MAX_COMMAND_CHARS * 2));
    let mut chars = 0usize;
    for c in text.chars() {
        let piece = match c {
            '\0' => " ".to_owned(),
            '\n' => "\\n".to_owned(),
            '\t' => "\\t".to_owned(),
            '\r' => "\\r".to_owned(),
            c if (c as u32) < 0x100 && crate::is_unsafe_char(c) => format!("\\x{:02x}", c as u32),
            c if crate::is_unsafe_char(c) => format!("\\u{{{:04x}}}", c as u32),
            c => c.to_string(),
        };
        let n = piece.chars().count();
        if chars + n > MAX_COMMAND_CHARS - 1 {
            out.push('…');
            return out;
        }
        chars += n;
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_are_joined_escaped_and_shortened() {
        let long = format!("python3 -c {}\0", "x".repeat(200));
        let rows: &[(&[u8], &str)] = &[
            (b"curl\0-s\0https://example.org/\0", "curl -s https://example.org/"),
            (b"sh\0-c\0echo hi\0", "sh -c echo hi"),
            (b"", ""),
            (b"a\nb\0c\td\0", "a\\nb c\\td"),
            (b"\x1b[2Jevil\0", "\\x1b[2Jevil"),
            ("x\u{202e}y\0".as_bytes(), "x\\u{202e}y"),
            (b"bad\xffutf8\0", "bad\u{fffd}utf8"),
            // A process that rewrote its argv in place leaves no NUL between the words.
            (b"cargo build", "cargo build"),
        ];
        for (raw, want) in rows {
            assert_eq!(command_line(raw), *want, "{raw:?}");
        }
        let cut = command_line(long.as_bytes());
        assert_eq!(cut.chars().count(), MAX_COMMAND_CHARS);
        assert!(cut.starts_with("python3 -c xxx") && cut.ends_with('…'), "{cut}");
        // An escape is never cut in half.
        let escapes = "\x01".repeat(100);
        let cut = command_line(escapes.as_bytes());
        assert!(cut.chars().count() <= MAX_COMMAND_CHARS, "{cut}");
        assert!(cut.trim_end_matches('…').ends_with("\\x01"), "{cut}");
    }

    #[test]
    fn a_process_is_named_by_its_executable() {
        let p = |exe: &str, command: &str| ProcessInfo {
            pid: 412,
            exe: exe.into(),
            command: command.into(),
        };
        let rows = [
            (p("/usr/bin/cargo", "cargo build"), "`cargo` (pid 412)"),
            // The name shown is the executable's, whatever argv says.
            (p("/usr/bin/python3.11", "cargo build"), "`python3.11` (pid 412)"),
            (p("/tmp/x (deleted)", "x"), "`x` (pid 412)"),
            (p("", "make -j4"), "`make` (pid 412)"),
            (p("", ""), "`?` (pid 412)"),
            (p("/tmp/\x1b[2J", ""), "`?[2J` (pid 412)"),
            (p("/tmp/a`b", ""), "`a'b` (pid 412)"),
            (
                p("/tmp/github.com:443 — [o]nce [s]ession [h]our", ""),
                "`github.com:443 — [o]nce [s]essi…` (pid 412)",
            ),
        ];
        for (process, shown) in rows {
            assert_eq!(process.to_string(), shown, "{process:?}");
        }
    }
}
