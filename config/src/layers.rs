//! The configuration layers and how a tier's policy is resolved from them.
//!
//! 0. system defaults `/etc/sandgate/config.toml` (the lowest layer, see [`crate::managed`]);
//! 1. global `$XDG_CONFIG_HOME/sandgate/config.toml`;
//! 2. per directory `$XDG_CONFIG_HOME/sandgate/projects/<16 hex of sha256(realpath dir)>.toml` —
//!    never a file inside the project, so a sandboxed process cannot grant itself more. The file
//!    that applies is the one of the working directory's project ([`project_root`]): the nearest
//!    directory at or above it that has such a file, so a project's policy holds in its
//!    subdirectories;
//! 3. command-line flags ([`Overrides`]).
//!
//! Lists add up across layers (allow, deny, writable, hidden, protected); deny always wins over
//! allow when deciding, whichever layer each came from.
//!
//! Above them all, the managed layer `/etc/sandgate/managed.toml` ([`crate::Managed`]) can only
//! narrow: its deny list is decided first, its allow list can be a ceiling, its filesystem walls
//! can be locked, and flags that ask past it are refused.

use std::path::{Path, PathBuf};

use crate::check::{ConfigError, expand_path, home_dir};
use crate::decision::{Rule, RuleSource};
use crate::file::{CheckedFile, FileTier, parse};
use crate::pattern::{DomainPattern, InvalidPattern, PatternUse};
use crate::policy::{FsPolicy, NetMode, NetworkPolicy, PathRule, Policy};
use crate::project::{project_file, project_root};
use crate::tiers::{DEFAULT_HIDDEN, DEFAULT_PROTECTED, TierDef, builtin_tiers};

/// Where the configuration files of one directory are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigPaths {
    /// `$XDG_CONFIG_HOME/sandgate`.
    pub dir: PathBuf,
    /// The global file.
    pub global: PathBuf,
    /// The per-directory file that applies here: the one for `project_root` (it may not exist;
    /// commands that write per-directory settings create it).
    pub project: PathBuf,
    /// The working directory (canonical): writable in tiers whose current directory is.
    pub project_dir: PathBuf,
    /// The project `project_dir` is in ([`project_root`]): the directory `project` is for.
    pub project_root: PathBuf,
    /// `$HOME`, for `~` and the default credential paths.
    pub home: Option<PathBuf>,
}

impl ConfigPaths {
    /// The files of a test: everything in `dir` (`config.toml` global, `p.toml` the project's).
    #[cfg(test)]
    pub(crate) fn in_dir(dir: &Path, home: Option<PathBuf>) -> ConfigPaths {
        ConfigPaths {
            dir: dir.into(),
            global: dir.join("config.toml"),
            project: dir.join("p.toml"),
            project_dir: dir.into(),
            project_root: dir.into(),
            home,
        }
    }

    /// Finds the files for `cwd` from `$XDG_CONFIG_HOME` (or `$HOME/.config`).
    pub fn discover(cwd: &Path) -> Result<ConfigPaths, ConfigError> {
        let home = home_dir();
        let config_home = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
            .ok_or_else(|| {
                ConfigError::file(
                    Path::new("$XDG_CONFIG_HOME"),
                    "neither XDG_CONFIG_HOME nor HOME is set to an absolute path",
                    "set HOME (or XDG_CONFIG_HOME) so sandgate can find its configuration",
                )
            })?;
        ConfigPaths::at(cwd, &config_home, home)
    }

    /// The files for `cwd` under `config_home` (`$XDG_CONFIG_HOME`).
    fn at(
        cwd: &Path,
        config_home: &Path,
        home: Option<PathBuf>,
    ) -> Result<ConfigPaths, ConfigError> {
        let project_dir = cwd.canonicalize().map_err(|e| {
            ConfigError::file(
                cwd,
                format!("cannot resolve the directory: {e}"),
                "run from an existing directory",
            )
        })?;
        let dir = config_home.join("sandgate");
        let project_root = project_root(&project_dir, &dir, home.as_deref());
        Ok(ConfigPaths {
            global: dir.join("config.toml"),
            project: project_file(&dir, &project_root),
            dir,
            project_dir,
            project_root,
            home,
        })
    }
}

/// A file that was found and loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedFile {
    /// Where it is.
    pub path: PathBuf,
    /// What it says.
    pub content: CheckedFile,
}

