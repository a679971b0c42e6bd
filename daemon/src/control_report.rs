//! What `status`, `ls`, `stop`, `pending`, `allow`/`deny`, `rules` and `revoke` print: each
//! asks the daemon through [`control`] and returns a [`Printed`] report.

use std::time::SystemTime;

use sandgate_approvals::{Answer, PendingQuestion};
use sandgate_config::sanitize;
use serde_json::{Value, json};

use crate::control::{self, Stopped};
use crate::protocol::Event;
use crate::report::{Printed, daemon_failure, lines, pretty};

/// Exit status when the daemon is not running (`status`).
pub const EXIT_NOT_RUNNING: u8 = 3;

/// `sandgate status`.
pub fn status() -> anyhow::Result<Printed> {
    let mut v = match control::status() {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Ok(Printed::new(
                "sandgate daemon: not running (launchers start it; `sandgate daemon` runs it in the foreground)\n",
                pretty(&json!({ "running": false })),
            )
            .exit(EXIT_NOT_RUNNING));
        }
        Err(e) => return daemon_failure(e),
    };
    let text = lines(control::status_lines(&v));
    v["running"] = Value::Bool(true);
    Ok(Printed::new(text, pretty(&v)))
}

/// `sandgate ls` (`all`: also sandboxes that ended).
pub fn ls(all: bool) -> anyhow::Result<Printed> {
    let list = match control::list(all) {
        Ok(v) => v,
        Err(e) => return daemon_failure(e),
    };
    let rows = list.as_array().cloned().unwrap_or_default();
    let text = if rows.is_empty() {
        lines([if all { "no sandboxes recorded" } else { "no sandboxes running" }])
    } else {
        lines(control::sandbox_table(&rows))
    };
    Ok(Printed::new(text, pretty(&list)))
}

/// `sandgate stop`.
pub fn stop() -> anyhow::Result<Printed> {
    match control::stop() {
        Ok(Stopped::NotRunning) => Ok(Printed::new(
            "sandgate daemon: not running\n",
            pretty(&json!({ "stopped": false, "running": false })),
        )),
        Ok(Stopped::StillRunning { pid }) => Ok(Printed::default()
            .note(format!(
                "sandgate: the daemon (pid {pid}) was asked to stop but is still running after \
                 10 s; `kill {pid}` ends it"
            ))
            .exit(1)),
        Ok(Stopped::Exited { pid }) => Ok(Printed::new(
            format!(
                "sandgate daemon (pid {pid}) stopped; running sandboxes wait for the next one\n"
            ),
            pretty(&json!({ "stopped": true, "pid": pid })),
        )),
        Err(e) => daemon_failure(e),
    }
}

/// `sandgate pending`.
pub fn pending() -> anyhow::Result<Printed> {
    let v = match control::pending() {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Ok(Printed::new("nothing pending (the daemon is not running)\n", "[]\n"));
        }
        Err(e) => return daemon_failure(e),
    };
    let list: Vec<PendingQuestion> = serde_json::from_value(v.clone())?;
    Ok(Printed::new(pending_text(&list), pretty(&v)))
}

/// The text of `pending` for the questions `list`.
fn pending_text(list: &[PendingQuestion]) -> String {
    let mut out = Vec::new();
    if list.is_empty() {
        out.push("nothing pending".to_owned());
    }
    out.extend(list.iter().map(control::pending_line));
    if let Some(q) = list.first() {
        let host = sanitize(&q.question.host);
        out.push(format!(
            "answer with `sandgate allow {host}` (--once, --for 1h, --always) or `sandgate deny {host}`"
        ));
    }
    lines(out)
}

/// The flags of `allow`/`deny` beyond the target.
#[derive(Debug, Clone, Default)]
pub struct AnswerFlags {
    /// `--once`.
    pub once: bool,
    /// `--for DURATION`.
    pub for_: Option<String>,
    /// `--always`.
    pub always: bool,
    /// `--global`.
    pub global: bool,
    /// `--sandbox ID`.
    pub sandbox: Option<String>,
    /// `--any-port`.
    pub any_port: bool,
}

