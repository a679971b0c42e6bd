//! `sandgate learn`: run a command with every unknown destination answered by a learn policy
//! instead of a person, then propose the allowlist it needed (wildcards where several
//! subdomains of one registrable domain were used) and optionally write it to this directory's
//! configuration file.
//!
//! Its flags; the run and the proposal are [`sandgate_daemon::learn`]'s.

use std::ffi::OsString;

use sandgate_daemon::learn::LearnOptions;

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
    /// The command to run and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<OsString>,
}

/// `sandgate learn`.
pub fn learn(args: LearnArgs) -> anyhow::Result<u8> {
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
