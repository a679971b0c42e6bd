//! What a "project" is, for the per-directory configuration and for project-scoped grants
//! (`--always`, `--for`): the nearest directory at or above the working directory that has a
//! per-directory configuration file, else the repository root around it, so that the policy and
//! the answers given in `~/code/demo` also hold in `~/code/demo/src`.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The per-directory key: the first 16 hex digits of sha256 of the canonical path.
pub fn project_key(canonical_dir: &Path) -> String {
    let digest = Sha256::digest(canonical_dir.as_os_str().as_encoded_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The project directory of `cwd` (canonical), in this order:
///
/// 1. the nearest of `cwd` and its ancestors that has a per-directory configuration file in
///    `config_dir` (`$XDG_CONFIG_HOME/sandgate`) — its policy applies in every subdirectory;
/// 2. else the nearest that holds a `.git` entry (a repository or a worktree's root);
/// 3. else `cwd` itself.
///
/// A configured directory wins over a nearer `.git`: a sandbox that can write a subdirectory can
/// create a `.git` there, and that must not step out from under the configuration that applies
/// (nor out of its project's grants). The search stops below `home` and `/`: a dotfiles repository
/// or a configuration for the home directory must not make every directory under it one project.
/// `cwd` itself may be `home`.
pub fn project_root(cwd: &Path, config_dir: &Path, home: Option<&Path>) -> PathBuf {
    configured_root(cwd, config_dir, home)
        .or_else(|| {
            candidates(cwd, home).find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
        })
        .map_or_else(|| cwd.to_owned(), Path::to_owned)
}

/// The nearest of `cwd` and its ancestors (with [`project_root`]'s limits) that has a
/// per-directory configuration file in `config_dir`.
pub(crate) fn configured_root<'a>(
    cwd: &'a Path,
    config_dir: &Path,
    home: Option<&Path>,
) -> Option<&'a Path> {
    candidates(cwd, home).find(|d| project_file(config_dir, d).is_file())
}

/// The per-directory configuration file of `dir` (canonical) in `config_dir`.
pub(crate) fn project_file(config_dir: &Path, dir: &Path) -> PathBuf {
    config_dir.join("projects").join(format!("{}.toml", project_key(dir)))
}

/// `cwd` and its ancestors, stopping below `home` (compared by its real path too) and `/`.
fn candidates<'a>(cwd: &'a Path, home: Option<&Path>) -> impl Iterator<Item = &'a Path> {
    let homes: Vec<PathBuf> = home
        .into_iter()
        .flat_map(|h| [h.to_owned(), h.canonicalize().unwrap_or_else(|_| h.to_owned())])
        .collect();
    cwd.ancestors().take_while(move |dir| {
        let above = *dir != cwd;
        !(above && (homes.iter().any(|h| h == dir) || dir.parent().is_none()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_is_the_configured_directory_or_the_repository() {
        let t = std::env::temp_dir().join(format!("sandgate-project-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let home = t.join("home");
        let cfg = t.join("cfg");
        let repo = home.join("code/demo");
        let deep = repo.join("src/bin");
        let loose = home.join("notes/a");
        let configured = home.join("work");
        for d in [&deep, &loose, &configured.join("x/y"), &cfg.join("projects")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir(repo.join(".git")).unwrap();
        std::fs::write(cfg.join("projects").join(format!("{}.toml", project_key(&configured))), "")
            .unwrap();
        let root = |cwd: &Path| project_root(cwd, &cfg, Some(&home));
        // (working directory, project)
        let rows = [
            (&deep, &repo),
            (&repo.join("src"), &repo),
            (&repo, &repo),
            (&configured.join("x/y"), &configured),
            (&loose, &loose),
            (&home, &home),
        ];
        for (cwd, want) in rows {
            assert_eq!(&root(cwd), want, "{}", cwd.display());
        }
        // A repository in the home directory (dotfiles) is not every directory's project.
        std::fs::create_dir(home.join(".git")).unwrap();
        assert_eq!(root(&loose), loose);
        assert_eq!(root(&home), home);
        // A .git file (a worktree or submodule) counts too.
        let wt = home.join("wt");
        std::fs::create_dir_all(wt.join("sub")).unwrap();
        std::fs::write(wt.join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(root(&wt.join("sub")), wt);
        // A configured directory wins over a nearer repository, and a `.git` made below it (a
        // sandbox writing its project could) does not step out of its configuration.
        let configure = |dir: &Path| std::fs::write(project_file(&cfg, dir), "").unwrap();
        configure(&home.join("code"));
        assert_eq!(root(&deep), home.join("code"));
        std::fs::create_dir(configured.join("x/.git")).unwrap();
        assert_eq!(root(&configured.join("x/y")), configured);
        // The home directory's own file applies there, not in every directory below it; nor
        // when the home is named through a link.
        configure(&home);
        assert_eq!(root(&loose), loose);
        assert_eq!(root(&home), home);
        let link = t.join("home-link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        assert_eq!(project_root(&loose, &cfg, Some(&link)), loose);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
