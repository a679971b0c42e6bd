//! What a person answers: allow or deny, for how long, and who answered through which channel.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How far an answer reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The requests waiting now, and those of the next 10 s from the same sandbox to the same
    /// host and port ([`ONCE_WINDOW`](crate::ONCE_WINDOW)): a client's second connection.
    Once,
    /// Everything this sandbox asks until it ends.
    Session,
    /// For this long from the answer.
    For(#[serde(with = "duration_secs")] Duration),
    /// Until revoked: for the project (`global: false`) or everywhere (`global: true`).
    Always {
        /// Every project, not only this one.
        global: bool,
    },
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Once => f.write_str("once"),
            Scope::Session => f.write_str("for this session"),
            Scope::For(d) => write!(f, "for {}", format_duration(*d)),
            Scope::Always { global: false } => f.write_str("always (this project)"),
            Scope::Always { global: true } => f.write_str("always (every project)"),
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Let it through.
    Allow(Scope),
    /// Refuse it.
    Deny(Scope),
}

impl Answer {
    /// Whether the answer lets the request through.
    pub fn allows(&self) -> bool {
        match self {
            Answer::Allow(_) => true,
            Answer::Deny(_) => false,
        }
    }

    /// The answer's scope.
    pub fn scope(&self) -> Scope {
        match self {
            Answer::Allow(s) | Answer::Deny(s) => *s,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Allow(s) => write!(f, "allowed {s}"),
            Answer::Deny(s) => write!(f, "denied {s}"),
        }
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The prompt on the launcher's terminal (or `sandgate watch`).
    Terminal,
    /// `sandgate allow` / `sandgate deny`.
    Cli,
    /// The Telegram bot.
    Telegram,
    /// An agent hook (e.g. Claude Code's PermissionRequest).
    Hook,
}

impl Channel {
    /// Lower-case name, as stored with grants.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Terminal => "terminal",
            Channel::Cli => "cli",
            Channel::Telegram => "telegram",
            Channel::Hook => "hook",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Channel::Terminal => f.write_str("the terminal"),
            Channel::Cli => f.write_str("the CLI"),
            Channel::Telegram => f.write_str("Telegram"),
            Channel::Hook => f.write_str("a hook"),
        }
    }
}

/// Who answered, through which channel ("in Telegram by @name").
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Responder {
    /// The channel.
    pub channel: Channel,
    /// The person (`@name`, a user name).
    pub who: String,
}

impl Responder {
    /// A responder.
    pub fn new(channel: Channel, who: impl Into<String>) -> Self {
        Responder { channel, who: who.into() }
    }
}

impl fmt::Display for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in {} by {}", self.channel, self.who)
    }
}

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a duration (the config crate's reading, which says how to write one).
    #[error("invalid duration: {why}")]
    Invalid {
        /// What is wrong, quoting the text given.
        why: String,
    },
    /// Under a second, or more than a year.
    #[error(
        "invalid duration {input:?}: must be between 1s and 365d (use an `always` grant instead)"
    )]
    Range {
        /// The text given.
        input: String,
    },
}

/// The longest duration accepted: beyond this, say `always`.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses `90s`, `15m`, `1h`, `2d`, `1w`, and sums like `1h30m`, as the configuration does
/// ([`sandgate_config::parse_duration`]); a grant lasts from 1 s to [`MAX_DURATION`].
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let d = sandgate_config::parse_duration(input).map_err(|why| DurationError::Invalid { why })?;
    if d < Duration::from_secs(1) || d > MAX_DURATION {
        return Err(DurationError::Range { input: input.trim().to_string() });
    }
    Ok(d)
}

/// Formats a duration the way [`parse_duration`] reads it (`1h30m`, `2d`, `90s` → `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, per) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= per {
            out.push_str(&format!("{}{unit}", secs / per));
            secs %= per;
        }
    }
    out
}

mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        let ok = [
            ("90s", 90),
            ("15m", 900),
            ("1h", 3600),
            ("2d", 172_800),
            ("1w", 604_800),
            ("1h30m", 5400),
            (" 5m ", 300),
            ("365d", 365 * 86_400),
        ];
        for (input, secs) in ok {
            assert_eq!(parse_duration(input), Ok(Duration::from_secs(secs)), "{input}");
        }
        type Check = fn(&DurationError) -> bool;
        let invalid: Check = |e| matches!(e, DurationError::Invalid { .. });
        let range: Check = |e| matches!(e, DurationError::Range { .. });
        let bad: [(&str, Check); 11] = [
            ("", invalid),
            ("  ", invalid),
            ("15", invalid),
            ("m", invalid),
            ("-5m", invalid),
            ("1.5h", invalid),
            ("3y", invalid),
            ("0s", range),
            ("500ms", range),
            ("366d", range),
            ("99999999999999999999s", invalid),
        ];
        for (input, want) in bad {
            let e = parse_duration(input).unwrap_err();
            assert!(want(&e), "{input:?} gave {e:?}");
            assert!(e.to_string().contains("duration"), "{e}");
        }
        assert!(matches!(
            parse_duration("18446744073709551615w"),
            Err(DurationError::Range { .. })
        ));
    }

    #[test]
    fn durations_format_round_trip() {
        for secs in [1, 59, 60, 90, 3600, 5400, 86_400, 90_061] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{secs}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    }

    #[test]
    fn answers_read_well() {
        let by = Responder::new(Channel::Telegram, "@alice");
        assert_eq!(
            format!("{} {by}", Answer::Allow(Scope::For(Duration::from_secs(3600)))),
            "allowed for 1h in Telegram by @alice"
        );
        assert_eq!(Answer::Deny(Scope::Session).to_string(), "denied for this session");
    }
}
