//! Behaviour of the store through its public API: files, migrations, sandboxes, grants, events,
//! and the typed errors for a locked and a full database.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use sandgate_store::{
    Effect, EventKind, EventQuery, EventWriter, EventWriterConfig, GrantId, GrantList, GrantScope,
    GrantTarget, NewEvent, NewGrant, NewSandbox, OpenOptions, Registration, SCHEMA_VERSION,
    SandboxState, Store, StoreError, Timestamp,
};
use serde_json::json;

const T0: Timestamp = Timestamp(1_700_000_000_000);

fn tmp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("sandgate/sandgate.db")).unwrap();
    (dir, store)
}

fn sandbox(id: &str, pid: u32) -> NewSandbox {
    NewSandbox {
        id: id.into(),
        tier: "net".into(),
        command: vec!["curl".into(), "https://crates.io".into()],
        cwd: "/home/u/proj".into(),
        project: Some("0123456789abcdef".into()),
        uid: 1000,
        pid,
        started: T0,
    }
}

fn grant(pattern: &str, scope: GrantScope, target: GrantTarget) -> NewGrant {
    NewGrant {
        pattern: pattern.into(),
        port: Some(443),
        effect: Effect::Allow,
        scope,
        target,
        approved_by: "@alice".into(),
        channel: "telegram".into(),
        created: T0,
    }
}

fn event(i: u64, kind: EventKind, sandbox: Option<&str>) -> NewEvent {
    NewEvent {
        time: Timestamp(T0.0 + i as i64),
        sandbox: sandbox.map(Into::into),
        kind,
        details: json!({ "host": format!("h{i}.example"), "port": 443 }),
    }
}

fn schema_of(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT type || ' ' || name || ': ' || ifnull(sql, '') FROM sqlite_master ORDER BY type, name")
        .unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

// ----- files and pragmas -----

#[test]
fn open_creates_private_directory_and_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data/sandgate/sandgate.db");
    let store = Store::open(&path).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(&path), 0o600);
    store.register_sandbox(&sandbox("sb1", 1)).unwrap();
    let wal = path.with_file_name("sandgate.db-wal");
    assert!(wal.exists(), "WAL file expected");
    assert_eq!(mode(&wal), 0o600, "the WAL gets the database's mode");

    let conn = Connection::open(&path).unwrap();
    let jm: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(jm, "wal");
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(store.integrity_check().unwrap().is_empty());
}

#[test]
fn open_tightens_loose_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sandgate");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = sub.join("sandgate.db");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    Store::open(&path).unwrap();
    assert_eq!(std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn foreign_keys_are_enforced() {
    let (_d, store) = tmp_store();
    let err = store
        .add_grant(&grant("a.example", GrantScope::Session, GrantTarget::Sandbox("nope".into())))
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { what: "sandbox", .. }), "{err:?}");
}

// ----- migrations -----

#[test]
fn migrations_from_every_earlier_version_reach_the_fresh_schema() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.db");
    drop(Store::open(&fresh).unwrap());
    let want = schema_of(&fresh);
    assert!(want.iter().any(|s| s.starts_with("table events")), "{want:?}");

    for from in 0..SCHEMA_VERSION {
        let path = dir.path().join(format!("v{from}.db"));
        Store::create_at_version(&path, from).unwrap();
        let conn = Connection::open(&path).unwrap();
        let v: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, from);
        if from >= 1 {
            // Data written by the old version must survive the upgrade.
            conn.execute(
                "INSERT INTO grants (pattern, effect, scope, target, approved_by, channel, created) \
                 VALUES ('old.example', 'allow', 'always', 'global', 'config', 'cli', 1)",
                [],
            )
            .unwrap();
        }
        drop(conn);

        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION, "from v{from}");
        assert_eq!(schema_of(&path), want, "schema after migrating from v{from}");
        let grants = store.list_grants(GrantList::All).unwrap();
        assert_eq!(grants.len(), usize::from(from >= 1), "from v{from}");
        drop(store);
        // Idempotent: opening again changes nothing.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(schema_of(&path), want);
    }
}

