//! The filesystem and process walls of each tier, as root and as an unprivileged user.

use crate::support::sandbox::{self, HOST4, Scratch, TestHost, WRITE_REFUSED, Who, both, refused};

const TIERS: [&str; 3] = ["run", "net", "build"];

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

fn reads_work_and_writes_are_confined(who: &Who) {
    let s = Scratch::new(who);
    for tier in TIERS {
        assert_eq!(s.probe(tier, &[], &["read", "/etc/hostname"]), "ok", "{tier}");
        assert_eq!(s.probe(tier, &[], &["read", p(&s.proj.join("file.txt"))]), "ok", "{tier}");
        let etc = s.probe(tier, &[], &["write", "/etc/sandgate-test"]);
        refused(&etc, WRITE_REFUSED, &format!("{tier}: write /etc"));
        let victim_path = s.outside.join("victim.txt");
        let victim = p(&victim_path);
        refused(&s.probe(tier, &[], &["write", victim]), WRITE_REFUSED, "write outside");
        refused(&s.probe(tier, &[], &["chmod", victim]), WRITE_REFUSED, "chmod outside");
        refused(&s.probe(tier, &[], &["utime", victim]), WRITE_REFUSED, "utime outside");
        refused(
            &s.probe(tier, &[], &["write", p(&s.home.join("new"))]),
            WRITE_REFUSED,
            "write in HOME",
        );
        // The private /tmp is writable and stays private.
        let tmp = format!("/tmp/sandgate-private-{}", std::process::id());
        assert_eq!(s.probe(tier, &[], &["write", &tmp]), "ok", "{tier}: private /tmp");
        assert!(!std::path::Path::new(&tmp).exists(), "{tier}: /tmp leaked to the host");
        let in_cwd = s.probe(tier, &[], &["write", p(&s.proj.join(format!("new-{tier}")))]);
        if tier == "build" {
            assert_eq!(in_cwd, "ok", "build writes its cwd");
            assert!(s.proj.join("new-build").exists());
        } else {
            refused(&in_cwd, WRITE_REFUSED, &format!("{tier}: write cwd"));
        }
    }
    assert_eq!(std::fs::read_to_string(s.outside.join("victim.txt")).unwrap(), "untouched\n");
}

fn allow_write_opens_one_path(who: &Who) {
    let s = Scratch::new(who);
    let target = s.outside.join("victim.txt");
    let arg = format!("--allow-write={}", target.display());
    assert_eq!(s.probe("run", &[&arg], &["write", p(&target)]), "ok");
    let other = s.outside.join("secret2.txt");
    refused(&s.probe("run", &[&arg], &["write", p(&other)]), WRITE_REFUSED, "other path");
}

