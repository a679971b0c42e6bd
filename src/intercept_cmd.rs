//! Interception as the CLI, the daemon and the launcher see it: the CA's place, what a sandbox
//! gets when interception is in use, and `sandgate secrets list|test`. The reports are
//! `sandgate_proxy::secret_report`'s; this finds the places, logs and prints.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandgate_config::InterceptSettings;
use sandgate_proxy::Interceptor;
use sandgate_proxy::secret_report::{SecretInfo, SecretTest, find_secret};

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

/// Adds what a sandbox gets when its policy intercepts to `env` (replacing variables of the
/// same name) and `files` ([`sandgate_proxy::secret_report::sandbox_env`]).
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

/// `sandgate secrets`.
#[derive(Debug, Args)]
pub struct SecretsArgs {
    #[command(subcommand)]
    command: SecretsCommand,
}

#[derive(Debug, Subcommand)]
enum SecretsCommand {
    /// List the secrets: names, hosts, header, variable and source kind (never values).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read a secret's source now and say whether it works (never shows the value).
    Test {
        /// The secret's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `sandgate secrets`.
pub fn secrets(args: SecretsArgs) -> anyhow::Result<u8> {
    let config = crate::policy_cmd::load_config()?;
    let settings = config
        .intercept_settings()
        .map_err(|e| crate::policy_cmd::UsageError(format!("invalid configuration:\n{e}")))?;
    match args.command {
        SecretsCommand::List { json } => {
            let items: Vec<SecretInfo> = settings.secrets.iter().map(SecretInfo::of).collect();
            if json {
                println!("{}", serde_json::to_value(&items)?);
            } else if items.is_empty() {
                println!("no secrets configured ([[secrets]] in the configuration)");
            } else {
                for s in &items {
                    println!(
                        "{}  hosts {}  header {}  env {}  source {}  ({})",
                        s.name,
                        s.hosts.join(","),
                        s.header,
                        s.env.as_deref().unwrap_or("-"),
                        s.detail,
                        s.defined_at
                    );
                }
            }
            Ok(0)
        }
        SecretsCommand::Test { name, json } => {
            let secret = find_secret(&settings, &name)
                .map_err(|e| crate::policy_cmd::UsageError(e.to_string()))?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a runtime")?;
            let test = rt.block_on(SecretTest::run(secret));
            match (&test.result, json) {
                (_, true) => println!("{}", serde_json::to_value(&test)?),
                (Ok(len), false) => {
                    println!("{name}: ok ({} source, {len} characters)", secret.source.kind())
                }
                (Err(e), false) => println!("{name}: error: {e}"),
            }
            Ok(if test.result.is_ok() { 0 } else { 1 })
        }
    }
}
