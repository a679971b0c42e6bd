//! The Telegram channel: a bot that posts each question with inline buttons, takes commands
//! from the chats it is configured to obey, edits its messages when a question is answered
//! elsewhere, and posts deduplicated blocked-traffic alerts.
//!
//! Robustness: every call to the Bot API is retried with exponential backoff (honouring a 429's
//! `retry_after`); nothing the API returns (errors, garbage, silence) stops the bot or holds a
//! question, which stays answerable from the CLI and the terminal the whole time.
//!
//! Buttons: **Allow once** (the requests waiting now, and the sandbox's next 10 s to that host
//! and port), **This session** (the sandbox, until it ends), **1 hour** (the project, for an
//! hour), **Always** (the project, until revoked), **Deny** (for this sandbox session); each
//! for the port asked. A button's data carries the broker's run id: one from before a restart
//! answers nothing.
//!
//! Budgets: blocked-traffic alerts per sandbox per window ([`TelegramConfig::alerts_per_window`]),
//! then one summary; a sandbox over its question budget gets one message per window.
//!
//! Commands: `/allow DOMAIN [15m|1h|…|session|always|global]` (default: session), `/deny DOMAIN
//! [same]`, `/pending`, `/rules`, `/revoke ID`, `/status`, `/help`.
//!
//! Many daemons, one group chat (each its own bot: Telegram lets one poller per token): every
//! message starts with [`TelegramConfig::name`]; an answer applies only on the machine whose bot
//! it reached. Buttons: Telegram delivers a button press only to the bot that posted the
//! message, and the bot also checks that the message is its own and that the data carries its
//! broker's run id. Typed commands in a group: only `/cmd@thisbot …` or a reply to one of this
//! bot's messages is obeyed; an unaddressed command gets a hint, others' commands and chatter are
//! ignored. Who may answer: [`TelegramConfig::users`] (a group needs it; see [`may_answer`]).

mod alerts;
mod bot;
mod config_check;
mod render;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use alerts::{AlertDeduper, AlertMessage};
pub use bot::TelegramHandle;
pub use config_check::config_warnings;
pub use render::{
    Addressee, BotCommand, Callback, CommandError, NotAllowed, addressee, callback_data,
    may_answer, parse_callback, parse_command, tagged,
};

use crate::Broker;

/// The default of [`TelegramConfig::alerts_per_window`].
pub const DEFAULT_ALERTS_PER_MINUTE: u32 = 10;

/// The environment variable that holds the bot token (it wins over the config file).
pub const TOKEN_ENV: &str = "SANDGATE_TELEGRAM_TOKEN";

/// A bot token. Never printed: `Debug` shows `BotToken(<redacted>)` and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct BotToken(String);

impl fmt::Debug for BotToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BotToken(<redacted>)")
    }
}

