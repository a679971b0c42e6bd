//! Decision time over 10,000 patterns (exact, wildcard, CIDR mix).

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sandgate_config::{
    DomainPattern, Host, NetMode, NetworkPolicy, PatternUse, Rule, RuleSource, Target,
};

fn policy(n: usize) -> NetworkPolicy {
    let mut allow = Vec::with_capacity(n);
    for i in 0..n {
        let text = match i % 4 {
            0 => format!("host{i}.example{}.com", i % 97),
            1 => format!("*.svc{i}.internal{}.net", i % 89),
            2 => format!("api{i}.corp{}.org:8443", i % 83),
            _ => format!("10.{}.{}.0/24", (i / 256) % 256, i % 256),
        };
        let pattern = DomainPattern::parse(&text, PatternUse::Allow).unwrap();
        allow.push(Rule { pattern: Some(pattern), source: RuleSource::Builtin });
    }
    let deny = vec![Rule {
        pattern: Some(DomainPattern::parse("*.evil.example.com", PatternUse::Deny).unwrap()),
        source: RuleSource::Builtin,
    }];
    NetworkPolicy::new("bench", NetMode::Proxy, allow, deny)
}

fn bench(c: &mut Criterion) {
    let policy = policy(10_000);
    let cases = [
        ("exact_hit", "host4000.example23.com:443"),
        ("wildcard_hit_deep", "a.b.c.svc4001.internal85.net:443"),
        ("miss_ask", "unknown.host.nowhere.example:443"),
        ("cidr_hit", "10.15.160.7:443"),
    ];
    for (name, target) in cases {
        let target = Target::parse(target).unwrap();
        c.bench_function(&format!("decide_10k/{name}"), |b| {
            b.iter(|| black_box(policy.decide(black_box(&target))))
        });
    }
    c.bench_function("parse_and_decide_10k/wildcard_hit", |b| {
        b.iter(|| {
            let t = Target::parse(black_box("A.B.svc4001.internal85.net.:443")).unwrap();
            black_box(policy.decide(&t))
        })
    });
    c.bench_function("host_parse/idn", |b| {
        b.iter(|| black_box(Host::parse(black_box("bücher.example"))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
