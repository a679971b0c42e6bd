//! Golden files of the Seatbelt profile for each tier and option (`UPDATE_GOLDEN=1` rewrites them),
//! and the rules each macOS fix added, as table rows that fail without it. Paths are resolved
//! through a fake filesystem with the macOS layout (`/tmp` → `/private/tmp`, `/var` →
//! `/private/var`) and a symlinked `~/.ssh`.

#[path = "seatbelt_golden/eval.rs"]
mod eval;

use std::path::{Path, PathBuf};

use sandgate_sandbox::canon::MapLinks;
use sandgate_sandbox::seatbelt::{self, HostFacts, Nested, Trustd};
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec, TopLevel};

fn fs() -> MapLinks {
    MapLinks::macos().link("/Users/u/.ssh", "/Users/u/dotfiles/ssh")
}

fn spec(tier: &str) -> SandboxSpec {
    let home = PathBuf::from("/Users/u");
    let cwd = PathBuf::from("/Users/u/project");
    let build = tier == "build";
    SandboxSpec {
        id: SandboxId::try_from("golden").unwrap(),
        tier_name: tier.to_owned(),
        cwd: cwd.clone(),
        command: vec!["true".into()],
        env: vec![],
        writable: if build { vec![cwd.clone()] } else { vec![] },
        caches: vec![],
        cache_work_lock: None,
        hidden: {
            let mut h: Vec<PathBuf> = [".ssh", ".aws", ".netrc", ".local/share/sandgate"]
                .iter()
                .map(|p| home.join(p))
                .collect();
            // the daemon's runtime directory of another session, under /tmp
            h.push(PathBuf::from("/tmp/sandgate-501"));
            h
        },
        top_level: None,
        scan: Default::default(),
        read_only: {
            let mut r = vec![home.join(".config/sandgate")];
            if build {
                r.extend([".git/hooks", ".git/config", ".envrc"].iter().map(|p| cwd.join(p)));
            }
            r
        },
        net: if tier == "run" { NetSetup::None } else { NetSetup::Proxy { nflog_group: 7 } },
        allowed_unix_sockets: vec![],
        provided: vec![],
        visible: vec![],
        require_full: false,
        report_read_only: false,
        macos: Default::default(),
    }
}

fn host() -> HostFacts {
    HostFacts {
        tmp: PathBuf::from("/var/folders/xx/T/sandgate-golden"),
        proxy_port: 3128,
        user_temp_dir: Some(PathBuf::from("/var/folders/xx/T")),
        user_cache_dir: Some(PathBuf::from("/var/folders/xx/C")),
        home: Some(PathBuf::from("/Users/u")),
        terminals: vec![PathBuf::from("/dev/ttys003")],
        developer_dir: Some(PathBuf::from("/Library/Developer/CommandLineTools")),
        trustd: Trustd::Deny,
    }
}

fn render(spec: &SandboxSpec) -> seatbelt::Profile {
    seatbelt::render(spec, &host(), &fs())
}

fn check(name: &str, p: &seatbelt::Profile) {
    let mut got = p.text.clone();
    got.push_str("\n;; -D parameters\n");
    for (k, v) in &p.params {
        got.push_str(&format!(";; {k}={}\n", v.display()));
    }
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.sb"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&file, &got).unwrap();
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", file.display()));
    assert_eq!(got, want, "golden {name} differs (UPDATE_GOLDEN=1 to accept)");
}

/// The value of `-D key=...`.
fn param<'a>(p: &'a seatbelt::Profile, key: &str) -> &'a Path {
    p.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_path()).unwrap()
}

/// The keys whose value is `path`.
fn keys_of(p: &seatbelt::Profile, path: &str) -> Vec<String> {
    p.params.iter().filter(|(_, v)| v == Path::new(path)).map(|(k, _)| k.clone()).collect()
}

#[test]
fn run_tier() {
    check("run", &render(&spec("run")));
}

#[test]
fn net_tier() {
    check("net", &render(&spec("net")));
}

#[test]
fn build_tier() {
    check("build", &render(&spec("build")));
}

#[test]
fn run_with_allow_write() {
    let mut s = spec("run");
    s.writable.push(PathBuf::from("/Users/u/out"));
    check("run-allow-write", &render(&s));
}

#[test]
fn build_with_net_none() {
    let mut s = spec("build");
    s.net = NetSetup::None;
    check("build-net-none", &render(&s));
}

#[test]
fn net_with_unix_socket() {
    let mut s = spec("net");
    s.allowed_unix_sockets.push(PathBuf::from("/Users/u/.colima/docker.sock"));
    check("net-unix-socket", &render(&s));
}

#[test]
fn net_with_trustd_allowed() {
    let mut h = host();
    h.trustd = Trustd::from_setting(Some("allow"));
    check("net-trustd", &seatbelt::render(&spec("net"), &h, &fs()));
}

