//! Arbitrary bytes as the first request head of a connection, through the decision path.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sandgate_config::{DomainPattern, NetMode, NetworkPolicy, PatternUse, Rule, RuleSource, Target};
use sandgate_proxy::head::{connect_target, parse_head, MAX_HEAD_BYTES};
use sandgate_proxy::{Refusal, render_refusal};

fn policy() -> &'static NetworkPolicy {
    static P: OnceLock<NetworkPolicy> = OnceLock::new();
    P.get_or_init(|| {
        let rule = |p: &str, u| Rule {
            pattern: Some(DomainPattern::parse(p, u).unwrap()),
            source: RuleSource::CommandLine,
        };
        NetworkPolicy::new(
            "net",
            NetMode::Proxy,
            vec![rule("crates.io", PatternUse::Allow), rule("*.github.com:443", PatternUse::Allow)],
            vec![rule("evil.example", PatternUse::Deny), rule("10.0.0.0/8", PatternUse::Deny)],
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(Some(head)) = parse_head(data, MAX_HEAD_BYTES) else { return };
    let target = if head.is_connect() {
        connect_target(&head)
    } else {
        Target::parse(&head.target)
    };
    match target {
        Ok(t) => {
            let d = policy().decide(&t);
            if let Some(rule) = d.rule() {
                let r = Refusal::Deny { target: t.to_string(), rule: std::sync::Arc::new(rule.clone()) };
                let _ = render_refusal(&r, policy()).to_bytes();
            }
        }
        Err(e) => {
            let r = Refusal::Malformed { input: head.target.clone(), why: e.to_string() };
            let _ = render_refusal(&r, policy()).to_bytes();
        }
    }
});
