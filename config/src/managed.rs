//! The system layers an administrator places under `/etc/sandgate`:
//!
//! - `managed.toml`, the **managed layer**: above every other layer, and nothing below it can
//!   widen it. Its deny patterns are decided first; with `allow_only_managed = true` its allow list
//!   is a ceiling (nothing outside it may be allowed by a configuration file, a flag or a person's
//!   answer on any channel); `[filesystem] locked = true` keeps every tier's filesystem walls at
//!   sandgate's defaults plus this file; its `[daemon]` settings win over the user's.
//! - `config.toml`, the **system defaults**: the lowest layer, in the format of a user's file,
//!   which the user's own files extend as usual.
//!
//! Both must be owned by root and not writable by group or others, and so must every directory
//! above them (a world-writable directory only with the sticky bit): otherwise anyone could edit
//! or replace them. A file that fails this is refused with an error, never ignored: ignoring the
//! managed file would open what the administrator closed.
//!
//! # Where they are
//!
//! Always `/etc/sandgate` in a release build: no variable, flag or file a user controls can move
//! it. Debug builds (the test builds; nobody ships one) also read `SANDGATE_TEST_SYSTEM_DIR`, so
//! the end-to-end suite can place a managed file without touching the machine's `/etc`. The
//! ownership rules above still apply to that directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::check::{ConfigError, Cx};
use crate::decision::{Rule, RuleSource};
use crate::file::DaemonSettings;
use crate::matcher::PatternSet;
use crate::pattern::{DomainPattern, PatternUse};
use crate::policy::{FsPolicy, ManagedNet, PathRule};

/// Where the system layers are in a release build.
pub const SYSTEM_DIR: &str = "/etc/sandgate";

/// The variable a debug (test) build reads instead of [`SYSTEM_DIR`]; release builds ignore it.
pub const TEST_SYSTEM_DIR_VAR: &str = "SANDGATE_TEST_SYSTEM_DIR";

/// The managed file's name in the system directory.
pub const MANAGED_FILE: &str = "managed.toml";

/// The system defaults file's name in the system directory.
pub const SYSTEM_FILE: &str = "config.toml";

