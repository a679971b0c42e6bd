//! `sandgate config edit` as a transaction on one file: start from the file (or a commented
//! template when it is absent), let the person edit it, then keep it only if the configuration
//! still loads; otherwise put back what was there (as visudo and crontab -e do), keeping the
//! rejected edit beside it. Running the editor and asking the person are the command's.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Config, ConfigError, ConfigPaths, PolicyError};

/// What a new configuration file starts as: every common key, commented out, with what it does
/// — the presets and cache modes as this sandgate knows them. `global` adds the sections only
/// the global file may hold (`[daemon]`, `[telegram]`, `[proxy]`); a per-directory file's
/// would be ignored. Every line that looks like a key or a section is valid when uncommented.
pub fn template(global: bool) -> String {
    let presets: Vec<String> =
        crate::PRESETS.iter().map(|(name, _)| format!("\"{name}\"")).collect();
    let presets = presets.join(", ");
    let mut t = format!(
        r#"# sandgate configuration. Lines starting with `# ` are examples: remove the `# ` to use
# one. docs/configuration.md lists every key.
#
# [network]
# allow = ["crates.io", "*.example.org", "api.example.com:8443"]
# deny = ["uploads.example.com"]                 # deny wins over allow
# presets = ["registries"]                       # named allowlists: {presets}
# default_ports = [80, 443]                      # patterns without a port match only these
#
# [filesystem]
# caches = "project"        # package caches copy-on-write: "project" (default), "shared", "off"
# allow_write = ["~/scratch"]                    # writable in tiers that write (build)
# deny_read = ["~/work/secrets"]                 # hidden in every tier, like ~/.ssh
# protected = ["Makefile.local"]                 # read-only even inside writable directories
# writable_dotfiles = [".mytool", "!.venv"]      # top-level dot-entries builds may write (+/-)
# readable_home = [".sdkman"]                    # home dot-entries readable beyond the defaults
# unix_sockets = []                              # pathname unix sockets a sandbox may connect to
# git_writable = false                           # true: commits from inside (.git writable)
# scan_directories = 20000                       # directories a build launch scans at most
#
# [env]
# pass = ["GH_TOKEN"]                            # secret-looking variables kept (names or `*`)
#
# [shell]
# prompt_marker = true                           # false: no `[sandgate:TIER] ` in prompts
#
# [macos]                                        # Seatbelt only
# loopback_listen = false                        # true: servers may listen on the host's loopback
# trustd = "deny"                                # "allow": trustd checks certificates (past the proxy)
#
# [tiers.build-offline]                          # a tier of your own, narrowing a built-in one
# base = "build"
# network = "none"
"#
    );
    if global {
        t.push_str(
            r#"#
# [daemon]                                       # (global file only)
# ask_timeout = "60s"                            # a held request is denied after this long
# event_retention = "30d"                        # traffic and decisions kept this long
# desktop_notifications = false                  # notify-send for each question
#
# [telegram]                                     # (global file only) questions on your phone
# token_file = "~/.config/sandgate/telegram-token"   # mode 0600; or SANDGATE_TELEGRAM_TOKEN
# chats = [123456789]                            # the chats the bot obeys
# users = [123456789]                            # who may answer (a group chat needs it)
#
# [proxy]                                        # (global file only) a corporate proxy
# upstream = "http://proxy.corp.example:3128"    # leave through it after sandgate decides
"#,
        );
    }
    t
}

/// A file operation of an edit that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}", path.display())]
pub struct EditError {
    /// What was being done (`read`, `create`, `write`, `keep the edit in`, `restore`).
    pub action: &'static str,
    /// On what.
    pub path: PathBuf,
    /// The error.
    #[source]
    pub source: io::Error,
}