fn credentials_config_and_store_are_out_of_reach(who: &Who) {
    let s = Scratch::new(who);
    for tier in TIERS {
        let key = s.probe(tier, &[], &["read", p(&s.home.join(".ssh/id_rsa"))]);
        refused(&key, &["EACCES", "EPERM", "ENOENT"], &format!("{tier}: ~/.ssh/id_rsa"));
        let extra = s.probe(tier, &[], &["read", p(&s.outside.join("secret.txt"))]);
        refused(&extra, &["EACCES", "EPERM", "ENOENT"], "SANDGATE_EXTRA_DENY");
        let store =
            s.probe(tier, &[], &["read", p(&s.home.join(".local/share/sandgate/sandgate.db"))]);
        refused(&store, &["EACCES", "EPERM", "ENOENT"], "store");
        let config =
            s.probe(tier, &[], &["write", p(&s.home.join(".config/sandgate/config.toml"))]);
        refused(&config, WRITE_REFUSED, "config");
        store_and_config_stay_unwritable(&s, tier, &[]);
    }
    // Even with HOME writable, the config, the shell rc files and credentials stay shut.
    let arg = format!("--allow-write={}", s.home.display());
    let config = s.probe("build", &[&arg], &["write", p(&s.home.join(".config/sandgate/x.toml"))]);
    refused(&config, WRITE_REFUSED, "config dir with HOME writable");
    let rc = s.probe("build", &[&arg], &["write", p(&s.home.join(".bashrc"))]);
    refused(&rc, WRITE_REFUSED, ".bashrc with HOME writable");
    for autorun in [".gitconfig", ".local/bin/git", ".config/systemd/user/x.service"] {
        let answer = s.probe("build", &[&arg], &["write", p(&s.home.join(autorun))]);
        refused(&answer, &["EACCES", "EPERM", "EROFS", "ENOTDIR"], autorun);
    }
    assert!(!s.home.join(".gitconfig").exists(), "placeholder ~/.gitconfig left behind");
    let ssh = s.probe("build", &[&arg], &["write", p(&s.home.join(".ssh/authorized_keys"))]);
    refused(&ssh, &["EACCES", "EPERM", "EROFS", "ENOENT"], "~/.ssh with HOME writable");
    store_and_config_stay_unwritable(&s, "build", &[&arg]);
    // Nothing of it reached the real files.
    let data = s.home.join(".local/share/sandgate");
    assert!(!data.join("planted.db").exists(), "a file created from inside next to the store");
    let store = std::fs::read(data.join("sandgate.db")).unwrap();
    assert!(
        !store.windows(14).any(|w| w == b"sandgate-probe"),
        "the store was written from inside"
    );
    assert_eq!(
        std::fs::read_to_string(s.home.join(".config/sandgate/config.toml")).unwrap(),
        "# config\n"
    );
    assert!(data.exists() && s.home.join(".config/sandgate").exists(), "moved from inside");
}

/// The store (`$XDG_DATA_HOME/sandgate/sandgate.db`, its directory) and the config directory
/// cannot be written, created, replaced or moved away from inside.
fn store_and_config_stay_unwritable(s: &Scratch, tier: &str, args: &[&str]) {
    let data = s.home.join(".local/share/sandgate");
    let config = s.home.join(".config/sandgate");
    let refusals = ["EACCES", "EPERM", "EROFS", "ENOENT", "EBUSY", "EXDEV"];
    for (op, path, what) in [
        ("write", data.join("sandgate.db"), "write the store"),
        ("write", data.join("planted.db"), "create a file next to the store"),
        ("mkdir", data.join("sub"), "mkdir in the store directory"),
        ("write", config.join("config.toml"), "write the config"),
        ("write", config.join("new.toml"), "create in the config directory"),
    ] {
        let answer = s.probe(tier, args, &[op, p(&path)]);
        refused(&answer, &refusals, &format!("{tier} {args:?}: {what}"));
    }
    for dir in [&data, &config] {
        let moved = s.probe(tier, args, &["rename", p(dir), p(&dir.with_extension("moved"))]);
        refused(&moved, &refusals, &format!("{tier} {args:?}: move {} away", dir.display()));
    }
}

/// A grandchild (shell in a shell) and a Python subprocess of it are walled in like the command.
fn children_inherit_the_walls(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let probe = p(&s.probe);
    let (victim, key) = (s.outside.join("victim.txt"), s.home.join(".ssh/id_rsa"));
    let (victim, key) = (p(&victim), p(&key));
    let grandchild = s.root.join("grandchild.sh");
    std::fs::write(
        &grandchild,
        format!(
            "python3 {probe} write {victim}\n\
             python3 {probe} read {key}\n\
             python3 {probe} talk {HOST4} 8080\n\
             python3 -c 'import subprocess, sys; subprocess.run(sys.argv[1:])' \
             python3 {probe} write {victim}\n"
        ),
    )
    .unwrap();
    let script = format!("sh -c 'sh -c \"sh {}\"'", p(&grandchild));
    for tier in TIERS {
        let out = s.run(tier, &[], &["sh", "-c", &script]);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{tier}: {text} {}", String::from_utf8_lossy(&out.stderr));
        refused(lines[0], WRITE_REFUSED, &format!("{tier}: grandchild write outside"));
        refused(lines[1], &["EACCES", "EPERM"], &format!("{tier}: grandchild reads the key"));
        // `run` has no route; in `net`/`build` the capture hands the connection to the proxy,
        // which refuses it (a reset or the end of the stream, never the echo host's answer).
        let tcp = lines[2].split_whitespace().next().unwrap_or("");
        assert!(
            ["ENETUNREACH", "ECONNREFUSED", "EHOSTUNREACH", "ECONNRESET", "EOF"].contains(&tcp),
            "{tier}: grandchild direct tcp: {}",
            lines[2]
        );
        refused(lines[3], WRITE_REFUSED, &format!("{tier}: python subprocess write outside"));
    }
    assert_eq!(std::fs::read_to_string(s.outside.join("victim.txt")).unwrap(), "untouched\n");
}

