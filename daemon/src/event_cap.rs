//! The cap on how fast one sandbox's traffic events are stored: a sandbox that makes requests,
//! lookups or blocked packets as fast as it can must not fill the disk with history (events are
//! kept for `[daemon] event_retention`, 30 days by default, some 2.7 KB each with the log's
//! aggregates) — and must not be able to hide, by flooding, the traffic it got through.
//!
//! A token bucket per sandbox: [`BURST`] events at once (a build's start, an install), then
//! `[daemon] events_per_minute` (default [`DEFAULT_PER_MINUTE`]). Past it:
//! - **Refusals** (the proxy's and the DNS stub's denials and rejections, blocked packets) are
//!   not stored (still shown live, to `watch` and the launcher) and are counted, per kind
//!   ([`CappedRefusal`]), with what they stood for (a DNS summary stands for many refusals). The
//!   counts are reported ([`Report::Dropped`], one stored event per kind that `sandgate log`
//!   shows) a [`PERIOD`] after the first one dropped, or when the sandbox ends.
//! - **What was let through** (allowed requests, tunnels and lookups, whether or not the
//!   upstream then failed) is never dropped: it is counted per destination (host and port) and
//!   [`PERIOD`], as the DNS stub counts refusals. The first request to a destination in a
//!   period is stored by itself at once (with its path and bytes); the rest of that period
//!   become one summary ([`Report::Counted`]: how many, their bytes, example requests). At most
//!   [`DESTINATIONS`] destinations are counted apart per sandbox at once; past them, the
//!   requests to any other destination are counted together in the same way (host
//!   [`OTHER_HOSTS`], example destinations). So past the cap a sandbox stores at most
//!   2 × ([`DESTINATIONS`] + 1) rows of let-through traffic per [`PERIOD`], whatever it does,
//!   and every request it got through is in one of them.
//!
//! Only traffic is capped: sandbox starts and ends and approvals (bounded by the question
//! budget) are always stored.
//!
//! Pure but for the lock: callers pass the time, store what comes back, and call
//! [`EventCap::due`] at the instants [`Admission::wake_at`] names.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use sandgate_store::OTHER_HOSTS;

/// Events a sandbox may store at once before the rate applies.
pub const BURST: u32 = 1000;
/// Stored events per sandbox per minute after the burst, unless configured.
pub const DEFAULT_PER_MINUTE: u32 = 60;
/// How long counts are gathered before they are stored: refusals not stored since the first
/// one dropped, requests to one destination since the first one (stored by itself).
pub const PERIOD: Duration = Duration::from_secs(60);
/// Destinations whose let-through requests are counted apart, per sandbox at once, past the
/// cap (the allowlist and grants bound them in practice; a wildcard pattern does not).
pub const DESTINATIONS: usize = 32;
/// Example requests (or destinations) a summary keeps.
pub const SAMPLES: usize = 5;
/// Characters of an example kept (a path is the sandbox's to make long).
const SAMPLE_CHARS: usize = 120;

/// What a traffic event is, to the cap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Traffic<'a> {
    /// Let through: never dropped.
    Pass(Passed<'a>),
    /// Refused, standing for `weight` refusals (or packets).
    Refuse(CappedRefusal, u64),
}

/// A let-through request (or tunnel, or lookup), as the cap counts it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Passed<'a> {
    /// `CONNECT`, `GET`, ..., `DNS`.
    pub method: &'a str,
    /// The host (or address).
    pub host: &'a str,
    /// The port (0 for a lookup).
    pub port: u16,
    /// The path of a plain-HTTP request.
    pub path: Option<&'a str>,
    /// The rule that let it through.
    pub rule: &'a str,
    /// Bytes sent.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    /// Duration in milliseconds.
    pub ms: f64,
    /// Requests the event stands for (1).
    pub requests: u64,
}

/// Which wall refused what is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CappedRefusal {
    /// The proxy or the DNS stub (a denial or a rejection).
    Proxy,
    /// The firewall (blocked packets).
    Firewall,
}

impl CappedRefusal {
    /// The word the traffic log uses for it: `deny` or `blocked`.
    pub fn as_str(self) -> &'static str {
        match self {
            CappedRefusal::Proxy => "deny",
            CappedRefusal::Firewall => "blocked",
        }
    }

    fn slot(self) -> usize {
        match self {
            CappedRefusal::Proxy => 0,
            CappedRefusal::Firewall => 1,
        }
    }

    const ALL: [CappedRefusal; 2] = [CappedRefusal::Proxy, CappedRefusal::Firewall];
}

