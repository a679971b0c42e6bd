//! What stays writable at the top of a writable path: every dot-entry there is read-only unless
//! it is on [`writable_dotfiles`] (data: `writable_dotfiles.txt`, one name per line with the
//! reason), and the few names without a dot that tools act on when they merely start in the
//! directory ([`top_autorun`], `top_autorun.txt`) are read-only too. The launcher enforces it;
//! this module only holds the lists and checks names from configuration files.

/// The built-in allowlist, one `name  # why` per line.
const WRITABLE_DOTFILES: &str = include_str!("writable_dotfiles.txt");
/// The built-in non-dot autorun names, one `name  # why` per line.
const TOP_AUTORUN: &str = include_str!("top_autorun.txt");

/// Names (or `*` patterns) of a list file: the first word of every line that is not a comment.
fn names(text: &'static str) -> Vec<&'static str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Dot-entries at the top of a writable path that stay writable by default (build output and
/// caches that no tool runs anything from when it merely starts there).
pub fn writable_dotfiles() -> Vec<&'static str> {
    names(WRITABLE_DOTFILES)
}

/// Names without a leading dot at the top of a writable path that stay read-only (toolchain
/// selectors and tool configs acted on when a tool merely starts in the directory).
pub fn top_autorun() -> Vec<&'static str> {
    names(TOP_AUTORUN)
}

/// Why a name cannot be a top-level entry pattern, or `None` when it can: one path component,
/// not `.`/`..`, `*` only as its first or last character, and never `.git` (git metadata has
/// rules of its own: `[filesystem] git_writable`).
pub fn invalid_entry_name(name: &str) -> Option<&'static str> {
    let inner = name.strip_prefix('*').unwrap_or(name);
    let inner = inner.strip_suffix('*').unwrap_or(inner);
    if inner.is_empty() || name == "." || name == ".." {
        Some("an entry name must name something")
    } else if name.contains('/') || name.contains('\0') {
        Some("an entry name is one name at the top of the writable path, without '/'")
    } else if inner.contains('*') {
        Some("'*' may only start or end a name")
    } else if name == ".git" || name.starts_with(".git*") {
        Some(".git is decided by [filesystem] git_writable")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> impl Iterator<Item = &str> {
        text.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    }

    #[test]
    fn every_listed_name_is_valid_and_has_its_reason() {
        for (file, text) in [("writable_dotfiles", WRITABLE_DOTFILES), ("top_autorun", TOP_AUTORUN)]
        {
            for line in lines(text) {
                let (name, why) = line.split_once('#').expect("a comment");
                assert!(why.trim().len() > 8, "{file}: {name} needs a reason");
                assert_eq!(invalid_entry_name(name.trim()), None, "{file}: {line}");
            }
        }
        let dots = writable_dotfiles();
        assert!(dots.iter().all(|n| n.starts_with('.')), "only dot-entries: {dots:?}");
        let autorun = top_autorun();
        assert!(autorun.iter().all(|n| !n.starts_with('.')), "dot-entries are covered anyway");
        let mut sorted = dots.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), dots.len(), "no duplicates");
    }

    #[test]
    fn the_lists_hold_what_builds_write_and_not_what_tools_run() {
        let dots = writable_dotfiles();
        for must in [".venv", ".tox", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".next"] {
            assert!(dots.contains(&must), "{must}");
        }
        for must in [".nuxt", ".turbo", ".gradle", ".cache", ".parcel-cache", ".svelte-kit"] {
            assert!(dots.contains(&must), "{must}");
        }
        assert!(dots.contains(&".dart_tool"));
        // Each of these makes a tool run code when it merely starts in the directory.
        for never in [
            ".cargo",
            ".envrc",
            ".vscode",
            ".idea",
            ".cursor",
            ".claude",
            ".gemini",
            ".zed",
            ".continue",
            ".codex",
            ".devcontainer",
            ".pre-commit-config.yaml",
            ".husky",
            ".mcp.json",
            ".npmrc",
            ".yarnrc.yml",
            ".yarn",
            ".mvn",
            ".bsp",
            ".direnv",
            ".git",
            ".gitmodules",
            ".pylintrc",
            ".pnp.cjs",
            ".bundle",
            ".terraform",
            ".vercel",
        ] {
            assert!(!dots.contains(&never), "{never} must not be writable");
        }
        let autorun = top_autorun();
        for must in ["rust-toolchain", "rust-toolchain.toml", "opencode.json", "global.json"] {
            assert!(autorun.contains(&must), "{must}");
        }
    }

    #[test]
    fn names_from_config_are_checked() {
        for good in [".venv", ".out*", "*.code-workspace", "Makefile.local", ".gitignore"] {
            assert_eq!(invalid_entry_name(good), None, "{good}");
        }
        for bad in ["", "*", ".", "..", "a/b", ".git", ".git*", "a*b", "**"] {
            assert!(invalid_entry_name(bad).is_some(), "{bad:?}");
        }
    }
}
