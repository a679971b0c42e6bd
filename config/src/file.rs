//! One configuration file: TOML, unknown keys refused, every error placed at file:line:column.
//!
//! ```toml
//! [network]
//! allow = ["crates.io", "*.githubusercontent.com"]
//! deny = ["evil.example.com"]
//! presets = ["registries"]
//! default_ports = [80, 443]             # patterns without a port match only these (off by default)
//!
//! [filesystem]
//! allow_write = ["/opt/cache"]          # writable in tiers with a writable current directory
//! caches = "project"                    # package caches copy-on-write: "project", "shared", "off"
//! deny_read = ["~/work/secrets"]        # hidden in every tier, like ~/.ssh
//! protected = ["Makefile.local"]        # stays read-only inside writable directories
//! unix_sockets = []                     # pathname sockets the sandbox may connect to
//! git_writable = false                  # true: commits from inside (.git writable but hooks/config)
//! scan_directories = 20000              # directories a build launch's scan reads at most
//! writable_dotfiles = [".eslintcache2", "!.venv"]  # add to / take from the top-level allowlist
//! readable_home = [".sdkman"]           # home dot-entries readable beyond the built-in allowlist
//!
//! [env]
//! pass = ["GH_TOKEN"]                   # secret-looking variables kept (names or `*` patterns)
//!
//! [shell]
//! prompt_marker = true                  # false: no `[sandgate:TIER] ` in interactive prompts
//!
//! [macos]                               # Seatbelt only
//! loopback_listen = false               # true: servers may listen on the host's loopback
//! trustd = "deny"                       # "allow": certificate checks by trustd (past the proxy)
//!
//! [tiers.build-offline]
//! base = "build"
//! network = "none"
//!
//! [proxy]                               # global file only
//! upstream = "http://proxy.corp:3128"   # leave through this proxy after sandgate's decision
//! upstream_bypass = ["*.corp.example"]  # reached directly instead
//! upstream_credentials = "env:CORP_PROXY_AUTH"   # or "file:~/.config/corp-proxy": user:password
//!
//! [daemon]                              # global file only
//! ask_timeout = "60s"                   # a held request is denied after this long
//! event_retention = "30d"               # events older than this are pruned
//! desktop_notifications = false         # notify-send / osascript for each question
//! questions_per_minute = 20             # per sandbox; past it, denied without asking
//! questions_per_minute_total = 60       # all sandboxes together (sandboxes cost nothing)
//! events_per_minute = 60                # traffic events stored per sandbox, after 1,000 at once
//! ask = "person"                        # "deny": nobody to ask (CI); unknown hosts refused at once
//!
//! [telegram]                            # global file only
//! token_file = "~/.local/share/sandgate/telegram-token"  # mode 0600; or SANDGATE_TELEGRAM_TOKEN
//! chats = [123456789]                   # the chats the bot obeys
//! users = [123456789]                   # who may answer (required for a group chat)
//! name = "alice@laptop"                 # names this machine in every message (default user@host)
//! alert_window = "60s"                  # one blocked-traffic alert per sandbox+destination
//! alerts_per_minute = 10                # per sandbox per alert_window, then one summary
//! request_timeout = "12s"               # a Bot API call unanswered this long is retried
//!
//! [telemetry]                           # system, global or managed file
//! otlp_endpoint = "http://collector:4318"   # OTLP over HTTP (see the `telemetry` module)
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::check::{ConfigError, Cx, expand_path, pattern_help};
use crate::decision::{Rule, RuleSource};
use crate::pattern::{DomainPattern, PatternUse};
use crate::policy::{NetMode, PathRule};
use crate::telemetry::RawTelemetry;
use crate::tiers::preset;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFile {
    network: RawNetwork,
    proxy: crate::upstream::RawProxy,
    filesystem: RawFs,
    shell: RawShell,
    tiers: BTreeMap<String, RawTier>,
    env: RawEnv,
    daemon: RawDaemon,
    macos: RawMacos,
    telegram: Option<RawTelegram>,
    secrets: Vec<crate::intercept::RawSecret>,
    http_rules: Vec<crate::intercept::RawHttpRules>,
    tls: crate::intercept::RawTls,
    telemetry: Option<RawTelemetry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEnv {
    pass: Vec<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawShell {
    prompt_marker: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMacos {
    loopback_listen: Option<bool>,
    trustd: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDaemon {
    ask_timeout: Option<Spanned<String>>,
    event_retention: Option<Spanned<String>>,
    desktop_notifications: Option<bool>,
    questions_per_minute: Option<Spanned<u32>>,
    questions_per_minute_total: Option<Spanned<u32>>,
    events_per_minute: Option<Spanned<u32>>,
    ask: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawTelegram {
    token: Option<String>,
    token_file: Option<Spanned<String>>,
    alerts_per_minute: Option<Spanned<u32>>,
    chats: Vec<i64>,
    users: Vec<i64>,
    name: Option<Spanned<String>>,
    api_url: Option<String>,
    alert_window: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawNetwork {
    allow: Vec<Spanned<String>>,
    deny: Vec<Spanned<String>>,
    presets: Vec<Spanned<String>>,
    default_ports: Option<Spanned<Vec<u16>>>,
}

/// The most `[filesystem] scan_directories` may say: a scan of a million directories already
/// costs a launch seconds.
pub const MAX_SCAN_DIRECTORIES: usize = 1_000_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFs {
    allow_write: Vec<Spanned<String>>,
    presets: Vec<Spanned<String>>,
    deny_read: Vec<Spanned<String>>,
    protected: Vec<Spanned<String>>,
    unix_sockets: Vec<Spanned<String>>,
    git_writable: Option<bool>,
    scan_directories: Option<Spanned<i64>>,
    readable_home: Vec<Spanned<String>>,
    writable_dotfiles: Vec<Spanned<String>>,
    caches: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    base: Spanned<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    network: Option<Spanned<String>>,
    #[serde(default)]
    allow_write: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
}

/// A tier defined in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTier {
    /// Its name.
    pub name: String,
    /// The tier it narrows or extends.
    pub base: String,
    /// One line on what it is for.
    pub description: Option<String>,
    /// Network mode, when it differs from the base.
    pub network: Option<NetMode>,
    /// Extra writable paths.
    pub allow_write: Vec<PathRule>,
    /// Extra allow rules.
    pub allow: Vec<Rule>,
    /// Extra deny rules.
    pub deny: Vec<Rule>,
}

/// A configuration file, checked: every pattern parsed, every path absolute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckedFile {
    /// Allow rules (including presets, expanded).
    pub allow: Vec<Rule>,
    /// Deny rules.
    pub deny: Vec<Rule>,
    /// Writable paths (for tiers with a writable current directory).
    pub allow_write: Vec<PathRule>,
    /// Hidden paths.
    pub deny_read: Vec<PathRule>,
    /// Extra protected names.
    pub protected: Vec<String>,
    /// Allowed pathname unix sockets.
    pub unix_sockets: Vec<PathRule>,
    /// `[filesystem] git_writable`, when set.
    pub git_writable: Option<bool>,
    /// `[filesystem] scan_directories`, when set (1 to [`MAX_SCAN_DIRECTORIES`]).
    pub scan_directories: Option<usize>,
    /// `[filesystem] caches`, when set.
    pub caches: Option<crate::CacheMode>,
    /// `[filesystem] readable_home`: home entries readable beyond the built-in allowlist.
    pub readable_home: Vec<String>,
    /// `[env] pass`: secret-looking variables (names or patterns) passed to the command.
    pub env_pass: Vec<String>,
    /// `[shell] prompt_marker`, when set.
    pub prompt_marker: Option<bool>,
    /// `[filesystem] writable_dotfiles`: names added to the built-in allowlist of writable
    /// top-level entries, and (written `!name`) taken from it.
    pub writable_dotfiles: Vec<String>,
    /// `[network] default_ports`, when set: the ports an allow pattern without a port matches.
    pub default_ports: Option<Vec<u16>>,
    /// Tiers defined here.
    pub tiers: Vec<FileTier>,
    /// `[daemon]` settings (unset fields are `None`).
    pub daemon: DaemonSettings,
    /// `[macos]` settings (unset fields are `None`).
    pub macos: MacosSettings,
    /// `[telegram]`, when the section is present.
    pub telegram: Option<TelegramSettings>,
    /// `[proxy] upstream`, when set.
    pub upstream: Option<crate::upstream::UpstreamSettings>,
    /// `[[secrets]]`, `[[http_rules]]` and `[tls]`.
    pub intercept: crate::intercept::InterceptSettings,
    /// `[telemetry]`, when the section is present.
    pub telemetry: Option<crate::telemetry::TelemetrySettings>,
}

/// The `[macos]` section: ways out of the Seatbelt profile's defaults, each named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MacosSettings {
    /// `loopback_listen`: servers the command starts may listen on the host's loopback (off by
    /// default: there, unlike Linux, host processes and browser pages can reach them).
    pub loopback_listen: Option<bool>,
    /// `trustd = "allow"` (`Some(true)`): Security.framework certificate checks through trustd,
    /// which fetches OCSP/CRL/issuer URLs itself, past the proxy (off by default).
    pub trustd_allow: Option<bool>,
}

/// The `[daemon]` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonSettings {
    /// How long a held request waits for a person before it is denied.
    pub ask_timeout: Option<Duration>,
    /// How long events are kept.
    pub event_retention: Option<Duration>,
    /// Desktop notifications for questions.
    pub desktop_notifications: Option<bool>,
    /// New questions per sandbox per minute before they are denied without asking (≥ 1).
    pub questions_per_minute: Option<u32>,
    /// New questions of all sandboxes together per minute before they are denied without
    /// asking (≥ 1).
    pub questions_per_minute_total: Option<u32>,
    /// Traffic events stored per sandbox per minute after a burst (≥ 1); the rest are shown
    /// live only, and counted.
    pub events_per_minute: Option<u32>,
    /// What becomes of a destination no rule decides (`ask = "person"` or `"deny"`).
    pub ask: Option<crate::check::AskMode>,
}

/// The `[telegram]` section. `Debug` does not show the token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TelegramSettings {
    /// The bot token written in the file itself (discouraged: the daemon warns; use
    /// `token_file` or `SANDGATE_TELEGRAM_TOKEN`, which win over it).
    pub token: Option<String>,
    /// A file holding the token, readable by its owner only (mode 0600).
    pub token_file: Option<PathBuf>,
    /// Blocked-traffic alerts per sandbox per alert window, across destinations (≥ 1).
    pub alerts_per_minute: Option<u32>,
    /// The chats the bot obeys and posts to.
    pub chats: Vec<i64>,
    /// The Telegram user ids who may answer (buttons and commands). Empty: in a private chat
    /// its one user, in a group chat nobody.
    pub users: Vec<i64>,
    /// How every message names this machine and user (`alice@laptop`); `None`: the daemon's
    /// user and host name.
    pub name: Option<String>,
    /// Another Bot API server (a local one, or a test's).
    pub api_url: Option<String>,
    /// One blocked-traffic alert per sandbox+destination per window.
    pub alert_window: Option<Duration>,
    /// How long one Bot API call (a `getUpdates` long poll: beyond its poll time) may go
    /// unanswered before it is abandoned and retried; never zero.
    pub request_timeout: Option<Duration>,
}

impl fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramSettings")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("alerts_per_minute", &self.alerts_per_minute)
            .field("chats", &self.chats)
            .field("users", &self.users)
            .field("name", &self.name)
            .field("api_url", &self.api_url)
            .field("alert_window", &self.alert_window)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// A string of a TOML text that never closes: where it opens and how it is quoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Unclosed {
    /// Byte offset of its opening quote.
    at: usize,
    /// The opening delimiter: `"`, `'`, `"""` or `'''`.
    quote: &'static str,
}

