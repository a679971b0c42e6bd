//! The schema and its migrations.
//!
//! Each entry of [`MIGRATIONS`] takes the file from version `i` to `i + 1` and runs in one
//! `BEGIN IMMEDIATE` transaction together with the `PRAGMA user_version` bump, so a crash during
//! a migration leaves the previous version intact and the next open simply runs it again.
//! Migrations are append-only: never edit a released step, add a new one.

use rusqlite::Connection;

use crate::StoreError;

/// Times are integer milliseconds since the epoch; enums are CHECK-constrained text so a hand
/// edit cannot smuggle in a value the code does not know.
const V1: &str = r#"
CREATE TABLE sandboxes (
    id          TEXT PRIMARY KEY NOT NULL,
    tier        TEXT NOT NULL,
    command     TEXT NOT NULL CHECK (json_valid(command)),
    cwd         TEXT NOT NULL,
    project     TEXT,
    uid         INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    started     INTEGER NOT NULL,
    ended       INTEGER,
    exit_status INTEGER,
    state       TEXT NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'exited', 'lost'))
) STRICT;
CREATE INDEX sandboxes_running ON sandboxes (pid) WHERE state = 'running';

CREATE TABLE grants (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    pattern     TEXT NOT NULL CHECK (length(pattern) > 0),
    port        INTEGER CHECK (port BETWEEN 1 AND 65535),
    effect      TEXT NOT NULL CHECK (effect IN ('allow', 'deny')),
    scope       TEXT NOT NULL CHECK (scope IN ('once', 'session', 'until', 'always')),
    target      TEXT NOT NULL CHECK (target IN ('sandbox', 'project', 'global')),
    sandbox_id  TEXT REFERENCES sandboxes (id) ON DELETE CASCADE,
    project     TEXT,
    approved_by TEXT NOT NULL,
    channel     TEXT NOT NULL,
    created     INTEGER NOT NULL,
    expires     INTEGER,
    used        INTEGER,
    revoked     INTEGER,
    CHECK ((target = 'sandbox') = (sandbox_id IS NOT NULL)),
    CHECK ((target = 'project') = (project IS NOT NULL)),
    CHECK ((scope = 'until') = (expires IS NOT NULL)),
    CHECK (scope <> 'session' OR target = 'sandbox'),
    CHECK (used IS NULL OR scope = 'once')
) STRICT;
-- The hot query: the live grants of one sandbox, one project, and the global ones.
CREATE INDEX grants_live_sandbox ON grants (sandbox_id)
    WHERE revoked IS NULL AND used IS NULL AND target = 'sandbox';
CREATE INDEX grants_live_project ON grants (project)
    WHERE revoked IS NULL AND used IS NULL AND target = 'project';
CREATE INDEX grants_live_global ON grants (target)
    WHERE revoked IS NULL AND used IS NULL AND target = 'global';

CREATE TABLE meta (
    key     TEXT PRIMARY KEY NOT NULL,
    value   TEXT NOT NULL,
    updated INTEGER NOT NULL
) STRICT;
"#;

/// Events came second: history is a feature, the grants are the core.
const V2: &str = r#"
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    time    INTEGER NOT NULL,
    sandbox TEXT,
    kind    TEXT NOT NULL CHECK (kind IN ('request', 'decision', 'blocked_packet', 'approval')),
    details TEXT NOT NULL CHECK (json_valid(details))
) STRICT;
CREATE INDEX events_time ON events (time);
CREATE INDEX events_sandbox_time ON events (sandbox, time);
"#;

/// Sandboxes starting and ending get a kind of their own (they were stored as `request`, a kind
/// that names what reaches the proxy). SQLite cannot change a CHECK in place: the table is rebuilt
/// under the same name, ids kept, and the old lifecycle rows are moved to the new kind.
const V3: &str = r#"
CREATE TABLE events_v3 (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    time    INTEGER NOT NULL,
    sandbox TEXT,
    kind    TEXT NOT NULL
            CHECK (kind IN ('request', 'decision', 'blocked_packet', 'approval', 'sandbox')),
    details TEXT NOT NULL CHECK (json_valid(details))
) STRICT;
INSERT INTO events_v3 (id, time, sandbox, kind, details)
    SELECT id, time, sandbox,
           CASE WHEN kind = 'request'
                 AND json_extract(details, '$.event') IN ('sandbox_started', 'sandbox_ended')
                THEN 'sandbox' ELSE kind END,
           details
    FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE INDEX events_time ON events (time);
