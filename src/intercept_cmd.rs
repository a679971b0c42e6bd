//! Interception as the CLI sees it: the CA's place and `sandgate secrets list|test` (what a
//! sandbox gets when interception is in use is `sandgate_daemon::setup::sandbox_env`).

use clap::{Args, Subcommand};
use sandgate_daemon::policy_report;

use crate::emit;

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
    match args.command {
        SecretsCommand::List { json } => emit(policy_report::secrets_list(), json),
        SecretsCommand::Test { name, json } => emit(policy_report::secrets_test(&name), json),
    }
}
