//! `sandgate log`: the traffic log — one line per proxied connection or request (allowed and
//! refused) and per burst of blocked packets, from the store; `--follow` tails the daemon's
//! live events (no polling); `--summary` groups by host. The lines, filters and the paged read
//! are `sandgate_store`'s ([`TrafficLine`], [`TrafficFilter`], `Store::traffic_lines`); this
//! reads the options, talks to the daemon and prints.

use std::io::Write as _;

use anyhow::{Context as _, bail};
use sandgate_config::{DomainPattern, PatternUse};
use sandgate_store::{
    HostRow, SandboxCommands, Store, Timestamp, TrafficDecision, TrafficFilter, TrafficLine,
    TrafficQuery,
};

use sandgate_daemon::Paths;
use sandgate_daemon::UsageError;
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

/// A live traffic event as `sandgate log` prints it (stamped now), and whether it was allowed;
/// `None` for other events. `sandgate watch` shows its traffic tail with it.
pub(crate) fn traffic_text(ev: &Event) -> Option<(String, bool)> {
    let l = ev.traffic_line(Timestamp::now().as_millis())?;
    Some((l.text(), l.decision == TrafficDecision::Allow))
}

/// `sandgate log`.
pub fn log(args: LogArgs) -> anyhow::Result<u8> {
    let since = match &args.since {
        Some(s) => Some(sandgate_config::parse_duration(s).map_err(|e| {
            UsageError(format!("--since {s:?}: {e} (write e.g. 90s, 10m, 2h, 7d)"))
        })?),
        None => None,
    };
    let since = since.map(|d| Timestamp::now().minus(d));
    let host = match &args.host {
        Some(h) => Some(
            DomainPattern::parse(h, PatternUse::Deny)
                .map_err(|e| UsageError(format!("--host: {e}")))?,
        ),
        None => None,
    };
    let filter = TrafficFilter {
        host,
        decision: args.decision.map(DecisionArg::traffic),
        sandbox: args.sandbox.clone(),
    };
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
        let q = TrafficQuery { sandbox: args.sandbox.clone(), since, decision: filter.decision };
        let rows = match &store {
            Some(s) => s.traffic_summary(&q)?,
            None => Vec::new(),
        };
        if !args.json {
            writeln!(out, "{}", HostRow::header())?;
        }
        for r in rows.into_iter().filter(|r| filter.keeps_host(&r.host, 0)).map(HostRow::from) {
            if args.json {
                writeln!(out, "{}", serde_json::to_value(&r)?)?;
            } else {
                writeln!(out, "{}", r.text())?;
            }
        }
        return Ok(0);
    }
    let lines = match &store {
        Some(s) => s.traffic_lines(&filter, since, args.limit, |e| {
            let ev = serde_json::from_value::<Event>(e.event.details.clone()).ok()?;
            ev.traffic_line(e.event.time.as_millis())
        })?,
        None => Vec::new(),
    };
    let mut commands = SandboxCommands::new(store);
    for mut l in lines {
        commands.fill(&mut l);
        print_line(&mut out, &l, args.json)?;
    }
    let Some(mut c) = client.filter(|_| args.follow) else { return Ok(0) };
    c.set_read_timeout(None)?;
    c.request(Request::Subscribe { sandbox: args.sandbox.clone() })?;
    if !commands.has_store() {
        // The daemon has created the store by now.
        commands.set_store(Store::open(&path).ok());
    }
    loop {
        match c.next()? {
            Incoming::Event(ev) => {
                let now = Timestamp::now().as_millis();
                if let Some(mut l) = ev.traffic_line(now).filter(|l| filter.keeps(l)) {
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

fn print_line(out: &mut impl std::io::Write, l: &TrafficLine, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_value(l)?)?;
    } else {
        writeln!(out, "{}", l.text())?;
    }
    Ok(out.flush()?)
}