CREATE INDEX events_sandbox_time ON events (sandbox, time);
"#;

/// The traffic log's summary (`sandgate log --summary`) read every event's JSON: ~2 s for a
/// million events, O(events). Now two aggregates answer it, kept by triggers: traffic per UTC day
/// and per minute, each row one (bucket, host, sandbox, decision).
///
/// Why aggregates rather than real columns with a covering index: a covering index still makes
/// the summary read every event in range (~0.4 s per million here, growing with the retention).
/// The day table has at most hosts × days rows (a 30-day retention and 2,000 hosts: 60,000),
/// whatever the number of events. `--since` stays exact: whole days from the day table, whole
/// minutes of the partial day from the minute table, and the raw events of the partial minute
/// (see `traffic_summary`); each table's key starts with its bucket, so those are range reads,
/// and new events land at the right edge of both B-trees (cheap inserts). Why triggers rather
/// than the writer: every way a row enters or leaves `events` (the batched writer, retention
/// pruning, a migration, a hand edit) keeps the aggregates exact, and the JSON stays the one
/// source of truth. Insert cost: two upserts per traffic event (bench/log.sh measures the writer
/// before and after).
///
/// Numbers and names are CAST: the columns are STRICT, and a trigger that failed on an odd value
/// would lose the whole batch of events with it.
///
/// `traffic_events` is the one place that says how an event maps to the log's columns; the
/// triggers and the summary's partial-minute tail both read it. Pruning removes the oldest events
/// first, so a bucket's `last_seen` and `rule` (its newest event's) stay true; `events` counts the
/// rows folded in, and a bucket goes when it reaches zero.
const V4: &str = r#"
CREATE VIEW traffic_events AS
SELECT id, time, coalesce(sandbox, '') AS sandbox,
       CAST(coalesce(json_extract(details, CASE kind WHEN 'blocked_packet' THEN '$.dst'
                                                    ELSE '$.host' END), '') AS TEXT) AS host,
       CASE WHEN kind = 'blocked_packet' THEN 'blocked'
            WHEN json_extract(details, '$.decision') = 'allow' THEN 'allow'
            ELSE 'deny' END AS decision,
       CASE kind WHEN 'blocked_packet'
                 THEN max(CAST(coalesce(json_extract(details, '$.count'), 1) AS INTEGER), 0)
                 ELSE 1 END AS connections,
       max(CAST(coalesce(json_extract(details, '$.bytes_up'), 0) AS INTEGER), 0) AS bytes_up,
       max(CAST(coalesce(json_extract(details, '$.bytes_down'), 0) AS INTEGER), 0) AS bytes_down,
       CASE kind WHEN 'blocked_packet' THEN 'firewall: direct connection'
                 ELSE CAST(coalesce(json_extract(details, '$.rule'), '') AS TEXT) END AS rule
FROM events
WHERE (kind = 'decision' AND json_extract(details, '$.event') = 'request')
   OR (kind = 'blocked_packet' AND json_extract(details, '$.event') = 'blocked');

CREATE TABLE traffic_days (
    day         INTEGER NOT NULL,
    host        TEXT NOT NULL,
    sandbox     TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'blocked')),
    connections INTEGER NOT NULL,
    events      INTEGER NOT NULL,
    bytes_up    INTEGER NOT NULL,
    bytes_down  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    rule        TEXT NOT NULL,
    PRIMARY KEY (day, host, sandbox, decision)
) STRICT, WITHOUT ROWID;


