//! `run`, `net`, `build` (and their `sandbox-*` names), `install`, `explain`: their flags and
//! what they print; the launcher itself is [`sandgate_daemon::launch`].

use std::path::PathBuf;

use sandgate_daemon::install;
use sandgate_daemon::launch;

use crate::emit;

pub use crate::tier_cli::LaunchArgs;

/// Options of `sandgate install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Directory for the `sandbox-run`, `sandbox-net`, `sandbox-build` links (default
    /// `~/.local/bin`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also register the Claude Code PermissionRequest hook (`~/.claude/settings.json`) and
    /// write the sandgate skill (`~/.claude/skills/sandgate/SKILL.md`).
    #[arg(long)]
    pub claude: bool,
    /// The tier the hook checks file-tool paths against.
    #[arg(long, default_value = "build", requires = "claude")]
    pub hook_tier: String,
}

/// Options of `sandgate explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The tier to explain.
    #[arg(long, default_value = "run")]
    pub tier: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a command in the named tier; returns its exit status.
pub fn run(tier: &str, args: LaunchArgs) -> anyhow::Result<u8> {
    Ok(launch::run(tier, args.options(Some(launch::serve_here)))?)
}

/// `sandgate install`: the busybox-style links, completions and man pages, and with --claude
/// the Claude Code hook and skill.
pub fn install(args: InstallArgs) -> anyhow::Result<u8> {
    let (dir, links) = install::links(args.dir)?;
    emit(Ok(links), false)?;
    if let Some((data, config)) = install::doc_homes() {
        let docs = crate::docs_cmd::install_docs(&data, &config)?;
        print!("{}", install::docs_text(&data, &config, &docs));
    }
    emit(Ok(install::path_note(&dir, std::env::var_os("PATH").as_deref())), false)?;
    if args.claude {
        emit(install::claude(&args.hook_tier), false)?;
    }
    Ok(0)
}

/// `sandgate explain`: what a tier allows and what this kernel can enforce.
pub fn explain(args: ExplainArgs) -> anyhow::Result<u8> {
    emit(launch::explain(&args.tier), args.json)
}