/// The directory of the system layers: [`SYSTEM_DIR`], or in a debug build
/// `$SANDGATE_TEST_SYSTEM_DIR` when it is an absolute path.
pub fn system_dir() -> PathBuf {
    #[cfg(debug_assertions)]
    if let Some(dir) =
        std::env::var_os(TEST_SYSTEM_DIR_VAR).map(PathBuf::from).filter(|p| p.is_absolute())
    {
        return dir;
    }
    PathBuf::from(SYSTEM_DIR)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawManaged {
    network: RawNetwork,
    filesystem: RawFs,
    daemon: RawDaemon,
    telemetry: Option<crate::telemetry::RawTelemetry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawNetwork {
    allow: Vec<Spanned<String>>,
    deny: Vec<Spanned<String>>,
    presets: Vec<Spanned<String>>,
    allow_only_managed: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFs {
    deny_read: Vec<Spanned<String>>,
    protected: Vec<Spanned<String>>,
    locked: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDaemon {
    ask_timeout: Option<Spanned<String>>,
    ask: Option<Spanned<String>>,
}

/// The managed layer (`/etc/sandgate/managed.toml`), checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Managed {
    /// Where it is.
    pub path: PathBuf,
    /// Allowed for everyone (presets expanded); with `allow_only_managed`, the only destinations
    /// anything may allow.
    pub allow: Vec<Rule>,
    /// Denied for everyone, above every allow rule, flag and grant.
    pub deny: Vec<Rule>,
    /// `[network] allow_only_managed`: the allow list is a ceiling.
    pub allow_only_managed: bool,
    /// `[filesystem] deny_read`: hidden in every tier.
    pub deny_read: Vec<PathRule>,
    /// `[filesystem] protected`: read-only inside every writable path.
    pub protected: Vec<String>,
    /// `[filesystem] locked`: the user's files and flags cannot widen a tier's filesystem walls
    /// (no writable paths beyond the working directory, no readable home entries, writable
    /// dot-entries, unix sockets, writable `.git`, shared cache layer or passed secret variables
    /// beyond sandgate's defaults).
    pub fs_locked: bool,
    /// `[daemon]` settings that win over every other file's (`ask_timeout`, `ask`).
    pub daemon: DaemonSettings,
    /// `[telemetry]`, when the section is present: it wins whole over every other file's (a
    /// section without an endpoint turns export off for everyone).
    pub telemetry: Option<crate::telemetry::TelemetrySettings>,
}

/// Why the managed layer refuses something a person, a flag or a file asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} is blocked by your organisation's policy ({path}): {why}")]
pub struct Blocked {
    /// What was asked for (`allowing evil.example`, `--allow-write /srv`).
    pub what: String,
    /// The managed file.
    pub path: String,
    /// Which of its rules refuses it.
    pub why: String,
}

impl Managed {
    /// Parses the text of a managed file (`home` expands `~/` in paths, as in any file).
    pub fn parse(path: &Path, text: &str, home: Option<&Path>) -> Result<Managed, ConfigError> {
        let raw: RawManaged = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().to_owned();
            let help = if message.starts_with("unknown field") {
                "the managed file knows [network] allow, deny, presets, allow_only_managed; \
                 [filesystem] deny_read, protected, locked; [daemon] ask_timeout, ask; \
                 [telemetry] otlp_endpoint, headers, extra_roots, interval (docs/teams.md)"
            } else {
                "fix the TOML syntax at this position"
            };
            ConfigError::at(path, text, e.span(), message, help)
        })?;
        let cx = Cx { path, text, home };
        let managed_source = |rules: Vec<Rule>| -> Vec<Rule> {
            rules
                .into_iter()
                .map(|r| Rule {
                    source: match r.source {
                        RuleSource::File { path, line } => RuleSource::Managed { path, line },
                        other => other,
                    },
                    ..r
                })
                .collect()
        };
        let mut allow = managed_source(cx.patterns(&raw.network.allow, PatternUse::Allow)?);
        for name in &raw.network.presets {
            let Some(patterns) = crate::tiers::preset(name.get_ref()) else {
                let known: Vec<&str> = crate::tiers::PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(cx.err(
                    name.span(),
                    format!("unknown preset {:?}", name.get_ref()),
                    format!("known presets: {}", known.join(", ")),
                ));
            };
            let line = cx.line(&name.span());
            for p in patterns {
                let pattern = DomainPattern::parse(p, PatternUse::Allow)
                    .map_err(|e| cx.err(name.span(), e.to_string(), "report this as a bug"))?;
                allow.push(Rule {
                    pattern: Some(pattern),
                    source: RuleSource::Managed { path: path.to_owned(), line },
                });
            }
        }
        let mut protected = Vec::new();
        for p in &raw.filesystem.protected {
            protected.push(cx.protected_entry(p)?);
        }
        Ok(Managed {
            path: path.to_owned(),
            allow,
            deny: managed_source(cx.patterns(&raw.network.deny, PatternUse::Deny)?),
            allow_only_managed: raw.network.allow_only_managed,
            deny_read: cx.paths(&raw.filesystem.deny_read)?,
            protected,
            fs_locked: raw.filesystem.locked,
            daemon: DaemonSettings {
                ask_timeout: cx.duration(raw.daemon.ask_timeout.as_ref())?,
                ask: cx.ask_mode(raw.daemon.ask.as_ref())?,
                ..DaemonSettings::default()
            },
            telemetry: raw
                .telemetry
                .as_ref()
                .map(|t| crate::telemetry::check(&cx, t))
                .transpose()?,
        })
    }

    /// Loads the managed file at `path`: `None` when there is none; an error when it cannot be
    /// trusted (see [`trust`]), read or parsed. A `~/` path is the user's either way: expanded
    /// with `home` (`$HOME`) and, where it differs, with the account's home of the password
    /// file too, so a user who launches with another `HOME` does not move a hidden path away
    /// from the file it names.
    pub fn load(path: &Path, home: Option<&Path>) -> Result<Option<Managed>, ConfigError> {
        let Some(text) = read_trusted(path)? else { return Ok(None) };
        let mut managed = Managed::parse(path, &text, home)?;
        if let Some(account) = account_home().filter(|a| Some(a.as_path()) != home) {
            managed.also_for_home(Managed::parse(path, &text, Some(&account))?);
        }
        Ok(Some(managed))
    }

    /// Adds the paths `other` (the same file, `~/` expanded for another home) names that this
    /// one does not.
    fn also_for_home(&mut self, other: Managed) {
        for rule in other.deny_read {
            if !self.deny_read.iter().any(|r| r.path == rule.path) {
                self.deny_read.push(rule);
            }
        }
    }

    fn path_text(&self) -> String {
        self.path.display().to_string()
    }

    /// The network part a policy carries.
    pub(crate) fn net(&self) -> Arc<ManagedNet> {
        Arc::new(ManagedNet {
            deny: PatternSet::new(self.deny.iter().cloned()),
            ceiling: self.allow_only_managed.then(|| {
                Arc::new(Rule {
                    pattern: None,
                    source: RuleSource::ManagedCeiling(self.path.clone()),
                })
            }),
        })
    }

    /// Whether allowing `pattern` (by a flag, a file or a person's answer) is refused: a managed
    /// deny pattern covers all of it, or, under the ceiling, no managed allow pattern does.
    /// `what` says what was asked, for the message.
    pub fn screen_allow(&self, pattern: &DomainPattern, what: &str) -> Result<(), Blocked> {
        let covers = |r: &&Rule| r.pattern.as_ref().is_some_and(|p| pattern.is_covered_by(p));
        if let Some(rule) = self.deny.iter().find(covers) {
            return Err(self.blocked(what, format!("it denies {rule}")));
        }
        if self.allow_only_managed && !self.allow.iter().any(|r| covers(&r)) {
            let list: Vec<String> = self
                .allow
                .iter()
                .filter_map(|r| r.pattern.as_ref())
                .map(|p| p.to_string())
                .collect();
            let list = if list.is_empty() { "nothing".to_owned() } else { list.join(", ") };
            return Err(self.blocked(
                what,
                format!("only its own allow list may be allowed (allow_only_managed): {list}"),
            ));
        }
        Ok(())
    }

    fn blocked(&self, what: &str, why: String) -> Blocked {
        Blocked { what: what.to_owned(), path: self.path_text(), why }
    }

    /// Adds the managed rules to a tier's lists, and under the ceiling drops every allow rule
    /// that is not the managed layer's. Returns the rules dropped (for `config check`).
    pub(crate) fn apply_net(&self, allow: &mut Vec<Rule>, deny: &mut Vec<Rule>) -> Vec<Rule> {
        deny.splice(0..0, self.deny.iter().cloned());
        let mut dropped = Vec::new();
        if self.allow_only_managed {
            let (kept, gone): (Vec<Rule>, Vec<Rule>) =
                allow.drain(..).partition(|r| r.source.is_managed());
            *allow = kept;
            dropped = gone;
        }
        allow.splice(0..0, self.allow.iter().cloned());
        dropped
    }

    /// Narrows a tier's filesystem walls (and passed variables): adds the managed hidden and
    /// protected paths and, when locked, takes back what the user's files and flags widened.
    pub(crate) fn apply_fs(&self, fs: &mut FsPolicy, env_pass: &mut Vec<String>) {
        fs.hidden.extend(self.deny_read.iter().map(|r| PathRule {
            path: r.path.clone(),
            source: match &r.source {
                RuleSource::File { path, line } => {
                    RuleSource::Managed { path: path.clone(), line: *line }
                }
                other => other.clone(),
            },
        }));
        for p in &self.protected {
            if !fs.protected.contains(p) {
                fs.protected.push(p.clone());
            }
        }
        if !self.fs_locked {
            return;
        }
        fs.writable.retain(|w| w.source == RuleSource::CurrentDirectory);
        fs.readable_home.clear();
        let builtin = crate::dotfiles::writable_dotfiles();
        fs.writable_dotfiles.retain(|n| builtin.contains(&n.as_str()));
        fs.unix_sockets.clear();
        fs.git_writable = false;
        if fs.caches == crate::CacheMode::Shared {
            fs.caches = crate::CacheMode::Project;
        }
        env_pass.clear();
    }

    /// Refuses a writable path asked for beyond the defaults (`--allow-write`, `config
    /// add-path`; `what` says which) when the filesystem walls are locked.
    pub fn screen_writable(&self, what: &str) -> Result<(), Blocked> {
        if self.fs_locked {
            return Err(self.blocked(
                what,
                "the filesystem walls are locked ([filesystem] locked = true)".into(),
            ));
        }
        Ok(())
    }

    /// `settings` with the managed `[daemon]` values on top.
    pub fn lock_daemon(&self, settings: DaemonSettings) -> DaemonSettings {
        DaemonSettings {
            ask_timeout: self.daemon.ask_timeout.or(settings.ask_timeout),
            ask: self.daemon.ask.or(settings.ask),
            ..settings
        }
    }
}

/// The parts of a file's or directory's metadata that decide whether it can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ownership {
    /// Owner uid.
    pub uid: u32,
    /// Permission bits (with the sticky bit).
    pub mode: u32,
    /// A directory.
    pub dir: bool,
}

