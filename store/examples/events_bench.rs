//! Fills a store with traffic events through the daemon's own writer (batched transactions) and
//! reports the insert rate, then times [`Store::traffic_summary`] over what it wrote.
//!
//! `cargo run -p sandgate-store --example events_bench -- DB [EVENTS] [SPREAD_MS]`: events are
//! `SPREAD_MS` apart and end now (1 ms: a million in 17 minutes; 2592 ms: a million over the
//! 30-day retention). 2,000 hosts, one in 20 events a blocked packet, a third of requests denied
//! (the same mix as bench/log.sh has always used).

use std::time::Instant;

use sandgate_store::{
    EventKind, EventWriter, EventWriterConfig, NewEvent, Store, Timestamp, TrafficQuery,
};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: events_bench DB [EVENTS] [SPREAD_MS]")?;
    let n: i64 = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    let spread: i64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let store = Store::open(&path)?;
    let config = EventWriterConfig::default();
    let writer = EventWriter::start(&store, config)?;
    let now = Timestamp::now().as_millis();
    // A small deterministic generator: the same file every run.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    for i in 0..n {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let time = Timestamp(now - (n - i) * spread);
        let (kind, details) = if i % 20 == 0 {
            let dst = format!("10.0.0.{}", i % 200);
            let details = json!({ "event": "blocked", "sandbox": "sg-bench", "protocol": "tcp",
                                  "dst": dst, "port": 443, "count": 1 });
            (EventKind::BlockedPacket, details)
        } else {
            let h = seed % 2000;
            let details = json!({ "event": "request", "sandbox": "sg-bench", "method": "CONNECT",
                "host": format!("h{h}.example{}.com", h % 50), "port": 443,
                "decision": if i % 3 != 0 { "allow" } else { "deny" }, "rule": "bench",
                "bytes_up": 500, "bytes_down": 5000, "ms": 12.5 });
            (EventKind::Decision, details)
        };
        let event = NewEvent { time, sandbox: Some("sg-bench".into()), kind, details };
        // The queue drops what does not fit (as it must on the proxy's hot path); a benchmark
        // wants every event, so it waits for the writer before the queue can fill.
        if !writer.send(event) {
            return Err("the writer dropped an event".into());
        }
        if i % (config.capacity as i64 / 2) == 0 {
            writer.flush();
        }
    }
    writer.flush();
    let took = started.elapsed();
    let stats = writer.shutdown();
    let cpu = cpu_seconds() - cpu_before;
    // CPU time too: on a shared machine the wall clock measures the neighbours.
    println!(
        "inserted {} events in {:.2} s: {:.0} events/s; CPU {:.2} s, {:.1} µs/event ({} \
         transactions)",
        stats.written,
        took.as_secs_f64(),
        stats.written as f64 / took.as_secs_f64(),
        cpu,
        cpu * 1e6 / stats.written.max(1) as f64,
        stats.batches
    );
    for since in [None, Some(Timestamp(now - 3_600_000))] {
        let t = Instant::now();
        let cpu = cpu_seconds();
        let rows = store.traffic_summary(&TrafficQuery { since, ..TrafficQuery::default() })?;
        println!(
            "traffic_summary (since {}): {} hosts in {:.0} ms (CPU {:.0} ms)",
            since.map_or("ever".into(), |_| "1h".to_string()),
            rows.len(),
            t.elapsed().as_secs_f64() * 1e3,
            (cpu_seconds() - cpu) * 1e3
        );
    }
    Ok(())
}

/// User + system CPU seconds of this process (all threads), from /proc (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // The state letter is not a number, so the numbers start at field 4 (ppid): utime is
    // field 14, index 10 here. Clock ticks are 100 Hz on Linux.
    (f.get(10).copied().unwrap_or(0.0) + f.get(11).copied().unwrap_or(0.0)) / 100.0
}
