//! Interception as the CLI sees it: the CA's place and `sandgate secrets list|test` (what a
//! sandbox gets when interception is in use is `sandgate_daemon::setup::sandbox_env`).

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandgate_proxy::secret_report::{SecretInfo, SecretTest, find_secret};

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
    let config = sandgate_daemon::setup::load_config()?;
    let settings = config
        .intercept_settings()
        .map_err(|e| sandgate_daemon::UsageError(format!("invalid configuration:\n{e}")))?;
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
                .map_err(|e| sandgate_daemon::UsageError(e.to_string()))?;
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