/// Why the Telegram channel could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelegramError {
    /// The token does not look like `123456:ABC-def…` (the token itself is not repeated here).
    #[error(
        "the Telegram bot token is malformed: expected `<digits>:<letters, digits, - and _>` as BotFather gives it"
    )]
    BadToken,
    /// No chat is configured, so the bot would obey nobody.
    #[error("no Telegram chat ids configured: add the ids of the chats the bot may obey")]
    NoChats,
    /// The HTTP client could not be built (its TLS setup failed).
    #[error("cannot set up the Telegram HTTP client: {0}")]
    HttpClient(String),
    /// The token file cannot be read.
    #[error("cannot read the Telegram token file {path}: {reason}")]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The token file can be read by others than its owner.
    #[error(
        "the Telegram token file {path} has mode {mode:04o}: others can read the token; run `chmod 600 {path}`"
    )]
    TokenFileMode {
        /// The file.
        path: std::path::PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The API URL override is not a URL.
    #[error("invalid Telegram API URL {url:?}: {reason}")]
    BadApiUrl {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
}

impl BotToken {
    /// Checks the shape of a token (`<bot id>:<secret>`).
    pub fn new(token: impl Into<String>) -> Result<Self, TelegramError> {
        let token = token.into();
        let token = token.trim().to_string();
        let ok = match token.split_once(':') {
            Some((id, secret)) => {
                !id.is_empty()
                    && id.bytes().all(|b| b.is_ascii_digit())
                    && !secret.is_empty()
                    && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }
            None => false,
        };
        if ok { Ok(BotToken(token)) } else { Err(TelegramError::BadToken) }
    }

    /// The token from `SANDGATE_TELEGRAM_TOKEN` if set and non-empty, else from the config
    /// file; `Ok(None)` when neither has one (the bot is off).
    pub fn from_env_or(config: Option<&str>) -> Result<Option<Self>, TelegramError> {
        Self::from_sources(None, config).map(|t| t.map(|(t, _)| t))
    }

    /// The token, from the first of: `SANDGATE_TELEGRAM_TOKEN`, `token_file` (which must be
    /// readable by its owner only), the config file's `token`; with where it came from.
    /// `Ok(None)` when none has one (the bot is off).
    pub fn from_sources(
        token_file: Option<&std::path::Path>,
        config: Option<&str>,
    ) -> Result<Option<(Self, TokenSource)>, TelegramError> {
        let env = std::env::var(TOKEN_ENV).ok().filter(|v| !v.trim().is_empty());
        if let Some(t) = env {
            return Self::new(t).map(|t| Some((t, TokenSource::Env)));
        }
        if let Some(path) = token_file {
            return read_token_file(path).map(|t| Some((t, TokenSource::File(path.to_owned()))));
        }
        Self::choose(None, config).map(|t| t.map(|t| (t, TokenSource::Config)))
    }

    fn choose(env: Option<&str>, config: Option<&str>) -> Result<Option<Self>, TelegramError> {
        match env.or(config.filter(|c| !c.trim().is_empty())) {
            Some(t) => Self::new(t).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// Where the bot token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `SANDGATE_TELEGRAM_TOKEN`.
    Env,
    /// `[telegram] token_file`.
    File(std::path::PathBuf),
    /// `[telegram] token` in the config file itself (warned about: see [`CONFIG_TOKEN_WARNING`]).
    Config,
}

/// What the daemon (at start) and `sandgate config check` say when the token is written in the
/// config file: a file many tools and backups read, and that a sandbox may be able to see.
pub const CONFIG_TOKEN_WARNING: &str = "the Telegram bot token is written in the config file; \
     anyone who reads that file can post questions whose buttons answer real ones. Move it to a \
     file readable only by you (`[telegram] token_file = \"~/.local/share/sandgate/telegram-token\"`, \
     chmod 600) or to the SANDGATE_TELEGRAM_TOKEN environment variable, and delete `token`";

/// Reads a token file: a regular file, mode 0600 or stricter (nobody but its owner reads it).
fn read_token_file(path: &std::path::Path) -> Result<BotToken, TelegramError> {
    use std::os::unix::fs::PermissionsExt as _;
    let fail = |reason: String| TelegramError::TokenFile { path: path.to_owned(), reason };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TelegramError::TokenFileMode { path: path.to_owned(), mode });
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    BotToken::new(text)
}

/// The bot's settings.
#[derive(Debug, Clone)]
pub struct TelegramConfig {
    /// The token.
    pub token: BotToken,
    /// The chats whose messages and buttons it obeys (and where it posts).
    pub chats: Vec<i64>,
    /// The Telegram user ids who may answer (press a button, send a command). Empty: in a
    /// private chat its one user (the chat is theirs), in a group chat nobody — a group's members
    /// are whoever its admins let in, so who may answer is said here, never assumed.
    pub users: Vec<i64>,
    /// The machine and user this daemon speaks for (`alice@laptop`), in front of every message
    /// it posts, so that in a chat several daemons share each question and alert says where it
    /// comes from. Empty: no prefix.
    pub name: String,
    /// Another Bot API server (tests, a local Bot API server); `None` = api.telegram.org.
    pub api_url: Option<String>,
    /// One alert per sandbox+destination per window; the rest are counted.
    pub alert_window: Duration,
    /// Alerts per sandbox per `alert_window`, across destinations; the rest are counted in one
    /// summary ("and N more") when the window ends.
    pub alerts_per_window: u32,
    /// Long-poll timeout of `getUpdates`.
    pub poll_timeout: Duration,
    /// How long a call may go unanswered (a `getUpdates`: beyond `poll_timeout`) before it is
    /// abandoned and retried like any other failure.
    pub request_timeout: Duration,
    /// First retry delay after a failed call; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
}

impl TelegramConfig {
    /// Defaults: no `users` (only private chats' own users answer), no `name`, api.telegram.org, 60 s alert window with 10 alerts per sandbox, 10 s long poll, 12 s request timeout (above
    /// the 10 s the HTTP client waits after a 5xx, so a 5xx is reported as one), backoff 0.5 s
    /// to 30 s.
    pub fn new(token: BotToken, chats: Vec<i64>) -> Self {
        TelegramConfig {
            token,
            chats,
            users: Vec::new(),
            name: String::new(),
            api_url: None,
            alert_window: Duration::from_secs(60),
            alerts_per_window: DEFAULT_ALERTS_PER_MINUTE,
            poll_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(12),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What `/rules`, `/revoke` and `/status` need from the daemon. Called on a blocking thread.
pub trait BotControl: Send + Sync + 'static {
    /// The live grants, one per line with their ids.
    fn rules(&self) -> String;
    /// Revokes grant `id`; the confirmation or the reason it failed.
    fn revoke(&self, id: &str) -> Result<String, String>;
    /// A short status (daemon, sandboxes alive, pending, counts).
    fn status(&self) -> String;
}

/// Asks the Bot API once who the bot is, giving up after `timeout`: the bot's `@username`, or
/// why it could not be reached (the token never shown).
pub async fn reachable(config: &TelegramConfig, timeout: Duration) -> Result<String, String> {
    bot::reachable(config, timeout).await
}

/// Starts the bot's tasks on the current tokio runtime.
pub fn spawn(
    config: TelegramConfig,
    broker: Broker,
    control: Arc<dyn BotControl>,
) -> Result<TelegramHandle, TelegramError> {
    bot::spawn(config, broker, control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_never_shown() {
        let t = BotToken::new("123456:AA-b_c9").unwrap();
        assert_eq!(format!("{t:?}"), "BotToken(<redacted>)");
        assert_eq!(
            format!("{:?}", TelegramConfig::new(t.clone(), vec![1])).matches("AA-b").count(),
            0
        );
        for bad in ["", "abc", "123:", ":abc", "12a:abc", "123:a b", "123:a/b"] {
            assert_eq!(BotToken::new(bad), Err(TelegramError::BadToken), "{bad:?}");
        }
        assert!(!TelegramError::BadToken.to_string().contains("AA-b"));
    }

    #[test]
    fn a_token_file_must_be_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("sandgate-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "123:abc\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token_file(&f).unwrap().expose(), "123:abc");
        for mode in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_token_file(&f).unwrap_err();
            assert!(matches!(e, TelegramError::TokenFileMode { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        assert!(matches!(
            read_token_file(&dir.join("missing")),
            Err(TelegramError::TokenFile { .. })
        ));
        assert!(matches!(read_token_file(&dir), Err(TelegramError::TokenFile { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn env_wins_over_config() {
        let pick = |e, c| BotToken::choose(e, c).map(|t| t.map(|t| t.expose().to_string()));
        assert_eq!(pick(Some("1:env"), Some("2:cfg")), Ok(Some("1:env".into())));
        assert_eq!(pick(None, Some("2:cfg")), Ok(Some("2:cfg".into())));
        assert_eq!(pick(None, Some("  ")), Ok(None));
        assert_eq!(pick(None, None), Ok(None));
        assert_eq!(pick(Some("bad"), None), Err(TelegramError::BadToken));
    }
}
