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

/// The migration steps; step `i` takes version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2, V3];

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