/// Why a system file (or a directory above it) cannot be trusted, or `None`: it must be owned
/// by root and not writable by group or others; a directory above it may be world-writable
/// only with the sticky bit (`/tmp`), where nobody else can rename what root owns.
///
/// `root_shows_as`: inside a user namespace that does not map root (a rootless sandbox, where a
/// nested launch reads the same file), root's files show as the overflow uid, which is then
/// accepted as root. A nested launch can only narrow the sandbox it runs in, whose policy the
/// launch outside made with the real check.
pub fn trust(o: Ownership, is_the_file: bool, root_shows_as: Option<u32>) -> Option<&'static str> {
    const STICKY: u32 = 0o1000;
    if o.uid != 0 && Some(o.uid) != root_shows_as {
        return Some("is not owned by root");
    }
    if o.mode & 0o022 != 0 && (is_the_file || !o.dir || o.mode & STICKY == 0) {
        return Some("is writable by group or others");
    }
    None
}

/// The uid root's files show as here, when this process is in a user namespace that does not
/// map root (`/proc/self/uid_map` has no range holding 0): the kernel's overflow uid.
fn unmapped_root_uid() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let root_mapped = map.lines().any(|l| {
        let mut f = l.split_whitespace().map(|n| n.parse::<u64>().unwrap_or(0));
        let (inside, _outside, count) = (f.next(), f.next(), f.next());
        matches!((inside, count), (Some(i), Some(c)) if i == 0 && c > 0)
    });
    if root_mapped {
        return None;
    }
    let overflow = std::fs::read_to_string("/proc/sys/kernel/overflowuid").ok();
    Some(overflow.and_then(|s| s.trim().parse().ok()).unwrap_or(65534))
}

