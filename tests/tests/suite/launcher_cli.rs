//! The launcher's command line: the `sandbox-*` names `install` makes, `explain`, `--require-full`
//! and `--net`, as root and as an unprivileged user.

use std::path::Path;

use crate::support::sandbox::{
    self, HOST4, Scratch, TestHost, WRITE_REFUSED, Who, both, refused, text,
};
use sandgate_tests::sandgate_bin;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The running kernel's Landlock ABI, asked directly (`landlock_create_ruleset` with
/// `LANDLOCK_CREATE_RULESET_VERSION`; 0 when Landlock is missing).
fn landlock_abi() -> u64 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes; l = ctypes.CDLL(None); print(max(l.syscall(444, None, 0, 1), 0))",
        ])
        .output()
        .unwrap();
    text(&out.stdout).trim().parse().unwrap()
}

fn install_links_pick_their_tier(who: &Who) {
    let s = Scratch::new(who);
    let dir = s.root.join("bin");
    let install = |dir: &Path| {
        s.program(&sandgate_bin()).args(["install", "--dir", p(dir)]).output().unwrap()
    };
    let out = install(&dir);
    assert!(out.status.success(), "install: {}", text(&out.stderr));
    // The small launcher next to `sandgate` (both built, both installed): the links use it.
    let bin = sandgate_tests::launcher_bin().canonicalize().unwrap();
    for name in ["sandbox-run", "sandbox-net", "sandbox-build"] {
        let link = dir.join(name);
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink(), "{name}");
        assert_eq!(std::fs::read_link(&link).unwrap().canonicalize().unwrap(), bin, "{name}");
        assert!(text(&out.stdout).contains(&format!("{} -> ", link.display())), "{name}");
    }

    // Each name is its tier: only build writes the current directory, only net and build have
    // the proxy, and the tier says its name.
    let probe = p(&s.probe);
    for (name, tier, writes, proxy) in [
        ("sandbox-run", "run", false, ""),
        ("sandbox-net", "net", false, "http://127.0.0.1:3128"),
        ("sandbox-build", "build", true, "http://127.0.0.1:3128"),
    ] {
        let target = s.proj.join(format!("by-{name}"));
        let script = format!(
            "echo \"$SANDGATE_TIER|$HTTP_PROXY|$https_proxy\"; python3 {probe} write {}",
            p(&target)
        );
        let out = s.program(&dir.join(name)).args(["sh", "-c", &script]).output().unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{name}: {stdout} {}", text(&out.stderr));
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], format!("{tier}|{proxy}|{proxy}"), "{name}");
        if writes {
            assert_eq!(lines[1], "ok", "{name} writes its cwd");
            assert!(target.exists());
        } else {
            refused(lines[1], WRITE_REFUSED, &format!("{name}: write cwd"));
            assert!(!target.exists());
        }
    }
    // Options before the command work as with `sandgate run`.
    let allowed = s.outside.join("victim.txt");
    let out = s
        .program(&dir.join("sandbox-run"))
        .arg(format!("--allow-write={}", allowed.display()))
        .args(["python3", probe, "write", p(&allowed)])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "ok", "{}", text(&out.stderr));

    // Again: the links are replaced, still pointing at the launcher.
    let again = install(&dir);
    assert!(again.status.success(), "second install: {}", text(&again.stderr));
    assert_eq!(std::fs::read_link(dir.join("sandbox-net")).unwrap().canonicalize().unwrap(), bin);
    // A file of the same name that is not a link is left alone, and no link is made.
    let other = s.root.join("bin2");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("sandbox-net"), "mine\n").unwrap();
    let _ = std::process::Command::new("chown")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(&other)
        .status();
    let refusal = install(&other);
    assert_eq!(refusal.status.code(), Some(2));
    assert!(
        text(&refusal.stderr).contains("exists and is not a link"),
        "{}",
        text(&refusal.stderr)
    );
    assert_eq!(std::fs::read_to_string(other.join("sandbox-net")).unwrap(), "mine\n");
    assert!(other.join("sandbox-run").symlink_metadata().is_err(), "partial install");
}

