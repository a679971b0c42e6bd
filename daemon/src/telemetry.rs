//! The daemon's events as OpenTelemetry log records and counters (issue 35, part 2).
//!
//! Every event the daemon stores (a request decided, a question asked, answered — by whom, how
//! long it waited — timed out or withdrawn, a blocked packet, a sandbox started or ended, a hook's
//! decision, the event cap's reports) becomes one log record; every event the daemon publishes
//! is counted, before the event cap, into the metrics. Records go to the exporter's bounded
//! queue ([`sandgate_telemetry::Telemetry::log`]): nothing here waits.
//!
//! Attributes follow the OpenTelemetry semantic conventions where one exists: `host.name`,
//! `user.name`, `user.id`, `service.*`, `process.command`, `process.command_args`, `process.pid`,
//! `process.exit.code`, `server.address`, `server.port`, `http.request.method`, `url.path`,
//! `network.transport`; the rest are `sandgate.*`. A sandbox's records carry a resource of their
//! own: the host's and the user's attributes plus the sandbox's id, tier, project and command.
//!
//! What is never exported: the values of injected secrets (only how many were injected), the
//! upstream proxy's credentials, the Telegram token, and `[telemetry] headers` (sent to the
//! collector as headers, never in a body). Nothing of these is in an event to begin with;
//! `telemetry_e2e` in the crate's tests greps every exported byte to keep it so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sandgate_telemetry::otlp::Attributes;
use sandgate_telemetry::{
    Counters, ExporterConfig, LogRecord, QuestionOutcome, RequestOutcome, Resource, Severity,
    Telemetry, Value,
};

use crate::protocol::{Event, SandboxInfo};

/// The daemon's exporter and the resources of the sandboxes it has seen.
pub struct Export {
    /// The exporter.
    pub telemetry: Telemetry,
    base: Arc<Resource>,
    sandboxes: Mutex<HashMap<String, Arc<Resource>>>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("telemetry", &self.telemetry).finish_non_exhaustive()
    }
}

/// The resource of every record: the host, the user, the service.
pub fn base_resource() -> Resource {
    let uid = nix::unistd::getuid();
    let mut attributes: Attributes = vec![
        ("service.name", "sandgate".into()),
        ("service.version", env!("CARGO_PKG_VERSION").into()),
        ("user.id", Value::Int(i64::from(uid.as_raw()))),
    ];
    if let Ok(h) = nix::unistd::gethostname() {
        attributes.push(("host.name", h.to_string_lossy().into_owned().into()));
    }
    if let Ok(Some(u)) = nix::unistd::User::from_uid(uid) {
        attributes.push(("user.name", u.name.into()));
    }
    Resource { attributes }
}

/// A sandbox's resource: `base` plus its id, tier, project and command.
pub fn sandbox_resource(base: &Resource, info: &SandboxInfo, project: Option<&str>) -> Resource {
    let mut attributes = base.attributes.clone();
    attributes.push(("sandgate.sandbox.id", info.id.clone().into()));
    attributes.push(("sandgate.tier", info.tier.clone().into()));
    if let Some(p) = project {
        attributes.push(("sandgate.project", p.into()));
    }
    if let Some(first) = info.command.first() {
        attributes.push(("process.command", first.clone().into()));
    }
    attributes.push((
        "process.command_args",
        Value::Array(info.command.iter().map(|a| Value::from(a.clone())).collect()),
    ));
    attributes.push(("process.pid", Value::Int(i64::from(info.pid))));
    attributes.push(("process.working_directory", info.cwd.display().to_string().into()));
    Resource { attributes }
}

impl Export {
    /// Starts exporting with `config` on `runtime`.
    pub fn start(config: ExporterConfig, runtime: &tokio::runtime::Handle) -> Export {
        let base = config.resource.clone();
        Export { telemetry: Telemetry::start(config, runtime), base, sandboxes: Mutex::default() }
    }