#[test]
fn version_3_moves_sandbox_lifecycle_events_to_their_own_kind_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    Store::create_at_version(&path, 2).unwrap();
    let conn = Connection::open(&path).unwrap();
    for (kind, details) in [
        ("request", r#"{"event":"sandbox_started","sandbox":"sg-1"}"#),
        ("decision", r#"{"event":"request","host":"a.example","decision":"allow"}"#),
        ("request", r#"{"event":"sandbox_ended","sandbox":"sg-1","exit_status":0}"#),
        ("request", r#"{"host":"b.example"}"#),
    ] {
        conn.execute(
            "INSERT INTO events (time, sandbox, kind, details) VALUES (1, 'sg-1', ?1, ?2)",
            [kind, details],
        )
        .unwrap();
    }
    drop(conn);

    let store = Store::open(&path).unwrap();
    let q = EventQuery { limit: 10, ..Default::default() };
    let mut events = store.recent_events(&q).unwrap();
    events.sort_by_key(|e| e.id);
    let kinds: Vec<_> = events.iter().map(|e| e.event.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Sandbox, EventKind::Decision, EventKind::Sandbox, EventKind::Request],
        "{events:#?}"
    );
    assert_eq!(events[2].event.details["exit_status"], 0);
    // The new kind is writable; the CHECK still refuses kinds the code does not know.
    store.append_events(&[event(5, EventKind::Sandbox, Some("sg-2"))]).unwrap();
    let conn = Connection::open(&path).unwrap();
    let bad =
        conn.execute("INSERT INTO events (time, kind, details) VALUES (1, 'bogus', '{}')", []);
    assert!(bad.is_err());
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(Store::open(&path).unwrap());
    Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { found: 99, supported: SCHEMA_VERSION }));
    assert!(err.to_string().contains("newer"), "{err}");
    let v: u32 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}

#[test]
fn a_garbage_file_is_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

// ----- sandboxes -----

#[test]
fn sandbox_lifecycle_register_again_finish_reap() {
    let (_d, store) = tmp_store();
    assert_eq!(store.register_sandbox(&sandbox("a", 10)).unwrap(), Registration::New);
    assert_eq!(store.register_sandbox(&sandbox("b", 20)).unwrap(), Registration::New);
    assert_eq!(store.register_sandbox(&sandbox("c", 30)).unwrap(), Registration::New);
    // A launcher re-registering after a daemon restart, with a new pid.
    assert_eq!(store.register_sandbox(&sandbox("a", 11)).unwrap(), Registration::Again);
    let a = store.sandbox("a").unwrap().unwrap();
    assert_eq!((a.sandbox.pid, a.state), (11, SandboxState::Running));
    assert_eq!(a.sandbox.command, vec!["curl", "https://crates.io"]);

    let mut other = sandbox("a", 12);
    other.uid = 0;
    assert!(matches!(store.register_sandbox(&other), Err(StoreError::Invalid { .. })));

    store.finish_sandbox("b", Some(3), Timestamp(T0.0 + 5)).unwrap();
    assert!(matches!(
        store.finish_sandbox("zz", None, T0),
        Err(StoreError::NotFound { what: "sandbox", .. })
    ));
    // The check sees when each sandbox was first registered (a re-register keeps it), so that
    // a process given a dead launcher's pid later can be told apart.
    let lost = store.reap_dead(|pid, started| pid == 11 && started == T0, Timestamp(T0.0 + 9));
    let lost = lost.unwrap();
    assert_eq!(lost, vec!["c".to_string()]);
    let running: Vec<_> =
        store.list_sandboxes(true).unwrap().into_iter().map(|s| s.sandbox.id).collect();
    assert_eq!(running, vec!["a"]);
    let all = store.list_sandboxes(false).unwrap();
    let states: Vec<_> =
        all.iter().map(|s| (s.sandbox.id.as_str(), s.state, s.exit_status, s.ended)).collect();
    assert_eq!(
        states,
        // Newest first.
        vec![
            ("c", SandboxState::Lost, None, Some(Timestamp(T0.0 + 9))),
            ("b", SandboxState::Exited, Some(3), Some(Timestamp(T0.0 + 5))),
            ("a", SandboxState::Running, None, None),
        ]
    );
    // Re-registering a lost sandbox (its launcher was alive after all) revives it.
    assert_eq!(store.register_sandbox(&sandbox("c", 31)).unwrap(), Registration::Again);
    assert_eq!(store.sandbox("c").unwrap().unwrap().state, SandboxState::Running);
}

