//! The traffic summary (`sandgate log --summary`) against a recount of the events it stands for:
//! every `since` boundary, decision and sandbox filter, pruning, odd event details, and the
//! migration that builds it from an existing file.

use std::collections::BTreeMap;

use rusqlite::Connection;
use sandgate_store::{
    EventKind, HostSummary, NOT_STORED, NewEvent, SCHEMA_VERSION, Store, Timestamp,
    TrafficDecision, TrafficFilter, TrafficQuery,
};
use serde_json::{Value, json};

/// Not on a minute or day boundary, so `since` values fall inside minutes and days.
const T0: i64 = 1_700_000_012_345;
const DAY: i64 = 86_400_000;
/// The rule the summary gives what the cap did not store.
const CAPPED_RULE: &str = "over the sandbox's cap on stored events";

fn tmp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    (dir, store)
}

/// A deterministic mix, half of it within 4 minutes, half over 3 days: allowed, denied, rejected, blocked bursts, and events
/// that are not traffic (a hook decision, a sandbox starting, an approval). A share of the
/// denials are the DNS stub's summaries, each standing for `count` refusals.
fn events(n: u64) -> Vec<NewEvent> {
    events_with(n, true)
}

/// [`events`], with DNS summaries (`counted`) or without (as files before version 5 held).
fn events_with(n: u64, counted: bool) -> Vec<NewEvent> {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let span = if (seed >> 50).is_multiple_of(2) { 240_000 } else { 3 * DAY as u64 };
            let time = Timestamp(T0 + (seed % span) as i64);
            let sandbox = ["sg-a", "sg-b"][(seed >> 20) as usize % 2];
            let host = format!("h{}.example", (seed >> 24) % 5);
            let (kind, details) = match (seed >> 32) % 8 {
                0 => (
                    EventKind::BlockedPacket,
                    json!({ "event": "blocked", "sandbox": sandbox, "protocol": "tcp",
                            "dst": format!("10.0.0.{}", (seed >> 40) % 3), "port": 443,
                            "count": (seed >> 44) % 4 + 1 }),
                ),
                1 => (
                    EventKind::Decision,
                    json!({ "event": "hook", "agent": "claude", "tool": "Bash",
                            "decision": "allow", "reason": "x" }),
                ),
                2 => {
                    (EventKind::Sandbox, json!({ "event": "sandbox_started", "sandbox": sandbox }))
                }
                3 => (EventKind::Approval, json!({ "event": "asked", "host": host })),
                5 if counted && (seed >> 46).is_multiple_of(2) => (
                    EventKind::Decision,
                    json!({ "event": "request", "sandbox": sandbox, "method": "DNS",
                            "host": host, "port": 0, "decision": "deny",
                            "rule": format!("rule {}", seed % 7), "ms": 0.0,
                            "count": (seed >> 48) % 900 + 2, "samples": ["a", "b"] }),
                ),
                k => {
                    let decision = ["allow", "deny", "reject", "allow"][k as usize - 4];
                    (
                        EventKind::Decision,
                        json!({ "event": "request", "sandbox": sandbox, "method": "CONNECT",
                            "host": host, "port": 443,
                            "decision": decision,
                            "rule": format!("rule {}", seed % 7),
                            "bytes_up": (seed >> 8) % 1000, "bytes_down": (seed >> 16) % 100_000,
                            "ms": 1.5 }),
                    )
                }
            };
            NewEvent { time, sandbox: Some(sandbox.into()), kind, details }
        })
        .collect()
}