#[test]
fn profiles_hold_no_paths_only_params() {
    let p = render(&spec("build"));
    assert!(!p.text.contains("/Users/u"), "paths must be -D parameters");
    assert!(!p.text.contains("/private"), "paths must be -D parameters");
    assert!(p.text.contains("(remote tcp \"localhost:3128\")"));
    assert!(!p.text.contains("(allow network*)"));
    // denials come after the allowances they narrow (last match wins)
    let allow = p.text.find("(allow file-write* (subpath (param \"WRITABLE_0\")))").unwrap();
    let deny = p.text.find("(deny file-write* (subpath (param \"READ_ONLY_1\"))").unwrap();
    assert!(allow < deny);
}

// Item 1: paths reach the profile canonical; denials name both spellings.
#[test]
fn paths_are_canonical_and_denials_cover_both_spellings() {
    let mut s = spec("build");
    s.writable.push(PathBuf::from("/tmp/out"));
    s.allowed_unix_sockets.push(PathBuf::from("/var/run/docker.sock"));
    let p = render(&s);
    // (path as given, canonical path, whether the given spelling is denied too)
    assert_eq!(param(&p, "TMP_0"), Path::new("/private/var/folders/xx/T/sandgate-golden"));
    assert_eq!(param(&p, "WRITABLE_1"), Path::new("/private/tmp/out"));
    assert_eq!(param(&p, "SOCKET_0"), Path::new("/private/var/run/docker.sock"));
    assert!(keys_of(&p, "/tmp/out").is_empty(), "an allowance is granted at the real path only");
    for (given, real) in [
        ("/Users/u/.ssh", "/Users/u/dotfiles/ssh"),
        ("/tmp/sandgate-501", "/private/tmp/sandgate-501"),
    ] {
        for path in [given, real] {
            let keys = keys_of(&p, path);
            assert!(keys.iter().any(|k| k.starts_with("HIDDEN_")), "{path} not hidden: {keys:?}");
            let key = keys.iter().find(|k| k.starts_with("HIDDEN_")).unwrap();
            let rule = format!("(deny file-read* file-write* (subpath (param \"{key}\"))");
            assert!(p.text.contains(&rule), "{rule}");
        }
    }
}

// Item 2: renaming an ancestor of a protected or hidden path is refused.
#[test]
fn ancestors_between_writable_roots_and_protected_paths_are_pinned() {
    let mut s = spec("build");
    s.writable.push(PathBuf::from("/Users/u"));
    s.read_only.push(PathBuf::from("/Users/u/.config/git/config"));
    let p = render(&s);
    for (dir, pinned) in [
        ("/Users/u/project/.git", true),
        ("/Users/u/project", true), // under the writable home
        ("/Users/u/.config", true),
        ("/Users/u/.config/git", true),
        ("/Users/u/.local/share", true),
        ("/Users/u/dotfiles", true), // above the real ~/.ssh
        ("/Users/u", false),         // a root: its parent is not writable
        ("/Users", false),
        ("/private/var/folders/xx/T/sandgate-golden", false),
    ] {
        let keys = keys_of(&p, dir);
        let key = keys.iter().find(|k| k.starts_with("ANCESTOR_"));
        assert_eq!(key.is_some(), pinned, "{dir}: {keys:?}");
        if let Some(k) = key {
            let rule = format!(
                "(deny file-write-unlink file-write-create (literal (param \"{k}\")) \
                 (with message \"sandgate:golden\"))"
            );
            assert!(p.text.contains(&rule), "{rule}");
        }
    }
    // nested repositories: hooks and config at any depth of a writable path, in any case
    rows(
        &p,
        &[
            ("file-write-create", "/Users/u/project/vendor/x/.git/hooks/post-checkout", false),
            ("file-write-data", "/Users/u/project/.git/modules/sub/CONFIG", false),
            ("file-write-data", "/Users/u/project/vendor/x/.git/index", true),
        ],
    );
}

// Item 3: TIOCSTI, numerically, after the terminal allowances.
#[test]
fn tiocsti_is_denied_after_the_terminal_allowances() {
    let p = render(&spec("run"));
    assert_eq!(seatbelt::TIOCSTI, 2_147_578_994);
    let deny = p
        .text
        .find("(deny file-ioctl (ioctl-command 2147578994) (with message \"sandgate:golden\"))")
        .expect("TIOCSTI deny");
    let allow = p
        .text
        .find("(allow file-read-data file-write-data file-ioctl (literal (param \"TTY_0\")))")
        .unwrap();
    assert!(allow < deny);
}

// Item 6: a tier name from config never writes raw text into the profile.
#[test]
fn tier_names_cannot_inject_rules() {
    let mut s = spec("run");
    s.tier_name = "x\n(allow default)".into();
    let p = render(&s);
    assert!(!p.text.contains("\n(allow default)"), "{}", &p.text[..80]);
    assert!(p.text.starts_with("(version 1)\n; sandgate tier x__allow_default_ (renamed"));
    assert_eq!(seatbelt::tier_label("build-offline_2"), "build-offline_2");
}