#[test]
fn bad_sandbox_ids_are_refused() {
    let (_d, store) = tmp_store();
    for id in ["", "a\nb", &"x".repeat(129)] {
        let err = store.register_sandbox(&sandbox(id, 1)).unwrap_err();
        assert!(matches!(err, StoreError::Invalid { what: "sandbox id", .. }), "{id:?}: {err:?}");
    }
}

// ----- grants -----

#[test]
fn invalid_grants_are_refused_with_the_offending_value() {
    let (_d, store) = tmp_store();
    let cases: Vec<(NewGrant, &str)> = vec![
        (grant("", GrantScope::Always, GrantTarget::Global), "grant pattern"),
        (grant("a b.example", GrantScope::Always, GrantTarget::Global), "grant pattern"),
        (grant("a\0.example", GrantScope::Always, GrantTarget::Global), "grant pattern"),
        (grant(&"a".repeat(256), GrantScope::Always, GrantTarget::Global), "grant pattern"),
        (
            NewGrant {
                port: Some(0),
                ..grant("a.example", GrantScope::Always, GrantTarget::Global)
            },
            "grant port",
        ),
        (grant("a.example", GrantScope::Session, GrantTarget::Global), "session grant target"),
        (
            grant("a.example", GrantScope::Session, GrantTarget::Project("p".into())),
            "session grant target",
        ),
        (grant("a.example", GrantScope::Until(T0), GrantTarget::Global), "grant expiry"),
    ];
    for (g, what) in cases {
        match store.add_grant(&g) {
            Err(StoreError::Invalid { what: w, .. }) => assert_eq!(w, what, "{g:?}"),
            other => panic!("{g:?}: expected Invalid({what}), got {other:?}"),
        }
    }
    assert!(store.list_grants(GrantList::All).unwrap().is_empty());
}

#[test]
fn a_sandboxs_grants_end_with_it() {
    let (_d, store) = tmp_store();
    store.register_sandbox(&sandbox("sb1", 1)).unwrap();
    store.register_sandbox(&sandbox("sb2", 2)).unwrap();
    let g1 = store
        .add_grant(&grant("a.example", GrantScope::Session, GrantTarget::Sandbox("sb1".into())))
        .unwrap();
    let g2 = store
        .add_grant(&grant("b.example", GrantScope::Session, GrantTarget::Sandbox("sb2".into())))
        .unwrap();
    let global =
        store.add_grant(&grant("c.example", GrantScope::Always, GrantTarget::Global)).unwrap();
    let live = |s: &Store| -> Vec<GrantId> {
        s.list_grants(GrantList::Current(T0)).unwrap().iter().map(|g| g.id).collect()
    };
    let (g1, g2, global) = (g1.id, g2.id, global.id);
    assert_eq!(live(&store), vec![g1, g2, global]);
    store.finish_sandbox("sb1", Some(0), T0).unwrap();
    assert_eq!(live(&store), vec![g2, global], "an exited sandbox's session grant is over");
    store.mark_lost("sb2", T0).unwrap();
    assert_eq!(live(&store), vec![global], "so is a lost one's");
    assert_eq!(store.list_grants(GrantList::All).unwrap().len(), 3, "history is kept");
    // Decisions still see them: a sandbox marked lost may come back.
    assert_eq!(store.list_grants(GrantList::Live(T0)).unwrap().len(), 3);
}

