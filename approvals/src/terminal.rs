//! The terminal channel: one line per question on the launcher's terminal, and the keys a
//! person answers with (in `sandgate watch`, or typed to `sandgate allow`).
//!
//! The prompt goes to `/dev/tty`, never to stdout or stderr, so output the agent reads or pipes
//! is not polluted. Each message is a single line started with `\r` and ended with `\r\n`, so a
//! raw-mode screen gets at most one stray line rather than a staircase.

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;

use crate::broker::{BrokerEvent, PendingQuestion};
use crate::scope::{Answer, Scope, format_duration};

/// The reply keys and what they mean, for help texts.
pub const REPLY_KEYS: &[(char, &str)] = &[
    ('o', "allow once (the waiting requests)"),
    ('s', "allow for this sandbox session"),
    ('h', "allow for 1 hour (this project)"),
    ('a', "allow always (this project)"),
    ('d', "deny for this sandbox session"),
];

/// A reply that is not one of the keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reply {reply:?}: press o (once), s (session), h (1 hour), a (always) or d (deny)")]
pub struct ReplyError {
    /// What was typed.
    pub reply: String,
}

/// Reads a reply key: `o` once, `s` session, `h` one hour, `a` always (project), `d` deny for
/// the session. Case and surrounding blanks are ignored; whole words (`once`, `deny`) work too.
pub fn parse_reply(reply: &str) -> Result<Answer, ReplyError> {
    let r = reply.trim().to_ascii_lowercase();
    let answer = match r.as_str() {
        "o" | "once" => Answer::Allow(Scope::Once),
        "s" | "session" => Answer::Allow(Scope::Session),
        "h" | "hour" => Answer::Allow(Scope::For(Duration::from_secs(3600))),
        "a" | "always" => Answer::Allow(Scope::Always { global: false }),
        "d" | "deny" => Answer::Deny(Scope::Session),
        _ => return Err(ReplyError { reply: reply.to_string() }),
    };
    Ok(answer)
}

/// The one-line prompt for a question, e.g.
/// `sandgate: wants x.example:443 — [o]nce [s]ession [h]our [a]lways [d]eny (58s left; or: sandgate allow x.example:443) — sandbox "sb1", request "GET /", command "curl https://x.example/"`.
///
/// What the person decides on (host and port) and the answer come first; the text a sandbox
/// chooses (its name, the request, the command line) comes last and quoted (`"` and `\`
/// escaped), so it cannot pose as the host or the keys.
pub fn format_prompt(q: &PendingQuestion, now: SystemTime) -> String {
    let left = q.deadline.duration_since(now).unwrap_or_default();
    let left = format_duration(Duration::from_secs(left.as_secs().max(1)));
    let target = sanitize(&format!("{}:{}", q.question.host, q.question.port));
    format!(
        "sandgate: {}wants {target} — [o]nce [s]ession [h]our [a]lways [d]eny ({left} left; or: sandgate allow {target}) — sandbox {:?}{}, command {:?}",
        who(q),
        sanitize(&q.question.sandbox),
        request_line(q),
        sanitize(&shorten(&q.question.command.join(" "), 60)),
    )
}

/// "`cargo` (pid 412) " when the question knows the process that asked.
fn who(q: &PendingQuestion) -> String {
    q.question.process.as_ref().map(|p| format!("{p} ")).unwrap_or_default()
}