/// Refusals not stored, to report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// How many events.
    pub events: u64,
    /// What they stood for: requests, DNS refusals (a summary stands for many), packets.
    pub standing_for: u64,
}

/// Let-through requests counted into one summary: those to one destination after the first in
/// a period (stored by itself), or to the destinations past [`DESTINATIONS`].
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The method of the first one counted.
    pub method: String,
    /// The destination's host, or [`OTHER_HOSTS`].
    pub host: String,
    /// The destination's port (0 for a lookup, and for [`OTHER_HOSTS`]).
    pub port: u16,
    /// How many.
    pub requests: u64,
    /// Bytes sent, all together.
    pub bytes_up: u64,
    /// Bytes received, all together.
    pub bytes_down: u64,
    /// Their durations added up, in milliseconds.
    pub ms: f64,
    /// The rule of the latest one.
    pub rule: String,
    /// Up to [`SAMPLES`] distinct requests (`METHOD path`) or, for [`OTHER_HOSTS`],
    /// destinations (`host:port`).
    pub samples: Vec<String>,
}

/// Something to store about a sandbox's traffic that the cap held back.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    /// Refusals of one kind were not stored.
    Dropped {
        /// The sandbox.
        sandbox: String,
        /// Which wall refused them.
        refusal: CappedRefusal,
        /// How many, and what they stood for.
        dropped: Dropped,
    },
    /// Let-through requests were counted: store the summary.
    Counted {
        /// The sandbox.
        sandbox: String,
        /// What was counted.
        summary: Summary,
    },
}

/// What to do with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapVerdict {
    /// Store it as it is.
    Store,
    /// Do not store it: counted into a summary that will be (let-through traffic).
    Count,
    /// Do not store it: a refusal past the cap, counted for a report. `first`: the first since
    /// the last report (say so in the daemon's log).
    Drop {
        /// The first since the last report.
        first: bool,
    },
}

/// The cap's answer for one event.
#[derive(Debug, PartialEq)]
pub struct Admission {
    /// What to do with the event.
    pub verdict: CapVerdict,
    /// Reports of this sandbox whose period has ended: store them first.
    pub due: Vec<Report>,
    /// A period began counting: call [`EventCap::due`] at this instant, so that its report is
    /// stored then, not only when the sandbox's next event or its end comes.
    pub wake_at: Option<Instant>,
}

/// Let-through requests to one destination (or to the others) counted in a period.
#[derive(Debug)]
struct Window {
    opened: Instant,
    counted: u64,
    method: String,
    bytes_up: u64,
    bytes_down: u64,
    ms: f64,
    rule: String,
    samples: Vec<String>,
}

impl Window {
    fn new(now: Instant) -> Window {
        Window {
            opened: now,
            counted: 0,
            method: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 0.0,
            rule: String::new(),
            samples: Vec::new(),
        }
    }

    fn ended(&self, now: Instant, period: Duration) -> bool {
        now.saturating_duration_since(self.opened) >= period
    }

    /// Counts `p`, with `sample` as its example; returns when to wake up for the summary (a
    /// `period` after the window opened), if this was the first one counted.
    fn count(&mut self, p: &Passed<'_>, sample: String, period: Duration) -> Option<Instant> {
        let first = self.counted == 0;
        let sample = match sample.char_indices().nth(SAMPLE_CHARS) {
            Some((cut, _)) => format!("{}…", &sample[..cut]),
            None => sample,
        };
        if first {
            self.method = p.method.to_owned();
        }
        self.counted = self.counted.saturating_add(p.requests);
        self.bytes_up = self.bytes_up.saturating_add(p.bytes_up);
        self.bytes_down = self.bytes_down.saturating_add(p.bytes_down);
        self.ms += p.ms;
        p.rule.clone_into(&mut self.rule);
        if self.samples.len() < SAMPLES && !self.samples.contains(&sample) {
            self.samples.push(sample);
        }
        first.then_some(self.opened + period)
    }