fn protected_files_stay_read_only_in_build(who: &Who) {
    let s = Scratch::new(who);
    let cases = [
        (s.proj.join(".git/config"), "existing .git/config"),
        (s.proj.join(".git/hooks/pre-commit"), "new hook"),
    ];
    for (path, what) in &cases {
        let answer = s.probe("build", &[], &["write", p(path)]);
        refused(&answer, &["EACCES", "EPERM", "EROFS", "ENOTDIR", "EEXIST"], what);
    }
    // Missing names at the top are not refused but taken away (see sandbox_top_level.rs).
    for name in [".envrc", ".vscode/tasks.json", ".mcp.json"] {
        let _ = s.probe("build", &[], &["write", p(&s.proj.join(name))]);
    }
    let _ = s.probe("build", &[], &["mkdir", p(&s.proj.join(".claude"))]);
    for name in [".envrc", ".vscode", ".mcp.json", ".claude", ".idea", ".gitmodules"] {
        assert!(!s.proj.join(name).exists(), "{name} in place after the sandbox ended");
    }
    assert_eq!(std::fs::read_to_string(s.proj.join(".git/config")).unwrap(), "[core]\n");
}

/// `git init` in `proj/` as the user who runs the sandbox.
fn git_repo(s: &Scratch) {
    let out = s.program(std::path::Path::new("git")).args(["init", "-q", "."]).output().unwrap();
    assert!(out.status.success(), "git init: {}", sandbox::text(&out.stderr));
}

/// `[filesystem] git_writable = true` in the user's configuration (`.git` writable but for the
/// protected names).
fn git_writable(s: &Scratch) {
    let config = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&config, "[filesystem]\ngit_writable = true\n").unwrap();
}

/// By default `.git` is read-only in `build`: a writable one could take a `commondir` file that
/// sends git (on the host, later) to hooks and config the command wrote. Git pointers stay
/// read-only in both modes: `.git` as a file (`gitdir: ...`, a worktree or submodule checkout)
/// and each submodule's `.git` named by `.gitmodules`.
fn the_git_directory_and_git_pointers_are_read_only(who: &Who) {
    let s = Scratch::new(who);
    git_repo(&s);
    let lib = s.proj.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join(".git"), "gitdir: ../.git/modules/lib\n").unwrap();
    std::fs::write(s.proj.join(".gitmodules"), "[submodule \"lib\"]\n\tpath = lib\n\turl = x\n")
        .unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid), p(&s.proj)])
        .status();
    let git = s.proj.join(".git");
    for what in [git.join("commondir"), git.join("index"), git.join("HEAD"), lib.join(".git")] {
        let w = s.probe("build", &[], &["write", p(&what)]);
        refused(&w, WRITE_REFUSED, &format!("write {}", what.display()));
    }
    let commit = "git -c user.email=a@b -c user.name=n commit -q --allow-empty -m x";
    let out = s.run("build", &[], &["sh", "-c", commit]);
    let err = sandbox::text(&out.stderr);
    assert!(!out.status.success() && err.contains("Read-only file system"), "commit inside: {err}");
    // With git_writable: .git takes writes, the pointer of the submodule still does not.
    git_writable(&s);
    assert_eq!(s.probe("build", &[], &["write", p(&git.join("index.x"))]), "ok");
    let w = s.probe("build", &[], &["write", p(&lib.join(".git"))]);
    refused(&w, WRITE_REFUSED, "write the submodule's .git pointer");
    // A checkout whose .git is a file: the pointer is read-only.
    let wt = s.proj.join("lib");
    let out = s.probe(
        "build",
        &[&format!("--allow-write={}", wt.display())],
        &["write", p(&wt.join(".git"))],
    );
    refused(&out, WRITE_REFUSED, "write a .git file at the top of a writable path");
}

