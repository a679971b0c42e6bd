//! The records the store keeps, as typed values.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{StoreError, Timestamp};

// The grant's words are the config crate's, shared with the approvals broker; re-exported so the
// store's API names everything a grant holds.
pub use sandgate_config::{Effect, GrantTarget};

/// A sandbox as the launcher registers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSandbox {
    /// The sandbox id (unique; also the NFLOG prefix).
    pub id: String,
    /// Tier name (`run`, `net`, `build`, or one from the config).
    pub tier: String,
    /// The command line, argv as given.
    pub command: Vec<String>,
    /// Working directory of the command.
    pub cwd: PathBuf,
    /// Project key (hash of the real path of the project directory), for project-scoped grants.
    pub project: Option<String>,
    /// The uid the sandbox runs as.
    pub uid: u32,
    /// The launcher's pid, watched by [`Store::reap_dead`](crate::Store::reap_dead).
    pub pid: u32,
    /// When it started.
    pub started: Timestamp,
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Its launcher is (as far as the store knows) alive.
    Running,
    /// The launcher reported the command's end.
    Exited,
    /// The launcher disappeared without reporting (found by `reap_dead`).
    Lost,
}

impl SandboxState {
    /// The name stored and shown (`running`, `exited`, `lost`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Exited => "exited",
            SandboxState::Lost => "lost",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "running" => Ok(SandboxState::Running),
            "exited" => Ok(SandboxState::Exited),
            "lost" => Ok(SandboxState::Lost),
            other => Err(StoreError::Decode { what: "sandbox state", value: other.to_string() }),
        }
    }
}

/// A sandbox as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    /// What was registered.
    #[serde(flatten)]
    pub sandbox: NewSandbox,
    /// Running, exited or lost.
    pub state: SandboxState,
    /// When it ended (exit reported, or found lost).
    pub ended: Option<Timestamp>,
    /// The command's exit status when the launcher reported one (negative: killed by signal -n).
    pub exit_status: Option<i32>,
}

/// Whether [`Store::register_sandbox`](crate::Store::register_sandbox) created the sandbox or
/// found it already there (a launcher re-registering with a restarted daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// A new sandbox.
    New,
    /// The id was known; pid refreshed and state set back to running.
    Again,
}

/// How long a grant lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// One request; consumed by [`Store::take_once`](crate::Store::take_once).
    Once,
    /// As long as the sandbox lives (the target must be that sandbox).
    Session,
    /// Until the given instant (exclusive).
    Until(Timestamp),
    /// Until revoked.
    Always,
}

impl GrantScope {
    fn as_str(self) -> &'static str {
        match self {
            GrantScope::Once => "once",
            GrantScope::Session => "session",
            GrantScope::Until(_) => "until",
            GrantScope::Always => "always",
        }
    }

    fn expires(self) -> Option<Timestamp> {
        match self {
            GrantScope::Until(t) => Some(t),
            GrantScope::Once | GrantScope::Session | GrantScope::Always => None,
        }
    }
}

/// A grant to record.
///
/// `pattern` is a host pattern the caller has validated (`example.com`, `*.example.com`, an IP
/// literal, ...); the store keeps it as text and does not interpret it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewGrant {
    /// Host pattern.
    pub pattern: String,
    /// Port, or `None` for any port.
    pub port: Option<u16>,
    /// Allow or deny.
    pub effect: Effect,
    /// How long.
    pub scope: GrantScope,
    /// For whom.
    pub target: GrantTarget,
    /// Who decided (`@name`, a user name, `config`).
    pub approved_by: String,
    /// Through which channel (`terminal`, `cli`, `telegram`, `hook`).
    pub channel: String,
    /// When it was given.
    pub created: Timestamp,
}

impl NewGrant {
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        let bad = |what, value: &str, reason| {
            Err(StoreError::Invalid { what, value: value.to_string(), reason })
        };
        if self.pattern.is_empty() || self.pattern.len() > 255 {
            return bad("grant pattern", &self.pattern, "must be 1 to 255 bytes");
        }
        if self.pattern.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad(
                "grant pattern",
                &self.pattern,
                "contains whitespace or control characters",
            );
        }
        if self.port == Some(0) {
            return bad("grant port", "0", "ports are 1 to 65535");
        }
        match (&self.scope, &self.target) {
            (GrantScope::Session, GrantTarget::Project(p)) => {
                return bad("session grant target", p, "a session grant must target a sandbox");
            }
            (GrantScope::Session, GrantTarget::Global) => {
                return bad(
                    "session grant target",
                    "global",
                    "a session grant must target a sandbox",
                );
            }
            _ => {}
        }
        if let GrantScope::Until(t) = self.scope
            && t <= self.created
        {
            return bad("grant expiry", &t.to_string(), "expires before it was created");
        }
        Ok(())
    }

    pub(crate) fn scope_str(&self) -> &'static str {
        self.scope.as_str()
    }

    pub(crate) fn expires(&self) -> Option<Timestamp> {
        self.scope.expires()
    }

    pub(crate) fn target_str(&self) -> &'static str {
        self.target.kind()
    }
}