/// `sandgate allow` (`allow`) and `sandgate deny` for `target`.
pub fn answer(target: &str, flags: AnswerFlags, allow: bool) -> anyhow::Result<Printed> {
    let scope = control::scope(flags.once, flags.for_.as_deref(), flags.always, flags.global)?;
    let answer = if allow { Answer::Allow(scope) } else { Answer::Deny(scope) };
    let t = target.trim();
    let spec = control::answer_target(t, flags.sandbox, flags.any_port)?;
    let v = match control::answer(spec, answer) {
        Ok(v) => v,
        Err(e) => return daemon_failure(e),
    };
    let mut r = Printed::new(lines([control::answer_summary(answer, t, &v)]), pretty(&v));
    for e in v["grant_errors"].as_array().into_iter().flatten() {
        r = r.text_note(format!(
            "sandgate: warning: the grant was not recorded: {}",
            e.as_str().unwrap_or("?")
        ));
    }
    Ok(r)
}

/// `sandgate rules` (`all`: also revoked, expired and used grants).
pub fn rules(all: bool) -> anyhow::Result<Printed> {
    let v = match control::rules(all) {
        Ok(v) => v,
        Err(e) => return daemon_failure(e),
    };
    Ok(Printed::new(rules_text(&v, SystemTime::now()), pretty(&v)))
}

/// The text of `rules` for the daemon's list `v`.
fn rules_text(v: &Value, now: SystemTime) -> String {
    let rows = v.as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    if rows.is_empty() {
        out.push(
            "no grants (answers to questions become grants; config rules: `sandgate tiers`)"
                .to_owned(),
        );
    }
    out.extend(rows.iter().map(|r| control::rule_line(r, now)));
    lines(out)
}

/// `sandgate revoke ID`.
pub fn revoke(id: &str) -> anyhow::Result<Printed> {
    let v = match control::revoke(id) {
        Ok(v) => v,
        Err(e) => return daemon_failure(e),
    };
    let text = format!("revoked {}\n", sanitize(v["line"].as_str().unwrap_or("?")));
    Ok(Printed::new(text, pretty(&v)))
}

/// How `watch` writes its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStyle {
    /// One JSON event per line.
    Json,
    /// Text.
    Plain,
    /// Text in colour, for a terminal in raw mode (lines end in `\r\n`).
    Colour,
}

/// `ev` as `watch` writes it at `now` in `style`, with its line end.
pub fn watch_line(ev: &Event, style: WatchStyle, now: SystemTime) -> String {
    if style == WatchStyle::Json {
        return format!("{}\n", serde_json::to_string(ev).unwrap_or_default());
    }
    let (text, c) = control::event_line(ev, now);
    match style {
        WatchStyle::Colour => format!("\x1b[{c}m{text}\x1b[0m\r\n"),
        WatchStyle::Plain | WatchStyle::Json => format!("{text}\n"),
    }
}

/// A connection of `watch`'s traffic tail, in the `sandgate log` line format (bytes,
/// duration, rule), with its line end; `None` for other events.
pub fn traffic_tail_line(ev: &Event, colour: bool) -> Option<String> {
    let (text, allowed) = crate::traffic_log::traffic_text(ev)?;
    let text = format!("sandgate: traffic {text}");
    Some(if colour {
        let c = if allowed { "36" } else { "31" };
        format!("\x1b[{c}m{text}\x1b[0m\r\n")
    } else {
        format!("{text}\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_grants_says_where_the_rules_are() {
        let t = rules_text(&json!([]), SystemTime::now());
        assert_eq!(
            t,
            "no grants (answers to questions become grants; config rules: `sandgate tiers`)\n"
        );
    }

    #[test]
    fn nothing_pending() {
        assert_eq!(pending_text(&[]), "nothing pending\n");
    }
}
