//! What the DNS stub records of the names it refuses: one event per (sandbox, registrable
//! domain, outcome) and window, not one per name.
//!
//! A sandbox that asks for random names (`<data>.attacker.example`, or names made up to fill
//! the disk) would otherwise leave an event per name, kept for the retention period. So:
//! - the first refusal under a registrable domain opens a [`WINDOW`] and is recorded at once, as
//!   before (the launcher's notice on the command's stderr and `sandgate log` show it);
//! - every further refusal under that domain in the window is counted, with up to [`SAMPLES`]
//!   distinct names kept;
//! - when the window ends (or the sandbox does, or the proxy shuts down), what was counted
//!   becomes one summary event: host the registrable domain, [`ProxyEvent::count`] the refusals,
//!   [`ProxyEvent::samples`] the names kept.
//!
//! Windows open at once are bounded ([`WINDOWS`]): past that, a refusal is recorded by itself
//! (random *registrable* domains defeat any grouping; the daemon's per-sandbox cap on stored
//! events is the backstop for those).
//!
//! "Registrable domain" is a pragmatic rule ([`registrable`]), not the Public Suffix List: it
//! only decides what is counted together in the log, never what is allowed.
//!
//! Pure but for the lock: the caller passes the time and records what comes back.
//!
//! The stub's memory of what it refused ([`DnsCache`]: these windows, and the names refused in
//! the last seconds, by the clock) is owned by the proxy's shared state (`proxy.rs`), which the
//! stub borrows: it lives here, not in `dns.rs`, so that `proxy.rs` needs no stage.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::traits::{Outcome, ProxyEvent, SandboxId};

/// How long refusals under one registrable domain are counted together after the first.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Distinct names a summary keeps as examples.
pub const SAMPLES: usize = 5;
/// The method of a DNS event.
pub const EVENT_METHOD: &str = "DNS";
/// Windows open at once, over all sandboxes.
const WINDOWS: usize = 4096;
/// Second-level labels under a two-letter country code that are registries' own (`co.uk`,
/// `com.au`, `ac.jp`, ...): a name under them is grouped by three labels, not two.
const SHORT_SECOND_LEVEL: [&str; 16] = [
    "ac", "co", "com", "edu", "gob", "go", "gov", "ltd", "mil", "ne", "net", "nic", "or", "org",
    "plc", "sch",
];

/// The part of `name` refusals are grouped by: its last two labels, or three when the second
/// to last is a registry's own second level under a country code (`example.co.uk`). A name of
/// one or two labels, and an address, is its own group. Pragmatic on purpose (no Public Suffix
/// List in the tree): `a.github.io` and `b.github.io` are counted together, which for a log of
/// refusals is what a reader wants anyway.
pub fn registrable(name: &str) -> &str {
    let name = name.trim_end_matches('.');
    if name.parse::<std::net::IpAddr>().is_ok() {
        return name;
    }
    let dots: Vec<usize> = name.match_indices('.').map(|(i, _)| i).collect();
    let labels = dots.len() + 1;
    let tld = &name[dots.last().map_or(0, |d| d + 1)..];
    let keep = if labels >= 3 && tld.len() == 2 && tld.bytes().all(|b| b.is_ascii_alphabetic()) {
        let second = &name[dots[dots.len() - 2] + 1..dots[dots.len() - 1]];
        if SHORT_SECOND_LEVEL.iter().any(|s| s.eq_ignore_ascii_case(second)) { 3 } else { 2 }
    } else {
        2
    };
    if labels <= keep { name } else { &name[dots[labels - keep - 1] + 1..] }
}

/// What to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// Record its event now (the first of a window, or no window could be opened).
    Record,
    /// Counted in an open window; nothing to record now. `schedule`: the first one counted,
    /// so the caller arranges for [`Refusals::due`] to run at `at`.
    Counted {
        /// Whether this was the window's first counted refusal.
        schedule: bool,
        /// When the window ends.
        at: Instant,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    sandbox: SandboxId,
    domain: String,
    decision: Outcome,
}

#[derive(Debug)]
struct Window {
    opened: Instant,
    counted: u64,
    samples: Vec<String>,
    /// The rule of the latest refusal counted.
    rule: String,
}

/// The open windows of every sandbox (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    windows: Mutex<HashMap<Key, Window>>,
}

