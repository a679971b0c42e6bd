//! Issue 35: the CI recipe (docs/ci.md), run as its script `.github/sandgate-ci.sh` — the very
//! file the composite action and the documented steps call — as root and as an unprivileged user,
//! with no stdin and `GITHUB_STEP_SUMMARY` pointing at a file of the test.
//!
//! Two scratch trees stand for two CI jobs on fresh runners: the audit job records what the
//! command needed and writes the allowlist to commit; the enforce job gets that file as a
//! checkout would (a copy in its `.github/`) and runs with it. Origins are on 127.0.0.1 (the one
//! the command needs) and 127.0.0.2 (a host that appears only later).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandgate_tests::{origin, origin_at, sandgate_bin};

use crate::support::daemon::can_sandbox;
use crate::support::sandbox::{Scratch, Who, both, text};

/// The script, as committed.
const SCRIPT: &str = include_str!("../../../.github/sandgate-ci.sh");

/// Where the script keeps the allowlist by default, relative to the working directory.
const ALLOWLIST: &str = ".github/sandgate-allow.toml";

/// One CI job: a scratch tree with the script and an (empty) job summary file in it.
struct Job {
    s: Scratch,
    script: PathBuf,
    summary: PathBuf,
}

impl Job {
    fn new(who: &Who) -> Job {
        let s = Scratch::new(who);
        let (script, summary) = (s.root.join("sandgate-ci.sh"), s.root.join("step-summary.md"));
        std::fs::write(&script, SCRIPT).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&summary, "").unwrap();
        let _ =
            Command::new("chown").arg(format!("{}:{}", who.uid, who.gid)).arg(&summary).status();
        Job { s, script, summary }
    }

    /// `sandgate-ci.sh MODE [-- sh -c SCRIPT]` as the job's user in its project directory:
    /// (exit status, stdout, stderr).
    fn run(&self, mode: &str, sh: Option<&str>) -> (i32, String, String) {
        let mut c = self.s.program(Path::new("/bin/sh"));
        c.arg(&self.script).arg(mode);
        if let Some(sh) = sh {
            c.args(["--", "sh", "-c", sh]);
        }
        c.env("SANDGATE", sandgate_bin()).env("GITHUB_STEP_SUMMARY", &self.summary);
        let out = c.output().unwrap();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    fn summary(&self) -> String {
        std::fs::read_to_string(&self.summary).unwrap()
    }
}

/// The status code of a GET of `http://IP:PORT/` through the proxy, one line.
fn get(ip: &str, port: u16) -> String {
    format!(
        "curl -sS --noproxy '' --max-time 20 -o /dev/null -w '%{{http_code}}\\n' http://{ip}:{port}/"
    )
}

/// Audit, commit, enforce, summary: the audit refuses at once and proposes exactly what the
/// command needed; with the proposal committed the same command gets through (the audit's 403
/// is the control), a new host is refused with the 403 and listed in the job summary, and the
/// enforced command can write its project but not the allowlist.
fn the_recipe_audits_then_enforces_the_committed_allowlist(who: &Who) {
    if !can_sandbox() {
        sandgate_tests::skip("curl and python3 (build tier)");
        return;
    }
    let needed = origin("needed\n");
    let later = origin_at("127.0.0.2", "later\n");

    // The audit job: refused at once (nobody to ask), recorded, proposed.
    let audit = Job::new(who);
    let (code, stdout, stderr) = audit.run("audit", Some(&get("127.0.0.1", needed)));
    assert_eq!((code, stdout.as_str()), (0, "403\n"), "audit: {stderr}");
    assert!(stderr.contains("review it and commit it"), "{stderr}");
    let proposal = std::fs::read_to_string(audit.s.proj.join(ALLOWLIST)).unwrap();
    let entry = format!("\"127.0.0.1:{needed}\"");
    assert!(proposal.contains(&entry) && proposal.contains("[network]"), "{proposal}");
    assert!(!proposal.contains("127.0.0.2"), "{proposal}");
    let summary = audit.summary();
    assert!(summary.contains("### sandgate audit: proposed allowlist"), "{summary}");
    assert!(summary.contains(&entry), "{summary}");
    let (code, _, stderr) = audit.run("summary", None);
    assert_eq!(code, 0, "{stderr}");
    let summary = audit.summary();
    assert!(
        summary.contains("would have asked (unattended run): 127.0.0.1"),
        "the audit's refusal is listed: {summary}"
    );

    // The enforce job, on a fresh runner with the committed file in its checkout.
    let enforce = Job::new(who);
    let committed = enforce.s.proj.join(ALLOWLIST);
    std::fs::create_dir_all(committed.parent().unwrap()).unwrap();
    std::fs::write(&committed, &proposal).unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(committed.parent().unwrap())
        .status();
    let body = format!(
        "{}; {}; \
         (echo '\"x\"' >> {ALLOWLIST}) 2>/dev/null && echo widened || echo protected; \
         echo more >> file.txt && echo wrote; exit 7",
        get("127.0.0.1", needed),
        get("127.0.0.2", later)
    );
    let (code, stdout, stderr) = enforce.run("enforce", Some(&body));
    assert_eq!(
        (code, stdout.as_str()),
        (7, "200\n403\nprotected\nwrote\n"),
        "enforce (the command's own status passed on): {stderr}"
    );
    assert!(stderr.contains("unattended"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&committed).unwrap(), proposal);
    let (code, _, stderr) = enforce.run("summary", None);
    assert_eq!(code, 0, "{stderr}");
    let summary = enforce.summary();
    assert!(summary.contains("### sandgate: refused destinations"), "{summary}");
    assert!(
        summary.contains("would have asked (unattended run): 127.0.0.2"),
        "the new host is listed: {summary}"
    );
    assert!(
        !summary.lines().any(|l| l.starts_with("127.0.0.1 ")),
        "the allowed host is not listed as refused: {summary}"
    );

    // A committed file that does not load stops `enforce` before anything runs.
    std::fs::write(&committed, "[network]\nalow = []\n").unwrap();
    let (code, stdout, stderr) = enforce.run("enforce", Some("echo ran"));
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(stderr.contains("does not load"), "{stderr}");
}