CREATE TABLE traffic_minutes (
    minute      INTEGER NOT NULL,
    host        TEXT NOT NULL,
    sandbox     TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'blocked')),
    connections INTEGER NOT NULL,
    events      INTEGER NOT NULL,
    bytes_up    INTEGER NOT NULL,
    bytes_down  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    rule        TEXT NOT NULL,
    PRIMARY KEY (minute, host, sandbox, decision)
) STRICT, WITHOUT ROWID;

INSERT INTO traffic_minutes
    SELECT time / 60000, host, sandbox, decision, sum(connections), count(*), sum(bytes_up),
           sum(bytes_down), max(time), rule
    FROM traffic_events GROUP BY time / 60000, host, sandbox, decision;

-- Days from minutes: the events' JSON is read once (a million events: ~8 s of CPU, not ~12).
INSERT INTO traffic_days
    SELECT minute / 1440, host, sandbox, decision, sum(connections), sum(events), sum(bytes_up),
           sum(bytes_down), max(last_seen), rule
    FROM traffic_minutes GROUP BY minute / 1440, host, sandbox, decision;

CREATE TRIGGER traffic_insert AFTER INSERT ON events
WHEN NEW.kind IN ('decision', 'blocked_packet')
BEGIN
    INSERT INTO traffic_days
        SELECT time / 86400000, host, sandbox, decision, connections, 1, bytes_up, bytes_down, time,
               rule
        FROM traffic_events WHERE id = NEW.id
    ON CONFLICT (day, host, sandbox, decision) DO UPDATE SET
        connections = connections + excluded.connections,
        events = events + 1,
        bytes_up = bytes_up + excluded.bytes_up,
        bytes_down = bytes_down + excluded.bytes_down,
        rule = CASE WHEN excluded.last_seen >= last_seen THEN excluded.rule ELSE rule END,
        last_seen = max(last_seen, excluded.last_seen);
    INSERT INTO traffic_minutes
        SELECT time / 60000, host, sandbox, decision, connections, 1, bytes_up, bytes_down, time,
               rule
        FROM traffic_events WHERE id = NEW.id
    ON CONFLICT (minute, host, sandbox, decision) DO UPDATE SET
        connections = connections + excluded.connections,
        events = events + 1,
        bytes_up = bytes_up + excluded.bytes_up,
        bytes_down = bytes_down + excluded.bytes_down,
        rule = CASE WHEN excluded.last_seen >= last_seen THEN excluded.rule ELSE rule END,
        last_seen = max(last_seen, excluded.last_seen);
END;

CREATE TRIGGER traffic_delete BEFORE DELETE ON events
WHEN OLD.kind IN ('decision', 'blocked_packet')
BEGIN
    UPDATE traffic_days SET
        connections = traffic_days.connections - e.connections,
        events = traffic_days.events - 1,
        bytes_up = traffic_days.bytes_up - e.bytes_up,
        bytes_down = traffic_days.bytes_down - e.bytes_down
    FROM (SELECT * FROM traffic_events WHERE id = OLD.id) AS e
    WHERE traffic_days.day = e.time / 86400000 AND traffic_days.host = e.host
      AND traffic_days.sandbox = e.sandbox AND traffic_days.decision = e.decision;
    DELETE FROM traffic_days WHERE events <= 0 AND (day, host, sandbox, decision) IN
        (SELECT time / 86400000, host, sandbox, decision FROM traffic_events WHERE id = OLD.id);
    UPDATE traffic_minutes SET
        connections = traffic_minutes.connections - e.connections,
        events = traffic_minutes.events - 1,
        bytes_up = traffic_minutes.bytes_up - e.bytes_up,
        bytes_down = traffic_minutes.bytes_down - e.bytes_down
    FROM (SELECT * FROM traffic_events WHERE id = OLD.id) AS e
    WHERE traffic_minutes.minute = e.time / 60000 AND traffic_minutes.host = e.host
      AND traffic_minutes.sandbox = e.sandbox AND traffic_minutes.decision = e.decision;
    DELETE FROM traffic_minutes WHERE events <= 0 AND (minute, host, sandbox, decision) IN
        (SELECT time / 60000, host, sandbox, decision FROM traffic_events WHERE id = OLD.id);
