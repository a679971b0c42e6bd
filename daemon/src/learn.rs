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

use std::collections::{BTreeMap, BTreeSet};
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
        no_ask: false,
        approver: Some(learner.clone()),
        serve_here: Some(crate::launch::serve_here),
        command: o.command,
    };
    let code = crate::launch::run(&o.tier, launch)?;
    let proposals = propose(&learner.seen());
    let refused = learner.guard_refusals();
    let mut text = proposal_text(&proposals, &refused, code);
    text.push_str(&asked_by_text(&learner.asked_by()));
    let mut r = Printed::new(text, "").exit(code);
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

/// How `sandgate learn --from-log` reads what was recorded.
#[derive(Debug, Clone, Default)]
pub struct FromLog {
    /// The tier whose policy decides what is allowed already.
    pub tier: String,
    /// Only traffic of the last DURATION (as typed).
    pub since: Option<String>,
    /// Only this sandbox's traffic (default: every sandbox of this directory's project).
    pub sandbox: Option<String>,
    /// Add the proposal to this directory's configuration file.
    pub write: bool,
}

/// Lines read per sandbox, the newest first (a day of a busy build is far fewer).
const LOG_LINES: u32 = 100_000;

/// `sandgate learn --from-log`: proposes from traffic already recorded (no re-run): what the
/// project's sandboxes reached through an answer or a grant, and what they were refused only
/// because nobody allowed it in time, as far as the tier's policy would still ask about it.
pub fn from_log(o: FromLog) -> anyhow::Result<Printed> {
    let since = crate::traffic_log::since(o.since.as_deref())?;
    let config = crate::setup::load_config()?;
    let policy = config
        .policy(&o.tier, &sandgate_config::Overrides::default())
        .map_err(|e| crate::UsageError(e.to_string()))?;
    let project = config.paths.project_root.clone();
    let mut client = crate::control::connect_running().ok().flatten();
    let store = crate::traffic_log::flushed_store(client.as_mut())?;
    let sandboxes: Vec<String> = match (&store, &o.sandbox) {
        (None, _) => Vec::new(),
        (Some(s), Some(id)) => match s.sandbox(id)? {
            Some(r) => vec![r.sandbox.id],
            None => anyhow::bail!(crate::UsageError(format!(
                "no sandbox {id:?} is recorded (`sandgate ls --all` lists them)"
            ))),
        },
        (Some(s), None) => s
            .list_sandboxes(false)?
            .into_iter()
            .filter(|r| in_project(&r.sandbox, &project))
            .map(|r| r.sandbox.id)
            .collect(),
    };
    let mut lines = Vec::new();
    if let Some(store) = &store {
        for id in &sandboxes {
            let filter = sandgate_store::TrafficFilter {
                sandbox: Some(id.clone()),
                ..sandgate_store::TrafficFilter::default()
            };
            lines.extend(store.traffic_lines(&filter, since, LOG_LINES, |e| {
                let ev = serde_json::from_value::<crate::protocol::Event>(e.event.details.clone())
                    .ok()?;
                ev.traffic_line(e.event.time.as_millis())
            })?);
        }
    }
    let seen = wanted(&lines, |t| policy.net.decide(t));
    let proposals = propose(&seen);
    let asked_by = asked_by(&lines, &seen);
    let whose = match &o.sandbox {
        Some(id) => format!("sandbox {id}"),
        None => format!("{} sandbox(es) of {}", sandboxes.len(), project.display()),
    };
    let when = o.since.as_deref().map_or(String::new(), |s| format!(" in the last {s}"));
    let mut r = Printed::new(
        if proposals.is_empty() {
            format!(
                "# nothing in the log of {whose}{when} needs more than is allowed already \
                 ({} line(s) read)\n",
                lines.len()
            )
        } else {
            format!(
                "# proposed by `sandgate learn --from-log` from the log of {whose}{when}\n{}{}",
                render(&proposals),
                asked_by_text(&asked_by)
            )
        },
        "",
    );
    if o.write && !proposals.is_empty() {
        match write(&proposals) {
            Ok(line) => r.text.push_str(&line),
            Err(e) => r = r.note(format!("sandgate: error: {e:#}")).exit(EXIT_ERROR),
        }
    }
    Ok(r)
}