/// Why a configuration does not load.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A file does not parse or has a bad value.
    #[error(transparent)]
    File(#[from] ConfigError),
    /// The files parse, but the tiers they define do not.
    #[error(transparent)]
    Tiers(#[from] PolicyError),
}

/// Loads the configuration of `paths` and its tiers: `Ok` when every launch could use it.
pub fn check(paths: ConfigPaths) -> Result<Config, CheckError> {
    let config = Config::load(paths)?;
    config.tiers()?;
    Ok(config)
}

/// One edit of one configuration file: what it was before, to put back.
#[derive(Debug)]
pub struct Edit {
    file: PathBuf,
    /// `None`: the file did not exist.
    before: Option<Vec<u8>>,
}

impl Edit {
    /// Starts editing `file`: remembers its bytes, or, when it is absent, writes `initial` (a
    /// [`template`] after a comment naming the directory it is for).
    pub fn begin(file: &Path, initial: &str) -> Result<Edit, EditError> {
        let err = |action| move |source| EditError { action, path: file.to_owned(), source };
        let before = match std::fs::read(file) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(err("read")(e)),
        };
        if before.is_none() {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir).map_err(|source| EditError {
                    action: "create",
                    path: dir.to_owned(),
                    source,
                })?;
            }
            std::fs::write(file, initial).map_err(err("write"))?;
        }
        Ok(Edit { file: file.to_owned(), before })
    }

    /// The file being edited.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Puts the file back as it was (removes it if it did not exist).
    pub fn restore(&self) -> Result<(), EditError> {
        match &self.before {
            Some(bytes) => std::fs::write(&self.file, bytes),
            None => std::fs::remove_file(&self.file),
        }
        .map_err(|source| EditError { action: "restore", path: self.file.clone(), source })
    }

    /// Copies the edited file to `NAME.toml.rejected` and restores the original; returns where
    /// the edit was kept.
    pub fn reject(&self) -> Result<PathBuf, EditError> {
        let rejected = self.file.with_extension("toml.rejected");
        std::fs::copy(&self.file, &rejected).map_err(|source| EditError {
            action: "keep the edit in",
            path: rejected.clone(),
            source,
        })?;
        self.restore()?;
        Ok(rejected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_file_starts_as_the_template_and_goes_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("projects/x.toml");
        let edit = Edit::begin(&file, &format!("# for /p\n{}", template(false))).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("# for /p\n# sandgate configuration."), "{text}");
        // The template itself is a valid (empty) configuration.
        crate::parse_config(&file, &text, None).unwrap();
        edit.restore().unwrap();
        assert!(!file.exists());
    }

    /// Every example line of both templates is valid once uncommented, and they name the presets
    /// and cache modes this sandgate has; only the global one has the global-only sections.
    #[test]
    fn the_templates_show_every_common_key_and_each_is_valid_uncommented() {
        let home = Path::new("/home/u");
        for global in [false, true] {
            let t = template(global);
            let uncommented: String = t
                .lines()
                .filter_map(|l| l.strip_prefix("# "))
                .filter(|l| {
                    l.starts_with('[')
                        || l.split_once(" = ").is_some_and(|(k, _)| {
                            k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        })
                })
                .map(|l| format!("{l}\n"))
                .collect();
            let parsed = crate::parse_config(Path::new("t.toml"), &uncommented, Some(home))
                .unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
            assert_eq!(parsed.caches, Some(crate::CacheMode::Project));
            assert!(parsed.tiers.iter().any(|t| t.name == "build-offline"));
            for key in [
                "allow",
                "deny",
                "presets",
                "default_ports",
                "caches",
                "allow_write",
                "deny_read",
                "protected",
                "writable_dotfiles",
                "readable_home",
                "unix_sockets",
                "git_writable",
                "pass",
                "prompt_marker",
                "loopback_listen",
                "trustd",
            ] {
                assert!(uncommented.contains(&format!("\n{key} = ")), "{global}: {key}");
            }
            for (name, _) in crate::PRESETS {
                assert!(t.contains(&format!("\"{name}\"")), "{name}");
            }
            for mode in ["\"project\"", "\"shared\"", "\"off\""] {
                assert!(t.contains(mode), "{mode}");
            }
            assert_eq!(uncommented.contains("[daemon]"), global);
            assert_eq!(uncommented.contains("[telegram]"), global);
            if global {
                assert!(parsed.telegram.is_some() && parsed.upstream.is_some());
            }
        }
    }

    #[test]
    fn a_rejected_edit_is_kept_beside_the_restored_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "# mine\n").unwrap();
        let edit = Edit::begin(&file, "").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n", "begin changed it");
        std::fs::write(&file, "[nonsense\n").unwrap();
        let rejected = edit.reject().unwrap();
        assert_eq!(rejected, dir.path().join("config.toml.rejected"));
        assert_eq!(std::fs::read_to_string(&rejected).unwrap(), "[nonsense\n");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n");
    }

    #[test]
    fn check_tells_a_bad_file_from_bad_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths {
            dir: dir.path().to_owned(),
            global: dir.path().join("config.toml"),
            project: dir.path().join("p.toml"),
            project_dir: dir.path().to_owned(),
            project_root: dir.path().to_owned(),
            home: None,
        };
        assert!(check(paths.clone()).is_ok());
        std::fs::write(&paths.global, "[network\n").unwrap();
        assert!(matches!(check(paths.clone()), Err(CheckError::File(_))));
        std::fs::write(&paths.global, "[tiers.x]\nbase = \"nope\"\n").unwrap();
        assert!(matches!(check(paths), Err(CheckError::Tiers(_))), "unknown base tier");
    }
}