END;
"#;

/// A decision event may stand for several requests: the DNS stub's summary of the names it
/// refused under one domain in a minute carries `count`. The view counts it (as it counts a
/// blocked-packet event's packets), so the summary tables count refusals, not rows. Events
/// stored before have no `count` and still count one, as the tables were built: nothing to
/// rebuild, and the triggers (which read the view) stay as they are.
const V5: &str = r#"
DROP VIEW traffic_events;
CREATE VIEW traffic_events AS
SELECT id, time, coalesce(sandbox, '') AS sandbox,
       CAST(coalesce(json_extract(details, CASE kind WHEN 'blocked_packet' THEN '$.dst'
                                                    ELSE '$.host' END), '') AS TEXT) AS host,
       CASE WHEN kind = 'blocked_packet' THEN 'blocked'
            WHEN json_extract(details, '$.decision') = 'allow' THEN 'allow'
            ELSE 'deny' END AS decision,
       max(CAST(coalesce(json_extract(details, '$.count'), 1) AS INTEGER), 0) AS connections,
       max(CAST(coalesce(json_extract(details, '$.bytes_up'), 0) AS INTEGER), 0) AS bytes_up,
       max(CAST(coalesce(json_extract(details, '$.bytes_down'), 0) AS INTEGER), 0) AS bytes_down,
       CASE kind WHEN 'blocked_packet' THEN 'firewall: direct connection'
                 ELSE CAST(coalesce(json_extract(details, '$.rule'), '') AS TEXT) END AS rule
FROM events
WHERE (kind = 'decision' AND json_extract(details, '$.event') = 'request')
   OR (kind = 'blocked_packet' AND json_extract(details, '$.event') = 'blocked');
"#;

/// What a sandbox's cap on stored events did not store is traffic the log must show (a sandbox
/// that floods refusals must not make the log silent about them). The `events_capped` event
/// (kind `decision` for the proxy's and the DNS stub's refusals, `blocked_packet` for the
/// firewall's, with `standing_for` the refusals or packets) joins the view as host
/// `(not stored)`, so the summary tables, `--decision` and `sandgate log` count it.
///
/// Version 5 stored it as kind `sandbox`, one row for every wall (and, then, for allowed traffic
/// too): those rows become kind `decision` (decision `deny`, what most of them were) and are
/// added to the summary tables here, since no trigger fires for an UPDATE.
const V6: &str = r#"
DROP VIEW traffic_events;
CREATE VIEW traffic_events AS
SELECT id, time, coalesce(sandbox, '') AS sandbox,
       CASE WHEN json_extract(details, '$.event') = 'events_capped' THEN '(not stored)'
            ELSE CAST(coalesce(json_extract(details, CASE kind WHEN 'blocked_packet' THEN '$.dst'
                                                              ELSE '$.host' END), '') AS TEXT)
       END AS host,
       CASE WHEN kind = 'blocked_packet' THEN 'blocked'
            WHEN json_extract(details, '$.event') = 'events_capped' THEN 'deny'
            WHEN json_extract(details, '$.decision') = 'allow' THEN 'allow'
            ELSE 'deny' END AS decision,
       max(CAST(coalesce(json_extract(details,
                         CASE WHEN json_extract(details, '$.event') = 'events_capped'
                              THEN '$.standing_for' ELSE '$.count' END), 1) AS INTEGER), 0)
           AS connections,
       max(CAST(coalesce(json_extract(details, '$.bytes_up'), 0) AS INTEGER), 0) AS bytes_up,
       max(CAST(coalesce(json_extract(details, '$.bytes_down'), 0) AS INTEGER), 0) AS bytes_down,
       CASE WHEN json_extract(details, '$.event') = 'events_capped'
                 THEN 'over the sandbox''s cap on stored events'
            WHEN kind = 'blocked_packet' THEN 'firewall: direct connection'
            ELSE CAST(coalesce(json_extract(details, '$.rule'), '') AS TEXT) END AS rule
