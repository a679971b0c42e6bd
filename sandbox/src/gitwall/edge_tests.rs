//! Edges of the git wall's parsers and walk that the layouts in `tests.rs` do not reach, each
//! found by a mutation run (bench/mutants.sh gitwall). Kept apart from `tests.rs`, which changes
//! with the wall.

use std::process::Command;

use super::*;

/// Runs git in `dir` with none of the machine's configuration.
fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.email=a@b", "-c", "user.name=n", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_boolean_fsmonitor_names_no_file_but_other_keys_keep_boolean_looking_values() {
    let refs = config_refs(b"[core]\n\tfsmonitor = true\n\thooksPath = yes\n").unwrap();
    let got: Vec<(&str, &str)> = refs.iter().map(|r| (r.key.as_str(), r.value.as_str())).collect();
    assert_eq!(got, [("core.hookspath", "yes")]);
}

#[test]
fn only_gitlinks_are_read_from_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    std::fs::write(d.join("file"), "x").unwrap();
    git(d, &["add", "file"]);
    let sha = "0123456789012345678901234567890123456789";
    git(d, &["update-index", "--add", "--cacheinfo", &format!("160000,{sha},sub")]);
    let index = std::fs::read(d.join(".git/index")).unwrap();
    assert_eq!(gitlinks(&index, false).unwrap(), ["sub"]);
}

/// The wall of one writable directory, relative to it.
fn wall_of(w: &Path) -> Vec<String> {
    let wall = protect_git(&[w.to_path_buf()], false, None, &OuterConfig::default());
    wall.read_only.iter().map(|p| p.strip_prefix(w).unwrap().display().to_string()).collect()
}

#[test]
fn a_directory_with_no_repository_gets_no_wall() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    std::fs::write(w.join("file"), "x").unwrap();
    assert_eq!(wall_of(&w), Vec::<String>::new(), "no placeholder for a `.git` that is not there");
}

#[test]
fn a_dot_git_at_the_top_that_git_cannot_use_is_kept_from_becoming_one_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    std::fs::write(w.join(".git"), "gitdir: ../nowhere\n").unwrap();
    assert_eq!(wall_of(&w), [".git"]);
}

#[test]
fn build_output_is_not_searched_for_repositories() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    // `.git` directories git cannot use (no HEAD): protected where the scan looks.
    for d in ["src/x/.git", "node_modules/x/.git", "a/.venv/x/.git"] {
        std::fs::create_dir_all(w.join(d)).unwrap();
    }
    assert_eq!(wall_of(&w), ["src/x/.git"]);
}

/// A repository made by hand at `w` (a `.git` with `HEAD`: what the walk takes for one).
fn bare_repo(w: &Path, config: &str) {
    std::fs::create_dir_all(w.join(".git")).unwrap();
    std::fs::write(w.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(w.join(".git/config"), config).unwrap();
}

#[test]
fn includes_are_followed_sixteen_deep_and_no_further() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    bare_repo(&w, "[include]\n\tpath = ../i1\n");
    for i in 1..=20 {
        std::fs::write(w.join(format!("i{i}")), format!("[include]\n\tpath = i{}\n", i + 1))
            .unwrap();
    }
    let got = wall_of(&w);
    // The repository's config is read at depth 0; includes down to depth 16 are read (and
    // protected): a loop of includes ends there.
    for i in 1..=16 {
        assert!(got.contains(&format!("i{i}")), "i{i}: {got:?}");
    }
    assert!(!got.contains(&"i17".to_owned()), "{got:?}");
}

/// The deepest level of `.git/modules/a/modules/a/...` (each level a git directory, one with
/// `HEAD`) whose hooks the wall protects, when the levels in `slashed` are named with a slash
/// (`x/a`: a directory on the way, without `HEAD`).
fn deepest_module(slashed: &[usize]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    bare_repo(&w, "");
    let mut d = w.join(".git");
    for level in 1..=20 {
        d = d.join(if slashed.contains(&level) { "modules/x/a" } else { "modules/a" });
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("HEAD"), "x").unwrap();
    }
    let wall = protect_git(std::slice::from_ref(&w), true, None, &OuterConfig::default());
    let mut d = w.join(".git");
    let mut deepest = 0;
    for level in 1..=20 {
        d = d.join(if slashed.contains(&level) { "modules/x/a" } else { "modules/a" });
        if wall.read_only.contains(&d.join("hooks")) {
            deepest = level;
        }
    }
    deepest
}

