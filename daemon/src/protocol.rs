//! The control protocol: JSON lines over `$XDG_RUNTIME_DIR/sandgate/control.sock`.
//!
//! Every line a client sends is one request object, `{"id": N, "op": "...", ...}` (the `id` is
//! optional and echoed back). Every request gets exactly one reply line, `{"id": N, "ok": true,
//! "result": ...}` or `{"id": N, "ok": false, "error": {"code": "...", "message": "..."}}`; a line
//! that is not a request gets an error reply with `"id": null` and the connection stays usable.
//! After `register` or `subscribe`, the daemon also writes event lines, `{"event": "...", ...}`,
//! on that connection. `register` carries file descriptors (SCM_RIGHTS) with its line.
//! The "Control protocol" section of docs/internals.md documents every request with an example.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Version of the protocol; `hello` reports it and clients refuse a daemon with another one.
pub const PROTOCOL_VERSION: u32 = 2;

/// Longest accepted request line (bytes); longer lines are refused and skipped.
pub const MAX_LINE: usize = 64 * 1024;

/// The channels a control-socket client may answer through: a client can say it relays a key
/// pressed in `sandgate watch`, never that it speaks for Telegram (or anything else).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalChannel {
    /// `sandgate allow` / `deny`, or any script.
    #[default]
    Cli,
    /// A key pressed in `sandgate watch` (a terminal).
    Terminal,
}

impl From<LocalChannel> for sandgate_approvals::Channel {
    fn from(c: LocalChannel) -> Self {
        match c {
            LocalChannel::Cli => sandgate_approvals::Channel::Cli,
            LocalChannel::Terminal => sandgate_approvals::Channel::Terminal,
        }
    }
}

/// A request line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// Echoed in the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The request.
    #[serde(flatten)]
    pub request: Request,
}

/// What a client asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Version and pid of the daemon.
    Hello,
    /// A launcher hands over a sandbox: the proxy listener and (optionally) the NFLOG socket come
    /// with the line as SCM_RIGHTS, in the order of `fds`. The connection then belongs to the
    /// sandbox: when it closes without `unregister`, the sandbox is marked lost.
    Register {
        /// The sandbox.
        sandbox: SandboxInfo,
        /// What the passed descriptors are, in order.
        fds: Vec<FdKind>,
    },
    /// The launcher's command ended.
    Unregister {
        /// Sandbox id.
        sandbox: String,
        /// Exit status (128+N for signal N), if known.
        exit_status: Option<i32>,
        /// Wait for the kernel's last NFLOG batch (up to ~30 ms) and return the blocked packets
        /// in the reply (`--report-blocked`).
        #[serde(default)]
        flush_blocked: bool,
    },
    /// The open questions.
    Pending,
    /// Allow or deny: a question by id, or a host pattern (answers every open question it covers
    /// and records a grant even when nothing is pending, except `once`).
    Answer {
        /// What it applies to.
        target: AnswerTargetSpec,
        /// Allow/deny and scope.
        answer: sandgate_approvals::Answer,
        /// Who answers (shown in the other channels; defaults to the peer's user name).
        #[serde(default)]
        by: Option<String>,
        /// Through which local channel (`cli` by default); Telegram answers never come this way.
        #[serde(default)]
        channel: LocalChannel,
    },
    /// The grants (live ones, or every one ever with `all`).
    Rules {
        /// Include revoked, expired and used grants.
        #[serde(default)]
        all: bool,
    },
    /// Revokes a grant.
    Revoke {
        /// Grant id: `"g12"` as `rules --json` prints it (`"12"`, `"#12"` and 12 are read too).
        grant: sandgate_store::GrantId,
    },
    /// Daemon, sandboxes, pending questions, counts.
    Status,
    /// Sandboxes known to the store.
    List {
        /// Also those that ended.
        #[serde(default)]
        all: bool,
    },
    /// Turns the connection into a stream of events (questions, answers, blocked traffic,
    /// requests, sandboxes starting and ending); the reply comes first.
    Subscribe {
        /// Only this sandbox's events.
        #[serde(default)]
        sandbox: Option<String>,
    },
    /// Commits what the daemon has recorded so far (sandbox rows, then queued events) to the
    /// store; the reply comes after the commit, so a reader of the store (`sandgate log`) then
    /// sees every connection that had closed before it asked.
    Flush,
    /// Stops the daemon (launchers are told, and wait for a new daemon instead of starting one).
    Stop,
    /// An agent hook decided (or declined to decide) a tool call; recorded and shown by
    /// `sandgate watch`. Hooks send it without waiting for the reply.
    HookDecision {
        /// The agent (`claude`).
        agent: String,
        /// The tool, when the input named one.
        #[serde(default)]
        tool: Option<String>,
        /// `allow`, `deny` or `none`.
        decision: String,
        /// Why.
        reason: String,
    },
}