impl Unclosed {
    fn message(&self) -> String {
        if self.quote.len() == 1 {
            format!(
                "unclosed string: the {} string that opens here does not end on this line",
                self.quote
            )
        } else {
            format!(
                "unclosed multi-line string: the {} string that opens here never ends",
                self.quote
            )
        }
    }

    fn help(&self) -> String {
        if self.quote.len() == 1 {
            format!(
                "close it with {q} on the same line (a {q}...{q} string cannot span lines)",
                q = self.quote
            )
        } else {
            format!("close it with {}", self.quote)
        }
    }
}

/// The first string in `text` that does not close: a `"` or `'` string that reaches the end of
/// its line, or a `"""`/`'''` string that reaches the end of the text. Comments are skipped; a
/// quote outside a comment always opens a string in TOML, so this agrees with the parser up to
/// the first such string.
fn unclosed_string(text: &str) -> Option<Unclosed> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => i = text[i..].find('\n').map_or(b.len(), |n| i + n),
            q @ (b'"' | b'\'') => {
                let triple = b[i..].starts_with(&[q, q, q]);
                let quote = match (q, triple) {
                    (b'"', false) => "\"",
                    (b'"', true) => "\"\"\"",
                    (_, false) => "'",
                    (_, true) => "'''",
                };
                // Only basic ("...") strings have escapes.
                let escapes = q == b'"';
                let open = Unclosed { at: i, quote };
                i += quote.len();
                loop {
                    match b.get(i) {
                        None => return Some(open),
                        Some(b'\n') if !triple => return Some(open),
                        // A backslash escapes the next character, except a line's end in a
                        // one-line string (which is unclosed there).
                        Some(b'\\') if escapes && (triple || b.get(i + 1) != Some(&b'\n')) => {
                            i += 2
                        }
                        Some(&c) if c == q && !triple => {
                            i += 1;
                            break;
                        }
                        Some(&c) if c == q && b[i..].starts_with(&[q, q, q]) => {
                            // Up to two more quotes belong to the content (`""""` ends it).
                            i += 3;
                            for _ in 0..2 {
                                if b.get(i) == Some(&q) {
                                    i += 1;
                                }
                            }
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Parses and checks the text of a configuration file. `home` expands a leading `~/`.
pub fn parse(path: &Path, text: &str, home: Option<&Path>) -> Result<CheckedFile, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        // The parser notices an unclosed string where it gives up (the next line, the end of
        // the file); the mistake is where the string opens.
        if let Some(open) = unclosed_string(text)
            && e.span().is_none_or(|s| open.at <= s.start)
        {
            return ConfigError::at(
                path,
                text,
                Some(open.at..open.at),
                open.message(),
                open.help(),
            );
        }
        let message = e.message().trim().to_owned();
        let help = if message.starts_with("unknown field") {
            "remove the key or fix its spelling; docs/configuration.md lists every key"
        } else if message.contains("invalid type") {
            "check the value's type: lists are written [\"a\", \"b\"], strings in double quotes"
        } else {
            "fix the TOML syntax at this position"
        };
        ConfigError::at(path, text, e.span(), message, help)
    })?;
    let cx = Cx { path, text, home };
    let mut out = CheckedFile {
        allow: cx.patterns(&raw.network.allow, PatternUse::Allow)?,
        deny: cx.patterns(&raw.network.deny, PatternUse::Deny)?,
        allow_write: cx.paths(&raw.filesystem.allow_write)?,
        deny_read: cx.paths(&raw.filesystem.deny_read)?,
        protected: Vec::new(),
        unix_sockets: cx.paths(&raw.filesystem.unix_sockets)?,
        git_writable: raw.filesystem.git_writable,
        scan_directories: match &raw.filesystem.scan_directories {
            None => None,
            Some(n) => Some(
                usize::try_from(*n.get_ref())
                    .ok()
                    .filter(|n| (1..=MAX_SCAN_DIRECTORIES).contains(n))
                    .ok_or_else(|| {
                        cx.err(
                            n.span(),
                            format!("scan_directories = {} is out of range", n.get_ref()),
                            format!(
                                "give a number of directories from 1 to {MAX_SCAN_DIRECTORIES}"
                            ),
                        )
                    })?,
            ),
        },
        caches: match &raw.filesystem.caches {
            None => None,
            Some(m) => Some(crate::CacheMode::from_name(m.get_ref()).ok_or_else(|| {
                cx.err(
                    m.span(),
                    format!("unknown cache mode {:?}", m.get_ref()),
                    "caches = \"project\" (a copy-on-write layer per project, the default), \
                     \"shared\" (one layer for every project) or \"off\" (caches read-only)",
                )
            })?),
        },
        readable_home: Vec::new(),
        env_pass: Vec::new(),
        prompt_marker: raw.shell.prompt_marker,
        writable_dotfiles: Vec::new(),
        default_ports: cx.default_ports(raw.network.default_ports.as_ref())?,
        tiers: Vec::new(),
        macos: MacosSettings {
            loopback_listen: raw.macos.loopback_listen,
            trustd_allow: match &raw.macos.trustd {
                None => None,
                Some(v) => Some(match v.get_ref().as_str() {
                    "allow" => true,
                    "deny" => false,
                    other => {
                        return Err(cx.err(
                            v.span(),
                            format!("unknown trustd setting {other:?}"),
                            "trustd = \"deny\" (the default: the proxy stays the only way out) \
                             or \"allow\" (go, gh, terraform verify certificates; trustd then \
                             fetches URLs named in certificates past the proxy)",
                        ));
                    }
                }),
            },
        },
        daemon: DaemonSettings {
            ask_timeout: cx.duration(raw.daemon.ask_timeout.as_ref())?,
            event_retention: cx.duration(raw.daemon.event_retention.as_ref())?,
            desktop_notifications: raw.daemon.desktop_notifications,
            questions_per_minute: cx.at_least_one(raw.daemon.questions_per_minute.as_ref())?,
            questions_per_minute_total: cx
                .at_least_one(raw.daemon.questions_per_minute_total.as_ref())?,
            events_per_minute: cx.at_least_one(raw.daemon.events_per_minute.as_ref())?,
            ask: cx.ask_mode(raw.daemon.ask.as_ref())?,
        },
        telegram: None,
        upstream: None,
        intercept: Default::default(),
        telemetry: None,
    };
    out.telemetry = raw.telemetry.as_ref().map(|t| crate::telemetry::check(&cx, t)).transpose()?;
    out.upstream = crate::upstream::check(&cx, &raw.proxy)?;
    out.intercept = crate::intercept::check(&cx, &raw.secrets, &raw.http_rules, &raw.tls)?;
    if let Some(t) = raw.telegram {
        out.telegram = Some(TelegramSettings {
            alert_window: cx.duration(t.alert_window.as_ref())?,
            request_timeout: cx.nonzero_duration(t.request_timeout.as_ref())?,
            token_file: t
                .token_file
                .map(|f| {
                    expand_path(f.get_ref(), home).ok_or_else(|| {
                        cx.err(
                            f.span(),
                            format!("token_file {:?} is not absolute", f.get_ref()),
                            "write an absolute path, or one starting with ~/",
                        )
                    })
                })
                .transpose()?,
            alerts_per_minute: cx.at_least_one(t.alerts_per_minute.as_ref())?,
            token: t.token,
            chats: t.chats,
            users: t.users,
            name: t
                .name
                .map(|n| {
                    let name = n.get_ref().trim();
                    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                        return Err(cx.err(
                            n.span(),
                            format!("name {:?} cannot name this machine in a chat", n.get_ref()),
                            "write 1 to 64 printable characters, e.g. \"alice@laptop\"",
                        ));
                    }
                    Ok(name.to_owned())
                })
                .transpose()?,
            api_url: t.api_url,
        });
    }
    for name in &raw.network.presets {
        let Some(patterns) = preset(name.get_ref()) else {
            let known: Vec<&str> = crate::tiers::PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(cx.err(
                name.span(),
                format!("unknown preset {:?}", name.get_ref()),
                format!("known presets: {}", known.join(", ")),
            ));
        };
        for p in patterns {
            let pattern = DomainPattern::parse(p, PatternUse::Allow)
                .map_err(|e| cx.err(name.span(), e.to_string(), "report this as a bug"))?;
            out.allow.push(Rule {
                pattern: Some(pattern),
                source: RuleSource::Preset(name.get_ref().clone()),
            });
        }
    }
    // `[filesystem] presets` bound the host's live caches writable, which let a sandbox plant code
    // the host's next build ran. Caches are copy-on-write now, with no configuration; the key
    // stays known so that an old file gets this message rather than "unknown field".
    if let Some(first) = raw.filesystem.presets.first() {
        return Err(cx.err(
            first.span(),
            "[filesystem] presets is gone: package caches are copy-on-write in every tier that \
             builds or reaches the network, with no configuration (the host's caches are never \
             written)"
                .into(),
            "remove the presets line; `[filesystem] caches = \"shared\"` shares one layer across \
             projects, and a path you really want writable on the host goes in allow_write",
        ));
    }
    for p in &raw.filesystem.protected {
        out.protected.push(cx.protected_entry(p)?);
    }
    for e in &raw.filesystem.readable_home {
        let entry = crate::secrets::check_home_entry(e.get_ref()).map_err(|why| {
            cx.err(
                e.span(),
                format!("readable_home entry {:?} {why}", e.get_ref()),
                "name an entry of the home directory, e.g. \".sdkman\" or \".config/mytool\"",
            )
        })?;
        out.readable_home.push(entry);
    }
    for v in &raw.env.pass {
        let name = v.get_ref();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_*".contains(&b))
        {
            return Err(cx.err(
                v.span(),
                format!("[env] pass entry {name:?} is not a variable name or pattern"),
                "write a name like \"GH_TOKEN\", or a pattern like \"MYAPP_*\"",
            ));
        }
        out.env_pass.push(name.clone());
    }
    for p in &raw.filesystem.writable_dotfiles {
        let entry = p.get_ref();
        if let Some(why) =
            crate::dotfiles::invalid_entry_name(entry.strip_prefix('!').unwrap_or(entry))
        {
            return Err(cx.err(
                p.span(),
                format!("writable_dotfiles entry {entry:?}: {why}"),
                "write a name at the top of the writable directory, e.g. \".eslintcache\" or \".out*\", or \"!.venv\" to take a built-in one away",
            ));
        }
        out.writable_dotfiles.push(entry.clone());
    }
    for (name, tier) in raw.tiers {
        // The name goes into messages, variables and the macOS profile: plain names only.
        let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
        if name.is_empty() || name.len() > 64 || !name.bytes().all(plain) {
            return Err(cx.err(
                tier.base.span(),
                format!("tier name {name:?} has characters outside [a-z0-9_-]"),
                "name the tier with lower-case letters, digits, '_' and '-' (at most 64)",
            ));
        }
        if crate::tiers::builtin_tiers().iter().any(|t| t.name == name) {
            return Err(cx.err(
                tier.base.span(),
                format!("tier {name:?} is built in and cannot be redefined"),
                format!("give the tier another name and set base = {name:?}"),
            ));
        }
        let network = match &tier.network {
            None => None,
            Some(n) => Some(NetMode::parse(n.get_ref()).ok_or_else(|| {
                cx.err(
                    n.span(),
                    format!("unknown network mode {:?}", n.get_ref()),
                    "use \"none\" or \"proxy\"",
                )
            })?),
        };
        out.tiers.push(FileTier {
            name,
            base: tier.base.get_ref().clone(),
            description: tier.description,
            network,
            allow_write: cx.paths(&tier.allow_write)?,
            allow: cx.patterns(&tier.allow, PatternUse::Allow)?,
            deny: cx.patterns(&tier.deny, PatternUse::Deny)?,
        });
    }
    Ok(out)
}

