//! Whether the guest-user fence holds: a pure reading of what `pfctl` shows, in the order pf
//! evaluates it, for one outgoing TCP or UDP packet of the guest user.
//!
//! The fence is a `quick` block in the anchor `com.apple/0.sandgate.u<UID>`; pf reaches it only
//! through the main ruleset's `anchor "com.apple/*"`, whose children it evaluates in the order
//! of their names (hence the `0.` that sorts the fence before Apple's `100.`, `200.`, ...
//! anchors). Anything that decides first for the guest's packet lets it out, silently:
//!
//! - a `pass ... quick` rule before the fence that may match it (outgoing or both directions,
//!   TCP or UDP, any interface: `on lo0` lets it reach every loopback service; a `user` other
//!   than the guest's does not match), in the main ruleset or in an anchor evaluated earlier
//!   (another `com.apple/` child whose name sorts first, a VPN's anchor);
//! - translation rules with `pass` (`nat pass`, `rdr pass`, `binat pass`): their packets skip
//!   the filter rules;
//! - `set skip on IF` (shown by `pfctl -s Interfaces -v` as `IF (skip)`): nothing on that
//!   interface is filtered (`lo0`: every loopback service; any other: the network);
//! - pf disabled (`pfctl -d`), the main ruleset reloaded without the anchor (`pfctl -f` of a
//!   VPN's pf.conf), the anchor flushed (`pfctl -a ... -F all`) or never loaded (a reboot).
//!
//! Each finding names the rule or setting that decided ([`Finding`]). Rules that cannot match
//! the guest's packet (`in`, other protocols, another user) and rules without `quick` (the
//! fence's `quick` block still decides after them) are not findings.

use std::time::Duration;

/// How often the daemon (as root) checks each installed fence again: a `pfctl -d`, `-F all`
/// or a reloaded pf.conf is reported within this long.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(60);

/// The wildcard anchor rule of the stock `/etc/pf.conf` that evaluates the fence.
pub const WILDCARD: &str = "com.apple/*";

/// One entry of a ruleset listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A rule, as `pfctl` prints it.
    Rule(String),
    /// An `anchor "NAME" ...` rule and, when the listing shows them, its rules (`None`: not
    /// listed; for a wildcard anchor, its children are [`Entry::Anchor`]s named by their last
    /// component).
    Anchor {
        /// The anchor's name (`com.apple/*`, `250.ApplicationFirewall`).
        name: String,
        /// The rule line.
        line: String,
        /// What it evaluates, when known.
        rules: Option<Vec<Entry>>,
    },
}

/// What `pfctl` shows of the host's pf, read by [`Snapshot::parse`] and the glue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `Status: Enabled` / `Disabled` of `pfctl -s info` (`None`: not shown).
    pub enabled: Option<bool>,
    /// The main ruleset (filter rules), anchors with their rules where shown.
    pub rules: Vec<Entry>,
    /// Translation rules (`pfctl -s nat`).
    pub nat: Vec<String>,
    /// Interfaces pf skips (`set skip on`).
    pub skipped: Vec<String>,
}

/// Something that lets the guest's traffic past the fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule or setting (as `pfctl` shows it).
    pub rule: String,
    /// What it does to the fence.
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.rule, self.why)
    }
}

/// The answer for one fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceVerdict {
    /// pf evaluates the fence before anything that could pass the guest's traffic.
    Hold,
    /// The guest's traffic gets past: what lets it.
    Leak(Vec<Finding>),
}

impl FenceVerdict {
    /// The findings (none when the fence holds).
    pub fn findings(&self) -> &[Finding] {
        match self {
            FenceVerdict::Hold => &[],
            FenceVerdict::Leak(f) => f,
        }
    }
}