    /// A sandbox registered: its records carry its resource from now on.
    pub fn sandbox_started(&self, info: &SandboxInfo, project: Option<&str>) {
        let r = Arc::new(sandbox_resource(&self.base, info, project));
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).insert(info.id.clone(), r);
    }

    /// Counts `event` into the metrics (every event, before the event cap).
    pub fn count(&self, event: &Event) {
        count(self.telemetry.counters(), event, SystemTime::now());
    }

    /// Queues `event`'s log record (for the events the daemon stores).
    pub fn log(&self, event: &Event) {
        let Some((severity, event_name, body, attributes)) = record_of(event, SystemTime::now())
        else {
            return;
        };
        let resource = {
            let mut map = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
            let r = event.sandbox().and_then(|id| map.get(id).cloned());
            if let Event::SandboxEnded { sandbox, .. } = event {
                map.remove(sandbox);
            }
            r
        };
        let resource = resource.unwrap_or_else(|| match event.sandbox() {
            Some(id) => {
                let mut r = (*self.base).clone();
                r.attributes.push(("sandgate.sandbox.id", id.to_owned().into()));
                Arc::new(r)
            }
            None => self.base.clone(),
        });
        self.telemetry.log(LogRecord {
            time: SystemTime::now(),
            severity,
            event_name,
            body,
            attributes,
            resource,
        });
    }
}

/// Counts `event` into `c`; `now` measures how long an answered question waited.
pub fn count(c: &Counters, event: &Event, now: SystemTime) {
    match event {
        Event::Request { decision, count, .. } => {
            if let Some(o) = RequestOutcome::parse(decision) {
                c.requests(o, *count);
            }
        }
        Event::Blocked { count, .. } => c.blocked_packets(*count),
        Event::Asked { .. } => c.question(QuestionOutcome::Asked),
        Event::Answered { question, answer, .. } => {
            c.question(if answer.allows() {
                QuestionOutcome::Allow
            } else {
                QuestionOutcome::Deny
            });
            c.answered_after(now.duration_since(question.first_asked).unwrap_or_default());
        }
        Event::TimedOut { .. } => c.question(QuestionOutcome::TimeOut),
        Event::Withdrawn { .. } => c.question(QuestionOutcome::Withdraw),
        Event::OverBudget { .. }
        | Event::EventsCapped { .. }
        | Event::SandboxStarted { .. }
        | Event::SandboxEnded { .. }
        | Event::DaemonStopping
        | Event::Hook { .. } => {}
    }
}