/// What the summary must say, counted from the events one by one (as `sandgate log` reads a
/// line from each).
fn recount(evs: &[(i64, NewEvent)], q: &TrafficQuery) -> Vec<HostSummary> {
    let mut rows: BTreeMap<String, (HostSummary, i64)> = BTreeMap::new();
    for (id, e) in evs {
        let d = &e.details;
        let (host, decision, conns) = match (e.kind, d["event"].as_str()) {
            (EventKind::Decision | EventKind::BlockedPacket, Some("events_capped")) => (
                NOT_STORED.to_owned(),
                if e.kind == EventKind::BlockedPacket {
                    TrafficDecision::Blocked
                } else {
                    TrafficDecision::Deny
                },
                d["standing_for"].as_u64().unwrap(),
            ),
            (EventKind::Decision, Some("request")) => (
                d["host"].as_str().unwrap().to_owned(),
                if d["decision"] == "allow" {
                    TrafficDecision::Allow
                } else {
                    TrafficDecision::Deny
                },
                d["count"].as_u64().unwrap_or(1),
            ),
            (EventKind::BlockedPacket, Some("blocked")) => (
                d["dst"].as_str().unwrap().to_owned(),
                TrafficDecision::Blocked,
                d["count"].as_u64().unwrap(),
            ),
            _ => continue,
        };
        if q.since.is_some_and(|s| e.time < s)
            || q.sandbox.as_ref().is_some_and(|s| Some(s) != e.sandbox.as_ref())
            || q.decision.is_some_and(|x| x != decision)
        {
            continue;
        }
        let rule = match d["event"].as_str() {
            Some("events_capped") => CAPPED_RULE,
            _ => d["rule"].as_str().unwrap_or("firewall: direct connection"),
        }
        .to_owned();
        let (r, newest) = rows.entry(host.clone()).or_insert_with(|| {
            let r = HostSummary {
                host,
                connections: 0,
                allowed: 0,
                bytes_up: 0,
                bytes_down: 0,
                last_seen: Timestamp(i64::MIN),
                rule: String::new(),
            };
            (r, i64::MIN)
        });
        r.connections += conns;
        if decision == TrafficDecision::Allow {
            r.allowed += conns;
        }
        r.bytes_up += d["bytes_up"].as_u64().unwrap_or(0);
        r.bytes_down += d["bytes_down"].as_u64().unwrap_or(0);
        // Ties on time: any of the rules of that instant is right; keep the test deterministic
        // by comparing rules only where the newest instant is unique (below).
        if e.time.0 > r.last_seen.0 || (e.time.0 == r.last_seen.0 && *id > *newest) {
            r.last_seen = e.time;
            r.rule = rule;
            *newest = *id;
        }
    }
    let mut rows: Vec<HostSummary> = rows.into_values().map(|(r, _)| r).collect();
    rows.sort_by(|a, b| b.connections.cmp(&a.connections).then(a.host.cmp(&b.host)));
    rows
}

/// Compares all but the rule where two events share the newest instant of a host.
fn assert_same(got: &[HostSummary], want: &[HostSummary], evs: &[(i64, NewEvent)], what: &str) {
    let strip = |rows: &[HostSummary]| -> Vec<HostSummary> {
        rows.iter()
            .map(|r| {
                let ties = evs.iter().filter(|(_, e)| e.time == r.last_seen).count();
                let mut r = r.clone();
                if ties > 1 {
                    r.rule = String::from("(tie)");
                }
                r
            })
            .collect()
    };
    assert_eq!(strip(got), strip(want), "{what}");
}

fn stored(store: &Store, evs: Vec<NewEvent>) -> Vec<(i64, NewEvent)> {
    let ids = store.append_events(&evs).unwrap();
    ids.into_iter().zip(evs).collect()
}