/// Submodules keep their git directories under `.git/modules/` (`NAME`, `a/b` for a name with a
/// slash, `NAME/modules/SUB` when nested): their hooks and config are as read-only as the top
/// repository's, while their objects stay writable (`git submodule update` works inside).
fn submodule_hooks_and_config_stay_read_only(who: &Who) {
    let s = Scratch::new(who);
    git_writable(&s);
    git_repo(&s);
    let modules = s.proj.join(".git/modules");
    let dirs = [modules.join("lib"), modules.join("libs/foo"), modules.join("lib/modules/inner")];
    for d in &dirs {
        for sub in ["hooks", "objects"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(d.join("config"), "[core]\n").unwrap();
    }
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid), p(&modules)])
        .status();
    for d in &dirs {
        for what in [d.join("hooks/post-checkout"), d.join("config")] {
            let w = s.probe("build", &[], &["write", p(&what)]);
            refused(&w, WRITE_REFUSED, &format!("write {}", what.display()));
        }
        let moved = s.probe("build", &[], &["rename", p(&d.join("hooks")), p(&d.join("h2"))]);
        refused(&moved, &["EBUSY"], &format!("move {}/hooks away", d.display()));
        let obj = d.join("objects/pack-x");
        assert_eq!(s.probe("build", &[], &["write", p(&obj)]), "ok", "{}", obj.display());
    }
}

/// Regression (red-team review): renaming `.git` took the read-only `.git/hooks` mount along and
/// left a fresh `.git` in which a hook could be planted. The directories on the way to a
/// protected path are pinned: moving them fails with EBUSY. Ordinary git work still works.
fn moving_the_parent_does_not_free_protected_paths(who: &Who) {
    let s = Scratch::new(who);
    git_writable(&s);
    git_repo(&s);
    let (git, hooks) = (s.proj.join(".git"), s.proj.join(".git/hooks"));
    for (from, to) in [(&git, s.proj.join(".git2")), (&hooks, s.proj.join(".git/h2"))] {
        let moved = s.probe("build", &[], &["rename", p(from), p(&to)]);
        refused(&moved, &["EBUSY"], &format!("move {} away", from.display()));
    }
    // The writable path itself is a mount: it cannot be moved either, even in a writable parent.
    let parent = format!("--allow-write={}", s.root.display());
    let moved = s.probe("build", &[&parent], &["rename", p(&s.proj), p(&s.root.join("p2"))]);
    refused(&moved, &["EBUSY"], "move the working directory away");
    // The attack of the review, end to end.
    let plant = "mv .git .git2 && mkdir -p .git/hooks && \
                 printf '#!/bin/sh\necho PWNED\n' > .git/hooks/pre-commit && \
                 chmod +x .git/hooks/pre-commit && cp -r .git2/objects .git2/refs .git2/HEAD .git/";
    let out = s.run("build", &[], &["sh", "-c", plant]);
    assert!(!out.status.success(), "the attack went through");
    assert!(!s.proj.join(".git2").exists(), ".git was moved away");
    assert!(!hooks.join("pre-commit").exists(), "a hook was planted");
    let hook = s.probe("build", &[], &["write", p(&hooks.join("pre-commit"))]);
    refused(&hook, WRITE_REFUSED, "write a hook");
    // .git itself stays writable: a commit from inside lands in the real repository.
    s.sh("build", &[], "git -c user.email=a@b -c user.name=n commit -q --allow-empty -m inside");
    let log = s.program(std::path::Path::new("git")).args(["log", "--format=%s"]).output().unwrap();
    assert_eq!(sandbox::text(&log.stdout), "inside\n", "the commit from inside");
}

