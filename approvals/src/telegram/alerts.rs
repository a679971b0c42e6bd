//! Blocked-traffic alerts, deduplicated: one message per key (sandbox + destination) per window,
//! then one summary with the count of what was held back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::format_duration;

/// A blocked-traffic alert from the monitor (or the proxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// What makes two alerts "the same": e.g. `sb1 → 1.2.3.4:443/tcp`.
    pub key: String,
    /// The text to post.
    pub text: String,
    /// How many blocked packets this alert stands for (already aggregated upstream, ≥ 1).
    pub count: u64,
}

struct Entry {
    window_start: Instant,
    held: u64,
    text: String,
}

/// The dedup state; pure (time is passed in), so tests drive it directly.
pub struct AlertDeduper {
    window: Duration,
    entries: HashMap<String, Entry>,
}

impl AlertDeduper {
    /// One message per key per `window`.
    pub fn new(window: Duration) -> Self {
        AlertDeduper { window, entries: HashMap::new() }
    }

    /// Takes an alert; returns the message to post now, or `None` if it is counted for the
    /// window's summary.
    pub fn offer(&mut self, alert: Alert, now: Instant) -> Option<String> {
        let count = alert.count.max(1);
        if let Some(e) = self.entries.get_mut(&alert.key)
            && now.duration_since(e.window_start) < self.window
        {
            e.held = e.held.saturating_add(count);
            e.text = alert.text;
            return None;
        }
        let msg = if count > 1 {
            format!("🚫 {} (×{count})", alert.text)
        } else {
            format!("🚫 {}", alert.text)
        };
        self.entries.insert(alert.key, Entry { window_start: now, held: 0, text: alert.text });
        Some(msg)
    }

    /// The summaries of windows that ended (`N more in the last 60s`); keys that stayed quiet
    /// are forgotten, keys still busy start a new window.
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        let window = self.window;
        self.entries.retain(|_, e| {
            if now.duration_since(e.window_start) < window {
                return true;
            }
            if e.held == 0 {
                return false;
            }
            out.push(format!(
                "🚫 {} — {} more in the last {}",
                e.text,
                e.held,
                format_duration(window.max(Duration::from_secs(1)))
            ));
            e.held = 0;
            e.window_start = now;
            true
        });
        out.sort();
        out
    }

    /// When the next window ends (for the flush timer), if any key is being counted.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.values().filter(|e| e.held > 0).map(|e| e.window_start + self.window).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(key: &str, count: u64) -> Alert {
        Alert { key: key.into(), text: format!("sb1 blocked {key}"), count }
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
}