/// A grant's id (never reused, also after revocation). People see `#12` ([`Display`]); JSON
/// carries `"g12"` ([`GrantId::wire`]: every id sandgate prints in JSON is a string, prefixed
/// so it cannot be mistaken for a question's `q12`); `g12`, `#12` and `12` all parse, and so does
/// the number 12 in JSON from older clients.
///
/// [`Display`]: std::fmt::Display
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrantId(pub i64);

impl GrantId {
    /// The JSON form, `g12`.
    pub fn wire(self) -> String {
        format!("g{}", self.0)
    }
}

impl std::fmt::Display for GrantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for GrantId {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let digits = t.strip_prefix('g').or_else(|| t.strip_prefix('#')).unwrap_or(t);
        match digits.parse::<i64>() {
            Ok(n) if n >= 0 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(GrantId(n)),
            _ => Err(StoreError::Invalid {
                what: "grant id",
                value: s.to_owned(),
                reason: "a grant id is g12, #12 or 12 (see `sandgate rules`)",
            }),
        }
    }
}

impl Serialize for GrantId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.wire())
    }
}

impl<'de> Deserialize<'de> for GrantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Number(i64),
            Text(String),
        }
        match Wire::deserialize(d)? {
            Wire::Number(n) => Ok(GrantId(n)),
            Wire::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A grant as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Its id, for `sandgate revoke ID`.
    pub id: GrantId,
    /// What was given.
    #[serde(flatten)]
    pub grant: NewGrant,
    /// When a `once` grant was consumed.
    pub used: Option<Timestamp>,
    /// When it was revoked.
    pub revoked: Option<Timestamp>,
}

impl Grant {
    /// Whether it still applies at `now`: not revoked, not consumed, not expired.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.revoked.is_none()
            && self.used.is_none()
            && match self.grant.scope {
                GrantScope::Until(t) => now < t,
                GrantScope::Once | GrantScope::Session | GrantScope::Always => true,
            }
    }

    pub(crate) fn from_columns(c: GrantColumns) -> Result<Self, StoreError> {
        let scope = match (c.scope.as_str(), c.expires) {
            ("once", None) => GrantScope::Once,
            ("session", None) => GrantScope::Session,
            ("until", Some(t)) => GrantScope::Until(Timestamp(t)),
            ("always", None) => GrantScope::Always,
            (other, _) => {
                return Err(StoreError::Decode { what: "grant scope", value: other.to_string() });
            }
        };
        let target = match (c.target.as_str(), c.sandbox_id, c.project) {
            ("sandbox", Some(s), _) => GrantTarget::Sandbox(s),
            ("project", _, Some(p)) => GrantTarget::Project(p),
            ("global", _, _) => GrantTarget::Global,
            (other, _, _) => {
                return Err(StoreError::Decode { what: "grant target", value: other.to_string() });
            }
        };
        let port = match c.port {
            None => None,
            Some(p) => Some(
                u16::try_from(p)
                    .map_err(|_| StoreError::Decode { what: "grant port", value: p.to_string() })?,
            ),
        };
        Ok(Grant {
            id: GrantId(c.id),
            grant: NewGrant {
                pattern: c.pattern,
                port,
                effect: Effect::parse(&c.effect).ok_or_else(|| StoreError::Decode {
                    what: "grant effect",
                    value: c.effect.clone(),
                })?,
                scope,
                target,
                approved_by: c.approved_by,
                channel: c.channel,
                created: Timestamp(c.created),
            },
            used: c.used.map(Timestamp),
            revoked: c.revoked.map(Timestamp),
        })
    }
}

/// A grants row before decoding.
pub(crate) struct GrantColumns {
    pub id: i64,
    pub pattern: String,
    pub port: Option<i64>,
    pub effect: String,
    pub scope: String,
    pub target: String,
    pub sandbox_id: Option<String>,
    pub project: Option<String>,
    pub approved_by: String,
    pub channel: String,
    pub created: i64,
    pub expires: Option<i64>,
    pub used: Option<i64>,
    pub revoked: Option<i64>,
}