/// Reads a system file, after checking it and every directory above it ([`trust`]); `None`
/// when it does not exist.
pub(crate) fn read_trusted(path: &Path) -> Result<Option<String>, ConfigError> {
    use std::os::unix::fs::MetadataExt as _;

    let real = match path.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::file(
                path,
                format!("cannot resolve the system configuration file: {e}"),
                "ask your administrator to fix its path and permissions",
            ));
        }
    };
    let root_shows_as = unmapped_root_uid();
    for (i, p) in real.ancestors().enumerate() {
        let meta = std::fs::metadata(p).map_err(|e| {
            ConfigError::file(path, format!("cannot read {}: {e}", p.display()), "check it")
        })?;
        let o = Ownership { uid: meta.uid(), mode: meta.mode() & 0o7777, dir: meta.is_dir() };
        if let Some(why) = trust(o, i == 0, root_shows_as) {
            let what = if i == 0 { "the file".to_owned() } else { p.display().to_string() };
            return Err(ConfigError::file(
                path,
                format!(
                    "refusing the system configuration: {what} {why} (owner uid {}, mode {:o}), \
                     so someone other than root could change it",
                    o.uid, o.mode
                ),
                format!(
                    "an administrator must run `chown root:root {p} && chmod go-w {p}`; \
                     sandgate will not run while it is unsafe",
                    p = p.display()
                ),
            ));
        }
    }
    std::fs::read_to_string(&real).map(Some).map_err(|e| {
        ConfigError::file(
            path,
            format!("cannot read the system configuration file: {e}"),
            "it must be readable by every user (mode 0644)",
        )
    })
}

