//! Seatbelt denials (macOS) as blocked events: every deny rule of a sandgate profile carries
//! `(with message "sandgate:<sandbox id>")`, and the kernel's violation report, read from
//!
//! ```text
//! log stream --style compact --predicate 'eventMessage CONTAINS "sandgate:"'
//! ```
//!
//! names the process, the operation and its target, with the message either at the end of the
//! same line or on the line after it. [`SeatbeltLog`] is a pure parser of those lines (fed one
//! line at a time, tested with sample lines); the daemon runs `log stream` and publishes what it
//! returns, as the Linux daemon publishes NFLOG packets.

use serde::Serialize;

/// The predicate for `log stream` that selects sandgate's denials.
pub const LOG_PREDICATE: &str = "eventMessage CONTAINS \"sandgate:\"";

/// The `log stream` arguments (after the program name).
pub const LOG_STREAM_ARGS: &[&str] =
    &["stream", "--style", "compact", "--predicate", LOG_PREDICATE];

/// One refused operation of a sandgate sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeatbeltDenial {
    /// The sandbox id from the rule's message.
    pub sandbox: String,
    /// Name of the process, as the kernel reports it.
    pub process: String,
    /// Its pid.
    pub pid: Option<u32>,
    /// The Seatbelt operation (`network-outbound`, `file-read-data`, `file-ioctl`, ...).
    pub operation: String,
    /// What it was applied to (`93.184.216.34:443`, a path, ...); may be empty.
    pub target: String,
}

impl SeatbeltDenial {
    /// Whether this is a network operation (a blocked connection, as Linux reports them).
    pub fn is_network(&self) -> bool {
        self.operation.starts_with("network-")
    }

    /// For a refused connection to `HOST:PORT` (`[v6]:PORT` too): the host and the port.
    pub fn destination(&self) -> Option<(String, Option<u16>)> {
        if !self.is_network() || self.target.starts_with('/') || self.target.is_empty() {
            return None;
        }
        let t = self.target.as_str();
        if let Some(rest) = t.strip_prefix('[') {
            let (host, port) = rest.split_once(']')?;
            let port = port.strip_prefix(':').and_then(|p| p.parse().ok());
            return Some((host.to_owned(), port));
        }
        match t.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => Some((host.to_owned(), port.parse().ok())),
            _ => Some((t.to_owned(), None)),
        }
    }
}

/// The report of one violation, waiting for its message line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Violation {
    process: String,
    pid: Option<u32>,
    operation: String,
    target: String,
}

/// A line-by-line parser of `log stream` output.
#[derive(Debug, Default)]
pub struct SeatbeltLog {
    pending: Option<Violation>,
}

impl SeatbeltLog {
    /// A parser with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one line; returns the denial it completes, if any. Lines of other sandboxes (no
    /// `sandgate:` message) and anything unparseable are skipped.
    pub fn feed(&mut self, line: &str) -> Option<SeatbeltDenial> {
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(report) = line.find("Sandbox: ").map(|i| &line[i + "Sandbox: ".len()..]) {
            self.pending = None;
            let (violation, tag) = parse_violation(report)?;
            match tag {
                Some(id) => return Some(violation.with(id)),
                None => self.pending = Some(violation),
            }
            return None;
        }
        // The message on a line of its own, right after its report.
        let id = sandbox_tag(line.trim())?;
        self.pending.take().map(|v| v.with(id))
    }
}

impl Violation {
    fn with(self, sandbox: String) -> SeatbeltDenial {
        SeatbeltDenial {
            sandbox,
            process: self.process,
            pid: self.pid,
            operation: self.operation,
            target: self.target,
        }
    }
}

/// `NAME(PID) deny(N) OPERATION TARGET... [sandgate:ID]` → the violation and the id.
fn parse_violation(report: &str) -> Option<(Violation, Option<String>)> {
    let deny = report.find(") deny(")?;
    let who = &report[..=deny];
    let (process, pid) = match who.rfind('(') {
        Some(open) => (who[..open].trim().to_owned(), who[open + 1..deny].parse().ok()),
        None => (who.trim().to_owned(), None),
    };
    let rest = &report[deny + ") deny(".len()..];
    let rest = &rest[rest.find(')')? + 1..];
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    let tag = words.last().and_then(|w| sandbox_tag(w));
    if tag.is_some() {
        words.pop();
    }
    let (operation, target) = words.split_first()?;
    let violation =
        Violation { process, pid, operation: (*operation).to_owned(), target: target.join(" ") };
    Some((violation, tag))
}

/// The sandbox id of a `sandgate:ID` word (ids are `[A-Za-z0-9._-]`, 1-64 long).
fn sandbox_tag(word: &str) -> Option<String> {
    let id = word.strip_prefix("sandgate:")?;
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    ok.then(|| id.to_owned())
}