/// Adds `path` to `[filesystem] allow_write` of the file at `file` (created if missing), keeping
/// the file's formatting and comments. Returns `false` when it was already there.
pub fn add_path(file: &Path, path: &Path) -> Result<bool, ConfigError> {
    edit_allow_write(file, |arr| {
        let s = path.to_string_lossy();
        if arr.iter().any(|v| v.as_str() == Some(&s)) {
            return false;
        }
        arr.push(s.as_ref());
        true
    })
}

/// Removes `path` from `[filesystem] allow_write` of the file at `file`. Returns `false` when it
/// was not there.
pub fn remove_path(file: &Path, path: &Path) -> Result<bool, ConfigError> {
    edit_allow_write(file, |arr| {
        let s = path.to_string_lossy();
        let before = arr.len();
        arr.retain(|v| v.as_str() != Some(&s));
        arr.len() != before
    })
}

fn edit_allow_write(
    file: &Path,
    change: impl FnOnce(&mut toml_edit::Array) -> bool,
) -> Result<bool, ConfigError> {
    edit_list(file, "filesystem", "allow_write", change)
}

/// Adds `patterns` to `[network] allow` of the file at `file` (created if absent), keeping its
/// comments and layout; patterns already there are skipped. Returns how many were added.
pub fn add_allow(file: &Path, patterns: &[String]) -> Result<usize, ConfigError> {
    for p in patterns {
        crate::DomainPattern::parse(p, crate::PatternUse::Allow)
            .map_err(|e| ConfigError::file(file, e.to_string(), pattern_help(&e.kind)))?;
    }
    let mut added = 0;
    edit_list(file, "network", "allow", |arr| {
        for p in patterns {
            if !arr.iter().any(|v| v.as_str() == Some(p)) {
                arr.push(p.as_str());
                added += 1;
            }
        }
        added > 0
    })?;
    Ok(added)
}