FROM events
WHERE (kind = 'decision' AND json_extract(details, '$.event') IN ('request', 'events_capped'))
   OR (kind = 'blocked_packet' AND json_extract(details, '$.event') IN ('blocked', 'events_capped'));

UPDATE events SET kind = 'decision', details = json_set(details, '$.decision', 'deny')
WHERE kind = 'sandbox' AND json_extract(details, '$.event') = 'events_capped';

INSERT INTO traffic_minutes
    SELECT time / 60000, host, sandbox, decision, sum(connections), count(*), sum(bytes_up),
           sum(bytes_down), max(time), rule
    FROM traffic_events WHERE id IN (SELECT id FROM events WHERE kind = 'decision'
                                     AND json_extract(details, '$.event') = 'events_capped')
    GROUP BY time / 60000, host, sandbox, decision
ON CONFLICT (minute, host, sandbox, decision) DO UPDATE SET
    connections = connections + excluded.connections,
    events = events + excluded.events,
    bytes_up = bytes_up + excluded.bytes_up,
    bytes_down = bytes_down + excluded.bytes_down,
    rule = CASE WHEN excluded.last_seen >= last_seen THEN excluded.rule ELSE rule END,
    last_seen = max(last_seen, excluded.last_seen);

INSERT INTO traffic_days
    SELECT time / 86400000, host, sandbox, decision, sum(connections), count(*), sum(bytes_up),
           sum(bytes_down), max(time), rule
    FROM traffic_events WHERE id IN (SELECT id FROM events WHERE kind = 'decision'
                                     AND json_extract(details, '$.event') = 'events_capped')
    GROUP BY time / 86400000, host, sandbox, decision
ON CONFLICT (day, host, sandbox, decision) DO UPDATE SET
    connections = connections + excluded.connections,
    events = events + excluded.events,
    bytes_up = bytes_up + excluded.bytes_up,
    bytes_down = bytes_down + excluded.bytes_down,
    rule = CASE WHEN excluded.last_seen >= last_seen THEN excluded.rule ELSE rule END,
    last_seen = max(last_seen, excluded.last_seen);
"#;

/// The migration steps; step `i` takes version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6];

/// The schema version this build writes (the number of migrations).
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Reads `PRAGMA user_version`.
pub(crate) fn version(conn: &Connection) -> Result<u32, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, u32>(0))
        .map_err(crate::error::sql("reading the schema version"))
}

/// Brings the database to [`SCHEMA_VERSION`]; a no-op when it is there already.
pub(crate) fn migrate(conn: &mut Connection) -> Result<u32, StoreError> {
    migrate_to(conn, SCHEMA_VERSION)
}

/// Brings the database to `target` (≤ [`SCHEMA_VERSION`]); exposed to tests to build old files.
pub(crate) fn migrate_to(conn: &mut Connection, target: u32) -> Result<u32, StoreError> {
    let target = target.min(SCHEMA_VERSION);
    let found = version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION });
    }
    for from in found..target {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(crate::error::sql("starting a migration"))?;
        // Someone else may have migrated between our read and our lock.
        let now = version(&tx)?;
        if now > from {
            continue;
        }
        let step = MIGRATIONS[from as usize];
        // Said before, not only after: a step over a large file can take seconds (v4 reads
        // every event once), and a client waiting for the daemon shows the tail of its log.
        tracing::info!(from, to = from + 1, "migrating the store schema");
        tx.execute_batch(step).map_err(|e| step_error(from, e))?;
        tx.pragma_update(None, "user_version", from + 1).map_err(|e| step_error(from, e))?;
        tx.commit().map_err(|e| step_error(from, e))?;
        tracing::info!(from, to = from + 1, "store schema migrated");
    }
    version(conn)
}

/// Environmental failures keep their class (busy, full, ...); anything else is a migration bug.
fn step_error(from: u32, e: rusqlite::Error) -> StoreError {
    match StoreError::sqlite("migrating the schema", e) {
        StoreError::Sqlite { source, .. } => {
            StoreError::Migration { from, to: from + 1, reason: source.to_string() }
        }
        other => other,
    }
}
