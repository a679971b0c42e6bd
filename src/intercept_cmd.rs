//! Interception as the CLI, the daemon and the launcher see it: the CA's place, what a sandbox
//! gets when interception is in use (placeholders, the CA bundle and the variables naming it),
//! and `sandgate secrets list|test`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandgate_config::{InterceptSettings, SecretSource};
use sandgate_proxy::Interceptor;
use sandgate_proxy::intercept::{CA_BUNDLE_VARS, sandbox_bundle};
use serde_json::json;

/// Name of the bundle file in the sandbox's copy of the configuration directory.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

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
    if !settings.in_use() {
        return Ok(());
    }
    for s in &settings.secrets {
        if let Some(var) = &s.env {
            env.retain(|(k, _)| k != var.as_str());
            env.push((var.into(), s.placeholder().into()));
        }
    }
    let Some(dir) = config_dir else {
        eprintln!(
            "sandgate: interception is configured but there is no configuration directory to \
             hold the CA bundle; clients inside will not trust intercepted hosts"
        );
        return Ok(());
    };
    let ca = sandgate_proxy::ca::ca_certificate_pem(&ca_dir()?)
        .context("cannot make or read the interception CA")?;
    files.push((PathBuf::from(BUNDLE_FILE), sandbox_bundle(&ca).into_bytes()));
    let path = dir.join(BUNDLE_FILE);
    for var in CA_BUNDLE_VARS {
        env.retain(|(k, _)| k != var);
        env.push((var.into(), path.clone().into()));
    }
    Ok(())
}

/// What a sandbox must never read, whatever its tier and whatever the name filters say: the
/// variables (`from_env`) and files (`from_file`) secrets are read from. Sandgate knows these
/// hold a secret, so they are hidden by that knowledge, not by how their names look: a variable
/// called `DEPLOY_VALUE` passes the secret-name filter, a key file in `/srv` or a non-dot home
/// directory is readable by default.
pub fn secret_sources(settings: &InterceptSettings) -> (Vec<String>, Vec<PathBuf>) {
    let mut vars = Vec::new();
    let mut files = Vec::new();
    for s in &settings.secrets {
        match &s.source {
            SecretSource::Env(v) => vars.push(v.clone()),
            SecretSource::File(f) => files.push(f.clone()),
            // Run on the host; what it reads is its own business (a password store is a
            // home dot-entry, hidden already).
            SecretSource::Command { .. } => {}
        }
    }
    (vars, files)
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
            let items: Vec<serde_json::Value> = settings
                .secrets
                .iter()
                .map(|s| {
                    json!({
                        "name": s.name,
                        "hosts": s.hosts.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "header": s.header,
                        "env": s.env,
                        "source": s.source.kind(),
                        "defined_at": s.origin.to_string(),
                    })
                })
                .collect();
            if json {
                println!("{}", serde_json::Value::Array(items));
            } else if settings.secrets.is_empty() {
                println!("no secrets configured ([[secrets]] in the configuration)");
            } else {
                for s in &settings.secrets {
                    let hosts: Vec<String> = s.hosts.iter().map(ToString::to_string).collect();
                    let detail = match &s.source {
                        SecretSource::Env(v) => format!("env ${v}"),
                        SecretSource::File(p) => format!("file {}", p.display()),
                        SecretSource::Command { argv, timeout, ttl } => format!(
                            "command {} (timeout {}s, ttl {}s)",
                            argv.first().map_or("", String::as_str),
                            timeout.as_secs_f64(),
                            ttl.as_secs()
                        ),
                    };
                    println!(
                        "{}  hosts {}  header {}  env {}  source {}  ({})",
                        s.name,
                        hosts.join(","),
                        s.header,
                        s.env.as_deref().unwrap_or("-"),
                        detail,
                        s.origin
                    );
                }
            }
            Ok(0)
        }
        SecretsCommand::Test { name, json } => {
            let Some(secret) = settings.secrets.iter().find(|s| s.name == name) else {
                let known: Vec<&str> = settings.secrets.iter().map(|s| s.name.as_str()).collect();
                return Err(crate::policy_cmd::UsageError(format!(
                    "no secret named {name:?}; configured: {}",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ))
                .into());
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a runtime")?;
            let reader = sandgate_proxy::secret::SecretReader::default();
            let result = rt.block_on(reader.read(secret));
            match (&result, json) {
                (Ok(v), true) => {
                    println!("{}", json!({ "name": name, "ok": true, "length": v.expose().len() }))
                }
                (Ok(v), false) => {
                    println!(
                        "{name}: ok ({} source, {} characters)",
                        secret.source.kind(),
                        v.expose().len()
                    );
                }
                (Err(e), true) => {
                    println!("{}", json!({ "name": name, "ok": false, "error": e.to_string() }));
                }
                (Err(e), false) => println!("{name}: error: {e}"),
            }
            Ok(if result.is_ok() { 0 } else { 1 })
        }
    }
}
