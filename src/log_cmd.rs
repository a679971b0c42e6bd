//! `sandgate log`: the traffic log — one line per proxied connection or request (allowed and
//! refused) and per burst of blocked packets, from the store; `--follow` tails the daemon's
//! live events (no polling); `--summary` groups by host.

use std::collections::HashMap;
use std::io::Write as _;

use anyhow::{Context as _, bail};
use sandgate_config::{DomainPattern, PatternUse};
use sandgate_store::{HostSummary, Store, Timestamp, TrafficDecision, TrafficQuery};
use serde_json::{Value, json};

use crate::policy_cmd::UsageError;
use sandgate_daemon::Paths;
use sandgate_daemon::client::{Client, Incoming};
use sandgate_daemon::protocol::{Event, Request};

/// Options of `sandgate log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Keep printing new lines as connections close (needs a running daemon).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only this sandbox (an id from `sandgate ls --all`).
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Only what happened in the last DURATION (`90s`, `10m`, `2h`, `7d`).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only hosts matching PATTERN (`example.com`, `*.example.com`, an address or a block).
    #[arg(long, value_name = "PATTERN")]
    pub host: Option<String>,
    /// Only this decision: allow, deny (also malformed requests), or blocked (direct
    /// connections the firewall refused).
    #[arg(long, value_enum)]
    pub decision: Option<DecisionArg>,
    /// One line per host: connections, bytes, last seen, the rule.
    #[arg(long, conflicts_with = "follow")]
    pub summary: bool,
    /// JSON lines (one document per line) for a log pipeline.
    #[arg(long)]
    pub json: bool,
    /// At most this many lines (the newest), before --follow goes live.
    #[arg(long, default_value_t = 1000)]
    pub limit: u32,
}

/// `--decision` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecisionArg {
    /// Let through by a rule or a grant.
    Allow,
    /// Refused by the proxy (rule, answer, time-out, malformed).
    Deny,
    /// A direct connection the firewall refused.
    Blocked,
}

impl DecisionArg {
    fn traffic(self) -> TrafficDecision {
        match self {
            DecisionArg::Allow => TrafficDecision::Allow,
            DecisionArg::Deny => TrafficDecision::Deny,
            DecisionArg::Blocked => TrafficDecision::Blocked,
        }
    }
}

/// One line of the log, whatever it came from.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    time: i64,
    sandbox: String,
    decision: &'static str,
    method: String,
    host: String,
    port: Option<u16>,
    /// Path and query of a plain-HTTP request.
    path: Option<String>,
    /// The sandbox's command line, when the store knows the sandbox.
    command: Option<Vec<String>>,
    rule: String,
    bytes_up: u64,
    bytes_down: u64,
    ms: f64,
    count: u64,
}

impl Line {
    /// The log line an event stands for (`None`: not traffic).
    fn of(time: i64, ev: &Event) -> Option<Line> {
        match ev {
            Event::Request {
                sandbox,
                method,
                host,
                port,
                path,
                decision,
                rule,
                bytes_up,
                bytes_down,
                ms,
                error,
            } => Some(Line {
                time,
                sandbox: sandbox.clone(),
                decision: if decision == "allow" { "allow" } else { "deny" },
                method: method.clone(),
                host: host.clone(),
                // A name lookup (the DNS stub) has no port.
                port: (method != "DNS").then_some(*port),
                path: path.clone(),
                command: None,
                rule: match error {
                    Some(e) => format!("{rule} ({e})"),
                    None => rule.clone(),
                },
                bytes_up: *bytes_up,
                bytes_down: *bytes_down,
                ms: *ms,
                count: 1,
            }),
            Event::Blocked { sandbox, protocol, dst, port, count } => Some(Line {
                time,
                sandbox: sandbox.clone(),
                decision: "blocked",
                method: protocol.clone(),
                host: dst.clone(),
                port: *port,
                path: None,
                command: None,
                rule: "firewall: direct connection".into(),
                bytes_up: 0,
                bytes_down: 0,
                ms: 0.0,
                count: *count,
            }),
            _ => None,
        }
    }

    fn json(&self) -> Value {
        json!({
            "time": self.time, "sandbox": self.sandbox, "decision": self.decision,
            "method": self.method, "host": self.host, "port": self.port, "path": self.path,
            "command": self.command, "rule": self.rule,
            "bytes_up": self.bytes_up, "bytes_down": self.bytes_down, "ms": self.ms,
            "count": self.count,
        })
    }

    fn text(&self) -> String {
        use sandgate_approvals::terminal::sanitize;
        let host = match (self.host.contains(':'), self.port) {
            (true, Some(p)) => format!("[{}]:{p}", self.host),
            (false, Some(p)) => format!("{}:{p}", self.host),
            (_, None) => self.host.clone(),
        };
        let host = host + self.path.as_deref().unwrap_or("");
        let what = if self.decision == "blocked" {
            format!("x{}", self.count)
        } else {
            format!("↑{} ↓{} {:.0}ms", self.bytes_up, self.bytes_down, self.ms)
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
            "{} {} {:<7} {:<7} {} {} [{}]{command}",
            clock(self.time),
            sanitize(&self.sandbox),
            self.decision,
            sanitize(&self.method),
            sanitize(&host),
            what,
            sanitize(&self.rule)
        )
    }
}