/// Whether sandbox `s` ran in `project`: the project it was registered with, or (older records,
/// which named none) a working directory inside it.
fn in_project(s: &sandgate_store::NewSandbox, project: &std::path::Path) -> bool {
    match &s.project {
        Some(p) => std::path::Path::new(p) == project,
        None => s.cwd.starts_with(project),
    }
}

/// The destinations of `lines` worth proposing: connections that went through (an answer, a
/// grant or a flag let them) and those refused only because nobody allowed them in time (not
/// a deny rule, not a person's refusal, not a bad request), kept when `decide` (the tier's
/// policy) would still ask about them. Name lookups and blocked direct packets carry no
/// destination the proxy could allow.
pub fn wanted(
    lines: &[sandgate_store::TrafficLine],
    decide: impl Fn(&sandgate_config::Target) -> sandgate_config::Decision,
) -> Vec<(String, u16)> {
    use sandgate_proxy::Refusal;
    use sandgate_store::TrafficDecision;
    // The rules of refusals that were questions nobody answered yes to in time, as the proxy
    // writes them.
    let t = String::new;
    let unanswered = [
        Refusal::AskTimedOut { target: t(), after: std::time::Duration::ZERO },
        Refusal::TooManyQuestions { target: t(), open: 0 },
        Refusal::OverBudget { target: t(), limit: 0, window: std::time::Duration::ZERO },
        Refusal::NoApprover { target: t() },
        // An unattended run asked nobody: what it refused is what it would have asked.
        Refusal::Unattended { target: t() },
    ]
    .map(|r| r.rule_text());
    let mut out: Vec<(String, u16)> = Vec::new();
    for l in lines {
        let Some(port) = l.port else { continue };
        let keep = match l.decision {
            TrafficDecision::Allow => true,
            TrafficDecision::Deny => unanswered.iter().any(|u| l.rule.starts_with(u.as_str())),
            TrafficDecision::Blocked => false,
        };
        if !keep || out.iter().any(|(h, p)| *h == l.host && *p == port) {
            continue;
        }
        let spelled = if l.host.contains(':') {
            format!("[{}]:{port}", l.host)
        } else {
            format!("{}:{port}", l.host)
        };
        let Ok(target) = sandgate_config::Target::parse(&spelled) else { continue };
        if matches!(decide(&target), sandgate_config::Decision::Ask) {
            out.push((l.host.clone(), port));
        }
    }
    out
}

/// Which commands wanted the destinations `seen`, from the processes `lines` name.
pub fn asked_by(
    lines: &[sandgate_store::TrafficLine],
    seen: &[(String, u16)],
) -> BTreeMap<(String, u16), BTreeSet<String>> {
    let mut out: BTreeMap<(String, u16), BTreeSet<String>> = BTreeMap::new();
    for l in lines {
        let (Some(port), Some(p)) = (l.port, &l.process) else { continue };
        let key = (l.host.clone(), port);
        if seen.contains(&key) {
            out.entry(key).or_default().insert(p.name().to_owned());
        }
    }
    out
}