/// The home directory of this process's account in `/etc/passwd` (Linux; `None` elsewhere or
/// when the account has no entry there).
fn account_home() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    // procfs gives each process's directory its owner's uid: no libc call needed.
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    home_of(&passwd, uid)
}

/// The home field of the `/etc/passwd` line of `uid`.
fn home_of(passwd: &str, uid: u32) -> Option<std::path::PathBuf> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        let home = (f.len() >= 7 && f[2].parse::<u32>().ok()? == uid).then(|| f[5])?;
        home.starts_with('/').then(|| std::path::PathBuf::from(home))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::AskMode;
    use crate::decision::Decision;
    use crate::host::Target;
    use crate::policy::{NetMode, NetworkPolicy};

    fn managed(text: &str) -> Managed {
        Managed::parse(Path::new("/etc/sandgate/managed.toml"), text, None).unwrap()
    }

    fn pattern(p: &str) -> DomainPattern {
        DomainPattern::parse(p, PatternUse::Allow).unwrap()
    }

    fn rule(p: &str, source: RuleSource) -> Rule {
        Rule { pattern: Some(pattern(p)), source }
    }

    #[test]
    fn ownership_rules() {
        let o = |uid, mode, dir| Ownership { uid, mode, dir };
        // (metadata, is the file, refused)
        for (meta, file, refused) in [
            (o(0, 0o644, false), true, false),
            (o(0, 0o600, false), true, false),
            (o(1000, 0o644, false), true, true),
            (o(0, 0o664, false), true, true),
            (o(0, 0o646, false), true, true),
            (o(0, 0o755, true), false, false),
            (o(0, 0o775, true), false, true),
            (o(0, 0o1777, true), false, false), // /tmp
            (o(0, 0o0777, true), false, true),
            (o(1000, 0o755, true), false, true),
            (o(0, 0o1777, false), true, true),
        ] {
            assert_eq!(trust(meta, file, None).is_some(), refused, "{meta:?} file={file}");
        }
        // Inside a user namespace without root, root's files show as the overflow uid.
        assert_eq!(trust(o(65534, 0o644, false), true, Some(65534)), None);
        assert!(trust(o(65534, 0o664, false), true, Some(65534)).is_some());
        assert!(trust(o(65534, 0o644, false), true, None).is_some());
        assert!(trust(o(1000, 0o644, false), true, Some(65534)).is_some());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors_with_a_place() {
        let p = Path::new("/m.toml");
        let e = Managed::parse(p, "[network]\nallow_only = true\n", None).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.help.contains("allow_only_managed"), "{e}");
        let e = Managed::parse(p, "[daemon]\nask = \"maybe\"\n", None).unwrap_err();
        assert_eq!((e.line, e.column), (2, 7), "{e}");
        let e = Managed::parse(p, "[network]\nallow = [\"*.com\"]\n", None).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = Managed::parse(p, "[telegram]\nchats = [1]\n", None).unwrap_err();
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn rules_are_the_managed_layers_and_say_so() {
        let m = managed(
            "[network]\nallow = [\"corp.example\"]\ndeny = [\"evil.example\"]\n\
             presets = [\"python\"]\n",
        );
        assert_eq!(
            m.deny[0].source,
            RuleSource::Managed { path: "/etc/sandgate/managed.toml".into(), line: 3 }
        );
        assert!(m.allow.len() > 2 && m.allow.iter().all(|r| r.source.is_managed()));
        assert!(m.deny[0].to_string().contains("your organisation's policy"));
    }

    /// Every way an allow list is widened — a flag, a file, a person's answer — is screened by
    /// the same rule: a managed deny that covers it, or (under the ceiling) no managed allow.
    #[test]
    fn allowing_is_screened_against_deny_and_the_ceiling() {
        let open =
            managed("[network]\nallow = [\"*.corp.example\"]\ndeny = [\"*.evil.example\"]\n");
        let ceiling = managed(
            "[network]\nallow = [\"*.corp.example\", \"pkg.example:443\"]\n\
             deny = [\"*.evil.example\"]\nallow_only_managed = true\n",
        );
        // (pattern, refused without the ceiling, refused with it)
        for (p, without, with) in [
            ("a.evil.example", true, true),
            ("*.evil.example", true, true),
            ("other.example", false, true),
            ("a.corp.example", false, false),
            ("*.corp.example", false, false),
            ("pkg.example:443", false, false),
            ("pkg.example", false, true), // every port: wider than the managed entry
            ("pkg.example:80", false, true),
            ("evil.example", false, true), // the apex is outside *.evil.example
        ] {
            assert_eq!(open.screen_allow(&pattern(p), p).is_err(), without, "{p} without");
            let r = ceiling.screen_allow(&pattern(p), p);
            assert_eq!(r.is_err(), with, "{p} with");
            if let Err(e) = r {
                assert!(e.to_string().contains("blocked by your organisation's policy"), "{e}");
            }
        }
    }

    #[test]
    fn under_the_ceiling_only_managed_allow_rules_remain_and_the_rest_is_denied() {
        let m = managed(
            "[network]\nallow = [\"corp.example\"]\ndeny = [\"evil.example\"]\n\
             allow_only_managed = true\n",
        );
        let file =
            RuleSource::File { path: "/home/u/.config/sandgate/config.toml".into(), line: 2 };
        let mut allow = vec![rule("user.example", file.clone()), rule("evil.example", file)];
        let mut deny = vec![rule("corp.example:25", RuleSource::CommandLine)];
        let dropped = m.apply_net(&mut allow, &mut deny);
        assert_eq!(dropped.len(), 2);
        let p = NetworkPolicy::new("net", NetMode::Proxy, allow, deny).with_managed(Some(m.net()));
        let decide = |t: &str| p.decide(&Target::parse(t).unwrap());
        for (target, shown) in [
            ("corp.example:443", "allow: corp.example (your organisation's policy, "),
            // A user's deny still narrows what the managed layer allows.
            ("corp.example:25", "deny: corp.example:25 (command line)"),
            ("evil.example:443", "deny: evil.example (your organisation's policy, "),
            ("user.example:443", "deny: your organisation's policy allows only its own list"),
        ] {
            let d = decide(target).to_string();
            assert!(d.starts_with(shown), "{target}: {d}");
        }
        assert!(matches!(
            p.decide_name(&Target::parse("x.example").unwrap().host),
            Decision::Deny(_)
        ));
        assert!(p.under_ceiling());
        // Without the ceiling the user's rules stand, and what none decides is asked.
        let open = managed("[network]\ndeny = [\"evil.example\"]\n");
        let mut allow = vec![rule("evil.example", RuleSource::CommandLine)];
        let mut deny = Vec::new();
        assert!(open.apply_net(&mut allow, &mut deny).is_empty());
        let p =
            NetworkPolicy::new("net", NetMode::Proxy, allow, deny).with_managed(Some(open.net()));
        assert!(
            p.decide(&Target::parse("evil.example").unwrap()).to_string().contains("organisation")
        );
        assert_eq!(p.decide(&Target::parse("x.example").unwrap()), Decision::Ask);
    }

    #[test]
    fn locked_walls_take_back_what_users_widened() {
        let m = managed(
            "[filesystem]\nlocked = true\ndeny_read = [\"/srv/keys\"]\nprotected = [\"ci.yml\"]\n",
        );
        let file = RuleSource::File { path: "/c.toml".into(), line: 1 };
        let at = |p: &str, source: RuleSource| PathRule { path: p.into(), source };
        let mut fs = FsPolicy {
            writable: vec![
                at("/proj", RuleSource::CurrentDirectory),
                at("/opt", file.clone()),
                at("/srv", RuleSource::CommandLine),
            ],
            readable_home: vec![".aws".into()],
            writable_dotfiles: vec![".venv".into(), ".envrc".into()],
            unix_sockets: vec![at("/run/docker.sock", file)],
            git_writable: true,
            caches: crate::CacheMode::Shared,
            ..FsPolicy::default()
        };
        let mut env = vec!["AWS_SECRET_ACCESS_KEY".to_owned()];
        m.apply_fs(&mut fs, &mut env);
        assert_eq!(fs.writable.len(), 1);
        assert!(fs.readable_home.is_empty() && fs.unix_sockets.is_empty() && env.is_empty());
        assert_eq!(fs.writable_dotfiles, [".venv"]);
        assert!(!fs.git_writable);
        assert_eq!(fs.caches, crate::CacheMode::Project);
        assert!(
            fs.hidden.iter().any(|h| h.path == Path::new("/srv/keys") && h.source.is_managed())
        );
        assert!(fs.protected.contains(&"ci.yml".to_owned()));
        assert!(m.screen_writable("--allow-write /srv").is_err());
        assert!(managed("").screen_writable("--allow-write /srv").is_ok());
    }

    /// A user's files and flags against the managed layer, and the same without it (the control:
    /// each widening works there).
    #[test]
    fn no_file_or_flag_widens_past_the_managed_layer() {
        use crate::layers::{Config, ConfigPaths, Overrides, PolicyError};

        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths::in_dir(dir.path(), Some("/home/u".into()));
        std::fs::write(
            &paths.global,
            "[network]\nallow = [\"user.example\", \"evil.example\"]\n\
             [filesystem]\nallow_write = [\"/opt\"]\nreadable_home = [\".aws\"]\n\
             [tiers.wide]\nbase = \"build\"\nallow = [\"tier.example\"]\n",
        )
        .unwrap();
        std::fs::write(&paths.project, "[network]\nallow = [\"proj.example\"]\n").unwrap();
        let mut config = Config::load_with_system(paths, &dir.path().join("none")).unwrap();
        // The system defaults as loaded (their ownership check needs root: `trust` is tested
        // above, the suite loads them for real).
        let system = Path::new("/etc/sandgate/config.toml");
        config.system = Some(crate::LoadedFile {
            path: system.into(),
            content: crate::parse_config(system, "[network]\nallow = [\"sys.example\"]\n", None)
                .unwrap(),
        });
        let flags = |allow: &[&str], write: &[&str]| Overrides {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            allow_write: write.iter().map(PathBuf::from).collect(),
            ..Overrides::default()
        };
        let verb = |c: &Config, tier: &str, f: &Overrides, t: &str| {
            let p = c.policy(tier, f).unwrap();
            p.net.decide(&Target::parse(t).unwrap()).verb()
        };
        let hosts = ["user.example", "evil.example", "proj.example", "sys.example", "tier.example"];
        // Control: without a managed layer every layer widens.
        assert!(config.managed.is_none() && config.system.is_some());
        for h in hosts {
            let tier = if h == "tier.example" { "wide" } else { "build" };
            assert_eq!(verb(&config, tier, &Overrides::default(), h), "allow", "{h}");
        }
        assert_eq!(verb(&config, "build", &flags(&["flag.example"], &[]), "flag.example"), "allow");
        let p = config.policy("build", &flags(&[], &[dir.path().to_str().unwrap()])).unwrap();
        assert!(p.fs.writable.iter().any(|w| w.path == Path::new("/opt")));
        assert_eq!(p.fs.readable_home, [".aws"]);

        config.managed = Some(managed(
            "[network]\nallow = [\"corp.example\"]\ndeny = [\"evil.example\"]\n\
             allow_only_managed = true\n[filesystem]\nlocked = true\n",
        ));
        for h in hosts {
            let tier = if h == "tier.example" { "wide" } else { "build" };
            assert_eq!(verb(&config, tier, &Overrides::default(), h), "deny", "{h}");
        }
        assert_eq!(verb(&config, "build", &Overrides::default(), "corp.example"), "allow");
        let e = config.policy("build", &flags(&["flag.example"], &[])).unwrap_err();
        assert!(matches!(e, PolicyError::Managed(_)), "{e}");
        assert!(e.to_string().contains("--allow flag.example is blocked by your organisation"));
        let e = config.policy("build", &flags(&[], &["/opt"])).unwrap_err();
        assert!(e.to_string().contains("--allow-write /opt is blocked"), "{e}");
        let p = config.policy("build", &Overrides::default()).unwrap();
        assert_eq!(p.fs.writable.len(), 1, "only the working directory");
        assert!(p.fs.readable_home.is_empty());
        let aside: Vec<String> =
            config.set_aside_by_managed().iter().map(|r| r.to_string()).collect();
        assert_eq!(aside.len(), 5, "{aside:?}");
    }

    #[test]
    fn managed_daemon_settings_win() {
        let m = managed("[daemon]\nask_timeout = \"5s\"\nask = \"deny\"\n");
        let user = DaemonSettings {
            ask_timeout: Some(std::time::Duration::from_secs(600)),
            ask: Some(AskMode::Person),
            questions_per_minute: Some(3),
            ..DaemonSettings::default()
        };
        let s = m.lock_daemon(user);
        assert_eq!(s.ask_timeout, Some(std::time::Duration::from_secs(5)));
        assert_eq!((s.ask, s.questions_per_minute), (Some(AskMode::Deny), Some(3)));
    }

    /// `[telemetry]` is a setting the managed layer locks: its section wins whole over the
    /// user's and the system's (a user can neither redirect nor turn off export); without it the
    /// global file's applies, then the system's (the control).
    #[test]
    fn the_managed_telemetry_section_wins_whole() {
        use crate::layers::{Config, ConfigPaths};

        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths::in_dir(dir.path(), None);
        std::fs::write(&paths.global, "[telemetry]\notlp_endpoint = \"http://mine:4318\"\n")
            .unwrap();
        let mut config = Config::load_with_system(paths, &dir.path().join("none")).unwrap();
        let endpoint = |c: &Config| c.telemetry_settings().and_then(|t| t.endpoint).map(|e| e.host);
        assert_eq!(
            endpoint(&config).as_deref(),
            Some("mine"),
            "the user's, without a managed layer"
        );
        config.global = None;
        let system = Path::new("/etc/sandgate/config.toml");
        config.system = Some(crate::LoadedFile {
            path: system.into(),
            content: crate::parse_config(
                system,
                "[telemetry]\notlp_endpoint = \"http://sys:4318\"\n",
                None,
            )
            .unwrap(),
        });
        assert_eq!(endpoint(&config).as_deref(), Some("sys"), "the system defaults'");
        config.managed = Some(managed(
            "[telemetry]\notlp_endpoint = \"https://corp:4318\"\nheaders = { x-key = \"k\" }\n",
        ));
        let t = config.telemetry_settings().unwrap();
        assert_eq!(t.endpoint.unwrap().host, "corp");
        assert_eq!(t.file, Path::new("/etc/sandgate/managed.toml"));
        config.managed = Some(managed("[telemetry]\n"));
        assert_eq!(endpoint(&config), None, "a managed section without an endpoint: off for all");
        config.managed = Some(managed("[daemon]\nask = \"deny\"\n"));
        assert_eq!(endpoint(&config).as_deref(), Some("sys"), "no managed section: not locked");
    }

    /// A `~/` path of the managed file is hidden under the account's home as well as under
    /// `$HOME`, so another `HOME` does not move it (red team, round three).
    #[test]
    fn home_paths_are_the_accounts_too() {
        let text = "[filesystem]\ndeny_read = [\"~/work/token\"]\n";
        let path = Path::new("/etc/sandgate/managed.toml");
        let mut m = Managed::parse(path, text, Some(Path::new("/tmp/elsewhere"))).unwrap();
        m.also_for_home(Managed::parse(path, text, Some(Path::new("/home/u"))).unwrap());
        let hidden: Vec<_> = m.deny_read.iter().map(|r| r.path.clone()).collect();
        assert_eq!(
            hidden,
            [Path::new("/tmp/elsewhere/work/token"), Path::new("/home/u/work/token")]
        );
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nu:x:1000:1000::/home/u:/bin/sh\nbad:x:7:7::rel:/x\n";
        assert_eq!(home_of(passwd, 1000), Some("/home/u".into()));
        assert_eq!(home_of(passwd, 0), Some("/root".into()));
        assert_eq!(home_of(passwd, 7), None);
        assert_eq!(home_of(passwd, 42), None);
    }
}