// Item 7: trustd only when set, and only with network.
#[test]
fn trustd_is_a_setting() {
    let trustd = "(global-name \"com.apple.trustd.agent\")";
    let mut h = host();
    assert!(!seatbelt::render(&spec("net"), &h, &fs()).text.contains(trustd));
    h.trustd = Trustd::from_setting(Some("allow"));
    assert!(seatbelt::render(&spec("net"), &h, &fs()).text.contains(trustd));
    assert!(!seatbelt::render(&spec("run"), &h, &fs()).text.contains(trustd));
    for (v, want) in
        [(None, Trustd::Deny), (Some("0"), Trustd::Deny), (Some(" ALLOW"), Trustd::Allow)]
    {
        assert_eq!(Trustd::from_setting(v), want, "{v:?}");
    }
}

// Item 8: the JVM connects over IPv4, in every tier (loopback servers in `run` too).
#[test]
fn jvm_prefers_ipv4_in_every_tier() {
    let env = vec![("JAVA_TOOL_OPTIONS".into(), "-Xmx1g -Dhttp.proxyPort=3128".into())];
    let proxy = spec("net").net;
    let got = seatbelt::environment(&env, &proxy);
    assert_eq!(
        got[0].1, "-Xmx1g -Dhttp.proxyPort=3128 -Djava.net.preferIPv4Stack=true",
        "appended last"
    );
    assert_eq!(seatbelt::environment(&[], &proxy)[0].1, "-Djava.net.preferIPv4Stack=true");
    assert_eq!(seatbelt::environment(&env, &NetSetup::None), got);
}

// Item 9: xcrun shims reach dirhelper; the caches the host trusts are not written (round two).
#[test]
fn xcrun_shims_reach_dirhelper() {
    let p = render(&spec("run"));
    assert!(p.text.contains("(allow mach-lookup (global-name \"com.apple.bsd.dirhelper\"))"));
    assert_eq!(param(&p, "USER_CACHE_0"), Path::new("/private/var/folders/xx/C"));
    assert!(!p.text.contains("(allow file-write* (subpath (param \"USER_CACHE_0\")))"));
}

// Item 10: nested launches are explained, never silently widened.
#[test]
fn nested_launches_run_in_place_only_in_the_same_tier() {
    assert!(matches!(seatbelt::nested(Some("build"), "build", &[]), Nested::RunInPlace { .. }));
    for (outer, inner, flags) in [
        (Some("build"), "run", &[][..]),
        (Some("run"), "build", &[]),
        (Some("build"), "build", &["--allow-write"]),
        (None, "run", &[]),
    ] {
        match seatbelt::nested(outer, inner, flags) {
            Nested::Refuse { message } => {
                assert!(message.contains("sandbox_apply: Operation not permitted"), "{message}")
            }
            Nested::RunInPlace { .. } => panic!("{outer:?} {inner} {flags:?}: ran in place"),
        }
    }
}

// Item 11: unix sockets under the private temporary directory in every tier; loopback
// listening only when asked for (item 10 of issue 34: the host's loopback is not private).
#[test]
fn private_unix_sockets_and_loopback_listening_by_name() {
    let listen = "(allow network-bind network-inbound (local ip \"localhost:*\"))";
    for tier in ["run", "net", "build"] {
        let p = render(&spec(tier));
        for rule in [
            "(allow system-socket (socket-domain AF_UNIX))",
            "(allow network-bind network-inbound (local unix-socket (subpath (param \"TMP_0\"))))",
            "(allow network-outbound (remote unix-socket (subpath (param \"TMP_0\"))))",
        ] {
            assert!(p.text.contains(rule), "{tier}: {rule}");
        }
        assert!(!p.text.contains(listen), "{tier}: listening is opt-in");
        let mut s = spec(tier);
        s.macos.loopback_listen = true;
        let p = render(&s);
        assert!(p.text.contains(listen), "{tier}: [macos] loopback_listen");
        // listening, not connecting: out only to the proxy
        assert!(!p.text.contains("(allow network-outbound (remote ip"), "{tier}");
    }
}

#[test]
fn run_with_loopback_listening() {
    let mut s = spec("run");
    s.macos.loopback_listen = true;
    check("run-loopback-listen", &render(&s));
}

// Item 12: every denial carries the sandbox id for the log reader.
#[test]
fn denials_carry_the_sandbox_id() {
    let p = render(&spec("build"));
    assert!(p.text.contains("(deny default (with message \"sandgate:golden\"))"));
    for line in p.text.lines().filter(|l| l.starts_with("(deny ")) {
        assert!(line.ends_with("(with message \"sandgate:golden\"))"), "{line}");
    }
}

// Item 13: ps works (process list), without other processes' arguments and environment.
#[test]
fn ps_sysctls() {
    let p = render(&spec("run"));
    assert!(p.text.contains("(sysctl-name \"kern.proc.all\")"));
    assert!(!p.text.contains("procargs2\")"));
}

