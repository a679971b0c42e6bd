//! Secrets are out of reach by default, as root and as an unprivileged user: the home
//! directory's dot-entries outside the allowlist (in `$HOME` and in the account's own home when
//! `$HOME` points elsewhere), the system's secret files, sandgate's configuration (a copy without
//! the secrets replaces it), and secret-looking environment variables. And a home or a launcher
//! under `/tmp` survives the sandbox's private `/tmp`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::sandbox::{Scratch, Who, both, text};
use sandgate_tests::sandgate_bin;

const TIERS: [&str; 3] = ["run", "net", "build"];

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Writes `rel` under `root` (parents made) with `contents`, owned by `who`.
fn plant(root: &Path, rel: &str, contents: &str, who: &Who) -> PathBuf {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(root.join(rel.split('/').next().unwrap()))
        .status();
    path
}

/// Reads every path of `paths` inside `tier` in one launch; returns the paths whose contents
/// came back.
fn readable_inside(s: &Scratch, tier: &str, args: &[&str], paths: &[PathBuf]) -> Vec<PathBuf> {
    let list = s.root.join(format!("list-{tier}.txt"));
    let lines: Vec<&str> = paths.iter().map(|x| p(x)).collect();
    std::fs::write(&list, lines.join("\n") + "\n").unwrap();
    let script = format!(
        "while IFS= read -r f; do if cat \"$f\" >/dev/null 2>&1; then echo \"$f\"; fi; done < {}",
        p(&list)
    );
    let out = s.run(tier, args, &["sh", "-c", &script]);
    assert!(out.status.success(), "{tier} as {:?}: {}", s.who, text(&out.stderr));
    text(&out.stdout).lines().map(PathBuf::from).collect()
}

/// A small deterministic generator (no dependency): names differ per run and per process.
struct Names(u64);

impl Names {
    fn new() -> Names {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        Names(t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32) | 1)
    }

    fn next(&mut self) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-.";
        let mut name = String::from(".");
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let len = 3 + (self.0 % 12) as usize;
        let mut x = self.0;
        for _ in 0..len {
            name.push(CHARS[(x % CHARS.len() as u64) as usize] as char);
            x = (x / CHARS.len() as u64) ^ self.0.rotate_left(7);
        }
        name
    }
}

/// The secret files the review found readable, by path under the home directory.
const KNOWN_SECRETS: &[&str] = &[
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".vault-token",
    ".config/hub",
    ".config/containers/auth.json",
    ".config/gh/hosts.yml",
    ".pgpass",
    ".my.cnf",
    ".bash_history",
    ".local/share/keyrings/login.keyring",
    ".local/state/x/history",
    ".docker/config.json",
    ".npmrc",
    ".git-credentials",
    ".cache/huggingface/token",
    ".m2/settings.xml",
];

/// Allowlisted entries (and one file outside the dot-entries) that stay readable.
const READABLE: &[&str] = &[
    ".bashrc",
    ".profile",
    ".gitconfig",
    ".cargo/bin/cargo",
    ".cargo/config.toml",
    ".rustup/settings.toml",
    ".config/nvim/init.lua",
    ".local/bin/tool",
    ".local/share/fonts/f.ttf",
    ".cache/pip/x",
    "notes.txt",
];

