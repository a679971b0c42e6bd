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
use sandgate_config::sanitize;
use sandgate_proxy::{GuardRefusal, Learner};

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
    let refused = learner.guard_refusals();
    let mut r = Printed::new(proposal_text(&proposals, &refused, code), "").exit(code);
    if o.write && !proposals.is_empty() {
        match write(&proposals) {
            Ok(line) => r.text.push_str(&line),
            Err(e) => r = r.note(format!("sandgate: error: {e:#}")).exit(EXIT_ERROR),
        }
    }
    Ok(r)
}

/// The proposal as `learn` prints it, with the command's exit status `code`, and the
/// destinations the address guard refused (`refused`): allowing those names would not help, so
/// they are not proposed but said, with the address to allow if it is meant.
pub fn proposal_text(proposals: &[Proposal], refused: &[GuardRefusal], code: u8) -> String {
    let mut out = match (proposals.is_empty(), refused.is_empty()) {
        (true, true) => {
            return "# the command asked for no destination beyond what is allowed already\n"
                .into();
        }
        (true, false) => format!(
            "# nothing to propose (exit status of the command: {code}): the names the command \
             used are allowed, but the address guard refused what they resolve to\n"
        ),
        (false, _) => format!(
            "# proposed by `sandgate learn` (exit status of the command: {code})\n{}",
            render(proposals)
        ),
    };
    if !refused.is_empty() {
        out.push_str(
            "# refused by the address guard (allowing the name does not help; allow the address \
             itself only if it is meant):\n",
        );
        for r in refused {
            let ip_target = match r.ip {
                std::net::IpAddr::V4(ip) => format!("{ip}:{}", r.port),
                std::net::IpAddr::V6(ip) => format!("[{ip}]:{}", r.port),
            };
            out.push_str(&format!(
                "#   {}:{} resolves to {}, {}: allow \"{ip_target}\"\n",
                sanitize(&r.host),
                r.port,
                r.ip,
                r.why
            ));
        }
    }
    out
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
            proposal_text(&[], &[], 0),
            "# the command asked for no destination beyond what is allowed already\n"
        );
    }

    /// Issue 32, part 3: a run whose allowed names resolved to guarded addresses is not
    /// "nothing beyond what is allowed": the refusals are said, with the address to allow.
    #[test]
    fn guard_refusals_are_reported_not_hidden() {
        let refused = [GuardRefusal {
            host: "rebind.test".into(),
            port: 8080,
            ip: [127, 0, 0, 1].into(),
            why: "a loopback address".into(),
        }];
        assert_eq!(
            proposal_text(&[], &refused, 7),
            "# nothing to propose (exit status of the command: 7): the names the command used \
             are allowed, but the address guard refused what they resolve to\n\
             # refused by the address guard (allowing the name does not help; allow the address \
             itself only if it is meant):\n\
             #   rebind.test:8080 resolves to 127.0.0.1, a loopback address: allow \
             \"127.0.0.1:8080\"\n"
        );
        let proposals = propose(&[("a.example".into(), 443)]);
        let text = proposal_text(&proposals, &refused, 0);
        assert!(text.starts_with("# proposed by `sandgate learn`"), "{text}");
        assert!(text.ends_with("allow \"127.0.0.1:8080\"\n"), "{text}");
    }
}