    /// Its summary, when it counted anything (its first request was stored by itself).
    fn summary(self, sandbox: &str, host: String, port: u16) -> Option<Report> {
        (self.counted > 0).then(|| Report::Counted {
            sandbox: sandbox.to_owned(),
            summary: Summary {
                method: self.method,
                host,
                port,
                requests: self.counted,
                bytes_up: self.bytes_up,
                bytes_down: self.bytes_down,
                ms: self.ms,
                rule: self.rule,
                samples: self.samples,
            },
        })
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Refusals not stored, by [`CappedRefusal::slot`].
    dropped: [Dropped; 2],
    /// When the first refusal of `dropped` was dropped.
    since: Option<Instant>,
    /// Let-through requests counted, by destination (at most [`DESTINATIONS`]).
    windows: HashMap<(String, u16), Window>,
    /// Let-through requests to destinations past those, counted together.
    others: Option<Window>,
}

impl Bucket {
    /// Moves the reports whose `period` has ended by `now` (all of them, with `all`) to `out`.
    fn take(
        &mut self,
        sandbox: &str,
        now: Instant,
        period: Duration,
        all: bool,
        out: &mut Vec<Report>,
    ) {
        if all || self.since.is_some_and(|s| now.saturating_duration_since(s) >= period) {
            self.since = None;
            for r in CappedRefusal::ALL {
                let dropped = std::mem::take(&mut self.dropped[r.slot()]);
                if dropped.events > 0 {
                    out.push(Report::Dropped { sandbox: sandbox.to_owned(), refusal: r, dropped });
                }
            }
        }
        let ended: Vec<(String, u16)> = self
            .windows
            .iter()
            .filter(|(_, w)| all || w.ended(now, period))
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            if let Some(w) = self.windows.remove(&key) {
                out.extend(w.summary(sandbox, key.0, key.1));
            }
        }
        if self.others.as_ref().is_some_and(|w| all || w.ended(now, period))
            && let Some(w) = self.others.take()
        {
            out.extend(w.summary(sandbox, OTHER_HOSTS.to_owned(), 0));
        }
    }
}

