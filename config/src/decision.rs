//! Decisions and the rules that make them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::pattern::DomainPattern;

/// Where a rule came from, so a decision can say who to talk to about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleSource {
    /// Built into a tier's defaults.
    Tier(String),
    /// A named preset (e.g. `registries`).
    Preset(String),
    /// A configuration file (global or per-directory), with the line of the entry.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line of the entry.
        line: usize,
    },
    /// A command-line flag.
    CommandLine,
    /// A grant a person gave (stored by the daemon), by its id.
    Grant(String),
    /// The tier has no network at all.
    NoNetwork(String),
    /// The directory the sandbox was started in.
    CurrentDirectory,
    /// sandgate's built-in defaults.
    Builtin,
    /// An environment variable.
    Env(String),
    /// The managed layer (`/etc/sandgate/managed.toml`), with the line of the entry: an
    /// administrator's rule that no user setting, flag or answer can widen.
    Managed {
        /// The managed file.
        path: PathBuf,
        /// 1-based line of the entry.
        line: usize,
    },
    /// The managed layer's allow ceiling (`allow_only_managed = true`): the destination is not in
    /// its allow list, so nothing may allow it.
    ManagedCeiling(PathBuf),
}

impl RuleSource {
    /// Whether the managed layer made this rule (so it is the organisation's, not the user's).
    pub fn is_managed(&self) -> bool {
        match self {
            RuleSource::Managed { .. } | RuleSource::ManagedCeiling(_) => true,
            RuleSource::Tier(_)
            | RuleSource::Preset(_)
            | RuleSource::File { .. }
            | RuleSource::CommandLine
            | RuleSource::Grant(_)
            | RuleSource::NoNetwork(_)
            | RuleSource::CurrentDirectory
            | RuleSource::Builtin
            | RuleSource::Env(_) => false,
        }
    }
}

impl fmt::Display for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleSource::Tier(t) => write!(f, "tier {t}"),
            RuleSource::Preset(p) => write!(f, "preset {p}"),
            RuleSource::File { path, line } => write!(f, "{}:{line}", path.display()),
            RuleSource::CommandLine => f.write_str("command line"),
            RuleSource::Grant(id) => write!(f, "grant {id}"),
            RuleSource::NoNetwork(t) => write!(f, "tier {t} has no network"),
            RuleSource::CurrentDirectory => f.write_str("current directory"),
            RuleSource::Builtin => f.write_str("built-in"),
            RuleSource::Env(v) => write!(f, "${v}"),
            RuleSource::Managed { path, line } => {
                write!(f, "your organisation's policy, {}:{line}", path.display())
            }
            RuleSource::ManagedCeiling(path) => {
                write!(f, "your organisation's policy allows only its own list, {}", path.display())
            }
        }
    }
}

/// One allow or deny entry: a pattern and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What it matches (`None` for "no network", which matches everything).
    pub pattern: Option<DomainPattern>,
    /// Where it came from.
    pub source: RuleSource,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{p} ({})", self.source),
            None => write!(f, "{}", self.source),
        }
    }
}

/// The outcome of checking a destination, carrying the rule that decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it through, because of this rule.
    Allow(Arc<Rule>),
    /// Refuse it, because of this rule.
    Deny(Arc<Rule>),
    /// No rule decides: ask a person.
    Ask,
}

impl Decision {
    /// `allow`, `deny` or `ask`.
    pub fn verb(&self) -> &'static str {
        match self {
            Decision::Allow(_) => "allow",
            Decision::Deny(_) => "deny",
            Decision::Ask => "ask",
        }
    }

    /// The deciding rule, if any.
    pub fn rule(&self) -> Option<&Rule> {
        match self {
            Decision::Allow(r) | Decision::Deny(r) => Some(r),
            Decision::Ask => None,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allow(r) => write!(f, "allow: {r}"),
            Decision::Deny(r) => write!(f, "deny: {r}"),
            Decision::Ask => f.write_str("ask: no rule matches; a person must approve"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::PatternUse;

    /// How a decision and its rule's origin read in a refusal, an event and `sandgate check`:
    /// the person must be able to find the rule from it.
    #[test]
    fn a_decision_names_its_rule_and_where_it_came_from() {
        let rule = |source| {
            let pattern = Some(DomainPattern::parse("example.com:443", PatternUse::Deny).unwrap());
            Arc::new(Rule { pattern, source })
        };
        let file = RuleSource::File { path: "/etc/sg.toml".into(), line: 7 };
        for (decision, shown) in [
            (
                Decision::Allow(rule(RuleSource::Tier("net".into()))),
                "allow: example.com:443 (tier net)",
            ),
            (
                Decision::Deny(rule(RuleSource::Preset("reg".into()))),
                "deny: example.com:443 (preset reg)",
            ),
            (Decision::Deny(rule(file)), "deny: example.com:443 (/etc/sg.toml:7)"),
            (
                Decision::Allow(rule(RuleSource::CommandLine)),
                "allow: example.com:443 (command line)",
            ),
            (
                Decision::Allow(rule(RuleSource::Grant("g1".into()))),
                "allow: example.com:443 (grant g1)",
            ),
            (
                Decision::Allow(rule(RuleSource::CurrentDirectory)),
                "allow: example.com:443 (current directory)",
            ),
            (Decision::Deny(rule(RuleSource::Builtin)), "deny: example.com:443 (built-in)"),
            (
                Decision::Deny(rule(RuleSource::Env("SG_DENY".into()))),
                "deny: example.com:443 ($SG_DENY)",
            ),
            (
                Decision::Deny(Arc::new(Rule {
                    pattern: None,
                    source: RuleSource::NoNetwork("run".into()),
                })),
                "deny: tier run has no network",
            ),
            (
                Decision::Deny(rule(RuleSource::Managed { path: "/etc/m.toml".into(), line: 3 })),
                "deny: example.com:443 (your organisation's policy, /etc/m.toml:3)",
            ),
            (
                Decision::Deny(Arc::new(Rule {
                    pattern: None,
                    source: RuleSource::ManagedCeiling("/etc/m.toml".into()),
                })),
                "deny: your organisation's policy allows only its own list, /etc/m.toml",
            ),
            (Decision::Ask, "ask: no rule matches; a person must approve"),
        ] {
            assert_eq!(decision.to_string(), shown);
        }
    }
}
