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
use std::path::PathBuf;
use std::sync::Arc;

use sandgate_config::learn::{Proposal, propose, render};
use sandgate_proxy::Learner;

use crate::launch::LaunchOptions;
use crate::report::Printed;

/// Exit status when the proposal could not be written (as for any error).
const EXIT_ERROR: u8 = 2;

/// How `sandgate learn` runs.
#[derive(Debug, Clone)]
pub struct LearnOptions {
    /// The tier to run in.
    pub tier: String,
    /// Let every public destination through while learning.
    pub allow_all_but_private: bool,
    /// Add the proposal to this directory's configuration file.
    pub write: bool,
    /// Paths made writable (as on a launch).
    pub allow_write: Vec<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// Runs the command, then returns the proposal as TOML (exit status: the command's).
pub fn run(o: LearnOptions) -> anyhow::Result<Printed> {
    let learner = Arc::new(Learner::new(o.allow_all_but_private));
    let launch = LaunchOptions {
        allow_write: o.allow_write,
        allow: Vec::new(),
        deny: Vec::new(),
        net: Some(sandgate_config::NetMode::Proxy),
        require_full: false,
        report_blocked: true,
        quiet: true,
        approver: Some(learner.clone()),
        serve_here: Some(crate::launch::serve_here),
        command: o.command,
    };
    let code = crate::launch::run(&o.tier, launch)?;
    let proposals = propose(&learner.seen());
    let mut r = Printed::new(proposal_text(&proposals, code), "").exit(code);
    if o.write && !proposals.is_empty() {
        match write(&proposals) {
            Ok(line) => r.text.push_str(&line),
            Err(e) => r = r.note(format!("sandgate: error: {e:#}")).exit(EXIT_ERROR),
        }
    }
    Ok(r)
}

/// The proposal as `learn` prints it, with the command's exit status `code`.
pub fn proposal_text(proposals: &[Proposal], code: u8) -> String {
    if proposals.is_empty() {
        return "# the command asked for no destination beyond what is allowed already\n".into();
    }
    format!(
        "# proposed by `sandgate learn` (exit status of the command: {code})\n{}",
        render(proposals)
    )
}

/// Adds the proposal to this directory's configuration file; returns the line saying so.
fn write(proposals: &[Proposal]) -> anyhow::Result<String> {
    let cwd = std::env::current_dir()
        .map_err(|e| anyhow::Error::new(e).context("cannot read the current directory"))?;
    let paths = sandgate_config::ConfigPaths::discover(&cwd).map_err(|e| anyhow::anyhow!("{e}"))?;
    let patterns: Vec<String> = proposals.iter().map(|p| p.pattern.clone()).collect();
    let added = sandgate_config::add_allow(&paths.project, &patterns)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(format!("# added {added} to {}\n", paths.project.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_propose() {
        assert_eq!(
            proposal_text(&[], 0),
            "# the command asked for no destination beyond what is allowed already\n"
        );
    }
}