/// Regression (red-team review): with HOME writable, `mv ~/.config ~/.config-old` and a new
/// `~/.config/sandgate/config.toml` widened the next sandbox to `/` writable. The parents of the
/// config directory, the store and hidden paths are pinned; the hidden ~/.ssh cannot be moved
/// away or replaced. Both ways HOME becomes writable by flag: as the working directory named by
/// `--allow-write` (without it, `build` refuses to start there), and from another directory.
fn moving_home_directories_does_not_change_the_policy(who: &Who) {
    let s = Scratch::new(who);
    let allow_home = format!("--allow-write={}", s.home.display());
    let (config, local, ssh) = (s.home.join(".config"), s.home.join(".local"), s.home.join(".ssh"));
    let probe = p(&s.probe);
    let attack = format!(
        "mv {c} {c}-old; mkdir -p {c}/sandgate; printf '[filesystem]\nallow_write = [\"/\"]\n' \
         > {c}/sandgate/config.toml; mkdir {h}/.s3; python3 {probe} rename {h}/.s3 {s}; \
         python3 {probe} rmdir {s}",
        c = p(&config),
        h = p(&s.home),
        s = p(&ssh),
    );
    let allow = [allow_home.as_str()];
    for (how, cwd) in [("cwd HOME, --allow-write HOME", &s.home), ("--allow-write HOME", &s.proj)] {
        let in_home = |args: &[&str], cmd: &[&str]| {
            let mut c = s.command("build", args, cmd);
            c.current_dir(cwd);
            c.output().unwrap()
        };
        let args = &allow[..];
        for (from, to) in [
            (&config, s.home.join(".c2")),
            (&local, s.home.join(".l2")),
            (&local.join("share"), local.join("s2")),
            (&ssh, s.home.join(".s2")),
        ] {
            let cmd = ["python3", probe, "rename", p(from), p(&to)];
            let out = in_home(args, &cmd);
            let answer = sandbox::text(&out.stdout);
            // EROFS: an existing dot-entry at the top of a writable HOME is read-only as a whole.
            let moved = format!("{how}: move {} away", from.display());
            refused(answer.trim(), &["EBUSY", "EROFS"], &moved);
        }
        let out = in_home(args, &["sh", "-c", &attack]);
        let answers = sandbox::text(&out.stdout);
        let lines: Vec<&str> = answers.lines().collect();
        assert_eq!(lines.len(), 2, "{how}: {answers} {}", sandbox::text(&out.stderr));
        // ENOENT: the new ~/.s3 was taken away before it could be renamed.
        let replace = &["EBUSY", "EEXIST", "ENOTEMPTY", "EACCES", "EPERM", "ENOENT"];
        refused(lines[0], replace, &format!("{how}: replace ~/.ssh"));
        refused(lines[1], &["EBUSY", "EACCES", "EPERM"], &format!("{how}: remove ~/.ssh"));
        assert!(!s.home.join(".config-old").exists(), "{how}: ~/.config moved away");
        let toml = std::fs::read_to_string(config.join("sandgate/config.toml")).unwrap();
        assert_eq!(toml, "# config\n", "{how}: the config was replaced");
        assert!(ssh.join("id_rsa").exists(), "{how}: ~/.ssh moved away");
        let _ = std::fs::remove_dir(s.home.join(".s3"));
    }
    let explain = || {
        let out = s
            .program(&sandgate_tests::sandgate_bin())
            .args(["explain", "--tier", "build", "--json"])
            .output()
            .unwrap();
        let text = sandbox::text(&out.stdout);
        let json: serde_json::Value = serde_json::from_str(&text).expect(&text);
        json["writable"].as_array().unwrap().iter().any(|w| w == "/")
    };
    assert!(!explain(), "the next sandbox gets / writable");
    // Control: the config the attack tried to write would have done it.
    std::fs::write(config.join("sandgate/config.toml"), "[filesystem]\nallow_write = [\"/\"]\n")
        .unwrap();
    assert!(explain(), "control: a config with allow_write = [\"/\"] shows / writable");
}