#[test]
fn the_summary_equals_a_recount_for_every_since_decision_and_sandbox() {
    let (_d, store) = tmp_store();
    let evs = stored(&store, events(4000));
    let mut sinces: Vec<Option<Timestamp>> = vec![None, Some(Timestamp(T0 + 1_000_000))];
    // Every minute boundary and the instants beside it, plus instants inside minutes.
    let first = T0 / 60_000 * 60_000;
    for m in 0..6 {
        for off in [-1, 0, 1, 12_345, 59_999] {
            sinces.push(Some(Timestamp(first + m * 60_000 + off)));
        }
    }
    // The instants of events themselves (`since` includes them).
    sinces.extend(evs.iter().step_by(97).map(|(_, e)| Some(e.time)));
    // Every day boundary and the instants beside it, and inside days.
    let first = T0 / DAY * DAY;
    for d in 0..4 {
        for off in [-60_001, -60_000, -1, 0, 1, 60_000, 3_600_000 + 7, DAY / 2] {
            sinces.push(Some(Timestamp(first + d * DAY + off)));
        }
    }
    for since in sinces {
        for decision in [
            None,
            Some(TrafficDecision::Allow),
            Some(TrafficDecision::Deny),
            Some(TrafficDecision::Blocked),
        ] {
            for sandbox in [None, Some("sg-a".to_owned()), Some("sg-none".to_owned())] {
                let q = TrafficQuery { sandbox, since, decision };
                let got = store.traffic_summary(&q).unwrap();
                assert_same(&got, &recount(&evs, &q), &evs, &format!("{q:?}"));
            }
        }
    }
    let all = store.traffic_summary(&TrafficQuery::default()).unwrap();
    assert_eq!(all.len(), 8, "5 hosts and 3 blocked addresses: {all:#?}");
}

#[test]
fn pruning_keeps_the_summary_exact_and_drops_empty_buckets() {
    let (d, store) = tmp_store();
    let mut evs = stored(&store, events(2000));
    for cut in [T0 + 30_000, T0 + 61_000, T0 + 150_000, T0 + DAY + 5, T0 + 2 * DAY, T0 + 3 * DAY] {
        store.prune_events(Timestamp(cut)).unwrap();
        evs.retain(|(_, e)| e.time.0 >= cut);
        let q = TrafficQuery::default();
        assert_same(&store.traffic_summary(&q).unwrap(), &recount(&evs, &q), &evs, "after {cut}");
    }
    assert!(evs.is_empty());
    assert!(store.traffic_summary(&TrafficQuery::default()).unwrap().is_empty());
    let conn = Connection::open(d.path().join("s.db")).unwrap();
    for table in ["traffic_days", "traffic_minutes"] {
        let left: i64 =
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0, "{table}: buckets of pruned events are deleted");
    }
}

#[test]
fn odd_details_are_stored_and_neither_fail_the_batch_nor_break_the_sums() {
    let (_d, store) = tmp_store();
    let at = Timestamp(T0);
    let ev = |kind, details: Value| NewEvent { time: at, sandbox: None, kind, details };
    // A trigger that refused one of these would lose the whole batch with it.
    let odd = vec![
        ev(
            EventKind::Decision,
            json!({ "event": "request", "host": 7, "decision": "allow",
                                        "bytes_up": 1.9, "bytes_down": "12", "rule": ["x"] }),
        ),
        ev(EventKind::Decision, json!({ "event": "request", "bytes_up": -5 })),
        ev(
            EventKind::BlockedPacket,
            json!({ "event": "blocked", "dst": "10.1.1.1",
                                             "count": -3 }),
        ),
        ev(
            EventKind::Decision,
            json!({ "event": "request", "host": "ok.example",
                                        "decision": "allow", "bytes_down": 9 }),
        ),
        ev(EventKind::Decision, json!("not an object")),
        ev(EventKind::Decision, json!({ "event": "hook", "decision": "allow" })),
    ];
    assert_eq!(store.append_events(&odd).unwrap().len(), 6);
    let rows = store.traffic_summary(&TrafficQuery::default()).unwrap();
    let row = |h: &str| rows.iter().find(|r| r.host == h).unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!((row("7").bytes_up, row("7").bytes_down, row("7").allowed), (1, 12, 1));
    assert_eq!((row("").connections, row("").bytes_up), (1, 0), "no host, no negative bytes");
    assert_eq!(row("10.1.1.1").connections, 0, "a negative count is none");
    assert_eq!(row("ok.example").bytes_down, 9);
    assert_eq!(rows.len(), 4, "hooks and non-objects are not traffic: {rows:#?}");
    // And they go again without leaving anything behind.
    store.prune_events(Timestamp(T0 + 1)).unwrap();
    assert!(store.traffic_summary(&TrafficQuery::default()).unwrap().is_empty());
}

