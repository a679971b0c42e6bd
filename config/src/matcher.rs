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
