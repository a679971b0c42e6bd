//! What a "project" is for project-scoped grants (`--always`, `--for`): the repository root
//! around the working directory, or the nearest directory with a per-directory configuration,
//! so that an answer given in `~/code/demo` also covers `~/code/demo/src`.

use std::path::{Path, PathBuf};

use crate::layers::project_key;

/// The project directory of `cwd` (canonical): the nearest of `cwd` and its ancestors that holds
/// a `.git` entry (a repository or a worktree's root) or has a per-directory configuration file
/// in `config_dir` (`$XDG_CONFIG_HOME/sandgate`); `cwd` itself when none does.
///
/// The search stops below `home` and `/`: a dotfiles repository in the home directory must not
/// make every directory under it one project. `cwd` itself may be `home`.
pub fn project_root(cwd: &Path, config_dir: &Path, home: Option<&Path>) -> PathBuf {
    for dir in cwd.ancestors() {
        let above = dir != cwd;
        if above && (Some(dir) == home || dir.parent().is_none()) {
            break;
        }
        let configured =
            config_dir.join("projects").join(format!("{}.toml", project_key(dir))).is_file();
        if configured || std::fs::symlink_metadata(dir.join(".git")).is_ok() {
            return dir.to_owned();
        }
    }
    cwd.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_is_the_repository_or_the_configured_directory() {
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
        std::fs::remove_dir_all(&t).unwrap();
    }
}