#[test]
fn version_4_builds_the_summary_from_the_events_of_an_older_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    assert_eq!(SCHEMA_VERSION, 6);
    Store::create_at_version(&path, 3).unwrap();
    let evs = events_with(500, false);
    let conn = Connection::open(&path).unwrap();
    let mut old = Vec::new();
    for e in &evs {
        conn.execute(
            "INSERT INTO events (time, sandbox, kind, details) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![e.time.0, e.sandbox, e.kind.as_str(), e.details.to_string()],
        )
        .unwrap();
        old.push((conn.last_insert_rowid(), e.clone()));
    }
    drop(conn);

    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let q = TrafficQuery::default();
    assert_same(&store.traffic_summary(&q).unwrap(), &recount(&old, &q), &old, "migrated");
    // Events kept, and new ones join the same sums.
    assert_eq!(store.counts(Timestamp(T0)).unwrap().events, 500);
    old.extend(stored(&store, events(700).split_off(500)));
    let q = TrafficQuery { since: Some(Timestamp(T0 + DAY + 90_000)), ..TrafficQuery::default() };
    assert_same(&store.traffic_summary(&q).unwrap(), &recount(&old, &q), &old, "after new events");
}

/// Version 5 counts a DNS summary's `count` in the summary tables: a file of version 4 (whose
/// events have no count) keeps its sums, events with counts join them, and pruning them all
/// (old and new, through the new view) leaves the tables empty, not negative.
#[test]
fn version_5_counts_dns_summaries_and_keeps_the_sums_of_an_older_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    Store::create_at_version(&path, 4).unwrap();
    let conn = Connection::open(&path).unwrap();
    let mut evs = Vec::new();
    for e in events_with(600, false) {
        conn.execute(
            "INSERT INTO events (time, sandbox, kind, details) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![e.time.0, e.sandbox, e.kind.as_str(), e.details.to_string()],
        )
        .unwrap();
        evs.push((conn.last_insert_rowid(), e));
    }
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let q = TrafficQuery::default();
    assert_same(&store.traffic_summary(&q).unwrap(), &recount(&evs, &q), &evs, "migrated");
    let new = events(1200).split_off(600);
    assert!(new.iter().any(|e| e.details["method"] == "DNS"), "the test has summaries");
    evs.extend(stored(&store, new));
    for q in [
        TrafficQuery::default(),
        TrafficQuery { decision: Some(TrafficDecision::Deny), ..TrafficQuery::default() },
        TrafficQuery { since: Some(Timestamp(T0 + 100_000)), ..TrafficQuery::default() },
    ] {
        assert_same(&store.traffic_summary(&q).unwrap(), &recount(&evs, &q), &evs, "counted");
    }
    store.prune_events(Timestamp(T0 + 4 * DAY)).unwrap();
    assert!(store.traffic_summary(&TrafficQuery::default()).unwrap().is_empty());
    let conn = Connection::open(&path).unwrap();
    for table in ["traffic_days", "traffic_minutes"] {
        let left: i64 =
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0, "{table}");
    }
}

/// An `events_capped` event: `n` refusals (or packets) a sandbox's cap did not store.
fn capped(time: i64, sandbox: &str, kind: EventKind, n: u64) -> NewEvent {
    let mut details = json!({ "event": "events_capped", "sandbox": sandbox, "not_stored": n / 2 + 1,
                              "standing_for": n, "per_minute": 60, "burst": 1000 });
    if kind == EventKind::BlockedPacket {
        details["decision"] = json!("blocked");
    } else if kind == EventKind::Decision {
        details["decision"] = json!("deny");
    }
    NewEvent { time: Timestamp(time), sandbox: Some(sandbox.into()), kind, details }
}