/// Which grants [`Store::list_grants`](crate::Store::list_grants) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantList {
    /// Those in force at the given instant: not revoked, consumed or expired (what decisions use).
    Live(Timestamp),
    /// [`GrantList::Live`] without the grants of sandboxes that are no longer running (what
    /// `sandgate rules` shows: a session grant ends with its sandbox).
    Current(Timestamp),
    /// Every grant ever recorded, including revoked, consumed and expired ones.
    All,
}

/// The kind of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A request reached the proxy.
    Request,
    /// The proxy decided (allow / deny / ask) and by which rule.
    Decision,
    /// The monitor saw a packet the firewall blocked.
    BlockedPacket,
    /// A question was asked or answered.
    Approval,
    /// A sandbox started or ended.
    Sandbox,
}

impl EventKind {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Request => "request",
            EventKind::Decision => "decision",
            EventKind::BlockedPacket => "blocked_packet",
            EventKind::Approval => "approval",
            EventKind::Sandbox => "sandbox",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "request" => Ok(EventKind::Request),
            "decision" => Ok(EventKind::Decision),
            "blocked_packet" => Ok(EventKind::BlockedPacket),
            "approval" => Ok(EventKind::Approval),
            "sandbox" => Ok(EventKind::Sandbox),
            other => Err(StoreError::Decode { what: "event kind", value: other.to_string() }),
        }
    }
}

/// An event to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// When it happened.
    pub time: Timestamp,
    /// The sandbox it concerns, if any.
    pub sandbox: Option<String>,
    /// What kind.
    pub kind: EventKind,
    /// Free-form details (host, port, rule, decision, ...).
    pub details: serde_json::Value,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its id (increasing with insertion order).
    pub id: i64,
    /// What was recorded.
    #[serde(flatten)]
    pub event: NewEvent,
}

/// A filter for [`Store::recent_events`](crate::Store::recent_events); `Default` = the newest
/// 100 events of any kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    /// Only this sandbox's events.
    pub sandbox: Option<String>,
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only events at or after this instant.
    pub since: Option<Timestamp>,
    /// At most this many (newest first).
    pub limit: u32,
}

impl Default for EventQuery {
    fn default() -> Self {
        EventQuery { sandbox: None, kind: None, since: None, limit: 100 }
    }
}

/// A filter for [`Store::traffic_summary`](crate::Store::traffic_summary); `Default` = all
/// traffic ever kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrafficQuery {
    /// Only this sandbox's traffic.
    pub sandbox: Option<String>,
    /// Only traffic at or after this instant (exact to the millisecond).
    pub since: Option<Timestamp>,
    /// Only lines with this decision.
    pub decision: Option<TrafficDecision>,
}

/// The decision of a traffic line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrafficDecision {
    /// The proxy let it through.
    Allow,
    /// The proxy refused it (a rule, an answer, a time-out, a malformed request).
    Deny,
    /// The firewall refused a direct connection.
    Blocked,
}

impl TrafficDecision {
    /// The name stored in the `traffic` table.
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficDecision::Allow => "allow",
            TrafficDecision::Deny => "deny",
            TrafficDecision::Blocked => "blocked",
        }
    }
}

/// One host of [`Store::traffic_summary`](crate::Store::traffic_summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSummary {
    /// The host (or address of blocked packets).
    pub host: String,
    /// Connections (blocked packets count one each).
    pub connections: u64,
    /// Of which allowed.
    pub allowed: u64,
    /// Bytes sent.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    /// The newest line's time.
    pub last_seen: Timestamp,
    /// The newest line's rule.
    pub rule: String,
}

/// Counts for `sandgate status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoreCounts {
    /// Sandboxes in state running.
    pub sandboxes_running: u64,
    /// Grants live now, without those of sandboxes that ended (as `rules` lists them).
    pub grants_live: u64,
    /// Events kept.
    pub events: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON carries `"g12"`; every form people type or older clients send parses back.
    #[test]
    fn grant_ids_are_strings_in_json_and_parse_in_every_form() {
        assert_eq!(serde_json::to_value(GrantId(12)).unwrap(), serde_json::json!("g12"));
        for form in [r#""g12""#, r##""#12""##, r#""12""#, "12"] {
            assert_eq!(serde_json::from_str::<GrantId>(form).unwrap(), GrantId(12), "{form}");
        }
        for bad in ["q12", "g", "-1", "+1", "g-1", "1.5", " ", "12a"] {
            assert!(bad.parse::<GrantId>().is_err(), "{bad}");
        }
        assert_eq!(GrantId(12).to_string(), "12");
    }
}