/// 50 random dot-files and dot-directories (with a file inside) in a test HOME: every one is
/// refused in every tier, the review's known token files too, while the allowlist and the
/// home's other files stay readable.
fn random_home_dot_entries_are_hidden_in_every_tier(who: &Who) {
    let s = Scratch::new(who);
    let mut names = Names::new();
    let mut hidden: Vec<PathBuf> = Vec::new();
    while hidden.len() < 50 {
        let name = names.next();
        if matches!(name.as_str(), "." | "..")
            || s.home.join(&name).exists()
            || sandgate_config::HomeAllowlist::new(&[]).verdict(&[std::ffi::OsStr::new(&name)])
                != sandgate_config::HomeVerdict::Hide
        {
            continue;
        }
        let rel =
            if hidden.len().is_multiple_of(2) { name } else { format!("{name}/inner/secret") };
        hidden.push(plant(&s.home, &rel, "secret\n", who));
    }
    for rel in KNOWN_SECRETS {
        hidden.push(plant(&s.home, rel, "token\n", who));
    }
    let readable: Vec<PathBuf> = READABLE.iter().map(|r| plant(&s.home, r, "ok\n", who)).collect();
    let mut all = hidden.clone();
    all.extend(readable.iter().cloned());
    // Control: outside, everything is readable (as the launching user).
    let control = readable_inside_outside(&s, &all);
    assert_eq!(control, all, "control: outside every file reads");
    for tier in TIERS {
        let got = readable_inside(&s, tier, &[], &all);
        let leaked: Vec<&PathBuf> = got.iter().filter(|p| hidden.contains(p)).collect();
        assert!(leaked.is_empty(), "{tier} as {who:?}: readable inside: {leaked:?}");
        assert_eq!(got, readable, "{tier} as {who:?}: the allowlist reads");
    }
    // `[filesystem] readable_home` extends the allowlist.
    std::fs::write(
        s.home.join(".config/sandgate/config.toml"),
        format!("[filesystem]\nreadable_home = [\"{}\"]\n", KNOWN_SECRETS[4]),
    )
    .unwrap();
    let got = readable_inside(&s, "run", &[], &all);
    assert!(got.contains(&s.home.join(KNOWN_SECRETS[4])), "readable_home: {got:?}");
    assert!(!got.contains(&s.home.join(KNOWN_SECRETS[0])), "only that one: {got:?}");
}

/// The same loop as [`readable_inside`], outside any sandbox, as the sandbox's user.
fn readable_inside_outside(s: &Scratch, paths: &[PathBuf]) -> Vec<PathBuf> {
    let list = s.root.join("list-outside.txt");
    let lines: Vec<&str> = paths.iter().map(|x| p(x)).collect();
    std::fs::write(&list, lines.join("\n") + "\n").unwrap();
    let script = format!(
        "while IFS= read -r f; do if cat \"$f\" >/dev/null 2>&1; then echo \"$f\"; fi; done < {}",
        p(&list)
    );
    let out = s.program(Path::new("sh")).args(["-c", &script]).output().unwrap();
    text(&out.stdout).lines().map(PathBuf::from).collect()
}

/// `/etc/shadow` and its kin: root owns them, and a root launch stays uid 0 inside.
fn system_secret_files_are_hidden(who: &Who) {
    let s = Scratch::new(who);
    let files: Vec<PathBuf> = ["/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/sudoers"]
        .iter()
        .map(PathBuf::from)
        .filter(|f| f.exists())
        .collect();
    assert!(files.contains(&PathBuf::from("/etc/shadow")), "this test needs /etc/shadow");
    if !who.rootless {
        assert_eq!(readable_inside_outside(&s, &files), files, "control: root reads them outside");
    }
    for tier in TIERS {
        let got = readable_inside(&s, tier, &[], &files);
        assert!(got.is_empty(), "{tier} as {who:?}: {got:?}");
    }
}

/// The account's own home (from the password database) is hidden like `$HOME` when `$HOME`
/// points elsewhere: tools fall back to it (`ssh` reads `~/.ssh` from there).
fn the_passwd_home_is_hidden_when_home_points_elsewhere(who: &Who) {
    let s = Scratch::new(who);
    let home = passwd_home(who);
    let created = !home.exists();
    if created {
        std::fs::create_dir_all(&home).unwrap();
        let _ = Command::new("chown").arg(format!("{}:{}", who.uid, who.gid)).arg(&home).status();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let name = format!(".sandgate-test-secret-{}", std::process::id());
    let secret = plant(&home, &name, "passwd-home secret\n", who);
    let ssh = home.join(".ssh");
    let mut files = vec![secret.clone()];
    // The real ~/.ssh of the account, when there is a readable file in it.
    if let Ok(entries) = std::fs::read_dir(&ssh) {
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).take(3));
    }
    let control = readable_inside_outside(&s, &files);
    let got = readable_inside(&s, "run", &[], &files);
    let _ = std::fs::remove_file(&secret);
    if created {
        let _ = std::fs::remove_dir(&home);
    }
    assert!(control.contains(&secret), "control: readable outside");
    assert!(got.is_empty(), "as {who:?}, HOME={}: {got:?}", s.home.display());
}