/// Command-line flags, the third layer.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--allow-write P`.
    pub allow_write: Vec<PathBuf>,
    /// `--allow PATTERN`.
    pub allow: Vec<String>,
    /// `--deny PATTERN`.
    pub deny: Vec<String>,
    /// `--net none|proxy`.
    pub net: Option<NetMode>,
}

/// Why a policy could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// No tier of that name.
    #[error("unknown tier {name:?}; known tiers: {}", known.join(", "))]
    UnknownTier {
        /// The name asked for.
        name: String,
        /// The tiers that exist.
        known: Vec<String>,
    },
    /// A `base` chain that loops or names a missing tier.
    #[error("tier {name:?} has base {base:?}, which {why}")]
    BadBase {
        /// The tier.
        name: String,
        /// Its base.
        base: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The layers' interception settings contradict each other.
    #[error(transparent)]
    Intercept(#[from] ConfigError),
    /// A flag's pattern is invalid.
    #[error("{flag}: {error}")]
    Flag {
        /// `--allow` or `--deny`.
        flag: &'static str,
        /// The pattern error.
        error: InvalidPattern,
    },
    /// A flag's path is not absolute and could not be made so.
    #[error("--allow-write {0}: the path does not exist or cannot be resolved")]
    Path(PathBuf),
    /// A flag asks for what the managed layer forbids.
    #[error(transparent)]
    Managed(#[from] crate::managed::Blocked),
}

/// All configuration for one directory: the system layers and the global and per-directory
/// file (each when present).
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the files are.
    pub paths: ConfigPaths,
    /// The system defaults (`/etc/sandgate/config.toml`), if they exist.
    pub system: Option<LoadedFile>,
    /// The global file, if it exists.
    pub global: Option<LoadedFile>,
    /// The per-directory file, if it exists.
    pub project: Option<LoadedFile>,
    /// The managed layer (`/etc/sandgate/managed.toml`), if it exists.
    pub managed: Option<crate::Managed>,
}

impl Config {
    /// Loads every layer; a missing file is no error, an unreadable, invalid or (for the system
    /// layers) untrustworthy one is.
    pub fn load(paths: ConfigPaths) -> Result<Config, ConfigError> {
        Config::load_with_system(paths, &crate::managed::system_dir())
    }

    /// [`Config::load`] with the system layers in `system_dir`.
    pub(crate) fn load_with_system(
        paths: ConfigPaths,
        system_dir: &Path,
    ) -> Result<Config, ConfigError> {
        let home = paths.home.as_deref();
        let managed = crate::Managed::load(&system_dir.join(crate::managed::MANAGED_FILE), home)?;
        let system_path = system_dir.join(crate::managed::SYSTEM_FILE);
        let system = match crate::managed::read_trusted(&system_path)? {
            Some(text) => {
                Some(LoadedFile { content: parse(&system_path, &text, home)?, path: system_path })
            }
            None => None,
        };
        let global = load_file(&paths.global, home)?;
        let project = load_file(&paths.project, home)?;
        Ok(Config { paths, system, global, project, managed })
    }

    /// The `[daemon]` settings of the system and the global file, each setting from the later
    /// file that sets it, under the managed layer's (the per-directory file's are ignored: the
    /// daemon serves every directory).
    pub fn daemon_settings(&self) -> crate::DaemonSettings {
        let system = self.system.as_ref().map(|f| f.content.daemon.clone()).unwrap_or_default();
        let settings = match &self.global {
            Some(g) => {
                let g = g.content.daemon.clone();
                crate::DaemonSettings {
                    ask_timeout: g.ask_timeout.or(system.ask_timeout),
                    event_retention: g.event_retention.or(system.event_retention),
                    desktop_notifications: g.desktop_notifications.or(system.desktop_notifications),
                    questions_per_minute: g.questions_per_minute.or(system.questions_per_minute),
                    questions_per_minute_total: g
                        .questions_per_minute_total
                        .or(system.questions_per_minute_total),
                    events_per_minute: g.events_per_minute.or(system.events_per_minute),
                    ask: g.ask.or(system.ask),
                }
            }
            None => system,
        };
        match &self.managed {
            Some(m) => m.lock_daemon(settings),
            None => settings,
        }
    }

    /// The allow rules of the files that the managed layer's ceiling sets aside (`config check`
    /// names them): none without a managed layer or without `allow_only_managed`.
    pub fn set_aside_by_managed(&self) -> Vec<Rule> {
        let Some(m) = &self.managed else { return Vec::new() };
        let mut allow: Vec<Rule> = self.files().flat_map(|f| f.content.allow.clone()).collect();
        allow.extend(self.file_tiers().flat_map(|(t, _)| t.allow.clone()));
        m.apply_net(&mut allow, &mut Vec::new())
    }

    /// `[proxy] upstream` of the global file (the daemon serves every directory).
    pub fn upstream_settings(&self) -> Option<crate::UpstreamSettings> {
        self.global.as_ref().and_then(|f| f.content.upstream.clone())
    }

    /// `[[secrets]]`, `[[http_rules]]` and `[tls]` of both files (lists add up; a secret name
    /// defined in both is an error).
    pub fn intercept_settings(&self) -> Result<crate::InterceptSettings, ConfigError> {
        let mut out = crate::InterceptSettings::default();
        for f in self.files() {
            out.extend(f.content.intercept.clone())?;
        }
        Ok(out)
    }

    /// The `[telemetry]` section that applies to the daemon: the managed file's when it has
    /// one (a user cannot change or turn off what it says), else the global file's, else the
    /// system defaults'; `None` when no file has the section.
    pub fn telemetry_settings(&self) -> Option<crate::TelemetrySettings> {
        if let Some(t) = self.managed.as_ref().and_then(|m| m.telemetry.clone()) {
            return Some(t);
        }
        [&self.global, &self.system].into_iter().flatten().find_map(|f| f.content.telemetry.clone())
    }

    /// The `[telegram]` section of the global file.
    pub fn telegram_settings(&self) -> Option<crate::TelegramSettings> {
        self.global.as_ref().and_then(|f| f.content.telegram.clone())
    }

    /// Whether interactive shells in a sandbox show the tier in their prompt (`[shell]
    /// prompt_marker`; the later file decides; on by default).
    pub fn prompt_marker(&self) -> bool {
        self.files().filter_map(|f| f.content.prompt_marker).last().unwrap_or(true)
    }

    /// `[macos] loopback_listen` (the later file decides; off by default).
    pub fn macos_loopback_listen(&self) -> bool {
        self.files().filter_map(|f| f.content.macos.loopback_listen).last().unwrap_or(false)
    }

    /// `[macos] trustd = "allow"` (the later file decides; off by default).
    pub fn macos_trustd_allow(&self) -> bool {
        self.files().filter_map(|f| f.content.macos.trustd_allow).last().unwrap_or(false)
    }

    /// The loaded files, lowest first: system defaults, global, per-directory.
    pub fn files(&self) -> impl Iterator<Item = &LoadedFile> {
        self.system.iter().chain(self.global.iter()).chain(self.project.iter())
    }

    fn file_tiers(&self) -> impl Iterator<Item = (&FileTier, &Path)> {
        self.files().flat_map(|f| f.content.tiers.iter().map(move |t| (t, f.path.as_path())))
    }

    /// Every tier: the built-in ones, then those of the global and the per-directory file.
    pub fn tiers(&self) -> Result<Vec<TierDef>, PolicyError> {
        let mut out = builtin_tiers();
        for (t, path) in self.file_tiers() {
            let (root, chain) = self.chain(&t.name)?;
            out.push(TierDef {
                name: t.name.clone(),
                description: t
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("like {}, from {}", t.base, path.display())),
                net: chain.iter().find_map(|t| t.network).unwrap_or(root.net),
                writable_cwd: root.writable_cwd,
                defined_in: path.display().to_string(),
            });
        }
        Ok(out)
    }

    /// Follows `base` from tier `name` to a built-in tier: returns that root and the configured
    /// tiers on the way, nearest first (empty for a built-in tier).
    fn chain(&self, name: &str) -> Result<(TierDef, Vec<&FileTier>), PolicyError> {
        let mut chain: Vec<&FileTier> = Vec::new();
        let mut current = name;
        loop {
            if let Some(root) = builtin_tiers().into_iter().find(|t| t.name == current) {
                return Ok((root, chain));
            }
            let from = chain.last().map_or(name, |t| t.name.as_str());
            let Some((t, _)) = self.file_tiers().find(|(t, _)| t.name == current) else {
                return Err(match chain.last() {
                    None => PolicyError::UnknownTier {
                        name: name.into(),
                        known: self.known_tier_names(),
                    },
                    Some(_) => PolicyError::BadBase {
                        name: from.into(),
                        base: current.into(),
                        why: "does not exist",
                    },
                });
            };
            if chain.iter().any(|c| c.name == t.name) {
                return Err(PolicyError::BadBase {
                    name: from.into(),
                    base: current.into(),
                    why: "forms a loop",
                });
            }
            chain.push(t);
            current = &t.base;
        }
    }

    fn known_tier_names(&self) -> Vec<String> {
        builtin_tiers()
            .into_iter()
            .map(|t| t.name)
            .chain(self.file_tiers().map(|(t, _)| t.name.clone()))
            .collect()
    }

    /// Resolves the policy of tier `name` for this directory, with the command-line layer on top.
    pub fn policy(&self, name: &str, flags: &Overrides) -> Result<Policy, PolicyError> {
        let (root, tier_parts) = self.chain(name)?;
        let tier =
            TierDef { net: tier_parts.iter().find_map(|t| t.network).unwrap_or(root.net), ..root };

        let mut allow: Vec<Rule> = self.files().flat_map(|f| f.content.allow.clone()).collect();
        let mut deny: Vec<Rule> = self.files().flat_map(|f| f.content.deny.clone()).collect();
        for t in &tier_parts {
            allow.extend(t.allow.iter().cloned());
            deny.extend(t.deny.iter().cloned());
        }
        for p in &flags.allow {
            let pattern = DomainPattern::parse(p, PatternUse::Allow)
                .map_err(|error| PolicyError::Flag { flag: "--allow", error })?;
            if let Some(m) = &self.managed {
                m.screen_allow(&pattern, &format!("--allow {p}"))?;
            }
            allow.push(Rule { pattern: Some(pattern), source: RuleSource::CommandLine });
        }
        for p in &flags.deny {
            let pattern = DomainPattern::parse(p, PatternUse::Deny)
                .map_err(|error| PolicyError::Flag { flag: "--deny", error })?;
            deny.push(Rule { pattern: Some(pattern), source: RuleSource::CommandLine });
        }

        let mut writable = Vec::new();
        if tier.writable_cwd {
            writable.push(PathRule {
                path: self.paths.project_dir.clone(),
                source: RuleSource::CurrentDirectory,
            });
            writable.extend(self.files().flat_map(|f| f.content.allow_write.clone()));
            for t in &tier_parts {
                writable.extend(t.allow_write.iter().cloned());
            }
        }
        for p in &flags.allow_write {
            if let Some(m) = &self.managed {
                m.screen_writable(&format!("--allow-write {}", p.display()))?;
            }
            let abs = if p.is_absolute() {
                p.clone()
            } else {
                std::env::current_dir()
                    .map(|d| d.join(p))
                    .map_err(|_| PolicyError::Path(p.clone()))?
            };
            let path = abs.canonicalize().map_err(|_| PolicyError::Path(p.clone()))?;
            writable.push(PathRule { path, source: RuleSource::CommandLine });
        }

        let mut hidden = Vec::new();
        if let Some(home) = &self.paths.home {
            hidden.extend(
                DEFAULT_HIDDEN
                    .iter()
                    .map(|p| PathRule { path: home.join(p), source: RuleSource::Builtin }),
            );
        }
        if let Some(extra) = std::env::var_os("SANDGATE_EXTRA_DENY") {
            for p in std::env::split_paths(&extra) {
                if let Some(path) = expand_path(&p.to_string_lossy(), self.paths.home.as_deref()) {
                    hidden.push(PathRule {
                        path,
                        source: RuleSource::Env("SANDGATE_EXTRA_DENY".into()),
                    });
                }
            }
        }
        hidden.extend(self.files().flat_map(|f| f.content.deny_read.clone()));

        let mut protected: Vec<String> = DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect();
        for p in self.files().flat_map(|f| f.content.protected.iter()) {
            if !protected.contains(p) {
                protected.push(p.clone());
            }
        }
        let unix_sockets = self.files().flat_map(|f| f.content.unix_sockets.clone()).collect();
        // The later file decides (a project may turn it on or off for itself).
        let git_writable =
            self.files().filter_map(|f| f.content.git_writable).last().unwrap_or(false);

        let readable_home = self.files().flat_map(|f| f.content.readable_home.clone()).collect();
        let env_pass = self.files().flat_map(|f| f.content.env_pass.clone()).collect();
        // The built-in allowlist, then each file in order: `name` adds, `!name` takes away.
        let mut writable_dotfiles: Vec<String> =
            crate::dotfiles::writable_dotfiles().iter().map(|s| s.to_string()).collect();
        for entry in self.files().flat_map(|f| f.content.writable_dotfiles.iter()) {
            match entry.strip_prefix('!') {
                Some(name) => writable_dotfiles.retain(|n| n != name),
                None if !writable_dotfiles.contains(entry) => writable_dotfiles.push(entry.clone()),
                None => {}
            }
        }
        // As git_writable: the later file decides (caches, default ports).
        let caches = self.files().filter_map(|f| f.content.caches).last().unwrap_or_default();
        let default_ports = self.files().filter_map(|f| f.content.default_ports.clone()).last();
        let scan_directories = self.files().filter_map(|f| f.content.scan_directories).last();

        let mode = flags.net.unwrap_or(tier.net);
        let mut env_pass = env_pass;
        let mut fs = FsPolicy {
            writable,
            hidden,
            protected,
            unix_sockets,
            git_writable,
            readable_home,
            writable_dotfiles,
            caches,
            scan_directories,
        };
        if let Some(m) = &self.managed {
            m.apply_net(&mut allow, &mut deny);
            m.apply_fs(&mut fs, &mut env_pass);
        }
        Ok(Policy {
            tier: name.to_owned(),
            fs,
            net: NetworkPolicy::new(name, mode, allow, deny)
                .with_default_ports(default_ports)
                .with_intercept(std::sync::Arc::new(self.intercept_settings()?))
                .with_managed(self.managed.as_ref().map(crate::Managed::net)),
            env_pass,
        })
    }
}