fn explain_tells_the_tier_and_the_kernel(who: &Who) {
    let s = Scratch::new(who);
    let abi = landlock_abi();
    let json = |tier: &str| -> serde_json::Value {
        let out = s
            .program(&sandgate_bin())
            .args(["explain", "--tier", tier, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect()
    };
    let data = s.home.join(".local/share/sandgate");
    for tier in ["run", "net", "build"] {
        let v = json(tier);
        assert_eq!(v["tier"], tier);
        let kernel = &v["kernel"];
        assert_eq!(kernel["landlock_abi"].as_u64(), Some(abi), "{v}");
        // What is not enforced: nothing of Landlock's from ABI 6 on, and the unix socket wall
        // stands on seccomp below ABI 9.
        let gaps = strings(&kernel["landlock_not_enforced"]);
        assert_eq!(gaps.is_empty(), abi >= 6, "{gaps:?}");
        let unix = kernel["unix_sockets"].as_str().unwrap();
        assert_eq!(unix.contains("seccomp"), abi < 9, "{unix}");
        assert_eq!(kernel["seccomp"], true);
        let hidden = strings(&v["hidden"]);
        for h in [s.home.join(".ssh"), data.clone(), s.outside.join("secret.txt")] {
            assert!(hidden.contains(&h.display().to_string()), "{tier}: {h:?} not in {hidden:?}");
        }
        // The configuration directory is replaced by a read-only copy without secrets.
        let replaced = strings(&v["replaced"]);
        let config = s.home.join(".config/sandgate").display().to_string();
        assert!(replaced.contains(&config), "{tier}: {replaced:?}");
        let writable = strings(&v["writable"]);
        let cwd = s.proj.display().to_string();
        assert_eq!(writable.contains(&cwd), tier == "build", "{tier}: {writable:?}");
        let network = v["network"].as_str().unwrap();
        let want = if tier == "run" { "none:" } else { "proxy: only http://127.0.0.1:3128" };
        assert!(network.starts_with(want), "{tier}: {network}");
    }
    let out = s.program(&sandgate_bin()).args(["explain", "--tier", "build"]).output().unwrap();
    let t = text(&out.stdout);
    assert!(out.status.success() && t.starts_with("tier build\n"), "{t}");
    assert!(t.contains(&format!("              {}\n", s.proj.display())), "cwd writable: {t}");
    assert!(t.contains(&format!("landlock_abi: {abi}")), "{t}");
}

/// The warning is printed and `--require-full` refuses exactly when a wall is missing: on this
/// kernel Landlock's own gaps (none from ABI 6), plus the unix socket paths below ABI 9 once the
/// configuration allows a socket (seccomp can then no longer refuse every unix socket).
fn require_full_refuses_what_the_kernel_cannot_enforce(who: &Who) {
    let s = Scratch::new(who);
    let abi = landlock_abi();
    // An allowed socket counts only when it exists (the launcher resolves it).
    let _agent = std::os::unix::net::UnixListener::bind(s.root.join("agent.sock")).unwrap();
    let cases = [(false, abi < 6), (true, abi < 9 || abi < 6)];
    for (sockets_allowed, has_gaps) in cases {
        let config = if sockets_allowed {
            format!("[filesystem]\nunix_sockets = [\"{}\"]\n", s.root.join("agent.sock").display())
        } else {
            "# config\n".to_owned()
        };
        std::fs::write(s.home.join(".config/sandgate/config.toml"), config).unwrap();
        let case = format!("ABI {abi}, sockets allowed {sockets_allowed}");

        let warned = s.run("run", &[], &["echo", "ran"]);
        assert_eq!(text(&warned.stdout), "ran\n", "{case}: {}", text(&warned.stderr));
        let stderr = text(&warned.stderr);
        assert_eq!(
            stderr.contains("sandgate: warning: not enforced: "),
            has_gaps,
            "{case}: {stderr}"
        );
        if sockets_allowed && abi < 9 {
            assert!(stderr.contains("not enforced: pathname unix socket connects"), "{stderr}");
        }

        // explain names the same missing walls.
        let out = s.program(&sandgate_bin()).args(["explain", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let missing = v["kernel"]["not_enforced"].as_array().unwrap();
        assert_eq!(!missing.is_empty(), has_gaps, "{case}: {v}");
        if sockets_allowed && abi < 9 {
            let text = missing.iter().map(|m| m.as_str().unwrap()).collect::<Vec<_>>().join(";");
            assert!(text.contains("pathname unix socket connects"), "{case}: {text}");
        }

        let strict = s.run("run", &["--require-full"], &["echo", "ran"]);
        let stderr = text(&strict.stderr);
        if has_gaps {
            assert_eq!(strict.status.code(), Some(2), "{case}: {stderr}");
            assert!(strict.stdout.is_empty(), "{case}: the command ran");
            assert!(stderr.contains("full enforcement was required"), "{case}: {stderr}");
            if sockets_allowed && abi < 9 {
                assert!(stderr.contains("pathname unix socket connects"), "{case}: {stderr}");
            }
        } else {
            assert!(strict.status.success(), "{case}: {stderr}");
            assert_eq!(text(&strict.stdout), "ran\n", "{case}");
            assert!(!stderr.contains("not enforced"), "{case}: {stderr}");
        }
    }
}

const PROXY_VARS: &str = "[$HTTP_PROXY][$http_proxy][$HTTPS_PROXY][$ALL_PROXY][$GIT_CONFIG_COUNT]";

fn net_none_on_build_has_no_way_out(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    let probe = p(&s.probe);
    let script = format!(
        "echo \"{PROXY_VARS}\"; python3 {probe} tcp {HOST4} 8080; python3 {probe} write new.txt"
    );
    let (stdout, _) = s.sh("build", &["--net", "none"], &script);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "[][][][][]", "no proxy variables with --net none");
    refused(lines[1], &["ENETUNREACH", "ECONNREFUSED", "EHOSTUNREACH"], "direct tcp");
    assert_eq!(lines[2], "ok", "build still writes its cwd");
    // No proxy listener inside either.
    let listener = s.probe("build", &["--net", "none"], &["tcp", "127.0.0.1", "3128"]);
    refused(&listener, &["ECONNREFUSED"], "proxy port with --net none");
}

fn run_with_net_proxy_reaches_allowed_origins(who: &Who) {
    let s = Scratch::new(who);
    let port = sandgate_tests::origin("hello through run\n");
    let url = format!("http://127.0.0.1:{port}/x");
    let allow = format!("--allow=127.0.0.1:{port}");
    let out = s
        .command(
            "run",
            &["--net", "proxy", &allow],
            &["sh", "-c", &format!("echo \"[$HTTP_PROXY]\"; curl -sS --max-time 5 --noproxy '' -x \"$HTTP_PROXY\" {url}")],
        )
        .env("SANDGATE_NO_DAEMON", "1")
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "[http://127.0.0.1:3128]\nhello through run\n",
        "stderr: {}",
        text(&out.stderr)
    );
    // Still the run tier's walls.
    let cwd = s.probe("run", &["--net", "proxy"], &["write", "new.txt"]);
    refused(&cwd, WRITE_REFUSED, "run --net proxy: write cwd");
}

/// Inside `net`, every tool's proxy variable names the sandbox's proxy, git's `http.proxy` comes
/// after the caller's own git settings and the JVM's flags after the caller's options.
fn tools_find_the_proxy_and_keep_their_settings(who: &Who) {
    let s = Scratch::new(who);
    let script = "for v in HTTP_PROXY https_proxy ALL_PROXY NO_PROXY no_proxy npm_config_proxy \
                  PIP_PROXY CARGO_HTTP_PROXY GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 \
                  GIT_CONFIG_KEY_1 GIT_CONFIG_VALUE_1 JAVA_TOOL_OPTIONS; do \
                  printenv $v || echo \"$v unset\"; done; \
                  if command -v git >/dev/null; then git config --get http.proxy; \
                  git config --get user.name; else echo no-git; fi";
    let out = s
        .command("net", &[], &["sh", "-c", script])
        .env("SANDGATE_NO_DAEMON", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "user.name")
        .env("GIT_CONFIG_VALUE_0", "sandgate tester")
        .env("JAVA_TOOL_OPTIONS", "-Xmx64m")
        .env("HTTPS_PROXY", "http://outside-proxy:8080")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let url = "http://127.0.0.1:3128";
    let no_proxy = "localhost,127.0.0.1,::1";
    let want = [
        url,
        url,
        url,
        no_proxy,
        no_proxy,
        url,
        url,
        url,
        "2",
        "user.name",
        "sandgate tester",
        "http.proxy",
        url,
    ];
    assert_eq!(lines[..want.len()], want, "{stdout}");
    let java = lines[want.len()];
    assert!(
        java.starts_with("-Xmx64m -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 "),
        "{java}"
    );
    assert!(java.contains("-Dhttps.proxyPort=3128"), "{java}");
    let git_present = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .is_ok_and(|o| o.status.success());
    // In CI git must be there: without it, the http.proxy check above would not run at all.
    assert!(git_present || !sandgate_tests::in_ci(), "git missing in CI");
    if git_present {
        assert_eq!(lines[want.len() + 1..], [url, "sandgate tester"], "{stdout}");
    } else {
        assert_eq!(lines[want.len() + 1..], ["no-git"], "{stdout}");
    }
}

/// Where the kernel refuses unprivileged user namespaces, an unprivileged launch stops with exit
/// 2 and says which settings allow them; nothing runs.
fn a_refused_user_namespace_names_the_settings(who: &Who) {
    if !who.rootless {
        return; // root gets its user namespace whatever those settings say
    }
    let s = Scratch::new(who);
    let wrapper = s.root.join("no_userns.py");
    std::fs::write(&wrapper, format!("{}{}", sandbox::SECCOMP_PY, sandbox::NO_USERNS)).unwrap();
    let marker = s.proj.join("ran");
    let out = s
        .program(Path::new("python3"))
        .args([p(&wrapper), p(&sandgate_bin()), "run", "--", "touch", p(&marker)])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for want in [
        "cannot create a user namespace",
        "kernel.unprivileged_userns_clone",
        "user.max_user_namespaces",
        "kernel.apparmor_restrict_unprivileged_userns",
    ] {
        assert!(stderr.contains(want), "{want:?} missing from: {stderr}");
    }
    assert_eq!(stderr.matches("Operation not permitted").count(), 1, "said once: {stderr}");
    assert!(!marker.exists());
}

/// Issue 32, part 3: the note follows a failure that looks like one for want of a network
/// (here a connection refused on the sandbox's own loopback), not any failure.
fn a_failure_without_network_says_the_tier_has_none(who: &Who) {
    let s = Scratch::new(who);
    let note = "tier has no network";
    let connect = "import socket; socket.create_connection(('127.0.0.1', 9), timeout=5)";
    let out = s.run("run", &[], &["python3", "-c", connect]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Connection refused") && stderr.contains(note), "{stderr}");
    let resolve = "echo 'curl: (6) Could not resolve host: pypi.org' >&2; exit 6";
    let out = s.run("run", &[], &["sh", "-c", resolve]);
    assert_eq!(out.status.code(), Some(6));
    assert!(text(&out.stderr).contains(note), "{}", text(&out.stderr));
    // Not after any failure (`sandbox-run false`), not on success, not where the network is
    // there, not when asked to be quiet.
    let quiet = [
        s.run("run", &[], &["false"]),
        s.run("run", &[], &["sh", "-c", "echo 'error: tests failed' >&2; exit 6"]),
        s.run("run", &[], &["true"]),
        s.run("net", &[], &["sh", "-c", resolve]),
        s.run("run", &["--quiet"], &["sh", "-c", resolve]),
    ];
    for out in quiet {
        assert!(!text(&out.stderr).contains(note), "{}", text(&out.stderr));
    }
}

/// The old `[filesystem] presets` (writable binds of the host's live caches, a way to plant code
/// the host's next build ran) are gone: a file that still names them stops the launch with what
/// to do, and the host's caches stay as they were.
fn filesystem_presets_are_refused_with_the_way_forward(who: &Who) {
    let s = Scratch::new(who);
    std::fs::write(
        s.home.join(".config/sandgate/config.toml"),
        "[filesystem]\npresets = [\"cargo\", \"pip\"]\n",
    )
    .unwrap();
    let out = s.run("build", &["--net", "none"], &["sh", "-c", "echo ran"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!text(&out.stdout).contains("ran"));
    assert!(stderr.contains("config.toml:2:") && stderr.contains("copy-on-write"), "{stderr}");
    assert!(stderr.contains("remove the presets line"), "{stderr}");
}

fn launch_timings_name_every_step_when_asked(who: &Who) {
    let s = Scratch::new(who);
    let out = s.command("net", &[], &["true"]).env("SANDGATE_DEBUG", "launch").output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for step in ["policy resolved", "clone", "mounts", "veth and firewall (netlink)", "landlock"] {
        assert!(
            stderr.lines().any(|l| l.starts_with("sandgate: launch ") && l.ends_with(step)),
            "{step} missing:\n{stderr}"
        );
    }
    let quiet = s.run("run", &[], &["true"]);
    assert!(!text(&quiet.stderr).contains("sandgate: launch"), "off by default");
}

/// Nothing of the sandbox outlives its launcher: a background process, and a loop that keeps
/// forking while the sandbox ends, are gone when the launcher returns, in every tier; the exit
/// status is the command's. (They hold none of the launcher's output: the caller would wait for
/// them through it anyway.)
fn nothing_of_the_sandbox_outlives_its_launcher(who: &Who) {
    let s = Scratch::new(who);
    // Durations no other process on the machine sleeps for: the markers.
    let pid = std::process::id() % 1000 + if who.rootless { 1000 } else { 0 };
    let (quiet, forking) = (format!("41{pid}.25"), format!("42{pid}.25"));
    let script = format!(
        "exec >/dev/null 2>&1; sleep {quiet} & (while :; do sleep {forking} & done) & \
         sleep 0.05; exit 5"
    );
    for tier in ["run", "net", "build"] {
        let out = s.command(tier, &[], &["sh", "-c", &script]).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{tier}: {}", text(&out.stderr));
        let leftover: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            // The sleeps themselves (a launcher's command line names them too).
            .filter(|c| c.starts_with("sleep ") && (c.contains(&quiet) || c.contains(&forking)))
            .collect();
        assert!(leftover.is_empty(), "{tier}: outlived the launch: {leftover:?}");
    }
}

/// Issue 31: `build` started in the home directory (or `/`) would make it writable, and the
/// command could plant `~/bin/ls` for the next login shell. The launch is refused before anything
/// runs, through `sandgate build` and through the `sandbox-build` link (the small launcher),
/// saying why and naming the way out; `--allow-write HOME` names it and is accepted (with
/// `~/bin` still read-only); `run` in the home is unaffected.
fn build_refuses_the_home_or_root_as_its_working_directory(who: &Who) {
    let s = Scratch::new(who);
    let link = s.root.join("links/sandbox-build");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(sandgate_tests::launcher_bin(), &link).unwrap();
    let planted = s.home.join("bin/ls");
    let notes = s.home.join("notes.txt");
    let script = format!(
        "echo ran; echo n > {n} && echo notes-written; mkdir -p {b} && echo x > {p} && echo planted",
        n = p(&notes),
        b = p(&s.home.join("bin")),
        p = p(&planted),
    );
    let home = p(&s.home);
    let allow_home = format!("--allow-write={home}");
    let in_dir = |dir: &Path, via_link: bool, args: &[&str]| {
        let mut c = if via_link {
            let mut c = s.program(&link);
            c.args(args).args(["sh", "-c", &script]);
            c
        } else {
            s.command("build", args, &["sh", "-c", &script])
        };
        c.current_dir(dir).env("SANDGATE_NO_DAEMON", "1");
        let out = c.output().unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    for via_link in [false, true] {
        let how = if via_link { "sandbox-build" } else { "sandgate build" };
        let (code, stdout, stderr) = in_dir(&s.home, via_link, &[]);
        assert_eq!(code, Some(2), "{how} in HOME: {stdout} {stderr}");
        assert_eq!(stdout, "", "{how} in HOME: the command ran");
        for want in [
            "refusing to make the working directory writable".to_owned(),
            format!("{home} is your home directory"),
            format!("--allow-write {home}"),
        ] {
            assert!(stderr.contains(&want), "{how} in HOME: {want:?} missing from {stderr}");
        }
        let (code, stdout, stderr) = in_dir(Path::new("/"), via_link, &[]);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{how} in /: {stderr}");
        assert!(stderr.contains("/ is the root of the filesystem"), "{how} in /: {stderr}");
        assert!(stderr.contains("--allow-write /"), "{how} in /: {stderr}");
    }
    assert!(!notes.exists() && !planted.exists(), "a refused launch wrote the home");
    // Named explicitly: the home is writable, its ~/bin is not (autorun, like ~/.local/bin).
    let (code, stdout, stderr) = in_dir(&s.home, false, &[&allow_home]);
    assert_eq!(code, Some(1), "{stdout} {stderr}");
    assert_eq!(stdout, "ran\nnotes-written\n", "{stderr}");
    assert!(notes.exists() && !planted.exists(), "~/bin/ls planted with --allow-write HOME");
    // `run` writes nothing: it starts anywhere.
    let out = s.command("run", &[], &["echo", "ran"]).current_dir(&s.home).output().unwrap();
    assert_eq!(text(&out.stdout), "ran\n", "run in HOME: {}", text(&out.stderr));
}

both!(
    build_refuses_the_home_or_root_as_its_working_directory,
    nothing_of_the_sandbox_outlives_its_launcher,
    launch_timings_name_every_step_when_asked,
    filesystem_presets_are_refused_with_the_way_forward,
    a_failure_without_network_says_the_tier_has_none,
    a_refused_user_namespace_names_the_settings,
    tools_find_the_proxy_and_keep_their_settings,
    install_links_pick_their_tier,
    explain_tells_the_tier_and_the_kernel,
    require_full_refuses_what_the_kernel_cannot_enforce,
    net_none_on_build_has_no_way_out,
    run_with_net_proxy_reaches_allowed_origins,
);