/// Version 6 makes what the cap did not store traffic the log shows: `events_capped` rows of
/// kind `decision` and `blocked_packet` are counted under host `(not stored)` (by what they
/// stood for), found by `--decision`, and pruned cleanly; the rows version 5 stored as kind
/// `sandbox` become `decision` rows and join the sums.
#[test]
fn version_6_counts_what_the_cap_did_not_store_and_moves_the_rows_of_an_older_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    Store::create_at_version(&path, 5).unwrap();
    let conn = Connection::open(&path).unwrap();
    let mut evs = Vec::new();
    let mut old = events(400);
    old.extend((0..30).map(|i| {
        capped(T0 + i * 7_000, ["sg-a", "sg-b"][i as usize % 2], EventKind::Sandbox, 10 + i as u64)
    }));
    for e in old {
        conn.execute(
            "INSERT INTO events (time, sandbox, kind, details) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![e.time.0, e.sandbox, e.kind.as_str(), e.details.to_string()],
        )
        .unwrap();
        let id = conn.last_insert_rowid();
        // What the migration makes of an older `events_capped` row.
        let e = if e.details["event"] == "events_capped" {
            capped(
                e.time.0,
                e.sandbox.as_deref().unwrap(),
                EventKind::Decision,
                e.details["standing_for"].as_u64().unwrap(),
            )
        } else {
            e
        };
        evs.push((id, e));
    }
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), 6);
    let q = TrafficQuery::default();
    assert_same(&store.traffic_summary(&q).unwrap(), &recount(&evs, &q), &evs, "migrated");
    let rows = store.traffic_summary(&q).unwrap();
    let not_stored = rows.iter().find(|r| r.host == NOT_STORED).expect("a (not stored) row");
    assert_eq!((not_stored.connections, not_stored.allowed), ((10..40).sum(), 0));
    // New ones of both walls join the sums.
    let mut new = events(800).split_off(400);
    new.extend((0..40).map(|i| {
        let kind = if i % 2 == 0 { EventKind::Decision } else { EventKind::BlockedPacket };
        capped(T0 + 3_000 + i * 61_000, "sg-a", kind, 3 + i as u64)
    }));
    evs.extend(stored(&store, new));
    for q in [
        TrafficQuery::default(),
        TrafficQuery { decision: Some(TrafficDecision::Deny), ..TrafficQuery::default() },
        TrafficQuery { decision: Some(TrafficDecision::Blocked), ..TrafficQuery::default() },
        TrafficQuery { sandbox: Some("sg-b".into()), ..TrafficQuery::default() },
        TrafficQuery { since: Some(Timestamp(T0 + 100_000)), ..TrafficQuery::default() },
    ] {
        assert_same(
            &store.traffic_summary(&q).unwrap(),
            &recount(&evs, &q),
            &evs,
            &format!("{q:?}"),
        );
    }
    // `--decision` finds them in the log's paged read (the view says their decision).
    for (decision, want) in [(TrafficDecision::Deny, 30 + 20), (TrafficDecision::Blocked, 20)] {
        let filter = TrafficFilter { decision: Some(decision), ..TrafficFilter::default() };
        let lines = store
            .traffic_lines(&filter, None, 100_000, |e| {
                (e.event.details["event"] == "events_capped").then(|| sandgate_store::TrafficLine {
                    time: e.event.time.as_millis(),
                    sandbox: e.event.sandbox.clone().unwrap_or_default(),
                    decision,
                    method: "*".into(),
                    host: NOT_STORED.into(),
                    port: None,
                    path: None,
                    command: None,
                    process: None,
                    rule: String::new(),
                    bytes_up: 0,
                    bytes_down: 0,
                    ms: 0.0,
                    count: 1,
                })
            })
            .unwrap();
        assert_eq!(lines.len(), want, "{decision:?}");
    }
    store.prune_events(Timestamp(T0 + 4 * DAY)).unwrap();
    assert!(store.traffic_summary(&TrafficQuery::default()).unwrap().is_empty());
    let conn = Connection::open(&path).unwrap();
    for table in ["traffic_days", "traffic_minutes"] {
        let left: i64 =
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0, "{table}");
    }
}
