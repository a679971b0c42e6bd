//! `sandgate learn`: run a command with every unknown destination answered by a learn policy
//! instead of a person, then propose the allowlist it needed (wildcards where several
//! subdomains of one registrable domain were used) and optionally write it to this directory's
//! configuration file.
//!
//! The proxy runs in this process (no daemon, no questions): the learn policy
//! ([`sandgate_proxy::Learner`]) is its approver; the proposal is
//! [`sandgate_config::learn::propose`]. Deny rules and the address guard (loopback, private,
//! link-local, metadata addresses) apply as on any launch, so `--allow-all-but-private` still
//! cannot reach the host's own services.

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::Context as _;
use sandgate_config::learn::{propose, render};
pub use sandgate_proxy::Learner;

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
    let learner = Arc::new(Learner::new(args.allow_all_but_private));
    if args.allow_all_but_private {
        eprintln!(
            "sandgate: learning with --allow-all-but-private: every public host is reachable \
             until the command ends"
        );
    }
    let launch = crate::launch::LaunchArgs {
        allow_write: args.allow_write,
        allow: Vec::new(),
        deny: Vec::new(),
        net: Some(crate::launch::NetArg::Proxy),
        require_full: false,
        report_blocked: true,
        quiet: true,
        learner: Some(learner.clone()),
        command: args.command,
    };
    let code = crate::launch::run(&args.tier, launch)?;
    let proposals = propose(&learner.seen());
    if proposals.is_empty() {
        println!("# the command asked for no destination beyond what is allowed already");
        return Ok(code);
    }
    println!("# proposed by `sandgate learn` (exit status of the command: {code})");
    print!("{}", render(&proposals));
    if args.write {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let paths =
            sandgate_config::ConfigPaths::discover(&cwd).map_err(|e| anyhow::anyhow!("{e}"))?;
        let patterns: Vec<String> = proposals.iter().map(|p| p.pattern.clone()).collect();
        let added = sandgate_config::add_allow(&paths.project, &patterns)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("# added {added} to {}", paths.project.display());
    }
    Ok(code)
}
