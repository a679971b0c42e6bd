//! A compiled set of patterns: hash lookups instead of a scan, so a decision over 10,000 patterns
//! costs a handful of hash probes (one per label of the host), not 10,000 comparisons.
//!
//! Why not globset: our patterns have exactly two name shapes (exact, `*.` suffix), and both are
//! answered by hashing the host and each of its label-aligned suffixes. That is cheaper than a
//! regex-automaton scan and cannot be fooled by glob metacharacters in names.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::decision::Rule;
use crate::host::{DomainName, Host};
use crate::pattern::{HostPattern, mask};

/// Patterns compiled for lookup. The first matching rule wins in this order: exact name, the
/// longest matching `*.` suffix, exact IP, the longest matching CIDR, `*`. Within one key, a rule
/// for the exact port wins over a rule for every port.
#[derive(Clone, Debug, Default)]
pub struct PatternSet {
    exact: HashMap<DomainName, Entries>,
    suffix: HashMap<DomainName, Entries>,
    ips: HashMap<IpAddr, Entries>,
    /// Blocks grouped by (family, prefix length), longest prefix first; each group is a hash map
    /// from the masked network address, so a lookup costs one probe per distinct prefix length.
    cidrs: Vec<(bool, u8, HashMap<IpAddr, Entries>)>,
    any: Entries,
    rules: Vec<Arc<Rule>>,
}

/// Rules under one key: (port or every port, rule).
type Entries = Vec<(Option<u16>, Arc<Rule>)>;

impl PatternSet {
    /// Compiles rules (rules without a pattern are ignored).
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> PatternSet {
        let mut set = PatternSet::default();
        for rule in rules {
            set.insert(rule);
        }
        set
    }

    /// Adds one rule.
    pub fn insert(&mut self, rule: Rule) {
        let Some(pattern) = rule.pattern.clone() else { return };
        let rule = Arc::new(rule);
        self.rules.push(rule.clone());
        let entry = (pattern.port, rule);
        match pattern.host {
            HostPattern::Exact(n) => self.exact.entry(n).or_default().push(entry),
            HostPattern::Subdomains(n) => self.suffix.entry(n).or_default().push(entry),
            HostPattern::Ip(ip) => self.ips.entry(ip).or_default().push(entry),
            HostPattern::Cidr(net, len) => {
                let v4 = net.is_ipv4();
                let group = match self.cidrs.iter().position(|(f, l, _)| *f == v4 && *l == len) {
                    Some(i) => i,
                    None => {
                        self.cidrs.push((v4, len, HashMap::new()));
                        self.cidrs.sort_by_key(|g| std::cmp::Reverse(g.1));
                        self.cidrs.iter().position(|(f, l, _)| *f == v4 && *l == len).unwrap_or(0)
                    }
                };
                self.cidrs[group].2.entry(net).or_default().push(entry);
            }
            HostPattern::Any => self.any.push(entry),
        }
    }

    /// All rules, in insertion order.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// Whether the set has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule that matches `host:port`, if any.
    pub fn find(&self, host: &Host, port: u16) -> Option<&Arc<Rule>> {
        self.find_by(host, Ports::One(port))
    }

    /// The rule that matches `host` on at least one port (a rule for one port counts), if any:
    /// what a name lookup, which has no port, may be answered under.
    pub fn find_on_some_port(&self, host: &Host) -> Option<&Arc<Rule>> {
        self.find_by(host, Ports::Some)
    }

    /// The rule written without a port that matches `host`, if any: what matches it on every
    /// port.
    pub fn find_on_every_port(&self, host: &Host) -> Option<&Arc<Rule>> {
        self.find_by(host, Ports::Every)
    }

    fn find_by(&self, host: &Host, ports: Ports) -> Option<&Arc<Rule>> {
        let hit = match host {
            Host::Name(name) => self.find_name(name, ports),
            Host::Ip(ip) => self.find_ip(*ip, ports),
        };
        hit.or_else(|| pick(&self.any, ports))
    }