fn links_do_not_lead_outside(who: &Who) {
    let s = Scratch::new(who);
    let victim = s.outside.join("victim.txt");
    let link = s.proj.join("link");
    let sym = s.probe("build", &[], &["symlink-write", p(&victim), p(&link)]);
    refused(&sym, WRITE_REFUSED, "write through a symlink");
    let hard = s.probe("build", &[], &["hardlink", p(&victim), p(&s.proj.join("hard"))]);
    refused(&hard, &["EXDEV", "EPERM", "EACCES", "EROFS"], "hardlink");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> u32 {
    13
}

fn exit_codes_and_signals_come_back(who: &Who) {
    let s = Scratch::new(who);
    assert_eq!(s.run("run", &[], &["sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(s.run("run", &[], &["sh", "-c", "kill -TERM $$"]).status.code(), Some(143));
    let missing = s.run("run", &[], &["sandgate-no-such-command"]);
    assert_eq!(missing.status.code(), Some(127));
    // Signal dispositions are the default ones inside (SIGPIPE is not left ignored).
    let pipe = s.run("run", &[], &["sh", "-c", "yes | head -1"]);
    let stderr = String::from_utf8_lossy(&pipe.stderr);
    assert_eq!(String::from_utf8_lossy(&pipe.stdout), "y\n");
    assert!(!stderr.contains("Broken pipe"), "SIGPIPE is ignored inside: {stderr}");
    let ign = s.run("run", &[], &["grep", "SigIgn", "/proc/self/status"]);
    let text = String::from_utf8_lossy(&ign.stdout);
    let mask = u64::from_str_radix(text.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(mask & (1 << (libc_sigpipe() - 1)), 0, "SIGPIPE ignored inside: {text}");
    // Each forwarded signal sent to the launcher reaches the command (its trap says which).
    for (sig, code) in
        [("TERM", 42), ("INT", 43), ("HUP", 44), ("QUIT", 45), ("USR1", 46), ("USR2", 47)]
    {
        let script = format!("trap 'exit {code}' {sig}; echo ready; while :; do sleep 0.05; done");
        let mut child = started(&s, "run", &script);
        let _ = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status();
        assert_eq!(child.wait().unwrap().code(), Some(code), "SIG{sig} to the launcher");
    }
    // A command killed by a signal: 128 + its number, whatever killed it.
    let killed = s.run("run", &[], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(killed.status.code(), Some(137));
}

fn nothing_outlives_the_sandbox(who: &Who) {
    let s = Scratch::new(who);
    let marker = format!("1000.{}", sandbox::unique(who));
    let out = s.run("run", &[], &["sh", "-c", &format!("sleep {marker} & echo started")]);
    assert!(out.status.success());
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "a process outlived the sandbox: {:?}", left.stdout);
}

/// Regression: a working directory under /tmp was put back as a file mount point (EINVAL), so no
/// tier could start there.
fn a_working_directory_under_tmp_stays_visible(who: &Who) {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new(who);
    let dir = tempfile::Builder::new().prefix("sandgate-cwd").tempdir_in("/tmp").unwrap();
    std::fs::write(dir.path().join("in-tmp.txt"), "seen\n").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let probe = s.probe.to_str().unwrap().to_owned();
    let run = |tier: &str, op: &[&str]| {
        let mut cmd = vec!["python3", probe.as_str()];
        cmd.extend_from_slice(op);
        let out = s.command(tier, &[], &cmd).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "{tier} {op:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let file = dir.path().join("in-tmp.txt");
    for tier in TIERS {
        assert_eq!(run(tier, &["read", p(&file)]), "ok", "{tier}: read the cwd under /tmp");
    }
    let new = dir.path().join("written.txt");
    assert_eq!(run("build", &["write", p(&new)]), "ok", "build writes its cwd under /tmp");
    assert!(new.exists(), "the write reached the real directory");
    refused(&run("run", &["write", p(&dir.path().join("no.txt"))]), WRITE_REFUSED, "run: cwd");
}

/// Polls until `cond` holds (a detached process acts; nothing signals the test), or fails.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Starts `sandgate build -- sh -c SCRIPT` with pipes; returns it after it printed `ready`.
fn started(s: &Scratch, tier: &str, script: &str) -> std::process::Child {
    use std::io::BufRead as _;
    let mut child = s
        .command(tier, &[], &["sh", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// A scratch tree with a protected name below the top (`conf/.envrc`, configured): placeholders
/// are made only there (the top of a writable path needs none, see sandbox_top_level.rs).
fn deep_protected(who: &Who) -> Scratch {
    let s = Scratch::new(who);
    std::fs::create_dir(s.proj.join("conf")).unwrap();
    let _ = std::process::Command::new("chown")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(s.proj.join("conf"))
        .status();
    let config = "[filesystem]\nprotected = [\"conf/.envrc\"]\n";
    std::fs::write(s.home.join(".config/sandgate/config.toml"), config).unwrap();
    s
}

/// A missing protected file cannot be created from inside, and its placeholder is gone after
/// the run: after a normal exit, and after the launcher itself was killed.
fn placeholders_do_not_outlive_the_sandbox(who: &Who) {
    let s = deep_protected(who);
    let envrc = s.proj.join("conf/.envrc");
    let out = s.run("build", &[], &["sh", "-c", "echo x > conf/.envrc; echo rc=$?"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.trim() != "rc=0", "created conf/.envrc from inside: {text}");
    assert!(!envrc.exists(), "conf/.envrc left behind after a normal exit");

    let marker = format!("sleep 1000.{}", sandbox::unique(who));
    let mut child = started(&s, "build", &format!("echo ready; exec {marker}"));
    assert!(envrc.exists(), "the placeholder is there while the sandbox runs");
    child.kill().unwrap(); // SIGKILL: the launcher cannot clean up itself
    child.wait().unwrap();
    eventually("placeholder removed after the launcher was killed", || !envrc.exists());
    let left = std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap();
    assert!(left.stdout.is_empty(), "the sandbox outlived its killed launcher");
}

/// Two sandboxes in one directory share the placeholder: the first one to end leaves it in
/// place (removing it would detach the second one's read-only mount), the last removes it.
fn concurrent_sandboxes_share_placeholders(who: &Who) {
    use std::io::Write as _;
    let s = deep_protected(who);
    let envrc = s.proj.join("conf/.envrc");
    let probe = s.probe.to_str().unwrap();
    let mut a = started(&s, "build", "echo ready; read x || true");
    let mut b =
        started(&s, "build", &format!("echo ready; read x; python3 {probe} write conf/.envrc"));
    drop(a.stdin.take()); // EOF: `a` ends
    assert!(a.wait().unwrap().success());
    assert!(envrc.exists(), "removed while the other sandbox still used it");
    b.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = b.wait_with_output().unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    refused(answer.trim(), WRITE_REFUSED, "create .envrc after the first sandbox ended");
    assert!(!envrc.exists(), "placeholder left behind by the last sandbox");
}

both!(
    the_git_directory_and_git_pointers_are_read_only,
    submodule_hooks_and_config_stay_read_only,
    a_working_directory_under_tmp_stays_visible,
    reads_work_and_writes_are_confined,
    allow_write_opens_one_path,
    credentials_config_and_store_are_out_of_reach,
    children_inherit_the_walls,
    protected_files_stay_read_only_in_build,
    links_do_not_lead_outside,
    moving_the_parent_does_not_free_protected_paths,
    moving_home_directories_does_not_change_the_policy,
    exit_codes_and_signals_come_back,
    nothing_outlives_the_sandbox,
    placeholders_do_not_outlive_the_sandbox,
    concurrent_sandboxes_share_placeholders,
);
