//! `sandgate uninstall`: its flags; the work is [`sandgate_daemon::install`]'s.

use std::path::PathBuf;

use sandgate_daemon::install;

use crate::emit;

/// Options of `sandgate uninstall`.
#[derive(Debug, clap::Args)]
pub struct UninstallArgs {
    /// Directory the links were made in (default `~/.local/bin`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also remove the Claude Code hook and skill file.
    #[arg(long)]
    pub claude: bool,
}

/// `sandgate uninstall`: removes the links (those pointing at this binary), the completions and
/// man pages `install` wrote, and, with --claude, the hook and the skill.
pub fn uninstall(args: UninstallArgs) -> anyhow::Result<u8> {
    emit(install::remove_links(args.dir), false)?;
    if let Some((data, config)) = install::doc_homes() {
        emit(install::remove_docs(&data, &config), false)?;
    }
    if args.claude {
        emit(install::remove_claude(), false)?;
    }
    Ok(0)
}
