//! sandgate's policy model: what a sandbox may read, write and reach.
//!
//! This crate parses and normalises hosts and domain patterns, compiles allow/deny lists for
//! microsecond decisions, defines the tiers (`run`, `net`, `build`, and tiers from config), derives
//! narrower child policies, and loads the configuration layers (system defaults, global file,
//! per-directory file, command-line flags, and above them the managed layer no user can widen) with errors that name file, line and column. It holds, as data, what a
//! sandbox must not see by default (the home directory allowlist, the system's secret files,
//! secret-looking variable names) and decides entries against it.
//!
//! The policy commands' reports are values here ([`NetCheck`] for `sandgate check`,
//! [`TierSummary`], [`WritablePath`]), as are the `sandgate learn` proposal ([`learn`]) and the
//! `config edit` transaction ([`edit`]); the binary only prints them.
//!
//! It does no I/O beyond reading and editing configuration files (and asking whether configured
//! paths exist): enforcing a policy is the job of the launcher (`sandgate-sandbox`), the proxy
//! (`sandgate-proxy`) and the firewall (`sandgate-firewall`).
//!
//! # Why these choices
//!
//! - Own pattern matcher ([`PatternSet`]), not `globset`: patterns have two name shapes (exact and
//!   `*.` suffix), answered by hashing the host and each label-aligned suffix — a few probes for
//!   10,000 patterns, and no glob metacharacter in a host name can widen a match (`matcher.rs`).
//! - `toml_edit` beside `toml`: commands that add patterns to a person's config file edit it in
//!   place and keep their comments and layout; `toml` only reads.
//! - `idna`: names are compared in one normal form (lowercase A-labels), so `ÉXAMPLE.com` and
//!   `xn--xample-9ua.com` are one host to every wall.

#![forbid(unsafe_code)]

mod caches;
mod check;
mod decision;
mod dotfiles;
pub mod edit;
mod file;
mod grant;
mod host;
mod intercept;
mod layers;
pub mod learn;
mod managed;
mod matcher;
mod pattern;
mod policy;
mod process;
mod project;
mod report;
mod roots;
mod sandbox_id;
mod secrets;
mod telemetry;
mod text;
mod tiers;
mod upstream;

pub use caches::{CacheMode, PackageCache, cache_names, package_caches, program_dirs};
pub use check::{AskMode, ConfigError, parse_duration};
pub use decision::{Decision, Rule, RuleSource};
pub use dotfiles::{
    Discovery, HostToolFile, InvalidToolLine, ToolFileKind, host_tool_files, names_of, top_autorun,
    writable_dotfiles,
};
pub use file::{
    CheckedFile, DaemonSettings, FileTier, MacosSettings, TelegramSettings, add_allow, add_path,
    parse as parse_config, remove_path,
};
pub use grant::{Effect, GrantTarget};
pub use host::{DomainName, Host, InvalidHost, InvalidTarget, MAX_HOST_LEN, Target, canonical_ip};
pub use intercept::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_SECRET_TTL, HttpRule, HttpRules, InterceptSettings, Origin,
    Secret, SecretSource, placeholder,
};
pub use layers::{Config, ConfigPaths, LoadedFile, Overrides, PolicyError};
pub use managed::{
    Blocked, MANAGED_FILE, Managed, Ownership, SYSTEM_DIR, SYSTEM_FILE, TEST_SYSTEM_DIR_VAR,
    system_dir, trust,
};
pub use matcher::PatternSet;
pub use pattern::{
    DomainPattern, HostPattern, InvalidPattern, PatternErrorKind, PatternUse, is_public_suffix,
};
pub use policy::{
    FsPolicy, Narrowing, NetMode, NetworkPolicy, PathRule, PermissionEscalation, Policy,
};
pub use process::{MAX_COMMAND_CHARS, ProcessInfo, command_line};
pub use project::{project_key, project_root};
pub use report::{ConfigFile, HttpRulesInfo, NetCheck, TierSummary, WritablePath};
pub use roots::{HOME_PLACES, RootRefusal, RootRefusalKind, RootRule, SHARED_DIRS, SYSTEM_PLACES};
pub use sandbox_id::{InvalidSandboxId, SandboxId};
pub use secrets::{
    EnvFilter, HOME_READABLE, HomeAllowlist, HomeVerdict, SECRET_ENV, SYSTEM_SECRETS, data_entries,
    sanitized_config, wildcard,
};
pub use telemetry::{OtlpEndpoint, TelemetrySettings};
pub use text::{MAX_SHOWN, is_unsafe_char, sanitize};
pub use tiers::{
    DEFAULT_HIDDEN, DEFAULT_PROTECTED, HOME_AUTORUN, PRESETS, SHELL_RC, TierDef, builtin_tiers,
    preset,
};
pub use upstream::{CredentialSource, UpstreamSettings};