#[test]
fn active_grants_select_by_target_expiry_use_and_revocation() {
    let (_d, store) = tmp_store();
    store.register_sandbox(&sandbox("sb1", 1)).unwrap();
    store.register_sandbox(&sandbox("sb2", 2)).unwrap();
    let hour = Duration::from_secs(3600);
    let mine = store
        .add_grant(&grant(
            "session.example",
            GrantScope::Session,
            GrantTarget::Sandbox("sb1".into()),
        ))
        .unwrap();
    let theirs = store
        .add_grant(&grant("other.example", GrantScope::Session, GrantTarget::Sandbox("sb2".into())))
        .unwrap();
    let project = store
        .add_grant(&grant(
            "*.proj.example",
            GrantScope::Always,
            GrantTarget::Project("0123456789abcdef".into()),
        ))
        .unwrap();
    let other_project = store
        .add_grant(&grant("x.example", GrantScope::Always, GrantTarget::Project("ffff".into())))
        .unwrap();
    let until = store
        .add_grant(&grant("brief.example", GrantScope::Until(T0.plus(hour)), GrantTarget::Global))
        .unwrap();
    let mut deny = grant("evil.example", GrantScope::Always, GrantTarget::Global);
    deny.effect = Effect::Deny;
    deny.port = None;
    let deny = store.add_grant(&deny).unwrap();
    let once = store
        .add_grant(&grant("once.example", GrantScope::Once, GrantTarget::Sandbox("sb1".into())))
        .unwrap();

    let ids = |gs: Vec<sandgate_store::Grant>| gs.into_iter().map(|g| g.id).collect::<Vec<_>>();
    let now = T0.plus(Duration::from_secs(1));
    assert_eq!(
        ids(store.active_grants(Some("sb1"), Some("0123456789abcdef"), now).unwrap()),
        vec![mine.id, project.id, until.id, deny.id, once.id]
    );
    assert_eq!(
        ids(store.active_grants(Some("sb2"), Some("ffff"), now).unwrap()),
        vec![theirs.id, other_project.id, until.id, deny.id]
    );
    assert_eq!(ids(store.active_grants(None, None, now).unwrap()), vec![until.id, deny.id]);
    // Expired at exactly `expires`.
    assert_eq!(ids(store.active_grants(None, None, T0.plus(hour)).unwrap()), vec![deny.id]);

    // The once grant is consumed once.
    assert!(store.take_once(once.id, now).unwrap());
    assert!(!store.take_once(once.id, now).unwrap());
    assert!(!store.take_once(mine.id, now).unwrap(), "only once grants can be taken");
    let after = ids(store.active_grants(Some("sb1"), None, now).unwrap());
    assert_eq!(after, vec![mine.id, until.id, deny.id]);
    assert_eq!(store.grant(once.id).unwrap().unwrap().used, Some(now));

    // Revocation.
    let revoked = store.revoke_grant(deny.id, now).unwrap();
    assert_eq!(revoked.revoked, Some(now));
    assert!(matches!(store.revoke_grant(deny.id, now), Err(StoreError::NotFound { .. })));
    assert!(matches!(store.revoke_grant(GrantId(999), now), Err(StoreError::NotFound { .. })));
    assert_eq!(ids(store.active_grants(None, None, now).unwrap()), vec![until.id]);

    // Listing: live vs all.
    let live = ids(store.list_grants(GrantList::Live(now)).unwrap());
    assert_eq!(live, vec![mine.id, theirs.id, project.id, other_project.id, until.id]);
    assert_eq!(store.list_grants(GrantList::All).unwrap().len(), 7);
    let stored = store.grant(project.id).unwrap().unwrap();
    assert_eq!(stored.grant, project.grant, "round trip of every field");
    let c = store.counts(now).unwrap();
    assert_eq!((c.sandboxes_running, c.grants_live, c.events), (2, 5, 0));
    // Issue 17: a grant of a sandbox that ended is not counted live (`rules` does not list it).
    store.finish_sandbox("sb2", Some(0), now).unwrap();
    let current = ids(store.list_grants(GrantList::Current(now)).unwrap());
    let c = store.counts(now).unwrap();
    assert_eq!((c.sandboxes_running, c.grants_live), (1, current.len() as u64), "{current:?}");
    assert_eq!(c.grants_live, 4);
}

#[test]
fn a_once_grant_is_taken_by_exactly_one_of_racing_requests() {
    let (_d, store) = tmp_store();
    store.register_sandbox(&sandbox("sb", 1)).unwrap();
    for round in 0..20 {
        let g = store
            .add_grant(&grant(
                &format!("r{round}.example"),
                GrantScope::Once,
                GrantTarget::Sandbox("sb".into()),
            ))
            .unwrap();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (store, barrier) = (store.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    store.take_once(g.id, T0).unwrap()
                })
            })
            .collect();
        let winners =
            handles.into_iter().filter(|_| true).map(|h| h.join().unwrap()).filter(|w| *w).count();
        assert_eq!(winners, 1, "round {round}");
    }
}

