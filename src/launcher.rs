//! `sandgate-launch`: the tiers alone, for `sandbox-run`, `sandbox-net` and `sandbox-build`.
//!
//! The commands an agent runs hundreds of times a session start here: the same launcher code as
//! `sandgate run|net|build` ([`sandgate_daemon::launch`]), in a binary without the daemon, the
//! proxy and the other subcommands. A process pays for the binary it starts from (relocations,
//! page faults, the pages its exit unmaps, the copy its sandbox's init is made from): this one
//! has a fifth of `sandgate`'s relocations and half its code mapped per launch. Whatever it
//! does not do itself it hands to the `sandgate` binary next to it, with the same arguments,
//! before anything is started: help, version and mistakes on the command line (so messages and
//! exit statuses are `sandgate`'s), and a launch whose proxy no daemon will serve (none runs, or
//! `SANDGATE_NO_DAEMON=1`; `sandgate` starts one or serves the proxy itself).

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;

#[path = "tier_cli.rs"]
mod tier_cli;

fn main() -> ExitCode {
    sandgate_sandbox::timing_begin();
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
    let err = std::process::Command::new(&main).arg0("sandgate").args(&args[1..]).exec();
    eprintln!(
        "sandgate: error: cannot run {}: {err}; {} hands help, mistakes and launches without a \
         daemon to the sandgate binary, which must be next to it (install both: `cargo install \
         --path .`, then `sandgate install`)",
        main.display(),
        sandgate_daemon::LAUNCHER_NAME,
    );
    ExitCode::from(sandgate_daemon::policy_report::EXIT_USAGE)
}