impl Snapshot {
    /// Reads `pfctl` output: `-s rules` (flat), `-s rules -a '*'` (anchors nested in braces),
    /// `-s all` (sections: `FILTER RULES:`, `TRANSLATION RULES:`, `INFO:`), `-s info`,
    /// `-s Interfaces -v` (`IF (skip)`) and `set skip on` lines, in any mix.
    pub fn parse(text: &str) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut section = Section::Filter;
        let mut stack: Vec<(String, String, Vec<Entry>)> = Vec::new();
        let mut top: Vec<Entry> = Vec::new();
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(s) = Section::of_header(line) {
                section = s;
                continue;
            }
            if let Some(status) = line.strip_prefix("Status:") {
                let w = status.split_whitespace().next().unwrap_or("");
                snap.enabled = Some(w.eq_ignore_ascii_case("enabled"));
                continue;
            }
            if let Some(rest) = line.strip_prefix("set skip on") {
                snap.skipped.extend(
                    rest.split(|c: char| c.is_whitespace() || c == '{' || c == '}' || c == ',')
                        .filter(|w| !w.is_empty())
                        .map(str::to_owned),
                );
                continue;
            }
            if let Some(iface) = line.strip_suffix("(skip)") {
                snap.skipped.push(iface.trim().to_owned());
                continue;
            }
            match section {
                Section::Filter => {}
                Section::Nat => {
                    snap.nat.push(line.to_owned());
                    continue;
                }
                Section::Other => continue,
            }
            let push = |stack: &mut Vec<(String, String, Vec<Entry>)>,
                        top: &mut Vec<Entry>,
                        e: Entry| match stack.last_mut() {
                Some((_, _, rules)) => rules.push(e),
                None => top.push(e),
            };
            if line == "}" {
                if let Some((name, l, rules)) = stack.pop() {
                    push(&mut stack, &mut top, Entry::Anchor { name, line: l, rules: Some(rules) });
                }
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match (words.first(), anchor_name(line)) {
                (Some(&"anchor"), Some(name)) => {
                    let opens = line.ends_with('{');
                    let l = line.trim_end_matches('{').trim_end().to_owned();
                    if opens {
                        stack.push((name, l, Vec::new()));
                    } else {
                        push(&mut stack, &mut top, Entry::Anchor { name, line: l, rules: None });
                    }
                }
                _ if is_filter_rule(&words) => {
                    push(&mut stack, &mut top, Entry::Rule(line.to_owned()))
                }
                _ => {}
            }
        }
        while let Some((name, l, rules)) = stack.pop() {
            let e = Entry::Anchor { name, line: l, rules: Some(rules) };
            match stack.last_mut() {
                Some((_, _, r)) => r.push(e),
                None => top.push(e),
            }
        }
        snap.rules = top;
        snap
    }

    /// Sets the rules of the main ruleset's `anchor "com.apple/*"` to `children` (name under
    /// `com.apple/`, that anchor's `pfctl -s rules` output), when the listing did not nest them.
    pub fn with_children(mut self, children: &[(String, String)]) -> Snapshot {
        for e in &mut self.rules {
            if let Entry::Anchor { name, rules: rules @ None, .. } = e
                && name == WILDCARD
            {
                *rules = Some(
                    children
                        .iter()
                        .map(|(n, text)| Entry::Anchor {
                            name: n.clone(),
                            line: format!("anchor \"{n}\" all"),
                            rules: Some(Snapshot::parse(text).rules),
                        })
                        .collect(),
                );
            }
        }
        self
    }
}

#[derive(Debug, Clone, Copy)]
enum Section {
    Filter,
    Nat,
    Other,
}

impl Section {
    /// `pfctl -s all` section headers (`FILTER RULES:`, ...).
    fn of_header(line: &str) -> Option<Section> {
        let head = line.strip_suffix(':')?;
        if !head.chars().all(|c| c.is_ascii_uppercase() || c == ' ') {
            return None;
        }
        Some(match head {
            "FILTER RULES" => Section::Filter,
            "TRANSLATION RULES" | "NAT RULES" => Section::Nat,
            _ => Section::Other,
        })
    }
}

fn is_filter_rule(words: &[&str]) -> bool {
    matches!(words.first(), Some(&("pass" | "block" | "match" | "scrub" | "scrub-anchor")))
}

