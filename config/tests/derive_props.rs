//! Property tests: a derived child policy is never wider than its parent.

use std::path::PathBuf;

use proptest::prelude::*;
use sandgate_config::{
    Decision, DomainPattern, FsPolicy, Host, Narrowing, NetMode, NetworkPolicy, PathRule,
    PatternUse, Policy, Rule, RuleSource,
};

const LABELS: &[&str] = &["a", "b", "example", "test", "com", "org", "x"];

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(LABELS), 2..5).prop_map(|v| v.join("."))
}

fn pattern() -> impl Strategy<Value = String> {
    (name(), any::<bool>(), prop::option::of(prop::sample::select(&[443u16, 80, 8080][..])))
        .prop_map(|(n, wild, port)| {
            let base = if wild { format!("*.{n}") } else { n };
            match port {
                Some(p) => format!("{base}:{p}"),
                None => base,
            }
        })
}

fn rules(patterns: &[String], usage: PatternUse) -> Vec<Rule> {
    patterns
        .iter()
        .filter_map(|p| DomainPattern::parse(p, usage).ok())
        .map(|p| Rule { pattern: Some(p), source: RuleSource::Builtin })
        .collect()
}

fn policy(mode: NetMode, allow: &[String], deny: &[String], writable: &[&str]) -> Policy {
    Policy {
        tier: "t".into(),
        fs: FsPolicy {
            writable: writable
                .iter()
                .map(|p| PathRule { path: PathBuf::from(p), source: RuleSource::Builtin })
                .collect(),
            ..FsPolicy::default()
        },
        net: NetworkPolicy::new(
            "t",
            mode,
            rules(allow, PatternUse::Allow),
            rules(deny, PatternUse::Deny),
        ),
        env_pass: Vec::new(),
    }
}

proptest! {
    #[test]
    fn a_child_never_allows_what_its_parent_does_not(
        parent_allow in prop::collection::vec(pattern(), 0..6),
        parent_deny in prop::collection::vec(pattern(), 0..4),
        child_allow in prop::option::of(prop::collection::vec(pattern(), 0..6)),
        child_deny in prop::collection::vec(pattern(), 0..3),
        child_net in prop::option::of(prop::sample::select(&[NetMode::None, NetMode::Proxy][..])),
        parent_none in any::<bool>(),
        hosts in prop::collection::vec((name(), prop::sample::select(&[443u16, 80, 8080][..])), 1..12),
    ) {
        let mode = if parent_none { NetMode::None } else { NetMode::Proxy };
        let parent = policy(mode, &parent_allow, &parent_deny, &["/work"]);
        let narrowing = Narrowing {
            net: child_net,
            allow: child_allow.map(|v| v.iter().filter_map(|p| DomainPattern::parse(p, PatternUse::Allow).ok()).collect()),
            deny: child_deny.iter().filter_map(|p| DomainPattern::parse(p, PatternUse::Deny).ok()).collect(),
            ..Narrowing::default()
        };
        match parent.derive(&narrowing) {
            Err(e) => {
                // Refusals must say what was asked for and what the parent allows.
                prop_assert!(!e.requested.is_empty() && !e.parent_allows.is_empty());
            }
            Ok(child) => {
                for (h, port) in &hosts {
                    let host = Host::parse(h).unwrap();
                    let p = parent.net.decide_host(&host, *port);
                    let c = child.net.decide_host(&host, *port);
                    if let Decision::Allow(_) = c {
                        prop_assert!(matches!(p, Decision::Allow(_)), "child allows {h}:{port}, parent says {p}");
                    }
                    if let Decision::Deny(_) = p {
                        prop_assert!(matches!(c, Decision::Deny(_)), "parent denies {h}:{port}, child says {c}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_child_never_writes_where_its_parent_cannot(
        paths in prop::collection::vec(prop::sample::select(&["/work", "/work/sub", "/", "/etc", "/workx", "/work/../etc"][..]), 0..4),
    ) {
        let parent = policy(NetMode::Proxy, &[], &[], &["/work"]);
        let narrowing = Narrowing { writable: Some(paths.iter().map(PathBuf::from).collect()), ..Narrowing::default() };
        if let Ok(child) = parent.derive(&narrowing) {
            for w in &child.fs.writable {
                prop_assert!(parent.fs.is_writable(&w.path), "{}", w.path.display());
                prop_assert!(!w.path.components().any(|c| c == std::path::Component::ParentDir));
            }
        }
    }
}

#[test]
fn escalation_error_says_what_and_how() {
    let parent = policy(NetMode::None, &[], &[], &["/work"]);
    let e = parent
        .derive(&Narrowing { net: Some(NetMode::Proxy), ..Narrowing::default() })
        .unwrap_err();
    assert!(e.to_string().contains("no network"), "{e}");
    let parent = policy(NetMode::Proxy, &["*.example.com".into()], &[], &["/work"]);
    let e = parent
        .derive(&Narrowing {
            allow: Some(vec![DomainPattern::parse("evil.org", PatternUse::Allow).unwrap()]),
            ..Narrowing::default()
        })
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("evil.org")
            && text.contains("*.example.com")
            && text.contains("sandgate allow"),
        "{text}"
    );
}
