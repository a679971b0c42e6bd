//! The traffic log as `sandgate log` shows it: one [`TrafficLine`] per proxied connection or
//! request (allowed and refused) and per burst of blocked packets, the filters `--host`,
//! `--decision` and `--sandbox` apply ([`TrafficFilter`]), the paged read of the newest lines
//! that pass them ([`Store::traffic_lines`]), and the per-host summary rows ([`HostRow`]).
//!
//! Past a sandbox's cap on stored events (the daemon's `event_cap`), two kinds of line stand for
//! traffic whose hosts they do not all name: refusals not stored ([`NOT_STORED`]) and requests
//! let through to destinations past the ones counted apart ([`OTHER_HOSTS`]). Every `--host`
//! filter keeps them: they may include that host.
//!
//! The events themselves are the daemon's protocol type, which this crate does not know: the
//! caller turns a stored event into a line. Text renderings are here because `sandgate log` and
//! `sandgate watch` print the same lines.

use std::collections::HashMap;

use sandgate_config::{DomainPattern, Host, ProcessInfo, sanitize};
use serde::Serialize;

use crate::{HostSummary, Store, StoreError, StoredEvent, Timestamp, TrafficDecision};

/// The host of the line that counts a sandbox's refusals the cap did not store (one per wall:
/// decision `deny` for the proxy's and the DNS stub's, `blocked` for the firewall's).
pub const NOT_STORED: &str = "(not stored)";

/// The host of the line that counts the requests a sandbox got through, past the cap, to
/// destinations past those counted one by one (its rule names some of them).
pub const OTHER_HOSTS: &str = "(other hosts)";

/// One line of the log, whatever it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficLine {
    /// When (epoch milliseconds).
    pub time: i64,
    /// The sandbox's id.
    pub sandbox: String,
    /// Let through, refused by the proxy, or blocked by the firewall.
    pub decision: TrafficDecision,
    /// `CONNECT`, `GET`, ..., `DNS`, or the protocol of blocked packets.
    pub method: String,
    /// The host (or address).
    pub host: String,
    /// The port (`None` for a name lookup).
    pub port: Option<u16>,
    /// Path and query of a plain-HTTP request.
    pub path: Option<String>,
    /// The sandbox's command line, when the store knows the sandbox.
    pub command: Option<Vec<String>>,
    /// The process in the sandbox that opened the connection, when it was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessInfo>,
    /// The rule that decided (and the upstream error, if any).
    pub rule: String,
    /// Bytes sent.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    /// Duration in milliseconds.
    pub ms: f64,
    /// What the line stands for (1 but for these): packets in a burst of blocked ones,
    /// refusals a DNS summary or a [`NOT_STORED`] line counts, requests a summary of what was
    /// let through past the cap counts (its bytes and duration are their sums).
    pub count: u64,
}

impl TrafficLine {
    /// The line as text: time, sandbox, decision, method, host:port and path, bytes and duration
    /// (or the count, with the bytes of what was let through), the rule, and the command line
    /// last. Everything that came from a sandbox is sanitised.
    pub fn text(&self) -> String {
        let host = match (self.host.contains(':'), self.port) {
            (true, Some(p)) => format!("[{}]:{p}", self.host),
            (false, Some(p)) => format!("{}:{p}", self.host),
            (_, None) => self.host.clone(),
        };
        let host = host + self.path.as_deref().unwrap_or("");
        let counted = self.decision == TrafficDecision::Blocked
            || self.count > 1
            || self.host == NOT_STORED
            || self.host == OTHER_HOSTS;
        let what = if counted && self.decision == TrafficDecision::Allow {
            format!("x{} ↑{} ↓{}", self.count, self.bytes_up, self.bytes_down)
        } else if counted {
            format!("x{}", self.count)
        } else {
            format!("↑{} ↓{} {:.0}ms", self.bytes_up, self.bytes_down, self.ms)
        };
        // Who opened it: `curl` (pid 7), by the executable the kernel names.
        let process = match &self.process {
            Some(p) => format!(" by {p}"),
            None => String::new(),
        };
        // The command line is the sandbox's own text: last and quoted, so it cannot pose as
        // the host or the decision (as in the approval prompts).
        let command = match &self.command {
            Some(argv) => {
                let mut c: String = argv.join(" ").chars().take(80).collect();
                if c.len() < argv.join(" ").len() {
                    c.push('…');
                }
                format!(" {:?}", sanitize(&c))
            }
            None => String::new(),
        };
        format!(
            "{} {} {:<7} {:<7} {} {} [{}]{process}{command}",
            clock(self.time),
            sanitize(&self.sandbox),
            self.decision.as_str(),
            sanitize(&self.method),
            sanitize(&host),
            what,
            sanitize(&self.rule)
        )
    }
}

