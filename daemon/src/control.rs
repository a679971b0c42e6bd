//! The daemon-talking half of `status`, `ls`, `stop`, `pending`, `allow`, `deny`, `rules`,
//! `revoke` and `watch`: each a function that connects (or starts the daemon), sends one
//! request and returns what the daemon said; and the pure text of a pending question and of a
//! `watch` event line. Printing is the binary's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use sandgate_approvals::{Answer, BrokerEvent, PendingQuestion, Scope};
use sandgate_config::sanitize;
use serde_json::Value;

use crate::Paths;
use crate::UsageError;
use crate::client::{Client, Incoming};
use crate::protocol::{AnswerTargetSpec, Event, LocalChannel, Request};

/// How long a one-shot command waits for the daemon's reply (a wedged daemon must not hang it).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the running daemon; `None` when none runs (no socket, or nobody serves it).
pub fn connect_running() -> anyhow::Result<Option<Client>> {
    match Client::connect(&Paths::discover()) {
        Ok(c) => {
            c.set_read_timeout(Some(REPLY_TIMEOUT))?;
            Ok(Some(c))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).context("cannot connect to the sandgate daemon"),
    }
}

/// A client of the daemon, started when none runs.
pub fn connect_starting() -> anyhow::Result<Client> {
    let c = Client::connect_or_start(&Paths::discover())?;
    c.set_read_timeout(Some(REPLY_TIMEOUT))?;
    Ok(c)
}

/// `status`: the daemon's report; `None` when it is not running.
pub fn status() -> anyhow::Result<Option<Value>> {
    let Some(mut c) = connect_running()? else { return Ok(None) };
    c.request(Request::Status).map(Some)
}

/// `ls`: the sandboxes (running, or with `all` those that ended too), from the daemon, or read
/// from the store when no daemon runs (nothing is served then).
pub fn list(all: bool) -> anyhow::Result<Value> {
    match connect_running()? {
        Some(mut c) => c.request(Request::List { all }),
        None => {
            let path = sandgate_store::Store::default_path()?;
            if !path.exists() {
                return Ok(Value::Array(Vec::new()));
            }
            let store = sandgate_store::Store::open(&path)?;
            Ok(serde_json::to_value(store.list_sandboxes(!all)?)?)
        }
    }
}

/// How `stop` went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// No daemon was running.
    NotRunning,
    /// The daemon with this pid exited.
    Exited {
        /// Its pid, as it said.
        pid: Value,
    },
    /// Asked to stop, it was still running after 10 s.
    StillRunning {
        /// Its pid, as it said.
        pid: Value,
    },
}

