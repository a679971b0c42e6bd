//! `sandgate log`: the traffic log — one line per proxied connection or request (allowed and
//! refused) and per burst of blocked packets, from the store; `follow` tails the daemon's live
//! events (no polling); `summary` groups by host. The lines, filters and the paged read are
//! `sandgate_store`'s ([`TrafficLine`], [`TrafficFilter`], `Store::traffic_lines`); this talks
//! to the daemon and writes the lines as they come.

use std::io::Write;

use anyhow::{Context as _, bail};
use sandgate_config::{DomainPattern, PatternUse};
use sandgate_store::{
    HostRow, SandboxCommands, Store, Timestamp, TrafficDecision, TrafficFilter, TrafficLine,
    TrafficQuery,
};

use crate::Paths;
use crate::UsageError;
use crate::client::{Client, Incoming};
use crate::protocol::{Event, Request};
use crate::report::compact;

/// What `sandgate log` is asked for.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    /// Keep writing new lines as connections close.
    pub follow: bool,
    /// Only this sandbox.
    pub sandbox: Option<String>,
    /// Only the last DURATION (as typed).
    pub since: Option<String>,
    /// Only hosts matching this pattern (as typed).
    pub host: Option<String>,
    /// Only this decision.
    pub decision: Option<TrafficDecision>,
    /// One line per host.
    pub summary: bool,
    /// JSON lines.
    pub json: bool,
    /// At most this many lines (the newest) before `follow` goes live.
    pub limit: u32,
}

/// A live traffic event as `sandgate log` prints it (stamped now), and whether it was allowed;
/// `None` for other events. `sandgate watch` shows its traffic tail with it.
pub fn traffic_text(ev: &Event) -> Option<(String, bool)> {
    let l = ev.traffic_line(Timestamp::now().as_millis())?;
    Some((l.text(), l.decision == TrafficDecision::Allow))
}

/// `sandgate log`: writes the lines to `out` (until the daemon stops, with `follow`).
pub fn log(q: LogQuery, out: &mut dyn Write) -> anyhow::Result<u8> {
    let since = since(q.since.as_deref())?;
    let host = match &q.host {
        Some(h) => Some(
            DomainPattern::parse(h, PatternUse::Deny)
                .map_err(|e| UsageError(format!("--host: {e}")))?,
        ),
        None => None,
    };
    let filter = TrafficFilter { host, decision: q.decision, sandbox: q.sandbox.clone() };
    let running = Client::connect(&Paths::discover()).ok();
    if q.follow && running.is_none() {
        bail!(UsageError(
            "--follow needs the daemon, and none is running (a `net`/`build` launch starts it, \
             or run `sandgate daemon`)"
                .into()
        ));
    }
    let mut client = running;
    let store = flushed_store(client.as_mut())?;
    let path = Store::default_path()?;
    if let Some(id) = &q.sandbox
        && store.as_ref().and_then(|s| s.sandbox(id).ok().flatten()).is_none()
    {
        bail!(UsageError(format!(
            "no sandbox {id:?} is recorded (`sandgate ls --all` lists them)"
        )));
    }
    if q.summary {
        // Grouped in the store (its per-minute aggregate): every event in range, not only the
        // newest `--limit`.
        let tq = TrafficQuery { sandbox: q.sandbox.clone(), since, decision: filter.decision };
        let rows = match &store {
            Some(s) => s.traffic_summary(&tq)?,
            None => Vec::new(),
        };
        if !q.json {
            writeln!(out, "{}", HostRow::header())?;
        }
        let mut not_asked = Vec::new();
        for r in rows.into_iter().filter(|r| filter.keeps_host(&r.host, 0)).map(HostRow::from) {
            out.write_all(if q.json { compact(&r) } else { format!("{}\n", r.text()) }.as_bytes())?;
            if r.rule == sandgate_proxy::Refusal::UNATTENDED {
                not_asked.push(sandgate_config::sanitize(&r.host).to_string());
            }
        }
        // An unattended run (`--no-ask`, `[daemon] ask = "deny"`) asked nobody: what it would
        // have asked is the list to review (and to allow for the next run).
        if !q.json && !not_asked.is_empty() {
            writeln!(out, "would have asked (unattended run): {}", not_asked.join(", "))?;
        }
        return Ok(0);
    }
    let lines = match &store {
        Some(s) => s.traffic_lines(&filter, since, q.limit, |e| {
            let ev = serde_json::from_value::<Event>(e.event.details.clone()).ok()?;
            ev.traffic_line(e.event.time.as_millis())
        })?,
        None => Vec::new(),
    };
    let mut commands = SandboxCommands::new(store);
    for mut l in lines {
        commands.fill(&mut l);
        write_line(out, &l, q.json)?;
    }
    let Some(mut c) = client.filter(|_| q.follow) else { return Ok(0) };
    c.set_read_timeout(None)?;
    c.request(Request::Subscribe { sandbox: q.sandbox.clone() })?;
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
                    write_line(out, &l, q.json)?;
                }
            }
            Incoming::Closed => {
                if !q.json {
                    writeln!(out, "sandgate: the daemon stopped")?;
                }
                return Ok(0);
            }
        }
    }
}

/// The store, once the daemon (`client`, when one runs) has committed the events it holds:
/// it writes them in batches, and without the flush the log is still right, only perhaps a
/// batch behind. `None` when nothing was ever recorded.
pub fn flushed_store(client: Option<&mut Client>) -> anyhow::Result<Option<Store>> {
    if let Some(c) = client
        && let Err(e) = c.request(Request::Flush)
    {
        eprintln!(
            "sandgate: the daemon did not flush its events ({e:#}); the newest may be missing"
        );
    }
    let path = Store::default_path()?;
    if !path.exists() {
        return Ok(None);
    }
    Ok(Some(Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?))
}

/// `--since DURATION` as an instant, or the usage error saying how to write one.
pub fn since(since: Option<&str>) -> anyhow::Result<Option<Timestamp>> {
    let Some(s) = since else { return Ok(None) };
    let d = sandgate_config::parse_duration(s)
        .map_err(|e| UsageError(format!("--since {s:?}: {e} (write e.g. 90s, 10m, 2h, 7d)")))?;
    Ok(Some(Timestamp::now().minus(d)))
}

fn write_line(out: &mut dyn Write, l: &TrafficLine, json: bool) -> anyhow::Result<()> {
    out.write_all(if json { compact(l) } else { format!("{}\n", l.text()) }.as_bytes())?;
    Ok(out.flush()?)
}
