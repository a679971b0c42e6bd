//! What `sandgate install` and `sandgate uninstall` say: the busybox-style links, the PATH
//! note, and the Claude Code hook and skill (the work is `launch::install_links` and
//! `sandgate_hook::claude_settings`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandgate_hook::claude_settings::{self, LinkRemoval, SkillRemoval};

use crate::report::{Printed, lines};

/// Makes the `sandbox-*` links in `dir` (default `~/.local/bin`); returns the directory and
/// the lines saying so.
pub fn links(dir: Option<PathBuf>) -> anyhow::Result<(PathBuf, Printed)> {
    let (dir, links) = crate::launch::install_links(dir)?;
    let text =
        lines(links.iter().map(|(link, exe)| format!("{} -> {}", link.display(), exe.display())));
    Ok((dir, Printed::new(text, "")))
}

/// The note for a link directory that is not on `PATH` (`path`), or nothing.
pub fn path_note(dir: &Path, path: Option<&std::ffi::OsStr>) -> Printed {
    // Debian's default PATH for users has no ~/.local/bin until a login shell finds it there.
    if path.is_some_and(|p| std::env::split_paths(p).any(|d| d == dir)) {
        return Printed::default();
    }
    Printed::new(
        format!(
            "note: {} is not on your PATH; add `export PATH=\"{}:$PATH\"` to ~/.profile (Debian \
             adds ~/.local/bin at the next login when it exists)\n",
            dir.display(),
            dir.display()
        ),
        "",
    )
}

/// Where `sandgate install` writes each shell's completions, by shell name: bash and zsh under
/// `data_home` (`$XDG_DATA_HOME`), fish under `config_home` (fish reads its own directory).
pub fn completion_paths(data_home: &Path, config_home: &Path) -> [(&'static str, PathBuf); 3] {
    [
        ("bash", data_home.join("bash-completion/completions/sandgate")),
        ("zsh", data_home.join("zsh/site-functions/_sandgate")),
        ("fish", config_home.join("fish/completions/sandgate.fish")),
    ]
}

/// Where `sandgate install` writes the man pages.
pub fn man_dir(data_home: &Path) -> PathBuf {
    data_home.join("man/man1")
}

fn claude_dir() -> anyhow::Result<PathBuf> {
    Ok(claude_settings::claude_dir(
        std::env::var_os("CLAUDE_CONFIG_DIR"),
        std::env::var_os("HOME"),
    )?)
}

/// Registers the Claude Code hook (checking file-tool paths against `tier`) in settings.json and
/// writes the skill file.
pub fn claude(tier: &str) -> anyhow::Result<Printed> {
    let dir = claude_dir()?;
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let r = claude_settings::install(&dir, &claude_settings::hook_command(&exe, tier)?)?;
    let mut out = vec![if r.registered {
        format!("registered the PermissionRequest hook in {}", r.settings.display())
    } else {
        format!("the hook is already registered in {}", r.settings.display())
    }];
    if let Some(skill) = r.skill_written {
        out.push(format!("wrote {}", skill.display()));
    }
    Ok(Printed::new(lines(out), ""))
}

/// Removes the links in `dir` (default `~/.local/bin`) that point at this binary or at the small
/// launcher next to it.
pub fn remove_links(dir: Option<PathBuf>) -> anyhow::Result<Printed> {
    let dir = match dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --dir")?)
            .join(".local/bin"),
    };
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let launcher = exe.with_file_name(crate::LAUNCHER_NAME);
    let mut r = Printed::default();
    for removal in claude_settings::remove_links(&dir, &[&exe, &launcher])? {
        match removal {
            LinkRemoval::Remove(link) => r.text.push_str(&format!("removed {}\n", link.display())),
            LinkRemoval::Keep { link, target } => {
                r = r.note(format!(
                    "sandgate: {} points at {}, not this sandgate; left in place",
                    link.display(),
                    target.display()
                ))
            }
        }
    }
    Ok(r)
}

/// Removes the Claude Code hook and the skill file (unless it was changed since install).
pub fn remove_claude() -> anyhow::Result<Printed> {
    let r = claude_settings::uninstall(&claude_dir()?)?;
    let mut p = Printed::default();
    if let Some(settings) = r.settings {
        p.text.push_str(&format!("removed the hook from {}\n", settings.display()));
    }
    match r.skill {
        SkillRemoval::Remove(skill) => p.text.push_str(&format!("removed {}\n", skill.display())),
        SkillRemoval::Keep(skill) => {
            p = p.note(format!(
                "sandgate: {} was changed since install; left in place",
                skill.display()
            ))
        }
        SkillRemoval::Absent => {}
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_note_only_when_the_links_are_off_path() {
        let dir = Path::new("/home/u/.local/bin");
        assert_eq!(
            path_note(dir, Some("/usr/bin:/home/u/.local/bin".as_ref())),
            Printed::default()
        );
        assert!(
            path_note(dir, Some("/usr/bin".as_ref()))
                .text
                .starts_with("note: /home/u/.local/bin is not on your PATH")
        );
        assert!(!path_note(dir, None).text.is_empty());
    }
}