/// The quoted name of an `anchor "NAME" ...` line.
fn anchor_name(line: &str) -> Option<String> {
    let rest = line.strip_prefix("anchor")?.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// Whether the fence of `uid` in `com.apple/OURS` holds in `snap`.
pub fn verify(snap: &Snapshot, ours: &str, uid: u32) -> FenceVerdict {
    let mut findings = Vec::new();
    if snap.enabled == Some(false) {
        findings.push(Finding {
            rule: "Status: Disabled".into(),
            why: "pf is disabled (`pfctl -d`): nothing is filtered".into(),
        });
    }
    for iface in snap.skipped.iter().filter(|i| !i.starts_with("pflog")) {
        let why = if iface.starts_with("lo") {
            "pf does not filter loopback: the guest reaches every local service, not only the proxy"
        } else {
            "pf does not filter this interface: the guest's traffic on it leaves unchecked"
        };
        findings.push(Finding { rule: format!("set skip on {iface}"), why: why.into() });
    }
    for rule in &snap.nat {
        let w: Vec<&str> = rule.split_whitespace().collect();
        if matches!(w.first(), Some(&("nat" | "rdr" | "binat"))) && w.get(1) == Some(&"pass") {
            findings.push(Finding {
                rule: rule.clone(),
                why: "translated packets with `pass` skip the filter rules, the fence included"
                    .into(),
            });
        }
    }
    match walk(&snap.rules, Some(ours), uid, &mut findings) {
        Walk::Reached => {}
        Walk::Missing => findings.push(Finding {
            rule: format!("anchor \"{WILDCARD}\""),
            why: format!(
                "the fence's anchor `com.apple/{ours}` is not loaded (flushed, or gone at a reboot)"
            ),
        }),
        Walk::NotReached => findings.push(Finding {
            rule: format!("anchor \"{WILDCARD}\""),
            why: "it is not in the main ruleset (a pf.conf without it was loaded): the fence is \
                  never evaluated"
                .into(),
        }),
    }
    if findings.is_empty() { FenceVerdict::Hold } else { FenceVerdict::Leak(findings) }
}

/// Whether the main ruleset `rules` (`pfctl -s rules`) evaluates `anchor "com.apple/*"` for
/// the guest's outgoing traffic before anything could pass it (the fence itself not looked at).
pub fn check_main(rules: &[Entry], uid: u32) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Walk::NotReached = walk(rules, None, uid, &mut findings) {
        findings.push(Finding {
            rule: format!("anchor \"{WILDCARD}\""),
            why: "it is not in the main ruleset".into(),
        });
    }
    findings
}

enum Walk {
    /// The fence (or, looking for none, the wildcard anchor) was reached.
    Reached,
    /// The wildcard anchor was reached but the fence is not among its children.
    Missing,
    /// Neither.
    NotReached,
}