impl Refusals {
    /// Notes a refusal of `name` (its text as events show it) for `sandbox`, by `rule`, at `now`.
    /// `overdue` receives the summaries of windows that ended before `now` and were not reported
    /// yet (record them before this refusal's own event).
    pub(crate) fn note(
        &self,
        now: Instant,
        sandbox: &SandboxId,
        name: &str,
        decision: Outcome,
        rule: &str,
        overdue: &mut Vec<ProxyEvent>,
    ) -> Note {
        let key = Key { sandbox: sandbox.clone(), domain: registrable(name).to_owned(), decision };
        let mut map = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = map.get_mut(&key) {
            if now.duration_since(w.opened) < WINDOW {
                w.counted += 1;
                if w.samples.len() < SAMPLES && !w.samples.iter().any(|s| s == name) {
                    w.samples.push(name.to_owned());
                }
                w.rule = rule.to_owned();
                return Note::Counted { schedule: w.counted == 1, at: w.opened + WINDOW };
            }
            // Ended, its summary not taken yet (the timer is late): report it, open a new one.
            if let Some(w) = map.remove(&key) {
                overdue.extend(summary(&key, w));
            }
        }
        if map.len() >= WINDOWS {
            take(&mut map, |_, w| now.duration_since(w.opened) >= WINDOW, overdue);
            if map.len() >= WINDOWS {
                return Note::Record;
            }
        }
        map.insert(
            key,
            Window { opened: now, counted: 0, samples: Vec::new(), rule: String::new() },
        );
        Note::Record
    }

    /// The summaries of the windows ended by `now` (their windows closed).
    pub(crate) fn due(&self, now: Instant) -> Vec<ProxyEvent> {
        let mut map = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        take(&mut map, |_, w| now.duration_since(w.opened) >= WINDOW, &mut out);
        out
    }

    /// The summaries of every window of `sandbox` (all sandboxes: `None`), ended or not (their
    /// windows closed): the sandbox ended, or the proxy shuts down.
    pub(crate) fn close(&self, sandbox: Option<&SandboxId>) -> Vec<ProxyEvent> {
        let mut map = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        take(&mut map, |k, _| sandbox.is_none_or(|s| *s == k.sandbox), &mut out);
        out
    }
}

/// Removes the windows `pick` chooses and puts the summaries of those that counted anything
/// into `out`.
fn take(
    map: &mut HashMap<Key, Window>,
    pick: impl Fn(&Key, &Window) -> bool,
    out: &mut Vec<ProxyEvent>,
) {
    let keys: Vec<Key> = map.iter().filter(|(k, w)| pick(k, w)).map(|(k, _)| k.clone()).collect();
    for k in keys {
        if let Some(w) = map.remove(&k) {
            out.extend(summary(&k, w));
        }
    }
}

/// The one event a window's counted refusals become (none when it counted none: its first
/// refusal was recorded by itself).
fn summary(key: &Key, w: Window) -> Option<ProxyEvent> {
    (w.counted > 0).then(|| ProxyEvent {
        sandbox: key.sandbox.clone(),
        method: EVENT_METHOD.to_owned(),
        host: key.domain.clone(),
        port: 0,
        path: None,
        decision: key.decision,
        rule: format!(
            "{} more names under {} within {} s of the first, e.g. {}: {}",
            w.counted,
            key.domain,
            WINDOW.as_secs(),
            w.samples.join(", "),
            w.rule
        ),
        bytes_up: 0,
        bytes_down: 0,
        duration: Duration::ZERO,
        error: None,
        count: w.counted,
        samples: w.samples,
        process: None,
        secrets_injected: 0,
    })
}

/// Names whose last refusal the stub remembers; emptied when it is full.
const CACHE_NAMES: usize = 4096;
/// A name refused again within this time is not another event (A and AAAA, resolver retries).
const REFUSAL_QUIET: Duration = Duration::from_secs(5);

/// Refusals recently recorded, and those counted per domain.
#[derive(Debug, Default)]
pub(crate) struct DnsCache {
    refused: Mutex<HashMap<(crate::SandboxId, String), Instant>>,
    pub(crate) refusals: Refusals,
}