/// `stop`: asks the daemon to stop and waits until it is gone (its socket closes when it
/// exits), at most 10 s.
pub fn stop() -> anyhow::Result<Stopped> {
    let Some(mut c) = connect_running()? else { return Ok(Stopped::NotRunning) };
    let v = c.request(Request::Stop)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    let gone = loop {
        match c.next() {
            Ok(Incoming::Closed) => break true,
            Err(e) if crate::client::timed_out(&e) => {}
            Err(_) => break true,
            Ok(_) => {}
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
    };
    let pid = v["pid"].clone();
    Ok(if gone { Stopped::Exited { pid } } else { Stopped::StillRunning { pid } })
}

/// `pending`: the questions waiting for a person (JSON as the daemon sent it); `None` when no
/// daemon runs.
pub fn pending() -> anyhow::Result<Option<Value>> {
    let Some(mut c) = connect_running()? else { return Ok(None) };
    c.request(Request::Pending).map(Some)
}

/// The scope of `allow`/`deny` from its flags (`--once`, `--for`, `--always`, `--global`; none:
/// the session).
pub fn scope(
    once: bool,
    for_: Option<&str>,
    always: bool,
    global: bool,
) -> Result<Scope, UsageError> {
    if once {
        Ok(Scope::Once)
    } else if let Some(d) = for_ {
        let d =
            sandgate_approvals::parse_duration(d).map_err(|e| UsageError(format!("--for: {e}")))?;
        if global {
            return Err(UsageError(
                "--global goes with --always (a --for grant covers the sandbox's project, or \
                 everyone when no sandbox is named)"
                    .into(),
            ));
        }
        Ok(Scope::For(d))
    } else if always {
        Ok(Scope::Always { global })
    } else {
        if global {
            return Err(UsageError("--global goes with --always".into()));
        }
        Ok(Scope::Session)
    }
}

/// What `allow`/`deny` answers: a question id (`q3`) or a host pattern (of one sandbox, of
/// any port).
pub fn answer_target(
    target: &str,
    sandbox: Option<String>,
    any_port: bool,
) -> Result<AnswerTargetSpec, UsageError> {
    let t = target.trim();
    if t.len() > 1 && t.starts_with('q') && t[1..].bytes().all(|b| b.is_ascii_digit()) {
        if any_port {
            return Err(UsageError(
                "--any-port goes with a host (`sandgate allow HOST --any-port`); a question's \
                 answer opens the port it asked"
                    .into(),
            ));
        }
        Ok(AnswerTargetSpec::Question(t.to_owned()))
    } else {
        Ok(AnswerTargetSpec::Host { pattern: t.to_owned(), sandbox, any_port })
    }
}

/// `allow`/`deny`: sends the answer from the command line (the daemon is started when none
/// runs: the answer may become a grant); returns the daemon's reply (`released`, `grants`,
/// `grant_errors`).
pub fn answer(target: AnswerTargetSpec, answer: Answer) -> anyhow::Result<Value> {
    connect_starting()?.request(Request::Answer {
        target,
        answer,
        by: None,
        channel: LocalChannel::Cli,
    })
}

/// `rules`: the grants (with `all`, also revoked, expired and used ones), one JSON object each
/// with its `line`.
pub fn rules(all: bool) -> anyhow::Result<Value> {
    connect_starting()?.request(Request::Rules { all })
}

/// `revoke`: removes the grant `id` (`g12`, `#12` or `12`); returns the daemon's reply (`line`).
pub fn revoke(id: &str) -> anyhow::Result<Value> {
    let id: sandgate_store::GrantId = id.parse().map_err(|_| {
        UsageError(format!("{id:?} is not a grant id (g12, #12 or 12); see `sandgate rules`"))
    })?;
    connect_starting()?.request(Request::Revoke { grant: id })
}

/// A `watch` subscription: the daemon's events, with the questions still open kept up to date
/// (the oldest is the one a key answers).
pub struct Watch {
    client: Client,
    sandbox: Option<String>,
    open: Arc<Mutex<Vec<PendingQuestion>>>,
}

impl Watch {
    /// Subscribes (to one sandbox's events, or everyone's) and reads what is pending now;
    /// starts the daemon when none runs.
    pub fn start(sandbox: Option<String>) -> anyhow::Result<Watch> {
        let mut c = Client::connect_or_start(&Paths::discover())?;
        // Subscribe first: a question asked between the two requests is then seen twice (and
        // kept once), never missed.
        c.request(Request::Subscribe { sandbox: sandbox.clone() })?;
        let mut pending: Vec<PendingQuestion> =
            serde_json::from_value(c.request(Request::Pending)?)?;
        if let Some(only) = &sandbox {
            pending.retain(|q| &q.question.sandbox == only);
        }
        Ok(Watch { client: c, sandbox, open: Arc::new(Mutex::new(pending)) })
    }

    /// The questions open now, oldest first (shared with whoever answers them).
    pub fn open(&self) -> Arc<Mutex<Vec<PendingQuestion>>> {
        self.open.clone()
    }

    /// Which sandbox's events this watch follows (`None`: everyone's).
    pub fn sandbox(&self) -> Option<&str> {
        self.sandbox.as_deref()
    }

    /// The next event; `None` when the daemon stopped. A question already open is not
    /// returned again.
    pub fn next_event(&mut self) -> anyhow::Result<Option<Event>> {
        loop {
            let ev = match self.client.next()? {
                Incoming::Event(ev) => *ev,
                Incoming::Closed => return Ok(None),
            };
            let mut o = self.open.lock().unwrap_or_else(|e| e.into_inner());
            match &ev {
                Event::Asked { question } if o.iter().any(|q| q.id == question.id) => continue,
                Event::Asked { question } => o.push(question.clone()),
                Event::Answered { question, .. }
                | Event::TimedOut { question }
                | Event::Withdrawn { question } => o.retain(|q| q.id != question.id),
                _ => {}
            }
            return Ok(Some(ev));
        }
    }
}

/// Answers question `q` from a key pressed on this terminal (recorded as the terminal
/// channel), on a connection of its own with a short timeout: a wedged daemon must not keep
/// the keys that quit from being read for good.
pub fn answer_from_terminal(
    paths: &Paths,
    q: &PendingQuestion,
    answer: Answer,
) -> anyhow::Result<()> {
    let mut c = Client::connect(paths)?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.request(Request::Answer {
        target: AnswerTargetSpec::Question(q.id.to_string()),
        answer,
        by: None,
        channel: LocalChannel::Terminal,
    })?;
    Ok(())
}

/// The words of a JSON array of strings joined by spaces (a command line).
fn command_text(v: &Value) -> String {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The lines of `status` for the daemon's report `v` (text from sandboxes sanitised).
pub fn status_lines(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let d = &v["daemon"];
    out.push(format!(
        "sandgate daemon: running, pid {}, up {}, {} MiB resident, telegram {}",
        d["pid"],
        sandgate_approvals::format_duration(Duration::from_secs(
            d["uptime_s"].as_u64().unwrap_or(0).max(1)
        )),
        d["rss_kib"].as_u64().unwrap_or(0) / 1024,
        if d["telegram"].as_bool() == Some(true) { "on" } else { "off" },
    ));
    if let Some(e) = d["telegram_error"].as_str() {
        out.push(format!("  telegram bot not running: {}", sanitize(e)));
    }
    if let Some(e) = d["monitor_error"].as_str() {
        out.push(format!("  {}", sanitize(e)));
    }
    out.push(format!("  socket  {}", d["socket"].as_str().unwrap_or("?")));
    out.push(format!("  store   {}", d["store"].as_str().unwrap_or("?")));
    let pool = &v["network_pool"];
    if pool["on"].as_bool() == Some(true) {
        out.push(format!(
            "  networks made ahead: {} proxy and {} loopback ready, {} handed out",
            pool["ready"]["proxy"], pool["ready"]["loopback"], pool["handed_out"]
        ));
    }
    if let Some(e) = pool["error"].as_str() {
        out.push(format!("  networks made ahead: {}", sanitize(e)));
    }
    out.extend(crate::fences::status_lines(&crate::fences::from_value(&v["fences"])));
    let sandboxes = v["sandboxes"].as_array().cloned().unwrap_or_default();
    out.push(format!("sandboxes running: {}", sandboxes.len()));
    for s in &sandboxes {
        let line = format!(
            "  {}  {:<6} {}",
            s["id"].as_str().unwrap_or("?"),
            s["tier"].as_str().unwrap_or("?"),
            command_text(&s["command"])
        );
        out.push(sanitize(&line).into_owned());
    }
    let pending: Vec<PendingQuestion> =
        serde_json::from_value(v["pending"].clone()).unwrap_or_default();
    out.push(format!("pending approvals: {}", pending.len()));
    out.extend(pending.iter().map(|q| format!("  {}", pending_line(q))));
    let counts = &v["counts"];
    out.push(format!(
        "grants live: {} · events kept: {} · proxied connections open: {}",
        counts["grants_live"], counts["events"], v["proxy"]["active_connections"]
    ));
    let b = &v["budgets"];
    let alerts = b["alerts_per_window"]
        .as_u64()
        .map_or(String::new(), |n| format!(", {n} alerts per sandbox per alert window"));
    out.push(format!(
        "budgets: {} new questions per sandbox per {}s{alerts}",
        b["questions_per_window"], b["window_s"]
    ));
    for (id, r) in b["sandboxes"].as_object().into_iter().flatten() {
        out.push(format!(
            "  {id}  questions {} asked, {} denied over budget · alerts {} sent, {} held back",
            r["questions_asked"], r["questions_refused"], r["alerts_sent"], r["alerts_suppressed"]
        ));
    }
    if let Some(e) = v["events"]["last_error"].as_str() {
        out.push(format!("warning: events could not be stored: {}", sanitize(e)));
    }
    let t = &v["telemetry"];
    if let Some(endpoint) = t["endpoint"].as_str() {
        out.push(format!(
            "telemetry: exporting to {} · {} records exported, {} dropped (queue full), {} failed",
            sanitize(endpoint),
            t["exported"],
            t["dropped"],
            t["failed"]
        ));
        if let Some(e) = t["last_error"].as_str() {
            out.push(format!("  last export error: {}", sanitize(e)));
        }
    }
    out
}

/// The table of `ls` for `rows` (newest first; the exit status of those that ended, `-N`:
/// killed by signal N), header first, each row sanitised.
pub fn sandbox_table(rows: &[Value]) -> Vec<String> {
    let mut out = vec![format!(
        "{:<24} {:<6} {:<8} {:>4} {:>7}  {:<30} COMMAND",
        "ID", "TIER", "STATE", "EXIT", "PID", "CWD"
    )];
    for r in rows {
        let state = r["state"].as_str().unwrap_or("?");
        let exit = r["exit_status"].as_i64().map_or_else(|| "-".to_owned(), |c| c.to_string());
        let line = format!(
            "{:<24} {:<6} {:<8} {:>4} {:>7}  {:<30} {}",
            r["id"].as_str().unwrap_or("?"),
            r["sandbox"]["tier"].as_str().or(r["tier"].as_str()).unwrap_or("?"),
            state,
            exit,
            r["sandbox"]["pid"].as_u64().or(r["pid"].as_u64()).unwrap_or(0),
            r["sandbox"]["cwd"].as_str().or(r["cwd"].as_str()).unwrap_or("?"),
            command_text(if r["sandbox"]["command"].is_array() {
                &r["sandbox"]["command"]
            } else {
                &r["command"]
            }),
        );
        out.push(sanitize(&line).into_owned());
    }
    out
}

/// The line `allow`/`deny` prints for the daemon's reply `v`: what was answered, the questions
/// released, the grants made.
pub fn answer_summary(answer: Answer, target: &str, v: &Value) -> String {
    let (verb, scope) = match answer {
        Answer::Allow(s) => ("allowed", s),
        Answer::Deny(s) => ("denied", s),
    };
    let released = v["released"].as_array().map_or(0, Vec::len);
    let grants: Vec<String> = v["grants"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g.as_str().map(|s| format!("#{}", s.trim_start_matches('g'))))
                .collect()
        })
        .unwrap_or_default();
    let mut msg = format!("{verb} {target} {scope}");
    if released > 0 {
        msg.push_str(&format!("; answered {released} waiting question(s)"));
    }
    if !grants.is_empty() && scope != Scope::Once {
        msg.push_str(&format!("; grant {} (`sandgate revoke ID` removes it)", grants.join(", ")));
    }
    msg
}