#[test]
fn submodule_git_directories_are_searched_seventeen_levels_deep_and_no_further() {
    // Sixteen steps below the first level; a slash-named level takes a step of its own.
    assert_eq!(deepest_module(&[]), 17);
    assert_eq!(deepest_module(&[3]), 16);
    assert_eq!(deepest_module(&[17]), 16);
}

#[test]
fn a_gitlink_path_is_plain_components_only() {
    for (path, plain) in [
        ("a", true),
        ("a/b", true),
        ("", false),
        ("..", false),
        ("../x", false),
        ("a/../../x", false),
        ("/abs", false),
        ("./a", false),
    ] {
        assert_eq!(plain_relative(path).is_some(), plain, "{path:?}");
    }
}

#[test]
fn a_directory_a_value_names_outside_the_repository_stays_writable() {
    // (`init.templateDir`-like values: a directory strictly inside the working tree is
    // protected, what it holds may run; one outside it is not this repository's.)
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    bare_repo(&w.join("r"), "[foo]\n\tinside = ./tpl\n\toutside = ../d\n");
    std::fs::create_dir_all(w.join("r/tpl")).unwrap();
    std::fs::create_dir_all(w.join("d")).unwrap();
    assert_eq!(wall_of(&w), ["r/.git", "r/tpl"]);
}

#[test]
fn pushd_moves_where_a_command_finds_its_files_as_cd_does() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    bare_repo(&w.join("r"), "[alias]\n\tp = !pushd tools && ./run.sh\n\tc = !cd bin && ./x.sh\n");
    for f in ["r/tools/run.sh", "r/bin/x.sh"] {
        std::fs::create_dir_all(w.join(f).parent().unwrap()).unwrap();
        std::fs::write(w.join(f), "").unwrap();
    }
    assert_eq!(wall_of(&w), ["r/.git", "r/bin/x.sh", "r/tools/run.sh"]);
}

#[test]
fn a_path_the_shell_reads_as_relative_is_not_taken_for_an_absolute_one() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    let f = w.join("other/f.sh");
    // `x//abs/f.sh` is `x/abs/f.sh` to the shell: a file below `x`, not `/abs/f.sh`.
    bare_repo(&w.join("r"), &format!("[alias]\n\ta = !sh x/{}\n", f.display()));
    std::fs::create_dir_all(w.join("other")).unwrap();
    std::fs::write(&f, "").unwrap();
    assert_eq!(wall_of(&w), ["r/.git"]);
}

/// The wall of `w` with `git_writable` and `outer`, relative to `w`.
fn writable_git_wall(w: &Path, outer: &OuterConfig) -> Vec<String> {
    let wall = protect_git(&[w.to_path_buf()], true, None, outer);
    wall.read_only.iter().map(|p| p.strip_prefix(w).unwrap().display().to_string()).collect()
}

#[test]
fn config_worktree_is_protected_when_it_exists_or_when_the_config_turns_it_on() {
    for (config, file, protected) in [
        ("", false, false),
        ("", true, true),
        ("[extensions]\n\tworktreeConfig = true\n", false, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        bare_repo(&w, config);
        if file {
            std::fs::write(w.join(".git/config.worktree"), "").unwrap();
        }
        let got = writable_git_wall(&w, &OuterConfig::default());
        assert_eq!(got.contains(&".git/config.worktree".to_owned()), protected, "{config} {got:?}");
    }
}

#[test]
fn the_environments_config_applies_to_a_bare_repository_below_too() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    for d in ["m.git/objects", "m.git/refs"] {
        std::fs::create_dir_all(w.join(d)).unwrap();
    }
    std::fs::write(w.join("m.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let outer = outer_config(&[
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("GIT_CONFIG_KEY_0".into(), "core.hooksPath".into()),
        ("GIT_CONFIG_VALUE_0".into(), "hooks-x".into()),
    ]);
    let got = writable_git_wall(&w, &outer);
    assert!(got.contains(&"m.git/hooks-x".to_owned()), "{got:?}");
}