/// Why `log stream` ended, in words for the daemon's log and `status`, from its stderr and exit
/// code. `log stream` needs an administrator account (`log: Must be admin to run 'stream'
/// command`): a daemon of a standard user gets none of the refusals, while the sandboxes are
/// enforced all the same.
pub fn stream_ended(stderr: &str, code: Option<i32>) -> String {
    let said = stderr.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let lower = said.to_ascii_lowercase();
    let why = if lower.contains("must be admin") || lower.contains("not permitted") {
        "`log stream` needs an administrator account; this user is not one (the sandboxes are \
         enforced all the same; run the daemon as an admin user, or read refusals with `sudo log \
         show --predicate 'eventMessage CONTAINS \"sandgate:\"'`)"
            .to_owned()
    } else if said.is_empty() {
        format!(
            "`log stream` ended (exit {})",
            code.map_or("by a signal".into(), |c| c.to_string())
        )
    } else {
        format!("`log stream` ended: {said}")
    };
    format!("Seatbelt refusals are not reported: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_log_stream_ended_is_said() {
        // (stderr, exit code, words in the reason)
        for (stderr, code, word) in [
            ("log: Must be admin to run 'stream' command\n", Some(64), "administrator account"),
            ("", Some(0), "ended (exit 0)"),
            ("", None, "by a signal"),
            ("\nlog: Could not open local log store\n", Some(1), "Could not open local log store"),
        ] {
            let got = stream_ended(stderr, code);
            assert!(
                got.starts_with("Seatbelt refusals are not reported") && got.contains(word),
                "{got}"
            );
        }
    }

    const PREFIX: &str = "2026-11-25 14:01:02.345 E  kernel[0:2f1a] (Sandbox) ";

    fn feed_all(lines: &[String]) -> Vec<SeatbeltDenial> {
        let mut log = SeatbeltLog::new();
        lines.iter().filter_map(|l| log.feed(l)).collect()
    }

    /// (lines, sandbox, process, pid, operation, target, destination)
    type Row = (
        Vec<String>,
        &'static str,
        &'static str,
        Option<u32>,
        &'static str,
        &'static str,
        Option<(&'static str, u16)>,
    );

    #[test]
    fn sample_lines() {
        let rows: Vec<Row> = vec![
            (
                vec![format!(
                    "{PREFIX}Sandbox: curl(4242) deny(1) network-outbound 93.184.216.34:443 sandgate:sg-1-abc"
                )],
                "sg-1-abc",
                "curl",
                Some(4242),
                "network-outbound",
                "93.184.216.34:443",
                Some(("93.184.216.34", 443)),
            ),
            (
                // the message on the next line (how sandbox-runtime reads it)
                vec![
                    format!(
                        "{PREFIX}Sandbox: python3.12(77) deny(1) network-outbound [2001:db8::1]:8443"
                    ),
                    "sandgate:sg-9".to_owned(),
                ],
                "sg-9",
                "python3.12",
                Some(77),
                "network-outbound",
                "[2001:db8::1]:8443",
                Some(("2001:db8::1", 8443)),
            ),
            (
                // a process name with spaces and parentheses
                vec![format!(
                    "{PREFIX}Sandbox: Code Helper (Plugin)(901) deny(1) file-read-data /Users/u/.ssh/id_ed25519 sandgate:sg-2"
                )],
                "sg-2",
                "Code Helper (Plugin)",
                Some(901),
                "file-read-data",
                "/Users/u/.ssh/id_ed25519",
                None,
            ),
            (
                vec![format!(
                    "{PREFIX}Sandbox: bash(5) deny(1) file-ioctl /dev/ttys003 sandgate:sg-3"
                )],
                "sg-3",
                "bash",
                Some(5),
                "file-ioctl",
                "/dev/ttys003",
                None,
            ),
            (
                vec![format!(
                    "{PREFIX}Sandbox: nc(6) deny(1) network-outbound /private/var/run/mDNSResponder sandgate:sg-4"
                )],
                "sg-4",
                "nc",
                Some(6),
                "network-outbound",
                "/private/var/run/mDNSResponder",
                None,
            ),
        ];
        for (lines, sandbox, process, pid, op, target, dest) in rows {
            let got = feed_all(&lines);
            assert_eq!(got.len(), 1, "{lines:?}");
            let d = &got[0];
            assert_eq!(
                (
                    d.sandbox.as_str(),
                    d.process.as_str(),
                    d.pid,
                    d.operation.as_str(),
                    d.target.as_str()
                ),
                (sandbox, process, pid, op, target),
                "{lines:?}"
            );
            let want = dest.map(|(h, p)| (h.to_owned(), Some(p)));
            assert_eq!(d.destination(), want, "{lines:?}");
        }
    }

    #[test]
    fn other_sandboxes_and_noise_are_skipped() {
        let lines = vec![
            "Filtering the log data using \"eventMessage CONTAINS \\\"sandgate:\\\"\"".to_owned(),
            "Timestamp               Ty Process[PID:TID]".to_owned(),
            // another program's sandbox, then an unrelated line that mentions sandgate:
            format!("{PREFIX}Sandbox: Safari(1) deny(1) file-read-data /x"),
            format!("{PREFIX}Sandbox: zsh(2) deny(1) network-outbound 1.1.1.1:53"),
            format!("{PREFIX}Sandbox: curl(3) deny(1) network-outbound 1.1.1.1:53 sandgate:bad/id"),
            format!("{PREFIX}Sandbox: curl(3) deny(1) sandgate:sg-1"),
            "sandgate:".to_owned(),
        ];
        assert_eq!(feed_all(&lines), []);
        // a message line without a report before it
        assert_eq!(feed_all(&["sandgate:sg-1".to_owned()]), []);
    }
}
