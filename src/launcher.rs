//! `sandgate-launch`: the tiers alone, for `sandbox-run`, `sandbox-net` and `sandbox-build`.
//!
//! The commands an agent runs hundreds of times a session start here: the same launcher code as
//! `sandgate run|net|build` ([`sandgate_daemon::launch`]), in a binary without the daemon, the
//! proxy and the other subcommands. A process pays for the binary it starts from (relocations,
//! page faults, the pages its exit unmaps, the copy its sandbox's init is made from): this one
//! has a fifth of `sandgate`'s relocations and three fifths of its resident memory per launch.
//! Whatever it does not do itself it hands to the `sandgate` binary next to it, with the same
//! arguments, before anything is started: help, version and mistakes on the command line (so
//! messages and exit statuses are `sandgate`'s), and a launch whose proxy no daemon will serve
//! (none runs, or `SANDGATE_NO_DAEMON=1`; `sandgate` starts one or serves the proxy itself).

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;

#[path = "tier_cli.rs"]
mod tier_cli;

fn main() -> ExitCode {
    sandgate_sandbox::timing_begin();
    sandgate_daemon::running_the_small_launcher();
    let mut args = tier_cli::normalized(std::env::args_os().collect());
    if let Some((tier, a)) = tier_cli::parse_tier(&args) {
        match sandgate_daemon::launch::run(tier, a.options(None)) {
            Err(e) if e.is::<sandgate_daemon::launch::HandOver>() => {}
            result => return tier_cli::finish(result),
        }
    }
    // `sandgate-launch ARGS` is `sandgate ARGS`.
    if let Some(first) = args.first_mut() {
        *first = "sandgate".into();
    }
    hand_over(&args)
}

/// Runs `sandgate` with `args` in this process's place; returns only when it cannot.
fn hand_over(args: &[OsString]) -> ExitCode {
    let main = match sandgate_daemon::sandgate_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sandgate: error: cannot find this program's path: {e}");
            return ExitCode::from(sandgate_daemon::policy_report::EXIT_USAGE);
        }
    };
    // Never this binary again (a `sandgate` that is a link or copy of the launcher would hand
    // over to itself for ever).
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| a.dev() == b.dev() && a.ino() == b.ino();
    let this = std::env::current_exe().and_then(std::fs::metadata);
    if let (Ok(this), Ok(that)) = (this, std::fs::metadata(&main))
        && same(&this, &that)
    {
        eprintln!(
            "sandgate: error: {} is this launcher, not the sandgate binary: install both (`cargo \
             install --path .`)",
            main.display()
        );
        return ExitCode::from(sandgate_daemon::policy_report::EXIT_USAGE);
    }
    let rest = args.get(1..).unwrap_or_default();
    let err = std::process::Command::new(&main).arg0("sandgate").args(rest).exec();
    eprintln!(
        "sandgate: error: cannot run {}: {err}; {} hands help, mistakes and launches without a \
         daemon to the sandgate binary, which must be next to it (install both: `cargo install \
         --path .`, then `sandgate install`)",
        main.display(),
        sandgate_daemon::LAUNCHER_NAME,
    );
    ExitCode::from(sandgate_daemon::policy_report::EXIT_USAGE)
}