fn ms(d: Duration) -> Value {
    Value::Int(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A question's attributes: its id, destination, method and path.
fn question_attributes(q: &sandgate_approvals::PendingQuestion) -> Attributes {
    let mut a: Attributes = vec![
        ("sandgate.question.id", q.id.to_string().into()),
        ("server.address", q.question.host.clone().into()),
        ("server.port", Value::Int(i64::from(q.question.port))),
    ];
    if let Some(m) = &q.question.method {
        a.push(("http.request.method", m.clone().into()));
    }
    if let Some(p) = &q.question.path {
        a.push(("url.path", p.clone().into()));
    }
    a
}

/// `event` as a log record: severity, event name, body and attributes; `None` for what is not
/// an event of the log (`DaemonStopping`). `now` measures how long a question waited.
pub fn record_of(
    event: &Event,
    now: SystemTime,
) -> Option<(Severity, &'static str, String, Attributes)> {
    let waited = |q: &sandgate_approvals::PendingQuestion| {
        ms(now.duration_since(q.first_asked).unwrap_or_default())
    };
    Some(match event {
        Event::Request {
            method,
            host,
            port,
            path,
            decision,
            rule,
            bytes_up,
            bytes_down,
            ms: took,
            error,
            count,
            process,
            ..
        } => {
            let mut a: Attributes = vec![
                ("sandgate.decision", decision.clone().into()),
                ("sandgate.rule", rule.clone().into()),
                ("server.address", host.clone().into()),
                ("server.port", Value::Int(i64::from(*port))),
                ("sandgate.bytes_up", (*bytes_up).into()),
                ("sandgate.bytes_down", (*bytes_down).into()),
                ("sandgate.duration_ms", Value::Double(*took)),
                ("sandgate.count", (*count).into()),
            ];
            if !method.is_empty() {
                a.push(("http.request.method", method.clone().into()));
            }
            if let Some(p) = path {
                a.push(("url.path", p.clone().into()));
            }
            if let Some(e) = error {
                a.push(("sandgate.error", e.clone().into()));
            }
            if let Some(p) = process {
                a.push(("sandgate.client.pid", Value::Int(i64::from(p.pid))));
                a.push(("sandgate.client.executable", p.exe.clone().into()));
            }
            let severity = if decision == "allow" { Severity::Info } else { Severity::Warn };
            let body = format!("{decision} {method} {host}:{port}: {rule}");
            (severity, "sandgate.request", body, a)
        }
        Event::Blocked { protocol, dst, port, count, .. } => {
            let mut a: Attributes = vec![
                ("network.transport", protocol.clone().into()),
                ("server.address", dst.clone().into()),
                ("sandgate.count", (*count).into()),
            ];
            if let Some(p) = port {
                a.push(("server.port", Value::Int(i64::from(*p))));
            }
            let to = port.map_or_else(|| dst.clone(), |p| format!("{dst}:{p}"));
            let body = format!("blocked {protocol} to {to} x{count}");
            (Severity::Warn, "sandgate.blocked_packet", body, a)
        }
        Event::Asked { question } => {
            let mut a = question_attributes(question);
            a.push(("sandgate.question.waiters", (question.waiters as u64).into()));
            let q = &question.question;
            let body = format!("asked {} about {}:{}", question.id, q.host, q.port);
            (Severity::Info, "sandgate.question.asked", body, a)
        }
        Event::Answered { question, answer, by, pattern } => {
            let mut a = question_attributes(question);
            a.push(("sandgate.answer", answer.to_string().into()));
            a.push(("sandgate.answer.by", by.who.clone().into()));
            a.push(("sandgate.answer.channel", by.channel.as_str().into()));
            a.push(("sandgate.answer.pattern", pattern.clone().into()));
            a.push(("sandgate.question.wait_ms", waited(question)));
            let severity = if answer.allows() { Severity::Info } else { Severity::Warn };
            let body =
                format!("{} answered {answer} {pattern} via {}", by.who, by.channel.as_str());
            (severity, "sandgate.question.answered", body, a)
        }
        Event::TimedOut { question } => {
            let mut a = question_attributes(question);
            a.push(("sandgate.question.wait_ms", waited(question)));
            let body = format!("nobody answered {} in time: denied", question.id);
            (Severity::Warn, "sandgate.question.timed_out", body, a)
        }
        Event::Withdrawn { question } => {
            let mut a = question_attributes(question);
            a.push(("sandgate.question.wait_ms", waited(question)));
            let body = format!("{} withdrawn: its sandbox ended", question.id);
            (Severity::Info, "sandgate.question.withdrawn", body, a)
        }
        Event::OverBudget { refused, limit, window_s, .. } => {
            let a: Attributes = vec![
                ("sandgate.questions.refused", (*refused).into()),
                ("sandgate.questions.limit", Value::Int(i64::from(*limit))),
                ("sandgate.questions.window_s", (*window_s).into()),
            ];
            let body = format!("{refused} questions over the budget of {limit} per {window_s} s");
            (Severity::Warn, "sandgate.question.over_budget", body, a)
        }
        Event::EventsCapped { decision, not_stored, standing_for, .. } => {
            let a: Attributes = vec![
                ("sandgate.decision", decision.clone().into()),
                ("sandgate.events.not_stored", (*not_stored).into()),
                ("sandgate.count", (*standing_for).into()),
            ];
            let body = format!("{not_stored} {decision} events past the cap, not stored");
            (Severity::Warn, "sandgate.events_capped", body, a)
        }
        Event::SandboxStarted { tier, command, .. } => {
            let a: Attributes = vec![("sandgate.tier", tier.clone().into())];
            let body = format!("started ({tier}): {}", command.join(" "));
            (Severity::Info, "sandgate.sandbox.started", body, a)
        }
        Event::SandboxEnded { exit_status, lost, .. } => {
            let mut a: Attributes = vec![("sandgate.lost", (*lost).into())];
            if let Some(code) = exit_status {
                a.push(("process.exit.code", Value::Int(i64::from(*code))));
            }
            let body = match (exit_status, lost) {
                (_, true) => "ended: its launcher went away".to_owned(),
                (Some(c), false) => format!("ended with status {c}"),
                (None, false) => "ended".to_owned(),
            };
            (Severity::Info, "sandgate.sandbox.ended", body, a)
        }
        Event::Hook { agent, tool, decision, reason } => {
            let mut a: Attributes = vec![
                ("sandgate.hook.agent", agent.clone().into()),
                ("sandgate.decision", decision.clone().into()),
                ("sandgate.hook.reason", reason.clone().into()),
            ];
            if let Some(t) = tool {
                a.push(("sandgate.hook.tool", t.clone().into()));
            }
            let severity = if decision == "deny" { Severity::Warn } else { Severity::Info };
            let body = format!("{agent} hook: {decision} {}", tool.as_deref().unwrap_or("-"));
            (severity, "sandgate.hook.decision", body, a)
        }
        Event::DaemonStopping => return None,
    })
}

#[cfg(test)]
mod tests {
    use sandgate_approvals as approvals;

    use super::*;

    fn question(first_asked: SystemTime) -> approvals::PendingQuestion {
        approvals::PendingQuestion {
            id: approvals::QuestionId(7),
            question: approvals::Question {
                sandbox: "sg-1".into(),
                host: "pypi.org".into(),
                port: 443,
                method: Some("GET".into()),
                path: Some("/simple/".into()),
                command: vec!["pip".into()],
                cwd: None,
                project: None,
                process: None,
            },
            first_asked,
            deadline: first_asked + Duration::from_secs(60),
            waiters: 2,
        }
    }

    fn request(decision: &str, count: u64) -> Event {
        Event::Request {
            sandbox: "sg-1".into(),
            method: "CONNECT".into(),
            host: "example.org".into(),
            port: 443,
            path: None,
            decision: decision.into(),
            rule: "allow: example.org (config.toml:3)".into(),
            bytes_up: 10,
            bytes_down: 20,
            ms: 1.5,
            error: None,
            count,
            samples: Vec::new(),
            process: None,
        }
    }

    fn find<'a>(a: &'a Attributes, key: &str) -> Option<&'a Value> {
        a.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Every kind of event the daemon stores is a record with its event name, a severity and
    /// the attributes the semantic conventions name; `DaemonStopping` is none.
    #[test]
    fn every_event_kind_is_a_record() {
        let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let now = asked + Duration::from_millis(4_250);
        let by = approvals::Responder::new(approvals::Channel::Telegram, "@alice");
        // (event, name, severity, (attribute, value) it must carry)
        let rows: Vec<(Event, &str, Severity, (&str, Value))> = vec![
            (
                request("allow", 1),
                "sandgate.request",
                Severity::Info,
                ("server.port", Value::Int(443)),
            ),
            (
                request("deny", 1),
                "sandgate.request",
                Severity::Warn,
                ("sandgate.decision", "deny".into()),
            ),
            (
                Event::Blocked {
                    sandbox: "sg-1".into(),
                    protocol: "udp".into(),
                    dst: "10.9.9.9".into(),
                    port: Some(53),
                    count: 3,
                },
                "sandgate.blocked_packet",
                Severity::Warn,
                ("network.transport", "udp".into()),
            ),
            (
                Event::Asked { question: question(asked) },
                "sandgate.question.asked",
                Severity::Info,
                ("server.address", "pypi.org".into()),
            ),
            (
                Event::Answered {
                    question: question(asked),
                    answer: approvals::Answer::Allow(approvals::Scope::Session),
                    by: by.clone(),
                    pattern: "pypi.org".into(),
                },
                "sandgate.question.answered",
                Severity::Info,
                ("sandgate.question.wait_ms", Value::Int(4_250)),
            ),
            (
                Event::TimedOut { question: question(asked) },
                "sandgate.question.timed_out",
                Severity::Warn,
                ("url.path", "/simple/".into()),
            ),
            (
                Event::Withdrawn { question: question(asked) },
                "sandgate.question.withdrawn",
                Severity::Info,
                ("sandgate.question.id", "q7".into()),
            ),
            (
                Event::OverBudget { sandbox: "sg-1".into(), refused: 4, limit: 20, window_s: 60 },
                "sandgate.question.over_budget",
                Severity::Warn,
                ("sandgate.questions.refused", Value::Int(4)),
            ),
            (
                Event::EventsCapped {
                    sandbox: "sg-1".into(),
                    decision: "deny".into(),
                    not_stored: 5,
                    standing_for: 9,
                    per_minute: 60,
                    burst: 1000,
                },
                "sandgate.events_capped",
                Severity::Warn,
                ("sandgate.count", Value::Int(9)),
            ),
            (
                Event::SandboxStarted {
                    sandbox: "sg-1".into(),
                    tier: "net".into(),
                    command: vec!["curl".into()],
                },
                "sandgate.sandbox.started",
                Severity::Info,
                ("sandgate.tier", "net".into()),
            ),
            (
                Event::SandboxEnded { sandbox: "sg-1".into(), exit_status: Some(3), lost: false },
                "sandgate.sandbox.ended",
                Severity::Info,
                ("process.exit.code", Value::Int(3)),
            ),
            (
                Event::Hook {
                    agent: "claude".into(),
                    tool: Some("Bash".into()),
                    decision: "deny".into(),
                    reason: "writes outside the project".into(),
                },
                "sandgate.hook.decision",
                Severity::Warn,
                ("sandgate.hook.tool", "Bash".into()),
            ),
        ];
        for (event, name, severity, (key, value)) in rows {
            let (s, n, body, attrs) = record_of(&event, now).unwrap();
            assert_eq!((n, s), (name, severity), "{event:?}");
            assert_eq!(find(&attrs, key), Some(&value), "{name}: {attrs:?}");
            assert!(!body.is_empty(), "{name}");
        }
        let (_, _, body, attrs) = record_of(
            &Event::Answered {
                question: question(asked),
                answer: approvals::Answer::Deny(approvals::Scope::Once),
                by,
                pattern: "*.pypi.org".into(),
            },
            now,
        )
        .unwrap();
        assert_eq!(find(&attrs, "sandgate.answer.by"), Some(&"@alice".into()), "by whom");
        assert_eq!(find(&attrs, "sandgate.answer.channel"), Some(&"telegram".into()));
        assert!(body.contains("@alice") && body.contains("*.pypi.org"), "{body}");
        assert_eq!(record_of(&Event::DaemonStopping, now), None);
    }

    #[test]
    fn events_are_counted_into_the_metrics() {
        let c = Counters::default();
        let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let now = asked + Duration::from_secs(3);
        count(&c, &request("allow", 1), now);
        count(&c, &request("deny", 5), now); // a DNS summary stands for 5
        count(
            &c,
            &Event::Blocked {
                sandbox: "s".into(),
                protocol: "tcp".into(),
                dst: "1.2.3.4".into(),
                port: None,
                count: 2,
            },
            now,
        );
        count(&c, &Event::Asked { question: question(asked) }, now);
        count(
            &c,
            &Event::Answered {
                question: question(asked),
                answer: approvals::Answer::Deny(approvals::Scope::Once),
                by: approvals::Responder::new(approvals::Channel::Cli, "bob"),
                pattern: "pypi.org".into(),
            },
            now,
        );
        let m = c.snapshot();
        let text = format!("{m:?}");
        // The deny count of 5, the 2 blocked packets and one answer in the 5 s bucket.
        let requests = &m.iter().find(|m| m.name == "sandgate.requests").unwrap().data;
        let sandgate_telemetry::otlp::MetricData::Counter(points) = requests else { panic!() };
        let values: Vec<u64> = points.iter().map(|p| p.value).collect();
        assert_eq!(values, [1, 5, 0], "allow, deny, reject: {text}");
        let blocked = &m.iter().find(|m| m.name == "sandgate.blocked_packets").unwrap().data;
        let sandgate_telemetry::otlp::MetricData::Counter(points) = blocked else { panic!() };
        assert_eq!(points[0].value, 2);
        let h = &m.iter().find(|m| m.name == "sandgate.question.answer.duration").unwrap().data;
        let sandgate_telemetry::otlp::MetricData::Histogram(points) = h else { panic!() };
        assert_eq!((points[0].count, points[0].buckets[3]), (1, 1), "{text}");
    }

    #[test]
    fn a_sandbox_resource_names_it_by_the_conventions() {
        let base = Resource { attributes: vec![("host.name", "h".into())] };
        let info = SandboxInfo {
            id: "sg-9".into(),
            tier: "build".into(),
            command: vec!["cargo".into(), "build".into()],
            cwd: "/src/p".into(),
            pid: 42,
            allow: Vec::new(),
            deny: Vec::new(),
            net_proxy: false,
            no_ask: false,
        };
        let r = sandbox_resource(&base, &info, Some("/src/p"));
        let a = &r.attributes;
        assert_eq!(find(a, "host.name"), Some(&"h".into()));
        assert_eq!(find(a, "sandgate.sandbox.id"), Some(&"sg-9".into()));
        assert_eq!(find(a, "sandgate.tier"), Some(&"build".into()));
        assert_eq!(find(a, "sandgate.project"), Some(&"/src/p".into()));
        assert_eq!(find(a, "process.command"), Some(&"cargo".into()));
        assert_eq!(
            find(a, "process.command_args"),
            Some(&Value::Array(vec!["cargo".into(), "build".into()]))
        );
        assert_eq!(find(a, "process.pid"), Some(&Value::Int(42)));
    }
}