fn passwd_home(who: &Who) -> PathBuf {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[2] == who.uid.to_string())
        .map(|f| PathBuf::from(f[5]))
        .expect("the user is in /etc/passwd")
}

const FAKE_TOKEN: &str = "987654321:FAKE-telegram-token-for-tests";

/// sandgate's configuration holds the Telegram token: inside, a copy with the policy only
/// replaces the directory, and a launch nested inside still finds its tiers there.
fn sandgates_config_is_replaced_by_a_copy_without_secrets(who: &Who) {
    let s = Scratch::new(who);
    let config = s.home.join(".config/sandgate");
    std::fs::write(
        config.join("config.toml"),
        format!(
            "# the bot: {FAKE_TOKEN}\n[telegram]\ntoken = \"{FAKE_TOKEN}\"\nchats = [1]\n\
             [tiers.quiet]\nbase = \"run\"\ndescription = \"a tier of the config\"\n"
        ),
    )
    .unwrap();
    std::fs::write(config.join("bot.token"), FAKE_TOKEN).unwrap();
    for tier in TIERS {
        let script = format!(
            "cat {c}/config.toml; cat {c}/bot.token; ls -a {c}; grep -r FAKE {c} && echo LEAK",
            c = p(&config)
        );
        let out = s.run(tier, &[], &["sh", "-c", &script]);
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("FAKE") && !stdout.contains("LEAK"), "{tier}: {stdout}");
        assert!(stdout.contains("[tiers.quiet]"), "{tier}: the policy is there: {stdout}");
        assert!(!stdout.contains("bot.token"), "{tier}: only the policy files: {stdout}");
    }
    // sandgate inside reads the copy: the configured tier is there, and a nested launch (which
    // loads the configuration) works.
    let bin = sandgate_bin();
    let script = format!("{b} tiers && {b} run -- echo nested-ok", b = p(&bin));
    let out = s
        .command("build", &[], &["sh", "-c", &script])
        .env("SANDGATE_NO_DAEMON", "1")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(stdout.contains("quiet") && stdout.contains("a tier of the config"), "{stdout}");
    assert!(stdout.ends_with("nested-ok\n"), "{stdout}\nstderr {}", text(&out.stderr));
    // The copy cannot be changed from inside, even with HOME writable.
    let arg = format!("--allow-write={}", s.home.display());
    let script = format!("echo x >> {c}/config.toml || echo refused", c = p(&config));
    let out = s.run("build", &[&arg], &["sh", "-c", &script]);
    assert_eq!(text(&out.stdout), "refused\n", "stderr {}", text(&out.stderr));
    assert!(std::fs::read_to_string(config.join("config.toml")).unwrap().contains(FAKE_TOKEN));
}

