//! What the proxy needs from the rest of sandgate, as small traits that tests replace with fakes.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

// The sandbox id is the config crate's, shared with the launcher and the daemon.
pub use sandgate_config::SandboxId;
use sandgate_config::{DomainName, ProcessInfo, Rule, Target};

/// A boxed future, so the traits below can be used as `Arc<dyn Trait>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A secret a sandbox's clients must present in `Proxy-Authorization` (as the password of
/// `Basic` credentials, with any user name, or as a `Bearer` token).
#[derive(Clone)]
pub struct ProxyToken(Arc<str>);

impl ProxyToken {
    /// Wraps a token.
    pub fn new(token: impl Into<Arc<str>>) -> ProxyToken {
        ProxyToken(token.into())
    }

    /// The token as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ProxyToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyToken(..)")
    }
}

/// Grants a person gave (kept by the store), consulted when the policy has no rule.
pub trait GrantSource: Send + Sync + 'static {
    /// The grant that allows `target` for `sandbox`, if any; its rule should have
    /// [`RuleSource::Grant`](sandgate_config::RuleSource::Grant) as source.
    fn grant_for<'a>(
        &'a self,
        sandbox: &'a SandboxId,
        target: &'a Target,
    ) -> BoxFuture<'a, Option<Arc<Rule>>>;

    /// The patterns (with their port, `host:port`, when they have one) of the allow grants
    /// that apply to `sandbox` now, for a 403's list of allowed destinations. Must not block.
    /// None by default.
    fn listed(&self, _sandbox: &SandboxId) -> Vec<String> {
        Vec::new()
    }
}

/// A held request put to the [`Approver`] for a person's decision. (The approvals broker's
/// `Question` is what a person is shown: this plus the sandbox's command, directory and project.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The sandbox asking.
    pub sandbox: SandboxId,
    /// Where it wants to go.
    pub target: Target,
    /// The method of the first request that asked (`CONNECT`, `GET`, ...).
    pub method: String,
    /// The path of the first request, for plain HTTP (a tunnel has none).
    pub path: Option<String>,
    /// The process in the sandbox that opened the connection, when the
    /// [`Attributor`](crate::Attributor) found it in time.
    pub process: Option<ProcessInfo>,
}

/// Why a question ended in a denial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// A person denied it with a rule (e.g. "deny always").
    Rule(Arc<Rule>),
    /// A person denied it once.
    Denied,
    /// Nobody answered in time.
    TimedOut,
    /// The sandbox already has this many questions open; no new one was asked.
    TooManyQuestions(usize),
    /// Nobody is there to ask (an unattended run: `--no-ask`, `[daemon] ask = "deny"`): refused
    /// at once, and recorded as what would have been asked.
    Unattended,
    /// The sandbox asked its budget of questions in the current window; this one was not asked.
    OverBudget {
        /// Questions per window.
        limit: u32,
        /// The window.
        window: std::time::Duration,
    },
}

/// What the [`Approver`] rules on an [`ApprovalRequest`]: let it through under a rule, or refuse it
/// and say why. (The approvals broker's `Answer` is the person's reply a ruling is made from.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ruling {
    /// Let it through, under this rule (usually a grant).
    Allow(Arc<Rule>),
    /// Refuse it.
    Deny(DenyReason),
}

/// Asks a person. The proxy holds the request while the future runs, and asks only once per
/// (sandbox, host, port) however many requests are waiting.
pub trait Approver: Send + Sync + 'static {
    /// Puts the question and waits for an answer (the proxy applies its own timeout).
    fn ask(&self, question: ApprovalRequest) -> BoxFuture<'_, Ruling>;

    /// The address guard refused `target` for `sandbox`: its name resolved only to addresses a
    /// sandbox may not reach, the first `ip` for `why`. Whoever decides what a run may reach
    /// and reports it (`sandgate learn`) hears of it here, since allowing the name cannot help.
    /// Called on the proxy's path: must not block. Nothing by default.
    fn guard_refused(
        &self,
        _sandbox: &SandboxId,
        _target: &Target,
        _ip: std::net::IpAddr,
        _why: crate::guard::Forbidden,
    ) {
    }
}

/// What became of a request, as its event records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Let through (the upstream may still have failed: see [`ProxyEvent::error`]).
    Allow,
    /// Refused by policy: a deny rule, a person, an unanswered question, a guarded address, a
    /// refused TLS server name.
    Deny,
    /// Refused before any policy applied: a malformed request, a missing token, a slow client.
    Reject,
}

impl Outcome {
    /// The word events, logs and the store use: `allow`, `deny`, `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Reject => "reject",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One connection (one request for plain HTTP) and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyEvent {
    /// The sandbox.
    pub sandbox: SandboxId,
    /// Request method (`CONNECT`, `GET`, ...; empty when no head was read).
    pub method: String,
    /// The host as normalised, or as sent when it could not be parsed.
    pub host: String,
    /// The port (0 when unknown).
    pub port: u16,
    /// Path and query of a plain-HTTP request once its target was parsed (at most 1,000 bytes;
    /// `None` for tunnels, whose paths the proxy never sees).
    pub path: Option<String>,
    /// What became of it.
    pub decision: Outcome,
    /// The rule that decided, as text (or why the request was rejected).
    pub rule: String,
    /// Bytes from the client to the upstream.
    pub bytes_up: u64,
    /// Bytes from the upstream to the client.
    pub bytes_down: u64,
    /// From the first byte of the request to the end of the connection or response.
    pub duration: Duration,
    /// What went wrong, if anything (unreachable upstream, timeout, refused SNI, ...).
    pub error: Option<String>,
    /// How many requests this event stands for: 1, but for the DNS stub's summary of the names
    /// it refused under one domain in a window ([`dns_log`](crate::dns_log)).
    pub count: u64,
    /// Names the event stands for besides `host` (a DNS summary's examples; empty otherwise).
    pub samples: Vec<String>,
    /// The process in the sandbox that opened the connection, when the
    /// [`Attributor`](crate::Attributor) found it (never for the DNS stub).
    pub process: Option<ProcessInfo>,
    /// Secrets the proxy put into the request in place of their placeholders (intercepted
    /// requests only): counted for the telemetry's metrics, never their values.
    pub secrets_injected: u32,
}

/// Where events go. `record` is called on the proxy's hot path: it must not block.
pub trait EventSink: Send + Sync + 'static {
    /// Takes one event.
    fn record(&self, event: ProxyEvent);
}

/// Writes events to the `tracing` log (target `sandgate::proxy::event`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl EventSink for TracingSink {
    fn record(&self, e: ProxyEvent) {
        tracing::info!(
            target: "sandgate::proxy::event",
            sandbox = %e.sandbox,
            method = %e.method,
            host = %e.host,
            port = e.port,
            decision = e.decision.as_str(),
            rule = %e.rule,
            bytes_up = e.bytes_up,
            bytes_down = e.bytes_down,
            duration_ms = e.duration.as_secs_f64() * 1e3,
            error = e.error.as_deref().unwrap_or(""),
            count = e.count,
            process = e.process.as_ref().map(ToString::to_string).unwrap_or_default(),
        );
    }
}

/// Turns names into addresses.
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `name`, with `port` filled in.
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// The system resolver (`getaddrinfo` on tokio's blocking pool).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name.as_str(), port)).await?.collect()) })
    }
}