/// The line shown when a question ends, e.g.
/// `sandgate: x.example:443 allowed for this session in Telegram by @alice`.
pub fn format_event(ev: &BrokerEvent, now: SystemTime) -> String {
    match ev {
        BrokerEvent::Asked(q) => format_prompt(q, now),
        BrokerEvent::Answered { question, answer, by, pattern } => {
            let q = &question.question;
            let via = if pattern != &q.host {
                format!(" (as {})", sanitize(pattern))
            } else {
                String::new()
            };
            format!(
                "sandgate: {}:{} {answer}{via} {}",
                sanitize(&q.host),
                q.port,
                sanitize(&by.to_string())
            )
        }
        BrokerEvent::TimedOut(q) => format!(
            "sandgate: {}:{} denied: nobody answered in time",
            sanitize(&q.question.host),
            q.question.port
        ),
        BrokerEvent::Withdrawn(q) => format!(
            "sandgate: {}:{} not answered: its sandbox ended",
            sanitize(&q.question.host),
            q.question.port
        ),
        BrokerEvent::OverBudget { sandbox, refused, limit, window } => format!(
            "sandgate: sandbox {} asked more than {limit} questions in {}: and {refused} more \
             were denied without asking",
            sanitize(sandbox),
            crate::format_duration(*window)
        ),
    }
}

fn request_line(q: &PendingQuestion) -> String {
    match (&q.question.method, &q.question.path) {
        (Some(m), Some(p)) => {
            format!(", request {:?}", sanitize(&format!("{m} {}", shorten(p, 60))))
        }
        (Some(m), None) => format!(", request {:?}", sanitize(m)),
        (None, _) => String::new(),
    }
}

/// Text from a sandbox (a request path, a command line) or a chat, as it may be shown: controls,
/// escape sequences, bidi overrides and invisible characters become `?`, and it is cut at
/// [`sandgate_config::MAX_SHOWN`] characters. The one sanitiser is [`sandgate_config::sanitize`];
/// this owned form is for the channels' message builders.
pub fn sanitize(s: &str) -> String {
    sandgate_config::sanitize(s).into_owned()
}

pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Writes the broker's events for one sandbox (or all, with `None`) to a terminal.
pub struct TerminalPrompter<W: Write> {
    out: W,
    sandbox: Option<String>,
}

impl TerminalPrompter<std::fs::File> {
    /// Opens `/dev/tty` (the controlling terminal) for writing; fails when there is none.
    pub fn open_tty(sandbox: Option<String>) -> io::Result<Self> {
        let tty = std::fs::OpenOptions::new().write(true).open("/dev/tty")?;
        Ok(TerminalPrompter { out: tty, sandbox })
    }
}

impl<W: Write> TerminalPrompter<W> {
    /// A prompter writing to `out` (tests, `sandgate watch`).
    pub fn new(out: W, sandbox: Option<String>) -> Self {
        TerminalPrompter { out, sandbox }
    }

    /// Writes the line for `ev` if it concerns this prompter's sandbox; `Ok(false)` if skipped.
    pub fn handle(&mut self, ev: &BrokerEvent) -> io::Result<bool> {
        let sandbox = match ev {
            BrokerEvent::Asked(q) | BrokerEvent::TimedOut(q) | BrokerEvent::Withdrawn(q) => {
                &q.question.sandbox
            }
            BrokerEvent::Answered { question, .. } => &question.question.sandbox,
            BrokerEvent::OverBudget { sandbox, .. } => sandbox,
        };
        if self.sandbox.as_ref().is_some_and(|s| s != sandbox) {
            return Ok(false);
        }
        write!(self.out, "\r{}\r\n", format_event(ev, SystemTime::now()))?;
        self.out.flush()?;
        Ok(true)
    }

