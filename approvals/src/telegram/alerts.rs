//! Blocked-traffic alerts, deduplicated and budgeted: one message per key (sandbox +
//! destination) per window, then one summary with the count of what was held back; and at most
//! a budget of messages per sandbox per window across destinations, then one summary for the
//! sandbox ("and N more"), so a sandbox trying 300 addresses makes a dozen messages, not 300.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::format_duration;

/// A blocked-traffic alert as a chat message: the text to post and what dedupes and budgets it
/// (the monitor's own `Alert` is the packet count it is written from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertMessage {
    /// The sandbox it concerns (the budget's key).
    pub sandbox: String,
    /// What makes two alerts "the same": e.g. `sb1 → 1.2.3.4:443/tcp`.
    pub key: String,
    /// The text to post.
    pub text: String,
    /// How many blocked packets this alert stands for (already aggregated upstream, ≥ 1).
    pub count: u64,
}

struct Entry {
    sandbox: String,
    window_start: Instant,
    held: u64,
    text: String,
}

/// One sandbox's messages in the current window.
struct Spent {
    window_start: Instant,
    sent: u32,
    /// Packets held back past the budget, and the destinations they went to.
    held: u64,
    destinations: HashSet<String>,
}

/// Distinct destinations remembered per sandbox summary (beyond, they are only counted).
const MAX_REMEMBERED: usize = 4096;

/// The dedup state; pure (time is passed in), so tests drive it directly.
pub struct AlertDeduper {
    window: Duration,
    budget: u32,
    entries: HashMap<String, Entry>,
    sandboxes: HashMap<String, Spent>,
}

impl AlertDeduper {
    /// One message per key per `window`, no per-sandbox budget (see [`with_budget`]).
    ///
    /// [`with_budget`]: Self::with_budget
    pub fn new(window: Duration) -> Self {
        AlertDeduper {
            window,
            budget: u32::MAX,
            entries: HashMap::new(),
            sandboxes: HashMap::new(),
        }
    }

    /// At most `per_window` messages (≥ 1) per sandbox per window.
    pub fn with_budget(mut self, per_window: u32) -> Self {
        self.budget = per_window.max(1);
        self
    }

    /// Takes a message slot of `sandbox`'s budget; `false` when it is spent.
    fn spend(&mut self, sandbox: &str, now: Instant) -> bool {
        let window = self.window;
        let s = self.sandboxes.entry(sandbox.to_owned()).or_insert(Spent {
            window_start: now,
            sent: 0,
            held: 0,
            destinations: HashSet::new(),
        });
        if s.held == 0 && now.duration_since(s.window_start) >= window {
            s.window_start = now;
            s.sent = 0;
        }
        if s.sent < self.budget {
            s.sent += 1;
            true
        } else {
            false
        }
    }

    fn hold(&mut self, sandbox: &str, key: &str, count: u64) {
        if let Some(s) = self.sandboxes.get_mut(sandbox) {
            s.held = s.held.saturating_add(count);
            if s.destinations.len() < MAX_REMEMBERED {
                s.destinations.insert(key.to_owned());
            }
        }
    }

    /// Takes an alert; returns the message to post now, or `None` if it is counted for a
    /// summary.
    pub fn offer(&mut self, alert: AlertMessage, now: Instant) -> Option<String> {
        let count = alert.count.max(1);
        if let Some(e) = self.entries.get_mut(&alert.key)
            && now.duration_since(e.window_start) < self.window
        {
            e.held = e.held.saturating_add(count);
            e.text = alert.text;
            return None;
        }
        if !self.spend(&alert.sandbox, now) {
            self.hold(&alert.sandbox, &alert.key, count);
            return None;
        }
        let msg = if count > 1 {
            format!("🚫 {} (×{count})", alert.text)
        } else {
            format!("🚫 {}", alert.text)
        };
        self.entries.insert(
            alert.key,
            Entry { sandbox: alert.sandbox, window_start: now, held: 0, text: alert.text },
        );
        Some(msg)
    }