    fn find_name(&self, name: &DomainName, ports: Ports) -> Option<&Arc<Rule>> {
        if let Some(r) = self.exact.get(name).and_then(|e| pick(e, ports)) {
            return Some(r);
        }
        if self.suffix.is_empty() {
            return None;
        }
        // Each strict suffix after a dot, longest first: a.b.example.com → b.example.com, ...
        let text = name.as_str();
        for (i, _) in text.match_indices('.') {
            if let Some(r) = self.suffix.get(&text[i + 1..]).and_then(|e| pick(e, ports)) {
                return Some(r);
            }
        }
        None
    }

    fn find_ip(&self, ip: IpAddr, ports: Ports) -> Option<&Arc<Rule>> {
        if let Some(r) = self.ips.get(&ip).and_then(|e| pick(e, ports)) {
            return Some(r);
        }
        self.cidrs
            .iter()
            .filter(|(v4, _, _)| *v4 == ip.is_ipv4())
            .find_map(|(_, len, nets)| nets.get(&mask(ip, *len)).and_then(|e| pick(e, ports)))
    }
}

/// Which rules of a key a lookup takes.
#[derive(Clone, Copy, Debug)]
enum Ports {
    /// A rule for this port, else a rule for every port.
    One(u16),
    /// Any rule: for one port or for every port.
    Some,
    /// Only a rule for every port.
    Every,
}

