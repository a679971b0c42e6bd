//! Each check made to fail (or warn) by changing one fact of a healthy system, with the message
//! and the fix it gives.

use std::path::PathBuf;

use sandgate_hook::Wrapper;

use super::*;

fn healthy() -> Facts {
    let bin = PathBuf::from("/home/u/.local/bin");
    Facts {
        kernel: Some(KernelFacts {
            nested: false,
            user_namespace: Ok(()),
            userns_settings: vec![("user.max_user_namespaces".into(), "15000".into())],
            landlock_abi: 7,
            landlock_gaps: Vec::new(),
            seccomp: true,
            overlay: Some(Ok(())),
            capture: Some(Ok(())),
            network: Ok(None),
        }),
        wrappers: ["sandbox-run", "sandbox-net", "sandbox-build"]
            .into_iter()
            .map(|name| WrapperFact {
                name,
                found: Some(bin.join(name)),
                trust: Some(Wrapper::Ours),
            })
            .collect(),
        daemon: DaemonFact::Running {
            pid: 42,
            version: "0.1.0".into(),
            same_protocol: true,
            events_failed: 0,
            last_error: None,
        },
        config: vec![ConfigFact {
            path: "/home/u/.config/sandgate/config.toml".into(),
            role: "global".into(),
            error: None,
            warnings: Vec::new(),
        }],
        caches: CacheFacts {
            mode: sandgate_config::CacheMode::Project,
            dir: "/home/u/.local/share/sandgate/caches".into(),
            writable: Ok(()),
            layered: vec!["cargo".into()],
            scopes: 1,
            bytes: 3 << 20,
        },
        telegram: TelegramFact::NotConfigured,
        claude: ClaudeFacts {
            registered: vec![(
                "/home/u/.claude/settings.json".into(),
                "/usr/bin/sandgate hook claude --tier build".into(),
            )],
            unreadable: Vec::new(),
            exe: "/usr/bin/sandgate".into(),
            programs: vec![Some("/usr/bin/sandgate".into())],
        },
        completions: CompletionFacts {
            shell: Some("bash".into()),
            file: Some((
                "/home/u/.local/share/bash-completion/completions/sandgate".into(),
                FileState::Current,
            )),
            bash_completion: true,
        },
        fences: Vec::new(),
    }
}

#[test]
fn an_open_guest_fence_fails_doctor() {
    use crate::fences::FenceState;
    let mut f = healthy();
    assert!(!checks(&f).iter().any(|c| c.name == "guest_fence"), "no fence: no check");
    let state = |findings: Vec<String>| FenceState {
        anchor: "com.apple/0.sandgate.u501".into(),
        uid: 501,
        findings,
    };
    f.fences = vec![state(Vec::new())];
    assert_eq!(check(&f, "guest_fence").status, Status::Ok);
    f.fences = vec![state(vec!["`Status: Disabled`: pf is disabled".into()])];
    let c = check(&f, "guest_fence");
    assert_eq!(c.status, Status::Fail);
    assert!(c.detail.contains("pf is disabled"), "{c:?}");
}

/// The check named `name` of `facts`.
fn check(facts: &Facts, name: &str) -> Check {
    checks(facts).into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name}"))
}

fn kernel(f: &mut Facts) -> &mut KernelFacts {
    f.kernel.as_mut().unwrap()
}

#[test]
fn a_healthy_system_passes_every_check() {
    let all = checks(&healthy());
    let names: Vec<&str> = all.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "user_namespaces",
            "landlock",
            "seccomp",
            "overlayfs",
            "capture",
            "network",
            "sandbox_links",
            "daemon",
            "config",
            "caches",
            "telegram",
            "claude_hook",
            "completions"
        ]
    );
    for c in &all {
        assert_eq!((c.status, &c.fix), (Status::Ok, &None), "{c:?}");
    }
    let r = report(&all);
    assert_eq!(r.code, 0);
    assert!(r.text.ends_with("a launch here would work\n"), "{}", r.text);
    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["checks"][0]["name"], "user_namespaces");
    assert_eq!(v["checks"][0]["status"], "ok");
    assert_eq!(v["checks"][0]["fix"], serde_json::Value::Null);
}