/// `HH:MM:SS.mmm` UTC of epoch milliseconds (the date is in the JSON form).
pub fn clock(ms: i64) -> String {
    let day = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

/// What `--host`, `--decision` and `--sandbox` keep; `Default` keeps everything.
#[derive(Debug, Clone, Default)]
pub struct TrafficFilter {
    /// Only hosts this pattern matches.
    pub host: Option<DomainPattern>,
    /// Only this decision.
    pub decision: Option<TrafficDecision>,
    /// Only this sandbox.
    pub sandbox: Option<String>,
}

impl TrafficFilter {
    /// Whether `l` passes every filter.
    pub fn keeps(&self, l: &TrafficLine) -> bool {
        let decision = self.decision.is_none_or(|d| d == l.decision);
        let sandbox = self.sandbox.as_ref().is_none_or(|s| *s == l.sandbox);
        decision && sandbox && self.keeps_host(&l.host, l.port.unwrap_or(0))
    }

    /// Whether `host` (on `port`; 0 for any) passes `--host`. [`NOT_STORED`] and
    /// [`OTHER_HOSTS`] always do: they may stand for that host.
    pub fn keeps_host(&self, host: &str, port: u16) -> bool {
        match &self.host {
            None => true,
            Some(_) if host == NOT_STORED || host == OTHER_HOSTS => true,
            Some(p) => Host::parse(host).is_ok_and(|h| p.matches(&h, port)),
        }
    }
}

/// Sandbox id → command line, from the store's sandbox rows (the events name only the id).
#[derive(Debug, Default)]
pub struct SandboxCommands {
    store: Option<Store>,
    known: HashMap<String, Vec<String>>,
}

impl SandboxCommands {
    /// Command lines read from `store` (none without one).
    pub fn new(store: Option<Store>) -> SandboxCommands {
        SandboxCommands { store, known: HashMap::new() }
    }

    /// Whether there is a store to read from.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Reads from `store` from now on (it was created after this was made).
    pub fn set_store(&mut self, store: Option<Store>) {
        self.store = store;
    }

    /// Fills in `l.command`. A sandbox not (yet) in the store is asked again next time: its row
    /// may still be on its way to the disk.
    pub fn fill(&mut self, l: &mut TrafficLine) {
        if !self.known.contains_key(&l.sandbox)
            && let Some(Ok(Some(r))) = self.store.as_ref().map(|s| s.sandbox(&l.sandbox))
        {
            self.known.insert(l.sandbox.clone(), r.sandbox.command);
        }
        l.command = self.known.get(&l.sandbox).cloned();
    }
}

impl Store {
    /// The newest `limit` stored traffic lines that pass `filter`, oldest first, from `since`
    /// on. `line_of` turns a stored event into its line (`None`: not traffic, or not readable).
    /// Pages back through the store so the filters apply before the limit (a denial older than
    /// the last thousand allowed connections is still found by `--decision deny`).
    pub fn traffic_lines(
        &self,
        filter: &TrafficFilter,
        since: Option<Timestamp>,
        limit: u32,
        line_of: impl Fn(&StoredEvent) -> Option<TrafficLine>,
    ) -> Result<Vec<TrafficLine>, StoreError> {
        const PAGE: u32 = 2000;
        let mut lines = Vec::new();
        let mut before = None;
        'pages: while lines.len() < limit as usize {
            let page = self.traffic_events_page(
                filter.sandbox.as_deref(),
                since,
                filter.decision,
                before,
                PAGE,
            )?;
            let last_page = page.len() < PAGE as usize;
            for e in page {
                before = Some(e.id);
                if let Some(l) = line_of(&e).filter(|l| filter.keeps(l)) {
                    lines.push(l);
                    if lines.len() >= limit as usize {
                        break 'pages;
                    }
                }
            }
            if last_page {
                break;
            }
        }
        lines.reverse();
        Ok(lines)
    }
}

