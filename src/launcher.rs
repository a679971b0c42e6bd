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

//!
//! On Linux with glibc its entry is a C `main` ([`main`]), not Rust's start: see there why.
//! (Elsewhere, and in its unit tests, Rust's start: a C `main` there would not have the
//! arguments, which only glibc hands to std without it.)

#![cfg_attr(all(linux_glibc, not(test)), no_main)]
#![deny(unsafe_code)] // allowed in `main` and `start` only, which say why

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;

#[path = "tier_cli.rs"]
mod tier_cli;

/// The process's entry, called by the C runtime in place of Rust's own start (`lang_start`).
/// On Linux that start also finds the main thread's stack by reading and parsing
/// `/proc/self/maps` (glibc's `pthread_getattr_np`) and installs a stack-overflow handler: ~90,000
/// instructions and eight system calls, 0.06 ms of every `sandbox-*` launch
/// (docs/internals.md, "The small launcher"). What of it the launcher needs is done here: descriptors 0, 1 and 2 open,
/// `SIGPIPE` ignored, standard output flushed at the end (`std::process::exit` flushes it too).
/// A panic ends it with status 101, as from Rust's start (a panic cannot unwind out of a C
/// function: it would abort); a stack overflow ends it with `SIGSEGV` instead of a message.
#[cfg(all(linux_glibc, not(test)))]
#[allow(unsafe_code)] // an exported symbol is `unsafe` to declare (it could shadow another)
#[unsafe(no_mangle)]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    start::standard_descriptors_open();
    start::ignore_sigpipe();
    let code = std::panic::catch_unwind(launcher).unwrap_or(101);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    libc::c_int::from(code)
}

#[cfg(not(all(linux_glibc, not(test))))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(launcher())
}

/// What Rust's start does that the launcher needs (the same calls, as std makes them on unix).
#[cfg(all(linux_glibc, not(test)))]
#[allow(unsafe_code)]
mod start {
    /// Descriptors 0, 1 and 2 that are not open are opened on `/dev/null`: otherwise the first
    /// file or socket the launcher opens would take the number, and its messages or a child's
    /// output would go there. Aborts when `/dev/null` cannot be opened, as std does.
    pub fn standard_descriptors_open() {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
        // SAFETY: `fds` is a valid array of three `pollfd`s for the duration of the call.
        let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if polled < 0 {
            return; // cannot tell (std then checks each with fcntl; poll does not fail here)
        }
        for pfd in fds {
            if pfd.revents & libc::POLLNVAL != 0 {
                // SAFETY: a NUL-terminated path; the descriptor is left open on purpose (it
                // takes the lowest free number, the one that was closed).
                let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR, 0) };
                if fd < 0 {
                    std::process::abort();
                }
            }
        }
    }

    /// Writes to a closed pipe fail with `EPIPE` instead of ending the process: the launcher
    /// reports what happened and ends with its command's status.
    pub fn ignore_sigpipe() {
        // SAFETY: `SIG_IGN` runs no code; no other thread exists yet.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }
}

/// The launcher: its exit status.
fn launcher() -> u8 {
    sandgate_sandbox::timing_begin();
    sandgate_daemon::running_the_small_launcher();
    let mut args = tier_cli::normalized(std::env::args_os().collect());
    if let Some((tier, a)) = tier_cli::parse_tier(&args) {
        match sandgate_daemon::launch::run(tier, a.options(None)) {
            Err(sandgate_daemon::launch::LaunchError::HandOver) => {}
            result => return tier_cli::finish(result.map_err(anyhow::Error::from)),
        }
    }
    // `sandgate-launch ARGS` is `sandgate ARGS`.
    if let Some(first) = args.first_mut() {
        *first = "sandgate".into();
    }
    hand_over(&args)
}

/// Runs `sandgate` with `args` in this process's place; returns only when it cannot.
fn hand_over(args: &[OsString]) -> u8 {
    let main = match sandgate_daemon::sandgate_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sandgate: error: cannot find this program's path: {e}");
            return sandgate_daemon::policy_report::EXIT_USAGE;
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
        return sandgate_daemon::policy_report::EXIT_USAGE;
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
    sandgate_daemon::policy_report::EXIT_USAGE
}