/// The rule of `entries` that `ports` takes (see [`Ports`]).
fn pick(entries: &Entries, ports: Ports) -> Option<&Arc<Rule>> {
    let every = || entries.iter().find(|(p, _)| p.is_none());
    match ports {
        Ports::One(port) => entries.iter().find(|(p, _)| *p == Some(port)).or_else(every),
        Ports::Some => entries.first(),
        Ports::Every => every(),
    }
    .map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::RuleSource;
    use crate::pattern::{DomainPattern, PatternUse};

    /// The rules of `patterns`, in that order (deny-list syntax, so `*` and wide blocks parse).
    fn set(patterns: &[&str]) -> PatternSet {
        PatternSet::new(patterns.iter().map(|p| Rule {
            pattern: Some(DomainPattern::parse(p, PatternUse::Deny).unwrap()),
            source: RuleSource::CommandLine,
        }))
    }

    /// The pattern of the rule that decides `host:port`, as written back.
    fn found(set: &PatternSet, host: &str, port: u16) -> Option<String> {
        let host = Host::parse(host).unwrap();
        set.find(&host, port).and_then(|r| r.pattern.as_ref()).map(|p| p.to_string())
    }

    const RULES: &[&str] = &[
        "a.example.com",
        "*.example.com",
        "*.b.example.com",
        "10.1.2.3",
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.0/24",
        "2001:db8::/32",
        "2001:db8:1::/48",
        "[2001:db8::1]",
        "2001::/16", // as long as an IPv4 /16: a group of its own family
        "192.168.0.0/16",
    ];

    /// Each row: a host and port, the rule that decides (see [`PatternSet`] for the order).
    const WINNERS: &[(&str, u16, Option<&str>)] = &[
        ("a.example.com", 443, Some("a.example.com")),
        ("x.a.example.com", 443, Some("*.example.com")),
        ("x.b.example.com", 443, Some("*.b.example.com")), // the longest suffix
        ("b.example.com", 443, Some("*.example.com")),     // `*.b` is not its apex
        ("example.com", 443, None),
        ("example.org", 443, None),
        ("10.1.2.3", 443, Some("10.1.2.3")), // an address before any block
        ("10.1.2.4", 443, Some("10.1.2.0/24")),
        ("10.1.3.4", 443, Some("10.1.0.0/16")),
        ("10.2.3.4", 443, Some("10.0.0.0/8")),
        ("11.1.2.3", 443, None),
        ("192.168.4.4", 443, Some("192.168.0.0/16")),
        ("192.169.4.4", 443, None),
        ("[2001:db8::1]", 443, Some("[2001:db8::1]")),
        ("[2001:db8:1::5]", 443, Some("2001:db8:1::/48")),
        ("[2001:db8:2::5]", 443, Some("2001:db8::/32")),
        ("[2001:dead::5]", 443, Some("2001::/16")),
        ("[2002::5]", 443, None),
        ("[::ffff:10.1.3.4]", 443, Some("10.1.0.0/16")), // mapped: the IPv4 rules
        ("[::a01:304]", 443, None),                      // the same bits, but IPv6
    ];

    #[test]
    fn the_most_specific_rule_decides_whatever_the_order_rules_were_added() {
        let forward = set(RULES);
        let reversed: Vec<&str> = RULES.iter().rev().copied().collect();
        let backward = set(&reversed);
        for &(host, port, want) in WINNERS {
            assert_eq!(found(&forward, host, port).as_deref(), want, "{host}:{port}");
            assert_eq!(found(&backward, host, port).as_deref(), want, "{host}:{port} (reversed)");
        }
        assert_eq!(forward.rules().len(), RULES.len());
        assert!(!forward.is_empty());
        assert!(set(&[]).is_empty());
        assert!(set(&[]).rules().is_empty());
    }

    /// `*` decides only where no other rule does.
    #[test]
    fn everything_is_the_last_resort() {
        let s = set(&["*.example.com", "10.0.0.0/8", "*"]);
        assert_eq!(found(&s, "a.example.com", 1).as_deref(), Some("*.example.com"));
        assert_eq!(found(&s, "10.0.0.1", 1).as_deref(), Some("10.0.0.0/8"));
        assert_eq!(found(&s, "example.org", 1).as_deref(), Some("*"));
        assert_eq!(found(&s, "[::1]", 1).as_deref(), Some("*"));
    }

    /// Within one key the rule for the exact port wins; a rule for another port never decides.
    /// `find_on_some_port` takes either; `find_on_every_port` only a rule without a port.
    #[test]
    fn ports_within_one_key() {
        let s = set(&["p.test:443", "p.test", "only.test:22", "*.w.test:8080", "10.0.0.0/8:53"]);
        let h = |s: &str| Host::parse(s).unwrap();
        let text =
            |r: Option<&Arc<Rule>>| r.and_then(|r| r.pattern.as_ref()).map(|p| p.to_string());
        assert_eq!(found(&s, "p.test", 443).as_deref(), Some("p.test:443"));
        assert_eq!(found(&s, "p.test", 80).as_deref(), Some("p.test"));
        assert_eq!(found(&s, "only.test", 22).as_deref(), Some("only.test:22"));
        assert_eq!(found(&s, "only.test", 23), None);
        assert_eq!(found(&s, "a.w.test", 8080).as_deref(), Some("*.w.test:8080"));
        assert_eq!(found(&s, "a.w.test", 80), None);
        assert_eq!(found(&s, "10.9.9.9", 53).as_deref(), Some("10.0.0.0/8:53"));
        assert_eq!(found(&s, "10.9.9.9", 54), None);
        assert_eq!(text(s.find_on_some_port(&h("only.test"))).as_deref(), Some("only.test:22"));
        assert_eq!(text(s.find_on_some_port(&h("p.test"))).as_deref(), Some("p.test:443"));
        assert_eq!(text(s.find_on_some_port(&h("nope.test"))), None);
        assert_eq!(text(s.find_on_every_port(&h("only.test"))), None);
        assert_eq!(text(s.find_on_every_port(&h("p.test"))).as_deref(), Some("p.test"));
        assert_eq!(text(s.find_on_every_port(&h("10.9.9.9"))), None);
        assert_eq!(text(s.find_on_some_port(&h("10.9.9.9"))).as_deref(), Some("10.0.0.0/8:53"));
    }

    /// Rules without a pattern (no network) are not entries of the set.
    #[test]
    fn a_rule_without_a_pattern_is_ignored() {
        let s = PatternSet::new([Rule { pattern: None, source: RuleSource::CommandLine }]);
        assert!(s.is_empty());
        assert_eq!(found(&s, "example.com", 443), None);
    }
}