/// Secret-looking variables are gone inside (the environment and `/proc/self/environ`, and
/// init's environment is out of reach) unless `[env] pass` keeps them; the launch names them
/// once on stderr, without their values.
fn secret_looking_variables_are_removed_unless_passed(who: &Who) {
    let s = Scratch::new(who);
    let secrets = [
        ("GH_TOKEN", "val-gh-token"),
        ("GITHUB_TOKEN", "val-github-token"),
        ("AWS_ACCESS_KEY_ID", "val-aws-id"),
        ("AWS_SECRET_ACCESS_KEY", "val-aws-secret"),
        ("AWS_SESSION_TOKEN", "val-aws-session"),
        ("ANTHROPIC_API_KEY", "val-anthropic"),
        ("my_db_password", "val-db-password"),
        ("SSH_AUTH_SOCK", "/run/val-agent.sock"),
        ("GPG_AGENT_INFO", "val-gpg"),
        ("SANDGATE_TELEGRAM_TOKEN", "val-telegram"),
    ];
    let script = "env; echo ---; tr '\\0' '\\n' < /proc/self/environ; echo ---; \
                  cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'";
    for tier in TIERS {
        let mut cmd = s.command(tier, &[], &["sh", "-c", script]);
        for (k, v) in secrets {
            cmd.env(k, v);
        }
        cmd.env("PLAIN", "val-plain");
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{tier}: {stderr}");
        for (k, v) in secrets {
            assert!(!stdout.contains(v), "{tier} as {who:?}: {k} inside:\n{stdout}");
            assert!(!stderr.contains(v), "{tier}: a value on stderr: {stderr}");
            if k != "SANDGATE_TELEGRAM_TOKEN" {
                assert!(stderr.contains(k), "{tier}: the notice names {k}: {stderr}");
            }
        }
        assert!(stdout.contains("PLAIN=val-plain"), "{tier}: {stdout}");
        assert_eq!(stderr.matches("secret-looking").count(), 1, "{tier}: once: {stderr}");
    }
    // `[env] pass` keeps what it names (patterns, any case), and only that.
    std::fs::write(s.home.join(".config/sandgate/config.toml"), "[env]\npass = [\"keep_*\"]\n")
        .unwrap();
    let out = s
        .command("run", &[], &["sh", "-c", "env"])
        .env("KEEP_TOKEN", "val-kept")
        .env("GH_TOKEN", "val-gh-token")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("KEEP_TOKEN=val-kept"), "[env] pass: {stdout}");
    assert!(!stdout.contains("val-gh-token"), "{stdout}");
    assert!(stderr.contains("GH_TOKEN") && !stderr.contains("KEEP_TOKEN"), "{stderr}");
}

/// With the home directory (config, store) under `/tmp`, every tier launches, the home's
/// hidden entries stay hidden and its other files readable.
fn a_home_under_tmp_works(who: &Who) {
    let s = Scratch::new(who);
    let home = PathBuf::from(format!("/tmp/sandgate-home-{}-{}", std::process::id(), who.uid));
    let _ = std::fs::remove_dir_all(&home);
    let key = plant(&home, ".ssh/id_rsa", "key\n", who);
    let notes = plant(&home, "notes.txt", "notes\n", who);
    plant(&home, ".config/sandgate/config.toml", "[tiers.quiet]\nbase = \"run\"\n", who);
    let store = plant(&home, ".local/share/sandgate/sandgate.db", "store\n", who);
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    for tier in TIERS {
        let script = format!(
            "cat {}; cat {} || echo key-refused; cat {} || echo store-refused; \
             cat {}/.config/sandgate/config.toml",
            p(&notes),
            p(&key),
            p(&store),
            p(&home)
        );
        let out = s
            .command(tier, &[], &["sh", "-c", &script])
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("SANDGATE_NO_DAEMON", "1")
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{tier} as {who:?}: {}", text(&out.stderr));
        assert!(stdout.starts_with("notes\nkey-refused\nstore-refused\n"), "{tier}: {stdout}");
        assert!(stdout.contains("[tiers.quiet]"), "{tier}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// A launcher installed under `/tmp` finds itself inside for a nested launch.
fn a_launcher_under_tmp_runs_nested(who: &Who) {
    let s = Scratch::new(who);
    let dir = PathBuf::from(format!("/tmp/sandgate-bin-{}-{}", std::process::id(), who.uid));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("sandgate");
    crate::support::sandbox::copy_program(&sandgate_bin(), &bin);
    let out = s
        .program(&bin)
        .args(["build", "--", p(&bin), "run", "--", "sh", "-c", "echo nested $SANDGATE_TIER"])
        .env("SANDGATE_NO_DAEMON", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(text(&out.stdout), "nested run\n", "as {who:?}: {}", text(&out.stderr));
}

both!(
    random_home_dot_entries_are_hidden_in_every_tier,
    system_secret_files_are_hidden,
    the_passwd_home_is_hidden_when_home_points_elsewhere,
    sandgates_config_is_replaced_by_a_copy_without_secrets,
    secret_looking_variables_are_removed_unless_passed,
    a_home_under_tmp_works,
    a_launcher_under_tmp_runs_nested,
);