impl DnsCache {
    /// Whether a refusal of `name` for `sandbox` is worth an event (not one in the last
    /// [`REFUSAL_QUIET`]).
    pub(crate) fn first_refusal(&self, sandbox: &crate::SandboxId, name: &str) -> bool {
        let mut map = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let key = (sandbox.clone(), name.to_owned());
        if map.get(&key).is_some_and(|at| at.elapsed() < REFUSAL_QUIET) {
            return false;
        }
        if map.len() >= CACHE_NAMES {
            map.retain(|_, at| at.elapsed() < REFUSAL_QUIET);
            if map.len() >= CACHE_NAMES {
                map.clear();
            }
        }
        map.insert(key, Instant::now());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrable_domains_by_the_pragmatic_rule() {
        let rows = [
            ("example.com", "example.com"),
            ("a.b.example.com", "example.com"),
            ("c2VjcmV0.attacker.example", "attacker.example"),
            ("com", "com"),
            ("www.example.co.uk", "example.co.uk"),
            ("example.co.uk", "example.co.uk"),
            ("x.y.example.com.au", "example.com.au"),
            ("a.example.de", "example.de"),
            ("a.b.example.io", "example.io"),
            ("a.b.github.io", "github.io"),
            ("deep.name.ac.jp", "name.ac.jp"),
            ("trailing.example.org.", "example.org"),
            ("192.0.2.1", "192.0.2.1"),
            ("2001:db8::1", "2001:db8::1"),
            ("a.\\000.example", "\\000.example"),
        ];
        for (name, want) in rows {
            assert_eq!(registrable(name), want, "{name}");
        }
    }

    #[test]
    fn refusals_under_one_domain_are_counted_and_summarised_once_per_window() {
        let r = Refusals::default();
        let (sb, other) = (SandboxId::new("sb"), SandboxId::new("other"));
        let t0 = Instant::now();
        let mut overdue = Vec::new();
        let rule = "no rule allows this name";
        let mut note =
            |t, sb: &SandboxId, name: &str| r.note(t, sb, name, Outcome::Deny, rule, &mut overdue);
        assert_eq!(note(t0, &sb, "a.attacker.example"), Note::Record);
        let at = t0 + WINDOW;
        assert_eq!(note(t0, &sb, "b.attacker.example"), Note::Counted { schedule: true, at });
        for i in 0..1000 {
            let name = format!("n{i}.attacker.example");
            assert_eq!(note(t0, &sb, &name), Note::Counted { schedule: false, at });
        }
        // Another domain, another sandbox: windows of their own.
        assert_eq!(note(t0, &sb, "x.elsewhere.example"), Note::Record);
        assert_eq!(note(t0, &other, "c.attacker.example"), Note::Record);
        assert!(overdue.is_empty());
        assert!(r.due(t0 + WINDOW / 2).is_empty());
        let due = r.due(at);
        assert_eq!(due.len(), 1, "{due:?}");
        let s = &due[0];
        assert_eq!(
            (s.host.as_str(), s.count, s.decision),
            ("attacker.example", 1001, Outcome::Deny)
        );
        assert_eq!(s.samples.len(), SAMPLES);
        assert_eq!(s.samples[0], "b.attacker.example");
        assert!(
            s.rule.contains("1001 more names under attacker.example") && s.rule.ends_with(rule)
        );
        // The windows that counted nothing closed without a summary; a new refusal opens anew.
        assert!(r.due(at).is_empty());
        assert_eq!(
            r.note(at, &sb, "z.attacker.example", Outcome::Deny, rule, &mut overdue),
            Note::Record
        );
    }

    #[test]
    fn a_late_timer_or_the_sandboxs_end_loses_no_count() {
        let r = Refusals::default();
        let sb = SandboxId::new("sb");
        let t0 = Instant::now();
        let mut overdue = Vec::new();
        for name in ["a.x.example", "b.x.example", "c.x.example"] {
            r.note(t0, &sb, name, Outcome::Deny, "r", &mut overdue);
        }
        // The window ended and its timer has not run: the next refusal brings its summary.
        let late = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(
            r.note(late, &sb, "d.x.example", Outcome::Deny, "r", &mut overdue),
            Note::Record
        );
        assert_eq!(overdue.iter().map(|e| e.count).collect::<Vec<_>>(), [2]);
        r.note(late, &sb, "e.x.example", Outcome::Deny, "r", &mut overdue);
        r.note(late, &SandboxId::new("o"), "e.x.example", Outcome::Reject, "r", &mut overdue);
        r.note(late, &SandboxId::new("o"), "f.x.example", Outcome::Reject, "r", &mut overdue);
        // The sandbox ends before the window: its counts come out, the other's stay.
        let closed = r.close(Some(&sb));
        assert_eq!(closed.iter().map(|e| e.count).collect::<Vec<_>>(), [1]);
        let rest = r.close(None);
        assert_eq!(
            rest.iter().map(|e| (e.count, e.decision)).collect::<Vec<_>>(),
            [(1, Outcome::Reject)]
        );
    }

    #[test]
    fn past_the_window_bound_refusals_are_recorded_by_themselves() {
        let r = Refusals::default();
        let sb = SandboxId::new("sb");
        let t0 = Instant::now();
        let mut overdue = Vec::new();
        for i in 0..WINDOWS {
            let name = format!("a.d{i}.example");
            assert_eq!(r.note(t0, &sb, &name, Outcome::Deny, "r", &mut overdue), Note::Record);
        }
        // Full: a new domain gets no window; a known one still counts.
        assert_eq!(
            r.note(t0, &sb, "a.new.example", Outcome::Deny, "r", &mut overdue),
            Note::Record
        );
        assert_eq!(
            r.note(t0, &sb, "b.new.example", Outcome::Deny, "r", &mut overdue),
            Note::Record
        );
        assert!(matches!(
            r.note(t0, &sb, "b.d7.example", Outcome::Deny, "r", &mut overdue),
            Note::Counted { .. }
        ));
        // Once the windows have ended, room is made again.
        let later = t0 + WINDOW;
        assert_eq!(
            r.note(later, &sb, "a.new.example", Outcome::Deny, "r", &mut overdue),
            Note::Record
        );
        assert_eq!(overdue.len(), 1, "the counted one came out when room was made");
        assert!(matches!(
            r.note(later, &sb, "b.new.example", Outcome::Deny, "r", &mut overdue),
            Note::Counted { .. }
        ));
    }
}