/// Walks `rules` in evaluation order, collecting the rules that decide for the guest's packet
/// first, until the fence (`ours` under the wildcard anchor) is reached.
fn walk(rules: &[Entry], ours: Option<&str>, uid: u32, findings: &mut Vec<Finding>) -> Walk {
    for e in rules {
        match e {
            Entry::Rule(text) => {
                if passes_first(text, uid) {
                    findings.push(Finding {
                        rule: text.clone(),
                        why: "it passes the guest's traffic before the fence is evaluated".into(),
                    });
                }
            }
            Entry::Anchor { name, line, rules } if name == WILDCARD => {
                let extra: Vec<&str> = line
                    .split_whitespace()
                    .skip(2)
                    .filter(|w| *w != "all" && *w != "out")
                    .collect();
                if !extra.is_empty() {
                    findings.push(Finding {
                        rule: line.clone(),
                        why: "it does not evaluate the fence for all outgoing traffic".into(),
                    });
                    return Walk::Reached;
                }
                let (Some(ours), Some(children)) = (ours, rules) else { return Walk::Reached };
                let mut sorted: Vec<&Entry> = children.iter().collect();
                sorted.sort_by(|a, b| child_name(a).cmp(child_name(b)));
                for child in sorted {
                    match child {
                        Entry::Anchor { name, rules, .. } if name == ours => {
                            let blocks = rules
                                .as_deref()
                                .unwrap_or(&[])
                                .iter()
                                .any(|r| matches!(r, Entry::Rule(t) if is_fence_block(t, uid)));
                            if !blocks {
                                findings.push(Finding {
                                    rule: format!("anchor \"com.apple/{ours}\""),
                                    why: "it holds no block rule for the guest (flushed with \
                                          `pfctl -a ... -F all`)"
                                        .into(),
                                });
                            }
                            return Walk::Reached;
                        }
                        Entry::Anchor { rules: Some(r), .. } => {
                            let _ = walk(r, None, uid, findings);
                        }
                        Entry::Anchor { rules: None, .. } | Entry::Rule(_) => {}
                    }
                }
                return Walk::Missing;
            }
            Entry::Anchor { line, rules, .. } => {
                let words: Vec<&str> = line.split_whitespace().collect();
                let inbound = words.contains(&"in") && !words.contains(&"out");
                if let (false, Some(r)) = (inbound, rules) {
                    match walk(r, ours, uid, findings) {
                        Walk::NotReached => {}
                        found => return found,
                    }
                }
            }
        }
    }
    Walk::NotReached
}

fn child_name(e: &Entry) -> &str {
    match e {
        Entry::Anchor { name, .. } => name.rsplit('/').next().unwrap_or(name),
        Entry::Rule(t) => t,
    }
}

/// Whether `rule` is a `pass ... quick` that may match an outgoing TCP or UDP packet of `uid`.
fn passes_first(rule: &str, uid: u32) -> bool {
    let w: Vec<&str> = rule.split_whitespace().collect();
    if w.first() != Some(&"pass") || !w.contains(&"quick") {
        return false;
    }
    if w.contains(&"in") && !w.contains(&"out") {
        return false;
    }
    if let Some(protos) = value_after(&w, "proto")
        && !protos.iter().any(|p| matches!(*p, "tcp" | "udp" | "6" | "17"))
    {
        return false;
    }
    match user_test(&w) {
        Some(UserTest::Is(u)) => u == uid,
        Some(UserTest::IsNot(u)) => u != uid,
        None => true,
    }
}

/// Whether `rule` is the fence's block (`block ... quick ... user = UID`, TCP or UDP).
fn is_fence_block(rule: &str, uid: u32) -> bool {
    let w: Vec<&str> = rule.split_whitespace().collect();
    let inbound_only = w.contains(&"in") && !w.contains(&"out");
    w.first() == Some(&"block")
        && w.contains(&"quick")
        && !inbound_only
        && matches!(user_test(&w), Some(UserTest::Is(u)) if u == uid)
}

enum UserTest {
    Is(u32),
    IsNot(u32),
}

/// The `user` condition of a rule when it is one uid (`user = 501`, `user 501`, `user != 501`);
/// `None` for none, names, lists and ranges (they may match the guest).
fn user_test(w: &[&str]) -> Option<UserTest> {
    let i = w.iter().position(|x| *x == "user")?;
    match (w.get(i + 1), w.get(i + 2)) {
        (Some(&"="), Some(n)) => n.parse().ok().map(UserTest::Is),
        (Some(&"!="), Some(n)) => n.parse().ok().map(UserTest::IsNot),
        (Some(n), _) => n.parse().ok().map(UserTest::Is),
        (None, _) => None,
    }
}

/// The value(s) after `key`: one word, or the words of a `{ ... }` list.
fn value_after<'a>(w: &[&'a str], key: &str) -> Option<Vec<&'a str>> {
    let i = w.iter().position(|x| *x == key)?;
    let first = *w.get(i + 1)?;
    if first != "{" {
        return Some(vec![first.trim_matches(|c| c == '{' || c == '}' || c == ',')]);
    }
    Some(
        w[i + 2..]
            .iter()
            .take_while(|x| **x != "}")
            .map(|x| x.trim_matches(','))
            .filter(|x| !x.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests;
