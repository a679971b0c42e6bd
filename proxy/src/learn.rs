//! The approver of `sandgate learn`: answers every question at once, by policy instead of a
//! person, and records what was asked (the proposal is `sandgate_config::learn::propose`).
//!
//! Deny rules and the address guard run before any question, so even the allowing learner never
//! lets a command reach loopback, private or metadata addresses. What the guard refused is
//! recorded too ([`Learner::guard_refusals`]): allowing those names would not help, so they are
//! reported apart from the proposal.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use sandgate_config::{DomainPattern, PatternUse, Rule, RuleSource};

use crate::{ApprovalRequest, Approver, BoxFuture, DenyReason, Ruling};

/// The learn policy, as the proxy's approver: answers at once and records what was asked.
#[derive(Debug, Default)]
pub struct Learner {
    allow: bool,
    seen: Mutex<BTreeSet<(String, u16)>>,
    /// The processes that asked, by destination (their executables' names).
    asked_by: Mutex<BTreeMap<(String, u16), BTreeSet<String>>>,
    refused: Mutex<BTreeSet<GuardRefusal>>,
}

/// A destination the address guard refused during a learning run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GuardRefusal {
    /// The name asked for (as normalised).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The first address the guard refused.
    pub ip: std::net::IpAddr,
    /// Why (`a loopback address`).
    pub why: String,
}

impl Learner {
    /// A learner that lets public destinations through (`allow`) or refuses them.
    pub fn new(allow: bool) -> Learner {
        Learner { allow, ..Learner::default() }
    }

    /// The destinations asked about so far (host as normalised, port), sorted.
    pub fn seen(&self) -> Vec<(String, u16)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Which processes asked for each destination (the names of their executables, sorted):
    /// only the destinations whose process was found.
    pub fn asked_by(&self) -> BTreeMap<(String, u16), BTreeSet<String>> {
        self.asked_by.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The destinations the address guard refused so far, sorted.
    pub fn guard_refusals(&self) -> Vec<GuardRefusal> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }
}

impl Approver for Learner {
    fn ask(&self, q: ApprovalRequest) -> BoxFuture<'_, Ruling> {
        let host = q.target.host.to_string();
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert((host.clone(), q.target.port));
        if let Some(p) = &q.process {
            let mut by = self.asked_by.lock().unwrap_or_else(|e| e.into_inner());
            by.entry((host.clone(), q.target.port)).or_default().insert(p.name().to_owned());
        }
        let answer = if self.allow {
            Ruling::Allow(Arc::new(Rule {
                pattern: DomainPattern::parse(&host, PatternUse::Allow).ok(),
                source: RuleSource::CommandLine,
            }))
        } else {
            Ruling::Deny(DenyReason::Denied)
        };
        Box::pin(async move { answer })
    }

    fn guard_refused(
        &self,
        _sandbox: &crate::SandboxId,
        target: &sandgate_config::Target,
        ip: std::net::IpAddr,
        why: crate::guard::Forbidden,
    ) {
        let r = GuardRefusal {
            host: target.host.to_string(),
            port: target.port,
            ip,
            why: why.to_string(),
        };
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).insert(r);
    }
}

#[cfg(test)]
mod tests {
    use sandgate_config::Target;

    use super::*;
    use crate::SandboxId;

    fn question(target: &str) -> ApprovalRequest {
        ApprovalRequest {
            sandbox: SandboxId::new("sg-1"),
            target: Target::parse(target).unwrap(),
            method: "CONNECT".into(),
            path: None,
            process: None,
        }
    }

    fn answer(l: &Learner, target: &str) -> Ruling {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(l.ask(question(target)))
    }

    #[test]
    fn the_refusing_learner_denies_and_records_each_destination_once() {
        let l = Learner::new(false);
        for t in ["b.example:443", "A.example:443", "b.example:443", "b.example:8443"] {
            assert_eq!(answer(&l, t), Ruling::Deny(DenyReason::Denied), "{t}");
        }
        let seen = l.seen();
        assert_eq!(
            seen,
            [("a.example".into(), 443), ("b.example".into(), 443), ("b.example".into(), 8443)]
        );
    }

    #[test]
    fn the_allowing_learner_allows_by_a_command_line_rule_for_that_host() {
        let l = Learner::new(true);
        let Ruling::Allow(rule) = answer(&l, "x.example:443") else { panic!("not allowed") };
        assert_eq!(rule.source, RuleSource::CommandLine);
        assert_eq!(rule.pattern.as_ref().map(ToString::to_string).as_deref(), Some("x.example"));
        assert_eq!(l.seen(), [("x.example".into(), 443)]);
    }
}