// ---- Round two (issue 34): each hole as rows evaluated against the profile ----

/// `build` with the top-level rule as the daemon fills it (a few names of each kind).
fn build_with_rule() -> SandboxSpec {
    let mut s = spec("build");
    s.top_level = Some(TopLevel {
        writable: vec![".venv".into(), ".tmp*".into()],
        protected: vec![
            "rust-toolchain.toml".into(),
            "mise.toml".into(),
            "gradle.properties".into(),
            "*.code-workspace".into(),
        ],
        below: vec![
            ".git".into(),
            ".cargo".into(),
            ".envrc".into(),
            "rust-toolchain.toml".into(),
            ".npmrc".into(),
            ".yarnrc.yml".into(),
            "mise.*.toml".into(),
            ".venv".into(), // allowlisted as well: not protected below
        ],
        review: vec!["build.rs".into()],
        skip: vec!["node_modules".into(), "target".into()],
        ..TopLevel::default()
    });
    s
}

/// Checks `(op, path, allowed)` rows against `p`; ops are Seatbelt operations.
fn rows(p: &seatbelt::Profile, rows: &[(&str, &str, bool)]) {
    let mut wrong = Vec::new();
    for &(op, path, want) in rows {
        if eval::allows(p, op, path) != want {
            wrong.push(format!("{op} {path}: want {}", if want { "allowed" } else { "denied" }));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn build_with_the_top_level_rule() {
    check("build-top-level", &render(&build_with_rule()));
}

// Hole 1: the top-level rule (and the host-tool names below the top) in the profile.
#[test]
fn top_level_rule_is_enforced_by_the_profile() {
    let p = render(&build_with_rule());
    let w = "file-write-create";
    rows(
        &p,
        &[
            (w, "/Users/u/project/src/main.rs", true),
            (w, "/Users/u/project/.cargo", false),
            (w, "/Users/u/project/.cargo/config.toml", false),
            (w, "/Users/u/project/.CARGO/config.toml", false),
            (w, "/Users/u/project/.yarnrc.yml", false),
            (w, "/Users/u/project/.zzz-anything", false),
            (w, "/Users/u/project/rust-toolchain.toml", false),
            (w, "/Users/u/project/RUST-TOOLCHAIN.TOML", false),
            (w, "/Users/u/project/mise.toml", false),
            (w, "/Users/u/project/gradle.properties", false),
            (w, "/Users/u/project/a.code-workspace", false),
            (w, "/Users/u/project/rust-toolchain.toml.bak", true),
            (w, "/Users/u/project/.venv/lib/x.py", true),
            (w, "/Users/u/project/.VENV/lib/x.py", false), // the allowlist matches exactly
            (w, "/Users/u/project/.tmpA1b2", true),
            (w, "/Users/u/project/.venv2", false),
            // an existing .git follows the git rules; a new one below the top is refused
            (w, "/Users/u/project/.git/objects/ab/cd", true),
            ("file-write-data", "/Users/u/project/.git/index", true),
            (w, "/Users/u/project/.git/hooks/pre-commit", false),
            (w, "/Users/u/project/.GIT/Hooks/pre-commit", false),
            ("file-write-data", "/Users/u/project/.git/CONFIG", false),
            (w, "/Users/u/project/sub/.git", false),
            // below the top: the host-tool names, in any case; build output is not entered
            (w, "/Users/u/project/sub/.envrc", false),
            (w, "/Users/u/project/sub/deeper/.Cargo/config.toml", false),
            (w, "/Users/u/project/sub/mise.ci.toml", false),
            (w, "/Users/u/project/sub/.bin/x", true),
            (w, "/Users/u/project/sub/.venv/x", true),
            (w, "/Users/u/project/node_modules/pkg/.npmrc", true),
            (w, "/Users/u/project/target/debug/.cargo/x", true),
            (w, "/Users/u/project/sub/build.rs", true), // review: writable, reported on Linux
        ],
    );
    // control: without the rule the same dot-entry is writable (what issue 34 found)
    rows(&render(&spec("build")), &[(w, "/Users/u/project/.cargo/config.toml", true)]);
}

// Hole 1: the report is honest, so --require-full refuses on macOS.
#[test]
fn enforcement_names_what_seatbelt_does_not_enforce() {
    let e = seatbelt::enforcement(&build_with_rule());
    assert!(!e.is_full(), "--require-full must refuse: {e:?}");
    for wall in ["private /tmp", "pid namespace"] {
        assert!(e.missing.iter().any(|m| m.starts_with(wall)), "{wall}: {:?}", e.missing);
    }
    // no listening by default: the private loopback's purpose holds another way
    assert!(e.substitutes.iter().any(|s| s.starts_with("private loopback")), "{e:?}");
    let mut listening = build_with_rule();
    listening.macos.loopback_listen = true;
    let e = seatbelt::enforcement(&listening);
    assert!(e.missing.iter().any(|m| m.starts_with("private loopback")), "{e:?}");
    assert!(e.substitutes.iter().any(|s| s.starts_with("top-level rule")));
    assert!(e.substitutes.iter().any(|s| s.starts_with("processes outliving")));
    assert!(
        !seatbelt::enforcement(&spec("run")).substitutes.iter().any(|s| s.contains("top-level"))
    );
}

// Hole 2: ~/Library hidden, but for the allowlist (read-only); hole 7: in any case.
#[test]
fn library_is_hidden_but_for_what_tools_read() {
    let r = "file-read-data";
    let rows_all: &[(&str, &str, bool)] = &[
        (r, "/Users/u/Library/Keychains/login.keychain-db", false),
        (r, "/Users/u/library/keychains/login.keychain-db", false),
        (r, "/Users/u/Library/Application Support/Google/Chrome/Default/Cookies", false),
        (r, "/Users/u/Library/Group Containers/x.slack/token", false),
        (r, "/Users/u/Library/Containers/com.x/Data/a", false),
        (r, "/Users/u/Library/Caches/com.tinyspeck.slackmacgap/x", false),
        (r, "/Users/u/Library/Developer/Xcode/UserData/x", true),
        (r, "/Users/u/Library/Caches/pip/http/x", true),
        (r, "/Users/u/Library/Preferences/.GlobalPreferences.plist", true),
        (r, "/Users/u/Library/Preferences/com.apple.Terminal.plist", false),
        ("file-read-metadata", "/Users/u/Library", true),
        ("file-read-metadata", "/Users/u/Library/Caches", true),
        ("file-read-metadata", "/Users/u/Library/Mail", false),
        ("file-write-create", "/Users/u/Library/Caches/go-build/ab/x-d", false),
        ("file-write-create", "/Users/u/Library/LaunchAgents/x.plist", false),
        (r, "/Users/u/Documents/notes.txt", true), // reads elsewhere: as before
    ];
    for tier in ["run", "net", "build"] {
        rows(&render(&spec(tier)), rows_all);
    }
    // control: without a home the keychain would be readable
    let mut h = host();
    h.home = None;
    rows(
        &seatbelt::render(&spec("run"), &h, &fs()),
        &[(r, "/Users/u/Library/Keychains/login.keychain-db", true)],
    );
    // a path the caller made writable inside Library stays so
    let mut s = spec("run");
    s.writable.push(PathBuf::from("/Users/u/Library/Caches/mytool"));
    rows(&render(&s), &[("file-write-create", "/Users/u/Library/Caches/mytool/x", true)]);
}

// Hole 3: caches the host trusts: never written, even under a writable path; the sandbox's own.
#[test]
fn host_caches_are_never_written() {
    let mut s = spec("build");
    s.writable.push(PathBuf::from("/var/folders/xx"));
    let w = "file-write-create";
    let table: &[(&str, &str, bool)] = &[
        (w, "/private/var/folders/xx/C/clang/ModuleCache/ABC/Foo.pcm", false),
        (w, "/private/var/folders/xx/C/com.apple.DeveloperTools/xcrun_db", false),
        (w, "/private/var/folders/xx/T/xcrun_db", false),
        (w, "/private/var/folders/xx/T/xcrun_db-Xa1", false),
        (w, "/private/var/folders/xx/T/sandgate-golden/clang-module-cache/x.pcm", true),
    ];
    rows(&seatbelt::render(&s, &host(), &fs()), table);
    rows(&render(&spec("run")), table);
    // control: before round two the user cache directory was writable
    let mut h = host();
    h.user_cache_dir = None;
    h.user_temp_dir = None;
    rows(
        &seatbelt::render(&s, &h, &fs()),
        &[(w, "/private/var/folders/xx/C/clang/ModuleCache/ABC/Foo.pcm", true)],
    );
}

#[test]
fn the_sandbox_gets_its_own_toolchain_caches() {
    use std::ffi::OsString;
    let tmp = Path::new("/private/var/folders/xx/T/sandgate-golden");
    let get = |env: &[(OsString, OsString)], k: &str| {
        env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.to_string_lossy().into_owned())
    };
    // (developer dir, caller's PATH, caller's DEVELOPER_DIR, PATH after)
    let table = [
        (
            Some("/Library/Developer/CommandLineTools"),
            Some("/opt/homebrew/bin:/usr/bin"),
            None,
            "/Library/Developer/CommandLineTools/usr/bin:/opt/homebrew/bin:/usr/bin",
        ),
        (
            Some("/Applications/Xcode.app/Contents/Developer"),
            Some("/usr/bin"),
            None,
            "/Applications/Xcode.app/Contents/Developer/usr/bin:/Applications/Xcode.app/Contents/\
             Developer/Toolchains/XcodeDefault.xctoolchain/usr/bin:/usr/bin",
        ),
        (
            Some("/Library/Developer/CommandLineTools"),
            Some("/usr/bin"),
            Some("/opt/Xcode-beta.app/Contents/Developer"),
            "/opt/Xcode-beta.app/Contents/Developer/usr/bin:/opt/Xcode-beta.app/Contents/\
             Developer/Toolchains/XcodeDefault.xctoolchain/usr/bin:/usr/bin",
        ),
        (None, Some("/usr/bin"), None, "/usr/bin"),
    ];
    for (dev, path, given, want) in table {
        let mut h = host();
        h.developer_dir = dev.map(PathBuf::from);
        let mut env: Vec<(OsString, OsString)> = vec![
            ("CLANG_MODULE_CACHE_PATH".into(), "/Users/u/.cache/clang".into()),
            ("GOCACHE".into(), "/Users/u/Library/Caches/go-build".into()),
        ];
        env.extend(path.map(|p| ("PATH".into(), p.into())));
        env.extend(given.map(|d| ("DEVELOPER_DIR".into(), d.into())));
        seatbelt::toolchain_env(&mut env, &h, tmp);
        assert_eq!(get(&env, "PATH").as_deref(), Some(want), "{dev:?}");
        assert_eq!(get(&env, "DEVELOPER_DIR").as_deref(), given.or(dev), "{dev:?}");
        for (k, dir) in [
            ("CLANG_MODULE_CACHE_PATH", "clang-module-cache"),
            ("GOCACHE", "go-build"),
            ("YARN_CACHE_FOLDER", "yarn-cache"),
        ] {
            assert_eq!(get(&env, k), Some(tmp.join(dir).display().to_string()), "{k}");
            assert_eq!(env.iter().filter(|(n, _)| n == k).count(), 1, "{k} once");
        }
    }
}

// Hole 4: other terminals refused; the launch's own, /dev/tty and stat allowed.
#[test]
fn other_terminals_are_refused() {
    for tier in ["run", "build"] {
        let p = render(&spec(tier));
        rows(
            &p,
            &[
                ("file-read-data", "/dev/ttys004", false),
                ("file-write-data", "/dev/ttys004", false),
                ("file-ioctl", "/dev/ttys004", false),
                ("file-read-data", "/dev/ttys003", true),
                ("file-write-data", "/dev/ttys003", true),
                ("file-ioctl", "/dev/ttys003", true),
                ("file-read-data", "/dev/tty", true),
                ("file-write-data", "/dev/tty", true),
                ("file-read-metadata", "/dev/ttys004", true),
            ],
        );
        // ptys made inside: by the kernel's pty extension
        assert!(p.text.contains(
            "(allow file-read-data file-write-data file-ioctl (require-all (regex #\"^/dev/ttys[0-9]+$\") \
             (extension \"com.apple.sandbox.pty\")))"
        ));
    }
    // control: with no terminal of its own, its former one is refused too
    let mut h = host();
    h.terminals.clear();
    rows(&seatbelt::render(&spec("run"), &h, &fs()), &[("file-read-data", "/dev/ttys003", false)]);
}

// Hole 5: each launch's profile allows its own Mach name, which the launcher asks about.
#[test]
fn each_launch_has_a_name_of_its_own() {
    let p = render(&spec("run"));
    let own = seatbelt::reap::launch_service("golden");
    assert!(p.text.contains(&format!("(allow mach-lookup (global-name \"{own}\"))")));
    let mut other = spec("run");
    other.id = SandboxId::try_from("other").unwrap();
    assert!(!seatbelt::render(&other, &host(), &fs()).text.contains(&own));
}

// Hole 6: narrowing flags are never dropped in place.
#[test]
fn nested_launches_refuse_flags_they_cannot_apply() {
    for flags in [&["--net"][..], &["--deny"], &["--allow"], &["--allow-write", "--deny"]] {
        match seatbelt::nested(Some("net"), "net", flags) {
            Nested::Refuse { message } => {
                for f in flags {
                    assert!(message.contains(f), "{message}");
                }
            }
            Nested::RunInPlace { .. } => panic!("{flags:?}: ran in place"),
        }
    }
    assert!(matches!(seatbelt::nested(Some("net"), "net", &[]), Nested::RunInPlace { .. }));
}

// Hole 7: hidden and read-only paths in any case.
#[test]
fn names_match_in_any_case() {
    let p = render(&spec("build"));
    rows(
        &p,
        &[
            ("file-read-data", "/Users/u/.SSH/id_ed25519", false),
            ("file-read-data", "/users/U/Dotfiles/SSH/id_ed25519", false),
            ("file-read-data", "/Users/u/.Aws/credentials", false),
            ("file-write-data", "/Users/u/project/.ENVRC", false),
            ("file-write-data", "/Users/u/.CONFIG/Sandgate/config.toml", false),
            ("file-read-data", "/Users/u/.sshx/ok", true),
        ],
    );
}

// Hole 9: other sandboxes' temporary directories are hidden; this one's is its own.
#[test]
fn other_sandboxes_tmp_is_hidden() {
    rows(
        &render(&spec("run")),
        &[
            ("file-read-data", "/private/var/folders/xx/T/sandgate-sg-1-abc/secret", false),
            ("file-read-data", "/private/var/folders/xx/T/SANDGATE-sg-1-abc/secret", false),
            ("file-read-data", "/private/var/folders/xx/T/sandgate-golden/x", true),
            ("file-write-create", "/private/var/folders/xx/T/sandgate-golden/x", true),
            ("file-read-data", "/private/var/folders/xx/T/other-tool/x", true),
        ],
    );
}

// Item 10: the command's own descriptors by name, DTrace probes, shared memory of its own.
#[test]
fn small_allowances_of_round_two() {
    let p = render(&spec("run"));
    rows(
        &p,
        &[
            ("file-write-data", "/dev/stdout", true),
            ("file-write-data", "/dev/stderr", true),
            ("file-write-data", "/dev/fd/3", true),
            ("file-write-data", "/dev/fd/3/x", false),
            ("file-ioctl", "/dev/dtracehelper", true),
        ],
    );
    assert!(p.text.contains("(ipc-posix-name-prefix \"/psm_\")"));
    assert!(!p.text.contains("(allow ipc-posix-shm)"), "not every segment of the host");
}

// ---- Red team of round two: each way around a wall that held in the evaluator is in the
// docs; each that did not is a row here that failed before its fix ----

// The top-level rule's re-allowances (`.git/` at the top, the allowlisted dot-entries) are
// regexes; unbounded they granted writes outside the writable path: a case variant of it (a
// distinct directory on a case-sensitive volume) and anything an earlier denial closed.
#[test]
fn re_allowed_top_level_names_stay_inside_the_writable_path() {
    let p = render(&build_with_rule());
    let w = "file-write-create";
    rows(
        &p,
        &[
            (w, "/Users/u/PROJECT/.git/objects/ab/cd", false),
            (w, "/Users/u/Project/.venv/bin/activate", false),
            (w, "/users/u/project/.tmpX/a", false),
            // control: the same names under the writable path as given
            (w, "/Users/u/project/.git/objects/ab/cd", true),
            (w, "/Users/u/project/.venv/bin/activate", true),
            (w, "/Users/u/project/.tmpX/a", true),
        ],
    );
}

// `--allow-write` inside ~/Library reopened everything below it: the login keychain and
// LaunchAgents (which the docs say are never writable).
#[test]
fn keychains_and_launch_agents_win_over_a_writable_library_path() {
    let mut s = spec("run");
    s.writable.push(PathBuf::from("/Users/u/Library"));
    rows(
        &render(&s),
        &[
            ("file-read-data", "/Users/u/Library/Keychains/login.keychain-db", false),
            ("file-write-data", "/Users/u/Library/Keychains/login.keychain-db", false),
            ("file-write-create", "/Users/u/Library/LaunchAgents/evil.plist", false),
            ("file-write-create", "/Users/u/library/launchagents/evil.plist", false),
            ("file-read-data", "/Users/u/Library/LaunchAgents/x.plist", true),
            // control: the rest of the writable path stays writable
            ("file-write-create", "/Users/u/Library/Caches/mytool/x", true),
        ],
    );
}

// Reads were allowed everywhere, devices included: other terminals not named ttys (the BSD
// ptys /dev/ttyp*, serial and Bluetooth ports /dev/cu.* and /dev/tty.*), and, for a launch as
// root, the raw disks (every hidden file, read past the profile).
#[test]
fn devices_are_readable_only_by_name() {
    for tier in ["run", "build"] {
        let p = render(&spec(tier));
        let r = "file-read-data";
        rows(
            &p,
            &[
                (r, "/dev/ttyp0", false),
                (r, "/dev/ptyp0", false),
                (r, "/dev/cu.usbserial-1410", false),
                (r, "/dev/tty.Bluetooth-Incoming-Port", false),
                (r, "/dev/rdisk0", false),
                (r, "/dev/disk3s5", false),
                (r, "/dev/bpf0", false),
                (r, "/dev/console", false),
                (r, "/dev/ttys004", false),
                // control: what tools read by name, and stat of anything
                (r, "/dev", true),
                (r, "/dev/null", true),
                (r, "/dev/zero", true),
                (r, "/dev/random", true),
                (r, "/dev/urandom", true),
                (r, "/dev/stdin", true),
                (r, "/dev/fd/63", true),
                (r, "/dev/tty", true),
                (r, "/dev/ptmx", true),
                (r, "/dev/dtracehelper", true),
                (r, "/dev/autofs_nowait", true),
                (r, "/dev/ttys003", true),
                ("file-read-metadata", "/dev/rdisk0", true),
            ],
        );
    }
}

// Firmlinks: /Users, /private, ... are the data volume's, also spelled /System/Volumes/Data/...;
// a hidden path must be hidden under that spelling too.
#[test]
fn the_data_volume_spelling_is_hidden_too() {
    let r = "file-read-data";
    rows(
        &render(&spec("run")),
        &[
            (r, "/System/Volumes/Data/Users/u/.ssh/id_ed25519", false),
            (r, "/System/Volumes/Data/Users/u/dotfiles/ssh/id_ed25519", false),
            (r, "/system/volumes/data/Users/u/.aws/credentials", false),
            (r, "/System/Volumes/Data/Users/u/Library/Keychains/login.keychain-db", false),
            (r, "/System/Volumes/Data/private/var/folders/xx/T/sandgate-sg-1/x", false),
            // control: the rest of the data volume reads as before
            (r, "/System/Volumes/Data/Users/u/project/README.md", true),
        ],
    );
}

// APFS compares names after Unicode case folding and normalisation: `ſ` (U+017F) folds to `s`
// and the Kelvin sign (U+212A) to `k`, so `~/.ſsh` is `~/.ssh`; `é` is one code point (NFC) or
// `e` and a combining accent (NFD). Bracketing ASCII letters missed them all.
#[test]
fn names_match_under_unicode_folding_and_normalisation() {
    let mut s = build_with_rule();
    s.hidden.push(PathBuf::from("/Users/u/.clé")); // NFC, as a directory listing gives it
    let p = render(&s);
    let r = "file-read-data";
    rows(
        &p,
        &[
            (r, "/Users/u/.\u{17F}sh/id_ed25519", false),
            (r, "/Users/u/.s\u{17F}h/id_ed25519", false),
            (r, "/Users/u/.cle\u{301}/token", false),
            (r, "/Users/u/.CLÉ/token", false),
            (r, "/Users/u/.clé/token", false),
            ("file-write-create", "/Users/u/project/ru\u{17F}t-toolchain.toml", false),
            ("file-write-create", "/Users/u/project/sub/.cargo/config.toml", false),
            ("file-write-create", "/Users/u/project/sub/.\u{212A}eep/x", true),
            // control: other names stay readable
            (r, "/Users/u/.clef/token", true),
            (r, "/Users/u/.zsh/x", true),
        ],
    );
}

// Sandboxes started with another TMPDIR (`/tmp`, the per-user one) were not hidden from each
// other: only siblings in this launch's own TMPDIR were.
#[test]
fn other_sandboxes_tmp_is_hidden_whatever_their_tmpdir() {
    let mut h = host();
    h.tmp = PathBuf::from("/tmp/sandgate-golden");
    let p = seatbelt::render(&spec("run"), &h, &fs());
    rows(
        &p,
        &[
            ("file-read-data", "/private/var/folders/xx/T/sandgate-sg-1-abc/secret", false),
            ("file-read-data", "/private/tmp/sandgate-sg-2/secret", false),
            // control: its own, and what else is there
            ("file-read-data", "/private/tmp/sandgate-golden/x", true),
            ("file-read-data", "/private/var/folders/xx/T/other-tool/x", true),
        ],
    );
    rows(&render(&spec("run")), &[("file-read-data", "/private/tmp/sandgate-sg-2/secret", false)]);
}

// The reaping asks whether a process's profile allows this launch's name. A process under a
// profile of another program that allows every lookup (`(allow default)`, as Homebrew's build
// sandbox) said yes, and was killed; it must also refuse a name no sandgate profile allows.
#[test]
fn reaping_asks_a_name_no_profile_of_ours_allows() {
    use seatbelt::reap;
    let p = render(&spec("run"));
    let canary = reap::canary_service("golden");
    assert!(!p.text.contains(&canary), "{canary}");
    assert!(canary.starts_with(&reap::launch_service("golden")), "{canary}");
    assert!(!p.text.contains("(allow mach-lookup)"), "an unfiltered lookup would say yes");
    // (allows this launch's name, allows the canary, ours)
    for (own, canary, ours) in [(true, false, true), (true, true, false), (false, false, false)] {
        assert_eq!(reap::is_ours(own, canary), ours, "{own} {canary}");
    }
}

// A process that execs a set-user-id program (`sudo`, `crontab`, `at`) keeps the profile but
// changes its effective uid; listed by effective uid only, it outlived the launch.
#[test]
fn reaping_lists_processes_by_any_of_their_uids() {
    use seatbelt::reap::{Uids, of_user};
    // (real, effective, saved, of user 501)
    for (ruid, euid, svuid, want) in [
        (501, 501, 501, true),
        (501, 0, 0, true), // set-user-id root: real uid stays the caller's
        (0, 501, 501, true),
        (502, 502, 502, false),
        (0, 0, 0, false),
    ] {
        assert_eq!(of_user(Uids { ruid, euid, svuid }, 501), want, "{ruid} {euid} {svuid}");
    }
}
