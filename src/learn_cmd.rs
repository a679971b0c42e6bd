//! `sandgate learn`: run a command with every unknown destination answered by a learn policy
//! instead of a person, then propose the allowlist it needed (wildcards where several
//! subdomains of one registrable domain were used) and optionally write it to this directory's
//! configuration file.
//!
//! The proxy runs in this process (no daemon, no questions): the learn policy is its approver.
//! Deny rules and the address guard (loopback, private, link-local, metadata addresses) apply as
//! on any launch, so `--allow-all-but-private` still cannot reach the host's own services.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use sandgate_config::{DomainPattern, Host, PatternUse, Rule, RuleSource, is_public_suffix};
use sandgate_proxy::{Answer, Approver, BoxFuture, DenyReason, Question};

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

/// The learn policy, as the proxy's approver: answers at once and records what was asked.
#[derive(Debug, Default)]
pub struct Learner {
    allow: bool,
    seen: Mutex<BTreeSet<(String, u16)>>,
}

impl Learner {
    /// A learner that lets public destinations through (`allow`) or refuses them.
    pub fn new(allow: bool) -> Learner {
        Learner { allow, seen: Mutex::new(BTreeSet::new()) }
    }

    /// The destinations asked about so far (host as normalised, port).
    pub fn seen(&self) -> Vec<(String, u16)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }
}

impl Approver for Learner {
    fn ask(&self, q: Question) -> BoxFuture<'_, Answer> {
        let host = q.target.host.to_string();
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert((host.clone(), q.target.port));
        let answer = if self.allow {
            Answer::Allow(Arc::new(Rule {
                pattern: DomainPattern::parse(&host, PatternUse::Allow).ok(),
                source: RuleSource::CommandLine,
            }))
        } else {
            Answer::Deny(DenyReason::Denied)
        };
        Box::pin(async move { answer })
    }
}

/// One proposed allow pattern and the destinations it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The pattern (`*.example.com`, `api.example.org`, `203.0.113.7`, `host:8443`).
    pub pattern: String,
    /// The destinations it covers, as seen.
    pub covers: Vec<String>,
}

/// The registrable domain of `name`: the public suffix plus one label (`a.b.example.co.uk` →
/// `example.co.uk`); `None` for a name that is itself a public suffix.
fn registrable(name: &str) -> Option<String> {
    let labels: Vec<&str> = name.split('.').collect();
    // The longest public suffix decides (`co.uk` before `uk`); none above the name itself.
    let start = (0..labels.len()).find(|&i| is_public_suffix(&labels[i..].join(".")))?;
    (start > 0).then(|| labels[start - 1..].join("."))
}