    /// The summaries of windows that ended: per sandbox over its budget (`and N more`), then
    /// per key (`N more in the last 60s`, itself within the sandbox's budget); keys that stayed
    /// quiet are forgotten, keys still busy start a new window.
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let window = self.window;
        let every = format_duration(window.max(Duration::from_secs(1)));
        let mut out = Vec::new();
        self.sandboxes.retain(|sandbox, s| {
            if now.duration_since(s.window_start) < window {
                return true;
            }
            if s.held > 0 {
                out.push(format!(
                    "🚫 {sandbox}: and {} more blocked attempts to {}{} destinations in the last \
                     {every} (alerts are limited per sandbox; `sandgate watch` shows them all)",
                    s.held,
                    s.destinations.len(),
                    if s.destinations.len() >= MAX_REMEMBERED { "+" } else { "" },
                ));
            }
            false
        });
        let mut per_key = Vec::new();
        self.entries.retain(|_, e| {
            if now.duration_since(e.window_start) < window {
                return true;
            }
            if e.held == 0 {
                return false;
            }
            per_key.push((e.sandbox.clone(), e.text.clone(), e.held));
            e.held = 0;
            e.window_start = now;
            true
        });
        per_key.sort();
        let mut keyed = Vec::new();
        for (sandbox, text, held) in per_key {
            if self.spend(&sandbox, now) {
                keyed.push(format!("🚫 {text} — {held} more in the last {every}"));
            } else {
                self.hold(&sandbox, &text, held);
            }
        }
        out.sort();
        out.extend(keyed);
        out
    }

    /// When the next window ends (for the flush timer), if anything is being counted.
    pub fn next_deadline(&self) -> Option<Instant> {
        let keys =
            self.entries.values().filter(|e| e.held > 0).map(|e| e.window_start + self.window);
        let sandboxes =
            self.sandboxes.values().filter(|s| s.held > 0).map(|s| s.window_start + self.window);
        keys.chain(sandboxes).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(key: &str, count: u64) -> AlertMessage {
        AlertMessage {
            sandbox: "sb1".into(),
            key: key.into(),
            text: format!("sb1 blocked {key}"),
            count,
        }
    }

    #[test]
    fn a_burst_becomes_one_message_and_one_summary() {
        let mut d = AlertDeduper::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let mut sent = Vec::new();
        for i in 0..1000 {
            sent.extend(d.offer(alert("1.2.3.4:443", 1), t0 + Duration::from_millis(i)));
        }
        assert_eq!(sent, vec!["🚫 sb1 blocked 1.2.3.4:443"]);
        assert_eq!(d.next_deadline(), Some(t0 + Duration::from_secs(60)));
        assert!(d.flush(t0 + Duration::from_secs(59)).is_empty());
        let summary = d.flush(t0 + Duration::from_secs(60));
        assert_eq!(summary, vec!["🚫 sb1 blocked 1.2.3.4:443 — 999 more in the last 1m"]);
        // Quiet for a window: forgotten; the next one is posted at once again.
        assert!(d.flush(t0 + Duration::from_secs(120)).is_empty());
        assert!(d.next_deadline().is_none());
        assert!(
            d.offer(alert("1.2.3.4:443", 5), t0 + Duration::from_secs(121))
                .unwrap()
                .ends_with("(×5)")
        );
    }

    #[test]
    fn keys_are_independent() {
        let mut d = AlertDeduper::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(d.offer(alert("a", 1), t0).is_some());
        assert!(d.offer(alert("b", 1), t0).is_some());
        assert!(d.offer(alert("a", 2), t0).is_none());
        assert_eq!(d.flush(t0 + Duration::from_secs(10)).len(), 1);
    }

    #[test]
    fn a_sandbox_trying_many_destinations_gets_its_budget_then_one_summary() {
        let mut d = AlertDeduper::new(Duration::from_secs(60)).with_budget(10);
        let t0 = Instant::now();
        let mut sent = Vec::new();
        for i in 0..300 {
            sent.extend(d.offer(alert(&format!("10.0.{}.{}:443", i / 256, i % 256), 1), t0));
        }
        // Another sandbox has a budget of its own.
        let other =
            AlertMessage { sandbox: "sb2".into(), key: "k".into(), text: "sb2 x".into(), count: 1 };
        assert!(d.offer(other, t0).is_some());
        assert_eq!(sent.len(), 10, "{sent:?}");
        assert_eq!(d.next_deadline(), Some(t0 + Duration::from_secs(60)));
        assert!(d.flush(t0 + Duration::from_secs(59)).is_empty());
        let summary = d.flush(t0 + Duration::from_secs(60));
        assert_eq!(summary.len(), 1, "{summary:?}");
        assert!(summary[0].contains("sb1: and 290 more blocked attempts to 290 destinations"));
        // A new window: the budget is back.
        assert!(d.offer(alert("10.9.9.9:443", 1), t0 + Duration::from_secs(61)).is_some());
    }

    #[test]
    fn an_unbudgeted_deduper_is_as_before() {
        let mut d = AlertDeduper::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let n = (0..300).filter_map(|i| d.offer(alert(&format!("k{i}"), 1), t0)).count();
        assert_eq!(n, 300);
    }
}
