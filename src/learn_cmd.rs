//! `sandgate learn`: run a command with every unknown destination answered by a learn policy
//! instead of a person, then propose the allowlist it needed (wildcards where several
//! subdomains of one registrable domain were used) and optionally write it to this directory's
//! configuration file; or, with `--from-log`, propose from traffic already recorded.
//!
//! Its flags; the run and the proposal are [`sandgate_daemon::learn`]'s.

use std::ffi::OsString;

use sandgate_daemon::learn::{FromLog, LearnOptions};

use crate::emit;

/// Options of `sandgate learn`.
#[derive(Debug, clap::Args)]
pub struct LearnArgs {
    /// The tier to run in (`net` or `build`, or a configured tier with network).
    #[arg(long, default_value = "net")]
    pub tier: String,
    /// Let every public destination through (RISKY: the command can send anything it reads to
    /// any host on the internet while learning). Private, loopback, link-local and metadata
    /// addresses and every deny rule are still refused.
    #[arg(long, conflicts_with = "deny_and_record")]
    pub allow_all_but_private: bool,
    /// Refuse every destination nothing allows, and record it (the default): safe, but the
    /// command may stop at its first refusal, so a run can show only part of what it needs.
    #[arg(long)]
    pub deny_and_record: bool,
    /// Add the proposal to this directory's configuration file (`sandgate config check` shows
    /// where it is), keeping its comments.
    #[arg(long)]
    pub write: bool,
    /// Make this path writable (as on a launch).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<std::path::PathBuf>,
    /// Propose from traffic already recorded instead of running a command: what this
    /// directory's project's sandboxes reached through an answer or a grant, or were refused
    /// only because nobody allowed it in time (see `sandgate log`).
    #[arg(long, conflicts_with_all = ["allow_all_but_private", "deny_and_record", "allow_write"])]
    pub from_log: bool,
    /// With --from-log: only traffic of the last DURATION (`90s`, `10m`, `2h`, `7d`).
    #[arg(long, value_name = "DURATION", requires = "from_log")]
    pub since: Option<String>,
    /// With --from-log: only this sandbox's traffic (an id from `sandgate ls --all`).
    #[arg(long, value_name = "ID", requires = "from_log")]
    pub sandbox: Option<String>,
    /// The command to run and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "from_log",
        conflicts_with = "from_log"
    )]
    pub command: Vec<OsString>,
}

/// `sandgate learn`.
pub fn learn(args: LearnArgs) -> anyhow::Result<u8> {
    if args.from_log {
        let o = FromLog {
            tier: args.tier,
            since: args.since,
            sandbox: args.sandbox,
            write: args.write,
        };
        return emit(sandgate_daemon::learn::from_log(o), false);
    }
    if args.allow_all_but_private {
        eprintln!(
            "sandgate: learning with --allow-all-but-private: every public host is reachable \
             until the command ends"
        );
    }
    let options = LearnOptions {
        tier: args.tier,
        allow_all_but_private: args.allow_all_but_private,
        write: args.write,
        allow_write: args.allow_write,
        command: args.command,
    };
    emit(sandgate_daemon::learn::run(options), false)
}