/// The buckets of every sandbox.
#[derive(Debug)]
pub struct EventCap {
    per_minute: u32,
    burst: u32,
    period: Duration,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl EventCap {
    /// A cap of `per_minute` events per sandbox after a burst of [`BURST`] (or of `per_minute`,
    /// when that is more).
    pub fn new(per_minute: u32) -> EventCap {
        EventCap::with_period(per_minute, PERIOD)
    }

    /// [`new`](Self::new) with counts gathered for `period` instead of [`PERIOD`] (tests).
    pub fn with_period(per_minute: u32, period: Duration) -> EventCap {
        let per_minute = per_minute.max(1);
        EventCap { per_minute, burst: BURST.max(per_minute), period, buckets: Mutex::default() }
    }

    /// How long counts are gathered ([`PERIOD`]).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The configured rate.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// The burst.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Takes one traffic event of `sandbox` at `now`.
    pub fn admit(&self, sandbox: &str, now: Instant, traffic: Traffic<'_>) -> Admission {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = map.entry(sandbox.to_owned()).or_insert_with(|| Bucket {
            tokens: f64::from(self.burst),
            at: now,
            dropped: [Dropped::default(); 2],
            since: None,
            windows: HashMap::new(),
            others: None,
        });
        let refill =
            now.saturating_duration_since(b.at).as_secs_f64() * f64::from(self.per_minute) / 60.0;
        b.tokens = (b.tokens + refill).min(f64::from(self.burst));
        b.at = now;
        let mut due = Vec::new();
        b.take(sandbox, now, self.period, false, &mut due);
        let admission = |verdict, wake_at| Admission { verdict, due, wake_at };
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return admission(CapVerdict::Store, None);
        }
        match traffic {
            Traffic::Refuse(r, weight) => {
                let d = &mut b.dropped[r.slot()];
                d.events += 1;
                d.standing_for = d.standing_for.saturating_add(weight);
                let first = b.since.is_none();
                if first {
                    b.since = Some(now);
                }
                admission(CapVerdict::Drop { first }, first.then_some(now + self.period))
            }
            Traffic::Pass(p) => {
                let key = (p.host.to_owned(), p.port);
                let sample = match p.path {
                    Some(path) => format!("{} {path}", p.method),
                    None => p.method.to_owned(),
                };
                if let Some(w) = b.windows.get_mut(&key) {
                    return admission(CapVerdict::Count, w.count(&p, sample, self.period));
                }
                if b.windows.len() < DESTINATIONS {
                    // The first to this destination in a period: stored by itself, at once.
                    b.windows.insert(key, Window::new(now));
                    return admission(CapVerdict::Store, None);
                }
                match &mut b.others {
                    Some(w) => {
                        let dest = if p.host.contains(':') {
                            format!("[{}]:{}", p.host, p.port)
                        } else {
                            format!("{}:{}", p.host, p.port)
                        };
                        admission(CapVerdict::Count, w.count(&p, dest, self.period))
                    }
                    None => {
                        b.others = Some(Window::new(now));
                        admission(CapVerdict::Store, None)
                    }
                }
            }
        }
    }

    /// The reports of every sandbox whose period has ended by `now` (to store).
    pub fn due(&self, now: Instant) -> Vec<Report> {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (sandbox, b) in map.iter_mut() {
            b.take(sandbox, now, self.period, false, &mut out);
        }
        out
    }

    /// The sandbox ended: its bucket goes, and every report it still held is returned (to
    /// store), ended or not.
    pub fn end(&self, sandbox: &str) -> Vec<Report> {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        if let Some(mut b) = map.remove(sandbox) {
            b.take(sandbox, Instant::now(), self.period, true, &mut out);
        }
        out
    }

    /// The daemon stops: every bucket goes, with every report it still held.
    pub fn end_all(&self) -> Vec<Report> {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (sandbox, mut b) in map.drain() {
            b.take(&sandbox, Instant::now(), self.period, true, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DENY: Traffic<'static> = Traffic::Refuse(CappedRefusal::Proxy, 1);

    fn pass(host: &str, port: u16) -> Passed<'_> {
        Passed {
            method: "CONNECT",
            host,
            port,
            path: None,
            rule: "allow h",
            bytes_up: 10,
            bytes_down: 100,
            ms: 1.0,
            requests: 1,
        }
    }

    /// Uses up `sb`'s burst at `t` with refusals.
    fn exhaust(cap: &EventCap, sb: &str, t: Instant) {
        while cap.admit(sb, t, DENY).verdict == CapVerdict::Store {}
    }

    fn dropped(reports: &[Report], refusal: CappedRefusal) -> Option<Dropped> {
        reports.iter().find_map(|r| match r {
            Report::Dropped { refusal: x, dropped, .. } if *x == refusal => Some(*dropped),
            _ => None,
        })
    }

    fn summaries(reports: Vec<Report>) -> Vec<Summary> {
        reports
            .into_iter()
            .filter_map(|r| match r {
                Report::Counted { summary, .. } => Some(summary),
                Report::Dropped { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_burst_then_the_rate_and_every_drop_reported_once() {
        let cap = EventCap::new(60);
        let t0 = Instant::now();
        let stored =
            (0..BURST + 500).filter(|_| cap.admit("sb", t0, DENY).verdict == CapVerdict::Store);
        assert_eq!(stored.count(), BURST as usize, "the burst, then nothing at the same instant");
        // Another sandbox has a bucket of its own.
        assert_eq!(cap.admit("other", t0, DENY).verdict, CapVerdict::Store);
        // One a second comes back (60 a minute).
        let t1 = t0 + Duration::from_secs(1);
        let a = cap.admit("sb", t1, DENY);
        assert_eq!(a, Admission { verdict: CapVerdict::Store, due: vec![], wake_at: None });
        let a = cap.admit("sb", t1, DENY);
        assert_eq!(
            a,
            Admission { verdict: CapVerdict::Drop { first: false }, due: vec![], wake_at: None }
        );
        // Blocked packets are counted apart from the proxy's refusals.
        let a = cap.admit("sb", t1, Traffic::Refuse(CappedRefusal::Firewall, 4));
        assert_eq!(a.verdict, CapVerdict::Drop { first: false });
        // A period after the first drop, its report is due (500 + 1 refusals, 4 packets).
        assert!(cap.due(t0 + PERIOD / 2).is_empty());
        let due = cap.due(t0 + PERIOD);
        assert_eq!(
            dropped(&due, CappedRefusal::Proxy),
            Some(Dropped { events: 501, standing_for: 501 })
        );
        assert_eq!(
            dropped(&due, CappedRefusal::Firewall),
            Some(Dropped { events: 1, standing_for: 4 })
        );
        assert_eq!(due.len(), 2);
        assert!(matches!(&due[0], Report::Dropped { sandbox, .. } if sandbox == "sb"));
        // Nothing more dropped: the end has nothing to report; a new bucket starts full.
        assert_eq!(cap.end("sb"), vec![]);
        let t2 = t0 + PERIOD;
        assert!((0..BURST).all(|_| cap.admit("sb", t2, DENY).verdict == CapVerdict::Store));
        let a = cap.admit("sb", t2, Traffic::Refuse(CappedRefusal::Proxy, 7));
        assert_eq!(a.verdict, CapVerdict::Drop { first: true }, "a summary of seven refusals");
        assert_eq!(a.wake_at, Some(t2 + PERIOD), "the report is due a period later");
        let end = cap.end("sb");
        assert_eq!(end.len(), 1);
        assert_eq!(
            dropped(&end, CappedRefusal::Proxy),
            Some(Dropped { events: 1, standing_for: 7 })
        );
    }

    #[test]
    fn the_counts_add_up_over_a_flood() {
        let cap = EventCap::new(120);
        let t0 = Instant::now();
        let (mut stored, mut reported) = (0u64, 0u64);
        let total = 10_000u64;
        for i in 0..total {
            // 10,000 events over 100 seconds.
            let a = cap.admit("sb", t0 + Duration::from_millis(i * 10), DENY);
            stored += u64::from(a.verdict == CapVerdict::Store);
            reported += dropped(&a.due, CappedRefusal::Proxy).map_or(0, |d| d.events);
        }
        reported += dropped(&cap.end("sb"), CappedRefusal::Proxy).map_or(0, |d| d.events);
        assert_eq!(stored + reported, total);
        // The burst plus two a second for the 100 seconds (give or take one).
        assert!((BURST as u64 + 199..=BURST as u64 + 201).contains(&stored), "{stored}");
    }

    #[test]
    fn a_rate_above_the_burst_raises_the_burst() {
        let cap = EventCap::new(5000);
        assert_eq!((cap.per_minute(), cap.burst()), (5000, 5000));
        let t0 = Instant::now();
        let stored = (0..6000).filter(|_| cap.admit("sb", t0, DENY).verdict == CapVerdict::Store);
        assert_eq!(stored.count(), 5000);
    }

    /// The red team's finding: past the cap, a request let through is never dropped. The first
    /// to a destination is stored at once; the rest of its period are one summary with their
    /// count and bytes, due when the period ends.
    #[test]
    fn past_the_cap_what_is_let_through_is_stored_or_counted_never_dropped() {
        let cap = EventCap::new(1);
        let t0 = Instant::now();
        exhaust(&cap, "sb", t0);
        let post =
            Passed { method: "POST", path: Some("/upload"), bytes_up: 5000, ..pass("h", 80) };
        let a = cap.admit("sb", t0, Traffic::Pass(post));
        assert_eq!((a.verdict, a.wake_at), (CapVerdict::Store, None), "the first, by itself");
        let a = cap.admit("sb", t0, Traffic::Pass(pass("h", 80)));
        assert_eq!((a.verdict, a.wake_at), (CapVerdict::Count, Some(t0 + PERIOD)));
        for _ in 0..98 {
            let p = Passed { path: Some("/more"), method: "GET", ..pass("h", 80) };
            assert_eq!(cap.admit("sb", t0, Traffic::Pass(p)).verdict, CapVerdict::Count);
        }
        // Another port is another destination.
        assert_eq!(cap.admit("sb", t0, Traffic::Pass(pass("h", 443))).verdict, CapVerdict::Store);
        assert!(summaries(cap.due(t0 + PERIOD / 2)).is_empty());
        let s = summaries(cap.due(t0 + PERIOD));
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            s[0],
            Summary {
                method: "CONNECT".into(),
                host: "h".into(),
                port: 80,
                requests: 99,
                bytes_up: 990,
                bytes_down: 9900,
                ms: 99.0,
                rule: "allow h".into(),
                samples: vec!["CONNECT".into(), "GET /more".into()],
            }
        );
        // A new period (the minute brought one token back: used up first): the first is
        // stored at once again.
        let later = t0 + PERIOD;
        exhaust(&cap, "sb", later);
        assert_eq!(cap.admit("sb", later, Traffic::Pass(pass("h", 80))).verdict, CapVerdict::Store);
        assert_eq!(cap.admit("sb", later, Traffic::Pass(pass("h", 80))).verdict, CapVerdict::Count);
        // The sandbox's end brings what is still counted, with the refusals dropped.
        let end = cap.end("sb");
        assert_eq!(summaries(end.clone()).iter().map(|s| s.requests).collect::<Vec<_>>(), [1]);
        let d = dropped(&end, CappedRefusal::Proxy);
        assert_eq!(d, Some(Dropped { events: 1, standing_for: 1 }), "the second period's only");
    }

    /// However many destinations a sandbox reaches past the cap (a wildcard allows any number),
    /// it stores at most 2 × (DESTINATIONS + 1) rows of them per period, and the rows stand for
    /// every request.
    #[test]
    fn past_the_cap_let_through_rows_are_bounded_per_period_and_count_every_request() {
        let cap = EventCap::new(1);
        let t0 = Instant::now();
        exhaust(&cap, "sb", t0);
        let minutes = 10u64;
        let per_minute = 3000u64;
        let mut requests = 0u64;
        let mut rows_by_minute = vec![0u64; minutes as usize + 1];
        for i in 0..minutes * per_minute {
            let now = t0 + Duration::from_millis(i * 60_000 / per_minute);
            let minute = (i / per_minute) as usize;
            // A new name each time under a wildcard, and a few hosts it keeps going back to.
            let host =
                if i % 3 == 0 { format!("h{}.example", i % 7) } else { format!("n{i}.example") };
            let a = cap.admit("sb", now, Traffic::Pass(pass(&host, 443)));
            match a.verdict {
                CapVerdict::Store => {
                    rows_by_minute[minute] += 1;
                    requests += 1;
                }
                CapVerdict::Count => {}
                CapVerdict::Drop { .. } => panic!("a let-through request was dropped"),
            }
            for s in summaries(a.due) {
                rows_by_minute[minute] += 1;
                requests += s.requests;
            }
        }
        for s in summaries(cap.end("sb")) {
            rows_by_minute[minutes as usize] += 1;
            requests += s.requests;
        }
        let rows: u64 = rows_by_minute.iter().sum();
        assert_eq!(requests, minutes * per_minute, "every request is in a row");
        // Tokens come back at one a minute: one more row each.
        let bound = 2 * (DESTINATIONS as u64 + 1) + 1;
        for (m, n) in rows_by_minute.iter().enumerate() {
            assert!(*n <= bound, "minute {m}: {n} rows (bound {bound})");
        }
        assert!(rows <= (minutes + 1) * bound, "{rows}");
        // The destinations past the bound are counted together, with examples.
        let cap2 = EventCap::new(1);
        exhaust(&cap2, "sb", t0);
        for i in 0..DESTINATIONS + 10 {
            cap2.admit("sb", t0, Traffic::Pass(pass(&format!("n{i}.example"), 443)));
        }
        let s = summaries(cap2.end("sb"));
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].host.as_str(), s[0].port, s[0].requests), (OTHER_HOSTS, 0, 9));
        assert_eq!(s[0].samples.len(), SAMPLES);
        assert_eq!(s[0].samples[0], format!("n{}.example:443", DESTINATIONS + 1));
    }

    #[test]
    fn examples_are_kept_short() {
        let cap = EventCap::new(1);
        let t0 = Instant::now();
        exhaust(&cap, "sb", t0);
        let long = format!("/{}", "é".repeat(500));
        for _ in 0..2 {
            let p = Passed { method: "GET", path: Some(&long), ..pass("h", 80) };
            cap.admit("sb", t0, Traffic::Pass(p));
        }
        let s = summaries(cap.end("sb"));
        let sample = &s[0].samples[0];
        assert_eq!(sample.chars().count(), SAMPLE_CHARS + 1, "{sample}");
        assert!(sample.starts_with("GET /éé") && sample.ends_with('…'), "{sample}");
    }

    #[test]
    fn the_daemons_stop_reports_every_sandbox() {
        let cap = EventCap::new(1);
        let t0 = Instant::now();
        for sb in ["a", "b"] {
            exhaust(&cap, sb, t0);
            cap.admit(sb, t0, Traffic::Pass(pass("h", 1)));
            cap.admit(sb, t0, Traffic::Pass(pass("h", 1)));
        }
        let all = cap.end_all();
        // Per sandbox: the refusal that found the bucket empty, and one summary.
        assert_eq!(all.len(), 4, "{all:?}");
        assert!(cap.end_all().is_empty());
        assert!(cap.end("a").is_empty());
    }
}