#[test]
fn a_submodules_git_directory_or_pointer_is_protected_as_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    bare_repo(&w, "");
    std::fs::write(
        w.join(".gitmodules"),
        "[submodule \"d\"]\n\tpath = d\n[submodule \"p\"]\n\tpath = p\n",
    )
    .unwrap();
    // `d`: a git directory of its own (its hooks and config); `p`: a pointer git cannot follow
    // today (the pointer itself).
    bare_repo(&w.join("d"), "");
    std::fs::create_dir_all(w.join("p")).unwrap();
    std::fs::write(w.join("p/.git"), "gitdir: ../nowhere\n").unwrap();
    // (Without the scan, which finds both below the writable path anyway.)
    let wall =
        protect_git_found(std::slice::from_ref(&w), true, None, &OuterConfig::default(), &[]);
    let got: Vec<String> =
        wall.read_only.iter().map(|p| p.strip_prefix(&w).unwrap().display().to_string()).collect();
    for want in [".git/hooks", ".git/config", "d/.git/hooks", "d/.git/config", "p/.git"] {
        assert!(got.contains(&want.to_owned()), "{want}: {got:?}");
    }
    assert!(!got.contains(&"d/.git".to_owned()), "{got:?}");
}

#[test]
fn a_sibling_submodule_outside_the_writable_path_is_not_read() {
    // Git run in `r/w` reads `r`'s config, not that of the submodule `r/s` next to it.
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().canonicalize().unwrap();
    bare_repo(&r, "");
    std::fs::write(r.join(".gitmodules"), "[submodule \"s\"]\n\tpath = s\n").unwrap();
    bare_repo(&r.join("s"), "[core]\n\thooksPath = ../w/h\n");
    std::fs::create_dir_all(r.join("w")).unwrap();
    assert_eq!(wall_of(&r.join("w")), Vec::<String>::new());
}

#[test]
fn a_submodule_reached_through_a_link_into_the_writable_path_counts() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().canonicalize().unwrap();
    bare_repo(&r, "");
    std::fs::write(r.join(".gitmodules"), "[submodule \"l\"]\n\tpath = l\n").unwrap();
    bare_repo(&r.join("w/x"), "");
    std::os::unix::fs::symlink("w/x", r.join("l")).unwrap();
    let wall = protect_git(&[r.join("w")], false, None, &OuterConfig::default());
    assert!(wall.read_only.contains(&r.join("l/.git")), "{wall:?}");
}

#[test]
fn nested_submodules_are_followed_seventeen_deep_and_no_further() {
    // (Without the scan: these would be found below the writable path anyway.)
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    let mut d = w.clone();
    for _ in 0..=20 {
        bare_repo(&d, "");
        std::fs::write(d.join(".gitmodules"), "[submodule \"s\"]\n\tpath = s\n").unwrap();
        d = d.join("s");
    }
    let wall =
        protect_git_found(std::slice::from_ref(&w), false, None, &OuterConfig::default(), &[]);
    let levels: Vec<usize> = wall
        .read_only
        .iter()
        .map(|p| p.strip_prefix(&w).unwrap().components().count() - 1)
        .collect();
    assert_eq!(levels.iter().max(), Some(&17), "{levels:?}");
    assert_eq!(levels.len(), 18, "the repository's own `.git` and 17 below: {levels:?}");
}

#[test]
fn a_gitlink_without_a_checkout_is_found_by_its_submodules_name() {
    // An index gitlink `libs/b`, named `b-name` in `.gitmodules` (next to another entry): its
    // git directory is `.git/modules/b-name`, whose hooksPath (from the work tree) counts.
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().canonicalize().unwrap();
    git(&w, &["init", "-q"]);
    let sha = "0123456789012345678901234567890123456789";
    git(&w, &["update-index", "--add", "--cacheinfo", &format!("160000,{sha},libs/b")]);
    std::fs::write(
        w.join(".gitmodules"),
        "[submodule \"a-name\"]\n\tpath = libs/a\n[submodule \"b-name\"]\n\tpath = libs/b\n",
    )
    .unwrap();
    std::fs::create_dir_all(w.join("libs/b")).unwrap();
    let m = w.join(".git/modules/b-name");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("HEAD"), "x").unwrap();
    std::fs::write(m.join("config"), "[core]\n\thooksPath = ../../hooks-b\n").unwrap();
    let got = writable_git_wall(&w, &OuterConfig::default());
    assert!(got.contains(&"hooks-b".to_owned()), "{got:?}");
}