/// A descriptor passed with `register`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FdKind {
    /// The listening TCP socket of the sandbox's proxy (127.0.0.1:3128 inside).
    Listener,
    /// The NFLOG netlink socket of the sandbox's network namespace.
    Nflog,
    /// The UDP socket of the sandbox's DNS stub (127.0.0.1:53 inside).
    DnsUdp,
    /// The TCP listener of the sandbox's DNS stub (127.0.0.1:53 inside).
    DnsTcp,
}

/// What `register` says about a sandbox. The daemon resolves the network policy itself, from the
/// configuration of `cwd` for `tier` plus the launcher's `--allow`/`--deny` flags.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxInfo {
    /// Sandbox id (`sg-...`).
    pub id: String,
    /// Tier name.
    pub tier: String,
    /// The command line.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The launcher's pid.
    pub pid: u32,
    /// `--allow` flags of the launch.
    #[serde(default)]
    pub allow: Vec<String>,
    /// `--deny` flags of the launch.
    #[serde(default)]
    pub deny: Vec<String>,
    /// `--net proxy` of the launch (`sandgate run --net proxy`): the tier's network is then the
    /// proxy whatever its configuration says. Absent without the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub net_proxy: bool,
    /// `--no-ask`: nobody is there to answer; a destination no rule allows is refused at once
    /// and recorded. Absent without the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_ask: bool,
}

/// What an `answer` applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AnswerTargetSpec {
    /// One question (`q3` or `3`).
    Question(String),
    /// A host pattern (`example.com`, `*.example.com`, `example.com:8443`), of one sandbox if
    /// given. The grant opens the port asked (or typed; 443 when neither) unless `any_port`.
    Host {
        /// The pattern.
        pattern: String,
        /// Sandbox id.
        #[serde(default)]
        sandbox: Option<String>,
        /// Grant every port of the host.
        #[serde(default)]
        any_port: bool,
    },
}

/// A reply line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// The request's id.
    pub id: Option<u64>,
    /// Whether it worked.
    pub ok: bool,
    /// The result, when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable: `bad_request`, `not_found`, `conflict`, `store`, `denied`, `internal`.
    pub code: String,
    /// For people: what happened and what to do.
    pub message: String,
}

impl Reply {
    /// A success.
    pub fn ok(id: Option<u64>, result: serde_json::Value) -> Reply {
        Reply { id, ok: true, result: Some(result), error: None }
    }

    /// A failure.
    pub fn err(id: Option<u64>, code: &str, message: impl Into<String>) -> Reply {
        Reply {
            id,
            ok: false,
            result: None,
            error: Some(ErrorBody { code: code.into(), message: message.into() }),
        }
    }
}