fn load_file(path: &Path, home: Option<&Path>) -> Result<Option<LoadedFile>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            Ok(Some(LoadedFile { path: path.to_owned(), content: parse(path, &text, home)? }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigError::file(
            path,
            format!("cannot read the configuration file: {e}"),
            "check that the file is readable, or remove it",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Decision;
    use crate::host::Target;

    fn config(global: &str, project: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths {
            dir: dir.path().into(),
            global: dir.path().join("config.toml"),
            project: dir.path().join("p.toml"),
            project_dir: dir.path().join("proj"),
            project_root: dir.path().join("proj"),
            home: Some("/home/u".into()),
        };
        std::fs::write(&paths.global, global).unwrap();
        std::fs::write(&paths.project, project).unwrap();
        let config = Config::load_with_system(paths, &dir.path().join("no-system")).unwrap();
        (dir, config)
    }

    #[test]
    fn a_subdirectory_gets_its_projects_file_and_stays_the_writable_directory() {
        let t = tempfile::tempdir().unwrap();
        let (cfg, home) = (t.path().join("cfg"), t.path().join("home"));
        let proj = home.join("code/demo");
        let sub = proj.join("src/bin");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(cfg.join("sandgate/projects")).unwrap();
        let proj = proj.canonicalize().unwrap();
        let sub = sub.canonicalize().unwrap();
        let file =
            cfg.join("sandgate/projects").join(format!("{}.toml", crate::project_key(&proj)));
        std::fs::write(&file, "[network]\nallow = [\"proj.test\"]\n").unwrap();

        let paths = ConfigPaths::at(&sub, &cfg, Some(home.clone())).unwrap();
        assert_eq!((&paths.project, &paths.project_root, &paths.project_dir), (&file, &proj, &sub));
        let c = Config::load(paths).unwrap();
        assert_eq!(c.project.as_ref().map(|f| &f.path), Some(&file));
        let p = c.policy("build", &Overrides::default()).unwrap();
        let target = crate::host::Target::parse("proj.test").unwrap();
        assert!(matches!(p.net.decide(&target), crate::decision::Decision::Allow(_)));
        // The working directory, not the project, is what `build` writes.
        assert_eq!(p.fs.writable[0].path, sub);
        // Outside the project, nothing of it applies; the file named is the directory's own.
        let other = home.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let paths = ConfigPaths::at(&other, &cfg, Some(home)).unwrap();
        assert_eq!(paths.project_root, other.canonicalize().unwrap());
        assert!(Config::load(paths).unwrap().project.is_none());
    }

    #[test]
    fn writable_dotfiles_extend_and_shrink_the_builtin_list() {
        let global = "[filesystem]\nwritable_dotfiles = [\".out*\", \"!.venv\"]\n";
        let (_d, c) = config(global, "");
        let p = c.policy("build", &Overrides::default()).unwrap();
        assert!(p.fs.writable_dotfiles.contains(&".out*".to_owned()));
        assert!(!p.fs.writable_dotfiles.contains(&".venv".to_owned()));
        assert!(p.fs.writable_dotfiles.contains(&".tox".to_owned()));
        let project = "[filesystem]\nwritable_dotfiles = [\".venv\", \"!.cache\"]\n";
        let (_d, c) = config(global, project);
        let p = c.policy("build", &Overrides::default()).unwrap();
        assert!(p.fs.writable_dotfiles.contains(&".venv".to_owned()), "the later file wins");
        assert!(!p.fs.writable_dotfiles.contains(&".cache".to_owned()));
    }

    #[test]
    fn caches_are_per_project_by_default_and_the_later_file_decides() {
        use crate::CacheMode::{Off, Project, Shared};
        for (global, project, want) in [
            ("", "", Project),
            ("[filesystem]\ncaches = \"shared\"\n", "", Shared),
            ("[filesystem]\ncaches = \"shared\"\n", "[filesystem]\ncaches = \"off\"\n", Off),
        ] {
            let (_d, c) = config(global, project);
            let p = c.policy("build", &Overrides::default()).unwrap();
            assert_eq!(p.fs.caches, want, "{global:?} {project:?}");
        }
    }

    #[test]
    fn scan_directories_the_later_file_decides_and_out_of_range_is_an_error() {
        for (global, project, want) in [
            ("", "", None),
            ("[filesystem]\nscan_directories = 50000\n", "", Some(50_000)),
            (
                "[filesystem]\nscan_directories = 50000\n",
                "[filesystem]\nscan_directories = 300\n",
                Some(300),
            ),
        ] {
            let (_d, c) = config(global, project);
            let p = c.policy("build", &Overrides::default()).unwrap();
            assert_eq!(p.fs.scan_directories, want, "{global:?} {project:?}");
        }
        for bad in ["0", "-1", "1000001"] {
            let text = format!("[filesystem]\nscan_directories = {bad}\n");
            let e = crate::parse_config(Path::new("/c.toml"), &text, None).unwrap_err();
            assert!(e.to_string().contains("out of range"), "{bad}: {e}");
        }
    }

    #[test]
    fn git_writable_is_off_by_default_and_the_later_file_decides() {
        // (global file, per-directory file, git_writable)
        for (global, project, want) in [
            ("", "", false),
            ("[filesystem]\ngit_writable = true\n", "", true),
            ("[filesystem]\ngit_writable = true\n", "[filesystem]\ngit_writable = false\n", false),
            ("", "[filesystem]\ngit_writable = true\n", true),
        ] {
            let (_d, c) = config(global, project);
            let p = c.policy("build", &Overrides::default()).unwrap();
            assert_eq!(p.fs.git_writable, want, "{global:?} {project:?}");
        }
    }

    #[test]
    fn configured_tiers_follow_their_base() {
        let (_d, c) = config(
            "[tiers.offline]\nbase = \"build\"\nnetwork = \"none\"\n\
             [tiers.offline2]\nbase = \"offline\"\nallow_write = [\"/cache\"]\n",
            "[network]\nallow = [\"proj.test\"]\n[filesystem]\nallow_write = [\"~/x\"]\n",
        );
        let names: Vec<String> = c.tiers().unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["run", "net", "build", "offline", "offline2"]);
        let p = c.policy("offline2", &Overrides::default()).unwrap();
        assert_eq!(p.net.mode, NetMode::None);
        let writable: Vec<_> = p.fs.writable.iter().map(|w| w.path.clone()).collect();
        assert_eq!(writable, [c.paths.project_dir.clone(), "/home/u/x".into(), "/cache".into()]);
        let net = c.policy("net", &Overrides::default()).unwrap();
        assert!(net.fs.writable.is_empty(), "net writes nowhere");
        assert!(matches!(net.net.decide(&Target::parse("proj.test").unwrap()), Decision::Allow(_)));
        assert!(net.fs.hidden.iter().any(|h| h.path == Path::new("/home/u/.ssh")));
    }

    #[test]
    fn bad_tier_chains_are_errors() {
        let (_d, c) = config("[tiers.a]\nbase = \"b\"\n[tiers.b]\nbase = \"a\"\n", "");
        assert!(matches!(
            c.policy("a", &Overrides::default()),
            Err(PolicyError::BadBase { why: "forms a loop", .. })
        ));
        let (_d, c) = config("[tiers.a]\nbase = \"nope\"\n", "");
        assert!(matches!(c.tiers(), Err(PolicyError::BadBase { why: "does not exist", .. })));
        let (_d, c) = config("", "");
        let e = c.policy("bulid", &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("run, net, build"), "{e}");
    }
}
