//! Golden files of the Seatbelt profile for each tier and option (`UPDATE_GOLDEN=1` rewrites them),
//! and the rules each macOS fix added, as table rows that fail without it. Paths are resolved
//! through a fake filesystem with the macOS layout (`/tmp` → `/private/tmp`, `/var` →
//! `/private/var`) and a symlinked `~/.ssh`.

use std::path::{Path, PathBuf};

use sandgate_sandbox::canon::MapLinks;
use sandgate_sandbox::seatbelt::{self, HostFacts, Nested, Trustd};
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec};

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
    }
}

fn host() -> HostFacts {
    HostFacts {
        tmp: PathBuf::from("/var/folders/xx/T/sandgate-golden"),
        proxy_port: 3128,
        user_temp_dir: Some(PathBuf::from("/var/folders/xx/T")),
        user_cache_dir: Some(PathBuf::from("/var/folders/xx/C")),
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
    // nested repositories: hooks and config at any depth of a writable path
    assert!(p.text.contains(
        "(deny file-write* (require-all (subpath (param \"WRITABLE_0\")) \
         (regex #\"/\\.git/(modules/.+/)?(hooks(/.*)?|config)$\"))"
    ));
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
    let allow = p.text.find("(allow file-write-data file-ioctl (require-all (regex").unwrap();
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

// Item 8: the JVM connects over IPv4 in tiers with network.
#[test]
fn jvm_prefers_ipv4_with_network() {
    let env = vec![("JAVA_TOOL_OPTIONS".into(), "-Xmx1g -Dhttp.proxyPort=3128".into())];
    let proxy = spec("net").net;
    let got = seatbelt::environment(&env, &proxy);
    assert_eq!(
        got[0].1, "-Xmx1g -Dhttp.proxyPort=3128 -Djava.net.preferIPv4Stack=true",
        "appended last"
    );
    assert_eq!(seatbelt::environment(&[], &proxy)[0].1, "-Djava.net.preferIPv4Stack=true");
    assert_eq!(seatbelt::environment(&env, &NetSetup::None), env);
}

// Item 9: xcrun shims: dirhelper and the user's temp (xcrun_db) and cache directories.
#[test]
fn xcrun_shims_reach_dirhelper_and_the_user_dirs() {
    let p = render(&spec("run"));
    assert!(p.text.contains("(allow mach-lookup (global-name \"com.apple.bsd.dirhelper\"))"));
    assert_eq!(param(&p, "USER_TEMP_0"), Path::new("/private/var/folders/xx/T"));
    assert_eq!(param(&p, "USER_CACHE_0"), Path::new("/private/var/folders/xx/C"));
    assert!(p.text.contains(
        "(allow file-write* (require-all (subpath (param \"USER_TEMP_0\")) (regex #\"/xcrun_db[^/]*$\")))"
    ));
    assert!(p.text.contains("(allow file-write* (subpath (param \"USER_CACHE_0\")))"));
}

// Item 10: nested launches are explained, never silently widened.
#[test]
fn nested_launches_run_in_place_only_in_the_same_tier() {
    assert!(matches!(seatbelt::nested(Some("build"), "build", false), Nested::RunInPlace { .. }));
    for (outer, inner, extra) in [
        (Some("build"), "run", false),
        (Some("run"), "build", false),
        (Some("build"), "build", true),
        (None, "run", false),
    ] {
        match seatbelt::nested(outer, inner, extra) {
            Nested::Refuse { message } => {
                assert!(message.contains("sandbox_apply: Operation not permitted"), "{message}")
            }
            Nested::RunInPlace { .. } => panic!("{outer:?} {inner} {extra}: ran in place"),
        }
    }
}

// Item 11: unix sockets under the private temporary directory and loopback listening, every tier.
#[test]
fn private_unix_sockets_and_loopback_listening() {
    for tier in ["run", "net", "build"] {
        let p = render(&spec(tier));
        for rule in [
            "(allow system-socket (socket-domain AF_UNIX))",
            "(allow network-bind network-inbound (local unix-socket (subpath (param \"TMP_0\"))))",
            "(allow network-outbound (remote unix-socket (subpath (param \"TMP_0\"))))",
            "(allow network-bind network-inbound (local ip \"localhost:*\"))",
        ] {
            assert!(p.text.contains(rule), "{tier}: {rule}");
        }
        // listening, not connecting: out only to the proxy
        assert!(!p.text.contains("(allow network-outbound (remote ip"), "{tier}");
    }
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