/// An event line (after `register` or `subscribe`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A new question.
    Asked {
        /// The question.
        question: sandgate_approvals::PendingQuestion,
    },
    /// A question was answered.
    Answered {
        /// The question.
        question: sandgate_approvals::PendingQuestion,
        /// The answer.
        answer: sandgate_approvals::Answer,
        /// Who, where.
        by: sandgate_approvals::Responder,
        /// The pattern answered.
        pattern: String,
    },
    /// A question timed out (denied).
    TimedOut {
        /// The question.
        question: sandgate_approvals::PendingQuestion,
    },
    /// A question ended unanswered because its sandbox ended.
    Withdrawn {
        /// The question.
        question: sandgate_approvals::PendingQuestion,
    },
    /// A sandbox went past its question budget in a window that has ended.
    OverBudget {
        /// Sandbox id.
        sandbox: String,
        /// Questions denied without asking in that window.
        refused: u64,
        /// The budget (questions per window).
        limit: u32,
        /// The window, in seconds.
        window_s: u64,
    },
    /// The firewall blocked a direct connection attempt (aggregated: `count` packets).
    Blocked {
        /// Sandbox id (the NFLOG prefix).
        sandbox: String,
        /// `tcp`, `udp`, `icmp`, ...
        protocol: String,
        /// Destination address.
        dst: String,
        /// Destination port (or ICMP type).
        port: Option<u16>,
        /// Packets this line stands for.
        count: u64,
    },
    /// The proxy decided a request.
    Request {
        /// Sandbox id.
        sandbox: String,
        /// Method.
        method: String,
        /// Host.
        host: String,
        /// Port.
        port: u16,
        /// Path and query of a plain-HTTP request (none for tunnels).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// `allow`, `deny`, `reject`.
        decision: String,
        /// The rule.
        rule: String,
        /// Bytes up.
        bytes_up: u64,
        /// Bytes down.
        bytes_down: u64,
        /// Duration in milliseconds.
        ms: f64,
        /// What went wrong.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Requests this line stands for: 1, but for the DNS stub's summary of the names it
        /// refused under one domain in a minute, and the event cap's summary of what a sandbox
        /// got through to one destination (or to [`OTHER_HOSTS`](sandgate_store::OTHER_HOSTS))
        /// past its cap (then bytes and `ms` are sums).
        #[serde(default = "one", skip_serializing_if = "is_one")]
        count: u64,
        /// A summary's examples: names (DNS), requests or destinations (the event cap's).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        samples: Vec<String>,
        /// The process in the sandbox that opened the connection, when it was found (never for
        /// the DNS stub or a summary). Absent from events stored before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        process: Option<sandgate_config::ProcessInfo>,
    },
    /// Refusals of a sandbox that came faster than `[daemon] events_per_minute` and were not
    /// stored (shown live only), counted since the last such report; one per wall. (What was let
    /// through is never dropped: past the cap it is counted into [`Event::Request`] summaries.)
    /// Stored as kind `decision` (`deny`) or `blocked_packet` (`blocked`): a line of
    /// `sandgate log`, host [`NOT_STORED`](sandgate_store::NOT_STORED).
    EventsCapped {
        /// Sandbox id.
        sandbox: String,
        /// `deny` (the proxy's and the DNS stub's refusals) or `blocked` (the firewall's).
        #[serde(default = "deny")]
        decision: String,
        /// Events not stored.
        not_stored: u64,
        /// What they stood for: refusals (a DNS summary stands for many), blocked packets.
        standing_for: u64,
        /// The configured rate.
        per_minute: u32,
        /// Events stored at once before the rate applies.
        burst: u32,
    },
    /// A sandbox registered.
    SandboxStarted {
        /// Sandbox id.
        sandbox: String,
        /// Tier.
        tier: String,
        /// Command line.
        command: Vec<String>,
    },
    /// A sandbox ended (`lost`: its launcher went away without saying).
    SandboxEnded {
        /// Sandbox id.
        sandbox: String,
        /// Exit status, if known.
        exit_status: Option<i32>,
        /// The launcher disappeared.
        lost: bool,
    },
    /// The daemon is stopping on request: launchers wait for a new one instead of starting one.
    DaemonStopping,
    /// An agent hook answered a tool call (`none`: it left the decision to the person).
    Hook {
        /// The agent.
        agent: String,
        /// The tool.
        tool: Option<String>,
        /// `allow`, `deny` or `none`.
        decision: String,
        /// Why.
        reason: String,
    },
}

/// Serde's default of [`Event::Request`]'s `count` (events stored before it existed).
fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

/// What an [`Event::EventsCapped`] of `decision` counts, in words.
pub fn capped_what(decision: &str) -> &'static str {
    if decision == "blocked" { "blocked packets" } else { "refused requests and lookups" }
}

/// Serde's default of [`Event::EventsCapped`]'s `decision` (the store's v6 migration gives the
/// older rows one; a peer of this round's daemon may not).
fn deny() -> String {
    "deny".to_owned()
}

impl Event {
    /// The sandbox the event concerns, if one.
    pub fn sandbox(&self) -> Option<&str> {
        match self {
            Event::Asked { question }
            | Event::Answered { question, .. }
            | Event::TimedOut { question }
            | Event::Withdrawn { question } => Some(&question.question.sandbox),
            Event::Blocked { sandbox, .. }
            | Event::OverBudget { sandbox, .. }
            | Event::EventsCapped { sandbox, .. }
            | Event::Request { sandbox, .. }
            | Event::SandboxStarted { sandbox, .. }
            | Event::SandboxEnded { sandbox, .. } => Some(sandbox),
            Event::DaemonStopping | Event::Hook { .. } => None,
        }
    }
}