/// Sandbox id → command line, from the store's sandbox rows (the events name only the id).
struct Commands {
    store: Option<Store>,
    known: HashMap<String, Vec<String>>,
}

impl Commands {
    /// Fills in `l.command`. A sandbox not (yet) in the store is asked again next time: its row
    /// may still be on its way to the disk.
    fn fill(&mut self, l: &mut Line) {
        if !self.known.contains_key(&l.sandbox)
            && let Some(Ok(Some(r))) = self.store.as_ref().map(|s| s.sandbox(&l.sandbox))
        {
            self.known.insert(l.sandbox.clone(), r.sandbox.command);
        }
        l.command = self.known.get(&l.sandbox).cloned();
    }
}

/// A live traffic event as `sandgate log` prints it (stamped now), and whether it was allowed;
/// `None` for other events. `sandgate watch` shows its traffic tail with it.
pub(crate) fn traffic_text(ev: &Event) -> Option<(String, bool)> {
    let l = Line::of(Timestamp::now().as_millis(), ev)?;
    Some((l.text(), l.decision == "allow"))
}

/// `HH:MM:SS.mmm` UTC of epoch milliseconds (the date is in `--json`).
fn clock(ms: i64) -> String {
    let day = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

/// What `--host`, `--decision` and `--sandbox` keep.
struct Filter {
    host: Option<DomainPattern>,
    decision: Option<DecisionArg>,
    sandbox: Option<String>,
}

impl Filter {
    fn keeps(&self, l: &Line) -> bool {
        let decision = match self.decision {
            None => true,
            Some(DecisionArg::Allow) => l.decision == "allow",
            Some(DecisionArg::Deny) => l.decision == "deny",
            Some(DecisionArg::Blocked) => l.decision == "blocked",
        };
        let host = match &self.host {
            None => true,
            Some(p) => sandgate_config::Host::parse(&l.host)
                .is_ok_and(|h| p.matches(&h, l.port.unwrap_or(0))),
        };
        let sandbox = self.sandbox.as_ref().is_none_or(|s| *s == l.sandbox);
        decision && host && sandbox
    }
}

/// `sandgate log`.
pub fn log(args: LogArgs) -> anyhow::Result<u8> {
    let since = match &args.since {
        Some(s) => Some(sandgate_config::parse_duration(s).map_err(|e| {
            UsageError(format!("--since {s:?}: {e} (write e.g. 90s, 10m, 2h, 7d)"))
        })?),
        None => None,
    };
    let host = match &args.host {
        Some(h) => Some(
            DomainPattern::parse(h, PatternUse::Deny)
                .map_err(|e| UsageError(format!("--host: {e}")))?,
        ),
        None => None,
    };
    let filter = Filter { host, decision: args.decision, sandbox: args.sandbox.clone() };
    let running = Client::connect(&Paths::discover()).ok();
    if args.follow && running.is_none() {
        bail!(UsageError(
            "--follow needs the daemon, and none is running (a `net`/`build` launch starts it, \
             or run `sandgate daemon`)"
                .into()
        ));
    }
    let mut client = running;
    if let Some(c) = client.as_mut() {
        // The daemon writes events in batches: have it commit what it has seen before the
        // store is read. Without it the log is still right, only perhaps a batch behind.
        if let Err(e) = c.request(Request::Flush) {
            eprintln!(
                "sandgate: the daemon did not flush its events ({e:#}); the newest may be missing"
            );
        }
    }
    let path = Store::default_path()?;
    let store = if path.exists() {
        Some(Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?)
    } else {
        None
    };
    if let Some(id) = &args.sandbox
        && store.as_ref().and_then(|s| s.sandbox(id).ok().flatten()).is_none()
    {
        bail!(UsageError(format!(
            "no sandbox {id:?} is recorded (`sandgate ls --all` lists them)"
        )));
    }
    let mut out = std::io::stdout().lock();
    if args.summary {
        // Grouped in the store (its per-minute aggregate): every event in range, not only the
        // newest `--limit`.
        let q = TrafficQuery {
            sandbox: args.sandbox.clone(),
            since: since.map(|d| Timestamp::now().minus(d)),
            decision: args.decision.map(DecisionArg::traffic),
        };
        let mut rows = match &store {
            Some(s) => s.traffic_summary(&q)?,
            None => Vec::new(),
        };
        if let Some(p) = &filter.host {
            rows.retain(|r| sandgate_config::Host::parse(&r.host).is_ok_and(|h| p.matches(&h, 0)));
        }
        print_summary_rows(&mut out, rows, args.json)?;
        return Ok(0);
    }
    let mut lines = match &store {
        Some(s) => stored_lines(s, &args, since, &filter)?,
        None => Vec::new(),
    };
    let mut commands = Commands { store: store.clone(), known: HashMap::new() };
    for l in &mut lines {
        commands.fill(l);
        print_line(&mut out, l, args.json)?;
    }
    let Some(mut c) = client.filter(|_| args.follow) else { return Ok(0) };
    c.set_read_timeout(None)?;
    c.request(Request::Subscribe { sandbox: args.sandbox.clone() })?;
    if commands.store.is_none() {
        // The daemon has created the store by now.
        commands.store = Store::open(&path).ok();
    }
    loop {
        match c.next()? {
            Incoming::Event(ev) => {
                let now = Timestamp::now().as_millis();
                if let Some(mut l) = Line::of(now, &ev).filter(|l| filter.keeps(l)) {
                    commands.fill(&mut l);
                    print_line(&mut out, &l, args.json)?;
                }
            }
            Incoming::Closed => {
                if !args.json {
                    writeln!(out, "sandgate: the daemon stopped")?;
                }
                return Ok(0);
            }
        }
    }
}

/// The newest `--limit` stored traffic lines that pass every filter, oldest first. Pages back
/// through the store so the filters apply before the limit (a denial older than the last
/// thousand allowed connections is still found by `--decision deny`).
fn stored_lines(
    store: &Store,
    args: &LogArgs,
    since: Option<std::time::Duration>,
    filter: &Filter,
) -> anyhow::Result<Vec<Line>> {
    const PAGE: u32 = 2000;
    let since = since.map(|d| Timestamp::now().minus(d));
    let mut lines = Vec::new();
    let mut before = None;
    'pages: while lines.len() < args.limit as usize {
        let page = store.traffic_events_page(
            args.sandbox.as_deref(),
            since,
            args.decision.map(DecisionArg::traffic),
            before,
            PAGE,
        )?;
        let last_page = page.len() < PAGE as usize;
        for e in page {
            before = Some(e.id);
            let Ok(ev) = serde_json::from_value::<Event>(e.event.details) else { continue };
            if let Some(l) = Line::of(e.event.time.as_millis(), &ev).filter(|l| filter.keeps(l)) {
                lines.push(l);
                if lines.len() >= args.limit as usize {
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

fn print_line(out: &mut impl std::io::Write, l: &Line, json: bool) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", l.json())?;
    } else {
        writeln!(out, "{}", l.text())?;
    }
    out.flush()
}

/// One row per host: connections (blocked packets count one each), of which allowed and
/// refused, bytes, last seen, and the rule of the newest line.
fn print_summary_rows(
    out: &mut impl std::io::Write,
    rows: Vec<HostSummary>,
    json: bool,
) -> std::io::Result<()> {
    use sandgate_approvals::terminal::sanitize;
    if !json {
        writeln!(
            out,
            "{:<40} {:>6} {:>6} {:>6} {:>10} {:>10}  LAST SEEN     RULE",
            "HOST", "CONNS", "ALLOW", "REFUSE", "UP", "DOWN"
        )?;
    }
    for r in rows {
        let refused = r.connections.saturating_sub(r.allowed);
        if json {
            writeln!(
                out,
                "{}",
                json!({ "host": r.host, "connections": r.connections, "allowed": r.allowed,
                        "refused": refused, "bytes_up": r.bytes_up, "bytes_down": r.bytes_down,
                        "last_seen": r.last_seen.as_millis(), "rule": r.rule })
            )?;
        } else {
            writeln!(
                out,
                "{:<40} {:>6} {:>6} {:>6} {:>10} {:>10}  {}  {}",
                sanitize(&r.host),
                r.connections,
                r.allowed,
                refused,
                r.bytes_up,
                r.bytes_down,
                clock(r.last_seen.as_millis()),
                sanitize(&r.rule)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_utc_time_of_day() {
        assert_eq!(clock(0), "00:00:00.000");
        assert_eq!(clock(86_400_000 + 3_723_004), "01:02:03.004");
    }

    #[test]
    fn filters_keep_what_they_name() {
        let line = |decision, host: &str| Line {
            time: 0,
            sandbox: "sg-1".into(),
            decision,
            method: "CONNECT".into(),
            host: host.into(),
            port: Some(443),
            path: None,
            command: None,
            rule: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 0.0,
            count: 1,
        };
        let f = Filter {
            host: Some(DomainPattern::parse("*.example.com", PatternUse::Deny).unwrap()),
            decision: Some(DecisionArg::Allow),
            sandbox: None,
        };
        assert!(f.keeps(&line("allow", "a.example.com")));
        assert!(!f.keeps(&line("deny", "a.example.com")));
        assert!(!f.keeps(&line("allow", "example.org")));
        let f = Filter { host: None, decision: Some(DecisionArg::Blocked), sandbox: None };
        assert!(f.keeps(&line("blocked", "10.0.0.1")) && !f.keeps(&line("allow", "x.test")));
    }
}