/// (what is changed, check, status, words of its detail, words of its fix)
type Row = (&'static str, fn(&mut Facts), &'static str, Status, &'static str, &'static str);

#[test]
fn each_check_fails_with_its_message_and_fix() {
    let rows: &[Row] = &[
        (
            "user namespaces refused by AppArmor",
            |f| {
                let k = kernel(f);
                k.user_namespace = Err("unshare(user, mount): EPERM".into());
                k.userns_settings =
                    vec![("kernel.apparmor_restrict_unprivileged_userns".into(), "1".into())];
                k.overlay = None;
                k.capture = None;
            },
            "user_namespaces",
            Status::Fail,
            "no launch can start: unshare(user, mount): EPERM",
            "apparmor_restrict_unprivileged_userns=0",
        ),
        (
            "user namespaces off (Debian)",
            |f| {
                let k = kernel(f);
                k.user_namespace = Err("EPERM".into());
                k.userns_settings = vec![("kernel.unprivileged_userns_clone".into(), "0".into())];
            },
            "user_namespaces",
            Status::Fail,
            "kernel.unprivileged_userns_clone=0",
            "unprivileged_userns_clone=1",
        ),
        (
            "user namespaces: no namespaces allowed",
            |f| {
                let k = kernel(f);
                k.user_namespace = Err("ENOSPC".into());
                k.userns_settings = vec![("user.max_user_namespaces".into(), "0".into())];
            },
            "user_namespaces",
            Status::Fail,
            "ENOSPC",
            "max_user_namespaces=15000",
        ),
        (
            "user namespaces refused otherwise",
            |f| {
                let k = kernel(f);
                k.user_namespace = Err("EPERM".into());
                k.userns_settings.clear();
            },
            "user_namespaces",
            Status::Fail,
            "no launch can start: EPERM",
            "CONFIG_USER_NS",
        ),
        (
            "no Landlock",
            |f| kernel(f).landlock_abi = 0,
            "landlock",
            Status::Warn,
            "Landlock is not available",
            "lsm=",
        ),
        (
            "an old Landlock",
            |f| {
                let k = kernel(f);
                k.landlock_abi = 3;
                k.landlock_gaps = vec!["Landlock ABI < 5: device ioctls are not restricted".into()];
            },
            "landlock",
            Status::Warn,
            "ABI 3: not enforced: Landlock ABI < 5",
            "newer kernel",
        ),
        (
            "no seccomp",
            |f| kernel(f).seccomp = false,
            "seccomp",
            Status::Fail,
            "cannot be installed",
            "CONFIG_SECCOMP_FILTER",
        ),
        (
            "overlayfs refused",
            |f| kernel(f).overlay = Some(Err("mount -t overlay: EINVAL".into())),
            "overlayfs",
            Status::Warn,
            "refuses an overlay in a user namespace (mount -t overlay: EINVAL)",
            "5.11",
        ),
        (
            "capture refused",
            |f| kernel(f).capture = Some(Err("nf_tables refused the capture chain".into())),
            "capture",
            Status::Warn,
            "without transparent capture",
            "CONFIG_NFT_REDIR",
        ),
        (
            "overlay not tried",
            |f| kernel(f).overlay = None,
            "overlayfs",
            Status::Warn,
            "not tried",
            "user_namespaces",
        ),
        (
            "no tun module",
            |f| kernel(f).network = Ok(Some("no /dev/net/tun".into())),
            "network",
            Status::Warn,
            "with a veth pair instead of a tun device (no /dev/net/tun)",
            "modprobe tun",
        ),
        (
            "a tun device only root may open",
            |f| kernel(f).network = Ok(Some("/dev/net/tun is mode 0600, owner 0".into())),
            "network",
            Status::Warn,
            "(/dev/net/tun is mode 0600, owner 0)",
            "chmod 0666 /dev/net/tun",
        ),
        (
            "no nf_tables",
            |f| kernel(f).network = Err("firewall: Operation not supported".into()),
            "network",
            Status::Fail,
            "`net` and `build` launches cannot start (firewall: Operation not supported)",
            "nf_tables",
        ),
        (
            "a foreign sandbox-net first on PATH",
            |f| {
                f.wrappers[1].found = Some("/usr/local/bin/sandbox-net".into());
                f.wrappers[1].trust = Some(Wrapper::Foreign);
            },
            "sandbox_links",
            Status::Fail,
            "sandbox-net is /usr/local/bin/sandbox-net, not this sandgate",
            "earlier on PATH",
        ),
        (
            "links missing",
            |f| {
                f.wrappers[0].found = None;
                f.wrappers[0].trust = None;
            },
            "sandbox_links",
            Status::Warn,
            "not on PATH: sandbox-run",
            "sandgate install",
        ),
        (
            "links the hook does not trust",
            |f| {
                f.wrappers[2].trust =
                    Some(Wrapper::Exposed("/w may be written by other users".into()))
            },
            "sandbox_links",
            Status::Warn,
            "does not trust these (it asks instead): sandbox-build: /w may be written",
            "--dir ~/.local/bin",
        ),
        (
            "another sandgate's daemon",
            |f| {
                f.daemon = DaemonFact::Running {
                    pid: 7,
                    version: "0.0.9".into(),
                    same_protocol: false,
                    events_failed: 0,
                    last_error: None,
                }
            },
            "daemon",
            Status::Warn,
            "pid 7 is another sandgate (version 0.0.9",
            "sandgate stop",
        ),
        (
            "a daemon losing events",
            |f| {
                f.daemon = DaemonFact::Running {
                    pid: 7,
                    version: "0.1.0".into(),
                    same_protocol: true,
                    events_failed: 3,
                    last_error: Some("disk full".into()),
                }
            },
            "daemon",
            Status::Warn,
            "could not store 3 events (disk full)",
            "free space",
        ),
        (
            "an unusable control socket",
            |f| f.daemon = DaemonFact::Unreachable("permission denied".into()),
            "daemon",
            Status::Fail,
            "cannot be used: permission denied",
            "mode 0700",
        ),
        (
            "a broken configuration file",
            |f| {
                f.config.push(ConfigFact {
                    path: "/c/projects/ab.toml".into(),
                    role: "per-directory, another project".into(),
                    error: Some(
                        "/c/projects/ab.toml:2:10: unknown field `alow`\n 2 | alow = []\n   |  ^\n\
                         help: remove the key or fix its spelling"
                            .into(),
                    ),
                    warnings: Vec::new(),
                })
            },
            "config",
            Status::Fail,
            "/c/projects/ab.toml (per-directory, another project) does not load: \
             /c/projects/ab.toml:2:10: unknown field `alow`",
            "remove the key or fix its spelling",
        ),
        (
            "a configured path that does not exist",
            |f| f.config[0].warnings.push("skipping writable path /gone".into()),
            "config",
            Status::Warn,
            "warning: skipping writable path /gone",
            "remove-path",
        ),
        (
            "cache layers cannot be written",
            |f| f.caches.writable = Err("/home/u/.local/share: EACCES".into()),
            "caches",
            Status::Warn,
            "package caches stay read-only",
            "a directory you own",
        ),
        (
            "telegram half configured",
            |f| f.telegram = TelegramFact::Misconfigured("chats but no token".into()),
            "telegram",
            Status::Warn,
            "chats but no token",
            "token_file",
        ),
        (
            "telegram unreachable",
            |f| f.telegram = TelegramFact::Unreachable("connection refused".into()),
            "telegram",
            Status::Warn,
            "does not answer: connection refused",
            "api.telegram.org",
        ),
        (
            "telegram token in the configuration",
            |f| {
                f.telegram = TelegramFact::Reachable {
                    bot: "@b".into(),
                    warnings: vec!["config.toml: the Telegram bot token is in the file".into()],
                }
            },
            "telegram",
            Status::Warn,
            "@b answers; config.toml: the Telegram bot token",
            "0600 token_file",
        ),
        (
            "the hook runs a program that is gone",
            |f| f.claude.programs[0] = None,
            "claude_hook",
            Status::Warn,
            "runs /usr/bin/sandgate, which does not exist",
            "install --claude",
        ),
        (
            "the hook runs another sandgate",
            |f| f.claude.programs[0] = Some("/opt/old/sandgate".into()),
            "claude_hook",
            Status::Warn,
            "another sandgate than /usr/bin/sandgate",
            "install --claude",
        ),
        (
            "a settings file that does not parse",
            |f| {
                f.claude
                    .unreadable
                    .push(("/p/.claude/settings.json".into(), "not valid JSON".into()))
            },
            "claude_hook",
            Status::Warn,
            "/p/.claude/settings.json cannot be read: not valid JSON",
            "fix the file",
        ),
        (
            "no completions for the shell",
            |f| f.completions.file.as_mut().unwrap().1 = FileState::Missing,
            "completions",
            Status::Warn,
            "no bash completions",
            "sandgate install",
        ),
        (
            "completions of another sandgate",
            |f| f.completions.file.as_mut().unwrap().1 = FileState::Stale,
            "completions",
            Status::Warn,
            "another sandgate's",
            "rewrites",
        ),
        (
            "bash without bash-completion",
            |f| f.completions.bash_completion = false,
            "completions",
            Status::Warn,
            "bash-completion is not installed",
            "source /home/u/.local/share/bash-completion/completions/sandgate",
        ),
    ];
    for (what, change, name, status, detail, fix) in rows {
        let mut f = healthy();
        change(&mut f);
        let c = check(&f, name);
        assert_eq!(c.status, *status, "{what}: {c:?}");
        assert!(c.detail.contains(detail), "{what}: {}", c.detail);
        assert!(c.fix.as_deref().unwrap_or_default().contains(fix), "{what}: {:?}", c.fix);
        // Exit 1 exactly when a launch would fail.
        let r = report(&checks(&f));
        assert_eq!(r.code, u8::from(*status == Status::Fail), "{what}");
        assert!(r.text.contains(&format!("fix: {}", c.fix.unwrap())), "{what}: {}", r.text);
    }
}