    /// Writes events until the broker goes away; a lagging receiver skips what it missed.
    pub async fn run(mut self, mut events: broadcast::Receiver<BrokerEvent>) {
        loop {
            match events.recv().await {
                Ok(ev) => {
                    if let Err(e) = self.handle(&ev) {
                        tracing::debug!(error = %e, "terminal prompt not written");
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::debug!(missed = n, "terminal prompter lagged");
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// The writer back (tests).
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Question, QuestionId};
    use crate::scope::{Channel, Responder};

    fn question() -> PendingQuestion {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        PendingQuestion {
            id: QuestionId(7),
            question: Question {
                sandbox: "sb1".into(),
                host: "x.example".into(),
                port: 443,
                method: Some("GET".into()),
                path: Some("/a\x1b[2Jb".into()),
                command: vec!["curl".into(), "https://x.example/".into()],
                cwd: Some("/p".into()),
                project: None,
                process: None,
            },
            first_asked: t,
            deadline: t + Duration::from_secs(60),
            waiters: 3,
        }
    }

    #[test]
    fn reply_keys() {
        let rows = [
            ("o", Answer::Allow(Scope::Once)),
            (" S\n", Answer::Allow(Scope::Session)),
            ("h", Answer::Allow(Scope::For(Duration::from_secs(3600)))),
            ("a", Answer::Allow(Scope::Always { global: false })),
            ("always", Answer::Allow(Scope::Always { global: false })),
            ("d", Answer::Deny(Scope::Session)),
        ];
        for (k, want) in rows {
            assert_eq!(parse_reply(k), Ok(want), "{k:?}");
        }
        for k in ["", "x", "oo", "yes"] {
            assert_eq!(parse_reply(k), Err(ReplyError { reply: k.into() }));
        }
        assert_eq!(REPLY_KEYS.len(), 5);
    }

    #[test]
    fn prompt_is_one_clean_line() {
        let q = question();
        let line = format_prompt(&q, q.first_asked + Duration::from_secs(2));
        assert_eq!(
            line,
            "sandgate: wants x.example:443 — [o]nce [s]ession [h]our [a]lways [d]eny (58s left; or: \
             sandgate allow x.example:443) — sandbox \"sb1\", request \"GET /a?[2Jb\", \
             command \"curl https://x.example/\""
        );
        assert!(!line.chars().any(char::is_control));
        // A hostile command line cannot pose as the host: it comes after it, in quotes it cannot
        // close.
        let mut hostile = q.clone();
        hostile.question.command =
            vec!["git".into(), "fetch\") wants github.com:443 — [o]nce [s]ession".into()];
        let line = format_prompt(&hostile, q.first_asked + Duration::from_secs(2));
        assert!(line.starts_with("sandgate: wants x.example:443 — [o]nce"), "{line}");
        assert_eq!(line.find("github.com"), line.rfind("github.com"));
        assert!(line.find("github.com") > line.find("command \""), "{line}");
        assert!(line.ends_with("[o]nce [s]ession\""), "{line}");
        assert!(line.contains("fetch\\\")"), "the quote is escaped: {line}");
        // The process that opened the connection comes first, named by its executable.
        let mut cargo = q.clone();
        cargo.question.process = Some(sandgate_config::ProcessInfo {
            pid: 412,
            exe: "/usr/bin/cargo".into(),
            command: "cargo fetch".into(),
        });
        let line = format_prompt(&cargo, q.first_asked + Duration::from_secs(2));
        assert!(
            line.starts_with("sandgate: `cargo` (pid 412) wants x.example:443 — [o]nce"),
            "{line}"
        );
    }

    #[test]
    fn prompter_filters_by_sandbox_and_reports_answers() {
        let q = question();
        let mut p = TerminalPrompter::new(Vec::new(), Some("sb1".into()));
        assert!(p.handle(&BrokerEvent::Asked(q.clone())).unwrap());
        let mut other = q.clone();
        other.question.sandbox = "sb2".into();
        assert!(!p.handle(&BrokerEvent::Asked(other)).unwrap());
        let by = Responder::new(Channel::Telegram, "@alice");
        let ev = BrokerEvent::Answered {
            question: q.clone(),
            answer: Answer::Allow(Scope::Session),
            by,
            pattern: "*.example".into(),
        };
        assert!(p.handle(&ev).unwrap());
        assert!(p.handle(&BrokerEvent::TimedOut(q)).unwrap());
        let text = String::from_utf8(p.into_inner()).unwrap();
        let lines: Vec<_> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        assert_eq!(
            lines[1],
            "\rsandgate: x.example:443 allowed for this session (as *.example) in Telegram by @alice"
        );
        assert_eq!(lines[2], "\rsandgate: x.example:443 denied: nobody answered in time");
    }
}
