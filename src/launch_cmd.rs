//! Launcher subcommands: `run`, `net`, `build` (and their `sandbox-*` names), `install`, `explain`.

use anyhow::bail;

/// Options shared by the tier commands.
#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// The command to run and its arguments (default: an interactive `$SHELL`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// Options of `sandgate install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {}

/// Options of `sandgate explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {}

/// Runs a command in the named tier; returns its exit status.
pub fn run(tier: &str, _args: LaunchArgs) -> anyhow::Result<u8> {
    bail!("`sandgate {tier}` is not yet available in this build")
}

/// Creates the busybox-style links.
pub fn install(_args: InstallArgs) -> anyhow::Result<u8> {
    bail!("`sandgate install` is not yet available in this build")
}

/// Explains a tier.
pub fn explain(_args: ExplainArgs) -> anyhow::Result<u8> {
    bail!("`sandgate explain` is not yet available in this build")
}