both!(the_recipe_audits_then_enforces_the_committed_allowlist);

/// Usage errors say what to type, and `enforce` without a committed allowlist says to audit.
#[test]
fn the_script_says_how_to_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sandgate-ci.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("sh")
            .arg(&script)
            .args(args)
            .current_dir(dir.path())
            .env("SANDGATE", "/nonexistent/sandgate")
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    for (args, says) in [
        (&[][..], "usage: sandgate-ci.sh install"),
        (&["audit"][..], "usage: sandgate-ci.sh audit -- CMD"),
        (&["enforce", "--"][..], "no command given"),
        (&["enforce", "--", "true"][..], "run `sandgate-ci.sh audit`"),
    ] {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Red team (issue 35): with `SANDGATE_ALLOWLIST` where the command can write (not under a
/// top-level dot-directory), the audited command plants links where the script writes its
/// proposal: the temporary file (the old fixed name `ALLOWLIST.tmp.$$`, the script's pid being
/// the parent of `sandgate build`) and the allowlist itself, both pointing at a file standing for
/// `$GITHUB_PATH`. The proposal must land in the allowlist and nowhere else. Control, checked by
/// hand: with the script's former `tmp="$ALLOWLIST.tmp.$$"`, the "GITHUB_PATH" file received the
/// proposal. No sandbox is needed: a stand-in `sandgate` plays the command.
#[test]
fn the_audit_writes_its_proposal_through_no_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sandgate-ci.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let victim = dir.path().join("github_path");
    std::fs::write(&victim, "/usr/bin\n").unwrap();
    let fake = dir.path().join("sandgate");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n\
             case \"$1\" in\n\
             build) mkdir -p ci && ln -s {v} \"ci/allow.toml.tmp.$PPID\" ;;\n\
             learn) printf '[network]\\nallow = [\"needed.example:443\"]\\n' ;;\n\
             esac\n",
            v = victim.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = || {
        Command::new("sh")
            .arg(&script)
            .args(["audit", "--", "true"])
            .current_dir(dir.path())
            .env("SANDGATE", &fake)
            .env("SANDGATE_ALLOWLIST", "ci/allow.toml")
            .env("GITHUB_STEP_SUMMARY", dir.path().join("summary.md"))
            .output()
            .unwrap()
    };
    let out = run();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let proposal = std::fs::read_to_string(dir.path().join("ci/allow.toml")).unwrap();
    assert!(proposal.contains("needed.example:443"), "{proposal}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "/usr/bin\n", "written through a link");

    // The allowlist itself a link (a second audit call after the command replaced it): refused.
    std::fs::remove_file(dir.path().join("ci/allow.toml")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("ci/allow.toml")).unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("symbolic link"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "/usr/bin\n", "written through a link");
}
