//! Dedupe and rate limiting: many blocked packets become few [`Alert`]s with exact counts.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::{AlertSink, Attribution, BlockedPacket, Protocol};

/// What makes two blocked packets "the same attempt".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AlertKey {
    /// Sandbox or scope the packet was attributed to; `*` for the overflow bucket.
    pub scope: String,
    /// Destination address; `None` only for the overflow bucket.
    pub dst: Option<IpAddr>,
    /// Transport protocol; `None` only for the overflow bucket.
    pub protocol: Option<Protocol>,
    /// Destination port (TCP/UDP) or ICMP type.
    pub port: Option<u16>,
}

impl AlertKey {
    /// The bucket that counts packets arriving while the map is full.
    pub fn overflow() -> Self {
        AlertKey { scope: "*".to_owned(), dst: None, protocol: None, port: None }
    }

    /// Whether this is the overflow bucket.
    pub fn is_overflow(&self) -> bool {
        self.dst.is_none() && self.protocol.is_none() && self.scope == "*"
    }
}

/// Blocked packets of one key between `first_seen` and `last_seen`.
///
/// The counts of all alerts of a key add up to the packets seen for it: the first packet of a key
/// alerts at once with `count` 1, later ones are summed into one alert per window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    /// What was attempted.
    pub key: AlertKey,
    /// Time of the first packet counted in this alert.
    pub first_seen: SystemTime,
    /// Time of the last packet counted in this alert.
    pub last_seen: SystemTime,
    /// Packets counted in this alert.
    pub count: u64,
    /// Socket uid of the last packet, when known.
    pub uid: Option<u32>,
    /// Process id of the last packet, when known (pflog only).
    pub pid: Option<u32>,
}

/// Limits of an [`Aggregator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregatorConfig {
    /// At most one summary alert per key per window.
    pub window: Duration,
    /// At most this many keys are tracked; beyond it packets go to the overflow bucket.
    pub max_keys: usize,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig { window: Duration::from_secs(10), max_keys: 4096 }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// When the current window started (last emission).
    window_start: SystemTime,
    /// First and last packet not yet reported.
    first: SystemTime,
    last: SystemTime,
    unreported: u64,
    uid: Option<u32>,
    pid: Option<u32>,
}

/// Folds blocked packets into alerts with bounded memory.
///
/// Lifecycle: [`observe`](Self::observe) each packet (may alert at once for a new key) →
/// [`flush`](Self::flush) periodically (summaries of keys whose window has passed; idle keys are
/// forgotten) → [`finish`](Self::finish) at shutdown (everything unreported). Memory is bounded by
/// `max_keys + 1` entries; the number of alerts by `(max_keys + 1) × (1 + elapsed / window)`.
#[derive(Debug)]
pub struct Aggregator {
    config: AggregatorConfig,
    attribution: Attribution,
    entries: HashMap<AlertKey, Entry>,
    overflow: Option<Entry>,
    seen: u64,
}

impl Aggregator {
    /// An aggregator attributing packets with `attribution`.
    pub fn new(config: AggregatorConfig, attribution: Attribution) -> Self {
        Aggregator { config, attribution, entries: HashMap::new(), overflow: None, seen: 0 }
    }

    /// Packets observed so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Keys currently tracked (without the overflow bucket).
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }

    /// The key `packet` is counted under (before the overflow rule).
    pub fn key_of(&self, packet: &BlockedPacket) -> AlertKey {
        let port = match packet.protocol {
            Protocol::Icmp | Protocol::Icmpv6 => packet.icmp_type.map(u16::from),
            Protocol::Tcp | Protocol::Udp | Protocol::Other(_) => packet.dst_port,
        };
        AlertKey {
            scope: self.attribution.scope_of(packet),
            dst: Some(packet.dst),
            protocol: Some(packet.protocol),
            port,
        }
    }

    /// Counts one packet; returns an alert when it is the first of a new key.
    pub fn observe(&mut self, packet: &BlockedPacket) -> Option<Alert> {
        self.seen += 1;
        let key = self.key_of(packet);
        let t = packet.time;
        if let Some(e) = self.entries.get_mut(&key) {
            if e.unreported == 0 {
                e.first = t;
            }
            e.unreported += 1;
            e.last = t;
            e.uid = packet.uid.or(e.uid);
            e.pid = packet.pid.or(e.pid);
            return None;
        }
        if self.entries.len() >= self.config.max_keys {
            let e = self.overflow.get_or_insert(Entry {
                window_start: t,
                first: t,
                last: t,
                unreported: 0,
                uid: None,
                pid: None,
            });
            if e.unreported == 0 {
                e.first = t;
            }
            e.unreported += 1;
            e.last = t;
            return None;
        }
        let alert = Alert {
            key: key.clone(),
            first_seen: t,
            last_seen: t,
            count: 1,
            uid: packet.uid,
            pid: packet.pid,
        };
        self.entries.insert(
            key,
            Entry {
                window_start: t,
                first: t,
                last: t,
                unreported: 0,
                uid: packet.uid,
                pid: packet.pid,
            },
        );
        Some(alert)
    }

    /// Observes every packet, delivering alerts to `sink`.
    pub fn observe_all<'a>(
        &mut self,
        packets: impl IntoIterator<Item = &'a BlockedPacket>,
        sink: &mut dyn AlertSink,
    ) {
        for p in packets {
            if let Some(a) = self.observe(p) {
                sink.deliver(&a);
            }
        }
    }

    /// Summaries of keys whose window ended by `now`; forgets keys idle for a whole window.
    pub fn flush(&mut self, now: SystemTime, sink: &mut dyn AlertSink) {
        let window = self.config.window;
        let due = |start: SystemTime| now.duration_since(start).is_ok_and(|d| d >= window);
        self.entries.retain(|key, e| {
            if !due(e.window_start) {
                return true;
            }
            if e.unreported == 0 {
                return false; // idle for a window: the next packet alerts afresh
            }
            sink.deliver(&summary(key.clone(), e));
            e.unreported = 0;
            e.window_start = now;
            true
        });
        if let Some(e) = self.overflow.as_mut().filter(|e| due(e.window_start)) {
            if e.unreported > 0 {
                sink.deliver(&summary(AlertKey::overflow(), e));
            }
            self.overflow = None;
        }
    }

    /// Delivers everything not yet reported and forgets all keys (shutdown).
    pub fn finish(&mut self, sink: &mut dyn AlertSink) {
        for (key, e) in self.entries.drain() {
            if e.unreported > 0 {
                sink.deliver(&summary(key, &e));
            }
        }
        if let Some(e) = self.overflow.take().filter(|e| e.unreported > 0) {
            sink.deliver(&summary(AlertKey::overflow(), &e));
        }
    }
}