impl Event {
    /// The traffic-log line this event stands for, stamped `time` (epoch ms); `None` when it is
    /// not traffic. `sandgate log --follow` and `watch`'s traffic tail print it.
    // The daemon's protocol type is not the store's to know: the mapping lives with the protocol.
    pub fn traffic_line(&self, time: i64) -> Option<sandgate_store::TrafficLine> {
        match self {
            Event::Request {
                sandbox,
                method,
                host,
                port,
                path,
                decision,
                rule,
                bytes_up,
                bytes_down,
                ms,
                error,
                count,
                samples: _,
                process,
            } => Some(sandgate_store::TrafficLine {
                time,
                sandbox: sandbox.clone(),
                decision: if decision == "allow" {
                    sandgate_store::TrafficDecision::Allow
                } else {
                    sandgate_store::TrafficDecision::Deny
                },
                method: method.clone(),
                host: host.clone(),
                // A name lookup (the DNS stub) has no port, nor has the cap's count of
                // requests to other hosts.
                port: (method != "DNS" && *port != 0).then_some(*port),
                path: path.clone(),
                command: None,
                process: process.clone(),
                rule: match error {
                    Some(e) => format!("{rule} ({e})"),
                    None => rule.clone(),
                },
                bytes_up: *bytes_up,
                bytes_down: *bytes_down,
                ms: *ms,
                count: *count,
            }),
            Event::EventsCapped {
                sandbox,
                decision,
                not_stored,
                standing_for,
                per_minute,
                burst,
            } => {
                let what = capped_what(decision);
                let decision = if decision == "blocked" {
                    sandgate_store::TrafficDecision::Blocked
                } else {
                    sandgate_store::TrafficDecision::Deny
                };
                Some(sandgate_store::TrafficLine {
                    time,
                    sandbox: sandbox.clone(),
                    decision,
                    method: "*".into(),
                    host: sandgate_store::NOT_STORED.into(),
                    port: None,
                    path: None,
                    command: None,
                    process: None,
                    rule: format!(
                        "over the sandbox's cap on stored events ({burst} at once, then \
                         {per_minute} a minute): {standing_for} {what} in {not_stored} events"
                    ),
                    bytes_up: 0,
                    bytes_down: 0,
                    ms: 0.0,
                    count: *standing_for,
                })
            }
            Event::Blocked { sandbox, protocol, dst, port, count } => {
                Some(sandgate_store::TrafficLine {
                    time,
                    sandbox: sandbox.clone(),
                    decision: sandgate_store::TrafficDecision::Blocked,
                    method: protocol.clone(),
                    host: dst.clone(),
                    port: *port,
                    path: None,
                    command: None,
                    process: None,
                    rule: "firewall: direct connection".into(),
                    bytes_up: 0,
                    bytes_down: 0,
                    ms: 0.0,
                    count: *count,
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_fields_are_refused() {
        let line = r#"{"id":7,"op":"answer","target":{"host":{"pattern":"*.example.com"}},"answer":{"allow":{"for":900}}}"#;
        let env: Envelope = serde_json::from_str(line).unwrap();
        assert_eq!(env.id, Some(7));
        match &env.request {
            Request::Answer {
                target: AnswerTargetSpec::Host { pattern, sandbox: None, any_port: false },
                ..
            } => {
                assert_eq!(pattern, "*.example.com")
            }
            other => panic!("{other:?}"),
        }
        let back: Envelope = serde_json::from_str(&serde_json::to_string(&env).unwrap()).unwrap();
        assert_eq!(back.id, Some(7));
        for bad in [
            r#"{"op":"nope"}"#,
            r#"{"op":"rules","all":true,"extra":1}"#,
            r#"{"op":"revoke"}"#,
            r#"{"op":"revoke","grant":"x"}"#,
            "[]",
            "",
        ] {
            assert!(serde_json::from_str::<Envelope>(bad).is_err(), "{bad}");
        }
        let un: Envelope =
            serde_json::from_str(r#"{"id":3,"op":"unregister","sandbox":"sg-1","exit_status":0}"#)
                .unwrap();
        assert_eq!(un.id, Some(3));
        assert!(matches!(un.request, Request::Unregister { ref sandbox, .. } if sandbox == "sg-1"));
        // The channel an answer claims: cli (the default) or terminal, nothing else.
        let answer = |extra: &str| {
            serde_json::from_str::<Envelope>(&format!(
                r#"{{"op":"answer","target":{{"question":"q1"}},"answer":{{"allow":"once"}}{extra}}}"#
            ))
            .map(|e| match e.request {
                Request::Answer { channel, .. } => channel,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(answer("").unwrap(), LocalChannel::Cli);
        assert_eq!(answer(r#","channel":"terminal""#).unwrap(), LocalChannel::Terminal);
        assert_eq!(answer(r#","channel":"cli""#).unwrap(), LocalChannel::Cli);
        for claim in ["telegram", "hook", "Terminal", ""] {
            assert!(answer(&format!(r#","channel":"{claim}""#)).is_err(), "{claim}");
        }
        let flush: Envelope = serde_json::from_str(r#"{"id":4,"op":"flush"}"#).unwrap();
        assert!(matches!(flush.request, Request::Flush) && flush.id == Some(4));
        let status: Envelope = serde_json::from_str(r#"{"op":"status"}"#).unwrap();
        assert!(matches!(status.request, Request::Status) && status.id.is_none());
    }

    #[test]
    fn events_are_tagged() {
        let e = Event::Blocked {
            sandbox: "sg-1".into(),
            protocol: "tcp".into(),
            dst: "10.0.0.1".into(),
            port: Some(443),
            count: 3,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "blocked");
        assert_eq!(e.sandbox(), Some("sg-1"));
    }
}
