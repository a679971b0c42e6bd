//! What the daemon and the launcher read from the configuration and the data directory before
//! they serve: the configuration of this directory, the corporate upstream proxy, the
//! interception CA and what a sandbox gets when interception is in use.
//!
//! The CLI's `check`, `proxy` and `secrets` commands read the same things through these
//! functions; the reports behind them are `sandgate_proxy`'s (`secret_report`, `Upstream`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use sandgate_config::{Config, ConfigPaths, InterceptSettings};
use sandgate_proxy::Interceptor;

/// A mistake of the caller (bad flag, bad configuration) rather than a failure: the binary
/// prints it without "error:" and exits 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Loads the configuration for the current directory (an invalid one is a [`UsageError`]).
pub fn load_config() -> anyhow::Result<Config> {
    let config_error =
        |e: sandgate_config::ConfigError| UsageError(format!("invalid configuration:\n{e}"));
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let paths = ConfigPaths::discover(&cwd).map_err(config_error)?;
    Ok(Config::load(paths).map_err(config_error)?)
}

/// The corporate upstream proxy of `config`, credentials read; `None` when none is configured.
pub fn upstream(config: &Config) -> anyhow::Result<Option<Arc<sandgate_proxy::Upstream>>> {
    let Some(s) = config.upstream_settings() else { return Ok(None) };
    Ok(Some(Arc::new(sandgate_proxy::Upstream::from_settings(s).map_err(anyhow::Error::msg)?)))
}

/// The CA directory under `$XDG_DATA_HOME/sandgate` (hidden in every sandbox with the store).
pub fn ca_dir() -> anyhow::Result<PathBuf> {
    let db = sandgate_store::Store::default_path().context("where sandgate's data lives")?;
    let data = db.parent().context("the store path has no directory")?;
    Ok(sandgate_proxy::ca::ca_dir(data))
}

/// The interceptor of a proxy (daemon or launcher). Without a CA, hosts that need interception
/// are closed, never tunnelled (the error is logged once here).
pub fn interceptor() -> Option<Arc<Interceptor>> {
    match ca_dir().and_then(|d| Interceptor::new(&d).map_err(anyhow::Error::from)) {
        Ok(i) => Some(Arc::new(i)),
        Err(e) => {
            tracing::error!(
                "no interception CA: {e:#}; hosts named by [[secrets]] or [[http_rules]] are refused"
            );
            None
        }
    }
}

/// What a sandbox gets when its policy intercepts: each secret's variable holding the
/// placeholder, and the CA bundle (a file in the sandbox's copy of the configuration directory)
/// named by [`CA_BUNDLE_VARS`]. Nothing when nothing is intercepted.
pub fn sandbox_env(
    settings: &InterceptSettings,
    config_dir: Option<&Path>,
    env: &mut Vec<(OsString, OsString)>,
    files: &mut Vec<(PathBuf, Vec<u8>)>,
) -> anyhow::Result<()> {
    let got = sandgate_proxy::secret_report::sandbox_env(settings, config_dir, || {
        sandgate_proxy::ca::ca_certificate_pem(&ca_dir()?)
            .context("cannot make or read the interception CA")
    })?;
    if got.no_bundle {
        eprintln!(
            "sandgate: interception is configured but there is no configuration directory to \
             hold the CA bundle; clients inside will not trust intercepted hosts"
        );
    }
    for (k, v) in got.env {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
    files.extend(got.files);
    Ok(())
}