/// One row of `sandgate log --summary`: a host's connections (blocked packets count one each),
/// of which allowed and refused, bytes, last seen, and the rule of the newest line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRow {
    /// The host (or address of blocked packets).
    pub host: String,
    /// Connections.
    pub connections: u64,
    /// Of which allowed.
    pub allowed: u64,
    /// Of which refused (by the proxy or the firewall).
    pub refused: u64,
    /// Bytes sent.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    /// The newest line's time (epoch milliseconds).
    pub last_seen: i64,
    /// The newest line's rule.
    pub rule: String,
}

impl HostRow {
    /// The header line of the text table.
    pub fn header() -> String {
        format!(
            "{:<40} {:>6} {:>6} {:>6} {:>10} {:>10}  LAST SEEN     RULE",
            "HOST", "CONNS", "ALLOW", "REFUSE", "UP", "DOWN"
        )
    }

    /// The row as a line of the text table (host and rule sanitised).
    pub fn text(&self) -> String {
        format!(
            "{:<40} {:>6} {:>6} {:>6} {:>10} {:>10}  {}  {}",
            sanitize(&self.host),
            self.connections,
            self.allowed,
            self.refused,
            self.bytes_up,
            self.bytes_down,
            clock(self.last_seen),
            sanitize(&self.rule)
        )
    }
}

impl From<HostSummary> for HostRow {
    fn from(r: HostSummary) -> HostRow {
        HostRow {
            refused: r.connections.saturating_sub(r.allowed),
            host: r.host,
            connections: r.connections,
            allowed: r.allowed,
            bytes_up: r.bytes_up,
            bytes_down: r.bytes_down,
            last_seen: r.last_seen.as_millis(),
            rule: r.rule,
        }
    }
}

#[cfg(test)]
mod tests {
    use sandgate_config::PatternUse;

    use super::*;
    use crate::{EventKind, NewEvent};

    fn line(decision: TrafficDecision, host: &str) -> TrafficLine {
        TrafficLine {
            time: 0,
            sandbox: "sg-1".into(),
            decision,
            method: "CONNECT".into(),
            host: host.into(),
            port: Some(443),
            path: None,
            command: None,
            process: None,
            rule: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 0.0,
            count: 1,
        }
    }

    #[test]
    fn clock_is_utc_time_of_day() {
        assert_eq!(clock(0), "00:00:00.000");
        assert_eq!(clock(86_400_000 + 3_723_004), "01:02:03.004");
        assert_eq!(clock(-1), "23:59:59.999");
    }

    #[test]
    fn filters_keep_what_they_name() {
        use TrafficDecision::{Allow, Blocked, Deny};
        let f = TrafficFilter {
            host: Some(DomainPattern::parse("*.example.com", PatternUse::Deny).unwrap()),
            decision: Some(Allow),
            sandbox: None,
        };
        assert!(f.keeps(&line(Allow, "a.example.com")));
        assert!(!f.keeps(&line(Deny, "a.example.com")));
        assert!(!f.keeps(&line(Allow, "example.org")));
        let f = TrafficFilter { decision: Some(Blocked), ..TrafficFilter::default() };
        assert!(f.keeps(&line(Blocked, "10.0.0.1")) && !f.keeps(&line(Allow, "x.test")));
        let f = TrafficFilter { sandbox: Some("sg-2".into()), ..TrafficFilter::default() };
        assert!(!f.keeps(&line(Allow, "x.test")));
        // What the cap counted without naming every host passes any host filter.
        let f = TrafficFilter {
            host: Some(DomainPattern::parse("evil.example", PatternUse::Deny).unwrap()),
            ..TrafficFilter::default()
        };
        assert!(f.keeps(&line(Deny, NOT_STORED)) && f.keeps(&line(Allow, OTHER_HOSTS)));
        assert!(!f.keeps(&line(Deny, "(not stored")) && !f.keeps(&line(Allow, "x.test")));
    }