fn summary(key: AlertKey, e: &Entry) -> Alert {
    Alert {
        key,
        first_seen: e.first,
        last_seen: e.last,
        count: e.unreported,
        uid: e.uid,
        pid: e.pid,
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::VecSink;

    fn pkt(secs: u64, prefix: &str, dst: &str, port: u16) -> BlockedPacket {
        BlockedPacket {
            time: UNIX_EPOCH + Duration::from_secs(secs),
            prefix: prefix.into(),
            uid: Some(1001),
            gid: None,
            pid: None,
            protocol: Protocol::Tcp,
            src: "10.0.0.2".parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: Some(40000),
            dst_port: Some(port),
            tcp_flags: Some(2),
            icmp_type: None,
            icmp_code: None,
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn first_packet_alerts_then_one_summary_per_window() {
        let mut agg = Aggregator::new(
            AggregatorConfig { window: Duration::from_secs(10), max_keys: 8 },
            Attribution::new(),
        );
        let mut sink = VecSink::default();
        for s in 0..25 {
            for _ in 0..4 {
                agg.observe_all([&pkt(s, "sbx", "10.0.0.1", 443)], &mut sink);
            }
            agg.flush(at(s), &mut sink);
        }
        agg.finish(&mut sink);
        let counts: Vec<u64> = sink.alerts.iter().map(|a| a.count).collect();
        assert_eq!(counts, [1, 43, 40, 16]);
        assert_eq!(counts.iter().sum::<u64>(), 100);
        assert_eq!(sink.alerts[1].first_seen, at(0));
        assert_eq!(sink.alerts[1].last_seen, at(10));
    }

    #[test]
    fn flood_of_distinct_keys_is_bounded_and_counted() {
        let mut agg = Aggregator::new(
            AggregatorConfig { window: Duration::from_secs(1), max_keys: 100 },
            Attribution::new(),
        );
        let mut sink = VecSink::default();
        let n = 100_000u64;
        for i in 0..n {
            let dst = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            agg.observe_all([&pkt(0, "sbx", &dst, 80)], &mut sink);
        }
        agg.finish(&mut sink);
        assert!(sink.alerts.len() <= 101, "{} alerts", sink.alerts.len());
        assert_eq!(sink.alerts.iter().map(|a| a.count).sum::<u64>(), n);
        let overflow = sink.alerts.iter().find(|a| a.key.is_overflow()).unwrap();
        assert_eq!(overflow.count, n - 100);
        assert!(agg.tracked() == 0);
    }

    #[test]
    fn attribution_precedence() {
        let mut attr = Attribution::new();
        attr.prefix("sandgate.u1001", "guest-1001").uid(1001, "by-uid");
        let agg = Aggregator::new(AggregatorConfig::default(), attr);
        assert_eq!(agg.key_of(&pkt(0, "sandgate.u1001", "1.1.1.1", 1)).scope, "guest-1001");
        assert_eq!(agg.key_of(&pkt(0, "other", "1.1.1.1", 1)).scope, "by-uid");
        let mut p = pkt(0, "sbx-9", "1.1.1.1", 1);
        p.uid = None;
        assert_eq!(agg.key_of(&p).scope, "sbx-9");
        p.prefix.clear();
        assert_eq!(agg.key_of(&p).scope, "unknown");
    }
}
