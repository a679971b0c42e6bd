//! `sandgate firewall`: dry runs (no root needed), the not-root error, and (root) apply / show /
//! remove / gc against the real nftables, leaving no trace.

use std::process::{Command, Output, Stdio};

use sandgate_tests::{Env, is_root, skip_unless};

fn have(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

fn sandgate(env: &Env, args: &[&str]) -> Output {
    env.cmd().args(args).stdin(Stdio::null()).output().expect("run sandgate")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ruleset() -> String {
    text(&Command::new("nft").args(["list", "ruleset"]).output().expect("nft").stdout)
}

/// A system user for the test, deleted on drop.
struct User {
    name: String,
    uid: u32,
}

impl User {
    fn new(tag: &str) -> Self {
        let name = format!("sgcli{tag}{}", std::process::id() % 100_000);
        let ok = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", &name])
            .status()
            .expect("useradd")
            .success();
        assert!(ok, "useradd {name}");
        let out = Command::new("id").args(["-u", &name]).output().expect("id");
        let uid = text(&out.stdout).trim().parse().expect("uid");
        User { name, uid }
    }

    fn delete(&self) {
        let _ = Command::new("userdel").arg(&self.name).stderr(Stdio::null()).status();
    }
}

impl Drop for User {
    fn drop(&mut self) {
        self.delete();
    }
}

#[test]
fn dry_run_prints_the_exact_rules_and_changes_nothing() {
    let env = Env::new();
    let out = sandgate(
        &env,
        &[
            "firewall",
            "apply",
            "--uid",
            "4242",
            "--proxy",
            "127.0.0.1:3128",
            "--proxy",
            "[::1]:8080",
            "--nflog-group",
            "9",
            "--dry-run",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rules = text(&out.stdout);
    for line in [
        "add table inet sandgate_u4242\ndelete table inet sandgate_u4242\ntable inet sandgate_u4242 {",
        "\t\telements = { 127.0.0.1 . 3128 }",
        "\t\telements = { ::1 . 8080 }",
        "\t\telements = { 4242 }",
        "\t\tmeta skuid @uids jump guest",
        "\t\tct direction original ip daddr . tcp dport @allow4 accept",
        "\t\tlog prefix \"sandgate.u4242\" group 9",
        "\t\tmeta l4proto tcp reject with tcp reset",
        "\t\treject with icmpx admin-prohibited",
    ] {
        assert!(rules.contains(line), "missing {line:?} in\n{rules}");
    }
    let out =
        sandgate(&env, &["firewall", "remove", "--uid", "4242", "--owner-pid", "7", "--dry-run"]);
    assert_eq!(
        text(&out.stdout),
        "add table inet sandgate_u4242_p7\ndelete table inet sandgate_u4242_p7\n"
    );
    if is_root() {
        assert!(!ruleset().contains("sandgate_u4242"), "a dry run changed the ruleset");
    }
}

/// The host-wide drops of unowned SYN-ACKs and IGMP/MLD reports are on by default; each named
/// opt-out removes exactly its rule.
#[test]
fn host_wide_drops_are_default_and_opt_out_by_name() {
    let env = Env::new();
    let syn = "\t\ttcp flags & (syn | ack) == syn | ack drop\n";
    let igmp = "\t\tip protocol igmp drop\n";
    let mld =
        "\t\ticmpv6 type { mld-listener-report, mld-listener-done, mld2-listener-report } drop\n";
    for (flags, want) in [
        (&[][..], [true, true, true]),
        (&["--allow-syncookies"][..], [false, true, true]),
        (&["--allow-multicast-reports"][..], [true, false, false]),
        (&["--allow-syncookies", "--allow-multicast-reports"][..], [false, false, false]),
    ] {
        let mut args = vec!["firewall", "apply", "--uid", "4242", "--dry-run"];
        args.extend_from_slice(flags);
        let out = sandgate(&env, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let rules = text(&out.stdout);
        let got = [syn, igmp, mld].map(|r| rules.contains(r));
        assert_eq!(got, want, "{flags:?}:\n{rules}");
        let skip = "\t\tmeta skgid @gids jump guest\n\t\tmeta skuid >= 0 accept\n";
        assert_eq!(rules.contains(skip), want.contains(&true), "{flags:?}:\n{rules}");
    }
}

#[test]
fn not_root_is_a_clear_error() {
    let env = Env::new();
    let mut cmd = if is_root() {
        if skip_unless(have("setpriv"), "setpriv (util-linux) to drop root") {
            return;
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(sandgate_tests::sandgate_bin());
        c
    } else {
        env.cmd()
    };
    let out =
        cmd.args(["firewall", "apply", "--uid", "4242"]).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("must run as root") && err.contains("--dry-run"), "{err}");
}

#[test]
fn apply_show_remove_gc_as_root() {
    if skip_unless(is_root() && have("nft") && have("useradd"), "root with nft and useradd") {
        return;
    }
    let env = Env::new();
    let user = User::new("a");
    let gone = User::new("g");
    let uid = user.uid.to_string();
    let table = format!("sandgate_u{uid}");
    for _ in 0..2 {
        let out =
            sandgate(&env, &["firewall", "apply", "--uid", &uid, "--proxy", "127.0.0.1:3999"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(
        ruleset().matches(&format!("table inet {table} ")).count(),
        1,
        "applied twice = once"
    );

    let out = sandgate(&env, &["firewall", "show", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entry = shown
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["name"] == table.as_str())
        .unwrap_or_else(|| panic!("{table} not shown in {shown}"));
    assert_eq!(entry["scope"]["uid"], user.uid);
    assert!(entry["rules"].as_str().unwrap().contains("127.0.0.1 . 3999"));
    let out = sandgate(&env, &["firewall", "show"]);
    assert!(text(&out.stdout).contains(&format!("# {table} (uid {uid})")));

    let out = sandgate(&env, &["firewall", "remove", "--uid", &uid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ruleset().contains(&table), "remove left a trace:\n{}", ruleset());

    // gc: rules of a user that no longer exists go away.
    let gone_uid = gone.uid.to_string();
    let out = sandgate(&env, &["firewall", "apply", "--uid", &gone_uid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    gone.delete();
    let out = sandgate(&env, &["firewall", "gc", "--dry-run"]);
    assert!(
        text(&out.stdout).contains(&format!("delete table inet sandgate_u{gone_uid}\n")),
        "{}",
        text(&out.stdout)
    );
    assert!(ruleset().contains(&format!("sandgate_u{gone_uid}")), "gc --dry-run removed rules");
    let out = sandgate(&env, &["firewall", "gc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("removed uid {gone_uid}")),
        "{}",
        text(&out.stdout)
    );
    assert!(!ruleset().contains(&format!("sandgate_u{gone_uid} ")), "gc left the table");
}

/// Debian's default PATH of a normal user: no `/usr/sbin`, where `nft` lives (issue 17.1).
const DEBIAN_USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";

#[test]
fn apply_finds_nft_without_sbin_on_path() {
    if skip_unless(is_root() && have("nft") && have("useradd"), "root with nft and useradd") {
        return;
    }
    if skip_unless(
        !std::env::split_paths(DEBIAN_USER_PATH).any(|d| d.join("nft").exists()),
        "nft outside /usr/sbin and /sbin",
    ) {
        return;
    }
    let env = Env::new();
    let user = User::new("p");
    let uid = user.uid.to_string();
    let out = env
        .cmd()
        .env("PATH", DEBIAN_USER_PATH)
        .args(["firewall", "apply", "--uid", &uid, "--owner-pid", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = format!("sandgate_u{uid}_p{}", std::process::id());
    assert!(ruleset().contains(&table));
    let out = env
        .cmd()
        .env("PATH", DEBIAN_USER_PATH)
        .args(["firewall", "remove", "--uid", &uid, "--owner-pid", &std::process::id().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ruleset().contains(&table));
}

/// A normal user, for which `useradd` allocates subordinate ids; deleted on drop.
struct SubUser(User);

impl SubUser {
    fn new() -> Option<Self> {
        let name = format!("sgclis{}", std::process::id() % 100_000);
        let ok = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/bin/sh", &name])
            .status()
            .expect("useradd")
            .success();
        assert!(ok, "useradd {name}");
        let out = Command::new("id").args(["-u", &name]).output().expect("id");
        let user = SubUser(User { uid: text(&out.stdout).trim().parse().expect("uid"), name });
        let listed = std::fs::read_to_string("/etc/subuid")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with(&format!("{}:", user.0.name)));
        (!skip_unless(listed, "useradd allocating subordinate ids")).then_some(user)
    }
}

#[test]
fn check_notices_changed_subordinate_ids() {
    if skip_unless(
        is_root() && have("nft") && have("useradd") && have("usermod"),
        "root with nft, useradd and usermod",
    ) {
        return;
    }
    let Some(user) = SubUser::new() else { return };
    let env = Env::new();
    let uid = user.0.uid.to_string();
    let pid = std::process::id().to_string();
    let run = |args: &[&str]| sandgate(&env, args);
    let subuid = std::fs::read_to_string("/etc/subuid").unwrap();
    let (start, count) = subuid
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(&format!("{}:", user.0.name))?;
            let (s, c) = rest.split_once(':')?;
            Some((s.parse::<u64>().ok()?, c.parse::<u64>().ok()?))
        })
        .expect("subuid entry");
    let range = format!("{start}-{}", start + count - 1);

    let out = run(&["firewall", "apply", "--uid", &uid, "--owner-pid", &pid, "--dry-run"]);
    assert!(text(&out.stdout).contains(&format!("{uid}, {range}")), "{}", text(&out.stdout));
    let out = run(&["firewall", "apply", "--uid", &uid, "--owner-pid", &pid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("subuids {range}")), "{}", text(&out.stderr));
    let table = format!("sandgate_u{uid}_p{pid}");
    let check = || run(&["firewall", "check"]);
    let line = |out: &Output| {
        text(&out.stdout).lines().find(|l| l.starts_with(&table)).unwrap_or_default().to_owned()
    };
    let out = check();
    assert!(line(&out).contains("fenced as applied"), "{}", text(&out.stdout));

    // A new subuid range after apply: check fails and names it, show warns.
    let ok = Command::new("usermod")
        .args(["--add-subuids", "3900000000-3900000009", &user.0.name])
        .status()
        .unwrap()
        .success();
    assert!(ok, "usermod --add-subuids");
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(line(&out).contains("3900000000-3900000009"), "{}", text(&out.stdout));
    assert!(line(&out).contains("changed"), "{}", text(&out.stdout));
    let out = run(&["firewall", "show"]);
    assert!(
        text(&out.stderr).contains("warning: the subordinate ids of uid"),
        "{}",
        text(&out.stderr)
    );

    // Applying again fences the new range.
    let out = run(&["firewall", "apply", "--uid", &uid, "--owner-pid", &pid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(ruleset().contains("3900000000-3900000009"), "{}", ruleset());
    let out = check();
    assert!(line(&out).contains("fenced as applied"), "{}", text(&out.stdout));
    let out = run(&["firewall", "remove", "--uid", &uid, "--owner-pid", &pid]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
