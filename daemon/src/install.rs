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

/// `$XDG_DATA_HOME` and `$XDG_CONFIG_HOME` (or `~/.local/share` and `~/.config`): where the
/// completions and man pages go; `None` without a home.
pub fn doc_homes() -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)?;
    let xdg = |var: &str, fallback: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map_or_else(|| home.join(fallback), PathBuf::from)
    };
    Some((xdg("XDG_DATA_HOME", ".local/share"), xdg("XDG_CONFIG_HOME", ".config")))
}

/// What `install` says about the completions and man pages it wrote (`written`): each shell's
/// file and who reads it from there, and the pages' directory.
pub fn docs_text(data_home: &Path, config_home: &Path, written: &[PathBuf]) -> String {
    let mut out = Vec::new();
    for (shell, path) in completion_paths(data_home, config_home) {
        if !written.contains(&path) {
            continue;
        }
        let reader = match shell {
            "bash" => "read by bash-completion",
            "zsh" => "zsh reads it when its directory is in fpath, before compinit",
            _ => "read by fish",
        };
        out.push(format!("{shell} completions: {} ({reader})", path.display()));
    }
    let man = man_dir(data_home);
    let pages = written.iter().filter(|p| p.starts_with(&man)).count();
    if pages > 0 {
        // man-db looks in `D/../share/man` for each directory D on PATH.
        let manpath = man.parent().unwrap_or(&man);
        let found = match data_home.parent() {
            Some(prefix) if data_home.ends_with("share") => format!(
                "`man sandgate` finds them when {} is on PATH; else add {} to MANPATH",
                prefix.join("bin").display(),
                manpath.display()
            ),
            _ => format!("add {} to MANPATH for `man sandgate`", manpath.display()),
        };
        out.push(format!("man pages: {pages} in {} ({found})", man.display()));
    }
    lines(out)
}

/// Removes the completions and man pages `install` wrote under these homes: the completion
/// files at their places and the `sandgate*.1` pages, each only when it is sandgate's (its
/// text names sandgate; a file of the same name someone else wrote stays).
pub fn remove_docs(data_home: &Path, config_home: &Path) -> anyhow::Result<Printed> {
    let mut candidates: Vec<(PathBuf, &str)> = completion_paths(data_home, config_home)
        .into_iter()
        .map(|(_, p)| (p, "sandgate"))
        .collect();
    let man = man_dir(data_home);
    for entry in std::fs::read_dir(&man).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if (name == "sandgate.1" || name.starts_with("sandgate-")) && name.ends_with(".1") {
            candidates.push((entry.path(), ".TH SANDGATE"));
        }
    }
    candidates.sort();
    let mut r = Printed::default();
    let mut pages = 0;
    for (path, mark) in candidates {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        if !text.contains(mark) {
            r = r.note(format!(
                "sandgate: {} was not written by sandgate; left in place",
                path.display()
            ));
            continue;
        }
        std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
        if path.starts_with(&man) {
            pages += 1;
        } else {
            r.text.push_str(&format!("removed {}\n", path.display()));
        }
    }
    if pages > 0 {
        r.text.push_str(&format!("removed {pages} man pages from {}\n", man.display()));
    }
    Ok(r)
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

    /// `install` names each file and who reads it; `uninstall` removes what install wrote and
    /// only that (a same-named file of someone else's stays, said so).
    #[test]
    fn docs_are_named_on_install_and_removed_on_uninstall() {
        let dir = tempfile::tempdir().unwrap();
        let (data, config) = (dir.path().join("data"), dir.path().join("config"));
        let mut written = Vec::new();
        for (shell, path) in completion_paths(&data, &config) {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("# {shell} completions for sandgate\n")).unwrap();
            written.push(path);
        }
        std::fs::create_dir_all(man_dir(&data)).unwrap();
        for page in ["sandgate.1", "sandgate-run.1"] {
            let path = man_dir(&data).join(page);
            std::fs::write(&path, ".TH SANDGATE 1\n").unwrap();
            written.push(path);
        }
        let foreign = man_dir(&data).join("sandgate-other.1");
        std::fs::write(&foreign, ".TH OTHER 1\n").unwrap();
        let text = docs_text(&data, &config, &written);
        let bash = data.join("bash-completion/completions/sandgate");
        assert!(
            text.contains(&format!(
                "bash completions: {} (read by bash-completion)",
                bash.display()
            )),
            "{text}"
        );
        assert!(
            text.contains("zsh completions: ") && text.contains("fish completions: "),
            "{text}"
        );
        assert!(text.contains(&format!("man pages: 2 in {}", man_dir(&data).display())), "{text}");

        let r = remove_docs(&data, &config).unwrap();
        assert!(r.text.contains(&format!("removed {}\n", bash.display())), "{}", r.text);
        assert!(r.text.contains("removed 2 man pages from "), "{}", r.text);
        for p in &written {
            assert!(!p.exists(), "{}", p.display());
        }
        assert!(foreign.exists());
        assert!(r.text_notes.contains("sandgate-other.1 was not written by sandgate"), "{r:?}");
        // Nothing left: nothing said.
        let r = remove_docs(&data, &config).unwrap();
        assert_eq!(r.text, "");
    }

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