    #[test]
    fn lines_as_text() {
        let mut l = line(TrafficDecision::Allow, "::1");
        l.time = 3_723_004;
        l.bytes_up = 5;
        l.ms = 1.6;
        l.rule = "allow x\u{1b}[2J".into();
        l.command = Some(vec!["curl".into(), "a".repeat(100)]);
        let text = l.text();
        assert!(
            text.starts_with("01:02:03.004 sg-1 allow   CONNECT [::1]:443 ↑5 ↓0 2ms [allow x?[2J]"),
            "{text}"
        );
        assert!(text.ends_with("…\""), "{text}");
        let mut b = line(TrafficDecision::Blocked, "10.0.0.1");
        b.port = None;
        b.count = 3;
        assert_eq!(b.text(), "00:00:00.000 sg-1 blocked CONNECT 10.0.0.1 x3 []");
        // A summary of requests let through shows their bytes; what was not stored, its count.
        let mut a = line(TrafficDecision::Allow, "h.test");
        (a.count, a.bytes_up, a.bytes_down) = (20, 300, 4000);
        assert_eq!(a.text(), "00:00:00.000 sg-1 allow   CONNECT h.test:443 x20 ↑300 ↓4000 []");
        let mut n = line(TrafficDecision::Deny, NOT_STORED);
        (n.method, n.port) = ("*".into(), None);
        assert_eq!(n.text(), "00:00:00.000 sg-1 deny    *       (not stored) x1 []");
        // The process that opened the connection, by its executable, before the command line.
        let mut p = line(TrafficDecision::Allow, "index.crates.io");
        p.process = Some(ProcessInfo {
            pid: 412,
            exe: "/usr/bin/cargo".into(),
            command: "cargo fetch".into(),
        });
        p.command = Some(vec!["sh".into()]);
        assert_eq!(
            p.text(),
            "00:00:00.000 sg-1 allow   CONNECT index.crates.io:443 ↑0 ↓0 0ms [] by `cargo` (pid 412) \"sh\""
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["process"]["pid"], 412);
        assert_eq!(v["process"]["exe"], "/usr/bin/cargo");
        assert_eq!(v["process"]["command"], "cargo fetch");
    }

    #[test]
    fn json_has_the_decision_as_a_word() {
        let v = serde_json::to_value(line(TrafficDecision::Blocked, "h")).unwrap();
        assert_eq!(v["decision"], "blocked");
        assert_eq!(v["port"], 443);
        assert!(v["command"].is_null());
        assert!(v.get("process").is_none(), "no process, no key");
    }

    #[test]
    fn summary_rows_count_the_refused() {
        let row = HostRow::from(HostSummary {
            host: "h.test".into(),
            connections: 5,
            allowed: 2,
            bytes_up: 1,
            bytes_down: 2,
            last_seen: Timestamp(1000),
            rule: "r".into(),
        });
        assert_eq!((row.refused, row.last_seen), (3, 1000));
        assert!(row.text().contains("00:00:01.000  r"), "{}", row.text());
        assert!(HostRow::header().starts_with("HOST "));
    }

    #[test]
    fn traffic_lines_apply_the_filter_before_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        // 2500 allowed lines after one denial: the denial is on the second page.
        let mut events = vec![(TrafficDecision::Deny, "old.test".to_string())];
        events.extend((0..2500).map(|i| (TrafficDecision::Allow, format!("h{i}.test"))));
        let batch: Vec<NewEvent> = events
            .iter()
            .enumerate()
            .map(|(i, (d, host))| NewEvent {
                time: Timestamp(i as i64),
                kind: EventKind::Decision,
                sandbox: Some("sg-1".into()),
                details: serde_json::json!({ "event": "request", "decision": d.as_str(), "host": host }),
            })
            .collect();
        store.append_events(&batch).unwrap();
        let line_of = |e: &StoredEvent| {
            let d = e.event.details["decision"].as_str()?;
            let decision =
                if d == "allow" { TrafficDecision::Allow } else { TrafficDecision::Deny };
            let mut l = line(decision, e.event.details["host"].as_str()?);
            l.time = e.event.time.as_millis();
            Some(l)
        };
        let denied = TrafficFilter { decision: Some(TrafficDecision::Deny), ..Default::default() };
        let lines = store.traffic_lines(&denied, None, 10, line_of).unwrap();
        assert_eq!(lines.iter().map(|l| l.host.as_str()).collect::<Vec<_>>(), ["old.test"]);
        let newest = store.traffic_lines(&TrafficFilter::default(), None, 3, line_of).unwrap();
        let hosts: Vec<&str> = newest.iter().map(|l| l.host.as_str()).collect();
        assert_eq!(hosts, ["h2497.test", "h2498.test", "h2499.test"], "oldest first");
    }
}