/// Groups what was seen into allow patterns: two or more names below one registrable domain
/// become `*.DOMAIN` (plus the apex itself when it was used); a lone name stays exact;
/// addresses stay exact. A pattern gets a port only when every use was on one port other than
/// 80 and 443.
pub fn propose(seen: &[(String, u16)]) -> Vec<Proposal> {
    let mut by_domain: BTreeMap<String, BTreeSet<(String, u16)>> = BTreeMap::new();
    let mut alone: Vec<(String, u16)> = Vec::new();
    for (host, port) in seen {
        match Host::parse(host) {
            Ok(Host::Name(_)) => match registrable(host) {
                Some(domain) => {
                    by_domain.entry(domain).or_default().insert((host.clone(), *port));
                }
                None => alone.push((host.clone(), *port)),
            },
            _ => alone.push((host.clone(), *port)),
        }
    }
    let with_port =
        |pattern: String, ports: &BTreeSet<u16>| match ports.iter().collect::<Vec<_>>()[..] {
            [p] if *p != 80 && *p != 443 => format!("{pattern}:{p}"),
            _ => pattern,
        };
    let show = |(h, p): &(String, u16)| {
        if h.contains(':') { format!("[{h}]:{p}") } else { format!("{h}:{p}") }
    };
    let mut out = Vec::new();
    for (domain, uses) in by_domain {
        let names: BTreeSet<&str> = uses.iter().map(|(h, _)| h.as_str()).collect();
        let below: Vec<&str> = names.iter().copied().filter(|n| *n != domain).collect();
        if below.len() >= 2 {
            let ports: BTreeSet<u16> = uses.iter().map(|(_, p)| *p).collect();
            out.push(Proposal {
                pattern: with_port(format!("*.{domain}"), &ports),
                covers: uses.iter().filter(|(h, _)| *h != domain).map(show).collect(),
            });
            let apex: Vec<&(String, u16)> = uses.iter().filter(|(h, _)| *h == domain).collect();
            if !apex.is_empty() {
                let ports = apex.iter().map(|(_, p)| *p).collect();
                out.push(Proposal {
                    pattern: with_port(domain.clone(), &ports),
                    covers: apex.into_iter().map(show).collect(),
                });
            }
        } else {
            for name in names {
                let mine: Vec<&(String, u16)> = uses.iter().filter(|(h, _)| h == name).collect();
                let ports = mine.iter().map(|(_, p)| *p).collect();
                out.push(Proposal {
                    pattern: with_port(name.to_owned(), &ports),
                    covers: mine.into_iter().map(show).collect(),
                });
            }
        }
    }
    let mut lone: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for (h, p) in alone {
        lone.entry(h).or_default().insert(p);
    }
    for (h, ports) in lone {
        let pattern = if h.contains(':') { format!("[{h}]") } else { h.clone() };
        out.push(Proposal {
            pattern: with_port(pattern, &ports),
            covers: ports.iter().map(|p| show(&(h.clone(), *p))).collect(),
        });
    }
    out
}

/// The proposal as a `[network]` section to paste.
pub fn render(proposals: &[Proposal]) -> String {
    let mut s = String::from("[network]\nallow = [\n");
    for p in proposals {
        s.push_str(&format!("  \"{}\",  # {}\n", p.pattern, p.covers.join(", ")));
    }
    s.push_str("]\n");
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(items: &[(&str, u16)]) -> Vec<(String, u16)> {
        items.iter().map(|(h, p)| (h.to_string(), *p)).collect()
    }

    #[test]
    fn registrable_domains_follow_the_public_suffixes() {
        assert_eq!(registrable("a.b.example.com").as_deref(), Some("example.com"));
        assert_eq!(registrable("example.com").as_deref(), Some("example.com"));
        assert_eq!(registrable("x.example.co.uk").as_deref(), Some("example.co.uk"));
        assert_eq!(registrable("com"), None);
        assert_eq!(registrable("co.uk"), None);
    }

    #[test]
    fn several_subdomains_become_a_wildcard_and_lone_hosts_stay_exact() {
        let p = propose(&seen(&[
            ("a.learn.test", 443),
            ("b.learn.test", 443),
            ("c.learn.test", 80),
            ("other.example", 443),
            ("files.example.org", 8443),
            ("203.0.113.7", 22),
        ]));
        let patterns: Vec<&str> = p.iter().map(|p| p.pattern.as_str()).collect();
        assert_eq!(
            patterns,
            ["files.example.org:8443", "*.learn.test", "other.example", "203.0.113.7:22"]
        );
        assert_eq!(p[1].covers, ["a.learn.test:443", "b.learn.test:443", "c.learn.test:80"]);
        // Every proposal is a valid allow pattern.
        for pr in &p {
            DomainPattern::parse(&pr.pattern, PatternUse::Allow).unwrap();
        }
    }

    #[test]
    fn the_apex_is_listed_beside_its_wildcard() {
        let p = propose(&seen(&[("x.ex.test", 443), ("y.ex.test", 443), ("ex.test", 443)]));
        let patterns: Vec<&str> = p.iter().map(|p| p.pattern.as_str()).collect();
        assert_eq!(patterns, ["*.ex.test", "ex.test"]);
        assert!(render(&p).contains("\"*.ex.test\",  # x.ex.test:443, y.ex.test:443\n"));
    }
}