/// One line of `rules`: the daemon's line for grant `r` (what and how long, `59m left`) and when
/// it was given, relative to `now`; sanitised.
pub fn rule_line(r: &Value, now: SystemTime) -> String {
    let now = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let given = r["created"].as_i64().map_or(String::new(), |ms| {
        let ago = now.as_millis().saturating_sub(u128::try_from(ms).unwrap_or(0));
        let ago = Duration::from_secs((u64::try_from(ago).unwrap_or(u64::MAX) / 1000).max(1));
        format!(", given {} ago", sandgate_approvals::format_duration(ago))
    });
    format!("{}{given}", sanitize(r["line"].as_str().unwrap_or("?")))
}

/// One line of `pending` and `status` for a waiting question, sanitised (the method, path and
/// sandbox name come from the sandbox).
pub fn pending_line(q: &PendingQuestion) -> String {
    let left = q.deadline.duration_since(SystemTime::now()).unwrap_or_default().as_secs();
    let req = match (&q.question.method, &q.question.path) {
        (Some(m), Some(p)) => format!(" {m} {p}"),
        (Some(m), None) => format!(" {m}"),
        _ => String::new(),
    };
    let who = q.question.process.as_ref().map(|p| format!("{p} wants ")).unwrap_or_default();
    let line = format!(
        "{:<4} {}  {who}{}:{}{req}  ({} waiting, denied in {left}s)",
        q.id.to_string(),
        q.question.sandbox,
        q.question.host,
        q.question.port,
        q.waiters
    );
    sanitize(&line).into_owned()
}

