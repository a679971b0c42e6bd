//! Interception as the CLI sees it: the CA's place and `sandgate secrets list|test` (what a
//! sandbox gets when interception is in use is `sandgate_daemon::setup::sandbox_env`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandgate_config::SecretSource;
use sandgate_proxy::Interceptor;
use serde_json::json;

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