// ----- events -----

#[test]
fn events_append_query_filter_and_prune() {
    let (_d, store) = tmp_store();
    let evs: Vec<_> = (0..10)
        .map(|i| {
            let kind = if i % 2 == 0 { EventKind::Decision } else { EventKind::BlockedPacket };
            event(i, kind, Some(if i < 5 { "a" } else { "b" }))
        })
        .collect();
    let ids = store.append_events(&evs).unwrap();
    assert_eq!(ids.len(), 10);
    let all = store.recent_events(&EventQuery::default()).unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(all[0].event, evs[9], "newest first, details round-trip");
    let q = EventQuery {
        sandbox: Some("a".into()),
        kind: Some(EventKind::Decision),
        ..Default::default()
    };
    let got: Vec<_> = store.recent_events(&q).unwrap().into_iter().map(|e| e.event.time).collect();
    assert_eq!(got, vec![Timestamp(T0.0 + 4), Timestamp(T0.0 + 2), T0]);
    let q = EventQuery { since: Some(Timestamp(T0.0 + 7)), limit: 2, ..Default::default() };
    assert_eq!(store.recent_events(&q).unwrap().len(), 2);

    assert_eq!(store.prune_events(Timestamp(T0.0 + 6)).unwrap(), 6);
    assert_eq!(store.recent_events(&EventQuery::default()).unwrap().len(), 4);
    assert_eq!(store.prune_events(Timestamp(T0.0 + 6)).unwrap(), 0);
}

#[test]
fn prune_handles_more_than_one_chunk() {
    let (_d, store) = tmp_store();
    let evs: Vec<_> = (0..12_000).map(|i| event(i, EventKind::Request, None)).collect();
    store.append_events(&evs).unwrap();
    assert_eq!(store.prune_events(Timestamp(T0.0 + 11_000)).unwrap(), 11_000);
    assert_eq!(store.counts(T0).unwrap().events, 1000);
}

#[tokio::test]
async fn event_writer_batches_publishes_and_flushes() {
    let (_d, store) = tmp_store();
    let writer = EventWriter::start(&store, EventWriterConfig::default()).unwrap();
    let mut sub = writer.subscribe();
    let sender = writer.sender();
    for i in 0..1000 {
        assert!(sender.send(event(i, EventKind::Decision, Some("sb"))));
    }
    let first = tokio::time::timeout(Duration::from_secs(10), sub.recv()).await.unwrap().unwrap();
    assert_eq!(first.event, event(0, EventKind::Decision, Some("sb")));
    writer.flush();
    let stats = writer.stats();
    assert_eq!((stats.written, stats.dropped, stats.failed), (1000, 0, 0));
    assert!(stats.batches >= 2, "batched in at most max_batch per transaction: {stats:?}");
    assert_eq!(store.counts(T0).unwrap().events, 1000);
    // A sender (what the daemon holds) flushes too: what it queued before is then committed.
    for i in 1000..1600 {
        assert!(sender.send(event(i, EventKind::Decision, Some("sb"))));
    }
    assert!(sender.flush(Duration::from_secs(10)));
    assert_eq!(store.counts(T0).unwrap().events, 1600);
    let stats = writer.shutdown();
    assert_eq!(stats.written, 1600);
    assert!(!sender.send(event(1, EventKind::Decision, None)), "a stopped writer drops");
    assert!(!sender.flush(Duration::from_secs(1)), "and has nothing to flush into");
}

