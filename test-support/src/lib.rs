//! Dev-only helpers shared by sandgate's tests (a `dev-dependency` of the library crates, a
//! dependency of the end-to-end test crate `sandgate-tests`; never of shipped code): the skip
//! helpers below, the fake Telegram Bot API server ([`telegram`]) and a test OpenTelemetry
//! collector ([`otlp`]).
//!
//! # Skips
//!
//! A test that needs something the machine lacks (root, `nft`, a test user, ...) calls
//! [`skip_unless`] (or [`skip`]). With `CI=true` a missing capability fails the test: CI must run
//! everything. Elsewhere the test returns early, and the skip is *said*, so that a green run outside
//! CI does not pass for a full one:
//!
//! - it prints exactly one line, `SKIPPED <test name>: <reason>`, to stderr past the harness's
//!   output capture, so it shows in a plain `cargo test` (the test name is the name of the
//!   thread the test harness runs the test on);
//! - it appends the same line to `skipped-tests.txt` in cargo's target directory
//!   ([`skip_log`]); `.ci/skips` prints the count and the lines, and `.ci/run` resets the file
//!   before the test command and prints the count after it.
//!
//! # Why
//!
//! Three copies of the skip helper had drifted apart (`SKIP: …` lines without the test name, one
//! without the CI check's message). The record file exists because `cargo test` prints a test that
//! returned early as `ok`; only a count kept beside the run can say how much of it ran.

#![forbid(unsafe_code)]

pub mod otlp;
pub mod telegram;

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;

/// Name of the file, in cargo's target directory, that collects one line per skipped test.
pub const SKIP_LOG: &str = "skipped-tests.txt";

/// Whether the test runs in CI (`CI=true` or `CI=1`), where a missing capability must fail the test
/// instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `true` (skip the test) when `available` is false outside CI; panics in CI. `what` names the
/// missing capability ("root", "the `nft` command"); the skip line says "`what` is not available
/// here".
pub fn skip_unless(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(!in_ci(), "required capability missing in CI: {what}");
    record(&format!("{what} is not available here"));
    true
}

/// Skips with a free-form `reason` (always returns `true`, so `if skip(..) { return; }` reads
/// naturally); panics in CI.
pub fn skip(reason: &str) -> bool {
    assert!(!in_ci(), "cannot run in CI: {reason}");
    record(reason);
    true
}

/// The line a skip prints and records: `SKIPPED <test name>: <reason>`.
pub fn skip_line(test: &str, reason: &str) -> String {
    // One line, whatever the reason holds.
    let reason = reason.replace(['\n', '\r'], " ");
    format!("SKIPPED {test}: {reason}")
}

/// Where skips are recorded: `$SANDGATE_SKIP_LOG` if set, else `skipped-tests.txt` in cargo's
/// target directory — `$CARGO_TARGET_DIR`, or the nearest ancestor of the test executable that
/// holds cargo's `.rustc_info.json` or `CACHEDIR.TAG` (test binaries run from
/// `<target>/[<triple>/]debug/deps/`).
pub fn skip_log() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SANDGATE_SKIP_LOG") {
        return Some(PathBuf::from(p));
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return Some(dir.join(SKIP_LOG));
        }
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .find(|d| d.join(".rustc_info.json").is_file() || d.join("CACHEDIR.TAG").is_file())
        .map(|d| d.join(SKIP_LOG))
}

/// The current test's name: the harness names each test's thread after the test. A test run on
/// the main thread (`--test-threads=1` on some toolchains) is named after its executable.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => std::env::current_exe()
            .ok()
            .and_then(|e| e.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown test".to_owned()),
    }
}

fn record(reason: &str) {
    let line = skip_line(&test_name(), reason);
    // Straight to the stderr handle, not `eprintln!`: the harness captures `eprintln!` of a
    // passing test (and a skipped test passes), so the line would never be seen.
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    if let Some(path) = skip_log() {
        // One write of the whole line with O_APPEND: lines from test threads and binaries that
        // run at once do not interleave. Failing to record must not fail the test.
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skip_line_names_the_test_and_stays_one_line() {
        assert_eq!(
            skip_line("a::b", "root is not available here"),
            "SKIPPED a::b: root is not available here"
        );
        assert_eq!(skip_line("t", "x\ny"), "SKIPPED t: x y");
    }

    #[test]
    fn the_test_name_is_the_harness_thread_name() {
        assert_eq!(test_name(), "tests::the_test_name_is_the_harness_thread_name");
    }

    /// Runs one test of this binary, which skips, in a child process with `ci` and a log file.
    fn run_skipping_test(ci: bool, log: &std::path::Path) -> std::process::Output {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "tests::skips_for_the_parent", "--ignored"])
            .env("SANDGATE_SKIP_LOG", log)
            .env_remove("CI");
        if ci {
            cmd.env("CI", "true");
        }
        cmd.output().unwrap()
    }

    #[test]
    #[ignore = "run by a_skip_is_printed_past_the_capture_and_recorded"]
    fn skips_for_the_parent() {
        if skip_unless(false, "a capability") {
            return;
        }
        unreachable!("skip_unless(false, ..) must skip or panic");
    }

    #[test]
    fn a_skip_is_printed_past_the_capture_and_recorded() {
        let dir = std::env::temp_dir().join(format!("sandgate-skip-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(SKIP_LOG);
        let line = "SKIPPED tests::skips_for_the_parent: a capability is not available here";

        let out = run_skipping_test(false, &log);
        assert!(out.status.success(), "{out:?}");
        // Not run with --nocapture: the line must get past the harness's capture, once.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().filter(|l| l.starts_with("SKIPPED")).collect::<Vec<_>>(), [line]);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{line}\n"));

        // In CI the same test fails, and records nothing more.
        let out = run_skipping_test(true, &log);
        assert!(!out.status.success(), "a skip in CI must fail the test");
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_log_is_in_the_target_directory() {
        if std::env::var_os("SANDGATE_SKIP_LOG").is_some()
            || std::env::var_os("CARGO_TARGET_DIR").is_some()
        {
            return;
        }
        let log = skip_log().expect("a target directory above the test executable");
        let target = log.parent().unwrap();
        assert!(target.join("debug").is_dir(), "{}", log.display());
    }
}