/// Changes the list `table.key` of the file at `file` with `change` (which says whether it
/// changed anything), writing it back atomically; a file that does not load is not touched.
fn edit_list(
    file: &Path,
    table: &str,
    key: &str,
    change: impl FnOnce(&mut toml_edit::Array) -> bool,
) -> Result<bool, ConfigError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(ConfigError::file(file, format!("cannot read: {e}"), "check permissions"));
        }
    };
    // Refuse to edit a file that would not load: the person should see and fix the error first.
    parse(file, &text, crate::check::home_dir().as_deref())?;
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        ConfigError::at(file, &text, e.span(), e.message().to_owned(), "fix the TOML syntax")
    })?;
    let section = doc
        .entry(table)
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| {
            ConfigError::file(
                file,
                format!("`{table}` is not a table"),
                format!("make it [{table}]"),
            )
        })?;
    let arr = section
        .entry(key)
        .or_insert(toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| {
            ConfigError::file(file, format!("`{table}.{key}` is not a list"), "make it a list")
        })?;
    if !change(arr) {
        return Ok(false);
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            ConfigError::file(
                file,
                format!("cannot create {}: {e}", dir.display()),
                "check permissions",
            )
        })?;
    }
    let tmp = file.with_extension("toml.tmp");
    std::fs::write(&tmp, doc.to_string())
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| ConfigError::file(file, format!("cannot write: {e}"), "check permissions"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macos_ways_out_are_named_and_off_by_default() {
        let m = |text: &str| parse(Path::new("c.toml"), text, None).map(|f| f.macos);
        // (text, loopback_listen, trustd_allow)
        for (text, listen, trustd) in [
            ("", None, None),
            ("[macos]\nloopback_listen = true\n", Some(true), None),
            ("[macos]\ntrustd = \"allow\"\n", None, Some(true)),
            ("[macos]\ntrustd = \"deny\"\nloopback_listen = false\n", Some(false), Some(false)),
        ] {
            let got = m(text).unwrap();
            assert_eq!((got.loopback_listen, got.trustd_allow), (listen, trustd), "{text}");
        }
        let e = m("[macos]\ntrustd = \"yes\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown trustd setting") && e.line == 2, "{e}");
        assert!(m("[macos]\nlisten = true\n").is_err(), "unknown keys are errors");
    }

    fn err(text: &str) -> ConfigError {
        parse(Path::new("c.toml"), text, Some(Path::new("/home/u"))).unwrap_err()
    }

    #[test]
    fn tier_names_outside_a_z_0_9_are_refused() {
        for name in ["\"x\\n(allow default)\"", "\"Build\"", "\"a b\"", "\"\""] {
            let e = err(&format!("[tiers.{name}]\nbase = \"build\"\n"));
            assert!(e.message.contains("outside [a-z0-9_-]"), "{name}: {e}");
        }
        let ok = parse(Path::new("c.toml"), "[tiers.build-offline_2]\nbase = \"build\"\n", None);
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn default_ports_are_a_non_empty_list_of_real_ports() {
        let ok = |t: &str| parse(Path::new("c.toml"), t, None).unwrap().default_ports;
        assert_eq!(ok("[network]\ndefault_ports = [80, 443]\n"), Some(vec![80, 443]));
        assert_eq!(ok("[network]\nallow = [\"a.com\"]\n"), None);
        let e = err("[network]\ndefault_ports = []\n");
        assert!(e.to_string().contains("default_ports is empty"), "{e}");
        assert!(e.to_string().contains("c.toml:2"), "{e}");
        assert!(err("[network]\ndefault_ports = [0]\n").to_string().contains("port 0"));
        assert!(err("[network]\ndefault_ports = [70000]\n").to_string().contains("c.toml:2"));
        assert!(err("[network]\ndefault_ports = \"443\"\n").to_string().contains("c.toml:2"));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = err("[network]\nallow = [\"ok.com\"]\nalow = [\"x\"]\n");
        assert_eq!((e.line, e.column), (3, 1), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let e = err("[network]\nallow = [\"ok.com\",\n  \"*.com\"]\n");
        assert_eq!((e.line, e.column), (3, 3), "{e}");
        assert!(e.to_string().contains("c.toml:3:3"), "{e}");
        let e = err("[filesystem]\nallow_write = [\"rel/path\"]\n");
        assert_eq!(e.line, 2);
        let e = err("[network\n");
        assert_eq!(e.line, 1);
        let e = err("[tiers.x]\nbase = \"build\"\nnetwork = \"wifi\"\n");
        assert_eq!((e.line, e.column), (3, 11), "{e}");
        let e = err("[network]\npresets = [\"nope\"]\n");
        assert!(e.help.contains("registries"));
        let e = err("[filesystem]\npresets = [\"cargo\", \"nope\"]\n");
        assert_eq!((e.line, e.column), (2, 12), "{e}");
        assert!(e.message.contains("copy-on-write") && e.help.contains("remove"), "{e}");
        let e = err("[filesystem]\ncaches = \"on\"\n");
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        assert!(e.help.contains("\"project\"") && e.help.contains("\"off\""), "{e}");
    }

    #[test]
    fn an_unclosed_string_is_reported_where_it_opens() {
        // (text, line, column, delimiter named)
        let rows = [
            ("[network]\nallow = [\"crates.io\", \"pypi.org]\ndeny = []\n", 2, 23, "\""),
            ("[network]\nallow = [\"a\n", 2, 10, "\""),
            ("[network]\nallow = ['crates.io\n", 2, 10, "'"),
            ("[network]\nallow = [\"a\\\"b\n", 2, 10, "\""),
            ("[network]\nallow = \"\"\"crates.io\n\nfoo\n", 2, 9, "\"\"\""),
            ("[network]\nallow = '''x\n", 2, 9, "'''"),
            ("# \"a comment\n[network]\nallow = [\"x\", \"y]\n", 3, 15, "\""),
            ("[tiers.\"x]\nbase = \"build\"\n", 1, 8, "\""),
            ("[shell]\nprompt_marker = \"\"\"a\"\"\"\"\n[network]\nallow = [\"b]\n", 4, 10, "\""),
        ];
        for (text, line, column, quote) in rows {
            let e = err(text);
            assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
            assert!(e.message.starts_with("unclosed"), "{text:?}: {e}");
            assert!(e.help.contains(&format!("close it with {quote}")), "{text:?}: {e}");
        }
        // Other syntax errors keep the parser's position; closed strings of every kind (and
        // quotes in comments and escapes) are no unclosed string.
        let e = err("[network\nallow = [\"x\"]\n");
        assert_eq!((e.line, e.column), (1, 9), "{e}");
        assert!(e.message.contains("unclosed table"), "{e}");
        let fine = "# it's \"fine\"\n[network]\nallow = [\"a\\\"b\", 'c\\', \"\"\"d\"\"\"\"]\n\
                    deny = ['''\n'e'\n''']\n";
        assert_eq!(unclosed_string(fine), None);
    }

    #[test]
    fn a_pattern_with_a_path_says_it_has_none() {
        let e = err("[network]\nallow = [\"ok.org\", \"pypi.org/simple\"]\n");
        assert_eq!((e.line, e.column), (2, 20), "{e}");
        assert!(e.message.contains("a pattern has no path") && e.message.contains("`pypi.org`"));
        assert!(e.help.contains("[[http_rules]]"), "{e}");
    }

    #[test]
    fn the_cache_mode_is_read_and_defaults_to_none() {
        let mode = |text: &str| parse(Path::new("c.toml"), text, None).unwrap().caches;
        assert_eq!(mode(""), None);
        assert_eq!(mode("[filesystem]\ncaches = \"shared\"\n"), Some(crate::CacheMode::Shared));
        assert_eq!(mode("[filesystem]\ncaches = \"off\"\n"), Some(crate::CacheMode::Off));
    }

    #[test]
    fn readable_home_and_env_pass_are_checked() {
        let f = parse(
            Path::new("/c.toml"),
            "[filesystem]\nreadable_home = [\"~/.sdkman\", \".config/x/\"]\n\
             [env]\npass = [\"GH_TOKEN\", \"MYAPP_*\"]\n",
            Some(Path::new("/home/u")),
        )
        .unwrap();
        assert_eq!(f.readable_home, [".sdkman", ".config/x"]);
        assert_eq!(f.env_pass, ["GH_TOKEN", "MYAPP_*"]);
        let e = err("[filesystem]\nreadable_home = [\"/etc\"]\n");
        assert_eq!((e.line, e.column), (2, 18), "{e}");
        let e = err("[filesystem]\nreadable_home = [\".config/../.ssh\"]\n");
        assert!(e.message.contains(".."), "{e}");
        let e = err("[env]\npass = [\"A=B\"]\n");
        assert_eq!((e.line, e.column), (2, 9), "{e}");
        assert!(err("[env]\nkeep = []\n").message.contains("unknown field"));
    }

    #[test]
    fn daemon_and_telegram_sections() {
        let f = parse(
            Path::new("/c.toml"),
            "[daemon]\nask_timeout = \"90s\"\nevent_retention = \"1w\"\n\
             [telegram]\ntoken = \"1:abc\"\nchats = [5, -7]\nalert_window = \"2m\"\n\
             request_timeout = \"3s\"\n",
            None,
        )
        .unwrap();
        assert_eq!(f.daemon.ask_timeout, Some(Duration::from_secs(90)));
        assert_eq!(f.daemon.event_retention, Some(Duration::from_secs(7 * 86_400)));
        let t = f.telegram.unwrap();
        assert_eq!(t.chats, vec![5, -7]);
        assert_eq!(t.alert_window, Some(Duration::from_secs(120)));
        assert_eq!(t.request_timeout, Some(Duration::from_secs(3)));
        let e = err("[telegram]\nrequest_timeout = \"0s\"\n");
        assert_eq!((e.line, e.column), (2, 19), "{e}");
        assert!(e.message.contains("zero"), "{e}");
        assert!(!format!("{t:?}").contains("abc"), "the token is never shown");
        let e = err("[daemon]\nask_timeout = \"soon\"\n");
        assert_eq!((e.line, e.column), (2, 15));
        assert!(err("[telegram]\nchat = [1]\n").message.contains("unknown field"));
    }

    #[test]
    fn telegram_users_and_name() {
        let t = parse(
            Path::new("/c.toml"),
            "[telegram]\nchats = [-100]\nusers = [5, 6]\nname = \" alice@laptop \"\n",
            None,
        )
        .unwrap()
        .telegram
        .unwrap();
        assert_eq!((t.users, t.name.as_deref()), (vec![5, 6], Some("alice@laptop")));
        for bad in ["\"\"", "\"a\\nb\"", &format!("\"{}\"", "x".repeat(65))] {
            let e = err(&format!("[telegram]\nname = {bad}\n"));
            assert_eq!((e.line, e.column), (2, 8), "{bad}: {e}");
        }
    }

    #[test]
    fn budgets_and_the_token_file() {
        let f = parse(
            Path::new("/c.toml"),
            "[daemon]\nquestions_per_minute = 5\nquestions_per_minute_total = 7\nevents_per_minute = 9\n\
             [telegram]\nchats = [1]\n\
             token_file = \"~/t\"\nalerts_per_minute = 3\n",
            Some(Path::new("/home/u")),
        )
        .unwrap();
        assert_eq!(f.daemon.questions_per_minute, Some(5));
        assert_eq!(f.daemon.questions_per_minute_total, Some(7));
        assert_eq!(f.daemon.events_per_minute, Some(9));
        assert_eq!(err("[daemon]\nevents_per_minute = 0\n").line, 2);
        let t = f.telegram.unwrap();
        assert_eq!(t.token_file.as_deref(), Some(Path::new("/home/u/t")));
        assert_eq!((t.alerts_per_minute, t.token), (Some(3), None));
        let e = err("[daemon]\nquestions_per_minute = 0\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("refuse everything"), "{e}");
        assert!(err("[telegram]\nalerts_per_minute = 0\n").message.contains("refuse"));
        assert!(err("[telegram]\ntoken_file = \"rel/t\"\n").message.contains("not absolute"));
    }

    #[test]
    fn parses_a_full_file() {
        let text = r#"
[network]
allow = ["crates.io", "*.github.com:443"]
deny = ["evil.example.com"]
presets = ["python"]
[filesystem]
allow_write = ["~/.cargo/registry", "/opt/cache"]
deny_read = ["~/secrets"]
protected = ["Makefile.local"]
writable_dotfiles = [".out*", "!.venv"]
[tiers.build-offline]
base = "build"
network = "none"
"#;
        let f = parse(Path::new("/c.toml"), text, Some(Path::new("/home/u"))).unwrap();
        assert_eq!(f.allow.len(), 4);
        assert_eq!(f.allow[0].source, RuleSource::File { path: "/c.toml".into(), line: 3 });
        assert_eq!(f.allow_write[0].path, Path::new("/home/u/.cargo/registry"));
        assert_eq!(f.tiers[0].network, Some(NetMode::None));
        assert_eq!(f.writable_dotfiles, vec![".out*".to_owned(), "!.venv".to_owned()]);
    }

    #[test]
    fn writable_dotfiles_entries_are_names_at_the_top() {
        for bad in ["\"a/b\"", "\".git\"", "\"!\"", "\"\"", "\"a*b\"", "\"..\""] {
            let text = format!("[filesystem]\nwritable_dotfiles = [{bad}]\n");
            let e = parse(Path::new("/c.toml"), &text, None).unwrap_err();
            assert_eq!((e.line, e.column), (2, 22), "{bad}: {e}");
            assert!(e.message.contains("writable_dotfiles"), "{e}");
        }
    }

    #[test]
    fn edits_keep_comments() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, "# mine\n[network]\nallow = [\"a.com\"] # keep\n").unwrap();
        assert!(add_path(&file, Path::new("/x/y")).unwrap());
        assert!(!add_path(&file, Path::new("/x/y")).unwrap());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("# mine") && text.contains("# keep") && text.contains("/x/y"));
        assert!(remove_path(&file, Path::new("/x/y")).unwrap());
        assert!(!remove_path(&file, Path::new("/x/y")).unwrap());
    }
}