#[test]
fn event_writer_drops_and_counts_instead_of_blocking() {
    let (_d, store) = tmp_store();
    let cfg = EventWriterConfig { capacity: 16, max_batch: 8, subscriber_capacity: 4 };
    let writer = EventWriter::start(&store, cfg).unwrap();
    // Hold the write lock so the writer cannot make progress.
    let blocker = Connection::open(store.path()).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let sender = writer.sender();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut accepted = 0u64;
    for i in 0..20_000 {
        let t = Instant::now();
        accepted += u64::from(sender.send(event(i, EventKind::Request, None)));
        slowest = slowest.max(t.elapsed());
    }
    let total = started.elapsed();
    blocker.execute_batch("COMMIT").unwrap();
    writer.flush();
    let stats = writer.stats();
    println!("20000 sends while locked: total {total:?}, slowest {slowest:?}, stats {stats:?}");
    // Blocking would mean waiting out the lock (2 s busy timeout); allow for a descheduled thread.
    assert!(slowest < Duration::from_millis(1500), "a send blocked for {slowest:?}");
    assert!(stats.dropped > 0);
    assert_eq!(stats.dropped + accepted, 20_000);
    assert_eq!(stats.written + stats.failed, accepted);
}

// ----- typed errors: locked and full -----

#[test]
fn a_locked_database_gives_busy_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = OpenOptions::new().busy_timeout(Duration::from_millis(50)).open(&path).unwrap();
    store.register_sandbox(&sandbox("sb", 1)).unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE; INSERT INTO meta VALUES ('k', 'v', 0);").unwrap();

    let err =
        store.add_grant(&grant("a.example", GrantScope::Always, GrantTarget::Global)).unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert!(err.to_string().contains("busy"), "{err}");
    let err = store.register_sandbox(&sandbox("sb2", 2)).unwrap_err();
    assert!(matches!(err, StoreError::Busy { op: "registering a sandbox", .. }), "{err:?}");
    let err = store.append_events(&[event(1, EventKind::Request, None)]).unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    // WAL: readers are not blocked by the writer.
    assert_eq!(store.list_sandboxes(false).unwrap().len(), 1);

    other.execute_batch("COMMIT").unwrap();
    store.add_grant(&grant("a.example", GrantScope::Always, GrantTarget::Global)).unwrap();
}

#[test]
fn a_full_database_gives_full_and_recovers_after_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(Store::open(&path).unwrap());
    let pages: u32 =
        Connection::open(&path).unwrap().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let store = OpenOptions::new().max_pages(pages + 8).open(&path).unwrap();
    let big = |i: u64| NewEvent {
        details: json!({ "blob": "x".repeat(3000), "i": i }),
        ..event(i, EventKind::Request, None)
    };
    let mut err = None;
    for i in 0..1000 {
        if let Err(e) = store.append_events(&[big(i)]) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("the size cap was never hit");
    assert!(matches!(err, StoreError::Full { .. }), "{err:?}");
    assert!(err.to_string().contains("full"), "{err}");
    // Grants also report Full instead of panicking, and the store stays readable.
    let mut filled = None;
    for i in 0..1000 {
        let g = NewGrant {
            approved_by: "y".repeat(2000),
            ..grant(&format!("g{i}.example"), GrantScope::Always, GrantTarget::Global)
        };
        if let Err(e) = store.add_grant(&g) {
            filled = Some(e);
            break;
        }
    }
    assert!(matches!(filled, Some(StoreError::Full { .. })), "{filled:?}");
    assert!(store.counts(T0).unwrap().events > 0);

    // The event writer counts the failure and keeps going.
    let writer = EventWriter::start(&store, EventWriterConfig::default()).unwrap();
    writer.send(big(5000));
    writer.flush();
    let stats = writer.stats();
    assert_eq!((stats.written, stats.failed), (0, 1), "{stats:?}");
    assert!(stats.last_error.unwrap().contains("full"));

    // Pruning frees pages for new writes.
    store.prune_events(Timestamp(i64::MAX)).unwrap();
    writer.send(big(5001));
    writer.flush();
    assert_eq!(writer.stats().written, 1);
    assert!(store.integrity_check().unwrap().is_empty());
}

// ----- meta -----

#[test]
fn meta_values_set_get_delete() {
    let (_d, store) = tmp_store();
    assert_eq!(store.meta_get("pf.token").unwrap(), None);
    store.meta_set("pf.token", "123", T0).unwrap();
    store.meta_set("pf.token", "456", T0).unwrap();
    assert_eq!(store.meta_get("pf.token").unwrap().as_deref(), Some("456"));
    assert!(store.meta_delete("pf.token").unwrap());
    assert!(!store.meta_delete("pf.token").unwrap());
}
