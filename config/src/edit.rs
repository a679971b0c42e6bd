//! `sandgate config edit` as a transaction on one file: start from the file (or a commented
//! template when it is absent), let the person edit it, then keep it only if the configuration
//! still loads; otherwise put back what was there (as visudo and crontab -e do), keeping the
//! rejected edit beside it. Running the editor and asking the person are the command's.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Config, ConfigError, ConfigPaths, PolicyError};

/// What a new configuration file starts as.
pub const TEMPLATE: &str = r#"# sandgate configuration. See the README's "Configuration" section for every key.
#
# [network]
# allow = ["crates.io", "*.githubusercontent.com"]
# deny = []
# presets = ["registries"]
#
# [filesystem]
# allow_write = ["~/.cargo/registry"]
# deny_read = []
# protected = []
# writable_dotfiles = []   # top-level dot-entries builds may write; "!.venv" takes one away
"#;

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
    /// Starts editing `file`: remembers its bytes, or, when it is absent, writes the template
    /// (after `header`, e.g. a comment naming the directory it is for).
    pub fn begin(file: &Path, header: &str) -> Result<Edit, EditError> {
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
            std::fs::write(file, format!("{header}{TEMPLATE}")).map_err(err("write"))?;
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
        let edit = Edit::begin(&file, "# for /p\n").unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("# for /p\n# sandgate configuration."), "{text}");
        // The template itself is a valid (empty) configuration.
        crate::parse_config(&file, &text, None).unwrap();
        edit.restore().unwrap();
        assert!(!file.exists());
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