/// The comment block under a proposal that says which commands wanted what (names of
/// executables, as the kernel reports them); nothing when no process was found.
pub fn asked_by_text(asked_by: &BTreeMap<(String, u16), BTreeSet<String>>) -> String {
    if asked_by.is_empty() {
        return String::new();
    }
    let mut out = String::from("# wanted by (the executables that opened the connections):\n");
    for ((host, port), names) in asked_by {
        let names: Vec<String> = names.iter().map(|n| format!("`{}`", sanitize(n))).collect();
        out.push_str(&format!("#   {}:{port} by {}\n", sanitize(host), names.join(", ")));
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

    fn line(
        decision: sandgate_store::TrafficDecision,
        host: &str,
        port: Option<u16>,
        rule: &str,
    ) -> sandgate_store::TrafficLine {
        sandgate_store::TrafficLine {
            time: 0,
            sandbox: "sg-1".into(),
            decision,
            method: if port.is_some() { "CONNECT".into() } else { "DNS".into() },
            host: host.into(),
            port,
            path: None,
            command: None,
            process: None,
            rule: rule.into(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 0.0,
            count: 1,
        }
    }

    /// What went through or was refused only for want of an answer is proposed, once, unless
    /// the policy decides it now; refusals by a rule or a person, lookups and blocked packets
    /// are not.
    #[test]
    fn the_commands_that_wanted_a_destination_are_listed() {
        use sandgate_store::TrafficDecision::Allow;
        let by = |exe: &str| {
            Some(sandgate_config::ProcessInfo { pid: 7, exe: exe.into(), command: "x".into() })
        };
        let mut lines = vec![
            line(Allow, "index.crates.io", Some(443), ""),
            line(Allow, "index.crates.io", Some(443), ""),
            line(Allow, "index.crates.io", Some(443), ""),
            line(Allow, "pypi.org", Some(443), ""),
            line(Allow, "not.proposed", Some(443), ""),
        ];
        lines[0].process = by("/usr/bin/cargo");
        lines[1].process = by("/usr/bin/curl");
        lines[2].process = by("/usr/bin/cargo");
        lines[4].process = by("/usr/bin/curl");
        let seen = vec![("index.crates.io".to_owned(), 443), ("pypi.org".to_owned(), 443)];
        let text = asked_by_text(&asked_by(&lines, &seen));
        assert_eq!(
            text,
            "# wanted by (the executables that opened the connections):\n\
             #   index.crates.io:443 by `cargo`, `curl`\n"
        );
        assert_eq!(asked_by_text(&BTreeMap::new()), "");
    }

    #[test]
    fn from_the_log_only_what_was_wanted_and_is_still_asked_about() {
        use sandgate_store::TrafficDecision::{Allow, Blocked, Deny};
        let lines = [
            line(Allow, "granted.test", Some(443), "grant #3 (always, project /p) by u via cli"),
            line(Allow, "granted.test", Some(443), "grant #3 (always, project /p) by u via cli"),
            line(Deny, "slow.test", Some(443), "approval timed out"),
            line(Deny, "busy.test", Some(443), "too many questions open"),
            line(Deny, "spent.test", Some(8443), "question budget spent"),
            line(Deny, "alone.test", Some(443), "no approver running"),
            line(Deny, "unattended.test", Some(443), "not asked: unattended run"),
            line(Deny, "refused.test", Some(443), "denied by a person"),
            line(Deny, "ruled.test", Some(443), "deny ruled.test (config.toml:3)"),
            line(Deny, "bad.test", Some(443), "name does not resolve"),
            line(Allow, "configured.test", Some(443), "configured.test (config.toml:2)"),
            line(Allow, "lookup.test", None, "dns"),
            line(Blocked, "203.0.113.9", Some(22), "firewall: direct connection"),
            line(Allow, "2001:db8::1", Some(443), "grant #4"),
        ];
        let decide = |t: &sandgate_config::Target| match t.host.to_string().as_str() {
            "configured.test" => {
                sandgate_config::Decision::Allow(std::sync::Arc::new(sandgate_config::Rule {
                    pattern: None,
                    source: sandgate_config::RuleSource::Builtin,
                }))
            }
            _ => sandgate_config::Decision::Ask,
        };
        let got = wanted(&lines, decide);
        let want = [
            ("granted.test", 443),
            ("slow.test", 443),
            ("busy.test", 443),
            ("spent.test", 8443),
            ("alone.test", 443),
            ("unattended.test", 443),
            ("2001:db8::1", 443),
        ];
        let got: Vec<(&str, u16)> = got.iter().map(|(h, p)| (h.as_str(), *p)).collect();
        assert_eq!(got, want);
    }

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
