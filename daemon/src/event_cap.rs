//! The cap on how fast one sandbox's traffic events are stored: a sandbox that makes requests,
//! lookups or blocked packets as fast as it can must not fill the disk with history (events are
//! kept for `[daemon] event_retention`, 30 days by default, some 2.7 KB each with the log's
//! aggregates).
//!
//! A token bucket per sandbox: [`BURST`] events at once (a build's start, an install), then
//! `[daemon] events_per_minute` (default [`DEFAULT_PER_MINUTE`]). What comes faster is not
//! stored (still shown live, to `watch` and the launcher) and is counted, with what those
//! events stood for (a DNS summary stands for many refusals); the count is reported
//! as one stored event when the sandbox's next event arrives a [`REPORT_PERIOD`] after the
//! first one dropped, or when the sandbox ends. Only traffic (proxy decisions, DNS, blocked
//! packets) is capped: sandbox starts and ends and approvals (bounded by the question budget)
//! are always stored.
//!
//! Pure but for the lock: callers pass the time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Events a sandbox may store at once before the rate applies.
pub const BURST: u32 = 1000;
/// Stored events per sandbox per minute after the burst, unless configured.
pub const DEFAULT_PER_MINUTE: u32 = 60;
/// How often, at most, the count of events not stored is reported per sandbox.
pub const REPORT_PERIOD: Duration = Duration::from_secs(60);

/// Events not stored, to report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// How many events.
    pub events: u64,
    /// What they stood for: requests, DNS refusals (a summary stands for many), packets.
    pub standing_for: u64,
}

/// Whether to store an event, and a report to store first.
#[derive(Debug, PartialEq, Eq)]
pub struct Admission {
    /// Store the event.
    pub store: bool,
    /// Events of this sandbox not stored in a period that has ended: report them (stored
    /// before the event).
    pub report: Option<Dropped>,
    /// This was the first event not stored since the last report (say so in the daemon's log).
    pub first_dropped: bool,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: Dropped,
    /// When the first event of `dropped` was dropped.
    since: Option<Instant>,
}

/// The buckets of every sandbox.
#[derive(Debug)]
pub struct EventCap {
    per_minute: u32,
    burst: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl EventCap {
    /// A cap of `per_minute` events per sandbox after a burst of [`BURST`] (or of `per_minute`,
    /// when that is more).
    pub fn new(per_minute: u32) -> EventCap {
        let per_minute = per_minute.max(1);
        EventCap { per_minute, burst: BURST.max(per_minute), buckets: Mutex::default() }
    }

    /// The configured rate.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// The burst.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Takes one event of `sandbox` at `now`, standing for `weight` requests (or packets).
    pub fn admit(&self, sandbox: &str, now: Instant, weight: u64) -> Admission {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = map.entry(sandbox.to_owned()).or_insert_with(|| Bucket {
            tokens: f64::from(self.burst),
            at: now,
            dropped: Dropped::default(),
            since: None,
        });
        let refill =
            now.saturating_duration_since(b.at).as_secs_f64() * f64::from(self.per_minute) / 60.0;
        b.tokens = (b.tokens + refill).min(f64::from(self.burst));
        b.at = now;
        let report = match b.since {
            Some(since) if now.saturating_duration_since(since) >= REPORT_PERIOD => {
                b.since = None;
                Some(std::mem::take(&mut b.dropped))
            }
            _ => None,
        };
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Admission { store: true, report, first_dropped: false };
        }
        b.dropped.events += 1;
        b.dropped.standing_for += weight;
        let first_dropped = b.since.is_none();
        if first_dropped {
            b.since = Some(now);
        }
        Admission { store: false, report, first_dropped }
    }

    /// The sandbox ended: its bucket goes, and the events it had not stored since the last
    /// report are returned (to report), if any.
    pub fn end(&self, sandbox: &str) -> Option<Dropped> {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(sandbox).map(|b| b.dropped).filter(|d| d.events > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_every_drop_reported_once() {
        let cap = EventCap::new(60);
        let t0 = Instant::now();
        let stored = (0..BURST + 500).filter(|_| cap.admit("sb", t0, 1).store).count();
        assert_eq!(stored, BURST as usize, "the burst, then nothing at the same instant");
        // Another sandbox has a bucket of its own.
        assert!(cap.admit("other", t0, 1).store);
        // One a second comes back (60 a minute).
        let t1 = t0 + Duration::from_secs(1);
        let a = cap.admit("sb", t1, 1);
        assert_eq!(a, Admission { store: true, report: None, first_dropped: false });
        let a = cap.admit("sb", t1, 1);
        assert_eq!(a, Admission { store: false, report: None, first_dropped: false });
        // A report period after the first drop, the next event brings the count (500 + 1).
        let t2 = t0 + REPORT_PERIOD;
        let a = cap.admit("sb", t2, 1);
        assert_eq!(a.report, Some(Dropped { events: 501, standing_for: 501 }));
        assert!(a.store, "a minute refilled 60");
        // Nothing more dropped: the end has nothing to report; a new bucket starts full.
        assert_eq!(cap.end("sb"), None);
        assert!((0..BURST).all(|_| cap.admit("sb", t2, 1).store));
        assert!(!cap.admit("sb", t2, 7).store, "a summary of seven refusals");
        assert_eq!(cap.end("sb"), Some(Dropped { events: 1, standing_for: 7 }));
    }

    #[test]
    fn the_counts_add_up_over_a_flood() {
        let cap = EventCap::new(120);
        let t0 = Instant::now();
        let (mut stored, mut reported) = (0u64, 0u64);
        let total = 10_000u64;
        for i in 0..total {
            // 10,000 events over 100 seconds.
            let a = cap.admit("sb", t0 + Duration::from_millis(i * 10), 1);
            stored += u64::from(a.store);
            reported += a.report.map_or(0, |d| d.events);
        }
        reported += cap.end("sb").map_or(0, |d| d.events);
        assert_eq!(stored + reported, total);
        // The burst plus two a second for the 100 seconds (give or take one).
        assert!((BURST as u64 + 199..=BURST as u64 + 201).contains(&stored), "{stored}");
    }

    #[test]
    fn a_rate_above_the_burst_raises_the_burst() {
        let cap = EventCap::new(5000);
        assert_eq!((cap.per_minute(), cap.burst()), (5000, 5000));
        let t0 = Instant::now();
        assert_eq!((0..6000).filter(|_| cap.admit("sb", t0, 1).store).count(), 5000);
    }
}