#[test]
fn optional_parts_are_fine_when_absent() {
    let mut f = healthy();
    f.daemon = DaemonFact::NotRunning;
    f.claude = ClaudeFacts::default();
    f.completions =
        CompletionFacts { shell: Some("tcsh".into()), file: None, bash_completion: false };
    f.caches.mode = sandgate_config::CacheMode::Off;
    f.config.clear();
    for (name, detail) in [
        ("daemon", "not running; the first `net` or `build` launch starts it"),
        ("claude_hook", "not registered (optional"),
        ("completions", "none for tcsh"),
        ("caches", "off ("),
        ("config", "no configuration files"),
        ("telegram", "not configured"),
    ] {
        let c = check(&f, name);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains(detail), "{c:?}");
    }
    // Inside a sandbox nothing of the kernel is probed, and that is no failure.
    kernel(&mut f).nested = true;
    kernel(&mut f).user_namespace = Err("EPERM".into());
    let all = checks(&f);
    assert_eq!(all[0].status, Status::Ok, "{:?}", all[0]);
    assert!(all[0].detail.contains("inside a sandgate sandbox"));
    assert!(all.iter().all(|c| c.name != "network"));
    // Nor is what a sandbox hides from itself (the daemon's socket, the data directory, the
    // agent's settings).
    f.daemon = DaemonFact::Unreachable("EPERM".into());
    f.caches.writable = Err("EACCES".into());
    f.claude.unreadable.push(("/h/.claude/settings.json".into(), "EACCES".into()));
    for name in ["daemon", "caches", "claude_hook"] {
        let c = check(&f, name);
        assert_eq!(
            (c.status, c.detail.as_str()),
            (Status::Ok, "not checked inside a sandbox (hidden there on purpose)")
        );
    }
}
