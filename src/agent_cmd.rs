//! `sandgate install --claude` and `sandgate uninstall`: the Claude Code hook, the skill file
//! and the wrapper links; the work is `sandgate_hook::claude_settings`, this prints what it did.

use std::path::PathBuf;

use anyhow::Context as _;
use sandgate_hook::claude_settings::{self, LinkRemoval, SkillRemoval};

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

fn claude_dir() -> anyhow::Result<PathBuf> {
    Ok(claude_settings::claude_dir(
        std::env::var_os("CLAUDE_CONFIG_DIR"),
        std::env::var_os("HOME"),
    )?)
}

/// Registers the hook in settings.json and writes the skill file.
pub fn install_claude(tier: &str) -> anyhow::Result<()> {
    let dir = claude_dir()?;
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let r = claude_settings::install(&dir, &claude_settings::hook_command(&exe, tier)?)?;
    if r.registered {
        println!("registered the PermissionRequest hook in {}", r.settings.display());
    } else {
        println!("the hook is already registered in {}", r.settings.display());
    }
    if let Some(skill) = r.skill_written {
        println!("wrote {}", skill.display());
    }
    Ok(())
}

/// `sandgate uninstall`: removes the links (those pointing at this binary) and, with --claude,
/// the hook and the skill.
pub fn uninstall(args: UninstallArgs) -> anyhow::Result<u8> {
    let dir = match args.dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --dir")?)
            .join(".local/bin"),
    };
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    for removal in claude_settings::remove_links(&dir, &exe)? {
        match removal {
            LinkRemoval::Remove(link) => println!("removed {}", link.display()),
            LinkRemoval::Keep { link, target } => eprintln!(
                "sandgate: {} points at {}, not this binary; left in place",
                link.display(),
                target.display()
            ),
        }
    }
    if args.claude {
        let r = claude_settings::uninstall(&claude_dir()?)?;
        if let Some(settings) = r.settings {
            println!("removed the hook from {}", settings.display());
        }
        match r.skill {
            SkillRemoval::Remove(skill) => println!("removed {}", skill.display()),
            SkillRemoval::Keep(skill) => {
                eprintln!("sandgate: {} was changed since install; left in place", skill.display())
            }
            SkillRemoval::Absent => {}
        }
    }
    Ok(0)
}