/// The text of a `watch` line for `ev` at `now`, sanitised (every line carries text from a
/// sandbox: names, methods, hosts, command lines), and its ANSI colour code.
pub fn event_line(ev: &Event, now: SystemTime) -> (String, &'static str) {
    let (text, c) = match ev {
        Event::Asked { question } => (
            format!(
                "{} {}",
                question.id,
                sandgate_approvals::terminal::format_prompt(question, now)
            ),
            "33",
        ),
        Event::Answered { question, answer, by, pattern } => (
            sandgate_approvals::terminal::format_event(
                &BrokerEvent::Answered {
                    question: question.clone(),
                    answer: *answer,
                    by: by.clone(),
                    pattern: pattern.clone(),
                },
                now,
            ),
            if answer.allows() { "32" } else { "31" },
        ),
        Event::TimedOut { question } => (
            sandgate_approvals::terminal::format_event(
                &BrokerEvent::TimedOut(question.clone()),
                now,
            ),
            "31",
        ),
        Event::Withdrawn { question } => (
            sandgate_approvals::terminal::format_event(
                &BrokerEvent::Withdrawn(question.clone()),
                now,
            ),
            "2",
        ),
        Event::OverBudget { sandbox, refused, limit, window_s } => (
            sandgate_approvals::terminal::format_event(
                &BrokerEvent::OverBudget {
                    sandbox: sandbox.clone(),
                    refused: *refused,
                    limit: *limit,
                    window: Duration::from_secs(*window_s),
                },
                now,
            ),
            "31",
        ),
        Event::Blocked { sandbox, protocol, dst, port, count } => {
            let dest = port.map_or_else(|| dst.clone(), |p| format!("{dst}:{p}"));
            let n = if *count > 1 { format!(" (×{count})") } else { String::new() };
            (format!("sandgate: {sandbox} blocked {protocol} {dest}{n}"), "31")
        }
        Event::EventsCapped { sandbox, decision, not_stored, standing_for, per_minute, burst } => (
            format!(
                "sandgate: {sandbox}: {not_stored} traffic events ({standing_for} {}) were not \
                 stored (over the cap of {burst} at once, then {per_minute} a minute; `sandgate \
                 log` counts them)",
                crate::protocol::capped_what(decision)
            ),
            "31",
        ),
        Event::Request { sandbox, method, host, port, decision, rule, ms, process, .. } => (
            format!(
                "sandgate: {sandbox} {method} {host}:{port} {decision} ({rule}) {ms:.1} ms{}",
                process.as_ref().map(|p| format!(" by {p}")).unwrap_or_default()
            ),
            if decision == "allow" { "2" } else { "31" },
        ),
        Event::SandboxStarted { sandbox, tier, command } => {
            (format!("sandgate: {sandbox} started ({tier}): {}", command.join(" ")), "2")
        }
        Event::SandboxEnded { sandbox, exit_status, lost } => (
            if *lost {
                format!("sandgate: {sandbox} lost (its launcher went away)")
            } else {
                format!(
                    "sandgate: {sandbox} ended (exit {})",
                    exit_status.map_or("?".into(), |c| c.to_string())
                )
            },
            "2",
        ),
        Event::DaemonStopping => ("sandgate: the daemon is stopping".to_owned(), "2"),
        Event::Hook { agent, tool, decision, reason } => (
            format!(
                "sandgate: hook {agent} {} {decision}: {reason}",
                tool.as_deref().unwrap_or("?")
            ),
            if decision == "allow" { "32" } else { "2" },
        ),
    };
    (sanitize(&text).into_owned(), c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_flags_make_a_scope_or_a_usage_error() {
        assert_eq!(scope(true, None, false, false).unwrap(), Scope::Once);
        assert_eq!(scope(false, None, false, false).unwrap(), Scope::Session);
        assert_eq!(scope(false, None, true, true).unwrap(), Scope::Always { global: true });
        assert_eq!(
            scope(false, Some("1h"), false, false).unwrap(),
            Scope::For(Duration::from_secs(3600))
        );
        assert!(scope(false, Some("1h"), false, true).is_err());
        assert!(scope(false, None, false, true).is_err());
        assert!(scope(false, Some("soon"), false, false).is_err());
        assert!(matches!(answer_target("q12", None, false), Ok(AnswerTargetSpec::Question(_))));
        assert!(answer_target("q12", None, true).is_err());
        assert!(matches!(
            answer_target(" example.com ", None, true),
            Ok(AnswerTargetSpec::Host { any_port: true, .. })
        ));
    }

    #[test]
    fn answers_and_rules_read_as_before() {
        let v = serde_json::json!({ "released": [1, 2], "grants": ["g7"] });
        assert_eq!(
            answer_summary(Answer::Allow(Scope::For(Duration::from_secs(3600))), "x.org", &v),
            "allowed x.org for 1h; answered 2 waiting question(s); grant #7 (`sandgate revoke ID` \
             removes it)"
        );
        let once = answer_summary(Answer::Deny(Scope::Once), "q3", &v);
        assert!(
            once.starts_with("denied q3 once; answered 2") && !once.contains("grant"),
            "{once}"
        );
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(7200);
        let r = serde_json::json!({ "line": "#7 allow x.org\u{1b}[2J", "created": 3_600_000 });
        let line = rule_line(&r, now);
        assert!(line.ends_with(", given 1h ago") && !line.contains('\x1b'), "{line}");
        let rows = [serde_json::json!({
            "id": "sg-1", "state": "running", "sandbox": { "tier": "net", "pid": 9, "cwd": "/p",
            "command": ["curl", "x.org"] }
        })];
        let table = sandbox_table(&rows);
        assert!(table[0].starts_with("ID") && table[1].contains("curl x.org"), "{table:?}");
        assert!(table[1].contains("running") && table[1].contains("   -"), "{table:?}");
    }

    #[test]
    fn event_lines_are_sanitised() {
        let ev = Event::Blocked {
            sandbox: "sg-1\x1b[2J".into(),
            protocol: "tcp".into(),
            dst: "203.0.113.7".into(),
            port: Some(22),
            count: 3,
        };
        let (text, colour) = event_line(&ev, SystemTime::now());
        assert_eq!(colour, "31");
        assert!(!text.contains('\x1b'), "{text:?}");
        assert!(text.contains("blocked tcp 203.0.113.7:22 (×3)"), "{text}");
    }
}
